"""Two runs side by side: what changed from run A to run B, beyond each run's own noise.

:func:`compare` takes two runs (each one file, or several files of one multi-node run,
read with :func:`~sysmetrics.runfile.read_runs`) and, node by node, puts side by side
the values both have, from each node's :class:`~sysmetrics.runview.RunView`:

- the **step time** (s per optimizer step): each sample's ``step.seconds`` (the mean over
  the steps of its window), else the seconds per step between the samples' step changes
  (:attr:`RunView.paces`);
- the **data wait** (``step.dataWaitPercent``, % of each step), and from it the seconds of
  each step spent waiting for data and the seconds outside it (**compute**, s per step);
- the **throughput**: ``step.samplesPerSecond`` (samples/s) where both runs have it, else
  the steps per second of each window (1 over its step time);
- the **energy per step** (J): ``step.energyJoules``, else from the energy counters the
  cost ledger counts (:mod:`sysmetrics.ledger`) between samples with steps
  (:func:`energy_per_step`);
- **every machine key both runs have**: gauges as they are, counters as their rates (per
  s), the host's per-core CPU keys as their mean.

Each row holds both runs' medians and whether their difference is **beyond noise**: the
two-sided Mann-Whitney U test over the two runs' per-window values (:func:`mann_whitney`;
exact for small samples without ties, else the normal approximation with tie and
continuity corrections) gives p below :data:`ALPHA` (95 % confidence), and the medians
differ by at least :data:`MIN_CHANGE` of A's (and, for a key in %, by
:data:`MIN_POINTS` points): a shift smaller than that is what two recordings of the same
script on a loaded machine differ by. Each run's first window with step keys in each
recording (the warm-up: imports, the first batches, compilation) is left out of the step
rows. Windows are taken as independent; runs that sample at different intervals have
windows of different lengths (a longer window averages more steps: its values spread
less), which the comparison says.

Findings (:func:`sysmetrics.findings.findings`) that appear, disappear or change are
listed, and a few sentences (:attr:`Comparison.sentences`) lead with what matters: the
step time, what the difference is made of (data wait or compute), the job's CPU, other
machine keys beyond noise. What could not be compared is said with why: a key one run
lacks, too few windows, runs of different nodes (refused: :class:`CompareError`).

Pure Python over the runs' views (no numpy): the report's ``--baseline`` and
``sysmetrics compare`` (:mod:`sysmetrics.report.comparing`) render it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from sysmetrics.descriptions import describe, family, gpu_key, split_node
from sysmetrics.findings import CPU_BOUND_PERCENT, Finding, findings, memo, view
from sysmetrics.findings._base import cpus
from sysmetrics.ledger import stepped_energy
from sysmetrics.runfile import Run
from sysmetrics.runview import RunView, core

SCHEMA = "sysmetrics.compare/1"  # the JSON document's version

ALPHA = 0.05  # two-sided p below which a difference may be beyond noise (95 % confidence) ...
MIN_CHANGE = 0.05  # ... where the medians also differ by this share of A's median ...
MIN_POINTS = 2.0  # ... and, for a key in %, by this many percentage points
MIN_WINDOWS = 5  # values (windows) each run needs for a row to be tested
WARMUP_WINDOWS = 1  # the first windows with step keys of each recording left out (warm-up)
MAX_KEYS = 500  # machine keys compared at most (in key order); the rest are said left out
MAX_NAMED = 3  # machine keys beyond noise named in the sentences at most (the largest changes)
MAX_EXACT = 400  # n_a x n_b at most for the exact Mann-Whitney distribution (no ties)

STEP, WAIT, WAIT_S, COMPUTE, THROUGHPUT, ENERGY = (
    "step time",
    "data wait",
    "data wait time",
    "compute time",
    "throughput",
    "energy per step",
)
ENERGY_SUFFIX = ".energyJoules"  # the energy counters (J) energy per step is made of
_JOB_CPU = "cpu"  # the job's CPU, % of the CPUs available to it
_HOST_CPU = "cpu.{i}.cpu_percent (mean)"  # the host's per-core busy %, as one row


class CompareError(ValueError):
    """The runs cannot be compared (their nodes differ, one has no samples); says why."""


def mann_whitney(a: Iterable[float], b: Iterable[float]) -> float:
    """The two-sided p of the Mann-Whitney U test that ``a`` and ``b`` come from one distribution.

    Non-finite values are left out. Exact (the distribution of U by counting) where both
    samples are small (``len(a) * len(b) <= MAX_EXACT``) and have no ties; else the
    normal approximation, with the tie correction of the variance and a continuity
    correction of 0.5. 1.0 where either sample is empty or every value is the same. Always
    in [0, 1].
    """
    xs = [float(v) for v in a if math.isfinite(v)]
    ys = [float(v) for v in b if math.isfinite(v)]
    n1, n2 = len(xs), len(ys)
    if not n1 or not n2:
        return 1.0
    pooled = sorted([(v, 0) for v in xs] + [(v, 1) for v in ys])
    n = n1 + n2
    ranks_a = 0.0
    ties = 0.0  # sum of t^3 - t over the groups of tied values
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # the mean rank of the group, from 1
        t = j - i + 1
        ties += t**3 - t
        ranks_a += rank * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
        i = j + 1
    u = ranks_a - n1 * (n1 + 1) / 2
    if ties == 0 and n1 * n2 <= MAX_EXACT:
        return _exact_p(u, n1, n2)
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(0.0, abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return min(1.0, max(0.0, math.erfc(z / math.sqrt(2))))


def _exact_p(u: float, n1: int, n2: int) -> float:
    """Two-sided p of U = ``u`` for samples of ``n1`` and ``n2`` without ties, by counting."""
    # counts[m][k]: arrangements of m values of A among m + n2' values with U = k, grown
    # one value of B at a time: f(m, n, k) = f(m - 1, n, k - n) + f(m, n - 1, k).
    top = n1 * n2
    counts = [[1] + [0] * top for _ in range(n1 + 1)]  # n = 0: U is 0
    for nn in range(1, n2 + 1):
        new = [[1] + [0] * top]
        for m in range(1, n1 + 1):
            row = [0] * (top + 1)
            below, same = new[m - 1], counts[m]
            for k in range(top + 1):
                row[k] = (below[k - nn] if k >= nn else 0) + same[k]
            new.append(row)
        counts = new
    dist = counts[n1]
    total = sum(dist)
    low = min(u, top - u)  # the tail on the side of u, doubled
    tail = sum(c for k, c in enumerate(dist) if k <= low + 1e-9)
    return min(1.0, 2 * tail / total)


@dataclass(frozen=True)
class ComparedKey:
    """One value of both runs: medians, their difference and whether it is beyond noise.

    ``name`` is a key (``gpu.0.powerWatts``) or a derived value (:data:`STEP`, ...);
    ``unit`` its unit; ``a`` and ``b`` the medians of each run's windows (None: none);
    ``n_a``, ``n_b`` how many windows; ``p`` the Mann-Whitney p (None: not tested, with
    ``why``); ``beyond`` whether the difference is beyond noise (None: not tested).
    """

    name: str
    unit: str
    a: Optional[float]
    b: Optional[float]
    n_a: int
    n_b: int
    p: Optional[float]
    beyond: Optional[bool]
    why: str = ""  # why it was not tested (too few windows)

    @property
    def difference(self) -> Optional[float]:
        """B's median less A's, in ``unit`` (None where either is unknown)."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def ratio(self) -> Optional[float]:
        """B's median over A's (None where either is unknown, or A's is 0)."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a

    def to_json(self) -> dict[str, Any]:
        """The row as the JSON document has it."""
        return {
            "name": self.name,
            "unit": self.unit,
            "a": _finite(self.a),
            "b": _finite(self.b),
            "difference": _finite(self.difference),
            "ratio": _finite(self.ratio),
            "windows": [self.n_a, self.n_b],
            "p": _finite(self.p),
            "beyond_noise": self.beyond,
            "why": self.why,
        }


def row(name: str, unit: str, a: Sequence[float], b: Sequence[float]) -> ComparedKey:
    """The :class:`ComparedKey` of the windows ``a`` (run A) and ``b`` (run B), tested for noise."""
    xs = [v for v in a if math.isfinite(v)]
    ys = [v for v in b if math.isfinite(v)]
    ma = statistics.median(xs) if xs else None
    mb = statistics.median(ys) if ys else None
    if len(xs) < MIN_WINDOWS or len(ys) < MIN_WINDOWS:
        why = f"fewer than {MIN_WINDOWS} values in " + (
            "both runs" if len(xs) < MIN_WINDOWS and len(ys) < MIN_WINDOWS
            else "A" if len(xs) < MIN_WINDOWS else "B"
        )  # fmt: skip
        return ComparedKey(name, unit, ma, mb, len(xs), len(ys), None, None, why)
    p = mann_whitney(xs, ys)
    assert ma is not None and mb is not None
    return ComparedKey(name, unit, ma, mb, len(xs), len(ys), p, beyond_noise(p, ma, mb, unit))


def beyond_noise(p: float, a: float, b: float, unit: str) -> bool:
    """Whether medians ``a`` and ``b`` with test result ``p`` differ beyond noise (see module)."""
    if p >= ALPHA:
        return False
    change = abs(b - a)
    if unit == "%" and change < MIN_POINTS:
        return False
    return change >= MIN_CHANGE * abs(a) and change > 0


# -- each node's windows ----------------------------------------------------------------


def _part_of(seen: RunView) -> list[int]:
    """Each sample's part (recording of a node), as an index into ``seen.parts``."""
    out = [0] * len(seen)
    for k, part in enumerate(seen.parts):
        for j in part:
            out[j] = k
    return out


