"""The process collector watching a job of several roots, against real processes.

Sibling roots (children of the test process, not of each other, as ``torchrun`` starts
ranks), the union of their CPU affinities, roots that end, a tree rediscovered only when
it may have changed (processes born or reaped between two walks still count), and the
proportional set size of forked workers sharing a buffer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors import ProcessCollector
from sysmetrics.host import HostSource, Job, ProcfsSource, PsutilSource
from tests import launch
from tests.test_host_metrics import SPIN_1S, available_cpus, python_child

SOURCES = ["psutil"] + (["procfs"] if ProcfsSource.supported() else [])
LINUX = sys.platform.startswith("linux")

IDLE = "import time; time.sleep(600)"
SPIN = "while True: pass"
# Exits once its parent, whose pid is its argument, has ended (it was re-parented), so no
# worker outlives the test. The pid is given, not read with getppid() at start: a parent
# killed before the worker's interpreter got that far left a worker that read its new
# parent (init) and slept for good.
ORPHAN_EXIT = (
    "import os, sys, time\np = int(sys.argv[1])\nwhile os.getppid() == p: time.sleep(0.05)"
)
# Every process the module starts carries it in its environment (a value of its own).
MARK = "SYSMETRICS_TEST_JOB_PROCESS"


def marked(token: str) -> list[int]:
    """The pids of the processes (of any parent) whose environment holds ``MARK=token``."""
    return launch.marked(MARK, token)


@pytest.fixture(scope="module", autouse=True)
def no_process_outlives_the_module() -> Iterator[None]:
    """After the module's tests, no process any of them started is left (orphans
    included, whoever their parent is now): found by a mark in their environment, they
    have 5 s to exit, and are then killed and reported."""
    if not LINUX:
        yield
        return
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MARK, token)
        yield
    deadline = time.monotonic() + 5
    while (left := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    commands = {}
    for pid in left:
        with contextlib.suppress(OSError):
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            os.kill(pid, 9)
    assert not left, f"processes outlived the tests: {commands}"


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> HostSource:
    return ProcfsSource() if request.param == "procfs" else PsutilSource()


@contextlib.contextmanager
def with_workers(n: int) -> Iterator[subprocess.Popen[bytes]]:
    """A child Python with ``n`` idle workers of its own, returned once they run."""
    code = (
        "import os, subprocess, sys, time\n"
        f"w = [subprocess.Popen([sys.executable, '-c', {ORPHAN_EXIT!r}, str(os.getpid())])\n"
        f"     for _ in range({n})]\n"
        "print('ready', flush=True)\ntime.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def spin_until(child: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait until ``child`` has used ``seconds`` of CPU (it is spinning)."""
    deadline = time.monotonic() + 30
    while (st := PsutilSource().process(child.pid)) and st.cpu_seconds < seconds:
        assert time.monotonic() < deadline, "the child never got the CPU"
        time.sleep(0.05)


def counted_seconds(collector: ProcessCollector, run: Iterator[None]) -> float:
    """CPU seconds the collector reports over the samples ``run`` asks for (one per yield).

    Each sample's percent times the time since the previous one, in available CPUs; a
    sample without ``cpu`` (too short a window) leaves its time to the next one.
    """
    cpus = collector.available_cpus
    total, last = 0.0, time.monotonic()
    for _ in run:
        snap = collector.sample()
        if "cpu" not in snap:
            continue
        now = time.monotonic()
        total += snap["cpu"] / 100.0 * cpus * (now - last)
        last = now
    return total


def no_rediscovery(collector: ProcessCollector) -> ProcessCollector:
    """The tree is walked at the first sample and when the roots change, never else."""
    collector.rediscover_min_s = collector.rediscover_max_s = 3600.0
    return collector


# --- several roots -----------------------------------------------------------------------


def cpu_seconds(*children: subprocess.Popen[bytes]) -> float:
    """The CPU time the children have used, by psutil: the truth to compare with."""
    stats = [PsutilSource().process(c.pid) for c in children]
    return sum(st.cpu_seconds for st in stats if st is not None)


