"""The PyTorch allocator collector (``sysmetrics/collectors/torch_memory.py``).

No CUDA is available here, so two kinds of torch are used: the real torch CPU build
(the collector reports nothing, never imports torch, never initialises CUDA), and a
stand-in ``torch`` module put in ``sys.modules`` that models what torch documents of
``torch.cuda.is_initialized``, ``torch.cuda.device_count`` and ``torch.cuda.memory_stats``
(the flat ``"allocated_bytes.all.current"`` and ``"reserved_bytes.all.current"`` keys of
https://pytorch.org/docs/stable/generated/torch.cuda.memory_stats.html; ``{}`` while CUDA
is not initialised), and of ``torch.mps.current_allocated_memory`` /
``driver_allocated_memory`` and the cached ``torch.backends.mps.is_available``.
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
import textwrap
import types
from typing import Any

import pytest

from sysmetrics import SystemMonitor
from sysmetrics.collectors.torch_memory import TorchMemoryCollector
from tests.polling import wait_for

MiB = 1024 * 1024


class StandInCuda:
    """``torch.cuda`` as documented: per-device allocator counters, CUDA initialised lazily."""

    def __init__(self, devices: int) -> None:
        self.initialised = False
        self.stats: list[dict[str, Any]] = [
            {"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0}
            for _ in range(devices)
        ]
        self.failing: set[int] = set()
        self.calls: list[str] = []

    def is_initialized(self) -> bool:
        self.calls.append("is_initialized")
        return self.initialised

    def device_count(self) -> int:
        self.calls.append("device_count")
        return len(self.stats)

    def memory_stats(self, device: int) -> dict[str, Any]:
        self.calls.append(f"memory_stats({device})")
        if device in self.failing:
            raise RuntimeError(f"CUDA error: device {device} is gone")
        if not self.initialised:
            return {}
        return dict(self.stats[device], **{"num_alloc_retries": 0})

    def init(self) -> None:
        """What the first CUDA tensor does: initialise, allocate on each device."""
        self.initialised = True
        self.stats[0] = {
            "allocated_bytes.all.current": 10 * MiB,
            "reserved_bytes.all.current": 20 * MiB,
        }
        if len(self.stats) > 1:
            self.stats[1] = {
                "allocated_bytes.all.current": 30 * MiB,
                "reserved_bytes.all.current": 40 * MiB,
            }


def stand_in_torch(cuda: object | None = None, mps: bool = False) -> types.ModuleType:
    """A ``torch`` module with ``cuda``, ``backends.mps`` and ``mps`` as torch has them."""
    torch = types.ModuleType("torch")
    torch.cuda = cuda if cuda is not None else StandInCuda(0)  # type: ignore[attr-defined]

    @functools.lru_cache
    def is_available() -> bool:
        return mps

    backends = types.SimpleNamespace(mps=types.SimpleNamespace(is_available=is_available))
    torch.backends = backends  # type: ignore[attr-defined]
    torch.mps = types.SimpleNamespace(  # type: ignore[attr-defined]
        current_allocated_memory=lambda: 5 * MiB, driver_allocated_memory=lambda: 7 * MiB
    )
    return torch


# --- the real torch CPU build --------------------------------------------------------------


def test_real_cpu_torch_reports_nothing_and_leaves_cuda_alone() -> None:
    torch = pytest.importorskip("torch")
    assert not torch.cuda.is_available(), "this test is for the CPU build"
    assert TorchMemoryCollector.create() is None  # imported, CPU-only: nothing to read
    collector = TorchMemoryCollector()
    for _ in range(3):
        assert collector.sample() == {}
    assert torch.cuda.is_initialized() is False


def test_created_before_torch_is_imported_it_neither_imports_torch_nor_initialises_cuda() -> None:
    pytest.importorskip("torch")
    code = textwrap.dedent(
        """
        import sys
        from sysmetrics.collectors.torch_memory import TorchMemoryCollector
        c = TorchMemoryCollector.create()
        assert c is not None, "torch is installed: the collector waits for it"
        assert c.sample() == {}
        assert "torch" not in sys.modules, "the collector imported torch"
        import torch
        assert c.sample() == {} and c.sample() == {}
        assert torch.cuda.is_initialized() is False, "the collector initialised CUDA"
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_create_is_none_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert TorchMemoryCollector.create() is None


# --- a stand-in torch: CUDA ----------------------------------------------------------------


def test_reports_once_cuda_is_initialised_after_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = StandInCuda(2)
    monkeypatch.setitem(sys.modules, "torch", stand_in_torch(cuda))
    collector = TorchMemoryCollector()  # before CUDA is initialised
    assert collector.sample() == {} and collector.sample() == {}
    # Uninitialised: only the cheap check, never a call that could initialise CUDA.
    assert set(cuda.calls) == {"is_initialized"}

    cuda.init()
    assert collector.sample() == {
        "gpu.0.torch.allocatedBytes": 10 * MiB,
        "gpu.0.torch.reservedBytes": 20 * MiB,
        "gpu.1.torch.allocatedBytes": 30 * MiB,
        "gpu.1.torch.reservedBytes": 40 * MiB,
    }
    cuda.stats[1] = {
        "allocated_bytes.all.current": 35 * MiB,
        "reserved_bytes.all.current": 64 * MiB,
    }
    cuda.stats[0] = {
        "allocated_bytes.all.current": 0,
        "reserved_bytes.all.current": 0,
    }  # empty_cache
    sample = collector.sample()
    assert sample["gpu.1.torch.allocatedBytes"] == 35 * MiB
    assert sample["gpu.1.torch.reservedBytes"] == 64 * MiB
    assert sample["gpu.0.torch.reservedBytes"] == 0  # once reported, zeros are reported
    assert cuda.calls.count("device_count") == 1  # counted once
    for key in sample:
        assert collector.aggregation(key) == "peak"


