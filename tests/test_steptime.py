"""The step clock and the monitor's ``step.*`` keys, on a clock the test moves."""

from __future__ import annotations

import pytest

from sysmetrics.collectors.base import BaseCollector
from sysmetrics.monitor import SystemMonitor
from sysmetrics.steptime import StepClock, StepCollector, StepTotals, batch_size


class Ticks:
    """A clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_steps(clock: StepClock, t: Ticks, n: int, fetch: float, compute: float) -> None:
    for _ in range(n):
        t.now += fetch
        clock.begin()
        t.now += compute
        clock.end(samples=8)


def test_clock_splits_each_step_into_wait_and_compute() -> None:
    t = Ticks()
    clock = StepClock(t)
    clock.restart()
    run_steps(clock, t, 10, fetch=0.02, compute=0.03)
    steps, seconds, wait, samples = clock.read()
    assert steps == 10
    assert abs(seconds - 0.5) < 1e-9 and abs(wait - 0.2) < 1e-9 and samples == 80
    overhead = clock.read_window().overhead
    assert overhead != overhead  # the fetch is not timed: no overhead (NaN)


def test_gradient_accumulation_counts_optimizer_steps_and_every_micro_batch_wait() -> None:
    t = Ticks()
    clock = StepClock(t)
    clock.restart()
    for i in range(8):
        t.now += 0.02
        clock.begin()
        t.now += 0.03
        clock.end(samples=4, optimizer_step=i % 2 == 1)
    steps, seconds, wait, samples = clock.read()
    assert steps == 4 and abs(seconds / steps - 0.1) < 1e-9
    assert abs(wait / seconds - 0.4) < 1e-9 and samples == 32


def test_a_timed_fetch_is_the_wait_and_the_rest_between_steps_overhead() -> None:
    """With the fetch timed, the time between the hooks splits into fetch and overhead."""
    t = Ticks()
    clock = StepClock(t)
    clock.timed = True
    read = clock.read
    collector = StepCollector(lambda: read)
    clock.restart()
    for _ in range(10):
        t.now += 0.01  # a callback after ours (the progress bar)
        clock.fetched(0.02)  # the loop's fetch, as the wrapped iterator times it
        t.now += 0.02
        clock.begin()
        t.now += 0.05
        clock.end(samples=8)
    steps, seconds, wait, samples = clock.read()
    overhead = clock.read_window().overhead
    assert steps == 10 and abs(seconds - 0.8) < 1e-9 and samples == 80
    assert abs(wait - 0.2) < 1e-9 and abs(overhead - 0.1) < 1e-9
    out = collector.sample()
    assert out["step.dataWaitPercent"] == pytest.approx(25.0)
    assert out["step.overheadPercent"] == pytest.approx(12.5)


def test_a_fetch_inside_the_hooks_is_waiting_and_never_over_the_gap() -> None:
    """A loop that fetches inside its step (JAX's train function): all of it waiting.

    A fetch reported longer than the time between the hooks counts at most that time.
    """
    t = Ticks()
    clock = StepClock(t)
    clock.timed = True
    clock.restart()
    t.now += 0.01
    clock.begin()
    clock.fetched(0.03)  # inside the hooks
    t.now += 0.05
    clock.end()
    t.now += 0.01
    clock.fetched(0.5)  # more than the 10 ms gap: impossible, counted as the gap
    clock.begin()
    t.now += 0.04
    clock.end()
    steps, seconds, wait, _ = clock.read()
    overhead = clock.read_window().overhead
    assert steps == 2 and abs(seconds - 0.11) < 1e-9
    assert abs(wait - 0.04) < 1e-9  # 0.03 inside the hooks + 0.01 (the gap, capped)
    assert abs(overhead - 0.01) < 1e-9  # the first gap: nothing fetched in it
    assert wait + overhead <= seconds


def test_an_untimed_clock_and_a_step_file_have_no_overhead_key() -> None:
    t = Ticks()
    clock = StepClock(t)
    read = clock.read
    collector = StepCollector(lambda: read)
    clock.restart()
    run_steps(clock, t, 3, fetch=0.02, compute=0.03)
    out = collector.sample()
    assert out["step.dataWaitPercent"] == pytest.approx(40.0)
    assert "step.overheadPercent" not in out
    totals = [StepTotals(0, 0.0, 0.0, 0.0)]
    from_file = StepCollector(lambda: lambda: totals[0])
    from_file.sample()
    totals[0] = StepTotals(4, 2.0, 0.5, 64.0)
    assert "step.overheadPercent" not in from_file.sample()


def test_time_outside_the_loop_is_not_a_step() -> None:
    t = Ticks()
    clock = StepClock(t)
    clock.restart()
    run_steps(clock, t, 2, fetch=0.01, compute=0.01)
    t.now += 30.0  # validation between epochs
    clock.restart()
    run_steps(clock, t, 2, fetch=0.01, compute=0.01)
    assert abs(clock.read().seconds - 0.08) < 1e-9


def test_a_plain_loop_without_restart_times_from_its_second_mark() -> None:
    t = Ticks()
    clock = StepClock(t)
    for _ in range(3):
        t.now += 1.0
        clock.end()
    assert clock.read().steps == 2 and abs(clock.read().seconds - 2.0) < 1e-9


class Energy(BaseCollector):
    """A fake energy counter: ``cpu.energyJoules`` grows by ``per_tick`` J each sample."""

    name = "energy"

    def __init__(self, per_tick: float) -> None:
        self.total = 0.0
        self.per_tick = per_tick

    def sample(self) -> dict[str, float]:
        self.total += self.per_tick
        return {"cpu.energyJoules": self.total}


def test_monitor_reports_step_keys_weighted_by_steps_and_energy_per_step() -> None:
    totals = [StepTotals(0, 0.0, 0.0, 0.0)]
    energy = Energy(per_tick=12.0)
    m = SystemMonitor(interval=3600, collectors=[energy])
    m.step_timing = lambda: totals[-1]
    reader = m.reader()
    m._sample_once()  # the baseline: nothing closed yet
    assert reader.snapshot(repeat=False) == {"cpu.energyJoules": 12.0}
    totals.append(StepTotals(1, 5.0, 1.0, 10.0))  # one slow step: 5 s
    m._sample_once()
    totals.append(StepTotals(11, 6.0, 1.5, 110.0))  # ten fast ones: 0.1 s each
    m._sample_once()
    window = reader.snapshot(repeat=False)
    assert abs(window["step.seconds"] - 6.0 / 11) < 1e-9  # not (5 + 0.1) / 2
    assert abs(window["step.dataWaitPercent"] - 100 * 1.5 / 6.0) < 1e-6
    assert abs(window["step.samplesPerSecond"] - 110 / 6.0) < 1e-6
    assert abs(window["step.energyJoules"] - 24.0 / 11) < 1e-9  # 12 J per tick, 2 ticks
    m._sample_once()  # no step closed: no step keys at the next point
    assert not any(k.startswith("step.") for k in reader.snapshot(repeat=False))
    assert [c.name for c in m.collectors] == ["energy"]


def test_energy_spans_ticks_without_a_closed_step() -> None:
    c = StepCollector(lambda: source)
    totals = StepTotals(0, 0.0, 0.0, 0.0)
    source = lambda: totals  # noqa: E731
    c.observe({"gpu.0.energyJoules": 0.0})
    assert c.sample() == {}
    totals = StepTotals(0, 0.0, 0.0, 0.0)
    c.observe({"gpu.0.energyJoules": 100.0})  # a long step under way
    assert c.sample() == {}
    totals = StepTotals(1, 2.0, 0.0, 0.0)
    c.observe({"gpu.0.energyJoules": 200.0})
    assert c.sample()["step.energyJoules"] == 200.0


def test_batch_size_finds_the_first_dimension() -> None:
    class Arr:
        shape = (16, 3)

    assert batch_size(Arr()) == 16
    assert batch_size((Arr(), Arr())) == 16
    assert batch_size({"input_ids": Arr()}) == 16
    assert batch_size(["a", "b"]) == 1  # a string: its length
    assert batch_size(7) is None


def test_each_window_keeps_its_longest_step_and_counts_the_slow_ones() -> None:
    """Issue 32: a 1 s step among 0.1 s ones is the window's step.maxSeconds whatever the
    window's length, and its slow step; the first window (warm-up: a 6 s first step)
    is never judged slow."""

    now = [0.0]
    clock = StepClock(lambda: now[0])
    read = clock.read
    collector = StepCollector(lambda: read)
    clock.restart()
    windows = []
    for w in range(12):
        for i in range(10):
            now[0] += 6.0 if (w, i) == (0, 0) else 1.0 if (w > 5 and i == 4) else 0.1
            clock.begin()
            clock.end()
        windows.append(collector.sample())
    assert windows[0]["step.maxSeconds"] == pytest.approx(6.0)
    assert "step.slowPercent" not in windows[0]  # no median yet: the warm-up is not judged
    for w in windows[6:]:
        assert w["step.seconds"] == pytest.approx(0.19)  # the mean: under 2 times the median
        assert w["step.maxSeconds"] == pytest.approx(1.0)
        assert w["step.slowPercent"] == pytest.approx(10.0)
    for w in windows[4:6]:
        assert w["step.maxSeconds"] == pytest.approx(0.1)
        assert w["step.slowPercent"] == 0.0
