"""The reading half of :class:`~sysmetrics.monitor.SystemMonitor`: its readers and their source.

:class:`_Readers` is a base class of ``SystemMonitor`` (the methods below are documented
and called as ``SystemMonitor``'s); it keeps ``monitor.py`` to the sampling engine.
"""

from __future__ import annotations

import threading
import weakref

from sysmetrics._checks import positive_int
from sysmetrics.reader import Reader, Sample, Series


class _Readers:
    """``SystemMonitor``'s readers, and the :class:`~sysmetrics.reader.Source` they read."""

    # Set by SystemMonitor.__init__.
    _lock: threading.Lock
    _readers: list[weakref.ref[Reader]]
    _series: dict[str, Series]
    _tick: int
    _default: Reader

    def _check_stuck(self) -> None:
        """Leave a stuck collector behind: ``SystemMonitor._check_stuck`` overrides it."""
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------

    def reader(self, buffer: int = 0) -> Reader:
        """A new reader with its own windows (or samples), from the next sample on.

        Args:
            buffer: 0 for a reader of windows (``Reader.snapshot()``); n > 0 for one that
                keeps every sample instead, the last n not taken yet, for
                ``Reader.samples()`` (sinks that write every sample).

        Raises:
            ValueError: ``buffer`` is not a non-negative integer.

        """
        if buffer != 0 and positive_int(buffer) is None:
            raise ValueError(
                f"buffer={buffer!r} is invalid: use 0 (windows only) or a positive number of "
                "samples to keep"
            )
        r = Reader(self, int(buffer))
        with self._lock:
            self._readers.append(weakref.ref(r))
        return r

    @property
    def default_reader(self) -> Reader:
        """The reader :meth:`snapshot` reads."""
        return self._default

    def snapshot(self) -> dict[str, float]:
        """The monitor's default reader's snapshot: the samples since the previous call.

        Returns:
            ``{key: value}``: the mean of gauges, the latest value of cumulative counters,
            and ``<key>.max`` for memory gauges. Keys whose collector reported nothing in
            the window repeat their latest value while their collector still reports
            them; keys of a disabled collector are dropped. Empty before ``start()``.
            Cheap, no I/O. Other readers' windows are not affected.

        """
        return self.read_window(self._default)

    # -- the readers' source (:class:`sysmetrics.reader.Source`) ---------------------------

    def read_window(self, reader: Reader) -> dict[str, float]:
        """``reader``'s window since its previous one: what ``reader.snapshot()`` returns."""
        if reader.buffering:
            raise RuntimeError(
                "this reader keeps samples (buffer>0), not windows: use samples(), or "
                "monitor.reader() for windows"
            )
        self._check_stuck()
        with self._lock:
            if reader.closed:
                return {}
            return reader.aggregate(self._series, self._tick)

    def take_samples(self, reader: Reader) -> list[Sample]:
        """``reader``'s buffered samples, taken out: what ``reader.samples()`` returns."""
        with self._lock:
            return reader.drain()

    def detach(self, reader: Reader) -> None:
        """Feed ``reader`` no more (``reader.close()``); idempotent."""
        with self._lock:
            reader.detached()
            self._readers = [ref for ref in self._readers if ref() not in (reader, None)]
        reader.wake()  # a sink waiting on it
