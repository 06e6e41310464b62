"""Step anatomy: how long each training step took and how much of it waited for data.

Whoever sees the steps (a callback's hooks, :func:`sysmetrics.batches` and
:func:`sysmetrics.step` in a plain loop) marks them on a :class:`StepClock` on the
training thread; the clock keeps running totals (:class:`StepTotals`) and publishes them
once per optimizer step, as one tuple, so the sampling thread always reads a consistent
set. The monitor's :class:`StepCollector` turns the totals' growth since its previous
sample into the ``step.*`` keys, so every reader, sink and node gather carries them like
any machine key:

- ``step.seconds``: wall-clock seconds per optimizer step, the mean over the steps
  completed since the previous sample (readers weigh each sample by its steps, so a
  window's value is the mean over the steps completed in the window);
- ``step.dataWaitPercent``: the share of that time spent waiting for the next batch,
  0..100: where the callback times the training loop's fetch itself (it wraps the
  framework's train dataloader iterator: :meth:`StepClock.fetched`), that fetch only;
  elsewhere (a framework version without the wrapped attribute, an unknown loop) the
  whole time between one batch's hooks' end and the next one's start, as before;
- ``step.overheadPercent``: where the fetch is timed, the rest of the time between
  steps, 0..100: from one batch's hooks' end to the next one's start, less the fetch
  in it (other callbacks, the progress bar, logging, the framework's own work);
  absent where the fetch is not timed, and for a plain loop (which has no hooks);
- ``step.samplesPerSecond``: samples over the whole job per second, where the batch size
  is known;
- ``step.energyJoules``: energy per step, from the energy counters the monitor reads
  (``gpu.{i}.energyJoules``, ``cpu.energyJoules``, ``memory.energyJoules``), where there
  are any: the counters' growth between the samples that closed steps, over those steps;
- ``step.maxSeconds``: the longest of the steps completed since the previous sample
  (seconds), so that one slow step among many fast ones is not averaged away;
- ``step.slowPercent``: the share of those steps, 0..100, that took over
  :data:`SLOW_MULTIPLE` times the running median (the median of the previous samples'
  ``step.seconds``, the first sample's steps, the warm-up, left out); absent until there
  is a median (:data:`MEDIAN_SAMPLES` samples after the first).

The last two come from a clock in this process (the callbacks); a plain loop under
``sysmetrics record`` (the step file) has neither.

The clock sees only what the training thread sees: asynchronous accelerator work queued
by one step and finished during the next batch's fetch counts as waiting for data (the
callbacks never synchronise the accelerator).
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Optional

from typing_extensions import Protocol

from sysmetrics.collectors.base import BaseCollector
from sysmetrics.descriptions import weight
from sysmetrics.errors import SystemMetricsWarning


class StepTotals(NamedTuple):
    """Running totals of the optimizer steps a :class:`StepClock` has seen."""

    steps: int  # optimizer steps completed
    seconds: float  # wall-clock seconds those steps took, waits included
    wait: float  # seconds of that spent waiting for the next batch
    samples: float  # samples those steps trained on, whole job; 0.0 where unknown


_ZERO = StepTotals(0, 0.0, 0.0, 0.0)

SLOW_MULTIPLE = 3.0  # times: a step over this many times the running median is slow
MEDIAN_SAMPLES = 3  # samples with steps (after the first) before steps are judged slow
MEDIAN_WINDOW = 64  # the running median is of at most this many latest samples


class StepWindow(NamedTuple):
    """A :class:`StepClock`'s totals and its longest step since the reader's last claim.

    Published as one tuple, so that a reader gets the longest step of the very steps the
    totals grew by.
    """

    totals: StepTotals
    since: int  # the longest is of the steps after this many (the reader's last claim)
    longest: float  # s; NaN where unknown (more than one step ended unclaimed)
    slow: int  # steps so far over the clock's ``slow_above``
    # s: of the totals' seconds, spent between batches outside the fetch; NaN where the
    # clock's fetch is not :attr:`StepClock.timed`
    overhead: float = 0.0


_NO_WINDOW = StepWindow(_ZERO, 0, float("nan"), 0)


class RankKeys(Protocol):
    """The node's ranks' step keys, sampled with this process's (``arrival.RankBoard``)."""

    weights: dict[str, float]  # each key's weight in the latest sample

    def sample(self) -> dict[str, float]:
        """The keys since the previous sample."""