def windows(seen: RunView, key: str, warmup: int = 0) -> list[float]:
    """The finite values of ``key``, one per sample; each part's first ``warmup`` left out."""
    column = seen.run.columns.get(key)
    if column is None:
        return []
    return [column[j] for j in _kept(seen, key, warmup)]


def step_times(seen: RunView) -> tuple[list[float], str]:
    """Each window's s per step, and where they come from (``step.seconds`` or the paces).

    The first window of each recording (the warm-up) is left out.
    """
    keyed = windows(seen, "step.seconds", WARMUP_WINDOWS)
    if keyed:
        return keyed, "step.seconds"
    part = _part_of(seen)
    taken: set[int] = set()
    out = []
    for pace in seen.paces:
        k = part[pace.first]
        if k not in taken:  # the warm-up
            taken.add(k)
            continue
        out.append(pace.seconds)
    return out, "the samples' steps" if out else ""


def _split(seen: RunView) -> tuple[list[float], list[float]]:
    """Each window's seconds of data wait and of compute per step (both keys needed)."""
    columns = seen.run.columns
    step, wait = columns.get("step.seconds"), columns.get("step.dataWaitPercent")
    if step is None or wait is None:
        return [], []
    waits, computes = [], []
    for j in _kept(seen, "step.seconds"):
        s, w = step[j], wait[j]
        if math.isfinite(s) and math.isfinite(w):
            share = min(max(w, 0.0), 100.0) / 100
            waits.append(s * share)
            computes.append(s * (1 - share))
    return waits, computes


