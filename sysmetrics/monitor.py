"""The sampling engine: one daemon thread, window aggregation, a cheap ``snapshot()``."""

from __future__ import annotations

import atexit
import difflib
import logging
import math
import numbers
import operator
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Union

from sysmetrics.collectors import Collector, host_collectors
from sysmetrics.collectors.base import Aggregation, SystemMetricsWarning, quote
from sysmetrics.collectors.nvidia import GpuId
from sysmetrics.collectors.openmetrics import Filters

log = logging.getLogger("sysmetrics")

MIN_INTERVAL = 0.01
MAX_INTERVAL = 3600.0
PathLike = Union[str, "os.PathLike[str]"]


_OPTIONS = (
    "interval",
    "disk_paths",
    "track_process_tree",
    "pid",
    "gpu_ids",
    "rocm_smi_path",
    "open_metrics",
    "open_metrics_filters",
    "open_metrics_headers",
    "open_metrics_max_series",
    "collectors",
)


def _check_interval(interval: object) -> float:
    # Any real number (numpy's included) but bool, which is an int to Python.
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise TypeError(
            f"interval={interval!r} is invalid: it must be a number of seconds "
            f"between {MIN_INTERVAL} and {MAX_INTERVAL:g}"
        )
    value = float(interval)
    if not (math.isfinite(value) and MIN_INTERVAL <= value <= MAX_INTERVAL):
        raise ValueError(
            f"interval={interval!r} is invalid: it must be a number of seconds "
            f"between {MIN_INTERVAL} and {MAX_INTERVAL:g}"
        )
    return value


def positive_int(value: object) -> int | None:
    """``value`` as an int if it is a positive integer (numpy's included, bool not)."""
    if isinstance(value, bool):
        return None
    try:
        n = operator.index(value)  # type: ignore[arg-type]  # raises for non-integers
    except TypeError:
        return None
    return n if n > 0 else None


def one_or_many(value: object, one: type | tuple[type, ...]) -> list[object] | None:
    """An option that takes "an item or a list of them", as a list; None if neither.

    ``[value]`` if it is a ``one``, else the items of any iterable but bytes or a mapping.
    """
    if isinstance(value, one):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        return list(value)
    return None


def _check_disk_paths(disk_paths: object) -> tuple[str, ...]:
    items = one_or_many(disk_paths, (str, os.PathLike))
    if items is None:
        raise TypeError(
            f"disk_paths={disk_paths!r} is invalid: use a path or a list of paths whose "
            "filesystems to watch (an empty list for none)"
        )
    paths: list[str] = []
    for item in items:
        p = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        if not isinstance(p, str):
            raise TypeError(
                f"disk_paths contains {item!r}, which is not a path: each entry must be a "
                "string or os.PathLike naming an existing path"
            )
        paths.append(p)
    for p in paths:
        if not os.path.exists(p):
            raise ValueError(
                f"disk_paths contains {p!r}, which does not exist: each entry must be an "
                "existing path whose filesystem to watch"
            )
    return tuple(paths)


# Bounds of the engine (seconds unless said otherwise).
START_WAIT = 1.0  # start() waits this long for the first sample
STOP_WAIT = 1.0  # stop() waits this long for the sampling thread to take its last sample
EXIT_BUDGET = 1.0  # interpreter exit waits this long for all running monitors together
STUCK_AFTER = 30.0  # a sample() call this long is a stuck collector
FORGET_AFTER = 10  # ticks: a key not reported this long, its window consumed, is dropped
FORGET_UNREAD_AFTER = 1000  # ticks: ... even with samples nobody has read
_SWEEP_EVERY = 16  # ticks between two looks for keys to forget
_REPR = 120  # characters of a bad value quoted in a warning


def _short(value: object) -> str:
    """``repr(value)``, cut to a warning's length."""
    return quote(repr(value), _REPR)


def _name(exc: BaseException) -> str:
    """``Type: message`` of an exception, the message cut to a warning's length."""
    return f"{type(exc).__name__}: {quote(str(exc), _REPR)}"


class _Misbehaved(Exception):
    """A collector returned something that is not ``{str: finite real number}``."""


class _Window:
    """One key's samples since the previous snapshot."""

    __slots__ = ("count", "kind", "last", "max", "owner", "seen", "total")

    def __init__(self, kind: Aggregation, owner: Collector) -> None:
        self.kind = kind
        self.owner = owner
        self.total = 0.0
        self.count = 0
        self.max = -math.inf
        self.last = 0.0
        self.seen = 0  # the tick that last reported this key


