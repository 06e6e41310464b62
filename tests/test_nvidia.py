"""NVIDIA collector. CI has no GPU: the unit tests drive it through ``tests/nvml_standin.py``,
a stand-in ``pynvml`` that keeps the real module's constants and error classes. Tests
marked ``gpu`` use the real NVML and skip where there is none."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pynvml
import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import NvidiaCollector
from sysmetrics.host import default_source
from tests.nvml_standin import GPU, make_nvml


def collector(gpus: list[GPU], **kw: object) -> NvidiaCollector:
    nvml = make_nvml(gpus)
    c = NvidiaCollector.create(default_source(), os.getpid(), nvml=nvml, **kw)  # type: ignore[arg-type]
    assert c is not None
    return c


@pytest.fixture(autouse=True)
def no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


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
    assert c.nvml.calls["nvmlDeviceGetTemperatureV"] == 1
    assert c.nvml.calls["nvmlDeviceGetTemperature"] == 0


@pytest.mark.parametrize("track", [True, False])
def test_gpus_used_by_the_process_tree(track: bool) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        gpus = [
            GPU("GPU-a", processes=[(child.pid, 1 << 30)]),
            GPU("GPU-b", processes=[(os.getpid(), 2 << 30), (999_999_999, 5 << 30)], minor=1),
            GPU("GPU-c", processes=[(1, 1 << 30)], minor=2),  # someone else's
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
    gpus = [GPU("GPU-a", processes=[(4_000_001, 1 << 30)]),
            GPU("GPU-b", processes=[(4_000_002, 1 << 30)], minor=1)]  # fmt: skip
    c = collector(gpus)
    c.proc_root = str(tmp_path / "proc")
    snap = c.sample()
    assert "gpu.process.1.gpu" in snap and "gpu.process.0.gpu" not in snap
    assert "gpu.process.1.processMemoryAllocatedBytes" not in snap  # unknown through files


def test_unsupported_field_is_dropped_for_that_device_only_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpus = [GPU("GPU-a", unsupported={"nvmlDeviceGetEncoderUtilization",
                                      "nvmlDeviceGetEnforcedPowerLimit"}),
            GPU("GPU-b", minor=1)]  # fmt: skip
    c = collector(gpus)
    with caplog.at_level("DEBUG", logger="sysmetrics"):
        for _ in range(3):
            snap = c.sample()
    assert "gpu.0.encoderUtilization" not in snap and "gpu.0.powerPercent" not in snap
    assert snap["gpu.0.powerWatts"] == 150.0 and snap["gpu.0.gpu"] == 50
    assert snap["gpu.1.encoderUtilization"] == 5 and snap["gpu.1.powerPercent"] == 50.0
    assert c.nvml.calls["nvmlDeviceGetEncoderUtilization"] == 4  # GPU 0 once, GPU 1 three times
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
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-1")
    snap = collector(gpus).sample()
    assert (snap["gpu.0.temp"], snap["gpu.1.temp"]) == (63, 61)  # CUDA 0 is NVML 3
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
    assert nvml.calls["nvmlInit"] == nvml.calls["nvmlShutdown"] == 1  # nothing left open


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
