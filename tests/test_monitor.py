"""The engine: schedule, aggregation, empty windows, failures, lifecycle, exit and fork."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from sysmetrics import BaseCollector, SystemMetricsWarning, SystemMonitor
from tests.conftest import ScriptedCollector


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


def grid_residuals(times: list[float], interval: float) -> list[float]:
    """Distance of each sample from the schedule start + k * interval, in intervals."""
    t0 = times[0]
    out = []
    for t in times[1:]:
        k = (t - t0) / interval
        out.append(abs(k - round(k)))
    return out


# -- schedule ------------------------------------------------------------------------


def test_schedule_does_not_drift_when_sampling_takes_time() -> None:
    interval, cost = 0.05, 0.02
    c = TimestampCollector(cost=cost)
    with SystemMonitor(interval=interval, collectors=[c]):
        time.sleep(1.0)
    times = c.times[:-1]  # the last one is the sample taken by stop()
    # A "sample, then sleep(interval)" loop would run every 0.07 s: ~14 samples, off-grid.
    assert len(times) >= 0.8 * (1.0 / interval)
    residuals = sorted(grid_residuals(times, interval))
    assert residuals[len(residuals) // 2] < 0.1, residuals
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert sum(gaps) / len(gaps) == pytest.approx(interval, rel=0.15)


def test_overrunning_samples_skip_ticks_instead_of_bunching() -> None:
    interval, cost = 0.05, 0.12
    c = TimestampCollector(cost=cost)
    with SystemMonitor(interval=interval, collectors=[c]):
        time.sleep(1.0)
    times = c.times[:-1]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= cost  # no catch-up burst
    residuals = sorted(grid_residuals(times, interval))
    assert residuals[len(residuals) // 2] < 0.15, residuals  # still on the grid


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
        print("done", flush=True)
        """
    )
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    assert time.monotonic() - t < 10.0


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
    assert m.disk_paths == (os.fspath(tmp_path),)
