"""NVIDIA collector. CI has no GPU: the unit tests run the real ``pynvml`` binding over the
fake NVML library of ``tests/fake_nvml.py`` (C functions as ctypes callbacks, per driver
generation). Tests marked ``gpu`` use the real NVML and skip where there is none."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import NvidiaCollector
from sysmetrics.host import default_source
from tests.fake_nvml import FakeGpu as GPU
from tests.fake_nvml import FakeNvmlLib, binding

_LIBS: list[FakeNvmlLib] = []


def make_nvml(gpus: list[GPU], **kw: Any) -> Any:
    """The real binding (a private copy) over a fake library of ``gpus``."""
    lib = FakeNvmlLib(gpus, **kw)
    _LIBS.append(lib)
    return binding(lib)


def collector(gpus: list[GPU], driver: str = "latest", **kw: Any) -> NvidiaCollector:
    nvml = make_nvml(gpus, driver=driver)
    c = NvidiaCollector.create(default_source(), os.getpid(), nvml=nvml, **kw)
    assert c is not None
    return c


def calls(c: NvidiaCollector | Any) -> Counter[str]:
    """How often each C function of the fake library was called."""
    nvml = c.nvml if isinstance(c, NvidiaCollector) else c
    return nvml.nvmlLib.calls  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield
    failures = [f for lib in _LIBS for f in lib.failures]
    _LIBS.clear()
    assert not failures, f"the fake NVML library raised: {failures}"


def test_every_catalogue_key_for_each_gpu() -> None:
    c = collector([GPU("GPU-a"), GPU("GPU-b", util=(90, 70), used=8 << 30, temp=71, minor=1)])
    snap = c.sample()
    assert snap["gpu.0.gpu"] == 50 and snap["gpu.0.memory"] == 20
    assert snap["gpu.1.gpu"] == 90 and snap["gpu.1.memory"] == 70
    assert snap["gpu.1.memoryAllocatedBytes"] == 8 << 30
    assert snap["gpu.1.memoryAllocated"] == pytest.approx(50.0)
    assert snap["gpu.1.temp"] == 71
    assert snap["gpu.0.powerWatts"] == 150.0 and snap["gpu.0.powerPercent"] == 50.0
    assert (snap["gpu.0.smClock"], snap["gpu.0.memoryClock"], snap["gpu.0.graphicsClock"]) == (
        1400, 5000, 1300,
    )  # fmt: skip
    assert snap["gpu.0.correctedMemoryErrors"] == 3 and snap["gpu.0.uncorrectedMemoryErrors"] == 0
    assert snap["gpu.0.encoderUtilization"] == 5
    assert not any(k.startswith("gpu.process.") for k in snap)  # no process of ours on them
    assert c.aggregation("gpu.0.memoryAllocatedBytes") == "peak"
    assert c.aggregation("gpu.0.correctedMemoryErrors") == "last"
    assert c.aggregation("gpu.0.gpu") == "mean"


def test_current_entry_points_are_used() -> None:
    c = collector([GPU("GPU-a")])
    c.sample()
    assert calls(c)["nvmlDeviceGetTemperatureV"] == 1
    assert calls(c)["nvmlDeviceGetTemperature"] == 0
    older = collector([GPU("GPU-a", temp=65)], driver="r550")  # no nvmlDeviceGetTemperatureV
    assert older.sample()["gpu.0.temp"] == 65


@pytest.mark.parametrize("track", [True, False])
def test_gpus_used_by_the_process_tree(track: bool) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        gpus = [
            GPU("GPU-a", compute=[(child.pid, 1 << 30)]),
            GPU("GPU-b", compute=[(os.getpid(), 2 << 30), (999_999_999, 5 << 30)], minor=1),
            GPU("GPU-c", compute=[(1, 1 << 30)], minor=2),  # someone else's
        ]
        snap = collector(gpus, track_process_tree=track).sample()
    finally:
        child.kill()
        child.wait()
    assert snap["gpu.process.1.processMemoryAllocatedBytes"] == 2 << 30  # ours only
    assert snap["gpu.process.1.gpu"] == snap["gpu.1.gpu"]
    assert snap["gpu.process.1.memoryAllocatedBytes"] == snap["gpu.1.memoryAllocatedBytes"]
    assert ("gpu.process.0.gpu" in snap) is track  # the child's GPU
    if track:
        assert snap["gpu.process.0.processMemoryAllocatedBytes"] == 1 << 30
    assert not any(k.startswith("gpu.process.2.") for k in snap)


def test_container_falls_back_to_open_device_files(tmp_path: Path) -> None:
    """NVML lists host PIDs; the tree holds /dev/nvidia1 open (a procfs tree of real links)."""
    fd = tmp_path / "proc" / str(os.getpid()) / "fd"
    fd.mkdir(parents=True)
    (fd / "7").symlink_to("/dev/nvidia1")
    (fd / "8").symlink_to("/dev/nvidiactl")
    gpus = [GPU("GPU-a", compute=[(4_000_001, 1 << 30)]),
            GPU("GPU-b", compute=[(4_000_002, 1 << 30)], minor=1)]  # fmt: skip
    c = collector(gpus)
    c.proc_root = str(tmp_path / "proc")
    snap = c.sample()
    assert "gpu.process.1.gpu" in snap and "gpu.process.0.gpu" not in snap
    assert "gpu.process.1.processMemoryAllocatedBytes" not in snap  # unknown through files


def test_unsupported_field_is_dropped_for_that_device_only_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unsupported = {"nvmlDeviceGetEncoderUtilization": pynvml.NVML_ERROR_NOT_SUPPORTED,
                   "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_NOT_SUPPORTED}  # fmt: skip
    gpus = [GPU("GPU-a", errors=unsupported), GPU("GPU-b", minor=1)]
    c = collector(gpus)
    with caplog.at_level("DEBUG", logger="sysmetrics"):
        for _ in range(3):
            snap = c.sample()
    assert "gpu.0.encoderUtilization" not in snap and "gpu.0.powerPercent" not in snap
    assert snap["gpu.0.powerWatts"] == 150.0 and snap["gpu.0.gpu"] == 50
    assert snap["gpu.1.encoderUtilization"] == 5 and snap["gpu.1.powerPercent"] == 50.0
    assert calls(c)["nvmlDeviceGetEncoderUtilization"] == 4  # GPU 0 once, GPU 1 three times
    assert len([r for r in caplog.records if "encoderUtilization unavailable" in r.message]) == 1


def test_lost_gpu_is_dropped_with_one_warning_and_the_rest_go_on() -> None:
    gpus = [GPU("GPU-a"), GPU("GPU-b", minor=1)]
    c = collector(gpus)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = SystemMonitor(interval=0.02, collectors=[c]).start()
        try:
            assert "gpu.1.gpu" in m.snapshot()
            gpus[1].lost = True
            time.sleep(0.2)
            m.snapshot()
            time.sleep(0.1)
            snap = m.snapshot()
        finally:
            m.stop()
    assert "gpu.0.gpu" in snap and not any(k.startswith("gpu.1.") for k in snap)
    lost = [w for w in caught if issubclass(w.category, SystemMetricsWarning)]
    assert len(lost) == 1 and "gpu.1 (GPU-b) is lost" in str(lost[0].message)
    assert m.collectors == [c]  # the collector itself goes on


def test_mig_mode_reports_instance_memory_and_no_made_up_utilization() -> None:
    instances = [GPU("MIG-a0", used=1 << 30, total=10 << 30, is_mig=True),
                 GPU("MIG-a1", used=3 << 30, total=10 << 30, is_mig=True)]  # fmt: skip
    c = collector([GPU("GPU-a", mig=instances)])
    snap = c.sample()
    assert "gpu.0.gpu" not in snap and "gpu.0.memory" not in snap
    assert snap["gpu.0.mig.0.memoryAllocatedBytes"] == 1 << 30
    assert snap["gpu.0.mig.1.memoryAllocated"] == pytest.approx(30.0)
    assert snap["gpu.0.temp"] == 60  # what the parent supports is still there


def test_mig_device_visible_by_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    instances = [GPU("MIG-a0", used=1 << 30, total=10 << 30, is_mig=True)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-a0")
    snap = collector([GPU("GPU-a", mig=instances)]).sample()
    assert snap == {"gpu.0.memoryAllocatedBytes": 1 << 30, "gpu.0.memoryAllocated": 10.0}


def test_gpu_ids_follow_cuda_numbering(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [GPU(f"GPU-{n}", temp=60 + n, minor=n) for n in range(4)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    snap = collector(gpus).sample()
    assert (snap["gpu.0.temp"], snap["gpu.1.temp"]) == (63, 61)  # CUDA 0 is NVML 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3,GPU-1")
    assert (collector(gpus).sample()["gpu.1.temp"]) == 61
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert "gpu.2.temp" not in snap
    snap = collector(gpus, gpu_ids=[1]).sample()
    assert snap["gpu.1.temp"] == 61 and "gpu.0.temp" not in snap
    snap = collector(gpus, gpu_ids=["GPU-3"]).sample()
    assert list({k.split(".")[1] for k in snap}) == ["0"]


@pytest.mark.parametrize("bad", [2, -1, "GPU-9", True])
def test_gpu_id_that_does_not_exist_is_a_clear_error(bad: object) -> None:
    nvml = make_nvml([GPU("GPU-a"), GPU("GPU-b")])
    with pytest.raises(ValueError, match=rf"gpu_ids contains {bad!r}, which names no GPU .* 0..1"):
        NvidiaCollector.create(default_source(), os.getpid(), gpu_ids=[bad], nvml=nvml)  # type: ignore[list-item]
    assert calls(nvml)["nvmlInitWithFlags"] == calls(nvml)["nvmlShutdown"] == 1
    assert nvml.nvmlLib.refcount == 0  # nothing left open


def test_no_library_driver_or_gpu_is_quietly_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    src = default_source()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level("DEBUG", logger="sysmetrics"):
            no_lib = make_nvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
            assert NvidiaCollector.create(src, os.getpid(), nvml=no_lib) is None
            no_driver = make_nvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
            assert NvidiaCollector.create(src, os.getpid(), nvml=no_driver) is None
            assert NvidiaCollector.create(src, os.getpid(), nvml=make_nvml([])) is None
    assert len([r for r in caplog.records if "NVIDIA collector unavailable" in r.message]) == 3
    with pytest.raises(ValueError, match=r"gpu_ids=\[0\] cannot be watched: NVML failed"):
        NvidiaCollector.create(src, os.getpid(), gpu_ids=[0], nvml=no_lib)


def test_monitor_on_this_machine_without_gpu_has_no_gpu_keys() -> None:
    if NvidiaCollector.create(default_source(), os.getpid()) is not None:
        pytest.skip("this machine has an NVIDIA GPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with SystemMonitor(interval=0.1) as m:
            assert not any(k.startswith("gpu.") for k in m.snapshot())
    with pytest.raises(ValueError, match="gpu_ids=\\[0\\] cannot be watched"):
        SystemMonitor(gpu_ids=[0])
    with pytest.raises(TypeError, match="gpu_ids=0 is invalid"):
        SystemMonitor(gpu_ids=0)  # type: ignore[arg-type]


@pytest.mark.gpu
def test_real_nvml_reports_every_gpu() -> None:
    c = NvidiaCollector.create(default_source(), os.getpid())
    if c is None:
        pytest.skip("no NVIDIA GPU, driver or NVML library on this machine")
    try:
        snap = c.sample()
    finally:
        c.close()
    for d in c.devices:
        for key in ("memoryAllocatedBytes", "memoryAllocated", "temp"):
            assert f"gpu.{d.index}.{key}" in snap, (key, sorted(snap))


# Defects fixed: each test failed before its fix.


def test_idle_gpu_whose_device_file_the_job_holds_open_is_not_the_jobs(tmp_path: Path) -> None:
    """CUDA init opens every visible GPU's device file: that alone attributes nothing."""
    fd = tmp_path / "proc" / str(os.getpid()) / "fd"
    fd.mkdir(parents=True)
    for n in range(3):
        (fd / str(n + 10)).symlink_to(f"/dev/nvidia{n}")
    gpus = [GPU("GPU-a", compute=[(os.getpid(), 1 << 30)]), GPU("GPU-b", minor=1),
            GPU("GPU-c", minor=2, compute=[(os.getpid() + 4_000_000, 1 << 30)])]  # fmt: skip
    c = collector(gpus)
    c.proc_root = str(tmp_path / "proc")
    (tmp_path / "proc" / "1").mkdir()  # a process of this namespace, on no GPU
    snap = c.sample()
    assert snap["gpu.process.0.processMemoryAllocatedBytes"] == 1 << 30
    assert not any(k.startswith("gpu.process.1.") for k in snap), sorted(snap)  # idle
    assert "gpu.process.2.gpu" in snap  # a PID of another namespace: the container case