def _kept(seen: RunView, key: str, warmup: int = WARMUP_WINDOWS) -> list[int]:
    """The samples with a finite ``key``, each part's first ``warmup`` of them left out."""
    column = seen.run.columns.get(key)
    if column is None:
        return []
    part = _part_of(seen) if warmup else None
    taken: dict[int, int] = {}
    out = []
    for j, v in enumerate(column):
        if not math.isfinite(v):
            continue
        if part is not None:
            taken[part[j]] = taken.get(part[j], 0) + 1
            if taken[part[j]] <= warmup:
                continue
        out.append(j)
    return out


def energy_per_step(seen: RunView) -> list[float]:
    """J per step of each window: ``step.energyJoules``, else from the energy counters.

    From the counters the cost ledger counts (the job's GPUs, the CPU packages, DRAM):
    their growth over the steps advanced between two consecutive samples with steps
    (:func:`sysmetrics.ledger.stepped_energy`; the ledger's energy per step is their
    sum over all of them). The first window of each recording (the warm-up) is left out.
    Empty where the run has no energy counter.
    """
    keyed = windows(seen, "step.energyJoules", WARMUP_WINDOWS)
    if keyed:
        return keyed
    out, seen_parts = [], set()
    for part, joules, steps in stepped_energy(seen):
        if part in seen_parts:
            out.append(joules / steps)
        seen_parts.add(part)
    return out