class StepClock:
    """Marks training steps on the training thread; a few hundred ns per mark.

    A callback calls :meth:`restart` where the training loop (re)starts (an epoch: the
    time outside it, a validation loop, is not a step's), :meth:`begin` where a batch's
    hooks start and :meth:`end` where they end. Where the callback also times the loop's
    fetch of each batch (:meth:`fetched`, with :attr:`timed` set), the fetch is the wait
    and the rest of the time from one :meth:`end` to the next :meth:`begin` is overhead;
    otherwise all that time is waiting for data. A plain loop adds its waits with
    :meth:`waited` instead of :meth:`begin`. With gradient accumulation each micro-batch is a
    begin/end pair, and only the one that closes the optimizer step passes
    ``optimizer_step=True``: the step's time runs from the previous optimizer step's end
    (or the restart) and its wait is all its micro-batches' waits.

    Args:
        clock: seconds on a monotonic clock (``time.perf_counter``); for tests.

    """

    __slots__ = (
        "_clock",
        "_fetch",
        "_last",
        "_mark",
        "_origin",
        "_over",
        "_samples",
        "_wait",
        "begun",
        "claimed",
        "peers",
        "slow_above",
        "timed",
        "totals",
        "window",
    )

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.totals = _ZERO  # published once per optimizer step, one tuple
        self.window = _NO_WINDOW  # the same totals with the longest step, one tuple
        self.claimed = 0  # set by the reader: the steps it has read (the next window's start)
        self.slow_above = float("inf")  # s, set by the reader: a longer step is slow
        self._last = float("nan")  # s: the previous optimizer step's length
        self._origin: float | None = None  # the previous optimizer step's end (or restart)
        self._mark: float | None = None  # the previous batch's end (or restart)
        self._wait = 0.0  # seconds waited in the optimizer step under way
        self._over = 0.0  # seconds between its batches outside the fetch
        self._fetch = 0.0  # seconds fetched since the previous batch's end (or restart)
        self._samples = 0.0  # samples of the optimizer step under way
        # Set by the callback that times the loop's fetch (:meth:`fetched`) for the whole
        # run; else the time between batches is all waiting, and there is no overhead.
        self.timed = False
        # For sysmetrics.arrival: the latest batch's start (s), and the node's ranks'
        # step keys, which the step collector adds to this clock's (a RankBoard).
        self.begun: float | None = None
        self.peers: RankKeys | None = None

    @property
    def origin(self) -> float | None:
        """When the optimizer step under way started (s): the previous one's end, or the restart."""
        return self._origin

    def restart(self) -> None:
        """The training loop starts (again): the next step's time runs from now."""
        self._origin = self._mark = self._clock()
        self._wait = self._over = self._fetch = 0.0
        self._samples = 0.0

    def begin(self) -> None:
        """A batch's hooks start: the time since the previous batch's end was between steps.

        Where :attr:`timed`, the fetch in it (:meth:`fetched`) was waiting and the rest
        overhead; otherwise all of it was waiting.
        """
        now = self.begun = self._clock()
        mark = self._mark
        if mark is not None:
            self._mark = None  # inside the batch's hooks until its end
            gap = now - mark
            if self.timed:
                fetch = self._fetch if self._fetch < gap else gap
                self._wait += fetch
                self._over += gap - fetch
                self._fetch = 0.0
            else:
                self._wait += gap
        elif self._origin is None:  # never restarted: this step is timed from here
            self._origin = now

    def fetched(self, seconds: float) -> None:
        """The loop took ``seconds`` to fetch a batch (the callback's wrapped iterator).

        Between batches it is set against that time (:meth:`begin`); inside a batch's
        hooks (a loop that fetches in its step function) it is waiting outright.
        """
        if self._mark is not None:
            self._fetch += seconds
        else:
            self._wait += seconds

    def waited(self, seconds: float) -> None:
        """Add ``seconds`` waited for the next batch (a plain loop's ``next()``)."""
        self._wait += seconds
        if self._origin is None:
            self._origin = self._clock() - seconds

    def end(self, samples: float = 0.0, optimizer_step: bool = True) -> None:
        """A batch's hooks end, ``samples`` of the whole job trained; publish a whole step.

        A step with no origin (the first :func:`sysmetrics.step` of a loop never
        restarted) only starts the timing of the next one.
        """
        now = self._clock()
        self._mark = now
        self._samples += samples
        if not optimizer_step:
            return
        origin = self._origin
        self._origin = now
        if origin is not None:
            t = self.totals
            seconds = now - origin
            self.totals = totals = StepTotals(
                t.steps + 1,
                t.seconds + seconds,
                t.wait + self._wait,
                t.samples + self._samples,
            )
            w = self.window
            claimed = self.claimed
            if claimed == w.since:  # the same window: the longest so far
                longest = seconds if not w.longest >= seconds else w.longest
            elif claimed == t.steps:  # a new window, this its first step
                longest = seconds
            elif claimed == t.steps - 1:  # the step before also ended after the claim
                longest = max(seconds, self._last)
            else:
                longest = float("nan")
            self._last = seconds
            slow = w.slow + (seconds > self.slow_above)
            over = w.overhead + self._over if self.timed else float("nan")
            self.window = StepWindow(totals, claimed, longest, slow, over)
        self._wait = self._over = 0.0
        self._samples = 0.0

    def read(self) -> StepTotals:
        """The totals published so far (any thread)."""
        return self.totals

    def read_window(self) -> StepWindow:
        """The totals with the longest step since the last :attr:`claimed` (any thread)."""
        return self.window