def percent(seconds: float, elapsed: float, cpus: float) -> float:
    return seconds / elapsed / cpus * 100.0


@pytest.mark.kernel
@pytest.mark.serial
def test_a_sibling_counts_only_once_watched(source: HostSource) -> None:
    with python_child(IDLE) as a, python_child(SPIN) as b:
        # b born ticks before the first walk: a new root born at or after the clock tick
        # read before the previous walk counts whole (it may be a birth that walk missed).
        time.sleep(0.05)
        job = Job(a.pid)
        collector = ProcessCollector(source, a.pid, job=job)
        collector.sample()
        time.sleep(1.5)
        alone = collector.sample()
        job.watch([b.pid])
        watched = collector.sample()  # b joins: counted from here on
        t0, before = time.monotonic(), cpu_seconds(a, b)
        time.sleep(1.5)
        both = collector.sample()
        truth = percent(cpu_seconds(a, b) - before, time.monotonic() - t0, available_cpus())
    assert alone["cpu"] < 0.2 * 100.0 / available_cpus(), alone["cpu"]  # a idles
    assert watched["proc.cpu.threads"] == 2 and alone["proc.cpu.threads"] == 1
    assert truth > 30.0 / available_cpus()  # b really spun
    assert 0.8 * truth < both["cpu"] < 1.25 * truth + 2, (both["cpu"], truth)


def test_a_root_and_its_workers_are_walked_at_the_next_sample(source: HostSource) -> None:
    """Regression (c): a root added by ``watch`` waits for no rediscovery."""
    with python_child(IDLE) as a, with_workers(2) as b:
        job = Job(a.pid)
        collector = no_rediscovery(ProcessCollector(source, a.pid, job=job))
        assert collector.sample()["proc.cpu.threads"] == 1
        job.watch([b.pid])
        snap = collector.sample()
    assert snap["proc.cpu.threads"] == 4  # a, b and b's two workers: one thread each


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or available_cpus() < 2, reason="needs two CPUs"
)
@pytest.mark.kernel
@pytest.mark.serial
def test_the_job_may_use_the_union_of_its_roots_cpus(source: HostSource, tmp_path: Path) -> None:
    """Ranks pinned to one CPU each: two ranks may use two CPUs, and one spinning is half."""
    first, second = sorted(os.sched_getaffinity(0))[:2]
    with python_child(IDLE) as a, python_child(SPIN) as b:
        os.sched_setaffinity(a.pid, {first})
        os.sched_setaffinity(b.pid, {second})
        job = Job(a.pid)
        collector = ProcessCollector(source, a.pid, job=job)
        assert collector.available_cpus == 1
        job.watch([b.pid])
        assert collector.available_cpus == 2
        collector.sample()
        t0, before = time.monotonic(), cpu_seconds(b)
        time.sleep(1.5)
        snap = collector.sample()
        truth = percent(cpu_seconds(b) - before, time.monotonic() - t0, 2)
        (tmp_path / "cpu.max").write_text("150000 100000\n")  # a quota of 1.5 CPUs caps it
        capped = ProcessCollector(source, a.pid, cgroup=Cgroup(2, cpu_dirs=[str(tmp_path)]))
        capped.job.watch([b.pid])
        assert capped.available_cpus == 1.5
    assert truth > 15  # b spun on its CPU: up to 50 % of the job's two
    assert 0.8 * truth < snap["cpu"] < 1.25 * truth + 2, (snap["cpu"], truth)


def test_a_root_that_ends_is_dropped(source: HostSource) -> None:
    with python_child(IDLE) as a, python_child(IDLE) as b:
        job = Job(a.pid)
        job.watch([b.pid])
        collector = ProcessCollector(source, a.pid, job=job)
        assert collector.sample()["proc.cpu.threads"] == 2
        b.kill()
        b.wait()
        assert collector.sample()["proc.cpu.threads"] == 1
        a.kill()
        a.wait()
        with pytest.raises(ProcessLookupError):
            collector.sample()


# --- rediscovery only when the tree may have changed -------------------------------------