_KINDS = ("mean", "last", "peak")


class SystemMonitor:
    """Samples host (and accelerator) metrics on a background thread.

    One daemon thread samples every ``interval`` seconds on a fixed monotonic schedule
    (tick ``k`` at ``start + k * interval``; a tick that is missed is skipped, never
    squeezed in). It takes the first sample, which ``start()`` waits for (at most
    ``START_WAIT`` s), and a last one when stopped; ``stop()`` is idempotent and waits at
    most ``STOP_WAIT`` s, whatever the interval. Interpreter exit waits at most
    ``EXIT_BUDGET`` s for all running monitors together, and never samples itself. A
    process forked while the monitor runs (a DataLoader worker) does not inherit it.

    Faults stay in the collector that made them: one that raises, returns something that
    is not ``{str: real number}``, or whose ``aggregation()`` fails is disabled with one
    :class:`SystemMetricsWarning` and its keys are dropped; non-finite values (NaN, inf)
    are dropped with a debug line; one whose ``sample()`` has not returned for
    ``STUCK_AFTER`` s is noticed at the next :meth:`snapshot`, disabled with one warning,
    and the others go on sampling on a new thread. A key no collector has reported for
    ``FORGET_AFTER`` ticks is forgotten, so keys that come and go do not accumulate.

    :meth:`snapshot` aggregates the samples since the previous snapshot: gauges are
    averaged, cumulative counters give their latest value, and memory gauges get a
    ``<key>.max`` companion with the window's peak. With no new sample since the previous
    call it repeats the latest values. It does no I/O.

    Args:
        interval: seconds between samples, from 0.01 to 3600.
        disk_paths: paths whose filesystems to report as ``disk.{path}.*``; each must exist.
        track_process_tree: include the process's descendants in the process metrics.
        pid: the process to watch; this one by default.
        gpu_ids: NVIDIA GPUs to watch, as CUDA numbers them under ``CUDA_VISIBLE_DEVICES``
            (indices) or UUIDs; all by default.
        rocm_smi_path: the ``rocm-smi`` executable for AMD GPUs; found on PATH or in
            /opt/rocm by default.
        open_metrics: ``{name: url}`` of OpenMetrics/Prometheus endpoints to scrape into
            ``openmetrics.{name}.{metric}.{index}`` (needs the ``[openmetrics]`` extra).
        open_metrics_filters: regexes on ``"{name}.{metric}"``, or
            ``{metric_regex: {label: label_regex}}``; all metrics by default.
        open_metrics_headers: HTTP headers for those requests (sent to the configured
            origin only, never to a redirect's other host).
        open_metrics_max_series: series kept per endpoint and page (the first ones).
        collectors: use these collectors instead of the default set.

    Raises:
        TypeError, ValueError: an option is unknown or has an invalid value; the message
            names it, the value, and what is allowed.

    """

    def __init__(
        self,
        interval: float = 1.0,
        disk_paths: PathLike | Iterable[PathLike] = ("/",),
        track_process_tree: bool = True,
        pid: int | None = None,
        gpu_ids: Sequence[GpuId] | None = None,
        rocm_smi_path: str | None = None,
        open_metrics: Mapping[str, str] | None = None,
        open_metrics_filters: Filters | None = None,
        open_metrics_headers: Mapping[str, str] | None = None,
        open_metrics_max_series: int = 10_000,
        collectors: Sequence[Collector] | None = None,
        **unknown: object,
    ) -> None:
        if unknown:
            name = sorted(unknown)[0]
            close = difflib.get_close_matches(name, _OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"SystemMonitor got an unknown option {name!r}{hint}; "
                f"the options are: {', '.join(_OPTIONS)}"
            )
        self.interval = _check_interval(interval)
        self.disk_paths = _check_disk_paths(disk_paths)
        if not isinstance(track_process_tree, bool):
            raise TypeError(
                f"track_process_tree={track_process_tree!r} is invalid: use True or False"
            )
        self.track_process_tree = track_process_tree
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
            raise ValueError(f"pid={pid!r} is invalid: it must be a positive process id")
        if pid is not None:
            import psutil

            if not psutil.pid_exists(pid):
                raise ValueError(f"pid={pid!r} is invalid: no such process")
        self.pid = os.getpid() if pid is None else pid
        max_series = positive_int(open_metrics_max_series)
        if max_series is None:
            raise ValueError(
                f"open_metrics_max_series={open_metrics_max_series!r} is invalid: it must be "
                "a positive integer (series kept per endpoint)"
            )
        if collectors is None:
            self._collectors: list[Collector] = host_collectors(
                self.pid,
                self.disk_paths,
                self.track_process_tree,
                gpu_ids=gpu_ids,
                rocm_smi_path=rocm_smi_path,
                open_metrics=open_metrics,
                open_metrics_filters=open_metrics_filters,
                open_metrics_headers=open_metrics_headers,
                open_metrics_max_series=max_series,
            )
        else:
            for c in collectors:
                if not isinstance(c, Collector):
                    raise TypeError(
                        f"collectors contains {c!r}, which is not a Collector "
                        "(it needs name, sample(), aggregation() and close())"
                    )
            self._collectors = list(collectors)
        self._windows: dict[str, _Window] = {}
        self._tick = 0
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._first = threading.Event()  # the first sample is in (or failed)
        self._thread: threading.Thread | None = None
        self._generation = 0  # bumped when a stuck thread is left behind
        self._busy: tuple[Collector, float] | None = None  # in sample() since (monotonic)
        self._state = "new"  # new -> running -> stopped

    # -- lifecycle -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the sampling thread is running."""
        return self._state == "running"

    @property
    def collectors(self) -> list[Collector]:
        """The collectors still sampling (failed ones have been removed)."""
        return list(self._collectors)

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
            self._spawn(time.monotonic(), 0)
        except BaseException:
            self._state = "stopped"
            _live.discard(self)
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
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_WAIT if timeout is None else timeout)
            if thread.is_alive():
                busy = self._busy
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

    def _spawn(self, start: float, tick: int) -> None:
        """Start a sampling thread for the schedule ``start + k * interval`` from ``tick``."""
        thread = threading.Thread(
            target=self._run,
            args=(self._generation, start, tick),
            name="sysmetrics-monitor",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    def _run(self, generation: int, start: float, k: int) -> None:
        """The sampling thread: tick ``k`` at ``start + k * interval`` until stopped."""
        interval = self.interval
        try:
            if k == 0:
                self._sample_once(generation)
                self._first.set()
                k = 1
            while not self._stop_event.wait(max(0.0, start + k * interval - time.monotonic())):
                if generation != self._generation:
                    return  # left behind while stuck; a newer thread samples
                self._sample_once(generation)
                # The next tick of the schedule still ahead: overrun ticks are skipped.
                k = max(k + 1, math.floor((time.monotonic() - start) / interval) + 1)
            if generation == self._generation:
                self._sample_once(generation)  # the last sample
                for c in list(self._collectors):
                    self._close(c)
        except BaseException as exc:  # the loop itself: never a dead thread behind "running"
            if generation == self._generation:
                self._state = "stopped"
                _live.discard(self)
                warnings.warn(
                    f"sysmetrics: the sampling thread failed and stopped: {_name(exc)}",
                    SystemMetricsWarning,
                    stacklevel=1,
                )
        finally:
            self._first.set()

    def _after_fork_in_child(self) -> None:
        # The thread does not exist in the child and the lock may have been held at fork.
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._first = threading.Event()
        self._thread = None
        self._busy = None
        self._state = "stopped"  # the parent owns the collectors; never close them here

    # -- sampling ------------------------------------------------------------------

    def _sample_once(self, generation: int | None = None) -> None:
        """Sample every collector and fold the values in (on the sampling thread)."""
        if generation is None:
            generation = self._generation
        results: list[tuple[Collector, object]] = []
        failed: list[tuple[Collector, str]] = []
        for c in list(self._collectors):
            self._busy = (c, time.monotonic())
            try:
                values: object = c.sample()
            except BaseException as exc:  # KeyboardInterrupt from a collector included
                failed.append((c, f"failed and is disabled, the others go on: {_name(exc)}"))
                continue
            finally:
                self._busy = None
            if generation != self._generation:
                return  # this thread was left behind while ``c`` was stuck
            results.append((c, values))
        with self._lock:
            if generation != self._generation:
                return
            self._tick += 1
            tick, windows = self._tick, self._windows
            for c, values in results:
                try:
                    self._store(c, values, tick, windows)
                except _Misbehaved as exc:
                    failed.append((c, f"{exc}; it is disabled, the others go on"))
            if tick % _SWEEP_EVERY == 0:
                self._forget(tick)
        for c, why in failed:
            self._disable(c, why)

    @staticmethod
    def _store(c: Collector, values: object, tick: int, windows: dict[str, _Window]) -> None:
        """Fold one collector's sample into the windows; raise ``_Misbehaved`` on junk.

        Values are checked before any is stored, so a bad sample stores nothing.
        """
        if not isinstance(values, Mapping):
            raise _Misbehaved(f"returned {_short(values)}, not a mapping of key to number")
        checked: list[tuple[str, float]] = []
        for key, value in values.items():
            if not isinstance(key, str):
                raise _Misbehaved(f"returned the key {_short(key)}, not a string")
            if type(value) is float:
                v = value
            elif isinstance(value, numbers.Real) and not isinstance(value, bool):
                try:
                    v = float(value)
                except (OverflowError, ValueError, TypeError):
                    v = math.inf  # an int above 1e308
            else:
                raise _Misbehaved(f"returned {key}={_short(value)}, not a real number")
            if math.isfinite(v):
                checked.append((key, v))
            else:
                log.debug("sysmetrics: %s=%s from %r dropped", key, _short(value), c.name)
        for key, v in checked:
            w = windows.get(key)
            if w is None or w.owner is not c:
                try:
                    kind = c.aggregation(key)
                except Exception as exc:
                    raise _Misbehaved(f"aggregation({key!r}) failed: {_name(exc)}") from None
                if kind not in _KINDS:
                    raise _Misbehaved(f"aggregation({key!r}) returned {_short(kind)}")
                w = windows[key] = _Window(kind, c)
            w.total += v
            w.count += 1
            w.last = v
            w.seen = tick
            if v > w.max:
                w.max = v

    def _forget(self, tick: int) -> None:
        """Drop the windows of keys no collector reports any more (under the lock)."""
        windows = self._windows
        stale = [
            key
            for key, w in windows.items()
            if tick - w.seen > (FORGET_UNREAD_AFTER if w.count else FORGET_AFTER)
        ]
        for key in stale:
            del windows[key]

    def _drop_locked(self, collector: Collector) -> bool:
        """Take ``collector`` and its keys out (under the lock); False if already out."""
        if collector not in self._collectors:
            return False
        self._collectors.remove(collector)
        for key in [k for k, w in self._windows.items() if w.owner is collector]:
            del self._windows[key]
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
        """Leave a collector stuck in ``sample()`` behind and go on without it."""
        busy = self._busy
        if busy is None or time.monotonic() - busy[1] < STUCK_AFTER or self._state != "running":
            return
        collector = busy[0]
        with self._lock:
            if self._busy is not busy:
                return  # it returned meanwhile
            self._generation += 1
            self._busy = None
            self._drop_locked(collector)
        warnings.warn(
            f"sysmetrics: collector {collector.name!r} has not returned from sample() for "
            f"{STUCK_AFTER:g} s; it is disabled (its thread is left behind), the others go on",
            SystemMetricsWarning,
            stacklevel=3,
        )
        self._spawn(time.monotonic(), 1)

    @staticmethod
    def _close(collector: Collector) -> None:
        try:
            collector.close()
        except Exception:
            log.debug("sysmetrics: closing collector %r failed", collector.name, exc_info=True)

    def snapshot(self) -> dict[str, float]:
        """Aggregate of the samples since the previous call; cheap, no I/O.

        Returns:
            ``{key: value}``: the mean of gauges, the latest value of cumulative counters,
            and ``<key>.max`` for memory gauges. Keys whose collector reported nothing in
            the window repeat their latest value while their collector still reports
            them; keys of a disabled collector are dropped. Empty before ``start()``.

        """
        self._check_stuck()
        out: dict[str, float] = {}
        with self._lock:
            tick = self._tick
            for key, w in self._windows.items():
                if w.count == 0 and w.seen != tick:
                    continue
                if w.kind == "last" or w.count == 0:
                    out[key] = w.last
                else:
                    out[key] = w.total / w.count
                if w.kind == "peak":
                    out[key + ".max"] = w.max if w.count else w.last
                w.total, w.count, w.max = 0.0, 0, -math.inf
        return out


_live: weakref.WeakSet[SystemMonitor] = weakref.WeakSet()


def _stop_all_at_exit() -> None:
    """Ask every running monitor to stop; wait ``EXIT_BUDGET`` s for all of them together.

    Their threads take their last samples; nothing samples on this (the main) thread.
    """
    threads = [m._signal_stop() for m in list(_live)]
    deadline = time.monotonic() + EXIT_BUDGET
    for thread in threads:
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _after_fork_in_child() -> None:
    for monitor in list(_live):
        monitor._after_fork_in_child()
    _live.clear()


atexit.register(_stop_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
