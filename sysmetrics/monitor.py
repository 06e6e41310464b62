"""The sampling engine: one daemon thread, window aggregation, a cheap ``snapshot()``."""

from __future__ import annotations

import logging
import math
import os
import threading
import warnings
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Optional

from typing_extensions import Unpack

from sysmetrics import engine
from sysmetrics import options as opts
from sysmetrics._checks import check_interval
from sysmetrics._series_store import SeriesStore
from sysmetrics.collectors.base import Collector
from sysmetrics.collectors.defaults import check_options, host_collectors
from sysmetrics.collectors.process import ProcessCollector
from sysmetrics.engine import (
    _SWEEP_EVERY,
    START_WAIT,
    STOP_WAIT,
    _checked,
    _live,
    _Misbehaved,
    _name,
    _Retry,
    transient,
)
from sysmetrics.engine import Clock as Clock  # public here: sysmetrics.monitor.Clock (docs)
from sysmetrics.errors import OptionTypeError, SystemMetricsWarning
from sysmetrics.host import Job
from sysmetrics.options import MONITOR_OPTIONS, CollectorOptions
from sysmetrics.reader import Reader, Sample, Snapshot
from sysmetrics.steptime import ENERGY_SUFFIX, StepCollector, TotalsSource

log = logging.getLogger("sysmetrics")


# Patched by tests on this module; read here by the watchdog and the readers.
STUCK_AFTER = 30.0  # a sample() call this long is a stuck collector


def _hold(store: SeriesStore, c: Collector) -> None:
    """Note which of ``c``'s keys stay current between its measurements (``held_for()``).

    Raises:
        _Misbehaved: ``held_for()`` failed or did not return seconds per key.

    """
    held_for = getattr(c, "held_for", None)
    if held_for is None:
        return
    try:
        hold = dict(held_for())
        if not all(isinstance(v, (int, float)) and v >= 0.0 for v in hold.values()):
            raise ValueError("not seconds")
    except Exception as exc:
        raise _Misbehaved(f"held_for() failed: {_name(exc)}") from None
    if hold:
        store.holds[id(c)] = hold
    else:
        store.holds.pop(id(c), None)


