"""NVML's process lists (``nvmlDeviceGet<kind>RunningProcesses``) read through ctypes.

In the entry layout the driver writes, which ``pynvml`` does not always read right.
"""

from __future__ import annotations

import ctypes
from typing import Any

# Process lists (nvmlDeviceGet<kind>RunningProcesses), read with the driver's own layout.
_NOT_AVAILABLE = (1 << 64) - 1  # usedGpuMemory NVML cannot tell (Windows WDDM)


class _ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t``, of the unversioned functions (drivers before R450)."""

    _fields_ = (("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong))


class _ProcessInfoV2(ctypes.Structure):
    """``nvmlProcessInfo_v2_t``: of ``_v2``, and of ``_v3`` on drivers other than R535."""

    _fields_ = (
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    )


class _ProcessInfoR535(ctypes.Structure):
    """What R535's ``_v3`` writes: 32-byte entries, where the binding reads 24."""

    _fields_ = (*_ProcessInfoV2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong))


_Layout = tuple[str, type[ctypes.Structure]]  # (function suffix, entry layout)


def _exports(nvml: Any, symbol: str) -> bool:
    """Whether the NVML library has the C function ``symbol``."""
    try:
        nvml._nvmlGetFunctionPointer(symbol)
    except nvml.NVMLError_FunctionNotFound:
        return False
    return True


def process_layout(nvml: Any) -> _Layout:
    """The newest process-list functions the driver exports, and the entries they write.

    ``pynvml`` calls ``_v3`` only, which drivers before R510 lack. R535's ``_v3`` writes
    32-byte entries (it exports ``nvmlDeviceGetConfComputeMemSizeInfo``, new in R535, but
    not ``nvmlDeviceGetRunningProcessDetailList``, new in R545): as nvitop tells them apart.
    """
    if _exports(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"):
        if _exports(nvml, "nvmlDeviceGetConfComputeMemSizeInfo") and not _exports(
            nvml, "nvmlDeviceGetRunningProcessDetailList"
        ):
            return "_v3", _ProcessInfoR535
        return "_v3", _ProcessInfoV2
    if _exports(nvml, "nvmlDeviceGetComputeRunningProcesses_v2"):
        return "_v2", _ProcessInfoV2
    return "", _ProcessInfoV1


def list_processes(nvml: Any, handle: Any, kind: str, layout: _Layout) -> list[tuple[int, Any]]:
    """(PID, bytes or None) of the device's ``kind`` processes, as NVML's C API gives them.

    Raises:
        NVMLError: as the C function answers.

    """
    suffix, entry = layout
    fn = nvml._nvmlGetFunctionPointer(f"nvmlDeviceGet{kind}RunningProcesses{suffix}")
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    if ret == nvml.NVML_SUCCESS:
        return []  # none
    if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
        raise nvml.NVMLError(ret)
    count.value = count.value * 2 + 5  # room for processes started in between
    entries = (entry * count.value)()
    nvml._nvmlCheckReturn(fn(handle, ctypes.byref(count), entries))
    return [
        (int(e.pid), None if e.usedGpuMemory == _NOT_AVAILABLE else int(e.usedGpuMemory))
        for e in entries[: count.value]
    ]