@pytest.mark.parametrize("driver", ["r440", "r470"])
def test_driver_without_v3_process_lists(driver: str) -> None:
    gpus = [GPU("GPU-a", compute=[(os.getpid(), 2 << 30)], graphics=[(1, 1 << 20)])]
    snap = collector(gpus, driver=driver).sample()
    assert snap["gpu.process.0.processMemoryAllocatedBytes"] == 2 << 30
    assert snap["gpu.0.gpu"] == 50


def test_r535_v3_entries_are_read_in_their_layout() -> None:
    """R535's _v3 writes 32-byte entries; the binding reads 24: the second is garbage."""
    gpus = [GPU("GPU-a", compute=[(os.getpid() + 4_000_000, 1 << 30), (os.getpid(), 3 << 30)])]
    c = collector(gpus, driver="r535")
    assert c.sample()["gpu.process.0.processMemoryAllocatedBytes"] == 3 << 30


def test_garbled_v3_entries_fall_back_to_v2() -> None:
    """A 32-byte _v3 the symbols do not give away: entries after the first are implausible."""
    gpus = [GPU("GPU-a", compute=[(os.getpid() + 4_000_000, 1 << 30), (os.getpid(), 3 << 30)])]
    nvml = make_nvml(gpus, driver="r535")
    nvml.nvmlLib.missing = set()  # exports what R550 does, writes what R535 does
    c = NvidiaCollector.create(default_source(), os.getpid(), nvml=nvml)
    assert c is not None
    for _ in range(2):
        assert c.sample()["gpu.process.0.processMemoryAllocatedBytes"] == 3 << 30
    assert calls(c)["nvmlDeviceGetComputeRunningProcesses_v2"] > 0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_UNKNOWN])
