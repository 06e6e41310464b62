"""Readers: each consumer of a monitor gets its own windows (and, if it asks, every sample).

Modelled on OpenTelemetry's metrics SDK, which keeps one ``MetricReaderStorage`` per
``MetricReader``: the monitor folds every sample into every live reader under its lock,
so two readers at different cadences never take samples from each other.
"""

from __future__ import annotations

import collections
import threading
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from sysmetrics.collectors.base import Aggregation, Collector

if TYPE_CHECKING:
    from sysmetrics.monitor import SystemMonitor


class Sample(NamedTuple):
    """One tick of the monitor, as a buffering reader receives it."""

    time: float  # wall clock, seconds since the Unix epoch
    monotonic: float  # the monitor's monotonic clock, seconds
    step: int | None  # the training step set on the monitor (``monitor.step``), if any
    values: dict[str, float]  # every key this tick reported (no ``.max`` companions)


class _Series:
    """One key as the monitor knows it: how it aggregates, who reports it, its latest value."""

    __slots__ = ("kind", "last", "owner", "seen")

    def __init__(self, kind: Aggregation, owner: Collector) -> None:
        self.kind = kind
        self.owner = owner
        self.last = 0.0
        self.seen = 0  # the tick that last reported this key


class Reader:
    """One consumer's view of a :class:`~sysmetrics.SystemMonitor`: get it from ``reader()``.

    :meth:`snapshot` aggregates the samples since *this* reader's previous snapshot (or
    since it was made), whoever else reads the monitor: gauges are averaged, cumulative
    counters give their latest value, memory gauges get a ``<key>.max`` companion with the
    window's peak, and with no new sample it repeats the latest values (unless asked not
    to: ``snapshot(repeat=False)``). It does no I/O.

    With ``buffer=n`` the reader keeps every sample instead of windows (the last ``n`` not
    yet taken) for :meth:`samples`, which sinks that write each sample (a run file) drain
    from their own thread after :meth:`wait`; when the buffer is full the oldest sample is
    dropped and counted in :attr:`dropped`, so a stalled consumer never holds up sampling.

    A reader of windows costs the sampling thread one fold per key and tick while it is
    open, a buffering one an append per tick; one that is closed, or no longer
    referenced, costs nothing.
    """

    def __init__(self, monitor: SystemMonitor, buffer: int = 0) -> None:
        self._monitor = monitor
        self._acc: dict[str, list[float]] = {}  # key -> [total, count, max] this window
        self._buffer: collections.deque[Sample] | None = (
            collections.deque(maxlen=buffer) if buffer else None
        )
        self._new = threading.Event()
        self.dropped = 0  # samples dropped from a full buffer
        self.closed = False
        self._repeated: list[str] = []  # keys of the latest window that no sample had

    def snapshot(self, repeat: bool = True) -> dict[str, float]:
        """Aggregate of the samples since this reader's previous call; empty once closed.

        Args:
            repeat: with no sample of a key since the previous call, repeat its latest
                value (True, the monitor's ``snapshot()``), or leave the key out (False:
                what the callbacks log, so a logging point without a new sample logs no
                system keys rather than the previous window again).

        Raises:
            RuntimeError: the reader keeps samples (``buffer=n``), not windows.

        """
        out = self._monitor._read(self)
        if not repeat:
            for key in self._repeated:
                out.pop(key, None)
        return out

    def samples(self) -> list[Sample]:
        """The buffered samples, oldest first, taken out of the buffer (``buffer=n`` only)."""
        return self._monitor._take(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a sample is buffered or the reader is closed; False on timeout."""
        return self._new.wait(timeout)

    def close(self) -> None:
        """Detach from the monitor: no more samples, no more cost. Idempotent."""
        self._monitor._detach(self)

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- called by the monitor, under its lock ---------------------------------------

    def _push(self, sample: Sample) -> None:
        buffer = self._buffer
        if buffer is None:
            return
        if len(buffer) == buffer.maxlen:
            self.dropped += 1
        buffer.append(sample)
        self._new.set()

    def _aggregate(self, series: dict[str, _Series], tick: int) -> dict[str, float]:
        """The window of this reader over ``series``; a new window starts."""
        acc, self._acc = self._acc, {}
        out: dict[str, float] = {}
        repeated: list[str] = []
        self._repeated = repeated
        for key, s in series.items():
            a = acc.get(key)
            if a is None:
                if s.seen != tick:
                    continue  # nothing new, and its collector no longer reports it
                out[key] = s.last
                repeated.append(key)
                if s.kind == "peak":
                    out[key + ".max"] = s.last
                    repeated.append(key + ".max")
                continue
            out[key] = s.last if s.kind == "last" else a[0] / a[1]
            if s.kind == "peak":
                out[key + ".max"] = a[2]
        return out