class SystemMonitor:
    """Samples host (and accelerator) metrics on a background thread, for any number of readers.

    One daemon thread samples every ``interval`` seconds on a fixed monotonic schedule
    (tick ``k`` at ``start + k * interval``; a tick that is missed is skipped, never
    squeezed in); a second daemon thread, the watchdog, only waits for a collector to be
    stuck. It takes the first sample, which ``start()`` waits for (at most
    ``START_WAIT`` s), and a last one when stopped; ``stop()`` is idempotent and waits at
    most ``STOP_WAIT`` s, whatever the interval. Interpreter exit waits at most
    ``engine.EXIT_BUDGET`` s for all running monitors together, and never samples itself. A
    process forked while the monitor runs (a DataLoader worker) does not inherit it.

    Every sample reaches every open :class:`~sysmetrics.reader.Reader` (:meth:`reader`),
    each with its own windows, so a callback, an exporter and a run file share one
    sampler without taking samples from each other. :meth:`snapshot` reads the monitor's
    own default reader; :meth:`latest` returns the latest sample without consuming it.

    Faults stay in the collector that made them: one that raises, returns something that
    is not ``{str: real number}``, or whose ``aggregation()`` fails is disabled with one
    :class:`SystemMetricsWarning` and its keys are dropped, except that one short of a
    resource (:func:`sysmetrics.engine.transient`: no descriptors, memory or threads) only
    skips that sample (one warning, the first time) and is tried again after
    ``RETRY_FIRST`` s, the wait doubling up to ``RETRY_MAX`` s, and is disabled only if it
    is still failing ``GIVE_UP_AFTER`` s after it began; non-finite values (NaN, inf)
    are dropped with a debug line, and every percentage (a key whose unit is ``%`` in
    :mod:`sysmetrics.descriptions`) is held within 0..100; one whose ``sample()`` has not
    returned for ``STUCK_AFTER`` s is noticed by the watchdog (whether anyone reads the
    monitor or not), disabled with one warning and left behind on its thread, and the
    others go on sampling at once on a new thread (each thread's collector in ``sample()``
    is its own record, so every collector stuck in turn is found; a new thread that cannot
    start is retried like a collector short of a resource). A key no collector has reported for
    ``FORGET_AFTER`` ticks is forgotten, so keys that come and go do not accumulate.

    Args:
        interval: seconds between samples, from 0.01 to 3600.
        collectors: use these collectors instead of the default set (then the default
            set's options below may not be given).
        clock: the engine's time (:class:`Clock`); for tests and simulations.
        **options: the default collectors' options (``disk_paths``, ``gpu_ids``, ...),
            each declared once (type, default, check, help) in
            :data:`sysmetrics.options.OPTIONS` and taken by its collector in
            :data:`sysmetrics.collectors.defaults.DEFAULT_SET`.

    Raises:
        OptionError: an option has an invalid value (``OptionTypeError``, also a
            TypeError, for a value of the wrong type); its fields name the option, the
            value and what is allowed (:class:`sysmetrics.errors.OptionError`).
        TypeError, ValueError: an option is unknown, or options exclude each other.

    """

    step: int | None
    """The current training step, stamped on each :class:`~sysmetrics.reader.Sample`;
    callbacks set it, None where no one does."""

    step_timing: TotalsSource | None
    """Where the ``step.*`` keys come from (:mod:`sysmetrics.steptime`): a
    :class:`~sysmetrics.steptime.StepClock`'s ``read`` that callbacks mark steps on, or
    the recorder's step file; None (no step keys) where no one sets it."""

    stall: Any
    """The stall of the training step under way (:class:`sysmetrics.hang.StepStall`: since
    when, at which step, where), set by the hang watch of the run; None where there is
    none (the Prometheus exporter's ``sysmetrics_training_stalled_seconds``)."""

    job: Job
    """The watched processes (``job.watch(pids)`` adds the trees of other ranks)."""

    def __init__(
        self,
        interval: float = 1.0,
        # Optional, not `X | None`: typing.get_type_hints() evaluates these on Python 3.9.
        collectors: Optional[Sequence[Collector]] = None,
        clock: Optional[Clock] = None,
        **options: Unpack[CollectorOptions],
    ) -> None:
        unknown = opts.unknown(options, opts.COLLECTOR_OPTIONS, MONITOR_OPTIONS, aliases=False)
        if unknown:
            raise TypeError(
                f"SystemMonitor got an unknown option {unknown}; "
                f"the options are: {', '.join(MONITOR_OPTIONS)}"
            )
        self.interval = check_interval(interval)
        if clock is not None and not isinstance(clock, Clock):
            raise OptionTypeError("clock", clock, "use a sysmetrics.monitor.Clock")
        self._clock = clock or Clock()
        if collectors is None:
            self.options = check_options(options)
            self.job = Job(self.options["pid"] or os.getpid())
            self._collectors: list[Collector] = host_collectors(job=self.job, **options)
        else:
            if options:
                raise TypeError(
                    f"SystemMonitor got {', '.join(sorted(options))} with collectors=: "
                    "those options configure the default collectors, which collectors= "
                    "replaces; configure your collectors instead"
                )
            self.options = check_options({})
            self.job = Job(os.getpid())  # for the collectors given, where they take it
            for c in collectors:
                if not isinstance(c, Collector):
                    raise OptionTypeError(
                        "collectors",
                        c,
                        problem="is not a Collector (it needs name, sample(), aggregation() "
                        "and close())",
                        part="entry",
                    )
            self._collectors = list(collectors)
        self.pid: int = self.job.pid
        self.step = None
        self.step_timing = None
        self.stall = None
        # Sampled last in every tick, after the energy counters; not in ``collectors``.
        self._steps = StepCollector(lambda: self.step_timing)
        self._collectors.append(self._steps)
        self._lock = threading.Lock()
        # The readers' storage: the series, the open readers and the tick (under _lock).
        self._series_store = SeriesStore(self._lock, self._check_stuck)
        self._stop_event = threading.Event()
        self._first = threading.Event()  # the first sample is in (or failed)
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._generation = 0  # bumped when a stuck thread is left behind
        # Per sampling thread (its generation): the collector in sample() and since when
        # (monotonic). Each thread sets and clears only its own record, so a thread left
        # behind that returns never clears the record of a newer one.
        self._busy: dict[int, tuple[Collector, float]] = {}
        self._retry: dict[int, _Retry] = {}  # id(collector): its run of transient failures
        self._told: set[int] = set()  # id(collector): warned of a transient failure once
        self._respawn: _Retry | None = None  # a sampling thread to start (one was left behind)
        self._state = "new"  # new -> running -> stopped
        self._default = self.reader()

    # -- lifecycle -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the sampling thread is running."""
        return self._state == "running"

    @property
    def stopped(self) -> bool:
        """Whether the monitor was stopped (or failed): it samples no more, nor restarts."""
        return self._state == "stopped"

    @property
    def collectors(self) -> list[Collector]:
        """The collectors still sampling (failed ones have been removed).

        The monitor's own collector of the ``step.*`` keys is not among them.
        """
        return [c for c in self._collectors if c is not self._steps]

    def header(self) -> dict[str, Any]:
        """The recording's header, the fields of a run file's ``run`` line the monitor knows.

        ``{"pid": the job's process, "interval": s between samples, "cpus": the CPUs
        available to the job now (its ``cpu`` key's 100 %), or None where no process
        collector knows}``: one home for the run file (:mod:`sysmetrics.sinks.jsonl`) and
        the live findings (:mod:`sysmetrics.live_findings`), which read them as the run line's.
        """
        return {"pid": self.pid, "interval": self.interval, "cpus": self._available_cpus()}

    def _available_cpus(self) -> float | None:
        """The CPUs available to the job now, from its process collector; None if none."""
        for collector in self.collectors:
            if isinstance(collector, ProcessCollector):
                try:
                    return round(collector.available_cpus, 3)
                except Exception:  # a vanished process, an unreadable cgroup: the field is null
                    return None
        return None

    def start(self) -> SystemMonitor:
        """Start the sampling thread and wait for its first sample. Idempotent while running.

        Returns after the first sample, or after ``START_WAIT`` seconds if a collector is
        slow; a collector never makes it raise.

        Raises:
            RuntimeError: the monitor was already stopped; create a new one.

        """
        if self._state == "running":
            return self
        if self._state == "stopped":
            raise RuntimeError("this SystemMonitor was stopped; create a new one to sample again")
        self._state = "running"
        _live.add(self)
        try:
            self._spawn(self._clock.monotonic(), first=True)
            self._watchdog = threading.Thread(
                target=self._watch, name="sysmetrics-watchdog", daemon=True
            )
            self._watchdog.start()
        except BaseException:  # "can't start new thread" (pids.max, ulimit -u)
            self._stop_event.set()
            self._state = "stopped"
            _live.discard(self)
            if self._thread is None or self._thread.ident is None:
                # No sampling thread runs to close the collectors on its way out.
                for c in self._collectors:
                    self._close(c)
            raise
        self._first.wait(START_WAIT)
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop sampling: the thread takes one last sample and closes the collectors.

        Idempotent; never raises because of a collector.

        Args:
            timeout: seconds to wait for the thread (``STOP_WAIT`` by default, whatever
                the interval). A collector stuck past that is left behind on its daemon
                thread, with neither a last sample nor the closing.

        """
        if self._state != "running":
            if self._state == "new":  # never started: free what the collectors opened
                for c in self._collectors:
                    self._close(c)
            self._state = "stopped"
            return
        thread = self._signal_stop()
        with self._lock:
            orphaned = self._respawn is not None  # no sampling thread runs to close them
            self._respawn = None
        if orphaned:
            for c in list(self._collectors):
                self._close(c)
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_WAIT if timeout is None else timeout)
            if thread.is_alive():
                busy = self._busy.get(self._generation)
                name = busy[0].name if busy else "?"
                log.warning("sysmetrics: collector %r is still sampling; leaving it behind", name)

    def _signal_stop(self) -> threading.Thread | None:
        self._state = "stopped"
        _live.discard(self)
        self._stop_event.set()
        return self._thread

    def __enter__(self) -> SystemMonitor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _spawn(self, start: float, first: bool) -> None:
        """Start a sampling thread on the schedule ``start + k * interval``.

        With ``first`` it samples at once (tick 0), else from tick 1.
        """
        thread = threading.Thread(
            target=self._run,
            args=(self._generation, start, first),
            name="sysmetrics-monitor",
            daemon=True,
        )
        thread.start()  # "can't start new thread" (pids.max, ulimit -u): raises, nothing set
        self._thread = thread

    def _run(self, generation: int, start: float, first: bool) -> None:
        """The sampling thread: tick ``k`` at ``start + k * interval`` until stopped."""
        interval, clock, stop = self.interval, self._clock, self._stop_event
        k = 0  # the latest tick of the schedule
        try:
            if first:
                self._sample_once(generation)
                self._first.set()
            while True:
                # The next tick of the schedule still ahead: overrun ticks are skipped.
                k = max(k + 1, math.floor((clock.monotonic() - start) / interval) + 1)
                if clock.wait(stop, max(0.0, start + k * interval - clock.monotonic())):
                    break
                if generation != self._generation:
                    return  # left behind while stuck; a newer thread samples
                self._sample_once(generation)
            if generation == self._generation:
                self._sample_once(generation)  # the last sample
                for c in list(self._collectors):
                    self._close(c)
        except BaseException as exc:  # the loop itself: never a dead thread behind "running"
            if generation == self._generation:
                self._failed(exc)
        finally:
            self._first.set()

    def _failed(self, exc: BaseException) -> None:
        """The engine itself failed: stop, with one warning."""
        self._state = "stopped"
        _live.discard(self)
        self._stop_event.set()  # the watchdog ends
        warnings.warn(
            f"sysmetrics: the sampling thread failed and stopped: {_name(exc)}",
            SystemMetricsWarning,
            stacklevel=1,
        )

    def _watch(self) -> None:
        """The watchdog thread: notice a stuck collector, whether anyone reads or not.

        It sleeps until the current sampling thread's ``sample()`` in progress has run
        ``STUCK_AFTER`` s (or ``STUCK_AFTER`` s when none is), or until a sampling thread
        that could not start is due to be tried again, so a stuck collector is left behind
        on time and the others sample again at once; it ends when the monitor stops.
        """
        stop = self._stop_event
        try:
            while self._state == "running":
                now = self._clock.monotonic()
                busy = self._busy.get(self._generation)
                due = STUCK_AFTER if busy is None else busy[1] + STUCK_AFTER - now
                respawn = self._respawn
                if respawn is not None:
                    due = min(due, respawn.due - now)
                if stop.wait(max(0.001, due)):
                    return
                self._check_stuck()
        except BaseException as exc:  # never a dead watchdog behind a "running" monitor
            if self._state == "running":
                self._failed(exc)

    def _after_fork_in_child(self) -> None:
        # The thread does not exist in the child and the lock may have been held at fork.
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._first = threading.Event()
        self._thread = None
        self._watchdog = None
        self._busy = {}
        self._respawn = None
        self._state = "stopped"  # the parent owns the collectors; never close them here

    # -- sampling ------------------------------------------------------------------

    def _sample_once(self, generation: int | None = None) -> None:
        """Sample every collector and fold the values into every reader (sampling thread)."""
        if generation is None:
            generation = self._generation
        clock = self._clock
        now = clock.monotonic()
        results: list[tuple[Collector, list[tuple[str, float]]]] = []
        failed: list[tuple[Collector, str]] = []
        short: list[tuple[Collector, BaseException]] = []  # transient failures
        recovered: list[Collector] = []
        for c in list(self._collectors):
            retry = self._retry.get(id(c))
            if retry is not None and now < retry.due:
                continue  # waiting to retry after a shortage: none of its keys this tick
            if c is self._steps and self.step_timing is not None:
                # The last: it takes this tick's energy counters (only where steps are timed).
                self._steps.observe(
                    {
                        k: v
                        for _, checked in results
                        for k, v in checked
                        if k.endswith(ENERGY_SUFFIX)
                    }
                )
            self._busy[generation] = (c, clock.monotonic())
            error: BaseException | None = None
            try:
                values: object = c.sample()
            except BaseException as exc:  # KeyboardInterrupt from a collector included
                error = exc
            finally:
                self._busy.pop(generation, None)  # its own record only
            if generation != self._generation:
                return  # this thread was left behind while ``c`` was stuck
            if error is not None:
                if transient(error):
                    short.append((c, error))
                else:
                    failed.append((c, f"failed and is disabled, the others go on: {_name(error)}"))
                continue
            if retry is not None:
                recovered.append(c)
            try:
                results.append((c, _checked(c, values)))
            except _Misbehaved as exc:
                failed.append((c, f"{exc}; it is disabled, the others go on"))
        with self._lock:
            if generation != self._generation:
                return
            store = self._series_store
            store.tick += 1
            store.tick_time = clock.time()
            readers = store.live()
            windowed, buffering = store.split(readers)
            stored: list[tuple[str, float]] = []
            steps: int | None = None  # the steps this tick closed, by the step clock
            for c, checked in results:
                weights = self._steps.weights if c is self._steps else None  # Description.weight
                try:
                    store.fold(c, checked, windowed, weights)
                    _hold(store, c)
                except _Misbehaved as exc:
                    failed.append((c, f"{exc}; it is disabled, the others go on"))
                else:
                    stored.extend(checked)
                    if c is self._steps:
                        steps = self._steps.closed
            if buffering:
                sample = Sample(store.tick_time, clock.monotonic(), self.step, dict(stored), steps)
                store.push(buffering, sample)
            if store.tick % _SWEEP_EVERY == 0:
                store.forget(readers)
        for c in recovered:
            self._retry.pop(id(c), None)
            log.info("sysmetrics: collector %r samples again", c.name)
        for c, why_short in short:
            self._short_of(c, why_short, now)
        for c, why in failed:
            self._disable(c, why)

    def _short_of(self, c: Collector, exc: BaseException, now: float) -> None:
        """``c`` failed for want of a resource (``transient``) at ``now``: skip, retry, or give up.

        Its first such failure warns once; it is tried again after ``RETRY_FIRST`` s,
        the wait doubling up to ``RETRY_MAX`` s, and disabled at the first failure
        ``GIVE_UP_AFTER`` s or more after the first of the run (a success ends the run).
        """
        retry = self._retry.get(id(c))
        if retry is None:
            retry = self._retry[id(c)] = _Retry(now)
        if not retry.failed(now):
            self._disable(
                c,
                f"has kept failing for {engine.GIVE_UP_AFTER:g} s; it is disabled, "
                f"the others go on: {_name(exc)}",
            )
            return
        if id(c) in self._told:
            log.info("sysmetrics: collector %r skipped a sample: %s", c.name, _name(exc))
            return
        self._told.add(id(c))
        warnings.warn(
            f"sysmetrics: collector {c.name!r} skipped a sample: {_name(exc)}; its keys are left "
            f"out while this lasts, it is tried again after {engine.RETRY_FIRST:g} s (then at "
            f"most every {engine.RETRY_MAX:g} s) and disabled only if it keeps failing for "
            f"{engine.GIVE_UP_AFTER:g} s",
            SystemMetricsWarning,
            stacklevel=2,
        )

    def _drop_locked(self, collector: Collector) -> bool:
        """Take ``collector`` and its keys out (under the lock); False if already out."""
        if collector not in self._collectors:
            return False
        self._collectors.remove(collector)
        self._retry.pop(id(collector), None)
        self._series_store.drop_owner(collector)
        return True

    def _disable(self, collector: Collector, why: str) -> None:
        with self._lock:
            if not self._drop_locked(collector):
                return
        warnings.warn(
            f"sysmetrics: collector {collector.name!r} {why}",
            SystemMetricsWarning,
            stacklevel=2,
        )
        self._close(collector)

    def _check_stuck(self) -> None:
        """Leave a collector stuck in ``sample()`` behind and go on without it at once.

        Called by the watchdog, and by the readers (which notice it first on a clock that
        tests move on); never raises. Only the current sampling thread's record counts:
        a thread left behind earlier has none, and clears none but its own.
        """
        generation = self._generation
        busy = self._busy.get(generation)
        now = self._clock.monotonic()
        if busy is not None and now - busy[1] >= STUCK_AFTER and self._state == "running":
            collector = busy[0]
            with self._lock:
                if self._generation != generation or self._busy.get(generation) is not busy:
                    return  # it returned meanwhile
                self._generation += 1
                self._busy.pop(generation, None)
                self._drop_locked(collector)
                self._thread = None  # left behind: stop() does not wait for it
                self._respawn = _Retry(now)  # the others sample again at once, on a new thread
            warnings.warn(
                f"sysmetrics: collector {collector.name!r} has not returned from sample() for "
                f"{STUCK_AFTER:g} s; it is disabled (its thread is left behind), the others go on",
                SystemMetricsWarning,
                stacklevel=4,
            )
        if self._respawn is not None:
            self._restart()

    def _restart(self) -> None:
        """Start the sampling thread that replaces one left behind, if due.

        A start that fails for want of a resource (``RuntimeError: can't start new
        thread`` under pids.max) warns once and is tried again like a collector's sample
        (``_Retry``); still failing ``GIVE_UP_AFTER`` s after the first failure, or
        failing otherwise, the monitor stops with one warning. Never raises.
        """
        now = self._clock.monotonic()
        with self._lock:
            retry = self._respawn
            if retry is None or now < retry.due or self._state != "running":
                return
            self._respawn = None  # taken: no other caller starts one too
        try:
            self._spawn(now, first=True)
        except BaseException as exc:  # "can't start new thread"
            first = retry.wait == 0.0
            again = transient(exc) and retry.failed(now)
            with self._lock:
                running = self._state == "running"
                if running and again:
                    self._respawn = retry
            if running and again and first:
                warnings.warn(
                    f"sysmetrics: a new sampling thread could not start: {_name(exc)}; sampling "
                    f"pauses, the start is tried again after {engine.RETRY_FIRST:g} s (then at "
                    f"most every {engine.RETRY_MAX:g} s), and the monitor stops if it keeps "
                    f"failing for {engine.GIVE_UP_AFTER:g} s",
                    SystemMetricsWarning,
                    stacklevel=2,
                )
            if running and again:
                return
            if running:
                self._failed(exc)
            for c in list(self._collectors):  # no sampling thread runs to close them
                self._close(c)

    @staticmethod
    def _close(collector: Collector) -> None:
        try:
            collector.close()
        except Exception:
            log.debug("sysmetrics: closing collector %r failed", collector.name, exc_info=True)

    # -- reading (the store: sysmetrics._series_store) ------------------------------

    def reader(self, buffer: int = 0) -> Reader:
        """A new reader with its own windows (or samples), from the next sample on.

        Args:
            buffer: 0 for a reader of windows (``Reader.snapshot()``); n > 0 for one that
                keeps every sample instead, the last n not taken yet, for
                ``Reader.samples()`` (sinks that write every sample).

        Raises:
            ValueError: ``buffer`` is not a non-negative integer.

        """
        return self._series_store.reader(buffer)

    @property
    def default_reader(self) -> Reader:
        """The reader :meth:`snapshot` reads."""
        return self._default

    def snapshot(self) -> Snapshot:
        """The monitor's default reader's snapshot: the samples since the previous call.

        Returns:
            ``{key: value}`` (a :class:`~sysmetrics.reader.Snapshot`, a ``dict``): the
            mean of gauges, the latest value of cumulative counters, and ``<key>.max``
            for memory gauges. Keys whose collector reported nothing in the window repeat
            their latest value while their collector still reports them, and so do keys
            measured at a slower cadence than the samples (the job's PSS) between two
            measurements; ``snapshot.measured[key]`` says when each value was measured
            (s since the epoch) and ``snapshot.age(key)`` how long before the latest
            sample. Keys of a disabled collector are dropped. Empty before ``start()``.
            Cheap, no I/O. Other readers' windows are not affected.

        """
        return self._default.snapshot()

    def latest(self) -> dict[str, float]:
        """The most recent sample ``{key: value}``, without starting a window; cheap, no I/O.

        With it, a key measured at a slower cadence (the job's PSS) while its collector's
        ``held_for()`` says it is current. Empty before the first sample and once the
        monitor is stopped (nothing stale is served as current). For scrape-style sinks (a
        Prometheus endpoint).
        """
        self._check_stuck()
        if self._state != "running":
            return {}
        with self._lock:
            return self._series_store.latest()