@pytest.mark.kernel
def test_a_process_born_between_walks_has_its_cpu_spread_over_its_life(
    source: HostSource,
) -> None:
    """Regression (issue 22, item 2): a process found by a later walk had all its CPU
    since birth put into the window of the sample that found it, as when ``torchrun``'s
    ranks were found 0.5 s after their birth (174 % over a 0.25 s window). A spinning
    child found 1 s after its birth read ~10 CPUs over a 0.1 s window; its CPU since birth
    is now spread over the time it ran, so that window reads its average rate, one CPU."""
    collector = no_rediscovery(ProcessCollector(source, os.getpid()))
    collector.sample()
    with python_child(SPIN) as child:
        spin_until(child, 1.0)
        collector.sample()  # not walked: the child is not seen
        collector.rediscover_max_s = 0.0  # the next sample walks and finds it
        time.sleep(0.1)
        snap = collector.sample()
        st = source.process(child.pid)
        clock = source.clock()
    assert st is not None
    # The child's average rate over its life, in percent of the job's CPUs; this test
    # process itself sleeps meanwhile (a few ms of CPU at most).
    truth = st.cpu_seconds / (clock - st.start_time) * 100.0 / available_cpus()
    assert 0.5 * truth < snap["cpu"] < 1.5 * truth + 5.0, (snap["cpu"], truth)


@pytest.mark.parametrize("seen", [True, False], ids=["walked-alive", "never-walked"])
@pytest.mark.kernel
def test_a_child_reaped_between_walks_counts_once(source: HostSource, seen: bool) -> None:
    """Regression (b): a child that ends between two walks and is reaped inside the tree
    counts once, whether a walk saw it alive or not (its CPU moves to our children time)."""
    collector = no_rediscovery(ProcessCollector(source, os.getpid()))

    def samples() -> Iterator[None]:
        child = subprocess.Popen([sys.executable, "-c", SPIN_1S])
        try:
            if seen:
                collector.rediscover_max_s = 0.0
                time.sleep(0.3)
                yield  # walked: the child is found alive, spinning
                collector.rediscover_max_s = 3600.0
        finally:
            child.wait()
        yield  # not walked: the child ended and we reaped it

    before = os.times()
    collector.sample()
    counted = counted_seconds(collector, samples())
    after = os.times()
    truth = after.children_user + after.children_system
    truth -= before.children_user + before.children_system
    assert truth > 0.9
    assert 0.85 * truth < counted < 1.15 * truth + 0.1, (counted, truth)


ORPHANING = """
import subprocess, sys, time
grandchild = "import subprocess, sys, time\\n" \\
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\\n" \\
    "print(g.pid, flush=True)\\ntime.sleep(600)"
c = subprocess.Popen([sys.executable, "-c", grandchild], stdout=subprocess.PIPE)
print(c.pid, int(c.stdout.readline()), flush=True)
c.wait()
time.sleep(600)
"""


def test_an_orphan_leaves_the_job_at_the_next_sample(source: HostSource) -> None:
    """A process whose parent ended is re-parented out of the tree: seen between walks
    (its parent PID changed), it is dropped by a walk at the next sample."""
    root = subprocess.Popen([sys.executable, "-c", ORPHANING], stdout=subprocess.PIPE)
    grandchild = 0
    try:
        assert root.stdout is not None
        middle, grandchild = map(int, root.stdout.readline().split())
        collector = no_rediscovery(ProcessCollector(source, root.pid))
        assert collector.sample()["proc.cpu.threads"] == 3
        os.kill(middle, 9)
        deadline = time.monotonic() + 10
        while (st := ProcfsSource().process(grandchild)) and st.ppid == middle:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert collector.sample()["proc.cpu.threads"] == 2  # the root and the orphan
        assert collector.sample()["proc.cpu.threads"] == 1  # walked: the root alone
    finally:
        if grandchild:
            os.kill(grandchild, 9)  # re-parented: init reaps it
        root.kill()
        root.wait()


