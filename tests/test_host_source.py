"""The host sources' named readings, process trees and open-file scans (issue 24, item 4).

Both real sources on this machine (procfs where it has one, psutil always), compared with
each other and with what the OS says; a captured procfs tree (real directories and
symbolic links under ``tmp_path``) for what this machine's ``/proc`` cannot show: a
process holding ``/dev/nvidia1`` open. The NVIDIA test drives the real ``pynvml`` over
the fake NVML library of ``tests/fake_nvml.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sysmetrics.collectors import NvidiaCollector
from sysmetrics.host import (
    CpuTime,
    DiskIO,
    DiskUsage,
    HostSource,
    MemoryInfo,
    ProcfsSource,
    PsutilSource,
    SwapInfo,
    TreeProcess,
    process_tree,
)
from tests.fake_nvml import FakeGpu as GPU
from tests.fake_nvml import FakeNvmlLib, binding

SOURCES = ["psutil"] + (["procfs"] if ProcfsSource.supported() else [])


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> HostSource:
    return ProcfsSource() if request.param == "procfs" else PsutilSource()


def test_readings_are_named_in_the_units_their_docstrings_state(source: HostSource) -> None:
    mem = source.memory()
    assert isinstance(mem, MemoryInfo)
    truth = psutil.virtual_memory()
    assert mem.total == truth.total  # bytes, both sides
    assert 0 < mem.available <= mem.total
    swap = source.swap()
    assert isinstance(swap, SwapInfo) and 0 <= swap.used <= max(swap.total, 0)
    io = source.disk_io()
    assert isinstance(io, DiskIO) and io.read >= 0 and io.written >= 0
    usage = source.disk_usage("/")
    assert isinstance(usage, DiskUsage)
    free = shutil.disk_usage("/")
    assert usage.total == free.total and 0 < usage.used <= usage.total
    assert 0 < usage.percent <= 100
    cores = source.cpu_times()
    assert cores and all(isinstance(c, CpuTime) and 0 <= c.busy <= c.total for c in cores)


def test_both_sources_agree_field_by_field() -> None:
    if not ProcfsSource.supported():
        pytest.skip("needs Linux procfs")
    procfs, ps = ProcfsSource(), PsutilSource()
    assert procfs.memory().total == ps.memory().total
    assert procfs.swap().total == ps.swap().total
    a, b = procfs.disk_usage("/"), ps.disk_usage("/")
    assert a.total == b.total and a.percent == pytest.approx(b.percent, abs=0.5)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_process_tree_and_open_files(source: HostSource, sleeper: subprocess.Popen[bytes]) -> None:
    tree = process_tree(source, os.getpid())
    assert tree[0] == TreeProcess(pid=os.getpid(), parent=0)
    assert TreeProcess(sleeper.pid, os.getpid()) in tree
    assert process_tree(source, os.getpid(), descendants=False) == [TreeProcess(os.getpid(), 0)]
    assert source.pid_exists(os.getpid()) and source.pid_exists(sleeper.pid)
    with open(__file__, "rb"):
        assert os.path.realpath(__file__) in source.fd_targets(os.getpid())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not source.pid_exists(gone.pid) and source.fd_targets(gone.pid) == []


def captured_procfs(tmp_path: Path, pid: int, devices: list[str]) -> ProcfsSource:
    """A captured procfs tree: process ``pid``, no children, holding ``devices`` open."""
    proc = tmp_path / "proc"
    (proc / str(pid) / "task" / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "task" / str(pid) / "children").write_text("")
    fd = proc / str(pid) / "fd"
    fd.mkdir()
    for n, device in enumerate(devices):
        (fd / str(n + 3)).symlink_to(device)
    return ProcfsSource(str(proc), str(tmp_path / "no-block"), str(tmp_path / "no-net"))


def test_a_captured_procfs_root_serves_the_process_tree_and_the_device_files(
    tmp_path: Path,
) -> None:
    source = captured_procfs(tmp_path, 4242, ["/dev/nvidia1", "/dev/nvidiactl", "socket:[7]"])
    assert process_tree(source, 4242) == [TreeProcess(4242, 0)]
    assert sorted(source.fd_targets(4242)) == ["/dev/nvidia1", "/dev/nvidiactl", "socket:[7]"]
    assert source.pid_exists(4242) and not source.pid_exists(os.getpid())


@pytest.fixture
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.usefixtures("no_cuda_visible_devices")
def test_nvidia_attribution_asks_its_host_source(tmp_path: Path) -> None:
    """Regression: the device-files fallback read the machine's ``/proc`` whatever the
    collector's source was, so a captured procfs root attributed nothing.

    The job (PID 4242 of the captured tree) holds ``/dev/nvidia1`` open; NVML lists PIDs of
    another namespace on both GPUs. Before: no ``gpu.process.*`` key at all.
    """
    lib = FakeNvmlLib([GPU("GPU-a", compute=[(4_000_001, 1 << 30)]),
                       GPU("GPU-b", compute=[(4_000_002, 1 << 30)], minor=1)])  # fmt: skip
    source = captured_procfs(tmp_path, 4242, ["/dev/nvidia1", "/dev/nvidiactl"])
    c = NvidiaCollector.create(source, 4242, nvml=binding(lib))
    assert c is not None
    try:
        snap = c.sample()
    finally:
        c.close()
    assert not lib.failures, lib.failures
    assert "gpu.process.1.gpu" in snap, sorted(snap)
    assert not any(k.startswith("gpu.process.0.") for k in snap), sorted(snap)
