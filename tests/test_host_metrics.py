"""Host metrics against ground truth: spin a core, allocate memory, write a file, send bytes.

Every test runs twice: with the procfs source (Linux's default) and with the psutil
source (the default elsewhere), so both paths are checked against the same truth.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysmetrics import SystemMonitor
from sysmetrics.collectors import ProcessCollector, host_collectors
from sysmetrics.host import HostSource, ProcfsSource, PsutilSource

SOURCES = ["psutil"] + (["procfs"] if ProcfsSource.supported() else [])

# Every test here checks a number against the kernel's truth (docs/development.md, "Markers").
pytestmark = pytest.mark.kernel


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> HostSource:
    return ProcfsSource() if request.param == "procfs" else PsutilSource()


def monitor(source: HostSource, interval: float = 0.1, **kw: object) -> SystemMonitor:
    track = bool(kw.pop("track_process_tree", True))
    paths = kw.pop("disk_paths", ("/",))
    collectors = host_collectors(source=source, disk_paths=paths, track_process_tree=track)
    return SystemMonitor(interval=interval, collectors=collectors, **kw)


@contextlib.contextmanager
def python_child(code: str) -> Iterator[subprocess.Popen[bytes]]:
    """A child Python running ``code``, killed and reaped on the way out."""
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def spin(stop: threading.Event) -> None:
    while not stop.is_set():
        pass


@pytest.fixture
def spinning_thread() -> Iterator[None]:
    stop = threading.Event()
    t = threading.Thread(target=spin, args=(stop,))
    t.start()
    yield
    stop.set()
    t.join()


def available_cpus() -> float:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def test_every_catalogue_key_is_reported(
    source: HostSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # start()'s sample waits for the first PSS reading (0.2 s by default, then leaves the
    # PSS keys out): as long as it takes on a machine busy with other tests.
    monkeypatch.setattr(ProcessCollector, "pss_first_wait_s", 30.0)
    with monitor(source, disk_paths=("/", str(tmp_path))) as m:
        snap = m.snapshot()
    expected = {
        "cpu", "proc.cpu.threads", "proc.memory.rssMB", "proc.memory.rssMB.max",
        "proc.memory.percent", "memory", "proc.memory.availableMB",
        "disk./.usagePercent", "disk./.usageGB", f"disk.{tmp_path}.usagePercent",
        f"disk.{tmp_path}.usageGB", "disk.in", "disk.out", "network.sent", "network.recv",
    }  # fmt: skip
    assert expected <= set(snap)
    cores = [k for k in snap if k.startswith("cpu.") and k.endswith(".cpu_percent")]
    assert len(cores) == os.cpu_count()
    assert all(0.0 <= snap[k] <= 100.0 for k in cores)
    assert 0 < snap["memory"] < 100 and 0 < snap["disk./.usagePercent"] < 100


@pytest.mark.serial
def test_cpu_of_a_spinning_thread_is_one_cpu_over_available(
    source: HostSource, spinning_thread: None
) -> None:
    with monitor(source) as m:
        time.sleep(0.3)
        m.snapshot()  # drop the first sample (average since the process started)
        time.sleep(2.0)
        snap = m.snapshot()
    expected = 100.0 / available_cpus()
    assert expected * 0.6 < snap["cpu"] < expected * 1.4 + 5, snap["cpu"]
    assert snap["proc.cpu.threads"] >= 3  # main, spinner, sampler
    busiest = max(v for k, v in snap.items() if k.endswith(".cpu_percent"))
    assert busiest > 60


def test_rss_grows_by_what_was_allocated_and_touched(source: HostSource) -> None:
    with monitor(source) as m:
        time.sleep(0.3)
        before = m.snapshot()
        block = b"\x01" * (300 * 1024 * 1024)  # filled, so every page is resident
        time.sleep(0.5)
        m.snapshot()  # the window that saw the allocation happen
        time.sleep(0.5)
        after = m.snapshot()
        del block
    grew = after["proc.memory.rssMB"] - before["proc.memory.rssMB"]
    assert 270 < grew < 360, grew
    assert after["proc.memory.rssMB.max"] >= after["proc.memory.rssMB"]
    total_mb = source.memory().total / 2**20  # (proc.memory.percent is PSS-based, not always there)
    assert after["proc.memory.availableMB"] < total_mb


def test_rss_peak_between_two_snapshots_is_not_averaged_away(source: HostSource) -> None:
    with monitor(source, interval=0.05) as m:
        time.sleep(0.2)
        base = m.snapshot()["proc.memory.rssMB"]
        block = b"\x01" * (200 * 1024 * 1024)
        time.sleep(0.3)
        del block
        time.sleep(0.5)
        snap = m.snapshot()
    assert snap["proc.memory.rssMB.max"] - base > 170
    assert snap["proc.memory.rssMB"] < snap["proc.memory.rssMB.max"] - 30


def test_disk_out_counts_written_and_synced_bytes(source: HostSource, tmp_path: Path) -> None:
    chunk = os.urandom(1024 * 1024)
    with monitor(source) as m:
        assert m.snapshot()["disk.out"] == 0.0
        with open(tmp_path / "blob", "wb") as f:
            for _ in range(100):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        time.sleep(0.3)
        snap = m.snapshot()
    assert snap["disk.out"] >= 100.0, snap["disk.out"]
    assert snap["disk.in"] >= 0.0


@pytest.mark.parametrize("track", [True, False])
@pytest.mark.serial
def test_spinning_child_counts_only_with_process_tree(source: HostSource, track: bool) -> None:
    with python_child("while True: pass"):
        time.sleep(0.3)
        with monitor(source, track_process_tree=track) as m:
            time.sleep(0.3)
            m.snapshot()
            time.sleep(2.0)
            snap = m.snapshot()
    one_cpu = 100.0 / available_cpus()
    if track:
        assert one_cpu * 0.6 < snap["cpu"] < one_cpu * 1.4 + 5, snap["cpu"]
    else:
        assert snap["cpu"] < one_cpu * 0.3, snap["cpu"]


SPIN_1S = "import time\nt=time.process_time()\nwhile time.process_time()-t<1.0: pass"


def cpu_seconds_of(snap: dict[str, float], elapsed: float) -> float:
    return snap["cpu"] / 100.0 * available_cpus() * elapsed


@pytest.mark.parametrize("interval", [0.2, 3600.0], ids=["seen-alive", "never-seen-alive"])
def test_cpu_of_a_reaped_child_is_counted_once(source: HostSource, interval: float) -> None:
    """A child that spins 1 s of CPU and is reaped by us counts once, seen by a sample or not.

    With a 0.2 s interval samples see the child alive before it is reaped (its time must
    not be counted again when it moves into our children time); with a 3600 s interval
    only start() and stop() sample, and the child lives and dies between them.
    """
    t0 = time.monotonic()
    m = monitor(source, interval=interval).start()
    try:
        m.snapshot()  # start's sample: the average since the process started
        subprocess.run([sys.executable, "-c", SPIN_1S], check=True)
        time.sleep(0.3)
    finally:
        m.stop()
    elapsed = time.monotonic() - t0
    cpu_seconds = cpu_seconds_of(m.snapshot(), elapsed)
    # 1 s of the child's CPU plus its start-up; twice that if counted twice, ~0 if lost.
    assert 0.7 < cpu_seconds < 1.6, cpu_seconds


def test_descendants_found_without_scanning_all_processes() -> None:
    if not ProcfsSource.supported():
        pytest.skip("needs Linux /proc/<pid>/task/<tid>/children")
    source = ProcfsSource()
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2)
    ]
    try:
        found = set(source.children(os.getpid()))
        assert {c.pid for c in children} <= found
    finally:
        for c in children:
            c.kill()
            c.wait()


SPIN_WALL = "import time\nend=time.time()+{s}\nwhile time.time()<end: pass"


def procfs_root_with_btime_shift(tmp_path: Path, shift: int) -> Path:
    """A procfs root whose ``/proc/stat`` says the machine booted ``shift`` s earlier.

    ``btime`` in /proc/stat is the boot time truncated to whole seconds, so on a real
    machine it is up to a second earlier than the true boot time; ``shift=1`` models the
    worst case (a boot at x.999 s). Every other entry links to the real /proc, so the
    process counters are real; ``link`` adds a process born after the root was made.
    """
    root = tmp_path / "proc"
    root.mkdir()
    lines = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            line = f"btime {int(line.split()[1]) - shift}"
        lines.append(line)
    (root / "stat").write_text("\n".join(lines) + "\n")
    for name in os.listdir("/proc"):
        if name != "stat" and not (root / name).exists():
            (root / name).symlink_to(f"/proc/{name}")
    return root


@pytest.mark.skipif(not ProcfsSource.supported(), reason="needs Linux procfs")
@pytest.mark.serial
def test_a_child_born_between_samples_counts_whatever_the_boot_time(tmp_path: Path) -> None:
    """Regression: a newborn child looked older than it was (btime has whole-second
    resolution), and its CPU was dropped as that of an old process joining the tree."""
    root = procfs_root_with_btime_shift(tmp_path, 1)
    collector = ProcessCollector(ProcfsSource(root=str(root)), os.getpid())
    collector.sample()
    t0 = time.monotonic()
    with python_child(SPIN_WALL.format(s=3)) as child:
        (root / str(child.pid)).symlink_to(f"/proc/{child.pid}")
        time.sleep(1.0)
        snap = collector.sample()
        elapsed = time.monotonic() - t0
        truth = PsutilSource().process(child.pid)
        assert truth is not None
    child_percent = truth.cpu_seconds / elapsed / available_cpus() * 100.0
    assert child_percent > 20.0 / available_cpus()  # the child really ran
    assert snap["cpu"] > 0.8 * child_percent, (snap["cpu"], child_percent)


@pytest.mark.serial
def test_a_child_started_after_a_snapshot_counts_in_the_next(source: HostSource) -> None:
    """The issue's repro through a SystemMonitor, on this machine's real boot time."""
    with monitor(source, interval=1.0) as m:
        m.snapshot()
        with python_child(SPIN_WALL.format(s=3)):
            time.sleep(1.2)
            snap = m.snapshot()
    one_cpu = 100.0 / available_cpus()
    assert snap["cpu"] > 0.4 * one_cpu, snap["cpu"]
