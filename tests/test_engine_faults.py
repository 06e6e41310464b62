"""The engine under faults that come and go (issue 30): shortages, collectors stuck in turn.

- A transient error (no descriptors, no memory, no thread) skips that collector's sample
  with one warning and is retried with back-off; only one that keeps failing is disabled.
- A thread the watchdog left behind that returns never hides a collector stuck after it.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import sysmetrics.engine as sysmetrics_engine
import sysmetrics.monitor as sysmetrics_monitor
from sysmetrics import BaseCollector, SystemMetricsWarning, SystemMonitor
from sysmetrics.monitor import Clock
from sysmetrics.reader import Sample
from tests.polling import wait_for


def messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if w.category is SystemMetricsWarning]


# -- transient errors: fakes that run everywhere ----------------------------------------


class StepClock(Clock):
    """A clock whose ``wait`` jumps to its deadline (no sleeping); it stops after ``ticks``."""

    def __init__(self, ticks: int) -> None:
        self.now = 1000.0
        self.left = ticks

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        if self.left == 0:
            return True
        self.left -= 1
        self.now += seconds
        return False


class Shortage(BaseCollector):
    """Raises ``error`` in the samples whose clock time (from the start) is in ``failing``."""

    name = "shortage"

    def __init__(self, clock: StepClock, error: BaseException, failing: range) -> None:
        self.clock, self.error, self.failing = clock, error, failing
        self.calls: list[float] = []  # the clock time of each call, from the start
        self.closed = False

    def sample(self) -> dict[str, float]:
        t = self.clock.now - 1000.0
        self.calls.append(t)
        if t in self.failing:
            raise self.error
        return {"shortage.x": t}

    def close(self) -> None:
        self.closed = True


class Steady(BaseCollector):
    name = "steady"

    def __init__(self) -> None:
        self.n = 0

    def sample(self) -> dict[str, float]:
        self.n += 1
        return {"steady.n": float(self.n)}


def run_shortage(
    error: BaseException, failing: range, ticks: int
) -> tuple[Shortage, list[Sample], list[str], SystemMonitor]:
    """A monitor (interval 1 s on a clock that does not sleep) whose ``Shortage`` collector
    fails at the clock times in ``failing``; its samples, warnings and monitor."""
    clock = StepClock(ticks)
    c = Shortage(clock, error, failing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=1.0, collectors=[c, Steady()], clock=clock)
        r = m.reader(buffer=10_000)
        m.start()
        wait_for(lambda: not m.running or clock.left == 0)
        wait_for(lambda: c.closed or c not in m.collectors)
        m.stop()
    return c, r.samples(), messages(caught), m


TRANSIENT = [
    OSError(errno.EMFILE, "Too many open files"),
    OSError(errno.ENFILE, "Too many open files in system"),
    BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"),
    OSError(errno.ENOMEM, "Cannot allocate memory"),
    MemoryError(),
    RuntimeError("can't start new thread"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: type(e).__name__ + str(e)[:12])
def test_a_shortage_that_clears_skips_samples_and_the_collector_comes_back(
    error: BaseException,
) -> None:
    """Regression (issue 30, item 1): a collector that ran out of descriptors (memory,
    threads) for a few seconds was disabled for the rest of the run."""
    c, samples, warned, m = run_shortage(error, range(3, 6), ticks=20)
    assert [s.monotonic - 1000.0 for s in samples][:3] == [0.0, 1.0, 2.0]
    # Tried at 3 (fails), again 1 s later (4, fails), 2 s after that (6): back again.
    assert c.calls[:6] == [0.0, 1.0, 2.0, 3.0, 4.0, 6.0]
    by_time = {s.monotonic - 1000.0: s.values for s in samples}
    for t in (3.0, 4.0, 5.0):  # skipped: its keys are absent, nothing stale
        assert "shortage.x" not in by_time[t] and "steady.n" in by_time[t]
    for t in range(6, 20):
        assert by_time[float(t)]["shortage.x"] == t  # every tick again
    assert c in m.collectors  # not disabled (closed only by the stop)
    assert len(warned) == 1, warned
    assert warned[0].startswith("sysmetrics: collector 'shortage' skipped a sample")
    assert type(error).__name__ in warned[0]


def test_a_collector_that_keeps_failing_is_disabled_after_the_stated_time() -> None:
    c, samples, warned, m = run_shortage(
        OSError(errno.EMFILE, "Too many open files"), range(3, 10_000), ticks=200
    )
    give_up = sysmetrics_engine.GIVE_UP_AFTER
    gaps = [b - a for a, b in zip(c.calls[3:], c.calls[4:])]
    assert gaps == sorted(gaps) and max(gaps) <= sysmetrics_engine.RETRY_MAX  # backing off
    assert give_up <= c.calls[-1] - 3 <= give_up + sysmetrics_engine.RETRY_MAX
    assert c.closed and c not in m.collectors
    assert len(warned) == 2, warned
    assert "skipped a sample" in warned[0]
    assert warned[1].startswith(
        f"sysmetrics: collector 'shortage' has kept failing for {give_up:g} s; it is disabled"
    )
    last = max(s.monotonic for s in samples if "shortage.x" in s.values)
    assert last - 1000.0 == 2.0  # nothing of it after the shortage began
    assert all("steady.n" in s.values for s in samples)


def test_a_non_transient_error_after_a_shortage_disables_at_once() -> None:
    clock = StepClock(30)

    class Then(Shortage):
        def sample(self) -> dict[str, float]:
            if self.clock.now - 1000.0 >= 6:
                self.calls.append(self.clock.now - 1000.0)
                raise ValueError("broken for good")
            return super().sample()

    c = Then(clock, OSError(errno.EMFILE, "Too many open files"), range(3, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=1.0, collectors=[c, Steady()], clock=clock).start()
        wait_for(lambda: c.closed)
        m.stop()
    warned = messages(caught)
    assert len(warned) == 2 and "broken for good" in warned[1], warned
    assert "failed and is disabled" in warned[1]


def test_a_non_transient_error_is_still_disabled_at_once() -> None:
    c, _, warned, _ = run_shortage(OSError("device went away"), range(3, 4), ticks=10)
    assert c.calls == [0.0, 1.0, 2.0, 3.0] and c.closed
    assert len(warned) == 1 and "failed and is disabled" in warned[0]


def test_a_shortage_caused_error_counts_as_transient() -> None:
    """An error raised while handling a shortage (a wrapper's own exception) is one too."""
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError as exc:
            raise ValueError("could not read /proc/stat") from exc
    except ValueError as wrapped:
        assert sysmetrics_engine.transient(wrapped)
    assert not sysmetrics_engine.transient(ValueError("x"))
    assert not sysmetrics_engine.transient(RuntimeError("something else"))
    assert not sysmetrics_engine.transient(KeyboardInterrupt())
    assert not sysmetrics_engine.transient(OSError(errno.EIO, "I/O error"))


# -- transient errors through the real path -----------------------------------------------

NOFILE_SCRIPT = """
import errno, json, os, resource, sys, time, warnings
from sysmetrics import SystemMonitor

warned = []
warnings.simplefilter("always")
warnings.showwarning = lambda message, *args, **kwargs: warned.append(str(message))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
m = SystemMonitor(interval=0.05)
r = m.reader(buffer=100_000)
m.start()
time.sleep(0.5)
names = sorted(c.name for c in m.collectors)
before = [s.values for s in r.samples()]
fds = []


def take_all():
    try:
        while True:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        assert exc.errno == errno.EMFILE, exc


# No descriptor left for 2 s: a DataLoader's "Too many open files". Taken again every
# 10 ms: a descriptor the sampler held as they were taken is free once it closes it,
# and each read after could open and close that one (a CI run's samples had every key).
take_all()
start = time.monotonic()
while time.monotonic() - start < 2.0:
    time.sleep(0.01)
    take_all()
short = [s.values for s in r.samples()]
for fd in fds:
    os.close(fd)
stable = set.intersection(*(set(v) for v in before))
deadline = time.monotonic() + 30.0
after = []
while time.monotonic() < deadline:  # the keys come back (within seconds: the back-off)
    time.sleep(0.1)
    after += [s.values for s in r.samples()]
    if after and stable <= set(after[-1]):
        break
m.stop()
print(json.dumps({"names": names, "after_names": sorted(c.name for c in m.collectors),
                  "stable": sorted(stable), "short": short, "last": after[-1] if after else None,
                  "warned": warned}))
"""


def test_running_out_of_descriptors_for_two_seconds_does_not_end_collection() -> None:
    """Regression (issue 30, item 1): with every descriptor taken for 2 s, every default
    collector was disabled for the rest of the run and later samples read ``{}``. The
    real path: a process's own ``RLIMIT_NOFILE``, filled up, then freed."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", NOFILE_SCRIPT], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    stable = set(result["stable"])
    assert stable and result["names"]
    # The shortage was real: some sample during it lacked some of the stable keys.
    assert any(not stable <= set(values) for values in result["short"]), result["short"][-3:]
    assert result["after_names"] == result["names"], result["warned"]
    assert result["last"] is not None and stable <= set(result["last"]), result
    assert not [w for w in result["warned"] if "is disabled" in w], result["warned"]
    failing = [w for w in result["warned"] if "skipped a sample" in w]
    assert failing and len(failing) == len(set(failing)) <= len(result["names"]), result["warned"]


# -- the sampling thread's restart: a thread that cannot start -------------------------


class Blocks(BaseCollector):
    """Samples at once until ``block`` is set; then blocks in ``sample()`` until ``go``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.block = threading.Event()
        self.go = threading.Event()
        self.blocked = threading.Event()  # it is blocked now
        self.calls = 0

    def sample(self) -> dict[str, float]:
        self.calls += 1
        if self.block.is_set() and not self.go.is_set():
            self.blocked.set()
            self.go.wait(60)
        return {f"{self.name}.x": 1.0}


class Counting(BaseCollector):
    name = "good"

    def __init__(self) -> None:
        self.n = 0

    def sample(self) -> dict[str, float]:
        self.n += 1
        return {"good.n": float(self.n)}


def test_a_sampling_thread_that_cannot_restart_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: after a stuck collector, the new sampling thread's ``can't start new
    thread`` (pids.max) stopped the monitor for good, and raised out of ``snapshot()``
    into the training loop when a reader noticed the stuck collector first."""
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.3)
    monkeypatch.setattr(sysmetrics_engine, "RETRY_FIRST", 0.05, raising=False)
    fail = threading.Event()
    start = threading.Thread.start

    def failing_start(self: threading.Thread) -> None:
        if fail.is_set() and self.name == "sysmetrics-monitor":
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", failing_start)
    good, stuck = Counting(), Blocks("blocks")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[good, stuck]).start()
        try:
            fail.set()
            stuck.block.set()
            stuck.blocked.wait(5)
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:  # readers never see the failure
                m.snapshot()
                m.latest()
                time.sleep(0.01)
            wait_for(lambda: m.collectors == [good], timeout=5.0)
            assert m.running
            n = good.n
            fail.clear()  # the shortage clears: sampling resumes
            wait_for(lambda: good.n > n + 5, timeout=5.0)
            assert m.running and "good.n" in m.snapshot()
        finally:
            fail.clear()
            stuck.go.set()
            m.stop()
    warned = messages(caught)
    assert len(warned) == 2, warned
    assert "'blocks' has not returned from sample()" in warned[0]
    assert warned[1].startswith("sysmetrics: a new sampling thread could not start")


def test_a_sampling_thread_that_never_restarts_stops_the_monitor_after_the_stated_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.2)
    monkeypatch.setattr(sysmetrics_engine, "RETRY_FIRST", 0.05, raising=False)
    monkeypatch.setattr(sysmetrics_engine, "RETRY_MAX", 0.1, raising=False)
    monkeypatch.setattr(sysmetrics_engine, "GIVE_UP_AFTER", 0.5, raising=False)
    start = threading.Thread.start
    fail = threading.Event()

    def failing_start(self: threading.Thread) -> None:
        if fail.is_set() and self.name == "sysmetrics-monitor":
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", failing_start)
    stuck = Blocks("blocks")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[Counting(), stuck]).start()
        try:
            fail.set()
            stuck.block.set()
            wait_for(lambda: not m.running, timeout=5.0)
        finally:
            stuck.go.set()
            m.stop()
    warned = messages(caught)
    assert len(warned) == 3, warned
    assert "sampling thread failed and stopped" in warned[2]


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    """A new pids cgroup (v1) to cap a process's tasks in; skipped where none can be made."""
    path = Path("/sys/fs/cgroup/pids") / f"sysmetrics-engine-test-{os.getpid()}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"needs a writable pids cgroup v1 (root) for a real pids.max: {exc}")
    try:
        yield path
    finally:
        for _ in range(50):  # empty once the process has exited
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


PIDS_SCRIPT = """
import json, os, sys, threading, time, warnings
import sysmetrics.monitor
from sysmetrics import BaseCollector, SystemMonitor

cgroup = sys.argv[1]
warned = []
warnings.simplefilter("always")
warnings.showwarning = lambda message, *args, **kwargs: warned.append(str(message))
sysmetrics.monitor.STUCK_AFTER = 0.3

class Counting(BaseCollector):
    name = "good"
    n = 0
    def sample(self):
        self.n += 1
        return {"good.n": float(self.n)}

class Blocks(BaseCollector):
    name = "blocks"
    block, go = threading.Event(), threading.Event()
    def sample(self):
        if self.block.is_set():
            self.go.wait(60)
        return {"blocks.x": 1.0}

def write(name, text):
    with open(os.path.join(cgroup, name), "w") as f:
        f.write(text)

write("cgroup.procs", str(os.getpid()))
good, stuck = Counting(), Blocks()
m = SystemMonitor(interval=0.02, collectors=[good, stuck]).start()
stuck.block.set()
time.sleep(0.1)  # blocked now: its thread stays, and no task more may start
with open(os.path.join(cgroup, "pids.current")) as f:
    write("pids.max", f.read().strip())
time.sleep(3.0)  # left behind after 0.3 s; its successor cannot start for 3 s
running = m.running
n = good.n
write("pids.max", "max")
deadline = time.monotonic() + 10.0
while good.n <= n + 5 and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps({"running": running, "during": n, "after": good.n, "still": m.running,
                  "collectors": [c.name for c in m.collectors], "warned": warned}))
stuck.go.set()
m.stop()
"""


def test_a_sampling_thread_that_cannot_start_under_pids_max_is_retried(pids_cgroup: Path) -> None:
    """The real path of the restart above: a pids cgroup whose ``pids.max`` is reached."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", PIDS_SCRIPT, str(pids_cgroup)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["running"] and result["still"], result
    assert result["after"] > result["during"] + 5, result
    assert result["collectors"] == ["good"], result
    assert any("can't start new thread" in w for w in result["warned"]), result


# -- stuck collectors, one after another ----------------------------------------------


@pytest.mark.parametrize("n", [2, 3])
def test_each_of_several_collectors_stuck_one_after_another_is_found(
    monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """Regression (issue 30, item 2): when a collector the watchdog had left behind
    returned, its thread erased the record of the next one stuck after it, and sampling
    stopped for good."""
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.3)
    run_stuck_in_turn(monkeypatch, [Blocks(f"blocks{i}") for i in range(n)])


def test_two_collectors_of_one_name_stuck_in_turn_are_each_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two collectors of one name (two of the same class) stuck one after the other."""
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.3)
    run_stuck_in_turn(monkeypatch, [Blocks("blocks"), Blocks("blocks")])


