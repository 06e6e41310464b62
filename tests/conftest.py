from __future__ import annotations

import os
import re
import threading
import time
import warnings
from collections.abc import Iterator

import pytest
from hypothesis import settings

from sysmetrics import BaseCollector, SystemMetricsWarning

# Keras picks its backend at first import; the tests use torch's CPU build.
os.environ.setdefault("KERAS_BACKEND", "torch")

# No time limit on a hypothesis example: a test's verdict never depends on how busy the
# machine is (a parser example once took 630 ms on a loaded 2-CPU machine, 1.4 ms after).
settings.register_profile("sysmetrics", deadline=None)
settings.load_profile("sysmetrics")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_warnings(*regex): SystemMetricsWarnings whose message matches one regex "
        "(re.search) may be issued, on any thread; any other fails the test",
    )


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On pytest-xdist's ``worksteal`` workers, each worker's share starts with its part of
    the tests marked ``long``.

    ``worksteal`` hands each of the N workers a contiguous share of the collection (the
    first ``len // N``, then the same of the rest, ...); a worker runs its share in
    order, and an idle one steals the back half of the longest queue. With the long tests
    wherever the files put them, a 45 s one could start in the last minute and end the
    pass alone (the profile of 2026-11-28: the four workers ended at 278, 288, 321 and
    329 s). Here the long tests are dealt out first, each group to the share with the
    fewest so far, and put at the front of that share, the rest of the collection after
    them in its order. A group is one test, or the long tests of one module that use the
    same module- or class-scoped fixture (set up once, on one worker). Every worker
    collects alike and sorts alike, so the collections still agree.
    """
    # Set on xdist's workers only (where the scheduler's name is not: the Makefile and
    # tox.ini run xdist with --dist worksteal).
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    groups: dict[object, list[pytest.Item]] = {}
    rest = []
    for item in items:
        if item.get_closest_marker("long") is None:
            rest.append(item)
            continue
        info = getattr(item, "_fixtureinfo", None)  # pytest's own record of its fixtures
        shared = sorted(
            name
            for name, defs in (info.name2fixturedefs.items() if info is not None else ())
            if defs and defs[-1].scope in ("module", "class")
        )
        key = (item.nodeid.split("::")[0], *shared) if shared else item.nodeid
        groups.setdefault(key, []).append(item)
    if not groups:
        return
    fronts: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for group in sorted(groups.values(), key=len, reverse=True):  # stable: collection order
        min(fronts, key=len).extend(group)
    ordered, left, at = [], len(items), 0
    for i, front in enumerate(fronts):
        size = left // (workers - i)  # worksteal's share, as it computes it
        take = max(size - len(front), 0)
        ordered += front + rest[at : at + take]
        at += take
        left -= size
    ordered += rest[at:]
    items[:] = ordered


@pytest.fixture(autouse=True)
def no_unexpected_warning(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any test in which a ``SystemMetricsWarning`` it did not expect was issued.

    A warning counts whichever thread issued it (the sampling thread, the watchdog,
    the live findings' thread): ``warnings`` keeps one process-wide record, and the
    test's threads are gone before this looks (``no_thread_left`` runs inside it).
    A test expects a warning with ``pytest.warns(SystemMetricsWarning, match=...)``
    around the code that causes it, or, where one may come or not (a race the test
    does not control), allows it with ``@pytest.mark.allow_warnings("regex", ...)``
    (``re.search`` on the message). Warnings are not turned into exceptions: raised
    in a background thread, the engine's own fault handling would catch them and the
    test would see a different run (docs/development.md, "Tests and warnings").
    """
    allowed = [
        re.compile(pattern)
        for mark in request.node.iter_markers("allow_warnings")
        for pattern in mark.args
    ]
    with warnings.catch_warnings(record=True) as caught:
        yield
    unexpected = []
    for w in caught:
        if not issubclass(w.category, SystemMetricsWarning):
            # Not this fixture's business: back to pytest's own record, as it came.
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
        elif not any(p.search(str(w.message)) for p in allowed):
            unexpected.append(f"{w.filename}:{w.lineno}: {w.message}")
    if unexpected:
        pytest.fail(
            "unexpected SystemMetricsWarning (an internal failure? else expect it with "
            "pytest.warns or @pytest.mark.allow_warnings):\n" + "\n".join(unexpected),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def no_thread_left(no_unexpected_warning: None) -> Iterator[None]:
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