def machine_keys(run: Run) -> list[str]:
    """The machine keys of ``run`` compared, in key order (see :func:`machine_values`)."""
    out = []
    cores = False
    for key in sorted(run.columns):
        if core(key) is not None:
            cores = True
            continue
        found = family(key.removesuffix(".max")) or family(key)
        if found is not None and found.key.startswith("step."):
            continue
        gpu = gpu_key(key)
        if gpu is not None and gpu.process and gpu.device_key in run.columns:
            continue
        out.append(key)
    return [*out, _HOST_CPU] if cores else out


def machine_values(seen: RunView, key: str) -> tuple[str, list[float]]:
    """A machine key's unit and values: a gauge as it is, a counter as its rate (per s).

    :func:`machine_keys` leaves out ``gpu.process.{i}.x`` keys that repeat ``gpu.{i}.x``,
    the ``step.*`` keys and the host's per-core ``cpu.{i}.cpu_percent`` keys, which are
    one row, their mean (:data:`_HOST_CPU`, in %).
    """
    if key == _HOST_CPU:
        return "%", [v for v in seen.host_cpu if v is not None and math.isfinite(v)]
    described = describe(key)
    if described is not None and described[0].kind == "counter":
        rates = [v for v in seen.rates(key) if v is not None and math.isfinite(v)]
        return described[0].rate_unit, rates
    unit = described[0].unit if described is not None else ""
    column = seen.run.columns.get(key)
    return unit, [] if column is None else [v for v in column if math.isfinite(v)]


# -- the comparison ---------------------------------------------------------------------