def test_transient_error_skips_a_field_for_a_few_ticks_only(code: int) -> None:
    gpu = GPU("GPU-a", errors={"nvmlDeviceGetPowerUsage": code})
    c = collector([gpu])
    for _ in range(6):
        snap = c.sample()
        assert "gpu.0.powerWatts" not in snap and snap["gpu.0.temp"] == 60
    assert 1 < calls(c)["nvmlDeviceGetPowerUsage"] < 6  # tried again, with backoff
    gpu.errors.clear()
    back = [c.sample() for _ in range(20)]
    assert back[-1]["gpu.0.powerWatts"] == 150.0


@pytest.mark.parametrize(
    "code",
    [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION,
     pynvml.NVML_ERROR_FUNCTION_NOT_FOUND],
)  # fmt: skip
def test_permanent_errors_drop_the_field_for_good(code: int) -> None:
    gpu = GPU("GPU-a", errors={"nvmlDeviceGetPowerUsage": code})
    c = collector([gpu])
    c.sample()
    gpu.errors.clear()
    assert not any("powerWatts" in k for s in [c.sample() for _ in range(20)] for k in s)
    assert calls(c)["nvmlDeviceGetPowerUsage"] == 1


def test_uninitialized_nvml_is_initialised_again() -> None:
    """Another library called nvmlShutdown once too often: NVML answers UNINITIALIZED."""
    c = collector([GPU("GPU-a", compute=[(os.getpid(), 1 << 30)])])
    c._field_reader.clock = lambda: 50.0  # no time passes: energy the same
    before = c.sample()
    c.nvml.nvmlShutdown()  # the other library's extra shutdown
    assert c.nvml.nvmlLib.refcount == 0
    after = c.sample()
    assert after == before
    assert c.sample() == before
    c.close()
    assert c.nvml.nvmlLib.refcount == 0


def test_gpu_that_stops_answering_warns_once_and_comes_back() -> None:
    gpus = [GPU("GPU-a"), GPU("GPU-b", minor=1)]
    c = collector(gpus)
    c.sample()
    gpus[1].failing = pynvml.NVML_ERROR_TIMEOUT
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stalled = [c.sample() for _ in range(5)]
    assert all(not any(k.startswith("gpu.1.") for k in s) for s in stalled)
    assert all(s["gpu.0.gpu"] == 50 for s in stalled)
    said = [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]
    assert len(said) == 1 and "gpu.1 (GPU-b) stopped answering" in said[0], said
    gpus[1].failing = pynvml.NVML_SUCCESS
    back = [c.sample() for _ in range(40)]
    assert back[-1]["gpu.1.gpu"] == 50 and back[-1]["gpu.1.powerWatts"] == 150.0


