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

from sysmetrics.descriptions import describe, family, gpu_key, split_node, weight
from sysmetrics.findings import STALL_SECONDS, STALL_STEP_TIMES
from sysmetrics.findings.training import STALL
from sysmetrics.runfile import Run
from sysmetrics.runview import GAP_INTERVALS as GAP_INTERVALS
from sysmetrics.runview import GAP_S as GAP_S
from sysmetrics.runview import RunView, Stretch
from sysmetrics.runview import segments as segments
from sysmetrics.weights import weighted_mean

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
_ORDER = ("Training", "CPU", "Memory", "GPU", "Disk", "Network", "Energy")
TRAINING = "Training"  # the group of the step.* keys (sysmetrics.steptime), drawn first


# The job's RSS sums its processes' (W&B's meaning): not the job's memory where PSS is there.
_RSS, _PSS = "proc.memory.rssMB", "proc.memory.pssMB"
_RSS_NOTE = " (shared pages counted once per process)"


def group_of(key: str) -> str:
    """The group a key is summarised and drawn in: ``"Training"``, ``"CPU"``, ``"GPU 0"``, ....

    By the key's family (:func:`~sysmetrics.descriptions.family`), not its name:
    ``step.*`` keys are ``"Training"`` (``step.energyJoules`` too: a gauge, J per step),
    energy counters (J) ``"Energy"``.
    """
    gpu = gpu_key(key)
    if gpu is not None:
        return f"GPU {gpu.i}"
    found = family(key.removesuffix(".max")) or family(key)
    if found is not None and found.key.startswith("step."):
        return TRAINING
    if found is not None and found.kind == "counter" and found.unit == "J":
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


