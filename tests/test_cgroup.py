"""Container limits, read from cgroup v1 and v2 trees laid out as the kernel lays them out.

The trees are real files in a temporary folder (the procfs/cgroupfs layout, as
prometheus_client tests its process collector), since this machine has one cgroup
setup and containers have others. Swap (``memory.swapPercent``) is read from a captured
``/proc/meminfo`` in a temporary procfs root, with the cgroup v2 swap files beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sysmetrics import SystemMonitor
from sysmetrics.cgroup import Cgroup, find_cgroup
from sysmetrics.collectors import MemoryCollector, ProcessCollector
from sysmetrics.collectors.memory import SWAP_KEY
from sysmetrics.host import ProcfsSource, PsutilSource, default_source

MiB = 1024 * 1024


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_proc(tmp_path: Path, cgroup: str, mountinfo: str) -> str:
    write(tmp_path / "proc/self/cgroup", cgroup)
    write(tmp_path / "proc/self/mountinfo", mountinfo)
    return str(tmp_path / "proc")


@pytest.fixture
def v2(tmp_path: Path) -> str:
    """A Kubernetes-style v2 hierarchy: the pod caps memory at 2 GiB, the container at 1 GiB."""
    root = tmp_path / "sys/fs/cgroup"
    write(root / "cgroup.controllers", "cpuset cpu io memory pids\n")
    write(root / "kubepods/memory.max", "max\n")
    write(root / "kubepods/cpu.max", "max 100000\n")
    write(root / "kubepods/pod1/memory.max", str(2 * 1024 * MiB) + "\n")
    write(root / "kubepods/pod1/cpu.max", "400000 100000\n")
    ctr = root / "kubepods/pod1/ctr"
    write(ctr / "memory.max", str(1024 * MiB) + "\n")
    write(ctr / "memory.current", str(600 * MiB) + "\n")
    write(ctr / "memory.stat", f"anon {400 * MiB}\nfile {200 * MiB}\ninactive_file {100 * MiB}\n")
    write(ctr / "cpu.max", "150000 100000\n")
    return fake_proc(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        f"30 23 0:26 / {root} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n",
    )


def test_v2_limits_are_the_smallest_along_the_hierarchy(v2: str) -> None:
    cg = find_cgroup(proc_root=v2)
    assert cg is not None and cg.version == 2
    assert cg.memory_dirs[0].endswith("kubepods/pod1/ctr")
    assert cg.memory_limit() == 1024 * MiB
    assert cg.memory_used() == 500 * MiB  # usage less inactive file cache
    assert cg.cpu_limit() == 1.5


def test_v2_unlimited_container_in_a_limited_pod(v2: str) -> None:
    ctr = Path(v2).parent / "sys/fs/cgroup/kubepods/pod1/ctr"
    (ctr / "memory.max").write_text("max\n")
    (ctr / "cpu.max").write_text("max 100000\n")
    cg = find_cgroup(proc_root=v2)
    assert cg is not None
    assert cg.memory_limit() == 2 * 1024 * MiB
    assert cg.cpu_limit() == 4.0


def test_v1_docker_with_host_cgroup_namespace(tmp_path: Path) -> None:
    mem = tmp_path / "sys/fs/cgroup/memory"
    cpu = tmp_path / "sys/fs/cgroup/cpu,cpuacct"
    write(mem / "docker/abc/memory.limit_in_bytes", str(512 * MiB))
    write(mem / "docker/abc/memory.usage_in_bytes", str(300 * MiB))
    write(
        mem / "docker/abc/memory.stat",
        f"cache 1\ninactive_file 7\ntotal_inactive_file {44 * MiB}\n",
    )
    write(mem / "memory.limit_in_bytes", "9223372036854771712")
    write(cpu / "docker/abc/cpu.cfs_quota_us", "50000")
    write(cpu / "docker/abc/cpu.cfs_period_us", "100000")
    write(cpu / "cpu.cfs_quota_us", "-1")
    write(cpu / "cpu.cfs_period_us", "100000")
    proc = fake_proc(
        tmp_path,
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/docker/abc\n",
        f"35 31 0:32 / {mem} rw,relatime - cgroup cgroup rw,memory\n"
        f"33 31 0:30 / {cpu} rw,relatime - cgroup cgroup rw,cpu,cpuacct\n",
    )
    cg = find_cgroup(proc_root=proc)
    assert cg is not None and cg.version == 1
    assert cg.memory_limit() == 512 * MiB
    assert cg.memory_used() == 256 * MiB
    assert cg.cpu_limit() == 0.5


def test_v1_namespaced_mount_whose_root_is_the_container(tmp_path: Path) -> None:
    """The mount root is the container's cgroup, so the files sit at the mount point."""
    mem = tmp_path / "sys/fs/cgroup/memory"
    write(mem / "memory.limit_in_bytes", str(256 * MiB))
    write(mem / "memory.usage_in_bytes", str(64 * MiB))
    proc = fake_proc(
        tmp_path,
        "9:memory:/docker/abc\n",
        f"35 31 0:32 /docker/abc {mem} ro,relatime - cgroup cgroup rw,memory\n",
    )
    cg = find_cgroup(proc_root=proc)
    assert cg is not None and cg.memory_dirs == [str(mem)]
    assert cg.memory_limit() == 256 * MiB
    assert cg.cpu_limit() is None


