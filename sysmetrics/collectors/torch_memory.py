"""PyTorch's caching allocator, beside the driver's view: ``gpu.{i}.torch.*``.

torch is never imported here and CUDA never initialised: the collector reads the
``torch`` module the training code imported (``sys.modules``), and only once that code
has initialised CUDA (or used MPS) itself.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Mapping
from typing import Any

from sysmetrics.collectors._values import BYTES, checked, number
from sysmetrics.collectors.base import BaseCollector

log = logging.getLogger("sysmetrics")

_STATS = (("allocatedBytes", "allocated_bytes"), ("reservedBytes", "reserved_bytes"))
"""(key, torch's statistic) of each value read per CUDA device: its ``all.current``."""


def _read_cuda(cuda: Any, device: int) -> list[tuple[str, float | None]]:
    """(key, bytes) of ``device`` from torch's allocator statistics; raises what torch raises.

    ``torch.cuda.memory_stats_as_nested_dict`` (public: the statistics as torch's C++
    gives them) where torch has it, else ``torch.cuda.memory_stats``, which flattens and
    sorts the same ~140 statistics in Python first (about 165 µs a device with torch
    2.13's code, measured on a CPU host with the C++ call stood in).
    """
    nested = getattr(cuda, "memory_stats_as_nested_dict", None)
    if nested is not None:
        stats: Mapping[str, Any] = nested(device)
        return [
            (key, number(stats.get(name, {}).get("all", {}).get("current"))) for key, name in _STATS
        ]
    flat: Mapping[str, Any] = cuda.memory_stats(device)
    return [(key, number(flat.get(f"{name}.all.current"))) for key, name in _STATS]


def _torch_is_absent() -> bool:
    """Whether torch is neither imported nor installed (checked without importing it)."""
    if "torch" in sys.modules:
        return False
    try:
        return importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):
        return True


def _cpu_only(torch: Any) -> bool:
    """Whether an imported torch is a build without CUDA, ROCm or MPS (asks no device)."""
    try:
        version = torch.version
        mps = torch.backends.mps.is_built()
    except Exception:  # an unusual torch: keep the collector, it checks per tick
        return False
    return version.cuda is None and getattr(version, "hip", None) is None and not mps


def _mps_in_use(torch: Any) -> bool:
    """Whether this process has already found MPS available, asked without touching Metal.

    torch has no ``torch.mps.is_initialized()``. ``torch.backends.mps.is_available()`` is
    cached (``functools.lru_cache``): where its cache holds an answer, the process (the
    training code, which asks it before choosing the ``mps`` device, as Lightning,
    Transformers and Accelerate do) has already asked, and the cached answer is returned
    without calling into Metal. The collector never makes that first call.
    """
    is_available = torch.backends.mps.is_available
    return bool(is_available.cache_info().currsize) and bool(is_available())


