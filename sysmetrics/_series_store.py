"""The monitor's series store: each key's series, the open readers, and the tick.

As OpenTelemetry's metrics SDK keeps the storage of its readers apart from the meter
provider, :class:`SeriesStore` keeps what the readers read apart from the sampling
engine: ``SystemMonitor`` owns one, folds each tick's values into it, and hands out its
readers. The store is the :class:`~sysmetrics.reader.Source` the readers ask; it shares
the monitor's lock, which every method here expects held unless it says it takes it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping

from sysmetrics._checks import positive_int
from sysmetrics.collectors.base import Collector
from sysmetrics.engine import (
    _KINDS,
    FORGET_AFTER,
    FORGET_UNREAD_AFTER,
    _Misbehaved,
    _name,
    _short,
)
from sysmetrics.reader import Reader, Sample, Series, Snapshot


class SeriesStore:
    """Each key's :class:`~sysmetrics.reader.Series`, the open readers, and the tick.

    Args:
        lock: the monitor's lock, held by the sampling thread while it folds a tick.
        before_read: called before a reader's window is read, outside the lock (the
            monitor leaves a stuck collector behind there).

    """

    def __init__(self, lock: threading.Lock, before_read: Callable[[], None]) -> None:
        self._lock = lock
        self._before_read = before_read
        self.series: dict[str, Series] = {}
        self.tick = 0  # ticks folded in
        self.tick_time = 0.0  # when the latest tick was taken, s since the Unix epoch
        # id(collector) -> {key: s it stays current after its measurement}, as its
        # ``held_for()`` said at the latest tick (keys measured at a slower cadence)
        self.holds: dict[int, Mapping[str, float]] = {}
        self._readers: list[weakref.ref[Reader]] = []

    def reader(self, buffer: int = 0) -> Reader:
        """A new reader fed from the next tick on (takes the lock); see ``SystemMonitor.reader``.

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

    def live(self) -> list[Reader]:
        """The open readers; references to dropped ones are pruned."""
        readers = [r for r in (ref() for ref in self._readers) if r is not None]
        if len(readers) != len(self._readers):
            self._readers = [weakref.ref(r) for r in readers]
        return readers

    def split(self, readers: list[Reader]) -> tuple[list[Reader], list[Reader]]:
        """``readers`` as those of windows and those that buffer samples (under the lock)."""
        windowed = [r for r in readers if not r._buffering]
        return windowed, [r for r in readers if r._buffering]

    def push(self, readers: list[Reader], sample: Sample) -> None:
        """Hand ``sample`` to each buffering reader of ``readers`` (under the lock)."""
        for r in readers:
            r._push(sample)

    def latest(self) -> dict[str, float]:
        """The values of the latest tick, ``{key: value}``, and the held keys' latest ones.

        A key measured at a slower cadence (:meth:`held`) is served until its hold has
        passed, as in readers' snapshots: a scrape between two of its measurements would
        otherwise miss it.
        """
        held = self.held()
        return {key: s.last for key, s in self.series.items() if s.seen == self.tick or key in held}

    # -- folding a tick in (the sampling thread) -----------------------------------------

    def fold(
        self,
        c: Collector,
        checked: list[tuple[str, float]],
        readers: list[Reader],
        weights: Mapping[str, float] | None,
    ) -> None:
        """Fold one collector's checked values of this tick into the series and ``readers``.

        A key new to the store (or now reported by another collector) asks its
        collector's ``aggregation()`` first, for all keys, so a failing one stores nothing.

        Raises:
            _Misbehaved: ``aggregation()`` failed or returned no known kind.

        """
        series = self.series
        new: dict[str, Series] = {}
        for key, _ in checked:
            s = series.get(key)
            if s is None or s.owner is not c:
                try:
                    kind = c.aggregation(key)
                except Exception as exc:
                    raise _Misbehaved(f"aggregation({key!r}) failed: {_name(exc)}") from None
                if kind not in _KINDS:
                    raise _Misbehaved(f"aggregation({key!r}) returned {_short(kind)}")
                new[key] = Series(kind, c)
        for key, s in new.items():
            series[key] = s
            for r in readers:
                r._forget(key)  # a window of another collector's values
        now = self.tick_time
        for key, v in checked:
            s = series[key]
            s.last = v
            s.seen = self.tick
            s.seen_time = now
        for r in readers:  # the hot loop: each reader's window of each key
            r._fold(checked, weights)

    def forget(self, readers: list[Reader]) -> None:
        """Drop keys no collector reports any more.

        A key some reader has samples of that it has not read yet is kept longer
        (``FORGET_UNREAD_AFTER`` ticks), so a reader that reads rarely (once an epoch)
        still gets the key's window.
        """
        held = self.held()
        for key, s in list(self.series.items()):
            age = self.tick - s.seen
            if age <= FORGET_AFTER or key in held:
                continue
            if age <= FORGET_UNREAD_AFTER and any(r._unread(key) for r in readers):
                continue
            self._drop_key(key, readers)

    def held(self) -> frozenset[str]:
        """The keys not reported at the latest tick that are still current.

        Their collector's ``held_for()`` named them at the latest tick, and their latest
        measurement is no older than it said (a key measured at a slower cadence).
        """
        if not self.holds:
            return frozenset()
        now, tick = self.tick_time, self.tick
        return frozenset(
            key
            for key, s in self.series.items()
            if s.seen != tick
            and (hold := self.holds.get(id(s.owner))) is not None
            and key in hold
            and now - s.seen_time <= hold[key]
        )

    def drop_owner(self, collector: Collector) -> None:
        """Drop every key ``collector`` reports (it was taken out)."""
        self.holds.pop(id(collector), None)
        readers = self.live()
        for key in [k for k, s in self.series.items() if s.owner is collector]:
            self._drop_key(key, readers)

    def _drop_key(self, key: str, readers: list[Reader]) -> None:
        del self.series[key]
        for r in readers:
            r._forget(key)

    # -- the readers' source (:class:`sysmetrics.reader.Source`), each taking the lock ------

    def read_window(self, reader: Reader) -> Snapshot:
        """``reader``'s window since its previous one: what ``reader.snapshot()`` returns."""
        if reader._buffering:
            raise RuntimeError(
                "this reader keeps samples (buffer>0), not windows: use samples(), or "
                "monitor.reader() for windows"
            )
        self._before_read()
        with self._lock:
            if reader.closed:
                return Snapshot()
            return reader._aggregate(self.series, self.tick, self.tick_time, self.held())

    def take_samples(self, reader: Reader) -> list[Sample]:
        """``reader``'s buffered samples, taken out: what ``reader.samples()`` returns."""
        with self._lock:
            return reader._drain()

    def detach(self, reader: Reader) -> None:
        """Feed ``reader`` no more (``reader.close()``); idempotent."""
        with self._lock:
            reader._detached()
            self._readers = [ref for ref in self._readers if ref() not in (reader, None)]
        reader._wake()  # a sink waiting on it
