"""One sampler, many readers: each reader's windows, latest(), buffered samples, costs."""

from __future__ import annotations

import gc
import threading

import pytest

from sysmetrics import SystemMonitor, engine
from tests.conftest import ScriptedCollector


def fed(c: ScriptedCollector, entered: int, *samples: dict[str, float]) -> None:
    """Feed ``samples`` and wait until all are stored (``sample()`` entered once more)."""
    c.feed(*samples)
    c.wait_entered(entered)


def test_two_readers_at_different_cadences_get_exact_windows() -> None:
    c = ScriptedCollector({"gauge": 0.0, "counter": 0.0, "peak": 0.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        fast, slow = m.reader(), m.reader()  # from the next sample on
        fed(c, 4, *({"gauge": g, "counter": g, "peak": p} for g, p in [(1, 50), (2, 900), (3, 10)]))
        assert fast.snapshot() == {"gauge": 2.0, "counter": 3.0, "peak": 320.0, "peak.max": 900.0}
        fed(c, 6, *({"gauge": g, "counter": g, "peak": 20.0} for g in (4.0, 5.0)))
        assert fast.snapshot() == {"gauge": 4.5, "counter": 5.0, "peak": 20.0, "peak.max": 20.0}
        # The slow reader's window holds all five samples, the peak the fast one took included.
        assert slow.snapshot() == {"gauge": 3.0, "counter": 5.0, "peak": 200.0, "peak.max": 900.0}
        # The default reader (monitor.snapshot) has its own window, since start.
        assert m.snapshot() == {"gauge": 2.5, "counter": 5.0, "peak": 500 / 3, "peak.max": 900.0}
        # With no new sample each repeats the latest values.
        repeat = {"gauge": 5.0, "counter": 5.0, "peak": 20.0, "peak.max": 20.0}
        assert fast.snapshot() == slow.snapshot() == m.snapshot() == repeat
    finally:
        c.release()
        m.stop()


def test_without_repeat_no_new_sample_is_an_empty_window() -> None:
    """What the callbacks read (``repeat=False``): with no sample since the previous call
    the window is empty, not the previous values again."""
    c = ScriptedCollector({"gauge": 0.0, "peak": 0.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        r = m.reader()
        fed(c, 3, {"gauge": 1.0, "peak": 4.0}, {"gauge": 3.0, "peak": 2.0})
        assert r.snapshot(repeat=False) == {"gauge": 2.0, "peak": 3.0, "peak.max": 4.0}
        assert r.snapshot(repeat=False) == {}  # no sample since
        assert r.snapshot() == {"gauge": 3.0, "peak": 2.0, "peak.max": 2.0}  # the default
        fed(c, 4, {"gauge": 5.0, "peak": 1.0})
        assert r.snapshot(repeat=False) == {"gauge": 5.0, "peak": 1.0, "peak.max": 1.0}
    finally:
        c.release()
        m.stop()


def test_latest_returns_the_last_sample_without_consuming_a_window() -> None:
    c = ScriptedCollector({"gauge": 1.0, "peak": 1.0})
    m = SystemMonitor(interval=0.01, collectors=[c])
    assert m.latest() == {}
    m.start()
    try:
        fed(c, 3, {"gauge": 3.0, "peak": 7.0}, {"gauge": 5.0, "peak": 2.0})
        assert m.latest() == {"gauge": 5.0, "peak": 2.0}  # no .max: a sample, not a window
        assert m.latest() == {"gauge": 5.0, "peak": 2.0}
        assert m.snapshot() == {"gauge": 3.0, "peak": 10 / 3, "peak.max": 7.0}
    finally:
        c.release()
        m.stop()
    assert m.latest() == {}  # stopped: nothing is current any more


def test_a_buffering_reader_gets_every_sample_with_the_step() -> None:
    c = ScriptedCollector({"gauge": 0.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        r = m.reader(buffer=3)
        assert r.samples() == []
        m.step = 7
        fed(c, 3, {"gauge": 1.0}, {"gauge": 2.0})
        assert r.wait(0)
        got = r.samples()
        assert [(s.step, s.values) for s in got] == [(7, {"gauge": 1.0}), (7, {"gauge": 2.0})]
        assert got[0].monotonic <= got[1].monotonic and got[0].time > 1e9
        assert not r.wait(0)  # taken
        # A consumer that stalls loses the oldest samples, counted; sampling goes on.
        m.step = None
        fed(c, 8, *({"gauge": float(g)} for g in range(3, 8)))
        assert [s.values["gauge"] for s in r.samples()] == [5.0, 6.0, 7.0]
        assert r.dropped == 2
        with pytest.raises(RuntimeError, match="keeps samples"):
            r.snapshot()
    finally:
        c.release()
        m.stop()


def test_a_closed_or_dropped_reader_costs_nothing() -> None:
    c = ScriptedCollector({"gauge": 0.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        kept, closed, dropped = m.reader(), m.reader(buffer=10), m.reader()
        woke = threading.Thread(target=closed.wait)
        woke.start()
        closed.close()
        closed.close()  # idempotent
        woke.join(5)
        assert not woke.is_alive()  # a sink waiting on it is woken
        assert closed.samples() == []
        assert closed.wait(5)  # at once, however often it is drained
        del dropped
        gc.collect()
        fed(c, 3, {"gauge": 1.0}, {"gauge": 3.0})
        with m._lock:
            live = m._series_store.live()
        assert live == [m._default, kept]
        assert kept.snapshot() == {"gauge": 2.0}
        kept.close()
        assert kept.snapshot() == {}  # a closed reader has no window
    finally:
        c.release()
        m.stop()


def test_a_reader_that_reads_rarely_keeps_the_window_of_a_key_that_went_away() -> None:
    """A per-epoch reader still gets a key that was reported early in the epoch only."""
    c = ScriptedCollector({"gone": 4.0, "stays": 0.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        epoch, batch = m.reader(), m.reader()
        fed(c, 2, {"gone": 6.0, "stays": 1.0})
        ticks = engine.FORGET_AFTER + 2 * engine._SWEEP_EVERY
        for n in range(ticks):
            fed(c, 3 + n, {"stays": 1.0})
            batch.snapshot()
        assert "gone" not in batch.snapshot()
        assert epoch.snapshot() == {"gone": 6.0, "stays": 1.0}
        m.snapshot()  # the default reader had it too: now nobody holds it
        fed(c, 3 + ticks + engine._SWEEP_EVERY, *[{"stays": 1.0}] * 16)
        assert "gone" not in m._series_store.series
    finally:
        c.release()
        m.stop()


def test_bad_buffer_and_options_with_collectors_are_clear_errors() -> None:
    c = ScriptedCollector({"x": 1.0})
    m = SystemMonitor(collectors=[c])
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(ValueError, match=rf"buffer={bad!r} is invalid: use 0"):
            m.reader(buffer=bad)  # type: ignore[arg-type]
    m.stop()
    with pytest.raises(TypeError, match="SystemMonitor got disk_paths with collectors="):
        SystemMonitor(collectors=[c], disk_paths="/")
    with pytest.raises(TypeError, match="clock=1 is invalid"):
        SystemMonitor(collectors=[c], clock=1)  # type: ignore[arg-type]


class SlowCadence(ScriptedCollector):
    """A scripted collector whose key ``slow`` is measured less often than the samples.

    ``held_for()`` says so as the process collector does for the job's PSS: ``slow`` stays
    current ``hold`` s after its measurement (None: nothing is held, as while PSS fails).
    """

    def __init__(self, first: dict[str, float], hold: float | None) -> None:
        super().__init__(first)
        self.hold = hold

    def held_for(self) -> dict[str, float]:
        return {} if self.hold is None else {"slow": self.hold}


def test_a_key_measured_at_a_slower_cadence_stays_in_snapshots_with_when_it_was_measured() -> None:
    """Issue 35: ``snap["proc.memory.percent"]`` raised KeyError every other window."""
    c = SlowCadence({"gauge": 0.0, "slow": 7.0}, hold=60.0)
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        callbacks = m.reader()
        m.snapshot()
        fed(c, 3, {"gauge": 1.0}, {"gauge": 2.0})  # no ``slow`` in these samples
        snap = m.snapshot()
        assert snap == {"gauge": 1.5, "slow": 7.0}
        assert snap.age("gauge") == 0.0 and snap.age("slow") > 0.0
        assert snap.measured["slow"] < snap.measured["gauge"] == snap.time
        # a scrape between two measurements still serves it (CI, 2026-11-27: Prometheus
        # saw the job's PSS only at the one 0.25 s tick of each reading, and the dashboard
        # test's 10 s window often held none)
        assert m.latest() == {"gauge": 2.0, "slow": 7.0}
        # the callbacks' windows never log it again: it was not measured in them
        assert callbacks.snapshot(repeat=False) == {"gauge": 1.5}
        # longer than the engine keeps a key nobody reports: still held
        ticks = engine.FORGET_AFTER + 2 * engine._SWEEP_EVERY
        fed(c, 3 + ticks, *[{"gauge": 1.0}] * ticks)
        assert m.snapshot()["slow"] == 7.0
        fed(c, 4 + ticks, {"gauge": 1.0, "slow": 9.0})
        snap = m.snapshot()
        assert snap["slow"] == 9.0 and snap.age("slow") == 0.0
        c.hold = None  # no longer current (PSS readings failing): gone at the next tick
        fed(c, 5 + ticks, {"gauge": 1.0})
        assert "slow" not in m.snapshot()
        assert m.latest() == {"gauge": 1.0}
        with pytest.raises(KeyError):
            m.snapshot().age("slow")
    finally:
        c.release()
        m.stop()


def test_a_held_key_goes_once_its_hold_has_passed() -> None:
    c = SlowCadence({"gauge": 0.0, "slow": 7.0}, hold=0.0)
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    try:
        assert m.snapshot() == {"gauge": 0.0, "slow": 7.0}
        fed(c, 3, {"gauge": 1.0})
        assert "slow" not in m.snapshot()  # measured more than 0 s before the latest tick
        assert m.latest() == {"gauge": 1.0}
    finally:
        c.release()
        m.stop()


def test_the_jobs_pss_is_in_every_snapshot_with_its_age(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real process collector: PSS read about once a second, sampled every 0.05 s."""
    import time

    from sysmetrics.collectors.process import ProcessCollector

    # Readings every pss_interval_s (1 s): the spacing by a reading's duration is
    # test_pss.py's (test_the_pss_period_rule). Left on, a reading's wall time on a loaded
    # machine spaced them past this test's 30 s: beside parallel workers at load 16 on 2
    # CPUs no window got one (CI, 2026-11-27).
    monkeypatch.setattr(ProcessCollector, "pss_cpu_share", 1.0)
    monkeypatch.setattr(ProcessCollector, "pss_lock_share", 1.0)
    m = SystemMonitor(interval=0.05).start()
    try:
        logged = m.reader()
        time.sleep(0.3)
        snaps, windows = [], []
        began = time.monotonic()
        # at least 16 windows, and until the callbacks' windows got a reading (30 s at most)
        while len(windows) < 16 or (
            not any("proc.memory.pssMB" in w for w in windows) and time.monotonic() < began + 30
        ):
            time.sleep(0.12)
            snaps.append(m.snapshot())
            windows.append(logged.snapshot(repeat=False))
        elapsed = time.monotonic() - began + 0.3
    finally:
        m.stop()
    for snap in snaps:
        assert {"proc.memory.pssMB", "proc.memory.percent"} <= snap.keys()
        assert 0.0 <= snap.age("proc.memory.percent") <= elapsed
    assert any(snap.age("proc.memory.pssMB") > 0.0 for snap in snaps)  # held between readings
    # what the callbacks log: a reading once, in the window it was measured in
    assert 0 < sum("proc.memory.pssMB" in w for w in windows) < len(windows)