def test_walks_only_when_a_pid_was_allocated() -> None:
    """With nothing born, the samples read the known processes only (no children files)."""
    if not ProcfsSource.supported():
        pytest.skip("needs Linux procfs")

    class Counting(ProcfsSource):
        walks = 0

        def children(self, pid: int) -> list[int]:
            self.walks += 1
            return super().children(pid)

    source = Counting()
    with python_child(IDLE) as a:
        collector = ProcessCollector(source, a.pid)
        collector.rediscover_min_s = 0.0
        collector.sample()
        walks = source.walks
        last = source.last_pid()
        # Nothing on this machine forked since the walk (its reading of the PID counter,
        # moved past the collector's own PSS thread), nor until the next sample's end: that
        # sample reads the known processes only. (Beside parallel workers a fork between
        # the walk and here happened once: the walk that it rightly caused was no fault.)
        quiet = collector._walk_pid == last
        collector.sample()
        if quiet and source.last_pid() == last:
            assert source.walks == walks
        with python_child(IDLE):  # a birth: the next sample walks
            collector.sample()
    assert source.walks > walks


# --- proportional set size ---------------------------------------------------------------

SHARED = """
import os, sys, time
n = 500 << 20
buf = bytearray(n)
buf[::4096] = b"\\x01" * (n // 4096)  # every page touched: resident
print("alone", flush=True)
sys.stdin.readline()
parent = os.getpid()
for _ in range(4):
    if os.fork() == 0:
        total = sum(buf[::4096])  # read every page, write none
        os.write(1, b"read\\n")
        while os.getppid() == parent:
            time.sleep(0.05)
        os._exit(0)
time.sleep(600)
"""


def pss_sample(collector: ProcessCollector) -> dict[str, float]:
    """A sample with a PSS reading of the tree it walked (the reading runs on a thread)."""
    collector.pss_interval_s = 0.0
    deadline = time.monotonic() + 20
    while "proc.memory.pssMB" not in (snap := collector.sample()):
        assert time.monotonic() < deadline, "no PSS reading"
        time.sleep(0.05)
    return snap


@pytest.mark.skipif(not LINUX, reason="PSS is Linux only")
@pytest.mark.kernel
def test_pss_splits_the_pages_forked_workers_share(source: HostSource) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SHARED], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline() == b"alone\n"
        alone = pss_sample(ProcessCollector(source, child.pid))
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert [child.stdout.readline() for _ in range(4)] == [b"read\n"] * 4
        forked = pss_sample(ProcessCollector(source, child.pid))
    finally:
        child.kill()
        child.wait()
    assert forked["proc.cpu.threads"] == 5
    assert 480 < alone["proc.memory.rssMB"] < 560, alone
    assert 4.0 < forked["proc.memory.rssMB"] / alone["proc.memory.rssMB"] < 5.5, forked
    assert 480 < alone["proc.memory.pssMB"] < 560, alone
    assert 480 < forked["proc.memory.pssMB"] < 1.2 * alone["proc.memory.pssMB"], forked