@dataclass(frozen=True)
class FindingChange:
    """A finding of one run or both: ``"new"`` (B only), ``"gone"`` (A only), ``"changed"``."""

    change: str  # "new", "gone", "changed" (the sentence differs), "same"
    rule: str
    a: Optional[str]  # A's sentence
    b: Optional[str]  # B's sentence

    def to_json(self) -> dict[str, Any]:
        """As the JSON document has it."""
        return {"change": self.change, "rule": self.rule, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class NodeComparison:
    """One node of A against the same node of B: rows, what was not compared, sentences."""

    node: Optional[int]
    # step time, data wait, data wait time, compute, throughput, energy
    steps: tuple[ComparedKey, ...]
    keys: tuple[ComparedKey, ...]  # the machine keys both runs have, in key order
    only_a: tuple[str, ...]  # keys A has and B lacks
    only_b: tuple[str, ...]
    left_out: int  # machine keys past MAX_KEYS
    intervals: tuple[Optional[float], Optional[float]]  # median s between samples
    cpus: tuple[Optional[float], Optional[float]]  # CPUs available to the job
    sentences: tuple[str, ...]

    def step(self, name: str) -> Optional[ComparedKey]:
        """The row ``name`` (:data:`STEP`, :data:`WAIT`, ...), None where there is none."""
        return next((r for r in self.steps if r.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """As the JSON document has it."""
        return {
            "node": self.node,
            "sentences": list(self.sentences),
            "steps": [r.to_json() for r in self.steps],
            "keys": [r.to_json() for r in self.keys],
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "keys_left_out": self.left_out,
            "intervals": [_finite(v) for v in self.intervals],
            "cpus": [_finite(v) for v in self.cpus],
        }


@dataclass(frozen=True)
class Comparison:
    """Run A against run B: each node's comparison, the findings' changes, the sentences."""

    nodes: tuple[NodeComparison, ...]
    findings: tuple[FindingChange, ...]
    files_a: tuple[str, ...] = ()
    files_b: tuple[str, ...] = ()
    sentences: tuple[str, ...] = field(default=())

    def slowdown(self) -> Optional[float]:
        """The largest step-time rise of a node beyond noise, % of A's (None: none).

        None also where no node's step time could be tested (see :meth:`tested`).
        """
        worst: Optional[float] = None
        for n in self.nodes:
            r = n.step(STEP)
            if r is not None and r.beyond and r.ratio is not None and r.ratio > 1:
                rise = 100 * (r.ratio - 1)
                worst = rise if worst is None else max(worst, rise)
        return worst

    @property
    def tested(self) -> bool:
        """Whether every node's step time was tested (both runs have enough windows)."""
        rows = [n.step(STEP) for n in self.nodes]
        return bool(rows) and all(r is not None and r.p is not None for r in rows)

    def to_json(self) -> dict[str, Any]:
        """The JSON document (``sysmetrics compare --json``; see docs/compare.md)."""
        return {
            "schema": SCHEMA,
            "a": list(self.files_a),
            "b": list(self.files_b),
            "test": {
                "name": "Mann-Whitney U, two-sided, over the per-window values",
                "alpha": ALPHA,
                "min_change": MIN_CHANGE,
                "min_points": MIN_POINTS,
                "min_windows": MIN_WINDOWS,
            },
            "sentences": list(self.sentences),
            "slowdown_percent": _finite(self.slowdown()),
            "findings": [f.to_json() for f in self.findings],
            "nodes": [n.to_json() for n in self.nodes],
        }


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def compare(a: Run, b: Run, files_a: Sequence[str] = (), files_b: Sequence[str] = ()) -> Comparison:
    """Run ``a`` against run ``b`` (see the module), node by node.

    Raises :class:`CompareError` where either run has no samples, or their nodes differ
    (a run of several nodes against one of one node, or other nodes): each node is
    compared with the same node of the other run, never with another.
    """
    if len(a) == 0 or len(b) == 0:
        raise CompareError(f"run {'A' if len(a) == 0 else 'B'} has no samples")
    nodes_a, nodes_b = a.by_node(), b.by_node()
    ids_a, ids_b = [k for k, _ in nodes_a], [k for k, _ in nodes_b]
    if len(ids_a) != len(ids_b) or (len(ids_a) > 1 and ids_a != ids_b):
        raise CompareError(
            f"A has {_nodes_said(ids_a)} and B has {_nodes_said(ids_b)}: each node is compared "
            "with the same node of the other run, so compare runs of the same nodes (or give "
            "one node's file on each side)"
        )
    with memo():
        pairs = []
        for (k, ra), (_, rb) in zip(nodes_a, nodes_b):
            pairs.append(_node(k if len(nodes_a) > 1 else None, view(ra), view(rb)))
        changes = _finding_changes(findings(a), findings(b))
    sentences = [
        (f"Node {n.node}: " if n.node is not None else "") + s for n in pairs for s in n.sentences
    ]
    sentences += _findings_sentences(changes)
    return Comparison(
        tuple(pairs), tuple(changes), tuple(files_a), tuple(files_b), tuple(sentences)
    )


def _nodes_said(ids: Sequence[Optional[int]]) -> str:
    if len(ids) == 1:
        return "one node"
    return f"{len(ids)} nodes ({', '.join(str(k) for k in ids)})"


def _node(node: Optional[int], va: RunView, vb: RunView) -> NodeComparison:
    steps: list[ComparedKey] = []
    ta, source_a = step_times(va)
    tb, source_b = step_times(vb)
    if ta or tb:
        steps.append(row(STEP, "s", ta, tb))
    wa, wb = (
        windows(va, "step.dataWaitPercent", WARMUP_WINDOWS),
        windows(vb, "step.dataWaitPercent", WARMUP_WINDOWS),
    )
    if wa or wb:
        steps.append(row(WAIT, "%", wa, wb))
    (sa, ca), (sb, cb) = _split(va), _split(vb)
    if sa and sb:
        steps.append(row(WAIT_S, "s", sa, sb))
        steps.append(row(COMPUTE, "s", ca, cb))
    pa = windows(va, "step.samplesPerSecond", WARMUP_WINDOWS)
    pb = windows(vb, "step.samplesPerSecond", WARMUP_WINDOWS)
    if pa and pb:
        steps.append(row(THROUGHPUT, "samples/s", pa, pb))
    elif ta and tb:
        inv_a = [1 / t for t in ta if t > 0]
        inv_b = [1 / t for t in tb if t > 0]
        steps.append(row(THROUGHPUT, "steps/s", inv_a, inv_b))
    ea, eb = energy_per_step(va), energy_per_step(vb)
    if ea or eb:
        steps.append(row(ENERGY, "J", ea, eb))
    ka, kb = machine_keys(va.run), machine_keys(vb.run)
    in_a, in_b = set(ka), set(kb)
    both = [k for k in ka if k in in_b]
    keys = []
    for k in both[:MAX_KEYS]:  # each key's values made once, and only where compared
        unit, values_a = machine_values(va, k)
        keys.append(row(k, unit, values_a, machine_values(vb, k)[1]))
    only_a = tuple(k for k in ka if k not in in_b)
    only_b = tuple(k for k in kb if k not in in_a)
    intervals = (va.interval, vb.interval)
    cpu = (cpus(va.run)[0], cpus(vb.run)[0])
    made = NodeComparison(
        node,
        tuple(steps),
        tuple(keys),
        only_a,
        only_b,
        max(0, len(both) - MAX_KEYS),
        intervals,
        cpu,
        (),
    )
    said = _sentences(made, bool(ta) and bool(tb), source_a, source_b)
    return replace(made, sentences=tuple(said))


# -- in words -----------------------------------------------------------------------------


def value(v: Optional[float], unit: str) -> str:
    """A value with its unit for a sentence: ``0.42 s``, ``33 %``, ``250 W``, ``12 MiB/s``."""
    if v is None or not math.isfinite(v):
        return "unknown"
    if unit == "s":
        return f"{v:.3g} s" if v >= 0.01 or v == 0 else f"{v * 1e3:.3g} ms"
    if unit == "%":
        return f"{v:.0f} %" if abs(v) >= 10 else f"{v:.2g} %"
    if unit in ("bytes", "bytes/s"):
        return f"{v / 2**20:.3g} MiB" + ("/s" if unit == "bytes/s" else "")
    return f"{v:.3g} {unit}".rstrip()


def _arrow(r: ComparedKey) -> str:
    return f"{value(r.a, r.unit)} -> {value(r.b, r.unit)}"


def _sentences(n: NodeComparison, timed: bool, source_a: str, source_b: str) -> list[str]:
    out: list[str] = []
    step = n.step(STEP)
    if step is None or not timed:
        if step is None or (step.n_a == 0 and step.n_b == 0):
            who = "neither run has steps"
        else:
            who = f"{'A' if step.n_a == 0 else 'B'} has no steps"
        out.append(
            f"Step time cannot be compared: {who} (no step.seconds and no step marks that advance)"
        )
    elif step.p is None:
        out.append(f"Step time cannot be compared: {step.why} ({_arrow(step)})")
    elif step.beyond and step.ratio is not None:
        faster = step.ratio < 1
        times = 1 / step.ratio if faster else step.ratio
        first = (
            f"B's steps are {times:.2f}x {'faster' if faster else 'slower'} "
            f"({value(step.b, 's')} against {value(step.a, 's')}, beyond noise)"
        )
        cause = _cause(n, faster)
        out.append(first + (f": {cause}" if cause else ""))
    else:
        out.append(
            f"No difference in step time beyond noise ({value(step.b, 's')} against "
            f"{value(step.a, 's')}, p = {step.p:.2g})"
        )
        wait = n.step(WAIT)
        if wait is not None and wait.beyond:
            out.append(f"Data wait went {_arrow(wait)} of each step (beyond noise)")
    if source_a and source_b and source_a != source_b:
        out.append(
            f"A's step time comes from {source_a} and B's from {source_b}: the windows differ"
        )
    energy = n.step(ENERGY)
    if energy is not None and energy.p is not None:
        said = "beyond noise" if energy.beyond else "within noise"
        out.append(f"Energy per step: {_arrow(energy)} ({said})")
    elif energy is not None:
        out.append(f"Energy per step cannot be compared: {energy.why}")
    said_cpu = bool(step is not None and step.beyond)  # the cause names the job's CPU
    changed = [r for r in n.keys if r.beyond and not (said_cpu and r.name == _JOB_CPU)]
    changed.sort(key=lambda r: -abs((r.ratio or 2.0) - 1))
    for host, lead in ((False, "Beyond noise too: "), (True, "The host changed too: ")):
        these = [r for r in changed if _host_key(r.name) == host]
        if these:
            named = ", ".join(f"{r.name} {_arrow(r)}" for r in these[:MAX_NAMED])
            more = len(these) - MAX_NAMED
            out.append(
                lead
                + named
                + (f" and {more} more keys" if more > 0 else "")
                + (" (host-wide: other processes count there)" if host else "")
            )
    gpu = [r for r in n.keys if _gpu_power_or_clock(r.name) and r.p is not None]
    if gpu and not any(r.beyond for r in gpu):
        out.append("GPU power and clocks are the same")
    a_cpus, b_cpus = n.cpus
    if a_cpus is not None and b_cpus is not None and a_cpus != b_cpus:
        out.append(f"The job has {a_cpus:g} CPUs in A and {b_cpus:g} in B")
    ia, ib = n.intervals
    if ia is not None and ib is not None and max(ia, ib) > 1.5 * min(ia, ib):
        out.append(
            f"The runs sample at different intervals ({value(ia, 's')} and {value(ib, 's')}): "
            "a longer window averages more steps, so its values spread less"
        )
    untested = [r for r in n.keys if r.p is None]
    if n.only_a or n.only_b or untested or n.left_out:
        parts = []
        if n.only_a:
            parts.append(f"{len(n.only_a)} keys only in A")
        if n.only_b:
            parts.append(f"{len(n.only_b)} keys only in B")
        if untested:
            parts.append(f"{len(untested)} keys with fewer than {MIN_WINDOWS} values in a run")
        if n.left_out:
            parts.append(f"{n.left_out} keys past the first {MAX_KEYS}")
        out.append("Not compared: " + ", ".join(parts))
    return out


def _host_key(key: str) -> bool:
    """Whether ``key`` is the host's (or its cgroup's), not the job's nor its GPUs'."""
    split = split_node(key)
    inner = split.key if split is not None else key
    if inner == "proc.memory.availableMB":
        return True
    return not (inner == _JOB_CPU or inner.startswith(("proc.", "gpu.")))


def _gpu_power_or_clock(key: str) -> bool:
    gpu = gpu_key(key)
    return gpu is not None and not gpu.process and key.endswith(("powerWatts", "Clock"))


def _cause(n: NodeComparison, faster: bool) -> str:
    """What the step time's difference is made of: data wait or compute; the job's CPU."""
    wait, wait_s, compute = n.step(WAIT), n.step(WAIT_S), n.step(COMPUTE)
    what = "the time saved is" if faster else "the extra time is"
    if wait_s is None or compute is None or wait is None:
        said = "the run files have no data wait (step.dataWaitPercent) to split it by"
    else:
        dw, dc = wait_s.difference, compute.difference
        assert dw is not None and dc is not None
        if abs(dw) >= abs(dc):
            said = f"{what} data wait ({_arrow(wait)} of each step)"
        else:
            said = (
                f"{what} compute, outside data wait ({_arrow(compute)} per step; data wait "
                f"{_arrow(wait)})"
            )
    cpu = next((r for r in n.keys if r.name == _JOB_CPU and r.p is not None), None)
    if cpu is not None and cpu.a is not None and cpu.b is not None:
        if cpu.a >= CPU_BOUND_PERCENT and cpu.b >= CPU_BOUND_PERCENT:
            said += (
                f" while the job's CPU is saturated in both ({value(cpu.a, '%')} and "
                f"{value(cpu.b, '%')} of its CPUs)"
            )
        elif cpu.beyond:
            said += f" while the job's CPU went {_arrow(cpu)} of its CPUs"
        else:
            said += f" while the job's CPU is the same ({_arrow(cpu)} of its CPUs)"
    return said


def _key(f: Finding) -> tuple[str, Any]:
    return f.rule, f.subject


def _finding_changes(a: Sequence[Finding], b: Sequence[Finding]) -> list[FindingChange]:
    """The findings of each run matched by rule and subject: new, gone, changed, same."""
    by_a = {_key(f): f for f in a}
    by_b = {_key(f): f for f in b}
    out = []
    for k, f in by_a.items():
        other = by_b.get(k)
        if other is None:
            out.append(FindingChange("gone", f.rule, f.sentence, None))
        else:
            same = other.sentence == f.sentence
            out.append(
                FindingChange("same" if same else "changed", f.rule, f.sentence, other.sentence)
            )
    out += [
        FindingChange("new", f.rule, None, f.sentence) for k, f in by_b.items() if k not in by_a
    ]
    return out


def _findings_sentences(changes: Sequence[FindingChange]) -> list[str]:
    new = sorted({c.rule for c in changes if c.change == "new"})
    gone = sorted({c.rule for c in changes if c.change == "gone"})
    out = []
    if new:
        out.append(f"Findings new in B: {', '.join(new)}")
    if gone:
        out.append(f"Findings of A gone in B: {', '.join(gone)}")
    return out


BASELINE_RULE = "baseline"  # the rule of the findings report --baseline adds


def baseline_findings(comparison: Comparison) -> list[Finding]:
    """The comparison's sentences as findings of rule ``baseline`` (``report --baseline``).

    The step-time sentence of each node has its numbers as evidence: ``a_seconds``,
    ``b_seconds`` (the medians, s per step), ``p`` and ``beyond_noise`` (1 or 0).
    """
    out = []
    for n in comparison.nodes:
        prefix = f"Node {n.node}: " if n.node is not None else ""
        step = n.step(STEP)
        for k, sentence in enumerate(n.sentences):
            evidence: dict[str, float] = {}
            if k == 0 and step is not None and step.p is not None:
                assert step.a is not None and step.b is not None
                evidence = {
                    "a_seconds": step.a,
                    "b_seconds": step.b,
                    "p": step.p,
                    "beyond_noise": float(bool(step.beyond)),
                }
            out.append(Finding(BASELINE_RULE, f"Baseline: {prefix}{sentence}.", evidence))
    out += [
        Finding(BASELINE_RULE, f"Baseline: {s}.") for s in _findings_sentences(comparison.findings)
    ]
    return out
