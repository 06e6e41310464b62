"""The engine: schedule, aggregation, empty windows, failures, lifecycle, exit and fork."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import sysmetrics.monitor as sysmetrics_monitor
from sysmetrics import BaseCollector, SystemMetricsWarning, SystemMonitor, engine
from sysmetrics.collectors.base import BackgroundCollector
from sysmetrics.monitor import Clock
from sysmetrics.sinks.jsonl import JsonlSink
from tests.conftest import ScriptedCollector
from tests.polling import wait_for


class TimestampCollector(BaseCollector):
    """Records when each sample happened; each sample takes ``cost`` seconds."""

    name = "timestamps"

    def __init__(self, cost: float = 0.0) -> None:
        self.cost = cost
        self.times: list[float] = []

    def sample(self) -> dict[str, float]:
        self.times.append(time.monotonic())
        if self.cost:
            time.sleep(self.cost)
        return {"n": float(len(self.times))}


class FailingCollector(BaseCollector):
    """Works ``ok_samples`` times, then raises on every call."""

    name = "failing"

    def __init__(self, ok_samples: int) -> None:
        self.ok_samples = ok_samples
        self.calls = 0
        self.closed = False

    def sample(self) -> dict[str, float]:
        self.calls += 1
        if self.calls > self.ok_samples:
            raise OSError("device went away")
        return {"failing.value": 1.0}

    def close(self) -> None:
        self.closed = True


class FakeClock(Clock):
    """The engine's clock without sleeping: ``wait`` jumps to its deadline.

    It models time as the schedule sees it: a sample that costs ``cost`` seconds moves
    the clock on by that much (``TimestampCollector`` advances it), and after ``ticks``
    waits the clock reports a stop, as ``stop()`` would.
    """

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


class ClockedCollector(BaseCollector):
    """Records the fake clock's time at each sample and moves it on by ``cost``."""

    name = "clocked"

    def __init__(self, clock: FakeClock, cost: float) -> None:
        self.clock, self.cost = clock, cost
        self.times: list[float] = []
        self.closed = False

    def sample(self) -> dict[str, float]:
        self.times.append(self.clock.now - 1000.0)
        self.clock.now += self.cost
        return {"n": float(len(self.times))}

    def close(self) -> None:
        self.closed = True


def run_schedule(interval: float, cost: float, ticks: int) -> list[float]:
    """The sample times (from the start) of a monitor on a fake clock, last sample excluded."""
    clock = FakeClock(ticks)
    c = ClockedCollector(clock, cost)
    m = SystemMonitor(interval=interval, collectors=[c], clock=clock).start()
    wait_for(lambda: c.closed)  # the thread took its last sample and closed it
    m.stop()
    return c.times[:-1]


# -- schedule ------------------------------------------------------------------------


def test_schedule_does_not_drift_when_sampling_takes_time() -> None:
    # A "sample, then sleep(interval)" loop would sample every 0.07 s and drift off the grid.
    times = run_schedule(interval=0.05, cost=0.02, ticks=20)
    assert times == pytest.approx([k * 0.05 for k in range(21)])


def test_overrunning_samples_skip_ticks_instead_of_bunching() -> None:
    # Each sample takes 2.4 intervals: the ticks it overran are skipped, never squeezed in.
    times = run_schedule(interval=0.05, cost=0.12, ticks=10)
    assert times == pytest.approx([k * 0.15 for k in range(11)])


@pytest.mark.serial
def test_the_schedule_holds_on_a_real_clock() -> None:
    """The same schedule on the real clock: samples land on the grid, on average."""
    interval, cost = 0.05, 0.02
    c = TimestampCollector(cost=cost)
    with SystemMonitor(interval=interval, collectors=[c]):
        time.sleep(0.6)
    times = c.times[:-1]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(interval, rel=0.2)


def test_start_takes_the_first_sample_before_returning() -> None:
    c = TimestampCollector()
    m = SystemMonitor(interval=3600, collectors=[c])
    m.start()
    try:
        assert len(c.times) == 1
        assert m.snapshot() == {"n": 1.0}
    finally:
        m.stop()
    assert len(c.times) == 2  # stop() takes one last sample