class Series:
    """One thing to summarise and draw: ``values`` in ``unit``, one per sample (NaN: none).

    For a counter ``values`` are its rates and ``total`` its increase over the run.
    ``mean`` is the mean of a key not averaged by sample (``step.*`` keys, by steps or
    their seconds: :func:`sysmetrics.weights.weighted_mean`); None: the values' mean. A
    series with values in fewer than half the samples (a key that came and went) keeps
    only those values and their samples: ``values`` is made at each read, so a report of
    10,000 such keys holds what the run file holds, not keys x samples x 8 bytes.
    """

    __slots__ = ("_index", "_n", "_values", "group", "label", "mean", "present", "total", "unit")

    def __init__(
        self,
        group: str,
        label: str,
        unit: str,
        values: np.ndarray[Any, Any],
        total: Optional[float] = None,  # a counter's increase over the run, in ``total_unit``
        mean: Optional[float] = None,  # weighted as the key's description says
    ) -> None:
        import numpy as np

        self.group, self.label, self.unit = group, label, unit
        self.total, self.mean = total, mean
        values = np.asarray(values, dtype=float)
        has = ~np.isnan(values)
        self._n = len(values)
        self.present = int(np.count_nonzero(has))  # samples with a value
        self._index: Optional[np.ndarray[Any, Any]] = None
        if 2 * self.present >= len(values):
            self._values = values
        else:
            self._index = np.flatnonzero(has)
            self._values = values[has]

    @property
    def values(self) -> np.ndarray[Any, Any]:
        """One value per sample, NaN where the sample has none."""
        import numpy as np

        if self._index is None:
            return self._values
        out = np.full(self._n, np.nan)
        out[self._index] = self._values
        return out

    @property
    def total_unit(self) -> str:
        """The unit of ``total``: the rate's unit times seconds (W: J)."""
        return "J" if self.unit == "W" else self.unit.removesuffix("/s")

    def known(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The values present, and the samples they are at (no NaN)."""
        import numpy as np

        if self._index is not None:
            return self._values, self._index
        at = np.flatnonzero(~np.isnan(self._values))
        return self._values[at], at

    def __repr__(self) -> str:
        return f"Series({self.group!r}, {self.label!r}, {self.unit!r}, {self._n} samples)"


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


def starts(run: Run) -> list[int]:
    """The first sample of each recording in ``run`` (several were appended to its file).

    From the recordings' ``run`` lines where the file has them; in a file written before
    those markers existed, guessed from the clock (:func:`segments`): the view's
    (:attr:`RunView.starts <sysmetrics.runview.RunView.starts>`).
    """
    return RunView(run).starts


def timing(run: Run) -> tuple[float, Optional[float]]:
    """The run's duration and its interval, in s (:attr:`RunView.duration`, ``.interval``).

    The duration is its recordings' without the gaps between them, the interval the median
    time between two samples of a recording (None with fewer than 2).
    """
    seen = RunView(run)
    return seen.duration, seen.interval


def series(run: Run, seen: Optional[RunView] = None) -> list[Series]:
    """The run's keys as :class:`Series`, grouped, in reading order (see the package).

    ``seen`` is the run's view where the caller has it: its clock and recordings give
    each counter's rate (vectorized: the rule of :func:`counter_rate`).
    """
    import numpy as np

    seen = RunView(run) if seen is None else seen
    seconds = _seconds(seen)
    dt = np.diff(seconds)
    dt[[i - 1 for i in seen.starts[1:]]] = np.nan  # no rate across recordings
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
        mean = None
        if factor == 1 and not rate and weight(key) != "sample":  # step keys: by steps
            mean = weighted_mean(run, key)
        out.append(Series(group_of(key), label, unit, scaled, total, mean))
    for collapsed_key, columns in collapsed.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a sample with no core
            mean = np.nanmean(np.vstack(columns), axis=0)
        label = f"{collapsed_key} (mean of {len(columns)})"  # both families are in %
        out.append(Series(group_of(collapsed_key), label, "%", mean))
    out.sort(key=lambda s: (_group_order(s.group), s.label))
    return out


def _rates(
    values: np.ndarray[Any, Any], dt: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], float]:
    """A counter's rate over each interval, and its increase over the run.

    A rate is NaN where :func:`counter_rate` gives none, and for the first sample; the
    increase is the sum of the increases that have a rate. Vectorized: the same rule as
    :func:`counter_rate` (``tests/test_report.py`` holds them to the same values).
    """
    import numpy as np

    rise = np.diff(values)
    with np.errstate(invalid="ignore"):  # NaN compares false, as in counter_rate
        ok = (dt[: len(rise)] > 0) & (rise >= 0)
    per_s = np.full(len(values), np.nan)
    per_s[1:][ok] = rise[ok] / dt[: len(rise)][ok]
    return per_s, float(rise[ok].sum())


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
    total_value: Optional[float] = None  # the same as a number, in ``total_unit``
    total_unit: str = ""


def summary(all_series: Sequence[Series]) -> list[Row]:
    """Mean, p95 and peak of each series with a value (at most ``MAX_ROWS`` rows).

    The mean of a series with its own ``mean`` (``step.*``) is that one: over the steps
    (or their seconds), as the monitor's readers and the findings give it
    (:func:`sysmetrics.weights.weighted_mean`); p95 and peak are over samples.
    """
    import numpy as np

    rows: list[Row] = []
    for s in all_series:
        if len(rows) == MAX_ROWS:
            break
        known, _ = s.known()
        if known.size:
            p95 = float(np.percentile(known, 95))
            total = "" if s.total is None else f"{_number(s.total)} {s.total_unit}"
            mean, peak = float(known.mean()), float(known.max())
            if s.mean is not None and s.mean == s.mean:  # NaN: no sample had a weight
                mean = s.mean
            unit = "" if s.total is None else s.total_unit
            rows.append(Row(s.group, s.label, s.unit, mean, p95, peak, total, s.total, unit))
    return rows[:MAX_ROWS]


# The stall rule's thresholds (their home is sysmetrics.findings; the view's one detector
# reads them), so the stretches drawn as stalls are the ones the findings call stalls.
STALL_S = STALL_SECONDS  # s without a new step (or a share of the recording, see the rule)
STALL_FACTOR = STALL_STEP_TIMES  # ... and this many times the run's median s per step
STALL_MIN_WIDTH = 0.05  # a stall is drawn at least this share of the steps' range wide ...
STALL_MAX_WIDTH = 0.25  # ... and at most this share (on the step axis)
MAX_STALLS_SAID = 10  # stalls said in words (page) and labelled (figures) at most: the longest


@dataclass(frozen=True)
class Stall:
    """A stretch without a new step (see :func:`axis`), as the page and figures show it.

    From sample ``first``, where step ``step`` was first seen, to sample ``last``, where
    the next step was first seen (``next_step``), or the last sample where the run ended
    stalled (``next_step`` None). ``seconds`` is the time between the two samples,
    ``start`` that of ``first`` after the run's first sample; ``x0`` and ``x1`` are where
    the stretch is on the figures' x axis.
    """

    first: int
    last: int
    step: int
    next_step: Optional[int]
    seconds: float
    start: float
    x0: float
    x1: float

    @property
    def ended(self) -> bool:
        """Whether the run ended while stalled (no later step)."""
        return self.next_step is None


def longest(stalls: Sequence[Stall]) -> list[Stall]:
    """The ``MAX_STALLS_SAID`` longest of ``stalls``, in the run's order."""
    chosen = sorted(stalls, key=lambda s: -s.seconds)[:MAX_STALLS_SAID]
    return sorted(chosen, key=lambda s: s.first)


@dataclass(frozen=True)
class Axis:
    """The figures' x axis: one ``x`` per sample (NaN: not drawn) and its label.

    ``left_out`` samples before the first step and ``after`` samples of the idle tail
    after the last step are not drawn (step axis); ``stalls`` are the stretches without a
    new step, on either axis. ``shifts`` (step axis) are the widths added at each stall
    (after its step), for :meth:`at_step`; ``steps`` and ``epoch`` are each sample's step
    and time (s since the epoch; NaN where unknown), to place spans.
    """

    x: np.ndarray[Any, Any]
    label: str
    left_out: int  # samples not drawn (before the first step)
    starts: tuple[int, ...] = (0,)  # the first sample of each recording (see starts())
    stalls: tuple[Stall, ...] = ()
    after: int = 0  # samples not drawn (the idle tail after the last step)
    shifts: tuple[tuple[float, float], ...] = ()  # (step, width added after it)
    steps: Optional[np.ndarray[Any, Any]] = None
    epoch: Optional[np.ndarray[Any, Any]] = None

    @property
    def is_step(self) -> bool:
        """Whether this is the step axis."""
        return self.label == "step"

    def at_step(self, step: float) -> float:
        """Where step ``step`` is on this axis (NaN where the run never reached it)."""
        import numpy as np

        if self.is_step:
            return step + sum(width for at, width in self.shifts if step > at)
        if self.steps is None:
            return math.nan
        with np.errstate(invalid="ignore"):
            reached = np.flatnonzero(self.steps >= step)
        return float(self.x[reached[0]]) if reached.size else math.nan

    def at_time(self, when: float) -> float:
        """Where the time ``when`` (s since the epoch) is on this axis (NaN: unknown)."""
        import numpy as np

        if self.epoch is None:
            return math.nan
        known = ~np.isnan(self.epoch) & ~np.isnan(self.x)
        if not known.any() or not self.epoch[known][0] <= when <= self.epoch[known][-1]:
            return math.nan
        return float(np.interp(when, self.epoch[known], self.x[known]))


AXES = ("step", "time")  # what --x chooses from


def axis(run: Run, x: str = "step", seen: Optional[RunView] = None) -> Axis:
    """The step axis where the run has steps that never go back, elapsed time otherwise.

    ``x="time"`` asks for elapsed time whatever the run has; ``seen`` is the run's view
    where the caller has it. On the step axis a sample is placed by its time between the
    samples where a step was first seen, so slow steps spread their samples out instead
    of stacking them. The stalls (:class:`Stall`, on either axis) are the view's
    (:meth:`RunView.stalls <sysmetrics.runview.RunView.stalls>` at the ``stall`` rule's
    thresholds: the stretches the findings call stalls): on the step axis each gets a
    width of its own (its seconds over the run's median seconds per step, between
    ``STALL_MIN_WIDTH`` and ``STALL_MAX_WIDTH`` of the steps' range), its samples spread
    over it by time, instead of being squeezed into one step; so does a run that ends
    stalled. A tail after the last step that is no stall (the run winding down) is not
    drawn on the step axis: only its first median step's time, the last step's own.
    """
    import numpy as np

    if x not in AXES:
        raise ValueError(f"x={x!r} is invalid: use one of {', '.join(AXES)}")
    seen = RunView(run) if seen is None else seen
    seconds = _seconds(seen)
    begins = tuple(seen.starts)
    steps = np.array([math.nan if s is None else s for s in run.step], dtype=float)
    epoch = np.array([math.nan if t is None else t for t in run.time], dtype=float)
    stalls = seen.stalls(STALL)
    found = _steps_seen(seen, seconds, steps)
    if found is not None and x == "step":
        return _step_axis(seconds, steps, epoch, begins, stalls, *found)
    span = float(np.nanmax(seconds)) if len(seconds) else 0.0
    scale, unit = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
    timed = seconds / scale
    placed = _stalls(stalls, seconds, timed)
    return Axis(timed, f"elapsed time ({unit})", 0, begins, placed, 0, (), steps, epoch)


def _seconds(seen: RunView) -> np.ndarray[Any, Any]:
    """Seconds since the first sample, per sample, on the view's clock (:attr:`RunView.clock`)."""
    import numpy as np

    clock = np.array([math.nan if v is None else v for v in seen.clock], dtype=float)
    known = clock[~np.isnan(clock)]
    return clock - known[0] if known.size else np.arange(len(seen), dtype=float)


def _steps_seen(
    seen: RunView, seconds: np.ndarray[Any, Any], steps: np.ndarray[Any, Any]
) -> Optional[tuple[np.ndarray[Any, Any], float]]:
    """Where steps were first seen (the view's stretches) and the median s per step.

    None where the run has no step axis: fewer than two steps, steps that go back, or a
    clock that does not advance from one first-seen step to the next.
    """
    import numpy as np

    known = ~np.isnan(steps)
    if known.sum() < 2 or not np.all(np.diff(steps[known]) >= 0) or np.ptp(steps[known]) <= 0:
        return None
    first = np.array(sorted({s.first for s in seen.stretches}), dtype=int)
    if first.size < 2 or not np.all(np.diff(seconds[first]) > 0):
        return None
    per_step = seen.pace_median
    if per_step is None:
        dt, ds = np.diff(seconds[first]), np.diff(steps[first])
        per_step = float(np.median(dt / np.where(ds > 0, ds, 1.0)))
    return first, per_step


def _stalls(
    stalls: Sequence[Stretch], seconds: np.ndarray[Any, Any], x: np.ndarray[Any, Any]
) -> tuple[Stall, ...]:
    """The view's stalls, placed at ``x`` on the figures' axis."""
    return tuple(
        Stall(
            s.first,
            s.end,
            s.step,
            s.next_step,
            s.seconds,
            float(seconds[s.first]),
            float(x[s.first]),
            float(x[s.end]),
        )
        for s in stalls
    )


def _step_axis(
    seconds: np.ndarray[Any, Any],
    steps: np.ndarray[Any, Any],
    epoch: np.ndarray[Any, Any],
    begins: tuple[int, ...],
    stalls: Sequence[Stretch],
    first: np.ndarray[Any, Any],
    per_step: float,
) -> Axis:
    import numpy as np

    pairs = {(s.first, s.end) for s in stalls if not s.ended}
    stalled = [(int(a), int(b)) in pairs for a, b in zip(first, first[1:])]
    tail = any(s.ended and s.first == int(first[-1]) for s in stalls)
    t, s = seconds[first], steps[first]
    extent = max(1.0, float(s[-1] - s[0]))

    def width(duration: float) -> float:
        wide = duration / per_step if per_step > 0 else math.inf
        return min(max(wide, STALL_MIN_WIDTH * extent), STALL_MAX_WIDTH * extent)

    knots_x = [float(s[0])]
    shifts = []
    for i in range(len(first) - 1):
        ds = float(s[i + 1] - s[i])
        extra = max(0.0, width(float(t[i + 1] - t[i])) - ds) if stalled[i] else 0.0
        if extra:
            shifts.append((float(s[i]), extra))
        knots_x.append(knots_x[-1] + ds + extra)
    knots_t = list(t)
    if tail:  # the run ended stalled: the tail gets its width
        end = float(np.nanmax(seconds))
        knots_t.append(end)
        knots_x.append(knots_x[-1] + width(end - float(t[-1])))
        cut = end
    else:  # the last step's own time, not the run winding down after it
        cut = float(t[-1]) + per_step
        knots_t.append(cut)
        knots_x.append(knots_x[-1] + 1.0)
    x = np.interp(seconds, knots_t, knots_x)
    x[: first[0]] = np.nan
    with np.errstate(invalid="ignore"):
        beyond = seconds > cut
    x[beyond] = np.nan
    x[np.isnan(seconds)] = np.nan
    placed = _stalls(stalls, seconds, x)
    return Axis(x, "step", int(first[0]), begins, placed, int(beyond.sum()), tuple(shifts),
                steps, epoch)  # fmt: skip


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    h, rest = divmod(round(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{seconds:.1f} s"


def _number(value: float) -> str:
    if value != value:
        return ""
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"