def test_process_in_compute_and_graphics_lists_counts_once() -> None:
    gpus = [GPU("GPU-a", compute=[(os.getpid(), 2 << 30)], graphics=[(os.getpid(), 2 << 30)])]
    assert collector(gpus).sample()["gpu.process.0.processMemoryAllocatedBytes"] == 2 << 30


def test_mps_clients_are_attributed() -> None:
    """Under MPS the compute list holds the MPS server; the clients are in the MPS list."""
    server = os.getpid() + 4_000_000
    gpus = [GPU("GPU-a", compute=[(server, 5 << 30)], mps=[(os.getpid(), 1 << 30)])]
    assert collector(gpus).sample()["gpu.process.0.processMemoryAllocatedBytes"] == 1 << 30


def test_memory_v2_version_mismatch_falls_back_to_v1() -> None:
    gpu = GPU("GPU-a", used=4 << 30, reserved=1 << 30, total=16 << 30)
    nvml = make_nvml([gpu], memory_v2_version=0x03000030)  # a struct version it will not take
    c = NvidiaCollector.create(default_source(), os.getpid(), nvml=nvml)
    assert c is not None
    snap = c.sample()
    assert snap["gpu.0.memoryAllocatedBytes"] == 5 << 30  # v1: used includes reserved
    assert snap["gpu.0.memoryAllocated"] == pytest.approx(5 / 16 * 100)
    v2 = collector([gpu]).sample()
    assert v2["gpu.0.memoryAllocatedBytes"] == 4 << 30  # v2: allocated only


# CUDA_VISIBLE_DEVICES and numbering (CUDA C Programming Guide, "CUDA Environment Variables").

_UUIDS = [
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-8977aa01-0000-4000-8000-000000000001",
    "GPU-1111aa01-0000-4000-8000-000000000002",
    "GPU-2222aa01-0000-4000-8000-000000000003",
]


def four_gpus() -> list[GPU]:
    return [GPU(u, temp=60 + n, minor=n) for n, u in enumerate(_UUIDS)]