class TorchMemoryCollector(BaseCollector):
    """What PyTorch's caching allocator holds on each GPU, read from this process's torch.

    Keys, per CUDA device ``i`` (CUDA's numbering in this process, as the NVML collector's
    ``gpu.{i}.*``): ``gpu.{i}.torch.allocatedBytes`` (bytes in tensors:
    ``torch.cuda.memory_stats(i)["allocated_bytes.all.current"]``, as
    ``torch.cuda.memory_allocated(i)``) and ``gpu.{i}.torch.reservedBytes`` (bytes the
    caching allocator holds from the driver, in tensors or cached:
    ``"reserved_bytes.all.current"``, as ``torch.cuda.memory_reserved(i)``), both with a
    ``.max`` window peak (of the samples, not the allocator's own peak between them).
    The driver's view of the same GPU is ``gpu.{i}.memoryAllocatedBytes``; the gap between
    it and ``reservedBytes`` is the CUDA context, other libraries (NCCL, cuBLAS
    workspaces) and other processes. On Apple MPS: ``gpu.0.torch.allocatedBytes``
    (``torch.mps.current_allocated_memory()``) and ``gpu.0.torch.reservedBytes``
    (``torch.mps.driver_allocated_memory()``: what Metal allocated for the process,
    torch's cached pools included). ROCm builds report through the ``torch.cuda`` API.

    Absent (no keys, no error): before this process imports torch and initialises CUDA
    (``torch.cuda.is_initialized()``), on a CPU-only build, in a DataLoader worker
    forked after CUDA was initialised (torch reports it uninitialised there), and on
    devices whose allocator has never reserved memory in this process (under DDP without
    per-rank ``CUDA_VISIBLE_DEVICES``, the other ranks' GPUs: their allocators are in
    their own processes, so zeros here would be misleading). A device is reported from
    its first reservation on, zeros included (after ``torch.cuda.empty_cache()``). On MPS,
    only once the process has itself found ``torch.backends.mps.is_available()`` true
    (see :func:`_mps_in_use`); the collector never asks Metal first.

    Cost per tick: one ``sys.modules`` lookup, ``torch.cuda.is_initialized()`` and the
    MPS cache check while CUDA is not initialised (about 2 µs with torch imported, 0.1 µs
    without); after that one read of the allocator's statistics per device (see
    :func:`_read_cuda`): host-side counters under the allocator's lock, no device
    synchronisation, no driver call.

    Never raises: an exception from torch skips that device (or MPS key) for that tick
    with one debug line, and the next tick tries again. Being disabled by the monitor
    would lose the keys for the rest of the run over one transient error (a device
    being torn down at exit, a torch version whose API moved), and what is read costs
    nothing when it fails.
    """

    name = "torch_memory"

    def __init__(self) -> None:
        self._devices: int | None = None  # torch.cuda.device_count(), once CUDA is initialised
        self._active: set[int] = set()  # devices whose allocator has reserved memory

    @classmethod
    def create(cls) -> TorchMemoryCollector | None:
        """The collector where torch is installed (imported or not), None where it is not.

        Also None where torch is already imported and is a CPU-only build. torch is
        looked up without being imported; where it is imported later, the collector
        starts reporting once CUDA is initialised.
        """
        if _torch_is_absent():
            return None
        torch = sys.modules.get("torch")
        if torch is not None and _cpu_only(torch):
            return None
        return cls()

    def sample(self) -> dict[str, float]:
        """The allocator's bytes of each device now; {} while torch has no GPU in use."""
        torch = sys.modules.get("torch")
        if torch is None:
            return {}
        try:
            cuda = torch.cuda
            initialised = bool(cuda.is_initialized())
        except Exception as exc:  # a partly imported or unusual torch
            log.debug("sysmetrics: torch.cuda.is_initialized() failed: %r", exc)
            initialised = False
        if initialised:
            return self._cuda(cuda)
        return self._mps(torch)

    def _cuda(self, cuda: Any) -> dict[str, float]:
        if self._devices is None:
            try:
                self._devices = int(cuda.device_count())
            except Exception as exc:  # any torch error: try at the next tick
                log.debug("sysmetrics: torch.cuda.device_count() failed: %r", exc)
                return {}
        out: dict[str, float] = {}
        for i in range(self._devices):
            try:
                raw = _read_cuda(cuda, i)
            except Exception as exc:  # skip this device for this tick
                log.debug("sysmetrics: torch.cuda.memory_stats(%d) failed: %r", i, exc)
                continue
            if i not in self._active:
                reserved = raw[1][1]
                if not reserved:  # never reserved here: not this process's GPU (yet)
                    continue
                self._active.add(i)
            for key, value in raw:
                name = f"gpu.{i}.torch.{key}"
                value = checked(name, value, BYTES)
                if value is not None:
                    out[name] = value
        return out

    def _mps(self, torch: Any) -> dict[str, float]:
        try:
            if not _mps_in_use(torch):
                return {}
            mps = torch.mps
        except Exception as exc:  # no MPS in this torch, or an unusual one
            log.debug("sysmetrics: torch MPS check failed: %r", exc)
            return {}
        out: dict[str, float] = {}
        for key, function in (
            ("allocatedBytes", "current_allocated_memory"),
            ("reservedBytes", "driver_allocated_memory"),
        ):
            read = getattr(mps, function, None)
            if read is None:
                continue
            try:
                value = number(read())
            except Exception as exc:  # skip this key for this tick
                log.debug("sysmetrics: torch.mps.%s() failed: %r", function, exc)
                continue
            value = checked(f"gpu.0.torch.{key}", value, BYTES)
            if value is not None:
                out[f"gpu.0.torch.{key}"] = value
        return out