class TimedIterator:
    """An iterator's items, each ``next()`` timed on a clock (:meth:`StepClock.fetched`).

    What a callback puts in place of the training loop's iterator over the train
    dataloader, so that the clock knows the fetch from the rest of the time between
    steps; under 1 µs a batch (``benchmarks/fetch_cost.py``). Any other attribute is the
    wrapped iterator's.
    """

    __slots__ = ("_clock", "_it")

    def __init__(self, it: Iterator[Any], clock: StepClock) -> None:
        self._it = it
        self._clock = clock

    def __iter__(self) -> TimedIterator:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        try:
            return next(self._it)
        finally:
            self._clock.fetched(time.perf_counter() - start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._it, name)


class FetchTimer:
    """A fetch timed by two calls: :meth:`before` and :meth:`after` it, on a clock.

    For a loop that calls hooks around its fetch (Lightning's data fetcher).
    """

    __slots__ = ("_clock", "_start")

    def __init__(self, clock: StepClock) -> None:
        self._clock = clock
        self._start = float("nan")

    def before(self) -> None:
        """The fetch starts."""
        self._start = time.perf_counter()

    def after(self) -> None:
        """The fetch ended (a batch, or the end of the data): tell the clock its time."""
        start, self._start = self._start, float("nan")
        if start == start:
            self._clock.fetched(time.perf_counter() - start)


TotalsSource = Callable[[], Optional[StepTotals]]
"""Where a monitor reads step totals (``monitor.step_timing``): a clock's ``read``, or
the recorder's reader of the step file. None: no totals (yet)."""

ENERGY_SUFFIX = ".energyJoules"  # the energy counters step.energyJoules is made of
ENERGY_KEY = "step.energyJoules"  # not a counter: energy per step
OVERHEAD_KEY = "step.overheadPercent"  # between steps outside the fetch (timed clocks)