def test_no_cgroup_files_means_no_limits(tmp_path: Path) -> None:
    assert find_cgroup(proc_root=str(tmp_path / "nowhere")) is None
    assert Cgroup(2).memory_limit() is None and Cgroup(2).memory_used() is None


def test_memory_metrics_are_relative_to_the_container_limit(v2: str) -> None:
    source = default_source()
    host_total, _ = source.memory()
    cg = find_cgroup(proc_root=v2)
    assert cg is not None and 1024 * MiB < host_total
    snap = MemoryCollector(source, cg).sample()
    assert snap["memory"] == pytest.approx(500 / 1024 * 100)
    assert snap["proc.memory.availableMB"] == pytest.approx(524, abs=1)


def test_host_memory_when_the_limit_is_above_the_host(tmp_path: Path) -> None:
    source = default_source()
    total, available = source.memory()
    cg = Cgroup(2, memory_dirs=[str(tmp_path)])
    write(tmp_path / "memory.max", str(total * 4))
    write(tmp_path / "memory.current", str(1))
    snap = MemoryCollector(source, cg).sample()
    assert snap["memory"] == pytest.approx((total - available) / total * 100, abs=2)


def test_process_cpu_and_memory_are_normalised_by_the_container(v2: str) -> None:
    source = default_source()
    cg = find_cgroup(proc_root=v2)
    collector = ProcessCollector(source, os.getpid(), True, cg)
    assert collector.available_cpus == min(1.5, source.cpu_count(os.getpid()))
    assert collector.memory_total == 1024 * MiB
    snap = collector.sample()
    assert snap["proc.memory.percent"] == pytest.approx(snap["proc.memory.pssMB"] / 1024 * 100)


def test_this_machine_cgroup_is_found() -> None:
    if not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("no procfs on this OS")
    cg = find_cgroup()
    if cg is None:
        pytest.skip("this machine has no cgroup filesystem mounted")
    assert all(os.path.isdir(d) for d in cg.memory_dirs + cg.cpu_dirs)


# --- swap: memory.swapPercent ------------------------------------------------------------

MEMINFO = """\
MemTotal:       32768000 kB
MemFree:         2048000 kB
MemAvailable:   16384000 kB
Buffers:          512000 kB
Cached:         12000000 kB
SwapCached:        10240 kB
Active:         14000000 kB
Inactive:        9000000 kB
Unevictable:       10320 kB
Mlocked:            8780 kB
{swap}Dirty:              1576 kB
Writeback:             0 kB
AnonPages:      10000000 kB
Shmem:             51200 kB
Slab:             800000 kB
SReclaimable:     600000 kB
"""


def swap_source(tmp_path: Path, total_kb: int | None, free_kb: int | None = None) -> ProcfsSource:
    """A procfs root whose ``meminfo`` has this swap (no Swap lines where ``total_kb`` is None)."""
    swap = "" if total_kb is None else f"SwapTotal: {total_kb:>14} kB\nSwapFree: {free_kb:>15} kB\n"
    write(tmp_path / "host-proc/meminfo", MEMINFO.format(swap=swap))
    return ProcfsSource(root=str(tmp_path / "host-proc"))


def swap_cgroup(tmp_path: Path, **files: str) -> Cgroup:
    """A v2 container folder in a pod folder; ``files`` name ``memory.swap.*`` files as
    ``ctr_max``, ``ctr_current``, ``pod_max``."""
    pod, ctr = tmp_path / "cg/pod", tmp_path / "cg/pod/ctr"
    ctr.mkdir(parents=True)
    for name, text in files.items():
        where, _, leaf = name.partition("_")
        write((ctr if where == "ctr" else pod) / f"memory.swap.{leaf}", text + "\n")
    dirs = [str(ctr), str(pod)]
    return Cgroup(2, memory_dirs=dirs, cpu_dirs=dirs, refresh_s=0.0)  # the tests change them


