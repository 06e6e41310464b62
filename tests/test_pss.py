"""The job's PSS reader: a fault in it costs only its own keys, and its cadence.

Issue 30, item 1 (PSS part): the ``sysmetrics-pss`` thread that could not start (a full
``pids.max``, ``ulimit -u``) raised out of ``ProcessCollector.sample()``, so the monitor
disabled the whole collector: ``cpu`` and every ``proc.*`` key were gone for the rest of
the run. Item 11: each reading holds the read process's mmap lock while the kernel walks
it, so the readings are spaced by the longest one (:meth:`ProcessCollector.pss_period`).
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

from sysmetrics.collectors import ProcessCollector
from sysmetrics.collectors.base import MiB
from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.host import PsutilSource

PSS_KEYS = {"proc.memory.pssMB", "proc.memory.percent"}
OTHER_KEYS = {"proc.cpu.threads", "proc.memory.rssMB"}
START = threading.Thread.start


class ScriptedPss(PsutilSource):
    """The real source (psutil: every platform), whose PSS reads are scripted: each one
    raises the next error of ``errors``, then reads ``PSS`` bytes once they are used up.

    The collectors over it watch the test's process alone (``track_process_tree=False``):
    a child an earlier test left to be reaped (a killed statfs helper) is no part of it."""

    PSS = 100 * MiB

    def __init__(self, errors: list[BaseException] | None = None) -> None:
        super().__init__()
        self.errors = list(errors or [])
        self.reads = 0

    def pss(self, pid: int) -> int | None:
        self.reads += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.PSS


def sample_until_pss(collector: ProcessCollector, seconds: float = 20.0) -> list[dict[str, float]]:
    """Samples every 20 ms until one has a PSS reading (the last one returned)."""
    snaps: list[dict[str, float]] = []
    deadline = time.monotonic() + seconds
    while not (snap := collector.sample()).keys() >= PSS_KEYS:
        snaps.append(snap)
        assert time.monotonic() < deadline, f"no PSS reading in {seconds} s: {snaps[-3:]}"
        time.sleep(0.02)
    snaps.append(snap)
    return snaps


def pss_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]


def quick_retries(collector: ProcessCollector) -> ProcessCollector:
    """Readings due at every sample and retries after 20, 40, 80... ms (the test's pace)."""
    collector.pss_interval_s = 0.0
    collector.pss_retry_s = 0.02
    return collector


def no_thread_for(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """``threading.Thread.start`` raises "can't start new thread" (what a full ``pids.max``
    raises) for the next ``times`` PSS threads; returns [threads refused so far]."""
    refused = [0]

    def start(self: threading.Thread) -> None:
        if self.name == "sysmetrics-pss" and refused[0] < times:
            refused[0] += 1
            raise RuntimeError("can't start new thread")
        START(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    return refused


def test_a_pss_thread_that_cannot_start_costs_only_the_pss_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression (issue 30, item 1): the error escaped ``sample()``; now each sample keeps
    ``cpu`` and the other ``proc.*`` keys, leaves PSS out, warns once, and PSS comes back
    once a thread starts again (retried with back-off)."""
    collector = quick_retries(
        ProcessCollector(ScriptedPss(), os.getpid(), track_process_tree=False)
    )
    refused = no_thread_for(monkeypatch, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snaps = sample_until_pss(collector)
    assert refused[0] == 3
    failing = [s for s in snaps[:-1] if s.keys() & PSS_KEYS]
    assert not failing, failing
    assert all(s.keys() >= OTHER_KEYS for s in snaps), snaps
    assert all("cpu" in s for s in snaps[1:]), snaps  # the first may be too short a window
    assert snaps[-1]["proc.memory.pssMB"] == ScriptedPss.PSS / MiB
    (warning,) = pss_warnings(caught)
    assert warning.startswith(
        "sysmetrics: the job's PSS cannot be read now; proc.memory.pssMB and "
        "proc.memory.percent are left out until it can (retried after 0.02 s, then twice "
        "as long each time up to 60 s), the other keys go on: RuntimeError: can't start "
        "new thread"
    ), warning


def test_retries_of_the_pss_reader_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each failure in a row doubles the wait before the next try, up to ``pss_retry_max_s``;
    a reading that works brings the usual period back."""
    collector = quick_retries(
        ProcessCollector(ScriptedPss(), os.getpid(), track_process_tree=False)
    )
    collector.pss_retry_max_s = 0.07
    no_thread_for(monkeypatch, 4)
    periods = []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for _ in range(4):
            collector._pss_time = -1e9  # due now, whatever the wait
            collector.sample()
            periods.append(collector._pss_period)
        sample_until_pss(collector)
    assert periods == pytest.approx([0.02, 0.04, 0.07, 0.07])
    assert collector._pss_failures == 0  # the next failure waits 0.02 s again


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.EMFILE, "Too many open files"),
        OSError(errno.ENFILE, "Too many open files in system"),
        OSError(errno.EAGAIN, "Resource temporarily unavailable"),
        OSError(errno.ENOMEM, "Cannot allocate memory"),
        MemoryError(),
        RuntimeError("something unforeseen"),
    ],
    ids=repr,
)
def test_a_pss_reading_that_fails_for_now_warns_once_and_retries(error: BaseException) -> None:
    """A reading that fails for a reason that passes (out of descriptors or memory, or a
    fault nobody foresaw) leaves the PSS keys out with one warning and is retried; before,
    the reading's thread logged one debug line (or died with a traceback) and the keys
    were gone without a word."""
    source = ScriptedPss([error, error])
    collector = quick_retries(ProcessCollector(source, os.getpid(), track_process_tree=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snaps = sample_until_pss(collector)
    # two failed, one read; readings are due at every sample here (interval 0, a read of
    # next to no CPU time), so the sample that reported the third may have begun a fourth
    assert source.reads in (3, 4)
    assert all(s.keys() >= OTHER_KEYS for s in snaps), snaps
    (warning,) = pss_warnings(caught)
    assert "proc.memory.pssMB and proc.memory.percent are left out until it can" in warning
    assert type(error).__name__ in warning


def test_a_process_that_cannot_be_read_leaves_pss_out_without_a_warning() -> None:
    """Another user's process (EACCES) is a lasting condition, not a fault: no warning
    (one debug line, as before), no PSS, the rest goes on."""
    source = ScriptedPss([PermissionError(errno.EACCES, "Permission denied")] * 3)
    collector = quick_retries(ProcessCollector(source, os.getpid(), track_process_tree=False))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snaps = [collector.sample() for _ in range(3)]
    assert not pss_warnings(caught)
    assert not any(s.keys() & PSS_KEYS for s in snaps), snaps
    assert all(s.keys() >= OTHER_KEYS for s in snaps), snaps


# --- a real pids.max -------------------------------------------------------------------

SAMPLER = """
import json, os, sys, time, warnings
from sysmetrics.collectors import ProcessCollector
from sysmetrics.host import default_source
warnings.simplefilter("always")
collector = ProcessCollector(default_source(), os.getpid())
# A reading every 0.2 s whatever it takes, retried every 0.2 to 0.5 s (the cadence and
# the back-off are tested above): the test sees tries during the limit and after it.
collector.pss_interval_s = collector.pss_retry_s = 0.2
collector.pss_retry_max_s = 0.5
collector.pss_cpu_share = collector.pss_lock_share = 1.0
print("ready", flush=True)
sys.stdin.readline()  # placed in the cgroup
end = time.monotonic() + float(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    while time.monotonic() < end:
        try:
            keys = sorted(collector.sample())
        except BaseException as exc:
            keys = [f"raised {type(exc).__name__}: {exc}"]
        print(json.dumps([time.monotonic(), keys]), flush=True)
        time.sleep(0.1)
print(json.dumps(["warnings", [str(w.message) for w in caught]]), flush=True)
"""


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    """A new pids cgroup (v1); skipped where none can be made; removed afterwards."""
    path = Path("/sys/fs/cgroup/pids") / f"sysmetrics-test-pss-{os.getpid()}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"needs a writable pids cgroup v1 (root) for a real pids.max: {exc}")
    try:
        yield path
    finally:
        for _ in range(50):  # empty once the sampler has exited
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_full_pids_max_costs_only_the_pss_keys_while_it_lasts(pids_cgroup: Path) -> None:
    """Regression (issue 30, item 1), through a real cgroup: the sampler's ``pids.max`` is
    lowered to its one task for 3 s (no thread can start), then raised. ``cpu`` and the
    ``proc.*`` keys come at every sample, during and after; PSS is left out while the
    reader's thread cannot start (one warning) and comes back after."""
    child = subprocess.Popen(
        [sys.executable, "-c", SAMPLER, "7.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        (pids_cgroup / "cgroup.procs").write_text(str(child.pid))
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(1.0)
        assert (pids_cgroup / "pids.current").read_text().strip() in {"1", "2"}
        (pids_cgroup / "pids.max").write_text("1")  # its main thread: no other can start
        limited = time.monotonic()
        time.sleep(3.0)
        (pids_cgroup / "pids.max").write_text("max")
        lifted = time.monotonic()
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
        child.wait()
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines and lines[-1][0] == "warnings", out[-2000:]
    samples = [(t, set(keys)) for t, keys in lines[:-1]]
    for t, keys in samples[1:]:
        assert {"cpu", *OTHER_KEYS} <= keys, (t - limited, keys)
    during = [keys for t, keys in samples if limited + 0.5 < t < lifted]
    after = [keys for t, keys in samples if t > lifted]
    assert during and not any(k & PSS_KEYS for k in during), during
    assert any(k >= PSS_KEYS for k in after), after
    (warning,) = lines[-1][1]
    assert "can't start new thread" in warning, warning


# --- the cadence (item 11) ---------------------------------------------------------------


class Clock:
    """A ``time.monotonic`` that stands still but where the test (or a read) moves it.

    ``thread_time`` (the reading thread's CPU time) moves with it unless ``cpu`` is False:
    a read that waits (for a CPU on a loaded host, for the GIL) rather than works.
    """

    def __init__(self, cpu: bool = True) -> None:
        self.now = 1000.0
        self.cpu = cpu

    def monotonic(self) -> float:
        return self.now

    def thread_time(self) -> float:
        return self.now if self.cpu else 0.0


class TimedPss(PsutilSource):
    """Each PSS read takes ``seconds`` of ``clock`` (its mmap lock held that long)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        super().__init__()
        self.fake, self.seconds, self.reads = clock, seconds, 0

    def pss(self, pid: int) -> int | None:
        self.reads += 1
        self.fake.now += self.seconds
        return 100 * MiB


@pytest.mark.parametrize(
    ("took", "longest", "period"),
    [
        (0.002, 0.002, 1.0),  # 400 MiB alone: the interval
        (0.013, 0.013, 5.2),  # 1 GiB alone (13 ms): its lock, 400 x 13 ms
        (0.154, 0.154, 61.6),  # one 6 GiB mapping (the 154 ms)
        (0.551, 0.061, 55.1),  # 4 GiB rank + 8 forked workers: the reader's CPU, 100 x 0.55 s
        (0.020, 0.005, 2.0),  # 4 small processes: 100 x the whole reading
    ],
)
def test_the_pss_period_rule(took: float, longest: float, period: float) -> None:
    """The period is the longest of: the interval, 100 x the reading (1 % of a core), the
    longest walk of one process / ``pss_lock_share`` (its mmap lock held 0.25 % of the time)."""
    collector = ProcessCollector(PsutilSource(), os.getpid())
    assert collector.pss_period(took, longest) == pytest.approx(period)


def test_the_next_reading_waits_for_the_period_its_reads_call_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With each read taking 50 ms (an injected clock, no timing), the next reading begins
    400 x 50 ms = 20 s after the previous one began, not 1 s or 100 x 50 ms = 5 s after."""
    clock = Clock()
    monkeypatch.setattr("sysmetrics.collectors.process.time", clock)
    monkeypatch.setattr("sysmetrics.collectors.process._walk_time", clock.monotonic)
    source = TimedPss(clock, 0.05)
    collector = ProcessCollector(source, os.getpid(), track_process_tree=False)
    began = clock.now
    assert collector.sample().keys() >= PSS_KEYS  # the first waits for its reading
    assert source.reads == 1
    assert collector._pss_period == pytest.approx(20.0)
    for at in (1.0, 5.0, 19.9):
        clock.now = began + at
        assert not collector.sample().keys() & PSS_KEYS
        assert collector._pss_reading is None and source.reads == 1, at
    clock.now = began + 20.0
    starting = collector.sample()  # begins the next reading
    reading = collector._pss_reading
    if reading is not None:
        reading.join(5)
    assert source.reads == 2
    # Reported once: by this sample if the reading ended before it returned, else the next.
    reported = [s for s in (starting, collector.sample()) if s.keys() & PSS_KEYS]
    assert len(reported) == 1 and reported[0].keys() >= PSS_KEYS, reported


def test_a_reading_that_waited_rather_than_worked_is_not_spaced_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression (CI under parallel workers): a reading's wall time was taken for its CPU
    time, so on a loaded host, where the reading thread waits for a CPU, each 50 ms of
    waiting spaced the next reading 5 s (100 x), and PSS went missing from runs of a few
    seconds. The 1 % share is of the reader's CPU time (the thread's own)."""
    clock = Clock(cpu=False)
    monkeypatch.setattr("sysmetrics.collectors.process.time", clock)
    monkeypatch.setattr("sysmetrics.collectors.process._walk_time", clock.thread_time)
    source = TimedPss(clock, 0.05)
    collector = ProcessCollector(source, os.getpid(), track_process_tree=False)
    assert collector.sample().keys() >= PSS_KEYS
    assert collector._pss_period == pytest.approx(collector.pss_interval_s)


def test_the_runnable_time_of_a_thread_counts_its_cpu_and_never_goes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A walk is timed by the reader's CPU time plus its waits for a CPU (schedstat's
    run_delay); where schedstat cannot be read (not Linux) the waits count 0."""
    from sysmetrics.collectors.process import _walk_time
    from sysmetrics.host import procfs

    before, wait = _walk_time(), procfs.runqueue_wait()
    spin = time.thread_time() + 0.02
    while time.thread_time() < spin:
        pass
    assert _walk_time() - before >= 0.02
    assert procfs.runqueue_wait() >= wait >= 0.0
    if sys.platform.startswith("linux"):
        assert Path("/proc/thread-self/schedstat").exists()

    def unreadable(path: str) -> str:
        raise FileNotFoundError(path)

    monkeypatch.setattr(procfs, "_read_record", unreadable)
    assert procfs.runqueue_wait() == 0.0