def test_a_device_this_process_never_allocated_on_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another rank's GPU: this process's allocator there holds nothing, and says nothing."""
    cuda = StandInCuda(3)
    cuda.init()  # devices 0 and 1 used, device 2 never
    monkeypatch.setitem(sys.modules, "torch", stand_in_torch(cuda))
    collector = TorchMemoryCollector()
    assert not any(k.startswith("gpu.2.") for k in collector.sample())
    cuda.stats[2] = {"allocated_bytes.all.current": 1, "reserved_bytes.all.current": 2 * MiB}
    assert collector.sample()["gpu.2.torch.reservedBytes"] == 2 * MiB


def test_a_failing_device_is_skipped_and_the_other_still_reports(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cuda = StandInCuda(2)
    cuda.init()
    cuda.failing.add(0)
    monkeypatch.setitem(sys.modules, "torch", stand_in_torch(cuda))
    collector = TorchMemoryCollector()
    with caplog.at_level(logging.DEBUG, logger="sysmetrics"):
        sample = collector.sample()
    assert sample == {"gpu.1.torch.allocatedBytes": 30 * MiB, "gpu.1.torch.reservedBytes": 40 * MiB}
    failures = [r for r in caplog.records if "memory_stats(0)" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.DEBUG
    cuda.failing.clear()  # the next tick tries again
    assert collector.sample()["gpu.0.torch.allocatedBytes"] == 10 * MiB


def test_bad_values_and_a_broken_torch_never_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = StandInCuda(2)
    cuda.init()
    cuda.stats[0] = {"allocated_bytes.all.current": -1, "reserved_bytes.all.current": 20 * MiB}
    cuda.stats[1] = {"allocated_bytes.all.current": "x", "reserved_bytes.all.current": 2.0**70}
    monkeypatch.setitem(sys.modules, "torch", stand_in_torch(cuda))
    collector = TorchMemoryCollector()
    assert collector.sample() == {"gpu.0.torch.reservedBytes": 20 * MiB}  # the others dropped

    def broken() -> bool:
        raise RuntimeError("torch is being torn down")

    monkeypatch.setattr(cuda, "is_initialized", broken)
    assert collector.sample() == {}
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))  # a partial import
    assert collector.sample() == {}


def test_under_a_running_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = StandInCuda(2)
    monkeypatch.setitem(sys.modules, "torch", stand_in_torch(cuda))
    collector = TorchMemoryCollector()
    with SystemMonitor(interval=0.02, collectors=[collector]) as monitor:
        cuda.init()  # CUDA initialised while the monitor runs

        def both_devices() -> dict[str, float] | None:
            s = monitor.snapshot()
            return s if "gpu.1.torch.reservedBytes.max" in s else None

        snap = wait_for(both_devices)
        assert snap is not None
        assert monitor.collectors == [collector]  # never disabled
    assert snap["gpu.0.torch.allocatedBytes"] <= snap["gpu.0.torch.allocatedBytes.max"] == 10 * MiB
    assert snap["gpu.1.torch.reservedBytes.max"] == 40 * MiB


class NestedStandInCuda(StandInCuda):
    """A torch with ``torch.cuda.memory_stats_as_nested_dict`` too (torch's own nesting)."""

    def memory_stats_as_nested_dict(self, device: int) -> dict[str, Any]:
        self.calls.append(f"nested({device})")
        if device in self.failing:
            raise RuntimeError(f"CUDA error: device {device} is gone")
        if not self.initialised:
            return {}
        return {
            stat: {"all": {"current": self.stats[device][f"{stat}.all.current"], "peak": 0}}
            for stat in ("allocated_bytes", "reserved_bytes")
        } | {"num_ooms": 0}


def test_the_nested_statistics_are_read_where_torch_has_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same values, without torch's Python flattening of every statistic."""
    cuda = NestedStandInCuda(2)
    monkeypatch.setitem(sys.modules, "torch", stand_in_torch(cuda))
    collector = TorchMemoryCollector()
    assert collector.sample() == {}
    cuda.init()
    cuda.failing.add(1)
    assert collector.sample() == {
        "gpu.0.torch.allocatedBytes": 10 * MiB,
        "gpu.0.torch.reservedBytes": 20 * MiB,
    }
    assert not any(c.startswith("memory_stats") for c in cuda.calls)


# --- a stand-in torch: Apple MPS -----------------------------------------------------------


def test_mps_is_read_only_once_the_process_found_it_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = stand_in_torch(mps=True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    collector = TorchMemoryCollector()
    assert collector.sample() == {}  # nobody asked yet: the collector does not ask first
    assert torch.backends.mps.is_available.cache_info().currsize == 0
    assert torch.backends.mps.is_available()  # what the training code does
    assert collector.sample() == {
        "gpu.0.torch.allocatedBytes": 5 * MiB,
        "gpu.0.torch.reservedBytes": 7 * MiB,
    }


def test_mps_unavailable_or_without_the_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = stand_in_torch(mps=False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    torch.backends.mps.is_available()
    assert TorchMemoryCollector().sample() == {}
    torch = stand_in_torch(mps=True)
    del torch.mps.driver_allocated_memory
    monkeypatch.setitem(sys.modules, "torch", torch)
    torch.backends.mps.is_available()
    assert TorchMemoryCollector().sample() == {"gpu.0.torch.allocatedBytes": 5 * MiB}