def test_swap_percent_from_meminfo(tmp_path: Path) -> None:
    source = swap_source(tmp_path, 8 * 1024 * 1024, 6 * 1024 * 1024)  # 8 GiB, 2 GiB used
    assert source.swap() == (8 << 30, 2 << 30)
    snap = MemoryCollector(source).sample()
    assert snap[SWAP_KEY] == 25.0
    assert snap["memory"] == 50.0  # the memory keys are as before


@pytest.mark.parametrize("total_kb", [0, None], ids=["SwapTotal 0", "no Swap lines"])
def test_no_swap_key_without_swap(tmp_path: Path, total_kb: int | None) -> None:
    source = swap_source(tmp_path, total_kb, 0)
    assert source.swap() == (0, 0)
    cg = swap_cgroup(tmp_path, ctr_max=str(512 * MiB), ctr_current="0")
    for snap in (MemoryCollector(source).sample(), MemoryCollector(source, cg).sample()):
        assert SWAP_KEY not in snap and "memory" in snap


def test_swap_percent_of_the_cgroup_swap_limit(tmp_path: Path) -> None:
    source = swap_source(tmp_path, 8 * 1024 * 1024, 6 * 1024 * 1024)  # host: 25 %
    cg = swap_cgroup(tmp_path, ctr_max=str(512 * MiB), ctr_current=str(64 * MiB), pod_max="max")
    assert (cg.swap_limit(), cg.swap_used()) == (512 * MiB, 64 * MiB)
    assert MemoryCollector(source, cg).sample()[SWAP_KEY] == 12.5
    (tmp_path / "cg/pod/memory.swap.max").write_text(f"{256 * MiB}\n")  # the pod's is smaller
    assert MemoryCollector(source, cg).sample()[SWAP_KEY] == 25.0 and cg.swap_limit() == 256 * MiB
    (tmp_path / "cg/pod/ctr/memory.swap.current").write_text(f"{300 * MiB}\n")  # limit lowered
    assert MemoryCollector(source, cg).sample()[SWAP_KEY] == 100.0


@pytest.mark.parametrize(
    "files",
    [
        {"ctr_max": "max", "ctr_current": str(64 * MiB), "pod_max": "max"},
        {"ctr_current": str(64 * MiB)},  # no swap controller files: the kernel has none
        {"ctr_max": str(16 << 30), "ctr_current": str(64 * MiB)},  # above the host's 8 GiB
    ],
    ids=["max", "missing", "above the host"],
)
def test_swap_percent_of_the_host_without_a_cgroup_limit(
    tmp_path: Path, files: dict[str, str]
) -> None:
    source = swap_source(tmp_path, 8 * 1024 * 1024, 6 * 1024 * 1024)
    cg = swap_cgroup(tmp_path, **files)
    assert MemoryCollector(source, cg).sample()[SWAP_KEY] == 25.0


def test_no_swap_key_where_the_cgroup_may_not_swap(tmp_path: Path) -> None:
    source = swap_source(tmp_path, 8 * 1024 * 1024, 6 * 1024 * 1024)
    cg = swap_cgroup(tmp_path, ctr_max="max", ctr_current="0", pod_max="0")
    assert cg.swap_limit() == 0
    snap = MemoryCollector(source, cg).sample()
    assert SWAP_KEY not in snap and "memory" in snap


def test_cgroup_v1_swap_is_the_host_swap(tmp_path: Path) -> None:
    """v1 has no swap-only limit (``memory.memsw.*`` is memory + swap): the host's numbers."""
    write(tmp_path / "memory.memsw.limit_in_bytes", str(MiB))
    cg = Cgroup(1, memory_dirs=[str(tmp_path)])
    assert cg.swap_limit() is None and cg.swap_used() is None
    source = swap_source(tmp_path, 8 * 1024 * 1024, 6 * 1024 * 1024)
    assert MemoryCollector(source, cg).sample()[SWAP_KEY] == 25.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="psutil reads procfs on Linux")