def numbering(snap: dict[str, float]) -> dict[int, int]:
    """CUDA index -> NVML index (the temperature tells the GPU: 60 + its NVML index)."""
    return {int(k.split(".")[1]): int(v) - 60 for k, v in snap.items()
            if k.startswith("gpu.") and k.endswith(".temp") and "process" not in k}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("2,0", {0: 2, 1: 0}),
        (" 1 , 3", {0: 1, 1: 3}),
        ("1gpu2,3", {0: 1, 1: 3}),  # read as strtoul reads: the leading digits
        ("GPU-8932f937", {0: 0}),  # a unique UUID prefix
        ("GPU-1111aa01,GPU-8932", {0: 2, 1: 0}),
        ("GPU-89", {}),  # a prefix of two UUIDs names no GPU: the list ends there
        ("0,7,1", {0: 0}),  # the first invalid entry ends the list
        ("0,-1,1", {0: 0}),
        ("3,GPU-nope,1", {0: 3}),
        ("GPU-2222,3", {0: 3}),  # an index after UUIDs is invalid: the list ends
        ("1,0,1", {}),  # a repeated device: CUDA sees no device at all
        ("GPU-2222,3,GPU-2222aa01", {0: 3}),  # ...unless the list ended before it
        ("GPU-1111,GPU-1111aa01-0000-4000-8000-000000000002", {}),
        ("", {}),  # no GPU
    ],
)
def test_cuda_visible_devices_as_cuda_parses_it(
    monkeypatch: pytest.MonkeyPatch, spec: str, expected: dict[int, int]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", spec)
    nvml = make_nvml(four_gpus())
    c = NvidiaCollector.create(default_source(), os.getpid(), nvml=nvml)
    snap = {} if c is None else c.sample()
    assert numbering(snap) == expected


def test_gpu_without_permission_hides_no_other_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvmlDeviceGetHandleByIndex answers NO_PERMISSION for NVML 1: it is skipped alone."""
    gpus = four_gpus()
    gpus[1].denied = True
    assert numbering(collector(gpus).sample()) == {0: 0, 2: 2, 3: 3}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1,0")
    assert numbering(collector(gpus).sample()) == {0: 3, 2: 0}  # CUDA 1 keeps its number


def fake_torch(uuids: list[Any], initialized: bool = True) -> Any:
    """A stand-in for an imported ``torch`` whose CUDA is initialised: CUDA cannot run here.

    Only what the collector reads: ``torch.cuda.is_initialized``, ``device_count`` and
    ``get_device_properties(i).uuid`` (a ``uuid.UUID``-like object or a string).
    """
    from types import SimpleNamespace

    cuda = SimpleNamespace(
        is_initialized=lambda: initialized,
        device_count=lambda: len(uuids),
        get_device_properties=lambda i: SimpleNamespace(uuid=uuids[i]),
    )
    return SimpleNamespace(cuda=cuda)


def test_numbering_follows_torch_where_it_initialised_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """FASTEST_FIRST on a mixed node: torch's CUDA 0 is NVML 2, CUDA 1 is NVML 0."""
    import uuid

    as_object = uuid.UUID(_UUIDS[2][4:])  # torch's _CUuuid prints without "GPU-"
    monkeypatch.setitem(sys.modules, "torch", fake_torch([as_object, _UUIDS[0]]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")  # what the environment alone says
    assert numbering(collector(four_gpus()).sample()) == {0: 2, 1: 0}
    monkeypatch.setitem(sys.modules, "torch", fake_torch([_UUIDS[2]], initialized=False))
    assert numbering(collector(four_gpus()).sample()) == {0: 0, 1: 2}  # the environment
    monkeypatch.setitem(sys.modules, "torch", fake_torch(["GPU-not-on-this-node"]))
    assert numbering(collector(four_gpus()).sample()) == {0: 0, 1: 2}


def test_numbering_never_imports_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert numbering(collector(four_gpus()).sample()) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert "torch" not in sys.modules


# MIG: handles re-fetched after reconfiguration; attribution without root.


def test_mig_instance_index_is_nvmls_mig_device_index() -> None:
    a1 = GPU("MIG-a1", used=3 << 30, total=10 << 30, is_mig=True)
    snap = collector([GPU("GPU-a", mig=[None, a1])]).sample()  # slot 0 is empty
    assert snap["gpu.0.mig.1.memoryAllocatedBytes"] == 3 << 30
    assert not any(k.startswith("gpu.0.mig.0.") for k in snap)


def test_mig_handles_are_fetched_again_after_reconfiguration() -> None:
    a0 = GPU("MIG-a0", used=1 << 30, total=10 << 30, is_mig=True)
    a1 = GPU("MIG-a1", used=3 << 30, total=10 << 30, is_mig=True)
    parent = GPU("GPU-a", mig=[a0, a1])
    c = collector([parent])
    now = [time.monotonic()]
    c._field_reader.clock = lambda: now[0]
    assert c.sample()["gpu.0.mig.0.memoryAllocatedBytes"] == 1 << 30
    a2 = GPU("MIG-a2", used=5 << 30, total=10 << 30, is_mig=True)
    c.nvml.nvmlLib.reconfigure_mig(parent, [a2, a1])  # a0 destroyed, a2 created in its slot
    now[0] += 10
    snap = c.sample()
    assert snap["gpu.0.mig.0.memoryAllocatedBytes"] == 5 << 30  # a2, found again at once
    assert snap["gpu.0.mig.1.memoryAllocatedBytes"] == 3 << 30  # a1 keeps its j
    fetched = calls(c)["nvmlDeviceGetMigDeviceHandleByIndex"]
    c.nvml.nvmlLib.reconfigure_mig(parent, [None, a1])  # a2 destroyed: within 5 s, once
    snaps = [c.sample() for _ in range(3)]
    assert calls(c)["nvmlDeviceGetMigDeviceHandleByIndex"] == fetched  # not fetched again
    assert all(s["gpu.0.mig.1.memoryAllocatedBytes"] == 3 << 30 for s in snaps)
    now[0] += 10
    snap = c.sample()
    assert calls(c)["nvmlDeviceGetMigDeviceHandleByIndex"] > fetched
    assert snap["gpu.0.mig.1.memoryAllocatedBytes"] == 3 << 30
    assert not any(k.startswith("gpu.0.mig.0.") for k in snap)
    a3 = GPU("MIG-a3", used=2 << 30, total=10 << 30, is_mig=True)
    c.nvml.nvmlLib.reconfigure_mig(parent, [a3, a1])  # a3 created, no handle goes stale
    assert not any(k.startswith("gpu.0.mig.0.") for k in c.sample())
    now[0] += 60
    assert c.sample()["gpu.0.mig.0.memoryAllocatedBytes"] == 2 << 30  # found in a minute


_ROOT_ONLY = {f"nvmlDeviceGet{k}RunningProcesses_v3": pynvml.NVML_ERROR_NO_PERMISSION
              for k in ("Compute", "Graphics", "MPSCompute")}  # fmt: skip
_ROOT_ONLY["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVML_ERROR_NO_PERMISSION


def test_mig_parent_without_root_attributes_through_its_instances() -> None:
    """Without root a MIG parent's process lists answer NO_PERMISSION; its instances' do not."""
    a0 = GPU("MIG-a0", is_mig=True, compute=[(os.getpid(), 1 << 30)])
    a1 = GPU("MIG-a1", is_mig=True, compute=[(1, 2 << 30)])
    snap = collector([GPU("GPU-a", mig=[a0, a1], errors=dict(_ROOT_ONLY))]).sample()
    assert snap["gpu.process.0.processMemoryAllocatedBytes"] == 1 << 30
    assert "gpu.0.memoryAllocatedBytes" not in snap and snap["gpu.0.temp"] == 60


def test_mig_gpu_is_never_attributed_by_its_device_file(tmp_path: Path) -> None:
    """Every instance's process holds the parent's /dev/nvidiaN open: it tells nothing."""
    fd = tmp_path / "proc" / str(os.getpid()) / "fd"
    fd.mkdir(parents=True)
    (fd / "7").symlink_to("/dev/nvidia0")
    a0 = GPU("MIG-a0", is_mig=True, compute=[(os.getpid() + 4_000_000, 1 << 30)])
    c = collector([GPU("GPU-a", mig=[a0], errors=dict(_ROOT_ONLY))])
    c.proc_root = str(tmp_path / "proc")
    snap = c.sample()
    assert not any(k.startswith("gpu.process.") for k in snap), sorted(snap)


# Fan, enforced power limit, energy, throttle reasons.


def test_fan_power_limit_energy_and_throttle_reasons() -> None:
    gpu = GPU("GPU-a", fan=45, limit_mw=250_000, energy_mj=7_000_000, compute=[(os.getpid(), 1)])
    c = collector([gpu])
    now = [50.0]
    c._field_reader.clock = lambda: now[0]  # a call takes no time: the counter every tick
    snap = c.sample()
    assert snap["gpu.0.fanSpeed"] == 45 and snap["gpu.0.enforcedPowerLimitWatts"] == 250.0
    assert snap["gpu.0.energyJoules"] == 0.0  # since the monitor started
    assert [snap[f"gpu.0.throttle.{k}"] for k in ("thermal", "powerCap", "hwSlowdown")] == [0] * 3
    gpu.energy_mj = 7_012_500
    now[0] += 1.0
    gpu.clocks_event_reasons = pynvml.nvmlClocksEventReasonSwThermalSlowdown | (
        pynvml.nvmlClocksEventReasonSwPowerCap
    )
    snap = c.sample()
    assert snap["gpu.0.energyJoules"] == 12.5
    assert [snap[f"gpu.0.throttle.{k}"] for k in ("thermal", "powerCap", "hwSlowdown")] == [1, 1, 0]
    gpu.clocks_event_reasons = pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
    snap = c.sample()
    assert [snap[f"gpu.0.throttle.{k}"] for k in ("thermal", "powerCap", "hwSlowdown")] == [0, 0, 1]
    gpu.clocks_event_reasons = pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    assert c.sample()["gpu.0.throttle.thermal"] == 1
    assert snap["gpu.process.0.energyJoules"] == snap["gpu.0.energyJoules"]
    assert snap["gpu.process.0.throttle.hwSlowdown"] == 1
    assert c.aggregation("gpu.0.energyJoules") == "last"
    assert c.aggregation("gpu.0.throttle.thermal") == "mean"  # the share of samples
    assert calls(c)["nvmlDeviceGetCurrentClocksThrottleReasons"] == 0


def test_throttle_reasons_under_their_pre_r535_name() -> None:
    gpu = GPU("GPU-a", clocks_event_reasons=pynvml.nvmlClocksThrottleReasonHwSlowdown)
    c = collector([gpu], driver="r470")
    assert c.sample()["gpu.0.throttle.hwSlowdown"] == 1
    assert calls(c)["nvmlDeviceGetCurrentClocksThrottleReasons"] == 1


def test_energy_is_integrated_from_power_where_nvml_has_no_counter() -> None:
    gpu = GPU("GPU-a", energy_mj=None, power_mw=100_000)
    c = collector([gpu])
    now = [50.0]
    c._field_reader.clock = lambda: now[0]
    assert c.sample()["gpu.0.energyJoules"] == 0.0
    now[0] += 2.0
    gpu.power_mw = 200_000
    assert c.sample()["gpu.0.energyJoules"] == pytest.approx(300.0)  # (100 + 200) / 2 * 2 s
    now[0] += 1.0
    assert c.sample()["gpu.0.energyJoules"] == pytest.approx(500.0)


class _SlowEnergy(GPU):
    """A GPU whose energy counter takes ``cost`` s of the collector's clock ``now`` to read.

    Models what ``benchmarks/nvidia_tick.py`` measured on an H100 in a Firecracker VM
    (driver 580.159.04): ``nvmlDeviceGetTotalEnergyConsumption`` took 4.2 ms a call, 96 %
    of the collector's time, where every other call took 2 to 15 µs (GPM's sample 105 µs).
    """

    def __init__(self, *args: Any, now: list[float], cost: float, **kw: Any) -> None:
        self.now, self.cost = now, cost
        super().__init__(*args, **kw)

    @property  # type: ignore[override]
    def energy_mj(self) -> int | None:
        self.now[0] += self.cost
        return self._energy

    @energy_mj.setter
    def energy_mj(self, value: int | None) -> None:
        self._energy = value


def test_a_slow_energy_counter_is_read_less_often_and_power_fills_in() -> None:
    now = [100.0]
    gpu = _SlowEnergy("GPU-a", now=now, cost=0.004, power_mw=200_000, energy_mj=1_000_000)
    c = collector([gpu])
    c._field_reader.clock = lambda: now[0]
    snaps = [c.sample()]
    start = now[0]
    while now[0] < start + 10.0:  # 10 s of ticks 0.5 s apart, 200 W throughout
        now[0] += 0.5
        gpu._energy = (gpu._energy or 0) + 100_000  # mJ: 200 W for 0.5 s
        snaps.append(c.sample())
    # 4 ms a read at 0.1 % of a CPU: once in 4 s, not 21 times
    assert calls(c)["nvmlDeviceGetTotalEnergyConsumption"] == 3
    # in between, power integrated on the last reading (each read's 4 ms moves the clock)
    energy = [s["gpu.0.energyJoules"] for s in snaps]
    assert energy == pytest.approx([100.0 * k for k in range(len(snaps))], rel=0.01)


def test_energy_between_counter_reads_never_goes_back() -> None:
    now = [100.0]
    gpu = _SlowEnergy("GPU-a", now=now, cost=0.004, power_mw=400_000, energy_mj=1_000_000)
    c = collector([gpu])
    c._field_reader.clock = lambda: now[0]
    energy = [c.sample()["gpu.0.energyJoules"]]
    for _ in range(30):  # power says 400 W, the counter grows at 200 W
        now[0] += 0.5
        gpu._energy = (gpu._energy or 0) + 100_000
        energy.append(c.sample()["gpu.0.energyJoules"])
    assert all(b >= a for a, b in zip(energy, energy[1:])), energy
    assert max(energy) > 3000.0  # the integration ran ahead; the value held, then went on
    gpu.power_mw = 200_000
    for _ in range(30):
        now[0] += 0.5
        gpu._energy = (gpu._energy or 0) + 100_000
        energy.append(c.sample()["gpu.0.energyJoules"])
    assert all(b >= a for a, b in zip(energy, energy[1:])), energy
    assert energy[-1] == pytest.approx(6000.0, abs=500.0)  # the counter's 60 x 100 J, nearly


def test_unsupported_fan_energy_and_throttle_are_absent() -> None:
    gpu = GPU("GPU-a", fan=None, clocks_event_reasons=None, energy_mj=None,
              errors={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED})  # fmt: skip
    c = collector([gpu])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snaps = [c.sample() for _ in range(3)]
    for snap in snaps:
        assert not any(w in k for k in snap for w in ("fan", "energy", "throttle", "powerW"))
        assert snap["gpu.0.enforcedPowerLimitWatts"] == 300.0 and snap["gpu.0.temp"] == 60
    assert calls(c)["nvmlDeviceGetFanSpeed"] == 1


def test_throttle_bits_are_nvmls() -> None:
    from sysmetrics.collectors import nvidia

    thermal = pynvml.nvmlClocksThrottleReasonSwThermalSlowdown | (
        pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    )
    hw = pynvml.nvmlClocksThrottleReasonHwSlowdown | (
        pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
    )
    ours = (nvidia._THERMAL, nvidia._POWER_CAP, nvidia._HW_SLOWDOWN)
    assert ours == (thermal, pynvml.nvmlClocksEventReasonSwPowerCap, hw)


def _ticking(c: NvidiaCollector, gpus: list[GPU], ticks: int, step: float = 0.5) -> list[Any]:
    """``ticks`` samples ``step`` s apart on the collector's own clock (no sleeping)."""
    now = [1000.0]
    c._field_reader.clock = lambda: now[0]
    snaps = []
    for _ in range(ticks):
        snaps.append(c.sample())
        now[0] += step
    return snaps


def test_slow_fields_and_process_lists_are_read_at_their_periods() -> None:
    """ECC and process lists every 5 s, the power limit every 30 s; the latest in between."""
    gpus = [GPU(f"GPU-{n}", minor=n, compute=[(os.getpid(), 1 << 30), (1, 1 << 30)])
            for n in range(2)]  # fmt: skip
    c = collector(gpus)
    static_fns = ("nvmlDeviceGetMinorNumber", "nvmlDeviceGetUUID", "nvmlDeviceGetMigMode",
                  "nvmlDeviceIsMigDeviceHandle")  # fmt: skip
    static = {f: calls(c)[f] for f in static_fns}
    snaps = _ticking(c, gpus, 100)  # 50 s: reads at 0, 5, ... 45 s and at 0, 30 s
    n = calls(c)
    assert n["nvmlDeviceGetPowerUsage"] == n["nvmlDeviceGetTemperatureV"] == 2 * 100
    assert n["nvmlDeviceGetTotalEccErrors"] == 2 * 2 * 10  # 2 GPUs, 2 counters, 10 reads
    assert n["nvmlDeviceGetEnforcedPowerLimit"] == 2 * 2
    # 10 reads of 3 lists a GPU: the compute list in two calls (count, then entries)
    assert n["nvmlDeviceGetComputeRunningProcesses_v3"] == 2 * 10 * 2
    assert n["nvmlDeviceGetGraphicsRunningProcesses_v3"] == 2 * 10
    assert {f: n[f] for f in static} == static  # static: read once, when described
    for s in snaps:  # every key in every sample, the slow ones as last read
        assert s["gpu.1.correctedMemoryErrors"] == 3 and s["gpu.1.enforcedPowerLimitWatts"] == 300
        assert s["gpu.1.powerPercent"] == 50.0
        assert s["gpu.process.1.processMemoryAllocatedBytes"] == 1 << 30
        assert s["gpu.process.1.gpu"] == s["gpu.1.gpu"]


def test_slow_changes_show_at_the_next_read_and_fast_ones_at_once() -> None:
    gpus = [GPU("GPU-a"), GPU("GPU-b", minor=1)]
    c = collector(gpus)
    now = [0.0]
    c._field_reader.clock = lambda: now[0]
    first = c.sample()
    assert not any(k.startswith("gpu.process.") for k in first)
    gpus[1].compute = [(os.getpid(), 2 << 30)]
    gpus[1].ecc, gpus[1].limit_mw, gpus[1].temp = (7, 1), 250_000, 70
    now[0] = 4.9
    s = c.sample()
    assert s["gpu.1.temp"] == 70  # fast: this tick
    assert s["gpu.1.correctedMemoryErrors"] == 3 and "gpu.process.1.gpu" not in s  # not yet
    now[0] = 5.0
    s = c.sample()
    assert (s["gpu.1.correctedMemoryErrors"], s["gpu.1.uncorrectedMemoryErrors"]) == (7, 1)
    assert s["gpu.process.1.processMemoryAllocatedBytes"] == 2 << 30
    assert s["gpu.process.1.temp"] == 70 and "gpu.process.0.gpu" not in s
    assert s["gpu.1.enforcedPowerLimitWatts"] == 300  # 30 s
    gpus[1].power_mw = 125_000
    now[0] = 30.0
    s = c.sample()
    assert s["gpu.1.enforcedPowerLimitWatts"] == 250 and s["gpu.1.powerPercent"] == 50.0
    gpus[1].compute = []  # the process ended: the GPU is no longer the tree's at the next read
    now[0] = 35.0
    assert "gpu.process.1.gpu" not in c.sample()


def test_periods_of_zero_read_everything_every_tick() -> None:
    gpus = [GPU("GPU-a", compute=[(os.getpid(), 1 << 30)])]
    c = collector(gpus)
    c.periods = dict.fromkeys(c.periods, 0.0)
    _ticking(c, gpus, 10)
    assert calls(c)["nvmlDeviceGetTotalEccErrors"] == 2 * 10
    assert calls(c)["nvmlDeviceGetEnforcedPowerLimit"] == 10
    assert calls(c)["nvmlDeviceGetMPSComputeRunningProcesses_v3"] == 10


def test_slow_field_failing_is_absent_not_stale() -> None:
    """A transient error of a slow field drops its key until it is read again."""
    gpu = GPU("GPU-a")
    c = collector([gpu])
    now = [0.0]
    c._field_reader.clock = lambda: now[0]
    assert c.sample()["gpu.0.enforcedPowerLimitWatts"] == 300
    gpu.errors["nvmlDeviceGetEnforcedPowerLimit"] = pynvml.NVML_ERROR_TIMEOUT
    now[0] = 30.0
    s = c.sample()
    assert "gpu.0.enforcedPowerLimitWatts" not in s and "gpu.0.powerPercent" not in s
    gpu.errors.clear()
    now[0] = 30.5
    assert "gpu.0.enforcedPowerLimitWatts" not in c.sample()  # backing off one tick
    now[0] = 31.0
    assert c.sample()["gpu.0.enforcedPowerLimitWatts"] == 300


# GPM (Hopper and newer): values as NVML gives them, % and MiB/s.
HOPPER_GPM = {
    pynvml.NVML_GPM_METRIC_SM_UTIL: 61.5,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 33.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 42.25,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 17.0,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 100.0,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 250.5,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 4096.0,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 2048.0,
}
GPM_KEYS = {
    "smActive": 61.5, "smOccupancy": 33.0, "pipeTensorActive": 42.25, "dramActive": 17.0,
    "pcieTxBytes": 100.0 * 2**20, "pcieRxBytes": 250.5 * 2**20,
    "nvlinkTxBytes": 4096.0 * 2**20, "nvlinkRxBytes": 2048.0 * 2**20,
}  # fmt: skip
GPM_FNS = ("nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet", "nvmlGpmSampleFree")


def gpm_keys(snap: dict[str, float], i: int = 0) -> dict[str, float]:
    return {k: snap[f"gpu.{i}.{k}"] for k in GPM_KEYS if f"gpu.{i}.{k}" in snap}


def test_gpm_metrics_from_the_second_tick_in_the_keys_units() -> None:
    gpus = [GPU("GPU-a", gpm=dict(HOPPER_GPM)), GPU("GPU-b", minor=1)]  # Hopper, and older
    c = collector(gpus)
    assert gpm_keys(c.sample()) == {}  # one sample: no interval yet
    for _ in range(3):
        snap = c.sample()
        assert gpm_keys(snap) == pytest.approx(GPM_KEYS)
        assert gpm_keys(snap, 1) == {}
    gpus[0].gpm = {**HOPPER_GPM, pynvml.NVML_GPM_METRIC_SM_UTIL: 90.0}
    assert c.sample()["gpu.0.smActive"] == 90.0
    n = calls(c)
    assert n["nvmlGpmSampleAlloc"] == 2 and n["nvmlGpmSampleGet"] == 5
    assert n["nvmlGpmMetricsGet"] == 4
    assert n["nvmlGpmQueryDeviceSupport"] == 2  # once a GPU
    c.close()
    assert calls(c)["nvmlGpmSampleFree"] == 2 and not c.nvml.nvmlLib.samples


def test_gpu_without_gpm_is_asked_nothing_after_the_support_query() -> None:
    c = collector([GPU("GPU-a")])  # before Hopper
    snaps = [c.sample() for _ in range(3)]
    assert not any(gpm_keys(s) for s in snaps)
    assert calls(c)["nvmlGpmQueryDeviceSupport"] == 1
    assert not any(calls(c)[f] for f in GPM_FNS)
    c.close()
    assert calls(c)["nvmlGpmSampleFree"] == 0


@pytest.mark.parametrize("driver", ["r470", "r440"])
def test_driver_without_gpm_functions_has_no_gpm_keys(driver: str) -> None:
    c = collector([GPU("GPU-a", gpm=dict(HOPPER_GPM))], driver=driver)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snaps = [c.sample() for _ in range(3)]
    assert not any(gpm_keys(s) for s in snaps) and snaps[-1]["gpu.0.temp"] == 60
    c.close()


def test_gpm_metric_not_supported_in_the_struct_drops_that_key_only() -> None:
    errors = {pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: pynvml.NVML_ERROR_NOT_SUPPORTED,
              pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: pynvml.NVML_ERROR_UNKNOWN}  # fmt: skip
    gpu = GPU("GPU-a", gpm=dict(HOPPER_GPM), gpm_errors=errors)
    c = collector([gpu])
    c.sample()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        snap = c.sample()
    assert gpm_keys(snap) == pytest.approx(
        {k: v for k, v in GPM_KEYS.items() if k not in ("nvlinkTxBytes", "dramActive")}
    )
    gpu.gpm_errors.clear()  # UNKNOWN is this read's; NOT_SUPPORTED is for good
    assert set(GPM_KEYS) - set(gpm_keys(c.sample())) == {"nvlinkTxBytes"}
    c.close()


def test_gpm_sample_failing_follows_the_fault_rules() -> None:
    gpu = GPU("GPU-a", gpm=dict(HOPPER_GPM), errors={"nvmlGpmSampleGet": pynvml.NVML_ERROR_TIMEOUT})
    c = collector([gpu])
    assert not any(gpm_keys(c.sample()) for _ in range(4))
    gpu.errors.clear()
    snaps = [c.sample() for _ in range(8)]
    assert gpm_keys(snaps[-1]) == pytest.approx(GPM_KEYS)  # tried again after backing off
    gpu.errors["nvmlGpmSampleGet"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    c.sample()
    gpu.errors.clear()
    assert not any(gpm_keys(c.sample()) for _ in range(4))  # dropped for good
    c.close()
    assert calls(c)["nvmlGpmSampleAlloc"] == calls(c)["nvmlGpmSampleFree"] == 2


def test_mig_mode_gpu_has_no_gpm() -> None:
    c = collector([GPU("GPU-a", gpm=dict(HOPPER_GPM), mig=[GPU("MIG-a0", is_mig=True)])])
    assert not any(gpm_keys(c.sample()) for _ in range(3))
    assert calls(c)["nvmlGpmQueryDeviceSupport"] == 0
