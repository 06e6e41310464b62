"""The sampling engine: one daemon thread, window aggregation, a cheap ``snapshot()``."""

from __future__ import annotations

import atexit
import difflib
import logging
import math
import numbers
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Union

from sysmetrics.collectors import Collector, host_collectors
from sysmetrics.collectors.base import Aggregation, SystemMetricsWarning
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


def _check_disk_paths(disk_paths: object) -> tuple[str, ...]:
    if isinstance(disk_paths, (str, os.PathLike)):
        items: list[object] = [disk_paths]
    elif isinstance(disk_paths, Iterable) and not isinstance(disk_paths, (bytes, Mapping)):
        items = list(disk_paths)
    else:
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


class _Window:
    """One key's samples since the previous snapshot."""

    __slots__ = ("count", "kind", "last", "max", "seen", "total")

    def __init__(self, kind: Aggregation) -> None:
        self.kind = kind
        self.total = 0.0
        self.count = 0
        self.max = -math.inf
        self.last = 0.0
        self.seen = 0  # the tick that last reported this key


class SystemMonitor:
    """Samples host (and accelerator) metrics on a background thread.

    One daemon thread samples every ``interval`` seconds on a fixed monotonic schedule
    (tick ``k`` at ``start + k * interval``; a tick that is missed is skipped, never
    squeezed in). ``start()`` takes the first sample before it returns; ``stop()`` takes a
    last one, is idempotent and returns within about one interval. The thread never holds
    up interpreter exit, and a process forked while the monitor runs (a DataLoader worker)
    does not inherit a running monitor.

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
        open_metrics_headers: HTTP headers for those requests.
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
        self._thread: threading.Thread | None = None
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
        """Take the first sample, then start the sampling thread. Idempotent while running.

        Raises:
            RuntimeError: the monitor was already stopped; create a new one.

        """
        if self._state == "running":
            return self
        if self._state == "stopped":
            raise RuntimeError("this SystemMonitor was stopped; create a new one to sample again")
        self._state = "running"
        _live.add(self)
        start = time.monotonic()
        self._sample_once()
        self._thread = threading.Thread(
            target=self._run, args=(start,), name="sysmetrics-monitor", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop sampling: take one last sample and close the collectors. Idempotent.

        Args:
            timeout: seconds to wait for a sample in progress; by default the interval
                plus a second. If a collector is stuck past that, the (daemon) thread is
                left behind, and neither the last sample nor the closing is attempted.

        """
        if self._state != "running":
            if self._state == "new":  # never started: free what the collectors opened
                for c in self._collectors:
                    self._close(c)
            self._state = "stopped"
            return
        self._state = "stopped"
        _live.discard(self)
        self._stop_event.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.interval + 1.0 if timeout is None else timeout)
            if thread.is_alive():
                log.warning("sysmetrics: a collector is still sampling; leaving its thread behind")
                return
        self._sample_once()
        for c in self._collectors:
            self._close(c)

    def __enter__(self) -> SystemMonitor:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, start: float) -> None:
        interval = self.interval
        deadline = start + interval
        while not self._stop_event.wait(max(0.0, deadline - time.monotonic())):
            self._sample_once()
            deadline += interval
            now = time.monotonic()
            if deadline <= now:  # sampling overran: skip the ticks that are already gone
                deadline += math.ceil((now - deadline) / interval) * interval
                if deadline <= now:
                    deadline += interval

    def _after_fork_in_child(self) -> None:
        # The thread does not exist in the child and the lock may have been held at fork.
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread = None
        self._state = "stopped"  # the parent owns the collectors; never close them here

    # -- sampling ------------------------------------------------------------------

    def _sample_once(self) -> None:
        results = []
        for c in list(self._collectors):
            try:
                results.append((c, c.sample()))
            except Exception as exc:
                self._disable(c, exc)
        with self._lock:
            self._tick += 1
            tick, windows = self._tick, self._windows
            for c, values in results:
                for key, value in values.items():
                    w = windows.get(key)
                    if w is None:
                        w = windows[key] = _Window(c.aggregation(key))
                    v = float(value)
                    w.total += v
                    w.count += 1
                    w.last = v
                    w.seen = tick
                    if v > w.max:
                        w.max = v

    def _disable(self, collector: Collector, exc: BaseException) -> None:
        if collector in self._collectors:
            self._collectors.remove(collector)
        warnings.warn(
            f"sysmetrics: collector {collector.name!r} failed and is disabled, the others "
            f"go on: {type(exc).__name__}: {exc}",
            SystemMetricsWarning,
            stacklevel=2,
        )
        self._close(collector)

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
    for monitor in list(_live):
        try:
            monitor.stop(timeout=1.0)
        except Exception:
            log.debug("sysmetrics: stopping a monitor at exit failed", exc_info=True)


def _after_fork_in_child() -> None:
    for monitor in list(_live):
        monitor._after_fork_in_child()
    _live.clear()


atexit.register(_stop_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