class BlocksEachTime(BaseCollector):
    """Once ``block`` is set, every ``sample()`` blocks until its own entry is released."""

    name = "again"

    def __init__(self) -> None:
        self.block = threading.Event()
        self.entries: list[threading.Event] = []  # one per blocked call, in order

    def sample(self) -> dict[str, float]:
        if self.block.is_set():
            go = threading.Event()
            self.entries.append(go)
            go.wait(60)
        return {"again.x": 1.0}


def test_the_same_collector_stuck_twice_is_found_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """One collector instance sampled twice a tick (listed twice) is stuck on the first
    thread, left behind, then stuck again on the new thread while the first returns."""
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.3)
    good, again = Counting(), BlocksEachTime()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[good, again, again]).start()
        try:
            again.block.set()
            wait_for(lambda: len(again.entries) == 1, timeout=5.0)
            wait_for(lambda: m.collectors == [good, again], timeout=5.0)  # left behind once
            wait_for(lambda: len(again.entries) == 2, timeout=5.0)  # stuck on the new thread
            again.entries[0].set()  # the first thread returns
            wait_for(lambda: m.collectors == [good], timeout=5.0)  # found again
            n = good.n
            wait_for(lambda: good.n > n + 3, timeout=5.0)
            assert m.running
        finally:
            again.block.clear()
            for go in again.entries:
                go.set()
            m.stop()
    warned = messages(caught)
    assert len(warned) == 2 and all("'again' has not returned" in w for w in warned), warned


def run_stuck_in_turn(monkeypatch: pytest.MonkeyPatch, stuck: list[Blocks]) -> None:
    """Each of ``stuck`` blocks in turn; the one before it returns while it is blocked."""
    good = Counting()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[good, *stuck]).start()
        try:
            for i, c in enumerate(stuck):
                c.block.set()
                assert c.blocked.wait(5)
                if i:
                    stuck[i - 1].go.set()  # the one left behind returns: c still is found
                wait_for(lambda c=c: c not in m.collectors, timeout=5.0)
                n = good.n
                wait_for(lambda n=n: good.n > n + 3, timeout=5.0)  # sampling again
            assert m.running and m.collectors == [good]
        finally:
            for c in stuck:
                c.go.set()
            m.stop()
    warned = messages(caught)
    assert len(warned) == len(stuck), warned
    for w, c in zip(warned, stuck):
        assert f"{c.name!r} has not returned from sample()" in w
