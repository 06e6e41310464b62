"""A stand-in for the ``pynvml`` module, for machines without an NVIDIA GPU (CI).

It is a test double at the hardware boundary: it keeps the real ``pynvml``'s constants
and error classes (``NVMLError(code)`` maps to ``NVMLError_NotSupported``,
``NVMLError_GpuIsLost``, ... exactly as in the real module) and answers the NVML calls
the collector makes from a list of described GPUs: several devices, fields a device does
not support, a GPU that gets lost, MIG mode with MIG device handles, running processes.
"""

from __future__ import annotations

import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pynvml as real


@dataclass
class GPU:
    uuid: str
    util: tuple[int, int] = (50, 20)  # gpu %, memory %
    used: int = 4 << 30
    total: int = 16 << 30
    temp: int = 60
    power_mw: int = 150_000
    limit_mw: int = 300_000
    clocks: dict[str, int] = field(
        default_factory=lambda: {"SM": 1400, "MEM": 5000, "GRAPHICS": 1300}
    )
    ecc: tuple[int, int] = (3, 0)  # corrected, uncorrected
    encoder: int = 5
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    unsupported: set[str] = field(default_factory=set)  # NVML function names
    lost: bool = False
    minor: int = 0
    mig: list[GPU] | None = None  # MIG instances when the GPU is in MIG mode
    is_mig: bool = False


def make_nvml(gpus: list[GPU], init_error: int | None = None) -> Any:
    """A module answering NVML calls about ``gpus``; ``calls`` counts each function's calls."""
    m = types.ModuleType("pynvml_standin")
    for name in dir(real):
        if name.startswith(("NVML_", "NVMLError", "nvmlMemory_v", "nvmlTemperature_v")):
            setattr(m, name, getattr(real, name))
    m.calls = Counter()

    def api(fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            m.calls[fn.__name__] += 1
            gpu = args[0] if args and isinstance(args[0], GPU) else None
            if gpu is not None and gpu.lost:
                raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
            if gpu is not None and fn.__name__ in gpu.unsupported:
                raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
            return fn(*args, **kwargs)

        setattr(m, fn.__name__, call)
        return call

    def everything() -> list[GPU]:
        return gpus + [i for g in gpus for i in (g.mig or [])]

    @api
    def nvmlInit() -> None:
        if init_error is not None:
            raise real.NVMLError(init_error)

    @api
    def nvmlShutdown() -> None:
        pass

    @api
    def nvmlDeviceGetCount() -> int:
        return len(gpus)

    @api
    def nvmlDeviceGetHandleByIndex(i: int) -> GPU:
        if not 0 <= i < len(gpus):
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpus[i]

    @api
    def nvmlDeviceGetHandleByUUID(uuid: str) -> GPU:
        for g in everything():
            if g.uuid == uuid:
                return g
        raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)

    @api
    def nvmlDeviceGetUUID(h: GPU) -> str:
        return h.uuid

    @api
    def nvmlDeviceGetMinorNumber(h: GPU) -> int:
        if h.is_mig:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return h.minor

    @api
    def nvmlDeviceIsMigDeviceHandle(h: GPU) -> bool:
        return h.is_mig

    @api
    def nvmlDeviceGetMigMode(h: GPU) -> list[int]:
        mode = int(h.mig is not None)
        return [mode, mode]

    @api
    def nvmlDeviceGetMaxMigDeviceCount(h: GPU) -> int:
        return 7 if h.mig is not None else 0

    @api
    def nvmlDeviceGetMigDeviceHandleByIndex(h: GPU, j: int) -> GPU:
        if h.mig is None or j >= len(h.mig):
            raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)
        return h.mig[j]

    @api
    def nvmlDeviceGetUtilizationRates(h: GPU) -> Any:
        if h.is_mig or h.mig is not None:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=h.util[0], memory=h.util[1])

    @api
    def nvmlDeviceGetMemoryInfo(h: GPU, version: int | None = None) -> Any:
        return types.SimpleNamespace(total=h.total, used=h.used, free=h.total - h.used)

    @api
    def nvmlDeviceGetTemperatureV(h: GPU, sensor: int) -> int:
        return h.temp

    @api
    def nvmlDeviceGetTemperature(h: GPU, sensor: int) -> int:
        return h.temp

    @api
    def nvmlDeviceGetPowerUsage(h: GPU) -> int:
        return h.power_mw

    @api
    def nvmlDeviceGetEnforcedPowerLimit(h: GPU) -> int:
        return h.limit_mw

    @api
    def nvmlDeviceGetClockInfo(h: GPU, kind: int) -> int:
        names = {real.NVML_CLOCK_SM: "SM", real.NVML_CLOCK_MEM: "MEM",
                 real.NVML_CLOCK_GRAPHICS: "GRAPHICS"}  # fmt: skip
        return h.clocks[names[kind]]

    @api
    def nvmlDeviceGetTotalEccErrors(h: GPU, error_type: int, counter: int) -> int:
        assert counter == real.NVML_VOLATILE_ECC
        return h.ecc[0 if error_type == real.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1]

    @api
    def nvmlDeviceGetEncoderUtilization(h: GPU) -> list[int]:
        return [h.encoder, 167_000]

    @api
    def nvmlDeviceGetComputeRunningProcesses(h: GPU) -> list[Any]:
        return [types.SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in h.processes]

    @api
    def nvmlDeviceGetGraphicsRunningProcesses(h: GPU) -> list[Any]:
        return []

    return m
