"""The parts of ``make gpu-check`` that need no GPU: parsing, comparing, judging, the summary.

Pure functions over text and numbers, imported by ``benchmarks/gpu_check.py`` (which runs
the check on a machine with an NVIDIA GPU) and by ``tests/test_gpu_check.py`` (which runs
them here over captured ``nvidia-smi`` output). Standard library only: the check imports
this module before anything is installed.

Units: nvidia-smi's ``memory.used`` is MiB, sysmetrics' ``memoryAllocatedBytes`` bytes;
times are seconds since the Unix epoch (``time.time()``, the run file's ``time``).
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Optional, Protocol, Union

# What the check asks nvidia-smi, in this order.
QUERY_FIELDS = (
    "utilization.gpu",
    "memory.used",
    "temperature.gpu",
    "power.draw",
    "clocks.sm",
    "clocks.mem",
)
SMI_COMMAND = [
    "nvidia-smi",
    "--query-gpu=" + ",".join(QUERY_FIELDS),
    "--format=csv,noheader,nounits",
]

# nvidia-smi field -> (sysmetrics key suffix of gpu.{i}.*, factor from nvidia-smi's unit)
SMI_TO_KEY: dict[str, tuple[str, float]] = {
    "utilization.gpu": ("gpu", 1.0),  # %
    "memory.used": ("memoryAllocatedBytes", 2.0**20),  # MiB -> bytes
    "temperature.gpu": ("temp", 1.0),  # °C
    "power.draw": ("powerWatts", 1.0),  # W
    "clocks.sm": ("smClock", 1.0),  # MHz
    "clocks.mem": ("memoryClock", 1.0),  # MHz
}

# What nvidia-smi prints for a value it does not have (documented in nvidia-smi(1); the
# unbracketed forms are older drivers').
NOT_AVAILABLE = frozenset(
    {
        "[N/A]",
        "N/A",
        "[Not Supported]",
        "Not Supported",
        "[Unknown Error]",
        "[Insufficient Permissions]",
        "[GPU is lost]",
        "[Requested functionality has been deprecated]",
    }
)

# Bounds on what is read from nvidia-smi: the check's input is outside input.
MAX_TEXT = 1 << 20  # characters of one output
MAX_GPUS = 64  # lines (one per GPU)
MAX_FIELD = 256  # characters of one field


class SmiParseError(ValueError):
    """nvidia-smi's output is not what the query asks for (the one error the parser raises)."""


Value = Union[float, str, None]


