"""Findings told live: the rules of :mod:`sysmetrics.findings` run during training.

:class:`LiveFindings` keeps a buffering reader of a monitor, keeps its samples in a
bounded store of columns (:class:`_Store`) on a daemon thread of its own
(``sysmetrics-findings``), runs :func:`sysmetrics.findings.findings` over a
:class:`~sysmetrics.runfile.Run` built afresh from the store: first as soon as there is
enough evidence (the samples span ``LIVE_MIN_STEPS`` steps and ``LIVE_MIN_SECONDS`` s),
or ``LIVE_FIRST`` s after it started where that comes first (a run without steps), then
every ``LIVE_EVERY`` s, but never sooner than ``LIVE_COST_RATIO`` times the previous
evaluation's CPU time after it (at most 1 % of one core on average), and once more when
closed,
and says each finding once per run, in one line (``sysmetrics: `` and the finding's
sentence), through the ``say`` it is given: the framework's own logging in the
callbacks, standard error under ``sysmetrics record``.

A finding is said once per ``(rule, subject)`` (its code and its typed
:class:`~sysmetrics.findings.Subject`: a GPU, a node, a stall's first step; None for the
run as a whole): a later finding with the same pair is the same finding, whatever its
sentence says now (a longer span, a higher share, another likely cause); a second stall
starts at another step, so it is another. Nothing reads the sentences back. The rules
whose declaration says ``live=False`` (``unused-gpu``, ``slow-steps``, ``memory-creep``:
only the whole run decides them) are not said live.

Memory. The store keeps, per key, an ``array('d')`` of values aligned with shared time,
monotonic-clock, step and weight columns (the keys interned). It keeps at most
``LIVE_MAX_KEYS`` distinct keys (a new key beyond it is not kept: one
:class:`~sysmetrics.SystemMetricsWarning`), and at most ``LIVE_MAX_VALUES`` values (rows
times keys, 8 bytes each: about 3 MiB) and ``LIVE_MAX_ROWS`` rows. Beyond either, keys
seen in fewer than ``LIVE_FORGET_SEEN`` samples and none of the latest
``LIVE_FORGET_ROWS`` rows (a label value that changed) are forgotten, and if that is not
enough the older half of the rows is folded in pairs: gauges averaged (weighted by the
samples each row holds; the ``step.*`` keys by what their descriptions weigh them by,
the steps each row closed or those steps' seconds, :func:`~sysmetrics.weights.row_weights`,
so a fold keeps their means), counters (``descriptions.aggregation`` ``last``) keep the later
value, so their rates stay right, ``.max`` keys keep the larger, time, clock and step
are the later row's. Recent samples stay at full resolution, older ones get coarser: a
day at 1 s of 60 keys is about 6,400 rows, 3.1 MiB; of 400 keys, 900 rows, 2.9 MiB. A
rule that counts samples counts a folded row once; counters the monitor does not know
as such (a custom collector's ``last_keys``, undescribed) are averaged like gauges.
Each evaluation reads a new :class:`~sysmetrics.runfile.Run` built from the store
(nothing cached on a growing run), at most ``LIVE_MAX_VALUES`` values too.

Cost. The thread runs at the lowest priority (nice 19, on Linux, where a thread can have
its own), and while it folds or evaluates (not while it adds samples) it runs about
``LIVE_SLICE`` s of its CPU time at a time (one C call, a ``sorted``, may run longer)
and then sleeps, so that it runs at most ``LIVE_DUTY`` of the wall time: a training loop
on the main thread was blocked on the interpreter's lock 0.5-1.6 % of the time while
evaluations ran, 30 % beside the same evaluations unthrottled (which cut its step rate
to 0.46; ``benchmarks/live_findings.py``, ``docs/performance.md``).
It does so through a profile function of its own thread (``sys.setprofile`` there only;
the process's switch interval and the other threads are untouched), which makes an
evaluation cost about 5x its CPU time (a 24 h store of 60 keys: about 1.2 s, over about
a minute); with ``LIVE_COST_RATIO`` that is at most about 1 % of one core on average.
Once :meth:`close` is called the function removes itself, so an evaluation under way
ends at full speed. An evaluation that takes more than ``LIVE_BUDGET`` s of the thread's
CPU time is stopped, and the announcing with it, with one
:class:`~sysmetrics.SystemMetricsWarning`. Any error in the rules or in ``say`` stops
the announcing with one :class:`~sysmetrics.SystemMetricsWarning`; training never sees
it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
import warnings
from array import array
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Optional

from sysmetrics.descriptions import Weight, aggregation, split_node, weight
from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Sample
from sysmetrics.runfile import Recording, Run, finite
from sysmetrics.weights import row_weights

if TYPE_CHECKING:
    from sysmetrics.findings import Finding

LIVE_EVERY = 10.0  # s between two evaluations of the rules at least ...
LIVE_COST_RATIO = 100.0  # ... and this many times the last one's CPU s: 1 % of a core
LIVE_MIN_STEPS = 30  # steps the samples span and ...
LIVE_MIN_SECONDS = 10.0  # ... s they span: enough evidence for the first evaluation ...
LIVE_FIRST = 20.0  # ... else this many s after the start (a run without steps)
LIVE_MAX_VALUES = 400_000  # rows times keys kept at most (8 bytes a value: about 3 MiB)
LIVE_MAX_ROWS = 20_000  # rows kept at most; beyond either bound the older half is folded
LIVE_MAX_KEYS = 1_000  # distinct keys kept at most; a new key beyond it is not kept
LIVE_FORGET_SEEN = 5  # a key seen in fewer samples than this ...
LIVE_FORGET_ROWS = 64  # ... and in none of the latest this many rows is forgotten when full
LIVE_SLICE = 0.001  # s the thread holds the interpreter at most before it sleeps ...
LIVE_DUTY = 0.02  # ... so that it runs at most this share of the wall time
LIVE_BUDGET = 10.0  # s of the thread's CPU one evaluation may take; beyond it, off
LIVE_BUFFER = 4096  # samples the reader buffers between two drains
CLOSE_WAIT = 2.0  # s close() waits for the last evaluation
MAX_LINE = 400  # characters of one announced line at most

PREFIX = "sysmetrics: "

_NAN = math.nan
_NO_STEP = -(2**63)  # the step column's "no step" (a step of -2**63 reads as none)
_PER_STEP = "step.seconds"  # the step key every row that closed a step has
_EVENTS_PER_CHECK = 256  # profile events between two looks at the thread's CPU clock
_MAX_SLEEP = 0.5  # s the throttle sleeps at most at once


Said = tuple[str, Optional[Any]]  # (a finding's rule, its subject): what is said once


# -- the store ---------------------------------------------------------------------------


def _how(key: str) -> str:
    """How two rows of ``key`` fold into one: ``mean``, ``last``, ``max`` or ``min``.

    ``.max`` keys (peaks) and ``nodes_max/`` keys keep the larger, ``nodes_min/`` the
    smaller, counters (:func:`~sysmetrics.descriptions.aggregation` ``last``) the later,
    every other key (gauges, undescribed keys) the mean; ``node{k}/`` keys as their own key.
    """
    split = split_node(key)
    if split is not None:
        if split.node is None:
            return "max" if split.segment.endswith("max") else "min"
        key = split.key
    if key.endswith(".max"):
        return "max"
    return "last" if aggregation(key) == "last" else "mean"


class _Column:
    """One key's values: ``values[i]`` is row ``first + i``'s (NaN: the row lacks it).

    Rows after the last value are not stored: a key that went away costs nothing more.
    """

    __slots__ = ("first", "how", "seen", "values", "weigh")

    def __init__(self, first: int, how: str, weigh: Weight = "sample") -> None:
        self.first = first
        self.how = how
        self.weigh = weigh  # how a row counts in a mean (descriptions.weight): step keys
        self.seen = 0  # samples that had the key
        self.values: array[float] = array("d")


class _Store:
    """The samples of a run as bounded columns (see the module's "Memory").

    Row ``j`` holds ``weight[j]`` samples folded into one: ``time`` (s since the epoch)
    and ``monotonic`` (s) are its last sample's, ``step`` its last known step
    (``_NO_STEP``: none), ``closed`` the training steps its step keys stand for (the
    samples' :attr:`~sysmetrics.reader.Sample.steps` summed; NaN: none said). ``samples``
    counts every sample added.
    """

    def __init__(self) -> None:
        self.time: array[float] = array("d")
        self.monotonic: array[float] = array("d")
        self.step: array[int] = array("q")
        self.weight: array[float] = array("d")
        self.closed: array[float] = array("d")
        self.columns: dict[str, _Column] = {}
        self.samples = 0
        self.refused: Optional[str] = None  # the first key not kept (beyond LIVE_MAX_KEYS)
        self.first_step: Optional[int] = None  # the first sample's step with one
        self.last_step: Optional[int] = None  # the latest sample's step with one
        self.since = _NAN  # the first sample's monotonic clock, s

    @property
    def rows(self) -> int:
        """Rows kept."""
        return len(self.time)

    def nbytes(self) -> int:
        """Bytes the store holds (its arrays, columns and keys; ``sys.getsizeof``)."""
        rows = (self.time, self.monotonic, self.step, self.weight, self.closed)
        return (
            sum(sys.getsizeof(column) for column in rows)
            + sys.getsizeof(self.columns)
            + sum(
                sys.getsizeof(key) + sys.getsizeof(c) + sys.getsizeof(c.values)
                for key, c in self.columns.items()
            )
        )

    def add(self, sample: Sample, room: bool = True) -> None:
        """Append one sample (values that are not finite numbers are dropped).

        Then, where ``room``, :meth:`make_room` when :meth:`full`.
        """
        row = len(self.time)
        columns = self.columns
        for key, raw in sample.values.items():
            value = finite(raw)
            if value is None:
                continue
            column = columns.get(key)
            if column is None:
                if type(key) is not str:
                    continue
                if len(columns) >= LIVE_MAX_KEYS:
                    if self.refused is None:
                        self.refused = key
                    continue
                column = columns[sys.intern(key)] = _Column(row, _how(key), weight(key))
            gap = row - column.first - len(column.values)
            if gap:
                column.values.extend(array("d", [_NAN]) * gap)
            column.values.append(value)
            column.seen += 1
        self.time.append(_finite(sample.time))
        self.monotonic.append(_finite(sample.monotonic))
        step = sample.step
        if type(step) is int and _NO_STEP < step < 2**63:
            self.step.append(step)
            self.last_step = step
            if self.first_step is None:
                self.first_step = step
        else:
            self.step.append(_NO_STEP)
        if self.since != self.since:
            self.since = self.monotonic[-1]
        self.weight.append(1.0)
        closed = sample.steps
        self.closed.append(float(closed) if type(closed) is int and closed > 0 else _NAN)
        self.samples += 1
        if room and self.full():
            self.make_room()

    def evidence(self) -> bool:
        """Whether the samples span ``LIVE_MIN_STEPS`` steps and ``LIVE_MIN_SECONDS`` s."""
        first, last = self.first_step, self.last_step
        return (
            first is not None
            and last is not None
            and last - first >= LIVE_MIN_STEPS
            and self.monotonic[-1] - self.since >= LIVE_MIN_SECONDS
        )

    def full(self) -> bool:
        """Whether the store is past a bound: ``LIVE_MAX_ROWS``, ``LIVE_MAX_VALUES``."""
        rows = len(self.time)
        return rows > LIVE_MAX_ROWS or rows * len(self.columns) > LIVE_MAX_VALUES

    def make_room(self) -> None:
        """Forget the keys of a changed label, then fold until within the bounds."""
        self.forget()
        while self.full() and self.rows >= 4:
            self.fold()

    def forget(self) -> None:
        """Drop the keys seen in fewer than ``LIVE_FORGET_SEEN`` samples, none of them recent."""
        recent = len(self.time) - LIVE_FORGET_ROWS
        gone = [
            key
            for key, c in self.columns.items()
            if c.seen < LIVE_FORGET_SEEN and c.first + len(c.values) <= recent
        ]
        for key in gone:
            del self.columns[key]

    def fold(self) -> None:
        """Fold the older half of the rows in pairs (see the module); the rest moves up."""
        half = (len(self.time) + 1) // 4
        h = 2 * half  # rows 0..h-1 become rows 0..half-1
        if half < 1:
            return
        weight = self.weight
        by = self._row_weights(h)
        for column in self.columns.values():
            first, values = column.first, column.values
            if first >= h:
                column.first = first - half
                continue
            end = first + len(values)
            how = column.how
            weighs = by.get(column.weigh, weight)
            out: array[float] = array("d")
            for g in range(first // 2, (min(end, h) - 1) // 2 + 1):
                a = 2 * g
                va = values[a - first] if a >= first else _NAN
                vb = values[a + 1 - first] if a + 1 < end else _NAN
                if va != va:
                    out.append(vb)
                elif vb != vb:
                    out.append(va)
                elif how == "mean":
                    wa, wb = weighs[a], weighs[a + 1]
                    if not wa + wb > 0:  # NaN or none: by the samples each row holds
                        wa, wb = weight[a], weight[a + 1]
                    out.append((va * wa + vb * wb) / (wa + wb))
                elif how == "last":
                    out.append(vb)
                elif how == "max":
                    out.append(max(va, vb))
                else:
                    out.append(min(va, vb))
            if end > h:
                out.extend(values[h - first :])
            column.first = first // 2
            column.values = out
        self.time = _later(self.time, h)
        self.monotonic = _later(self.monotonic, h)
        steps = self.step
        later = ((steps[a + 1], steps[a]) for a in range(0, h, 2))
        self.step = array("q", (b if b != _NO_STEP else a for b, a in later))
        self.step.extend(steps[h:])
        self.weight = array("d", (weight[2 * g] + weight[2 * g + 1] for g in range(half)))
        self.weight.extend(weight[h:])
        closed = self.closed  # a pair's steps: both rows' (NaN where neither said)
        self.closed = array("d", (_sum(closed[2 * g], closed[2 * g + 1]) for g in range(half)))
        self.closed.extend(closed[h:])

    def _row_weights(self, h: int) -> dict[str, Sequence[float]]:
        """What each of the first ``h`` rows counts in a mean of a step key, by weight.

        ``steps`` and ``step_seconds`` (:func:`~sysmetrics.weights.row_weights`: the steps
        a row closed since the previous row with ``step.seconds``, or their seconds), as
        the rules weigh the rows of the run built from the store; empty without steps.
        """
        per_step = self.columns.get(_PER_STEP)
        if per_step is None or not any(c.weigh != "sample" for c in self.columns.values()):
            return {}
        full = array("d", [_NAN]) * h
        for i, v in enumerate(per_step.values[: max(0, h - per_step.first)]):
            full[per_step.first + i] = v
        steps = [None if s == _NO_STEP else s for s in self.step[:h]]
        closed = [None if c != c else c for c in self.closed[:h]]
        return {
            how: row_weights(steps, full, None, how, closed) for how in ("steps", "step_seconds")
        }

    def run(self, header: Mapping[str, Any]) -> Run:
        """A new :class:`Run` of the rows, one recording of ``header``: what the rules read."""
        run = Run()
        run.recordings.append(Recording(dict(header)))
        columns = [
            (key, c.first, c.first + len(c.values), c.values) for key, c in self.columns.items()
        ]
        for j in range(len(self.time)):
            metrics = {}
            for key, first, end, values in columns:
                if first <= j < end:
                    value = values[j - first]
                    if value == value:
                        metrics[key] = value
            step, closed = self.step[j], self.closed[j]
            run.add(
                metrics,
                self.time[j],
                self.monotonic[j],
                None if step == _NO_STEP else step,
                recording=0,
                steps=None if closed != closed else int(closed),
            )
        return run


def _finite(value: Any) -> float:
    """``value`` as a float where it is a finite number, else NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return _NAN
    return number if math.isfinite(number) else _NAN


def _sum(a: float, b: float) -> float:
    """``a + b``, either alone where the other is NaN (NaN where both are)."""
    if a != a:
        return b
    return a if b != b else a + b


def _later(column: array[float], h: int) -> array[float]:
    """``column`` with its first ``h`` rows folded in pairs to the later one's value."""
    out = array("d", column[1:h:2])
    out.extend(column[h:])
    return out


# -- the cost ----------------------------------------------------------------------------


class _OverBudget(BaseException):
    """Raised in the findings thread by its throttle: the evaluation passed ``LIVE_BUDGET``.

    A BaseException, so no ``except Exception`` in a rule swallows it.
    """


class _Throttle:
    """The findings thread's profile function: it sleeps the thread (see the module's "Cost").

    After every ``LIVE_SLICE`` s of the thread's CPU time it sleeps so that the thread
    runs ``LIVE_DUTY`` of the wall time at most, and raises :class:`_OverBudget` past
    ``deadline`` (the thread's CPU clock, s; infinite: none). Once ``stop`` is set it
    removes itself (the profile function costs the evaluation about 5x its CPU).
    """

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._events = 0
        self._since = 0.0  # the thread's CPU clock at the slice's start (set by install)
        self.deadline = math.inf
        self.slept = 0.0  # s, in all
        self._previous: Optional[Callable[..., Any]] = None  # the thread's, before install

    def install(self) -> None:
        """Become the calling thread's profile function (that thread's only)."""
        self._since = time.thread_time()
        previous = sys.getprofile()
        self._previous = None if previous is self else previous
        sys.setprofile(self)

    def remove(self) -> None:
        """Give the calling thread back the profile function it had (a user's, or none)."""
        sys.setprofile(self._previous)

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        self._events += 1
        if self._events % _EVENTS_PER_CHECK:
            return
        now = time.thread_time()
        ran = now - self._since
        if ran < LIVE_SLICE:
            return
        if now > self.deadline:
            self.deadline = math.inf
            raise _OverBudget
        if self._stop.is_set():  # closing: the rest at full speed, without this function
            self.remove()
            return
        pause = min(_MAX_SLEEP, ran * (1.0 / LIVE_DUTY - 1.0))
        time.sleep(pause)
        self.slept += pause
        self._since = time.thread_time()


def _lowest_priority() -> None:
    """Nice 19 for the calling thread, on Linux (a thread's own TID); elsewhere nothing."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError):  # a kernel or a policy that refuses: as it is
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class LiveFindings:
    """Says each finding once during a run (see the module).

    Args:
        monitor: the monitor whose samples the rules read (a reader of its own).
        say: called with each line, on this object's thread (or in :meth:`close`).
        every: seconds between two evaluations (None: ``LIVE_EVERY``, read then).
        first: seconds before the first evaluation at the latest (None: ``LIVE_FIRST``,
            read then); it comes sooner where the samples hold enough evidence.

    """

    def __init__(
        self,
        monitor: SystemMonitor,
        say: Callable[[str], None],
        every: Optional[float] = None,
        first: Optional[float] = None,
    ) -> None:
        self._say = say
        self._every = LIVE_EVERY if every is None else every
        # The run line's fields the rules read, as the monitor's run file has them.
        self._header = monitor.header()
        self._reader = monitor.reader(buffer=LIVE_BUFFER)
        self._store = _Store()
        self._said: set[Said] = set()
        self.found: list[Finding] = []  # what the latest evaluation found, every rule
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one evaluation at a time (the thread, close())
        self._failed = False
        self._refused_told = False
        self._throttle = _Throttle(self._stop)  # the thread's (see the module's "Cost")
        self._start = time.monotonic()
        self._first = LIVE_FIRST if first is None else first
        self._next: Optional[float] = None  # the next evaluation's time; None: the first's
        self.evaluations = 0  # evaluations run (close()'s included)
        self.cost = 0.0  # s: the thread's CPU time the latest evaluation took
        self._thread = threading.Thread(target=self._loop, name="sysmetrics-findings", daemon=True)

    @property
    def said(self) -> list[Said]:
        """The findings said so far: their ``(rule, subject)``, in order; for tests."""
        return sorted(self._said, key=repr)

    def start(self) -> LiveFindings:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Evaluate a last time (what the whole run showed) and stop; idempotent, bounded."""
        if self._stop.is_set():
            return
        self._stop.set()  # the thread's throttle sleeps no more
        self._reader.close()  # wakes the thread; what it buffered stays to be taken
        if self._thread.ident is not None:
            self._thread.join(CLOSE_WAIT)
        if not self._thread.is_alive():
            self._take()
            self._evaluate()

    # -- the thread ------------------------------------------------------------------

    def _loop(self) -> None:
        _lowest_priority()
        throttle = self._throttle
        while not self._stop.is_set():
            self._reader.wait(1.0)
            self._tick(time.monotonic(), throttle)

    def _tick(self, now: float, throttle: Optional[_Throttle] = None) -> None:
        """Take the new samples; evaluate if one is due at ``now`` (monotonic s).

        The first evaluation is due once the store holds enough evidence
        (:meth:`_Store.evidence`) or ``first`` s after the start; each next one ``every``
        s after the previous, and no sooner than ``LIVE_COST_RATIO`` times its CPU time.
        """
        self._take(throttle)
        due = self._next
        if due is None:
            if not (now >= self._start + self._first or self._store.evidence()):
                return
        elif now < due:
            return
        began = time.thread_time()
        self._evaluate(throttle)
        self.cost = time.thread_time() - began
        self._next = now + max(self._every, LIVE_COST_RATIO * self.cost)

    def _take(self, throttle: Optional[_Throttle] = None) -> None:
        """Add the reader's samples to the store; make room, throttled, when it is full.

        Adding is not throttled (about 40 µs of CPU a sample of 60 keys, 3 s of CPU a day
        at 1 s): under the throttle's profile function it would cost 5x, and a thread held
        to ``LIVE_DUTY`` could fall behind a fast monitor.
        """
        samples = self._reader.samples()
        if not samples:
            return
        with self._lock:
            store = self._store
            for sample in samples:
                store.add(sample, room=False)
                if store.full():
                    if throttle is not None:
                        throttle.install()
                    try:
                        store.make_room()
                    finally:
                        if throttle is not None:
                            throttle.remove()
            refused = store.refused
        if refused is not None and not self._refused_told:
            self._refused_told = True
            warnings.warn(
                f"sysmetrics: the live findings keep at most {LIVE_MAX_KEYS} distinct keys; "
                f"later new keys are not read by them (the first: {refused[:100]!r})",
                SystemMetricsWarning,
                stacklevel=1,
            )

    def _evaluate(self, throttle: Optional[_Throttle] = None) -> None:
        """Run the rules over a fresh run and say what is new; stop at the first error."""
        from sysmetrics import findings  # the answers layer; the engine never imports it

        if self._failed:
            return
        self.evaluations += 1
        with self._lock:
            if throttle is not None:
                throttle.deadline = time.thread_time() + LIVE_BUDGET
                throttle.install()
            try:
                found = findings.findings(self._store.run(self._header))
                self.found = found
                if throttle is not None:
                    throttle.deadline = math.inf
                for f in found:
                    key = (f.rule, f.subject)
                    if f.rule not in findings.LIVE_CODES or key in self._said:
                        continue
                    self._said.add(key)
                    self._say(PREFIX + f.sentence[: MAX_LINE - len(PREFIX)])
            except _OverBudget:
                self._failed = True
                warnings.warn(
                    "sysmetrics: an evaluation of the live findings took more than "
                    f"{LIVE_BUDGET:g} s of CPU time; they are off for this run",
                    SystemMetricsWarning,
                    stacklevel=1,
                )
            except Exception as exc:
                self._failed = True
                warnings.warn(
                    "sysmetrics: the live findings failed and are off for this run: "
                    f"{type(exc).__name__}: {str(exc)[:200]}",
                    SystemMetricsWarning,
                    stacklevel=1,
                )
            finally:
                if throttle is not None:
                    throttle.deadline = math.inf
                    throttle.remove()