def pss_as_nobody(kind: str, pid: int) -> dict[str, object]:
    """Two samples of ``pid`` (root's) taken as user ``nobody``, and the debug lines logged."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("sysmetrics")
    logger.addHandler(Keep())
    logger.setLevel(logging.DEBUG)
    os.setgid(65534)
    os.setuid(65534)
    collector = ProcessCollector(PsutilSource() if kind == "psutil" else ProcfsSource(), pid)
    collector.pss_interval_s = 0.0  # a new reading at every sample
    snaps = []
    for _ in range(2):
        snaps.append(collector.sample())
        time.sleep(0.2)
    return {"snaps": snaps, "logged": len(records)}


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="needs root to become another user")
def test_pss_is_left_out_where_a_process_cannot_be_read(source: HostSource) -> None:
    """A monitor of another user cannot read our smaps_rollup: no key, one debug line.

    The monitor is a fork of this interpreter (sysmetrics already loaded) that drops to
    ``nobody``, since that user may not be able to run this environment's Python.
    """
    kind = "psutil" if isinstance(source, PsutilSource) else "procfs"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns to pytest
        code = 1
        try:
            os.close(read)
            with os.fdopen(write, "w") as f:
                f.write(json.dumps(pss_as_nobody(kind, os.getppid())))
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, text
    result = json.loads(text)
    for snap in result["snaps"]:
        assert "proc.memory.pssMB" not in snap and snap["proc.memory.rssMB"] > 0, snap
    assert result["logged"] == 1


@pytest.mark.serial
@pytest.mark.kernel
def test_each_pss_reading_is_reported_once() -> None:
    """Regression (issue 22, item 1): a PSS reading was repeated at every sample for up to
    two periods (20 s), a value not measured since the previous sample shown as a new
    one; ``proc.memory.percent`` now comes from it, so both are reported by the first
    sample after the reading ended, and the samples before the next reading have neither.
    """
    if not ProcfsSource.supported():
        pytest.skip("needs Linux procfs")
    collector = ProcessCollector(ProcfsSource(), os.getpid())
    first = collector.sample()
    assert {"proc.memory.pssMB", "proc.memory.percent"} <= first.keys()  # waits for it
    second = collector.sample()
    assert collector._pss_reading is None  # within the period: no new reading began
    assert "proc.memory.pssMB" not in second and "proc.memory.percent" not in second, second
    assert "proc.memory.rssMB" in second
    time.sleep(collector._pss_period)
    collector.sample()  # begins a reading
    deadline = time.monotonic() + 20
    while "proc.memory.pssMB" not in (snap := collector.sample()):
        assert time.monotonic() < deadline, "no second PSS reading"
        time.sleep(0.05)
    assert "proc.memory.percent" in snap
    assert "proc.memory.pssMB" not in collector.sample()


# --- windows too short, finished roots, memory that grows at start ----------------------


@pytest.mark.serial
@pytest.mark.kernel
def test_no_cpu_in_a_first_sample_a_few_ms_after_the_start(source: HostSource) -> None:
    """Regression: a command sampled ~20 ms after it started read ``cpu`` 0.0 (its start
    time is known to the 10 ms tick, its CPU time to the tick too); the first sample now
    needs 50 ms since the start, and the next one covers the whole time."""
    one_cpu = 100.0 / available_cpus()
    with python_child(SPIN) as child:
        time.sleep(0.02)
        collector = ProcessCollector(source, child.pid)
        first = collector.sample()
        time.sleep(0.5)
        second = collector.sample()
    assert "cpu" not in first and first["proc.cpu.threads"] >= 1, first
    # The interpreter starts, then spins: most of the 0.5 s on one CPU.
    assert 0.5 * one_cpu < second["cpu"] < 1.4 * one_cpu + 5, second


@pytest.mark.serial
@pytest.mark.kernel
def test_cpu_is_left_out_of_a_window_shorter_than_a_clock_tick(source: HostSource) -> None:
    """Regression: a sample ~1 ms after the previous one (the last sample at ``stop()``)
    read 0 or 133 % (CPU times move in 10 ms ticks); it now has no ``cpu``, and the next
    sample measures over the whole window since the previous one with ``cpu``."""
    one_cpu = 100.0 / available_cpus()  # one CPU busy, in percent of the job's
    with python_child(SPIN) as child:
        collector = ProcessCollector(source, child.pid)
        spin_until(child, 0.2)
        collector.sample()
        for _ in range(5):  # two samples well within one tick, on a noisy machine
            time.sleep(0.3)
            first = collector.sample()
            t0 = time.monotonic()
            second = collector.sample()
            if time.monotonic() - t0 < 0.004:  # under min_cpu_window_s, half a clock tick
                break
        else:
            pytest.fail("no two samples within 4 ms")
        time.sleep(0.3)
        third = collector.sample()
    assert 0.6 * one_cpu < first["cpu"] < 1.4 * one_cpu + 5, first
    assert "cpu" not in second, second
    assert second["proc.cpu.threads"] == 1 and second["proc.memory.rssMB"] > 1, second
    assert 0.6 * one_cpu < third["cpu"] < 1.4 * one_cpu + 5, third


SPIN_THEN_EXIT = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass"


def wait_unreaped(pid: int) -> None:
    """Wait for ``pid`` to exit, leaving it a zombie (as ``sysmetrics record`` does)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid")