@pytest.mark.parametrize(
    ("total_kb", "free_kb"),
    [(8 * 1024 * 1024, 7 * 1024 * 1024), (2097148, 1234567), (2097148, 2097148), (4, 0)],
)
def test_swap_percent_matches_psutil_on_the_same_meminfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, total_kb: int, free_kb: int
) -> None:
    """Both sources against ``psutil.swap_memory()`` reading the captured procfs root."""
    source = swap_source(tmp_path, total_kb, free_kb)
    write(tmp_path / "host-proc/vmstat", "pswpin 10\npswpout 20\n")
    psutil_source = PsutilSource()  # before: it reads the boot time from /proc/stat
    monkeypatch.setattr(psutil, "PROCFS_PATH", source.root)
    truth = psutil.swap_memory()
    for src in (source, psutil_source):
        assert src.swap() == (truth.total, truth.used)
        assert MemoryCollector(src).sample()[SWAP_KEY] == pytest.approx(truth.percent, abs=0.05)


@pytest.mark.parametrize("kind", ["psutil", "procfs"])
def test_swap_percent_matches_psutil_on_this_machine(kind: str) -> None:
    if kind == "procfs" and not ProcfsSource.supported():
        pytest.skip("needs Linux procfs")
    source = ProcfsSource() if kind == "procfs" else PsutilSource()
    before = psutil.swap_memory()
    if before.total == 0:
        pytest.skip("this machine has no swap (the no-swap case is checked below)")
    value = MemoryCollector(source).sample()[SWAP_KEY]
    after = psutil.swap_memory()
    assert source.swap().total == before.total
    # psutil rounds its percent to 0.1; swap in use may move a little between the reads.
    low, high = sorted((before.percent, after.percent))
    assert low - 0.2 <= value <= high + 0.2


@pytest.mark.parametrize("kind", ["psutil", "procfs"])
def test_no_swap_key_on_this_machine_without_swap(kind: str) -> None:
    if kind == "procfs" and not ProcfsSource.supported():
        pytest.skip("needs Linux procfs")
    if psutil.swap_memory().total != 0:
        pytest.skip("this machine has swap (checked against psutil above)")
    source = ProcfsSource() if kind == "procfs" else PsutilSource()
    assert source.swap().total == 0
    assert SWAP_KEY not in MemoryCollector(source).sample()


# --- limits that change while the job runs (in-place resize, docker update) ----------------


class FakeClock:
    """The cgroup's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limits_are_read_again_once_the_latest_reading_is_refresh_s_old(v2: str) -> None:
    cg = find_cgroup(proc_root=v2)
    assert cg is not None and cg.refresh_s == 1.0
    cg.clock = clock = FakeClock()
    ctr = Path(v2).parent / "sys/fs/cgroup/kubepods/pod1/ctr"
    assert (cg.cpu_limit(), cg.memory_limit()) == (1.5, 1024 * MiB)
    (ctr / "cpu.max").write_text("50000 100000\n")  # resized to half a CPU
    (ctr / "memory.max").write_text(f"{512 * MiB}\n")
    clock.now += 0.9
    assert (cg.cpu_limit(), cg.memory_limit()) == (1.5, 1024 * MiB)  # 0.9 s old: kept
    clock.now += 0.1
    assert (cg.cpu_limit(), cg.memory_limit()) == (0.5, 512 * MiB)
    (ctr / "cpu.max").write_text("max 100000\n")  # the container's limits lifted: the pod's
    (ctr / "memory.max").write_text("max\n")
    clock.now += 1.0
    assert (cg.cpu_limit(), cg.memory_limit()) == (4.0, 2048 * MiB)
    clock.now -= 5.0  # a clock that went back does not keep a reading for ever
    (ctr / "cpu.max").write_text("100000 100000\n")
    assert cg.cpu_limit() == 1.0


def test_memory_keys_follow_a_memory_limit_change(v2: str) -> None:
    source = default_source()
    cg = find_cgroup(proc_root=v2)
    assert cg is not None
    cg.clock = clock = FakeClock()
    memory, process = MemoryCollector(source, cg), ProcessCollector(source, os.getpid(), True, cg)
    assert memory.sample()["memory"] == pytest.approx(500 / 1024 * 100)
    assert process.memory_total == 1024 * MiB
    ctr = Path(v2).parent / "sys/fs/cgroup/kubepods/pod1/ctr"
    (ctr / "memory.max").write_text(f"{800 * MiB}\n")
    clock.now += 1.0
    assert memory.sample()["memory"] == pytest.approx(500 / 800 * 100)
    assert process.memory_total == 800 * MiB
    snap = process.sample()
    assert snap["proc.memory.percent"] == pytest.approx(snap["proc.memory.pssMB"] / 800 * 100)


# A child using about 40 % of a CPU (4 ms busy, 6 ms asleep): under 100 % of either quota.
DUTY = "import time\nwhile True:\n    t = time.monotonic()\n    while time.monotonic() - t < 0.004: pass\n    time.sleep(0.006)"  # noqa: E501


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def test_process_cpu_follows_a_cpu_quota_change(v2: str) -> None:
    """The fake tree's quota goes from 1.0 to 0.5 CPU mid-run: ``cpu`` is then of 0.5."""
    source = default_source()
    cg = find_cgroup(proc_root=v2)
    assert cg is not None
    ctr = Path(v2).parent / "sys/fs/cgroup/kubepods/pod1/ctr"
    (ctr / "cpu.max").write_text("100000 100000\n")
    child = subprocess.Popen([sys.executable, "-c", DUTY])
    try:
        collector = ProcessCollector(source, child.pid, True, cg)
        readings = []
        for quota, cpus in (("100000 100000", 1.0), ("50000 100000", 0.5)):
            (ctr / "cpu.max").write_text(quota + "\n")
            time.sleep(1.1)  # the latest reading of the limit is now over refresh_s old
            collector.sample()
            t0, c0 = time.monotonic(), cpu_seconds(child.pid)
            time.sleep(1.5)
            value = collector.sample()["cpu"]
            used = (cpu_seconds(child.pid) - c0) / (time.monotonic() - t0)  # CPUs
            available = min(float(len(os.sched_getaffinity(child.pid))), cpus)
            readings.append((value, used / available * 100))
    finally:
        child.kill()
        child.wait()
    (before, truth_before), (after, truth_after) = readings
    assert abs(before - truth_before) < 10, readings
    assert abs(after - truth_after) < 10, readings