# -- aggregation -----------------------------------------------------------------------


def test_window_aggregation_rules() -> None:
    c = ScriptedCollector({"gauge": 10.0, "counter": 5.0, "peak": 100.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        assert m.snapshot() == {"gauge": 10.0, "counter": 5.0, "peak": 100.0, "peak.max": 100.0}
        c.feed(
            {"gauge": 1.0, "counter": 6.0, "peak": 100.0},
            {"gauge": 2.0, "counter": 7.0, "peak": 400.0},
            {"gauge": 6.0, "counter": 9.0, "peak": 100.0},
        )
        c.wait_entered(5)  # start's sample + 3 fed ones stored, the 5th call waits
        assert m.snapshot() == {"gauge": 3.0, "counter": 9.0, "peak": 200.0, "peak.max": 400.0}
    finally:
        c.release()
        m.stop()
    assert c.closed


def test_empty_window_repeats_latest_values() -> None:
    c = ScriptedCollector({"gauge": 1.0, "counter": 1.0, "peak": 1.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        m.snapshot()
        c.feed(
            {"gauge": 4.0, "counter": 2.0, "peak": 8.0}, {"gauge": 6.0, "counter": 3.0, "peak": 2.0}
        )
        c.wait_entered(4)
        assert m.snapshot() == {"gauge": 5.0, "counter": 3.0, "peak": 5.0, "peak.max": 8.0}
        # No sample since: the latest values, never an empty dict.
        expected = {"gauge": 6.0, "counter": 3.0, "peak": 2.0, "peak.max": 2.0}
        assert m.snapshot() == expected
        assert m.snapshot() == expected
    finally:
        c.release()
        m.stop()


def test_snapshot_before_start_is_empty() -> None:
    m = SystemMonitor(collectors=[TimestampCollector()])
    assert m.snapshot() == {}
    m.stop()  # stopping a monitor that never started is fine


# -- failures ------------------------------------------------------------------------


def test_collector_failing_on_the_thread_is_disabled_with_one_warning() -> None:
    good = ScriptedCollector({"good": 1.0})
    bad = FailingCollector(ok_samples=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.01, collectors=[bad, good]).start()
        try:
            assert m.snapshot() == {"failing.value": 1.0, "good": 1.0}
            good.feed({"good": 2.0}, {"good": 3.0}, {"good": 4.0})
            good.wait_entered(5)
            snap = m.snapshot()
        finally:
            good.release()
            m.stop()
    assert snap == {"good": 3.0}  # the failed collector's keys are gone
    assert bad.calls == 2 and bad.closed
    assert m.collectors == [good]
    messages = [str(w.message) for w in caught if w.category is SystemMetricsWarning]
    assert len(messages) == 1
    assert "'failing'" in messages[0] and "device went away" in messages[0]


def test_collector_failing_at_start_does_not_stop_the_others() -> None:
    good = TimestampCollector()
    with pytest.warns(SystemMetricsWarning, match="failing"):
        m = SystemMonitor(interval=3600, collectors=[FailingCollector(0), good]).start()
    try:
        assert m.snapshot() == {"n": 1.0}
    finally:
        m.stop()


# -- lifecycle -----------------------------------------------------------------------


def test_stop_is_idempotent_and_quick() -> None:
    m = SystemMonitor(interval=5.0, collectors=[TimestampCollector()]).start()
    t = time.monotonic()
    m.stop()
    m.stop()
    assert time.monotonic() - t < 1.0  # does not wait out the 5 s interval
    assert not m.running
    with pytest.raises(RuntimeError, match="create a new one"):
        m.start()


@pytest.mark.parametrize("failing", ["sysmetrics-monitor", "sysmetrics-watchdog"])
def test_a_start_that_cannot_start_a_thread_frees_the_collectors(
    monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """Regression: ``RuntimeError: can't start new thread`` (pids.max, ulimit -u) in
    ``start()`` left the monitor stopped with its collectors open (NVML handles...), and
    ``stop()`` of a stopped monitor closes nothing. Whichever thread fails, the collectors
    are closed: by ``start()`` where no sampling thread runs, else by that thread."""
    start = threading.Thread.start

    def failing_start(self: threading.Thread) -> None:
        if self.name == failing:
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", failing_start)
    c = ClockedCollector(FakeClock(0), 0.0)  # its clock only stamps the samples
    m = SystemMonitor(interval=0.05, collectors=[c])
    with pytest.raises(RuntimeError, match="can't start new thread"):
        m.start()
    wait_for(lambda: c.closed)
    m.stop()
    assert not m.running


def test_start_is_idempotent_while_running() -> None:
    c = TimestampCollector()
    with SystemMonitor(interval=3600, collectors=[c]) as m:
        m.start()
        assert len(c.times) == 1
        assert [t.name for t in threading.enumerate()].count("sysmetrics-monitor") == 1


def test_stop_returns_when_a_collector_hangs() -> None:
    class Hanging(BaseCollector):
        name = "hanging"

        def __init__(self) -> None:
            self.calls = 0
            self.go = threading.Event()

        def sample(self) -> dict[str, float]:
            self.calls += 1
            if self.calls > 1:
                self.go.wait(30)
            return {}

    c = Hanging()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    while c.calls < 2:
        time.sleep(0.005)
    t = time.monotonic()
    m.stop(timeout=0.2)
    assert time.monotonic() - t < 1.0
    c.go.set()  # let the stuck thread finish so the test leaves none behind


@pytest.mark.parametrize("hang", [False, True])
def test_a_running_monitor_does_not_hold_up_interpreter_exit(hang: bool) -> None:
    script = textwrap.dedent(
        f"""
        import time
        from sysmetrics import BaseCollector, SystemMonitor

        class Slow(BaseCollector):
            name = "slow"
            calls = 0
            def sample(self):
                self.calls += 1
                if {hang} and self.calls > 1:
                    time.sleep(600)
                return {{"x": 1.0}}

        m = SystemMonitor(interval=0.05).start()      # the real host collectors
        SystemMonitor(interval=0.01, collectors=[Slow()]).start()
        time.sleep(0.3)
        print("done", time.monotonic(), flush=True)  # the system-wide clock
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    exited = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    said, done = proc.stdout.split()
    assert said == "done"
    # From the end of the script to the process's exit (not its start-up, which a machine
    # busy beside this test, at a lower priority, can stretch to 15 s).
    assert exited - float(done) < 10.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available on this OS")
def test_forked_child_does_not_inherit_a_running_monitor() -> None:
    c = TimestampCollector()
    with SystemMonitor(interval=0.01, collectors=[c]) as m:
        time.sleep(0.05)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
            pid = os.fork()
        if pid == 0:  # child
            ok = not m.running and "sysmetrics-monitor" not in [
                t.name for t in threading.enumerate()
            ]
            m.stop()  # a no-op in the child, never touching the parent's collectors
            snap = m.snapshot()
            os._exit(0 if ok and snap.get("n") else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        n = len(c.times)
        time.sleep(0.05)
        assert len(c.times) > n  # the parent keeps sampling


# -- configuration errors -------------------------------------------------------------


@pytest.mark.parametrize("interval", [0, -1, 0.001, 1e9, float("nan"), float("inf")])
def test_bad_interval_is_rejected_with_what_is_allowed(interval: float) -> None:
    with pytest.raises(ValueError, match=r"interval=.* between 0.01 and 3600"):
        SystemMonitor(interval=interval)


@pytest.mark.parametrize("interval", ["1", None, True])
def test_interval_of_the_wrong_type_is_rejected(interval: object) -> None:
    with pytest.raises(TypeError, match="interval="):
        SystemMonitor(interval=interval)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("disk_paths", "match"),
    [
        (None, r"disk_paths=None is invalid: use a path or a list of paths"),
        (5, r"disk_paths=5 is invalid: use a path or a list of paths"),
        ([None], r"disk_paths contains None, which is not a path"),
        (["/", 3], r"disk_paths contains 3, which is not a path"),
    ],
)
def test_disk_paths_of_the_wrong_type_name_the_option(disk_paths: object, match: str) -> None:
    """Regression: these raised bare Python errors ('NoneType' object is not iterable)."""
    with pytest.raises(TypeError, match=match):
        SystemMonitor(disk_paths=disk_paths)  # type: ignore[arg-type]


def test_numpy_numbers_are_accepted_as_the_interval() -> None:
    """Regression: np.int64(1) and np.float32(0.5) were rejected as "not a number"."""
    np = pytest.importorskip("numpy")
    assert SystemMonitor(interval=np.int64(1)).interval == 1.0
    assert SystemMonitor(interval=np.float32(0.5)).interval == 0.5
    with pytest.raises(TypeError, match="interval="):
        SystemMonitor(interval=np.bool_(True))  # type: ignore[arg-type]


def test_missing_disk_path_is_rejected(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(os.fspath(tmp_path), "nope")
    with pytest.raises(ValueError, match=r"disk_paths contains '.*nope', which does not exist"):
        SystemMonitor(disk_paths=["/", missing])


def test_unknown_option_is_rejected_with_a_suggestion() -> None:
    with pytest.raises(
        TypeError, match=r"unknown option 'intervall' \(did you mean 'interval'\?\)"
    ):
        SystemMonitor(intervall=1.0)


def test_bad_collector_and_pid_are_rejected() -> None:
    with pytest.raises(TypeError, match="not a Collector"):
        SystemMonitor(collectors=[object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="pid=-3"):
        SystemMonitor(pid=-3)
    with pytest.raises(ValueError, match="pid=999999999 is invalid: no such process"):
        SystemMonitor(pid=999_999_999)
    with pytest.raises(TypeError, match="track_process_tree"):
        SystemMonitor(track_process_tree="yes")  # type: ignore[arg-type]


def test_single_disk_path_string_is_accepted(tmp_path: os.PathLike[str]) -> None:
    m = SystemMonitor(disk_paths=tmp_path)
    assert m.options["disk_paths"] == (os.fspath(tmp_path),)


# -- faults stay contained --------------------------------------------------------------


class Junk(BaseCollector):
    """Returns ``good`` on its first sample, then ``junk`` (as a misbehaving collector)."""

    name = "junk"

    def __init__(self, junk: object, good: object = None) -> None:
        self.junk = junk
        self.good = {"junk.ok": 1.0} if good is None else good
        self.calls = 0
        self.closed = False

    def sample(self) -> Any:
        self.calls += 1
        return self.good if self.calls == 1 else self.junk

    def close(self) -> None:
        self.closed = True


class BadAggregation(BaseCollector):
    name = "badagg"

    def sample(self) -> dict[str, float]:
        return {"badagg.x": 1.0}

    def aggregation(self, key: str) -> Any:
        raise KeyError("no such key kind")


def feed_until(good: ScriptedCollector, m: SystemMonitor, n: int) -> dict[str, float]:
    """Feed ``good`` ``n`` increasing samples and return the snapshot of them."""
    good.feed(*({"good": float(i)} for i in range(2, n + 2)))
    good.wait_entered(n + 2)
    return m.snapshot()


@pytest.mark.parametrize(
    ("junk", "shown"),
    [
        ({"junk.ok": "12"}, "junk.ok='12'"),
        ({"junk.ok": None}, "junk.ok=None"),
        ({"junk.ok": True}, "junk.ok=True"),
        ({3: 1.0}, "the key 3"),
        ([1.0, 2.0], "[1.0, 2.0]"),
        (None, "returned None"),
        ({"junk.ok": "x" * 100_000}, "junk.ok='xxxx"),
    ],
    ids=["str", "None", "bool", "int-key", "list", "None-sample", "huge-str"],
)
def test_junk_disables_its_collector_with_one_warning_and_the_rest_goes_on(
    junk: object, shown: str
) -> None:
    """Regression: junk killed the sampling thread silently and froze every metric."""
    good = ScriptedCollector({"good": 1.0})
    bad = Junk(junk)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.01, collectors=[bad, good]).start()
        try:
            assert m.snapshot() == {"junk.ok": 1.0, "good": 1.0}
            snap = feed_until(good, m, 3)  # the samples go on after the junk
        finally:
            good.release()
            m.stop()
    assert snap == {"good": 3.0}  # mean of 2, 3, 4: live, and the junk's keys are gone
    assert m.collectors == [good] and bad.closed and bad.calls == 2
    messages = [str(w.message) for w in caught if w.category is SystemMetricsWarning]
    assert len(messages) == 1 and "'junk'" in messages[0] and shown in messages[0], messages
    assert len(messages[0]) < 400  # a huge value is quoted short


def test_an_aggregation_that_raises_disables_its_collector() -> None:
    good = ScriptedCollector({"good": 1.0})
    with pytest.warns(SystemMetricsWarning, match=r"'badagg' aggregation\('badagg.x'\) failed"):
        m = SystemMonitor(interval=0.01, collectors=[BadAggregation(), good]).start()
    try:
        assert m.snapshot() == {"good": 1.0}
        assert feed_until(good, m, 3) == {"good": 3.0}
    finally:
        good.release()
        m.stop()


def test_non_finite_values_are_dropped_never_averaged_in(caplog: pytest.LogCaptureFixture) -> None:
    c = ScriptedCollector({"gauge": 1.0, "peak": 5.0})
    caplog.set_level("DEBUG", logger="sysmetrics")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SystemMetricsWarning)  # nothing is disabled
        m = SystemMonitor(interval=0.01, collectors=[c]).start()
        try:
            m.snapshot()
            c.feed(
                {"gauge": 2.0, "peak": float("nan")},
                {"gauge": float("inf"), "peak": float("-inf")},
                {"gauge": 10**400, "peak": float("nan")},
                {"gauge": 4.0, "peak": float("nan")},
            )
            c.wait_entered(6)
            snap = m.snapshot()
        finally:
            c.release()
            m.stop()
    # gauge: mean of 2 and 4; peak: no finite sample in the window, so it is not current.
    assert snap == {"gauge": 3.0}
    assert all(math.isfinite(v) for v in snap.values())
    assert "dropped" in caplog.text


class Raises(BaseCollector):
    name = "raises"

    def __init__(self, exc: BaseException, after: int = 0) -> None:
        self.exc = exc
        self.after = after
        self.calls = 0

    def sample(self) -> dict[str, float]:
        self.calls += 1
        if self.calls > self.after:
            raise self.exc
        return {"raises.x": 1.0}


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), RuntimeError("x")])
def test_start_never_raises_because_of_a_collector(exc: BaseException) -> None:
    good = ScriptedCollector({"good": 1.0})
    with pytest.warns(SystemMetricsWarning, match="'raises' failed"):
        m = SystemMonitor(interval=0.01, collectors=[Raises(exc), good]).start()
    try:
        assert m.running and m.snapshot() == {"good": 1.0}
        assert feed_until(good, m, 3) == {"good": 3.0}
    finally:
        good.release()
        m.stop()


class ExplodingMapping(dict):  # type: ignore[type-arg]
    """A sample whose items() raises KeyboardInterrupt: a fault inside the engine's loop."""

    def items(self) -> Any:
        raise KeyboardInterrupt


def test_a_dead_sampling_thread_never_hides_behind_a_running_monitor() -> None:
    c = Junk(ExplodingMapping(), good={"junk.ok": 1.0})
    with pytest.warns(SystemMetricsWarning, match="sampling thread failed"):
        m = SystemMonitor(interval=0.01, collectors=[c]).start()
        wait_for(lambda: not m.running, timeout=2.0)
    assert "sysmetrics-monitor" not in [t.name for t in threading.enumerate()]
    m.stop()  # and stopping it afterwards is fine


class Blocks(BaseCollector):
    """Blocks in ``sample()`` from call ``first`` on, until released."""

    name = "blocks"

    def __init__(self, first: int = 1) -> None:
        self.first = first
        self.calls = 0
        self.go = threading.Event()

    def sample(self) -> dict[str, float]:
        self.calls += 1
        if self.calls >= self.first:
            self.go.wait(60)
        return {"blocks.x": 1.0}


def test_start_returns_in_bounded_time_when_the_first_sample_blocks() -> None:
    """Regression: start() took the first sample itself and never returned."""
    c = Blocks(first=1)
    t = time.monotonic()
    m = SystemMonitor(interval=0.05, collectors=[c]).start()
    try:
        assert time.monotonic() - t < 3.0
        assert m.running and m.snapshot() == {}
    finally:
        t = time.monotonic()
        m.stop()
        assert time.monotonic() - t < 3.0
        c.go.set()


def test_stop_waits_a_bounded_time_whatever_the_interval() -> None:
    """Regression: stop() waited interval + 1 s (up to an hour) for a stuck collector."""
    c = Blocks(first=2)  # the first sample returns, stop's last one blocks
    m = SystemMonitor(interval=3600, collectors=[c]).start()
    t = time.monotonic()
    m.stop()
    assert time.monotonic() - t < 3.0
    c.go.set()


def test_a_stuck_collector_is_left_behind_and_the_others_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.3)
    good = TimestampCollector()
    stuck = Blocks(first=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[good, stuck]).start()
        try:
            wait_for(lambda: stuck.calls >= 3)
            n = len(good.times)
            wait_for(lambda: m.collectors == [good], timeout=3.0)
            wait_for(lambda: len(good.times) > n + 5, timeout=3.0)  # sampling again
            snap = m.snapshot()
            assert "blocks.x" not in snap and "n" in snap and m.running
        finally:
            stuck.go.set()
            m.stop()
    messages = [str(w.message) for w in caught if w.category is SystemMetricsWarning]
    assert len(messages) == 1 and "'blocks' has not returned from sample()" in messages[0]


def test_a_stuck_collector_is_noticed_without_any_reader(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Regression: the stuck check ran only in ``snapshot()``/``latest()``, so with a run
    file alone (``sysmetrics record``) a collector blocked in ``sample()`` stopped every
    key for good, with no warning."""
    monkeypatch.setattr(sysmetrics_monitor, "STUCK_AFTER", 0.3)
    good = TimestampCollector()
    stuck = Blocks(first=3)
    run_file = tmp_path / "run.jsonl"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[good, stuck]).start()
        sink = JsonlSink(m, run_file)
        try:
            wait_for(lambda: stuck.calls >= 3)
            blocked = time.time()
            # Nobody reads the monitor: the run file's lines are the only output.
            wait_for(lambda: sum(r["time"] > blocked + 0.5 for r in lines(run_file)) >= 3, 5.0)
        finally:
            stuck.go.set()
            m.stop()
            sink.close()
    after = [r for r in lines(run_file) if r["time"] > blocked + 0.5]
    assert len(after) >= 3 and all("n" in r["metrics"] for r in after)  # on schedule again
    assert all("blocks.x" not in r["metrics"] for r in after)
    messages = [str(w.message) for w in caught if w.category is SystemMetricsWarning]
    assert len(messages) == 1 and "'blocks' has not returned from sample()" in messages[0]


def lines(path: Path) -> list[dict[str, Any]]:
    """The run file's complete sample lines (its ``run`` and ``end`` lines left out)."""
    text = path.read_text() if path.exists() else ""
    records = [json.loads(x) for x in text.splitlines(keepends=True) if x.endswith("\n")]
    return [r for r in records if "metrics" in r]


EXIT_SCRIPT = """
import sys, threading, time
from sysmetrics import BaseCollector, SystemMonitor

class Stuck(BaseCollector):
    name = "stuck"
    def __init__(self, first):
        self.first, self.calls = first, 0
    def sample(self):
        self.calls += 1
        if self.calls >= self.first:
            threading.Event().wait()  # forever
        return {"x": 1.0}

first = int(sys.argv[1])
monitors = [SystemMonitor(interval=0.01, collectors=[Stuck(first)]).start() for _ in range(5)]
time.sleep(0.2)
print(time.monotonic(), flush=True)
"""


@pytest.mark.parametrize("first", [1, 2], ids=["stuck-at-start", "stuck-later"])
def test_interpreter_exit_with_stuck_monitors_takes_about_a_second(first: int) -> None:
    """Regression: each stuck monitor cost 1 s at exit, one after the other, and the exit
    handler sampled again on the main thread (a hang with a collector stuck for good)."""
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(first)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    # The child's monotonic clock is the same system clock as ours.
    assert ended - float(proc.stdout.strip()) < 2.0


class Churning(BaseCollector):
    """Reports 50 new keys at every sample, as an endpoint whose labels keep changing."""

    name = "churn"

    def __init__(self) -> None:
        self.calls = 0

    def sample(self) -> dict[str, float]:
        self.calls += 1
        return {f"churn.{self.calls}.{i}": 1.0 for i in range(50)}


def test_keys_that_stop_being_reported_are_forgotten() -> None:
    """Regression: every key ever seen kept a window, so the engine grew without bound."""
    c = Churning()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        sizes = []
        deadline = time.monotonic() + 60.0
        # 20 windows and over 100 samples, however busy the machine (a loaded one may
        # sample less often than every 10 ms)
        called = 0  # samples begun before the previous snapshot
        while len(sizes) < 20 or (c.calls <= 100 and time.monotonic() < deadline):
            time.sleep(0.05)
            snap = m.snapshot()
            now = c.calls
            # The keys of this window, not of every window: the samples begun since the
            # previous snapshot, and one begun before it and stored after. (A fixed 6
            # samples a window failed beside parallel workers: the 0.05 s sleep overran
            # and a window held 7, 350 keys.)
            assert len(snap) <= 50 * (now - called + 1)
            called = now
            sizes.append(len(m._series_store.series))
        assert c.calls > 100
    finally:
        m.stop()
    bound = 50 * (engine.FORGET_AFTER + 2 * engine._SWEEP_EVERY)
    assert max(sizes) <= bound, (max(sizes), bound)


class Reader(BackgroundCollector):
    """A reader-thread collector: publishes twice, then fails (``fail``) or goes quiet."""

    name = "reader"
    stale_after = 0.3

    def __init__(self, fail: bool) -> None:
        super().__init__()
        self.fail = fail

    def _run(self) -> None:
        self._set_latest({"reader.x": 1.0})
        self._closed.wait(0.1)
        self._set_latest({"reader.x": 2.0})
        if self.fail:
            self._closed.wait(0.2)
            raise ValueError("unexpected output: " + "y" * 10_000)
        self._closed.wait()  # alive, but the source has stopped answering


@pytest.mark.parametrize("fail", [True, False], ids=["thread-fails", "source-quiet"])
def test_a_reader_thread_never_serves_stale_values(fail: bool) -> None:
    """Regression: a reader thread that died (or a source that stopped) left its last
    values served as current forever, without a warning."""
    good = TimestampCollector()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SystemMonitor(interval=0.02, collectors=[Reader(fail), good]) as m:
            wait_for(lambda: m.snapshot().get("reader.x") == 2.0, timeout=3.0)
            time.sleep(0.6)
            m.snapshot()  # the window that saw the last values go
            taken = len(good.times)  # samples of the next window, however busy the machine
            wait_for(lambda: len(good.times) >= taken + 2)
            snap = m.snapshot()
    assert "reader.x" not in snap and "n" in snap  # the others go on
    messages = [str(w.message) for w in caught if w.category is SystemMetricsWarning]
    if fail:
        assert len(messages) == 1 and "'reader'" in messages[0], messages
        assert "reader thread failed: ValueError" in messages[0] and len(messages[0]) < 600
    else:
        assert messages == []