def test_a_finished_root_left_unreaped_reports_no_memory(source: HostSource) -> None:
    """Regression: the last sample after the command exited read its zombie (RSS 0, one
    thread) as the job's memory; the memory and thread keys are now left out, and the
    zombie's final CPU times still count."""
    child = subprocess.Popen([sys.executable, "-c", SPIN_THEN_EXIT])
    try:
        collector = ProcessCollector(source, child.pid)
        t0 = time.monotonic()
        collector.sample()  # the child's CPU since it started
        time.sleep(0.1)
        before = collector.sample()
        t1 = time.monotonic()
        wait_unreaped(child.pid)
        time.sleep(0.05)
        after = collector.sample()
        t2 = time.monotonic()
        _, _, usage = os.wait4(child.pid, 0)  # reaped: its whole CPU time
    finally:
        child.wait()
    cpus = collector.available_cpus
    assert before["proc.memory.rssMB"] > 1 and before["proc.cpu.threads"] >= 1, before
    gone = {"proc.memory.rssMB", "proc.memory.pssMB", "proc.memory.percent", "proc.cpu.threads"}
    assert not gone & set(after) and "cpu" in after, after
    counted = (before["cpu"] * (t1 - t0) + after["cpu"] * (t2 - t1)) / 100.0 * cpus
    truth = usage.ru_utime + usage.ru_stime
    assert truth > 0.25
    # Not in the sum: the CPU before the first sample (the interpreter's start, ~0.05 s).
    assert 0.75 * truth - 0.1 < counted < 1.3 * truth, (counted, truth)


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid")
def test_a_zombie_root_beside_a_live_one_counts_no_threads_or_memory(source: HostSource) -> None:
    """A rank that exited unreaped (its launcher reaps it later) adds no thread.

    The live rank is read once it has started (``with_workers(0)``): a Python still
    starting grows from under 1 MiB to about 10 MiB in its first milliseconds (15 ms
    here, more on a loaded machine), and the two readings compared are a moment apart."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        with with_workers(0) as live:
            job = Job(live.pid)
            job.watch([child.pid])
            collector = ProcessCollector(source, live.pid, job=job)
            wait_unreaped(child.pid)
            snap = collector.sample()
            alone = ProcessCollector(source, live.pid).sample()
    finally:
        child.wait()
    assert snap["proc.cpu.threads"] == 1, snap
    assert snap["proc.memory.rssMB"] == pytest.approx(alone["proc.memory.rssMB"], rel=0.1)


GROWS_AT_START = """
import time
time.sleep(0.3)
n = 300 << 20
buf = bytearray(n)
buf[::4096] = b"\\x01" * (n // 4096)  # every page touched: resident
time.sleep(600)
"""


@pytest.mark.skipif(not LINUX, reason="PSS is Linux only")
@pytest.mark.kernel
@pytest.mark.serial
def test_pss_follows_memory_grown_right_after_start(source: HostSource) -> None:
    """Regression: PSS was read at the first sample, then every 10 s, so a command that
    allocates right after it starts showed a few MiB of PSS beside GiBs of RSS for 10 s.
    The first readings now come quickly (the period doubles up to ``pss_interval_s``)."""
    grown = pss = None
    with python_child(GROWS_AT_START) as child:
        collector = ProcessCollector(source, child.pid)
        start = time.monotonic()
        while time.monotonic() - start < 4.0:
            snap = collector.sample()
            now = time.monotonic()
            if grown is None and snap["proc.memory.rssMB"] >= 280:
                grown = now
            if snap.get("proc.memory.pssMB", 0.0) >= 250:
                pss = now
                break
            time.sleep(0.2)
    assert grown is not None, "the child never grew"
    assert pss is not None and pss - grown <= 3.0, (grown - start, pss and pss - start)