def _real_cpu_cgroup() -> tuple[Cgroup, str]:
    """(this process's cgroup, a new child cgroup of its CPU controller's root), or a skip."""
    if not sys.platform.startswith("linux"):
        pytest.skip("cgroups are Linux's")
    if os.geteuid() != 0:
        pytest.skip("making a cgroup and moving a process into it needs root")
    cg = find_cgroup()
    if cg is None or not cg.cpu_dirs:
        pytest.skip("no cgroup CPU controller is mounted here")
    root = cg.cpu_dirs[-1]
    if cg.version == 2:
        try:
            with open(os.path.join(root, "cgroup.subtree_control"), "a") as f:
                f.write("+cpu")  # children of the root get cpu.max
        except OSError as exc:
            pytest.skip(f"cannot enable the cgroup v2 cpu controller under {root}: {exc}")
    path = os.path.join(root, f"sysmetrics-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(path)
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup under {root} (read-only cgroupfs?): {exc}")
    return cg, path


def _set_quota(cg: Cgroup, path: str, quota_us: int, period_us: int = 100_000) -> None:
    if cg.version == 2:
        Path(path, "cpu.max").write_text(f"{quota_us} {period_us}\n")
    else:
        Path(path, "cpu.cfs_period_us").write_text(f"{period_us}\n")
        Path(path, "cpu.cfs_quota_us").write_text(f"{quota_us}\n")


@pytest.mark.serial
@pytest.mark.kernel
def test_cpu_follows_a_real_cgroup_resize_from_one_cpu_to_half() -> None:
    """A spinning child in a real cgroup limited to 1 CPU, then 0.5 CPU (a live resize).

    Through ``SystemMonitor(pid=child)``: ``cpu`` is the child's use of its quota as it
    is, so about 100 after the resize too (the kernel throttles it to half a CPU).
    """
    cg, path = _real_cpu_cgroup()
    child = None
    try:
        _set_quota(cg, path, 100_000)
        child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        Path(path, "cgroup.procs").write_text(f"{child.pid}\n")
        readings = []
        with SystemMonitor(interval=0.25, pid=child.pid, disk_paths=()) as m:
            for quota_us, cpus in ((100_000, 1.0), (50_000, 0.5)):
                _set_quota(cg, path, quota_us)
                time.sleep(1.5)  # over refresh_s: the monitor has read the new limit
                m.snapshot()
                t0, c0 = time.monotonic(), cpu_seconds(child.pid)
                time.sleep(2.0)
                value = m.snapshot()["cpu"]
                used = (cpu_seconds(child.pid) - c0) / (time.monotonic() - t0)
                readings.append((value, min(100.0, used / cpus * 100)))
    finally:
        if child is not None:
            child.kill()
            child.wait()
        for _ in range(50):  # the cgroup empties as the killed child is reaped
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)
    assert not os.path.exists(path)
    (before, truth_before), (after, truth_after) = readings
    assert truth_after > 60, readings  # the child really used most of its half CPU
    assert abs(before - truth_before) < 15, readings
    assert abs(after - truth_after) < 15, readings
