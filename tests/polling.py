"""Waiting in tests for what a background thread or child process does."""

from __future__ import annotations

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
