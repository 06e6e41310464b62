"""The engine's clock, bounds, value checks, and interpreter exit and fork handlers.

The parts of :class:`~sysmetrics.monitor.SystemMonitor` that need no monitor; it imports
them (and ``sysmetrics.monitor`` still exports them). At run time it imports only the
leaf modules descriptions and errors, so :mod:`sysmetrics.options` imports :class:`Clock`
without a cycle.
"""

from __future__ import annotations

import atexit
import errno
import logging
import math
import numbers
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from sysmetrics.descriptions import clamp_percent
from sysmetrics.errors import quote

if TYPE_CHECKING:
    from sysmetrics.collectors.base import Collector

log = logging.getLogger("sysmetrics")


class Clock:
    """The engine's time: a monotonic clock, the wall clock, and a wait a stop event ends.

    Tests give the monitor a clock whose ``wait`` advances time instead of sleeping, so
    the schedule is checked exactly and quickly.
    """

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the Unix epoch."""
        return time.time()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``stop`` is set; whether it is set."""
        return stop.wait(seconds)


# Bounds of the engine (seconds unless said otherwise).
START_WAIT = 1.0  # start() waits this long for the first sample
STOP_WAIT = 1.0  # stop() waits this long for the sampling thread to take its last sample
EXIT_BUDGET = 1.0  # interpreter exit waits this long for all running monitors together
FORGET_AFTER = 10  # ticks: a key not reported this long, its window consumed, is dropped
FORGET_UNREAD_AFTER = 1000  # ticks: ... even with samples nobody has read
_SWEEP_EVERY = 16  # ticks between two looks for keys to forget
_REPR = 120  # characters of a bad value quoted in a warning

# Retries after a shortage (``transient``): a collector's sample, the sampling thread's restart.
RETRY_FIRST = 1.0  # s: the first retry comes this long after the first failure
RETRY_MAX = 8.0  # s: each failure doubles the wait, up to this
GIVE_UP_AFTER = 60.0  # s: still failing this long after its first failure: disabled (stopped)

# What runs short and clears by itself: descriptors (process, system), memory, tasks.
TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})
_NO_THREAD = "can't start new thread"  # RuntimeError of threading under pids.max, ulimit -u
_CAUSES = 8  # links of an exception's cause/context chain looked at


def _short(value: object) -> str:
    """``repr(value)``, cut to a warning's length."""
    return quote(repr(value), _REPR)


def _name(exc: BaseException) -> str:
    """``Type: message`` of an exception, the message cut to a warning's length."""
    return f"{type(exc).__name__}: {quote(str(exc), _REPR)}"


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a shortage that may clear by itself, so worth a retry.

    An ``OSError`` with errno ``EMFILE``, ``ENFILE``, ``EAGAIN`` or ``ENOMEM``, a
    ``MemoryError``, a ``RuntimeError: can't start new thread``; or an ``Exception``
    raised from (or while handling) one, up to ``_CAUSES`` links back. The one place the
    engine tells a transient error from a lasting one.
    """
    e: BaseException | None = exc
    for _ in range(_CAUSES):
        if not isinstance(e, Exception):
            return False  # None, or KeyboardInterrupt, SystemExit: never retried
        if isinstance(e, MemoryError):
            return True
        if isinstance(e, OSError) and e.errno in TRANSIENT_ERRNOS:
            return True
        if isinstance(e, RuntimeError) and str(e.args[0] if e.args else "").startswith(_NO_THREAD):
            return True
        e = e.__cause__ if e.__cause__ is not None or e.__suppress_context__ else e.__context__
    return False


class _Retry:
    """A run of transient failures of one part: when to try again, when to give up.

    Times are the engine's monotonic seconds. The first try is due at once; after each
    failure the wait is ``RETRY_FIRST``, then doubles up to ``RETRY_MAX``.
    """

    __slots__ = ("due", "since", "wait")

    def __init__(self, now: float) -> None:
        self.since = now  # the first failure
        self.wait = 0.0  # s; 0 until the first failure
        self.due = now  # the next try

    def failed(self, now: float) -> bool:
        """One more failure at ``now``; False once it has kept failing ``GIVE_UP_AFTER`` s."""
        if now - self.since >= GIVE_UP_AFTER:
            return False
        self.wait = RETRY_FIRST if self.wait == 0.0 else min(2.0 * self.wait, RETRY_MAX)
        self.due = now + self.wait
        return True


class _Misbehaved(Exception):
    """A collector returned something that is not ``{str: finite real number}``."""


_KINDS = ("mean", "last", "peak")


def _checked(c: Collector, values: object) -> list[tuple[str, float]]:
    """``values`` as ``[(key, finite float)]``; raise ``_Misbehaved`` on junk.

    Values are checked before any is stored, so a bad sample stores nothing; non-finite
    ones are dropped with a debug line, percentages held within 0..100 (``clamp_percent``).
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
            checked.append((key, clamp_percent(key, v)))
        else:
            log.debug("sysmetrics: %s=%s from %r dropped", key, _short(value), c.name)
    return checked


class _Stoppable(Protocol):
    """What the exit and fork handlers need of a running monitor."""

    def _signal_stop(self) -> threading.Thread | None: ...

    def _after_fork_in_child(self) -> None: ...


_live: weakref.WeakSet[_Stoppable] = weakref.WeakSet()


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