class StepCollector(BaseCollector):
    """The ``step.*`` keys, from the growth of a :data:`TotalsSource` between samples.

    The monitor samples it last in each tick, after giving it the tick's energy
    counters (:meth:`observe`); it reports nothing at a sample that closed no step
    (nothing stale at a new point), and :attr:`closed` says how many steps its latest
    sample stands for (None: it reported nothing), by which the monitor's readers weigh
    it and which the run file records with the sample (``steps``).

    :attr:`weights` holds, for each key of the latest sample, what it counts in a
    window's mean: its :attr:`~sysmetrics.descriptions.Description.weight` (steps, or
    those steps' seconds) made a number.
    """

    name = "steps"

    def __init__(self, source: Callable[[], Optional[TotalsSource]]) -> None:
        self._source = source  # -> the monitor's current step_timing
        self._current: TotalsSource | None = None
        self._prev = _ZERO
        self._energy: dict[str, float] = {}  # this tick's energy counters, J
        self._energy_prev: dict[str, float] | None = None  # at the previous emission
        self._slow_prev = 0  # the clock's slow steps at the previous emission
        self._over_prev = 0.0  # the clock's overhead seconds at the previous emission
        self._judged = False  # whether the clock judged slow steps since then
        self._means: deque[float] = deque(maxlen=MEDIAN_WINDOW)  # step.seconds, the first out
        self._emitted = 0  # samples emitted from this source
        self.weights: dict[str, float] = {}
        self.closed: int | None = None  # the steps the latest sample stands for (None: none)

    def observe(self, values: Mapping[str, float]) -> None:
        """Take this tick's energy counters out of the other collectors' values."""
        self._energy = {
            k: v for k, v in values.items() if k.endswith(ENERGY_SUFFIX) and k != ENERGY_KEY
        }

    def sample(self) -> dict[str, float]:
        """The mean step over the steps completed since the previous sample; {} if none.

        With the clock's :attr:`StepClock.peers`, every rank's keys of the node too.
        """
        self.weights, self.closed = {}, None
        out = self._sample_here()
        owner = getattr(self._current, "__self__", None)
        peers = owner.peers if isinstance(owner, StepClock) else None
        if peers is not None:
            out.update(peers.sample())
            self.weights.update(peers.weights)
        return out

    def _sample_here(self) -> dict[str, float]:
        source = self._source()
        if source is not self._current:  # a new clock: its totals count from zero
            self._current = source
            self._prev = _ZERO
            self._energy_prev = dict(self._energy)
            self._slow_prev, self._judged, self._emitted = 0, False, 0
            self._over_prev = 0.0
            self._means.clear()
        owner = getattr(source, "__self__", None)
        clock = owner if isinstance(owner, StepClock) else None
        window = clock.read_window() if clock is not None else None
        totals = window.totals if window is not None else source() if source is not None else None
        if totals is None:
            return {}
        prev = self._prev
        steps = totals.steps - prev.steps
        seconds = totals.seconds - prev.seconds
        if steps <= 0 or seconds <= 0.0:
            return {}
        self._prev = totals
        self.closed = steps
        out = {
            "step.seconds": seconds / steps,
            "step.dataWaitPercent": 100.0 * (totals.wait - prev.wait) / seconds,
        }
        samples = totals.samples - prev.samples
        if samples > 0.0:
            out["step.samplesPerSecond"] = samples / seconds
        energy, before = self._energy, self._energy_prev
        if energy and before is not None and energy.keys() == before.keys():
            joules = sum(energy.values()) - sum(before.values())
            if joules >= 0.0:
                out["step.energyJoules"] = joules / steps
        self._energy_prev = dict(energy)
        if clock is not None and window is not None:
            self._slowest(clock, window, prev, out)
        # Each key weighs as its description says: by these steps, or by their seconds.
        by = {"steps": float(steps), "step_seconds": seconds, "sample": 1.0}
        self.weights = {key: by[weight(key)] for key in out}
        return out

    def _slowest(
        self, clock: StepClock, window: StepWindow, prev: StepTotals, out: dict[str, float]
    ) -> None:
        """Add ``step.overheadPercent``, ``step.maxSeconds`` and ``step.slowPercent``.

        Then claim the steps read, and judge slow steps.
        """
        steps = window.totals.steps - prev.steps
        overhead = window.overhead - self._over_prev  # NaN: the fetch is not timed
        self._over_prev = window.overhead
        if overhead == overhead:
            out[OVERHEAD_KEY] = 100.0 * overhead / (window.totals.seconds - prev.seconds)
        if window.since == prev.steps and window.longest == window.longest:
            out["step.maxSeconds"] = window.longest
        if self._judged:
            out["step.slowPercent"] = 100.0 * (window.slow - self._slow_prev) / steps
        self._slow_prev = window.slow
        clock.claimed = window.totals.steps  # the next window starts after these
        self._emitted += 1
        if self._emitted > 1:  # the first sample's steps are the warm-up: no median's
            self._means.append(out["step.seconds"])
        if len(self._means) >= MEDIAN_SAMPLES:
            clock.slow_above = SLOW_MULTIPLE * statistics.median(self._means)
            self._judged = True


def batch_size(batch: object) -> int | None:
    """The number of samples in ``batch``: the first dimension of its first array.

    Looks into tuples, lists and dicts (first entry) at most 4 levels deep for something
    with a ``shape`` (a tensor, an array) or, failing that, a length; None where there
    is neither.
    """
    for _ in range(4):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else None
            except (TypeError, ValueError, IndexError):
                return None
        if isinstance(batch, (tuple, list)):
            if not batch:
                return None
            batch = batch[0]
        elif isinstance(batch, dict):
            if not batch:
                return None
            batch = next(iter(batch.values()))
        else:
            break
    try:
        return len(batch)  # type: ignore[arg-type]
    except TypeError:
        return None


class BatchSizer:
    """:func:`batch_size` that never raises into the training loop.

    A batch whose ``shape`` or ``len`` raises (a torch nested tensor: ``RuntimeError``)
    counts no samples; the first such batch warns once (per sizer: one per
    ``sysmetrics.batches()`` process, one per callback).

    Args:
        said: the warning's first words, naming what counts the samples
            (``sysmetrics: sysmetrics.batches() cannot find the size of a batch``).
        hint: what the user may do, the warning's last words.

    """

    __slots__ = ("_hint", "_said", "failed")

    def __init__(self, said: str, hint: str = "") -> None:
        self._said = said
        self._hint = hint
        self.failed = False  # whether a batch could not be sized (and it was said)

    def __call__(self, batch: object, stacklevel: int = 2) -> int | None:
        """The samples in ``batch``, or None (it has no size, or finding it failed).

        ``stacklevel``: the warning's line, as ``warnings.warn`` counts it from the caller
        (2: the line that called the caller).
        """
        try:
            return batch_size(batch)
        except Exception as exc:  # any error of the batch's own: it must not reach the loop
            if not self.failed:
                self.failed = True
                warnings.warn(
                    f"{self._said} ({type(batch).__name__}: {exc!r}"[:300]
                    + "); such batches count no samples"
                    + (f" ({self._hint})" if self._hint else ""),
                    SystemMetricsWarning,
                    stacklevel=stacklevel + 1,
                )
            return None
