"""A run file's values as a reader sees them: :class:`Series`, groups, rates, summary rows.

Each key becomes a :class:`Series` in the unit a reader expects (counters as rates, bytes
and MiB as GiB or MiB, per-core CPU keys as their mean), in a group (``"CPU"``, ``"GPU 0"``,
...); :func:`summary` gives their mean, p95 and peak. Also the figures' x axis
(:func:`axis`: steps or elapsed time) and where each appended recording starts
(:func:`starts`, :func:`segments`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from sysmetrics.descriptions import counter_rate, describe, gpu_key, split_node
from sysmetrics.runfile import Run

if TYPE_CHECKING:
    import numpy as np

MAX_ROWS = 500  # summary table rows at most

# Per-core families shown as their mean over the cores.
_COLLAPSED = ("cpu.{i}.cpu_percent", "trn.{core}.neuroncore_utilization")
_NAMES = {
    "cpu": "CPU",
    "memory": "Memory",
    "disk": "Disk",
    "network": "Network",
    "tpu": "TPU",
    "trn": "Trainium",
    "ipu": "IPU",
    "openmetrics": "OpenMetrics",
}
_ORDER = ("CPU", "Memory", "GPU", "Disk", "Network", "Energy")


# The job's RSS sums its processes' (W&B's meaning): not the job's memory where PSS is there.
_RSS, _PSS = "proc.memory.rssMB", "proc.memory.pssMB"
_RSS_NOTE = " (shared pages counted once per process)"


def group_of(key: str) -> str:
    """The group a key is summarised and drawn in: ``"CPU"``, ``"GPU 0"``, ``"Disk"``, ...."""
    gpu = gpu_key(key)
    if gpu is not None:
        return f"GPU {gpu.i}"
    if key.endswith("energyJoules"):
        return "Energy"
    if split_node(key) is not None:  # node{k}/... keys gathered from several nodes
        return "Nodes"
    head = key.split(".", 1)[0]
    if head == "proc":
        head = key.split(".", 2)[1] if key.count(".") >= 2 else head
    return _NAMES.get(head, "Other")


def _group_order(group: str) -> tuple[int, int, str]:
    name, _, number = group.partition(" ")
    rank = _ORDER.index(name) if name in _ORDER else len(_ORDER)
    return rank, int(number) if number.isdigit() else 0, group


@dataclass(frozen=True)
class Series:
    """One thing to summarise and draw: ``values`` in ``unit``, one per sample (NaN: none).

    For a counter ``values`` are its rates and ``total`` its increase over the run.
    """

    group: str
    label: str
    unit: str
    values: np.ndarray[Any, Any]
    total: Optional[float] = None  # a counter's increase over the run, in ``total_unit``

    @property
    def total_unit(self) -> str:
        """The unit of ``total``: the rate's unit times seconds (W: J)."""
        return "J" if self.unit == "W" else self.unit.removesuffix("/s")


def _display(key: str, values: np.ndarray[Any, Any]) -> tuple[str, float, bool]:
    """The unit ``key`` is shown in, the factor to it, and whether it is a counter's rate.

    Memory in bytes or MiB is shown in GiB where it reaches 1 GiB, in MiB otherwise.
    """
    import numpy as np

    found = describe(key)
    if found is None:
        return "", 1.0, False
    unit, counter = found[0].unit, found[0].kind == "counter"
    if counter:  # shown as its rate (bytes/s as MiB/s, like a gauge in bytes/s)
        unit = found[0].rate_unit
        return ("MiB/s", 2.0**-20, True) if unit == "bytes/s" else (unit, 1.0, True)
    if unit in ("bytes", "MiB"):
        to_mib = 2.0**-20 if unit == "bytes" else 1.0
        known = values[~np.isnan(values)]
        peak = float(np.abs(known).max()) * to_mib if known.size else 0.0
        return ("GiB", to_mib / 1024, False) if peak >= 1024 else ("MiB", to_mib, False)
    if unit == "bytes/s":
        return "MiB/s", 2.0**-20, False
    return unit, 1.0, False


def _clock(run: Run) -> np.ndarray[Any, Any]:
    """Seconds since the first sample, per sample (monotonic clock, else wall time)."""
    import numpy as np

    monotonic = [math.nan if v is None else v for v in run.monotonic]
    wall = [math.nan if v is None else v for v in run.time]
    clock = np.array(monotonic if not any(v != v for v in monotonic) else wall, dtype=float)
    known = clock[~np.isnan(clock)]
    return clock - known[0] if known.size else np.arange(len(run), dtype=float)


GAP_INTERVALS = 10.0  # a gap this many median intervals long (and over GAP_S) ...
GAP_S = 5.0  # ... or a clock that goes back starts a new recording


def starts(run: Run) -> list[int]:
    """The first sample of each recording in ``run`` (several were appended to its file).

    From the recordings' ``run`` lines where the file has them; in a file written before
    those markers existed, guessed from the clock (:func:`segments`).
    """
    if not run.recordings:
        return segments(_clock(run))
    rec = run.recording
    return [0, *(j for j in range(1, len(rec)) if rec[j] != rec[j - 1])] if rec else [0]


