"""Container limits, read from cgroup v1 and v2 trees laid out as the kernel lays them out.

The trees are real files in a temporary folder (the procfs/cgroupfs layout, as
prometheus_client tests its process collector), since this machine has one cgroup
setup and containers have others.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sysmetrics.cgroup import Cgroup, find_cgroup
from sysmetrics.collectors import MemoryCollector, ProcessCollector
from sysmetrics.host import default_source

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
    assert snap["proc.memory.percent"] == pytest.approx(snap["proc.memory.rssMB"] / 1024 * 100)


def test_this_machine_cgroup_is_found() -> None:
    if not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("no procfs on this OS")
    cg = find_cgroup()
    if cg is None:
        pytest.skip("this machine has no cgroup filesystem mounted")
    assert all(os.path.isdir(d) for d in cg.memory_dirs + cg.cpu_dirs)
