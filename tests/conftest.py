from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from sysmetrics import BaseCollector

# Keras picks its backend at first import; the tests use torch's CPU build.
os.environ.setdefault("KERAS_BACKEND", "torch")


@pytest.fixture(autouse=True)
def no_thread_left() -> Iterator[None]:
    """Fail any test that leaves a thread running (a sampler that outlives its monitor)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 3.0
    while True:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not left, f"the test left threads running: {left}"


class ScriptedCollector(BaseCollector):
    """A real collector whose samples the test hands out one at a time.

    The first sample (taken by ``start()``) returns ``first``; every later one waits
    until the test ``feed()``s a sample, so the test knows exactly which samples
    fall into a snapshot's window.
    """

    name = "scripted"
    last_keys = frozenset({"counter"})
    peak_keys = frozenset({"peak"})

    def __init__(self, first: dict[str, float]) -> None:
        self._queue: list[dict[str, float]] = [first]
        self._cond = threading.Condition()
        self.entered = 0
        self.closed = False
        self._released = False
        self._last: dict[str, float] = first

    def feed(self, *samples: dict[str, float]) -> None:
        with self._cond:
            self._queue.extend(samples)
            self._cond.notify_all()

    def sample(self) -> dict[str, float]:
        with self._cond:
            self.entered += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._queue or self._released, timeout=5.0):
                raise TimeoutError("no sample fed")
            if self._queue:
                self._last = self._queue.pop(0)
            return self._last

    def wait_entered(self, n: int, timeout: float = 5.0) -> None:
        """Wait until ``sample()`` was entered ``n`` times: samples before it are stored."""
        with self._cond:
            assert self._cond.wait_for(lambda: self.entered >= n, timeout=timeout), (
                f"sample() entered {self.entered} times, expected {n}"
            )

    def release(self) -> None:
        """From now on ``sample()`` never waits: it repeats the last sample."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def close(self) -> None:
        self.closed = True
