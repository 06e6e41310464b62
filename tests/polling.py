"""Waiting in tests for what a background thread or child process does, and the tests'
own clocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float = 10.0) -> T:
    """Call ``fn`` every 20 ms until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


class Wakeups:
    """A thread that sleeps ``period`` s in a loop and counts its wakeups (``count``).

    The yardstick of a timing test on a loaded machine: a window measured in this
    process's own wakeups, not in seconds. Where the process waits for a CPU (``nice -n
    19`` beside a busy suite), the thread under test ticks less often, and so does this
    one: the count of its ticks in the window stays about what an idle machine gives.
    """

    def __init__(self, period: float = 0.01) -> None:
        self.period = period
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wakeups", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.count += 1

    def __enter__(self) -> Wakeups:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def window(self, wakeups: int, timeout: float = 30.0) -> None:
        """Return once this thread has woken ``wakeups`` more times."""
        start = self.count
        wait_for(lambda: self.count - start >= wakeups, timeout)


class Stamps:
    """The test's own clock: ``time.perf_counter()`` at each ``mark``, the run's start and
    each optimizer step's end (``test_step_time``: a callback of the framework beside
    sysmetrics') or each step's forward (``test_verdict``)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def mark(self) -> None:
        self.times.append(time.perf_counter())

    def steps(self, skip: int = 1) -> list[float]:
        """Each step's seconds, end to end (the first from the run's start), the first
        ``skip`` left out (their one-off work, as ``test_step_time.check_points``')."""
        return [b - a for a, b in zip(self.times, self.times[1:])][skip:]