def segments(seconds: np.ndarray[Any, Any]) -> list[int]:
    """The first sample of each recording in a run file without ``run`` lines: a guess.

    A recording starts where the clock goes back (another boot) or after a gap longer
    than ``GAP_INTERVALS`` median intervals and ``GAP_S`` seconds.
    """
    import numpy as np

    dt = np.diff(seconds)
    if not dt.size:
        return [0]
    known = dt[dt > 0]
    median = float(np.median(known)) if known.size else 0.0
    with np.errstate(invalid="ignore"):
        breaks = (dt <= 0) | (dt > max(GAP_INTERVALS * median, GAP_S))
    return [0, *(int(i) + 1 for i in np.flatnonzero(breaks))]


def series(run: Run) -> list[Series]:
    """The run's keys as :class:`Series`, grouped, in reading order (see the package)."""
    import numpy as np

    seconds = _clock(run)
    dt = np.diff(seconds)
    dt[[i - 1 for i in starts(run)[1:]]] = np.nan  # no rate across recordings
    out: list[Series] = []
    collapsed: dict[str, list[np.ndarray[Any, Any]]] = {}
    for key in sorted(run.columns):
        gpu = gpu_key(key)
        if gpu is not None and gpu.process and gpu.device_key in run.columns:
            continue  # gpu.process.{i}.x repeats gpu.{i}.x
        values = np.frombuffer(run.columns[key], dtype=float)
        found = describe(key)
        if found is not None and found[0].key in _COLLAPSED:
            collapsed.setdefault(found[0].key, []).append(values)
            continue
        unit, factor, rate = _display(key, values)
        total = None
        if rate:  # a counter: its increase over each interval, per second
            values, total = _rates(values, dt)
            total *= factor
        scaled = values if factor == 1 else values * factor
        label = key + _RSS_NOTE if key.startswith(_RSS) else key
        out.append(Series(group_of(key), label, unit, scaled, total))
    for family, columns in collapsed.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a sample with no core
            mean = np.nanmean(np.vstack(columns), axis=0)
        label = f"{family} (mean of {len(columns)})"  # both families are in %
        out.append(Series(group_of(family), label, "%", mean))
    out.sort(key=lambda s: (_group_order(s.group), s.label))
    return out


def _rates(
    values: np.ndarray[Any, Any], dt: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], float]:
    """A counter's rate over each interval, and its increase over the run.

    A rate is NaN where :func:`counter_rate` gives none, and for the first sample; the
    increase is the sum of the increases that have a rate.
    """
    import numpy as np

    found = [
        counter_rate(*interval)
        for interval in zip(values.tolist(), values[1:].tolist(), dt.tolist())
    ]
    ok = np.array([r is not None for r in found], dtype=bool)
    per_s = np.array([np.nan, *(np.nan if r is None else r for r in found)], dtype=float)
    return per_s, float(np.diff(values)[ok].sum())


@dataclass(frozen=True)
class Row:
    """One line of the summary table: mean, 95th percentile and peak, in ``unit``.

    ``total`` is a counter's increase over the run (the rates' integral), with its unit.
    """

    group: str
    label: str
    unit: str
    mean: float
    p95: float
    peak: float
    total: str = ""  # a counter's increase over the run, with its unit: "200 MiB"


def summary(all_series: Sequence[Series]) -> list[Row]:
    """Mean, p95 and peak of each series with a value (at most ``MAX_ROWS`` rows)."""
    import numpy as np

    rows = []
    for s in all_series:
        known = s.values[~np.isnan(s.values)]
        if known.size:
            p95 = float(np.percentile(known, 95))
            total = "" if s.total is None else f"{_number(s.total)} {s.total_unit}"
            mean, peak = float(known.mean()), float(known.max())
            rows.append(Row(s.group, s.label, s.unit, mean, p95, peak, total))
    return rows[:MAX_ROWS]


@dataclass(frozen=True)
class Axis:
    """The figures' x axis: one ``x`` per sample (NaN: not drawn) and its label."""

    x: np.ndarray[Any, Any]
    label: str
    left_out: int  # samples not drawn (before the first step)
    starts: tuple[int, ...] = (0,)  # the first sample of each recording (see starts())


def axis(run: Run) -> Axis:
    """The step axis where the run has steps that never go back; elapsed time otherwise.

    On the step axis a sample is placed by its time between the samples where a step was
    first seen, so slow steps spread their samples out instead of stacking them.
    """
    import numpy as np

    seconds = _clock(run)
    steps = np.array([math.nan if s is None else s for s in run.step], dtype=float)
    known = ~np.isnan(steps)
    if known.sum() >= 2 and np.all(np.diff(steps[known]) >= 0) and np.ptp(steps[known]) > 0:
        first = np.flatnonzero(known & np.concatenate(([True], steps[1:] != steps[:-1])))
        first = first[~np.isnan(seconds[first])]
        if first.size >= 2 and np.all(np.diff(seconds[first]) > 0):
            x = np.interp(seconds, seconds[first], steps[first])
            x[: first[0]] = np.nan
            return Axis(x, "step", int(first[0]), tuple(starts(run)))
    span = float(np.nanmax(seconds)) if len(seconds) else 0.0
    scale, unit = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
    return Axis(seconds / scale, f"elapsed time ({unit})", 0, tuple(starts(run)))


def _number(value: float) -> str:
    if value != value:
        return ""
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"
