"""Readers: each consumer of a monitor gets its own windows (and, if it asks, every sample).

Modelled on OpenTelemetry's metrics SDK, which keeps one ``MetricReaderStorage`` per
``MetricReader``: the monitor folds every sample into every live reader under its lock,
so two readers at different cadences never take samples from each other.

The pair talks through a small explicit interface, in this module only (the monitor
imports it; nothing here imports the monitor): a reader asks its :class:`Source` for a
window, its samples, or to be detached; the source calls the reader's methods marked
"called by the source, under its lock" (:meth:`Reader._fold`, :meth:`Reader._push`, ...).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import NamedTuple

from typing_extensions import Protocol

from sysmetrics.collectors.base import Aggregation, Collector


class Sample(NamedTuple):
    """One tick of the monitor, as a buffering reader receives it."""

    time: float  # wall clock, seconds since the Unix epoch
    monotonic: float  # the monitor's monotonic clock, seconds
    step: int | None  # the training step set on the monitor (``monitor.step``), if any
    values: dict[str, float]  # every key this tick reported (no ``.max`` companions)
    # The training steps this tick's step keys stand for: those closed since the previous
    # tick that closed any (the step clock's own count; None where it closed none).
    steps: int | None = None


class Series:
    """One key as the monitor knows it: how it aggregates, who reports it, its latest value."""

    __slots__ = ("kind", "last", "owner", "seen", "seen_time")

    def __init__(self, kind: Aggregation, owner: Collector) -> None:
        self.kind = kind
        self.owner = owner
        self.last = 0.0
        self.seen = 0  # the tick that last reported this key
        self.seen_time = 0.0  # when that tick was taken, s since the Unix epoch


class Snapshot(dict[str, float]):
    """A reader's window ``{key: value}``, and when each value was measured.

    A plain ``dict`` of the values (compare it, copy it, log it as one), with:

    - :attr:`time`: when the latest sample was taken (s since the Unix epoch);
    - :attr:`measured`: ``{key: s since the epoch}``, when each value was last measured:
      the latest sample for most keys; earlier for a key measured at a slower cadence
      than the samples (the job's PSS: ``proc.memory.pssMB``, ``proc.memory.percent``),
      which the window keeps with its latest reading rather than dropping it;
    - :meth:`age`: seconds between a key's measurement and :attr:`time`.
    """

    time: float
    measured: dict[str, float]

    def __init__(
        self,
        values: Mapping[str, float] = (),  # type: ignore[assignment]
        time: float = 0.0,
        measured: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(values)
        self.time = time
        self.measured = dict(measured or {})

    def age(self, key: str) -> float:
        """Seconds between ``key``'s measurement and the latest sample (0: measured then).

        Raises:
            KeyError: ``key`` is not in the snapshot.

        """
        if key not in self:
            raise KeyError(key)
        return max(self.time - self.measured.get(key.removesuffix(".max"), self.time), 0.0)


class Source(Protocol):
    """What a :class:`Reader` asks of the monitor it reads (the monitor's ``SeriesStore``)."""

    def read_window(self, reader: Reader) -> Snapshot:
        """The reader's window since its previous one (:meth:`Reader._aggregate`)."""
        ...

    def take_samples(self, reader: Reader) -> list[Sample]:
        """The reader's buffered samples, taken out (:meth:`Reader._drain`)."""
        ...

    def detach(self, reader: Reader) -> None:
        """Stop feeding the reader (:meth:`Reader._detached`, then :meth:`Reader._wake`)."""
        ...


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

    def __init__(self, source: Source, buffer: int = 0) -> None:
        self._source = source
        self._acc: dict[str, list[float]] = {}  # key -> [total, count, max] this window
        self._buffer: collections.deque[Sample] | None = (
            collections.deque(maxlen=buffer) if buffer else None
        )
        self._new = threading.Event()
        self.dropped = 0  # samples dropped from a full buffer
        self.closed = False
        self._repeated: list[str] = []  # keys of the latest window that no sample had

    def snapshot(self, repeat: bool = True) -> Snapshot:
        """Aggregate of the samples since this reader's previous call; empty once closed.

        Args:
            repeat: with no sample of a key since the previous call, repeat its latest
                value (True, the monitor's ``snapshot()``), with the time it was measured
                in :attr:`Snapshot.measured`, or leave the key out (False: what the
                callbacks log, so a logging point without a new sample logs no system
                keys rather than the previous window again).

        Raises:
            RuntimeError: the reader keeps samples (``buffer=n``), not windows.

        """
        out = self._source.read_window(self)
        if not repeat:
            for key in self._repeated:
                out.pop(key, None)
                out.measured.pop(key, None)
        return out

    def samples(self) -> list[Sample]:
        """The buffered samples, oldest first, taken out of the buffer (``buffer=n`` only)."""
        return self._source.take_samples(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a sample is buffered or the reader is closed; False on timeout."""
        return self._new.wait(timeout)

    def close(self) -> None:
        """Detach from the monitor: no more samples, no more cost. Idempotent."""
        self._source.detach(self)

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- called by the source, under its lock ----------------------------------------

    @property
    def _buffering(self) -> bool:
        """Whether the reader keeps samples (``buffer=n``) rather than windows."""
        return self._buffer is not None

    def _push(self, sample: Sample) -> None:
        """Keep ``sample`` (a buffering reader), dropping the oldest from a full buffer."""
        buffer = self._buffer
        if buffer is None:
            return
        if len(buffer) == buffer.maxlen:
            self.dropped += 1
        buffer.append(sample)
        self._new.set()

    def _fold(
        self, values: Sequence[tuple[str, float]], weights: Mapping[str, float] | None = None
    ) -> None:
        """Fold one collector's checked values into this reader's window (the hot loop).

        ``weights``: how much each key's value counts in the window's mean (1 where not
        given), as its :attr:`~sysmetrics.descriptions.Description.weight` says:
        ``step.seconds`` counts once per step it stands for and ``step.dataWaitPercent``
        by the steps' seconds, so a window's value is over its steps.
        """
        acc = self._acc
        if weights:
            for key, v in values:
                w = weights.get(key, 1.0)
                a = acc.get(key)
                if a is None:
                    acc[key] = [v * w, w, v]
                else:
                    a[0] += v * w
                    a[1] += w
                    if v > a[2]:
                        a[2] = v
            return
        for key, v in values:
            a = acc.get(key)
            if a is None:
                acc[key] = [v, 1.0, v]
            else:
                a[0] += v
                a[1] += 1.0
                if v > a[2]:
                    a[2] = v

    def _forget(self, key: str) -> None:
        """Drop ``key`` from the window (its collector changed, or it is forgotten)."""
        self._acc.pop(key, None)

    def _unread(self, key: str) -> bool:
        """Whether the window holds samples of ``key`` not read yet."""
        return key in self._acc

    def _drain(self) -> list[Sample]:
        """The buffered samples, taken out; [] for a reader of windows."""
        buffer = self._buffer
        if buffer is None:
            return []
        if not self.closed:
            self._new.clear()  # a closed reader's wait() returns at once
        taken = list(buffer)
        buffer.clear()
        return taken

    def _detached(self) -> None:
        """The source feeds this reader no more: it is closed, its window dropped."""
        self.closed = True
        self._acc = {}

    def _wake(self) -> None:
        """Wake a sink waiting on this reader (:meth:`wait`); outside the lock."""
        self._new.set()

    def _aggregate(
        self,
        series: dict[str, Series],
        tick: int,
        now: float = 0.0,
        held: frozenset[str] = frozenset(),
    ) -> Snapshot:
        """The window of this reader over ``series``; a new window starts.

        ``now`` is the latest tick's time (s since the epoch); ``held`` the keys not
        reported at the latest tick whose collector says they are still current (a
        slower cadence): they are repeated like the keys of the latest tick.
        """
        acc, self._acc = self._acc, {}
        out = Snapshot(time=now)
        measured = out.measured
        repeated: list[str] = []
        self._repeated = repeated
        for key, s in series.items():
            a = acc.get(key)
            if a is None:
                if s.seen != tick and key not in held:
                    continue  # nothing new, and its collector no longer reports it
                out[key] = s.last
                measured[key] = s.seen_time
                repeated.append(key)
                if s.kind == "peak":
                    out[key + ".max"] = s.last
                    repeated.append(key + ".max")
                continue
            out[key] = s.last if s.kind == "last" else a[0] / a[1]
            measured[key] = s.seen_time
            if s.kind == "peak":
                out[key + ".max"] = a[2]
        return out