def parse_query(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[dict[str, Value]]:
    """One dict per GPU line of ``--query-gpu=FIELDS --format=csv,noheader,nounits`` output.

    A value is a float where the field reads as a finite number, ``None`` where nvidia-smi
    says it has none (:data:`NOT_AVAILABLE`), else the text (a name, a UUID, a P-state).
    Blank lines are skipped.

    Raises:
        SmiParseError: a line with another number of fields, more than :data:`MAX_GPUS`
            lines, more than :data:`MAX_TEXT` characters, or a field over
            :data:`MAX_FIELD` characters or empty (nvidia-smi's own errors, such as
            "No devices were found", are one field).

    """
    if not fields:
        raise SmiParseError("no fields asked for")
    if len(text) > MAX_TEXT:
        raise SmiParseError(f"output of {len(text)} characters, over {MAX_TEXT}")
    rows: list[dict[str, Value]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if len(rows) >= MAX_GPUS:
            raise SmiParseError(f"more than {MAX_GPUS} lines")
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            raise SmiParseError(
                f"{len(parts)} fields where {len(fields)} were asked for: {line[:80]!r}"
            )
        row: dict[str, Value] = {}
        for name, part in zip(fields, parts):
            if not part or len(part) > MAX_FIELD:
                raise SmiParseError(f"{name}: a field of {len(part)} characters")
            row[name] = _value(part)
        rows.append(row)
    return rows


def _value(part: str) -> Value:
    if part in NOT_AVAILABLE:
        return None
    try:
        number = float(part)
    except ValueError:
        return part
    return number if math.isfinite(number) else part


def readings(text: str) -> list[dict[str, Optional[float]]]:
    """Parse the check's own query (:data:`QUERY_FIELDS`): numbers or ``None`` per GPU.

    Raises:
        SmiParseError: as :func:`parse_query`, or a field of the query that is neither a
            number nor a not-available marker.

    """
    out: list[dict[str, Optional[float]]] = []
    for row in parse_query(text, QUERY_FIELDS):
        numbers: dict[str, Optional[float]] = {}
        for name, value in row.items():
            if isinstance(value, str):
                raise SmiParseError(f"{name}: {value[:40]!r} is not a number")
            numbers[name] = value
        out.append(numbers)
    return out


# -- comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """Agreement of two readings: within ``absolute`` or ``relative`` x the reference."""

    absolute: float = 0.0
    relative: float = 0.0

    def agrees(self, reference: float, value: float) -> bool:
        """Whether ``value`` is within tolerance of ``reference`` (nvidia-smi's)."""
        return abs(value - reference) <= max(self.absolute, self.relative * abs(reference))


# The tolerances; temperature's (1 °C, both integers from one sensor) is ours.
# memory.used is whole MiB: 1 MiB absolute covers its rounding on a nearly empty GPU.
TOLERANCES: dict[str, Tolerance] = {
    "utilization.gpu": Tolerance(absolute=10.0),  # points, on a steady load
    "memory.used": Tolerance(absolute=1.0, relative=0.01),  # MiB, 1 %
    "temperature.gpu": Tolerance(absolute=1.0),  # °C
    "power.draw": Tolerance(relative=0.10),  # 10 %
    "clocks.sm": Tolerance(),  # equal
    "clocks.mem": Tolerance(),  # equal
}


class RunLike(Protocol):
    """What the comparison reads of a run file: ``sysmetrics.findings.Run`` has these."""

    time: Sequence[Optional[float]]
    step: Sequence[Optional[int]]
    columns: Mapping[str, Sequence[float]]  # NaN where a sample lacks the key


@dataclass(frozen=True)
class SmiReading:
    """One run of nvidia-smi: when (s since the epoch, mid-call) and its rows per GPU."""

    time: float
    gpus: list[dict[str, Optional[float]]]


@dataclass
class Pair:
    """One nvidia-smi value beside the sysmetrics sample nearest in time (nvidia-smi's unit).

    ``low``/``high`` span the samples just before and after the reading (the value may have
    moved between them); ``ok`` says whether nvidia-smi's value agrees with the nearest
    sample, or lies within that span, within the field's tolerance.
    """

    field: str
    gpu: int
    time: float
    smi: float
    sysmetrics: Optional[float]  # None: no sample with the key near the reading
    dt: Optional[float]  # s, sample time - reading time
    low: Optional[float] = None
    high: Optional[float] = None
    ok: bool = False
    tolerance: Optional[Tolerance] = None  # the one applied, where wider than the field's


def steady_window(run: RunLike, settle: float = 5.0, tail: float = 2.0) -> tuple[float, float]:
    """(start, end) s of training's steady part; (0, 0) when no sample has a step.

    From ``settle`` s after the first sample with a step to ``tail`` s before the last one.
    """
    stepped = [t for t, s in zip(run.time, run.step) if t is not None and s is not None]
    if not stepped:
        return (0.0, 0.0)
    return (stepped[0] + settle, stepped[-1] - tail)


def _column(run: RunLike, key: str) -> tuple[list[float], list[float]]:
    """Times and values of the samples that have ``key``, in time order."""
    col = run.columns.get(key)
    if col is None:
        return [], []
    pts = sorted(
        (t, v) for t, v in zip(run.time, col) if t is not None and v == v and math.isfinite(t)
    )
    return [t for t, _ in pts], [v for _, v in pts]


def compare(
    smi: Iterable[SmiReading],
    run: RunLike,
    window: tuple[float, float],
    max_gap: float = 2.0,
    tolerances: Mapping[str, Tolerance] = TOLERANCES,
    varying: Sequence[str] = (),
) -> list[Pair]:
    """Each nvidia-smi value read inside ``window`` beside sysmetrics' nearest sample.

    A sample more than ``max_gap`` s from the reading does not count (the pair has no
    sysmetrics value and fails). nvidia-smi's ``None`` values are left out. The fields
    ``varying`` (:data:`VARYING` in the check) are judged with :func:`widened` tolerances.
    """
    start, end = window
    columns: dict[str, tuple[list[float], list[float]]] = {}
    pairs: list[Pair] = []
    for reading in smi:
        if not start <= reading.time <= end:
            continue
        for gpu, row in enumerate(reading.gpus):
            for name, value in row.items():
                if value is None or name not in SMI_TO_KEY:
                    continue
                suffix, factor = SMI_TO_KEY[name]
                key = f"gpu.{gpu}.{suffix}"
                if key not in columns:
                    columns[key] = _column(run, key)
                times, values = columns[key]
                tol = tolerances[name]
                if name in varying:
                    tol = widened(tol, times, values, window, factor)
                pair = _pair(name, gpu, reading.time, value, times, values, factor, max_gap, tol)
                if tol is not tolerances[name]:
                    pair.tolerance = tol
                pairs.append(pair)
    return pairs


# Fields read over a driver window shorter than the time between two readers' calls:
# NVML's utilization is the share of its last sample period (1/6 s to 1 s, by product)
# with a kernel running, so two readers a few ms apart can read different windows. On a
# bursty load (Lightning's steps on an H100 read 0 to 56 % from one 0.5 s sample to the
# next) they differ by more than the steady-load tolerance.
VARYING = ("utilization.gpu",)


def widened(
    tol: Tolerance,
    times: Sequence[float],
    values: Sequence[float],
    window: tuple[float, float],
    factor: float = 1.0,
) -> Tolerance:
    """``tol``, widened to twice the standard deviation of sysmetrics' samples in ``window``.

    ``tol`` itself where the load is steady (the deviation is under half the tolerance).
    """
    inside = [v / factor for t, v in zip(times, values) if window[0] <= t <= window[1]]
    if len(inside) < 2:
        return tol
    spread = 2.0 * statistics.pstdev(inside)
    if spread <= tol.absolute:
        return tol
    return Tolerance(absolute=spread, relative=tol.relative)


def _pair(
    name: str,
    gpu: int,
    t: float,
    value: float,
    times: list[float],
    values: list[float],
    factor: float,
    max_gap: float,
    tol: Tolerance,
) -> Pair:
    pair = Pair(name, gpu, t, value, None, None)
    i = bisect.bisect_left(times, t)
    near = [j for j in (i - 1, i) if 0 <= j < len(times) and abs(times[j] - t) <= max_gap]
    if not near:
        return pair
    nearest = min(near, key=lambda j: abs(times[j] - t))
    pair.sysmetrics = values[nearest] / factor
    pair.dt = times[nearest] - t
    span = [values[j] / factor for j in near]
    pair.low, pair.high = min(span), max(span)
    pair.ok = tol.agrees(value, pair.sysmetrics) or (
        tol.agrees(value, pair.low)
        or tol.agrees(value, pair.high)
        or pair.low <= value <= pair.high
    )
    return pair


# -- results --------------------------------------------------------------------------


@dataclass
class Check:
    """One line of the summary: ``ok`` True (pass), False (fail) or None (skipped)."""

    name: str
    ok: Optional[bool]
    detail: str
    numbers: dict[str, object] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        """The check as a JSON object (``status`` is "pass", "fail" or "skip")."""
        status = {True: "pass", False: "fail", None: "skip"}[self.ok]
        return {"name": self.name, "status": status, "detail": self.detail, **self.numbers}


def judge_pairs(
    label: str,
    pairs: Sequence[Pair],
    fields: Sequence[str] = QUERY_FIELDS,
    gpus: Iterable[int] = (0,),
    smi: Sequence[SmiReading] = (),
) -> list[Check]:
    """A check per field (over the given GPUs): passes when every pair agrees.

    A field nvidia-smi reported for a GPU but no pair of it was made (no reading in the
    steady window) fails: nothing was compared. For the fields of :data:`GLITCHES`, an
    nvidia-smi reading that is an isolated glitch of nvidia-smi's (:func:`isolated`, over
    the readings ``smi``) is left out of the judgement and named in the detail.
    """
    checks = []
    gpus = list(gpus)
    for name in fields:
        mine = [p for p in pairs if p.field == name and p.gpu in gpus]
        if not mine:
            checks.append(Check(f"{label}: {name}", False, "no nvidia-smi reading to compare"))
            continue
        glitches = isolated(mine, smi, TOLERANCES[name]) if name in GLITCHES else []
        bad = [p for p in mine if not p.ok and p not in glitches]
        missing = sum(p.sysmetrics is None for p in bad)
        worst = max(mine, key=lambda p: -1 if p.sysmetrics is None else abs(p.sysmetrics - p.smi))
        suffix, _ = SMI_TO_KEY[name]
        agree = len(mine) - len(bad) - len(glitches)
        detail = (
            f"{agree}/{len(mine)} readings agree with gpu.{{i}}.{suffix} ({_tolerance_text(name)})"
        )
        wider = [p.tolerance.absolute for p in mine if p.tolerance is not None]
        if wider:
            detail += (
                f"; the load varied: widened to {max(wider):.1f} (2 standard deviations of "
                "sysmetrics' samples in the steady window)"
            )
        if missing:
            detail += f"; {missing} without a sysmetrics sample within reach"
        for g in glitches:
            detail += (
                f"; left out: nvidia-smi's {g.smi:g} at {g.time:.1f} s (gpu {g.gpu}), unlike"
                " its readings before and after, which agree with each other and sysmetrics"
            )
        numbers: dict[str, object] = {
            "pairs": len(mine),
            "agree": agree,
            "left_out": len(glitches),
        }
        if worst.sysmetrics is not None:
            detail += f"; largest gap: nvidia-smi {worst.smi:g} vs sysmetrics {worst.sysmetrics:g}"
            numbers["worst"] = {"nvidia-smi": worst.smi, "sysmetrics": worst.sysmetrics}
        checks.append(Check(f"{label}: {name}", not bad, detail, numbers))
    return checks


# nvidia-smi fields whose single readings can be a glitch of its own: on an H100 (driver
# 580.159.04) one utilization.gpu read 0 in a steady transformers training at 37-53 %,
# between readings of 51 and 53, while power read 301 W and steps went on at the same rate;
# at 590 W, one temperature.gpu read 64 °C between 66 and 67, where sysmetrics read 67.
GLITCHES = ("utilization.gpu", "temperature.gpu")


def isolated(pairs: Sequence[Pair], smi: Sequence[SmiReading], tol: Tolerance) -> list[Pair]:
    """The disagreeing pairs that are an isolated glitch of nvidia-smi's.

    One is where nvidia-smi's readings of the same GPU and field just before and just
    after it (in ``smi``, the whole series, inside the steady window or not) agree with
    each other and with the sysmetrics sample nearest to it, and its own value is outside
    the tolerance of both: nvidia-smi jumped alone, and back. Two disagreeing readings in
    a row, or one at either end of the series, are never a glitch.
    """
    out = []
    for p in pairs:
        if p.ok or p.sysmetrics is None:
            continue
        series = [(r.time, r.gpus[p.gpu].get(p.field)) for r in smi if p.gpu < len(r.gpus)]
        times = [t for t, _ in series]
        if p.time not in times:
            continue
        k = times.index(p.time)
        if not 0 < k < len(series) - 1:
            continue
        before, after = series[k - 1][1], series[k + 1][1]
        if before is None or after is None:
            continue
        if (
            tol.agrees(before, after)
            and tol.agrees(before, p.sysmetrics)
            and not tol.agrees(before, p.smi)
            and not tol.agrees(after, p.smi)
        ):
            out.append(p)
    return out


def _tolerance_text(name: str) -> str:
    tol = TOLERANCES[name]
    if tol.relative and tol.absolute:
        return f"within {tol.relative:.0%} or {tol.absolute:g}"
    if tol.relative:
        return f"within {tol.relative:.0%}"
    if tol.absolute:
        return f"within {tol.absolute:g}"
    return "equal"


def pairs_json(pairs: Sequence[Pair]) -> str:
    """The pairs as JSON, a list of objects (the applied tolerance nested where present)."""
    return json.dumps([asdict(p) for p in pairs], indent=1)


def pairs_table(pairs: Sequence[Pair]) -> str:
    """The pairs side by side, one line each (nvidia-smi's units)."""
    lines = [
        f"{'time':>17} {'gpu':>3} {'field':<16}{'nvidia-smi':>12}{'sysmetrics':>12}{'dt s':>7}  ok"
    ]
    for p in pairs:
        mine = "-" if p.sysmetrics is None else f"{p.sysmetrics:.6g}"
        dt = "-" if p.dt is None else f"{p.dt:+.2f}"
        lines.append(
            f"{p.time:>17.3f} {p.gpu:>3} {p.field:<16}{p.smi:>12.6g}{mine:>12}"
            f"{dt:>7}  {'yes' if p.ok else 'NO'}"
        )
    return "\n".join(lines) + "\n"


# -- attribution ----------------------------------------------------------------------


def _at(col: Sequence[float], j: int) -> float:
    """Sample ``j`` of a column; NaN (absent) past its end."""
    return col[j] if j < len(col) else math.nan


def _has_prefix(run: RunLike, prefix: str, j: int) -> bool:
    """Whether sample ``j`` has a value of some key starting with ``prefix``."""
    return any(k.startswith(prefix) and _at(c, j) == _at(c, j) for k, c in run.columns.items())


def attribution(
    run: RunLike, job_gpus: Iterable[int], gpu_count: int, window: tuple[float, float]
) -> list[Check]:
    """Checks that the job's GPUs, and only they, have ``gpu.process.{i}.*`` keys.

    Each GPU of the job must have them in every sample of ``window``; any other GPU
    (``gpu_count`` GPUs in all, ``0..gpu_count-1``) in no sample of the run.
    """
    job = sorted(set(job_gpus))
    inside = [j for j, t in enumerate(run.time) if t is not None and window[0] <= t <= window[1]]
    checks = []
    for i in job:
        have = sum(_has_prefix(run, f"gpu.process.{i}.", j) for j in inside)
        ok = bool(inside) and have == len(inside)
        checks.append(
            Check(
                f"attribution: gpu.process.{i}.* present (the job's GPU)",
                ok,
                f"in {have}/{len(inside)} samples of the steady window",
                {"samples": len(inside), "with": have},
            )
        )
    others = [i for i in range(gpu_count) if i not in job]
    if not others:
        checks.append(
            Check(
                "attribution: gpu.process.{j}.* absent for other GPUs",
                None,
                "one GPU only: no other GPU to check",
            )
        )
    for i in others:
        have = sum(_has_prefix(run, f"gpu.process.{i}.", j) for j in range(len(run.time)))
        checks.append(
            Check(
                f"attribution: gpu.process.{i}.* absent (not the job's)",
                have == 0,
                f"in {have}/{len(run.time)} samples",
                {"with": have},
            )
        )
    return checks


def intruder(run: RunLike, gpu: int, held_bytes: float, window: tuple[float, float]) -> Check:
    """Check that a process outside the job, holding ``held_bytes`` on ``gpu``, is not counted.

    It held them during ``window``: in every sample then, the job's bytes plus 90 % of the
    other process's must fit in the GPU's bytes in use
    (``gpu.process.{i}.processMemoryAllocatedBytes`` + 0.9 x held <=
    ``gpu.{i}.memoryAllocatedBytes``), and the job's bytes must be positive.
    """
    name = "attribution: another process's memory not counted"
    mine = run.columns.get(f"gpu.process.{gpu}.processMemoryAllocatedBytes")
    total = run.columns.get(f"gpu.{gpu}.memoryAllocatedBytes")
    if mine is None or total is None:
        return Check(name, False, "no gpu.process/gpu memory keys in the run file")
    both = ((_at(mine, j), _at(total, j), t) for j, t in enumerate(run.time))
    rows = [
        (m, a)
        for m, a, t in both
        if t is not None and window[0] <= t <= window[1] and m == m and a == a
    ]
    if not rows:
        return Check(name, False, "no sample with both keys while the other process held memory")
    bad = [(m, t) for m, t in rows if not (m > 0 and m + 0.9 * held_bytes <= t)]
    worst = max(rows, key=lambda r: r[0] / r[1] if r[1] else math.inf)
    detail = (
        f"{len(rows) - len(bad)}/{len(rows)} samples: job {worst[0] / 2**30:.2f} GiB, "
        f"GPU in use {worst[1] / 2**30:.2f} GiB, other process {held_bytes / 2**30:.2f} GiB"
    )
    return Check(name, not bad, detail, {"samples": len(rows), "bad": len(bad)})


# -- summary --------------------------------------------------------------------------


def summary_table(checks: Sequence[Check]) -> str:
    """The checks, one line each, and a last line with the counts."""
    width = min(72, max((len(c.name) for c in checks), default=10))
    lines = [f"{'check':<{width}}  result  detail"]
    for c in checks:
        status = {True: "pass", False: "FAIL", None: "skip"}[c.ok]
        lines.append(f"{c.name:<{width}}  {status:<6}  {c.detail}")
    passed = sum(c.ok is True for c in checks)
    failed = sum(c.ok is False for c in checks)
    skipped = sum(c.ok is None for c in checks)
    lines.append(f"{passed} passed, {failed} failed, {skipped} skipped")
    return "\n".join(lines) + "\n"


def exit_code(checks: Sequence[Check]) -> int:
    """0 when no check failed (skips do not fail), else 1; 1 as well for no checks at all."""
    return 0 if checks and not any(c.ok is False for c in checks) else 1
