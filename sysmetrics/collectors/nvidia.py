"""NVIDIA GPUs through NVML (``nvidia-ml-py``): ``gpu.{i}.*`` and ``gpu.process.{i}.*``."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any, Union

from sysmetrics import _optional
from sysmetrics.collectors.base import BaseCollector, SystemMetricsWarning
from sysmetrics.collectors.process import process_tree
from sysmetrics.host import HostSource, Job

log = logging.getLogger("sysmetrics")

GpuId = Union[int, str]


def _errors(nvml: Any, *names: str) -> tuple[type[Exception], ...]:
    """The ``NVMLError_<name>`` classes this binding has (older ones lack some)."""
    return tuple(getattr(nvml, f"NVMLError_{n}") for n in names if hasattr(nvml, f"NVMLError_{n}"))


def _memory(nvml: Any, h: Any) -> Any:
    """Memory info: ``nvmlDeviceGetMemoryInfo_v2``, or v1 where the driver has no v2.

    v2's ``used`` is the memory allocated, without what the driver reserves (as nvidia-smi
    shows it); v1's ``used`` includes the reserved memory. v1 is read only where v2 cannot
    be (a driver before R510, a struct version it rejects, or a binding without v2): that
    does not change from one tick to the next, so a device's ``used`` keeps one meaning.
    """
    unavailable: tuple[type[Exception], ...] = (
        *_errors(nvml, "FunctionNotFound", "NotSupported", "ArgumentVersionMismatch"),
        TypeError,  # a binding without the version argument
        AttributeError,
    )
    try:
        return nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
    except unavailable:
        return nvml.nvmlDeviceGetMemoryInfo(h)


def _temperature(nvml: Any, h: Any) -> float:
    if hasattr(nvml, "nvmlDeviceGetTemperatureV"):
        try:
            return float(nvml.nvmlDeviceGetTemperatureV(h, nvml.NVML_TEMPERATURE_GPU))
        except nvml.NVMLError_FunctionNotFound:
            pass  # a driver older than the binding
    return float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))


def _ecc(kind: str) -> Callable[[Any, Any], float]:
    def read(nvml: Any, h: Any) -> float:
        error_type = getattr(nvml, f"NVML_MEMORY_ERROR_TYPE_{kind}")
        return float(nvml.nvmlDeviceGetTotalEccErrors(h, error_type, nvml.NVML_VOLATILE_ECC))

    return read


def _clock(kind: str) -> Callable[[Any, Any], float]:
    def read(nvml: Any, h: Any) -> float:
        return float(nvml.nvmlDeviceGetClockInfo(h, getattr(nvml, f"NVML_CLOCK_{kind}")))

    return read


def _clocks_event_reasons(nvml: Any, h: Any) -> int:
    """The bit mask of why the clocks are held down: R535's name, else the older one."""
    if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons"):
        try:
            return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        except nvml.NVMLError_FunctionNotFound:
            pass  # a driver before R535
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))


# nvmlClocksEventReason* (nvml.h; the same bits as nvmlClocksThrottleReason*)
_THERMAL = 0x20 | 0x40  # SwThermalSlowdown | HwThermalSlowdown
_POWER_CAP = 0x4  # SwPowerCap
_HW_SLOWDOWN = 0x8 | 0x80  # HwSlowdown | HwPowerBrakeSlowdown
_THROTTLE = {"thermal": _THERMAL, "powerCap": _POWER_CAP, "hwSlowdown": _HW_SLOWDOWN}

# Each field is read on its own, so one a device does not support is dropped alone.
# name -> reader(nvml, handle) returning one number or a dict of named numbers.
_FIELDS: dict[str, Callable[[Any, Any], Any]] = {
    "utilization": lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h),
    "memory": _memory,
    "temp": _temperature,
    "powerWatts": lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "enforcedPowerLimitWatts": lambda nvml, h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    "energy": lambda nvml, h: float(nvml.nvmlDeviceGetTotalEnergyConsumption(h)),  # mJ
    "fanSpeed": lambda nvml, h: float(nvml.nvmlDeviceGetFanSpeed(h)),
    "throttle": _clocks_event_reasons,
    "smClock": _clock("SM"),
    "memoryClock": _clock("MEM"),
    "graphicsClock": _clock("GRAPHICS"),
    "correctedMemoryErrors": _ecc("CORRECTED"),
    "uncorrectedMemoryErrors": _ecc("UNCORRECTED"),
    "encoderUtilization": lambda nvml, h: float(nvml.nvmlDeviceGetEncoderUtilization(h)[0]),
}
# What NVML supports on a MIG device, or on a GPU in MIG mode, without made-up utilization.
_MIG_FIELDS = ("memory",)
_MIG_PARENT_SKIPS = ("utilization", "encoderUtilization")


# Errors that mean "never on this device": the field is dropped. Any other error (TIMEOUT,
# UNKNOWN, ...) is taken as passing: the field is skipped for 1, 2, 4, ... ticks, at most
# _BACKOFF_TICKS, then tried again.
_PERMANENT = ("NotSupported", "FunctionNotFound", "NoPermission")
_BACKOFF_TICKS = 16
_PROCESS_LISTS = ("Compute", "Graphics", "MPSCompute")

# Seconds between two reads of what changes slowly (0: every tick); the latest reading is
# reported in between. "processes": the process lists and the attribution they drive.
PERIODS: dict[str, float] = {
    "processes": 5.0,
    "correctedMemoryErrors": 5.0,
    "uncorrectedMemoryErrors": 5.0,
    "enforcedPowerLimitWatts": 30.0,
}


# GPM (GPU Performance Monitoring, Hopper and newer): key -> (NVML_GPM_METRIC_* name, factor
# from NVML's unit to the key's). W&B's names (its DCGM keys); NVML gives % and MiB/s.
_MIB = float(1 << 20)
_GPM_METRICS: dict[str, tuple[str, float]] = {
    "smActive": ("NVML_GPM_METRIC_SM_UTIL", 1.0),  # % of SMs busy
    "smOccupancy": ("NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),  # % of warps active vs the max
    "pipeTensorActive": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),  # % of time, any tensor op
    "dramActive": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),  # % of the DRAM bandwidth
    "pcieTxBytes": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", _MIB),  # bytes/s from the GPU
    "pcieRxBytes": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", _MIB),  # bytes/s to the GPU
    "nvlinkTxBytes": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", _MIB),  # bytes/s, all links
    "nvlinkRxBytes": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", _MIB),
}
_GPM_DROPPED = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_PERMISSION")  # in a metric's nvmlReturn


class _Gpm:
    """The GPM metrics of one GPU: two sample buffers, allocated once, taken in turn.

    Each read takes a sample into the older buffer and computes the metrics between the
    previous sample and it (``nvmlGpmMetricsGet``): nothing at the first read. A metric
    whose ``nvmlReturn`` is NOT_SUPPORTED, FUNCTION_NOT_FOUND or NO_PERMISSION is not asked
    again; one with another error is absent from that read only.
    """

    def __init__(self, nvml: Any, samples: tuple[Any, Any]) -> None:
        self.samples = samples  # (previous, next to take)
        self.taken = False  # whether samples[0] holds a sample
        self.fields = _Fields(["gpm"])  # one field, under the collector's fault rules
        self.metrics = {
            key: (getattr(nvml, name), factor)
            for key, (name, factor) in _GPM_METRICS.items()
            if hasattr(nvml, name)
        }
        self.dropped = {getattr(nvml, f"NVML_ERROR_{e}") for e in _GPM_DROPPED}

    @classmethod
    def open(cls, nvml: Any, handle: Any) -> _Gpm | None:
        """GPM of a GPU that supports it (``nvmlGpmQueryDeviceSupport``); else None.

        None too where the driver or binding has no GPM, or the buffers cannot be had.
        """
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
        except (nvml.NVMLError, AttributeError) as exc:
            log.debug("sysmetrics: no GPM: %s", exc)
            return None
        samples: list[Any] = []
        try:
            for _ in range(2):
                samples.append(nvml.nvmlGpmSampleAlloc())
        except nvml.NVMLError as exc:
            log.debug("sysmetrics: no GPM, its samples cannot be allocated: %s", exc)
            cls.free(nvml, samples)
            return None
        return cls(nvml, (samples[0], samples[1]))

    def read(self, nvml: Any, handle: Any) -> dict[str, float]:
        """Key -> value, in the key's unit, over the interval since the previous read."""
        before, sample = self.samples
        nvml.nvmlGpmSampleGet(handle, sample)
        self.samples, self.taken, first = (sample, before), True, not self.taken
        if first or not self.metrics:
            return {}
        asked = list(self.metrics.items())
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version, get.numMetrics = nvml.NVML_GPM_METRICS_GET_VERSION, len(asked)
        get.sample1, get.sample2 = before, sample
        for m, (_, (metric_id, _)) in zip(get.metrics, asked):
            m.metricId = metric_id
        nvml.nvmlGpmMetricsGet(get)
        values: dict[str, float] = {}
        for m, (key, (_, factor)) in zip(get.metrics, asked):
            if m.nvmlReturn == nvml.NVML_SUCCESS:
                values[key] = float(m.value) * factor
            elif m.nvmlReturn in self.dropped:
                del self.metrics[key]
                log.debug("sysmetrics: GPM %s unavailable, not asked again", key)
        return values

    @staticmethod
    def free(nvml: Any, samples: Sequence[Any]) -> None:
        """``nvmlGpmSampleFree`` each of ``samples`` (a failure: one debug line)."""
        for sample in samples:
            try:
                nvml.nvmlGpmSampleFree(sample)
            except nvml.NVMLError as exc:
                log.debug("sysmetrics: a GPM sample cannot be freed: %s", exc)


@dataclass
class _Fields:
    """What one handle is asked: the fields still read, and the backoff of failing ones."""

    names: list[str]
    fails: dict[str, int] = field(default_factory=dict)  # failures in a row, per field
    skip: dict[str, int] = field(default_factory=dict)  # tries left out before the next
    held: dict[str, Any] = field(default_factory=dict)  # latest reading of a slow field
    due: dict[str, float] = field(default_factory=dict)  # when it is read again (s)


@dataclass
class _Mig:
    """One MIG device of a GPU in MIG mode: its handle, UUID, fields and process lists."""

    handle: Any
    uuid: str
    fields: _Fields = field(default_factory=lambda: _Fields(list(_MIG_FIELDS)))
    lists: _Fields = field(default_factory=lambda: _Fields(list(_PROCESS_LISTS)))


_MIG_REFETCH_S = 5.0  # at most one re-fetch of a GPU's MIG handles in this many seconds
_MIG_RESCAN_S = 60.0  # and one at least this often, to find instances created meanwhile


@dataclass
class _Device:
    index: int  # CUDA's number for it, the {i} in the keys
    handle: Any
    uuid: str
    minor: int | None = None  # N of /dev/nvidiaN
    fields: _Fields = field(default_factory=lambda: _Fields([]))
    mig_mode: bool = False
    mig: dict[int, _Mig] = field(default_factory=dict)  # j -> MIG device, in MIG mode
    mig_fetched: float = float("-inf")  # when the MIG handles were last fetched (s)
    lists: _Fields = field(default_factory=lambda: _Fields(list(_PROCESS_LISTS)))
    lists_due: float = float("-inf")  # when the process lists are read again (s)
    ours: dict[int, int | None] | None = None  # the tree's PIDs -> bytes; None: not ours
    lost: bool = False
    energy_base: float | None = None  # mJ: NVML's first energy reading
    energy: float = 0.0  # J since the monitor started, as last reported
    power_at: tuple[float, float] | None = None  # (time s, W) of the last power reading
    answered: int = 0  # this tick: calls answered, and calls failing for now
    failed: int = 0
    warned: bool = False  # that it stopped answering
    gpm: _Gpm | None = None  # GPM metrics, where the GPU has them


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


def _uuid(nvml: Any, handle: Any) -> str:
    u = nvml.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


_UUID_KINDS = ("GPU-", "MIG-")
_Visible = tuple[int, Any, str]  # (CUDA index, handle, UUID)


def _leading_int(entry: str) -> int | None:
    """The number ``strtoul`` reads at the start of ``entry`` (``"1gpu2"``: 1); None if none."""
    digits = entry[1:] if entry[:1] == "+" else entry
    n = len(digits) - len(digits.lstrip("0123456789"))
    return int(digits[:n]) if n else None


def _every_uuid(nvml: Any) -> dict[str, Any]:
    """UUID -> handle of every GPU and MIG device NVML lets this user open."""
    found: dict[str, Any] = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            found[_uuid(nvml, handle)] = handle
            if nvml.nvmlDeviceGetMigMode(handle)[0] != 1:
                continue
            for j in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
                except nvml.NVMLError:
                    continue
                found[_uuid(nvml, mig)] = mig
        except nvml.NVMLError:
            continue
    return found


def _by_uuid(nvml: Any, entry: str, known: dict[str, Any]) -> Any:
    """The handle a CUDA_VISIBLE_DEVICES UUID entry names (a unique prefix will do); or None."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    except (*_errors(nvml, "NotFound", "InvalidArgument"),):
        pass
    if not known:
        known.update(_every_uuid(nvml))
    match = [h for u, h in known.items() if u.startswith(entry)]
    return match[0] if len(match) == 1 else None


def _torch_order(nvml: Any) -> list[_Visible] | None:
    """CUDA's numbering as the imported ``torch`` has it, once it initialised CUDA; else None.

    torch is never imported here and CUDA never initialised: only a ``torch`` already in
    ``sys.modules`` whose ``torch.cuda.is_initialized()`` is consulted. Each CUDA device's
    ``get_device_properties(i).uuid`` (a UUID object printing without ``GPU-``, or a
    string) is looked up in NVML (a MIG device's as ``MIG-``); None where any is not found.
    """
    torch = sys.modules.get("torch")
    try:
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        uuids = [str(cuda.get_device_properties(i).uuid) for i in range(cuda.device_count())]
    except Exception as exc:
        log.debug("sysmetrics: torch's CUDA devices unreadable, numbering from the env: %s", exc)
        return None
    out: list[_Visible] = []
    for i, raw in enumerate(uuids):
        text = raw if raw.startswith(_UUID_KINDS) else f"GPU-{raw}"
        for candidate in (text, "MIG-" + text[4:]):
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(candidate)
            except nvml.NVMLError:
                continue
            out.append((i, handle, _uuid(nvml, handle)))
            break
        else:
            log.debug("sysmetrics: torch's CUDA %d (%s) unknown to NVML: numbering from "
                      "CUDA_VISIBLE_DEVICES", i, raw)  # fmt: skip
            return None
    return out


def visible_devices(nvml: Any, env: Mapping[str, str] | None = None) -> list[_Visible]:
    """(CUDA index, handle, UUID) of each GPU CUDA shows this process, in CUDA's order.

    Where ``torch`` is imported and has initialised CUDA, its devices' UUIDs give the
    numbering (:func:`_torch_order`). Otherwise ``CUDA_VISIBLE_DEVICES`` is parsed as CUDA
    does (CUDA C Programming Guide, "CUDA Environment Variables"; as
    ``torch.cuda._parse_visible_devices`` and nvitop's ``_parse_cuda_visible_devices``):

    * entries are NVML indices (read as ``strtoul`` does: ``"1gpu2"`` is 1) or UUIDs,
      ``GPU-...``/``MIG-...``, of which a unique prefix will do (``GPU-8932f937``); the
      first entry decides which, an entry of the other kind is invalid;
    * the list ends at the first invalid entry (out of range, negative, no unique match);
    * a device named twice makes the whole list empty: CUDA then sees no device (torch:
      "Repeated ordinal results in empty set"; nvitop: "duplicate identifiers found");
    * an empty string means no GPU; unset, every NVML index in NVML's order.

    NVML numbers GPUs in PCI bus order, as CUDA does under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    CUDA's default, ``FASTEST_FIRST``, is taken to be the same order: true on a node of one
    GPU model, not always on a mixed one (where only torch's mapping is exact).

    A GPU NVML will not open (NO_PERMISSION, or any other error for a valid index) is
    skipped but keeps its place: the GPUs after it keep their CUDA numbers.
    """
    torch_order = _torch_order(nvml)
    if torch_order is not None:
        return torch_order
    spec = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    count = nvml.nvmlDeviceGetCount()
    entries = [str(i) for i in range(count)] if spec is None else spec.split(",")
    out: list[_Visible] = []
    seen: set[object] = set()
    known: dict[str, Any] = {}  # every UUID, read once at the first prefix
    kind: bool | None = None  # True: UUIDs
    for position, raw in enumerate(entries):
        entry = raw.strip()
        is_uuid = entry.startswith(_UUID_KINDS)
        if kind is not None and is_uuid != kind:
            break
        kind = is_uuid
        handle: Any = None
        try:
            if is_uuid:
                handle = _by_uuid(nvml, entry, known)
                if handle is None:
                    break
                identity: object = _uuid(nvml, handle)
            else:
                index = _leading_int(entry)
                if index is None or index >= count:
                    break
                identity = index
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            log.debug("sysmetrics: CUDA device %d (%r) cannot be opened, skipped: %s",
                      position, entry, exc)  # fmt: skip
            handle = None
            identity = entry
        if identity in seen:
            log.debug("sysmetrics: CUDA_VISIBLE_DEVICES=%r repeats a device: CUDA sees none",
                      spec)  # fmt: skip
            return []
        seen.add(identity)
        if handle is not None:
            try:
                out.append((position, handle, _uuid(nvml, handle)))
            except nvml.NVMLError as exc:
                log.debug("sysmetrics: CUDA device %d has no UUID, skipped: %s", position, exc)
    return out


def select(visible: list[_Visible], gpu_ids: Sequence[GpuId] | None) -> list[_Visible]:
    """(CUDA index, handle, UUID) of the chosen GPUs; all when ``gpu_ids`` is None.

    Raises:
        ValueError: an id that names no visible GPU.

    """
    numbered = visible
    if gpu_ids is None:
        return numbered
    chosen = []
    for gid in gpu_ids:
        if isinstance(gid, int) and not isinstance(gid, bool):
            match = [d for d in numbered if d[0] == gid]
            if match:
                chosen.append(match[0])
                continue
        if isinstance(gid, str):
            match = [d for d in numbered if d[2] == gid or d[2].startswith(gid)]
            if len(match) == 1:
                chosen.append(match[0])
                continue
        spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" under CUDA_VISIBLE_DEVICES={spec!r}" if spec is not None else ""
        last = numbered[-1][0] if numbered else -1
        raise ValueError(
            f"gpu_ids contains {gid!r}, which names no GPU this process can see: use CUDA "
            f"indices 0..{last}{where} or UUIDs "
            f"({', '.join(u for _, _, u in numbered) or 'none'})"
        )
    return chosen


class NvidiaCollector(BaseCollector):
    """NVIDIA GPU metrics from NVML, per GPU and for the GPUs this process tree uses.

    Keys, per GPU ``i`` (CUDA's numbering: see :func:`visible_devices`):
    ``gpu.{i}.gpu`` (% of time a kernel ran), ``gpu.{i}.memory`` (% of time memory was read
    or written), ``gpu.{i}.memoryAllocated`` (% of memory in use),
    ``gpu.{i}.memoryAllocatedBytes`` (bytes in use, with ``.max``), ``gpu.{i}.temp`` (°C),
    ``gpu.{i}.powerWatts`` (W), ``gpu.{i}.enforcedPowerLimitWatts`` (W, the power limit the
    driver enforces), ``gpu.{i}.powerPercent`` (% of that limit), ``gpu.{i}.energyJoules``
    (J since the monitor started, a counter), ``gpu.{i}.fanSpeed`` (% of the fan's maximum
    speed), ``gpu.{i}.smClock``, ``gpu.{i}.memoryClock``, ``gpu.{i}.graphicsClock`` (MHz),
    ``gpu.{i}.correctedMemoryErrors``, ``gpu.{i}.uncorrectedMemoryErrors`` (volatile ECC
    counts, latest), ``gpu.{i}.encoderUtilization`` (%), and why the clocks are held down,
    1 or 0 each sample (so a snapshot's mean is the share of samples throttled):
    ``gpu.{i}.throttle.thermal`` (software or hardware thermal slowdown),
    ``gpu.{i}.throttle.powerCap`` (software power cap) and ``gpu.{i}.throttle.hwSlowdown``
    (hardware slowdown, power brake included), from
    ``nvmlDeviceGetCurrentClocksEventReasons`` (``...ThrottleReasons`` before R535). For
    a GPU the process tree uses, the same keys again as ``gpu.process.{i}.*``, plus
    ``gpu.process.{i}.processMemoryAllocatedBytes`` (bytes the tree's processes hold on
    it, with ``.max``; absent when NVML does not report it). A GPU in MIG mode reports no
    utilization, and each MIG device ``j`` reports ``gpu.{i}.mig.{j}.memoryAllocated`` and
    ``gpu.{i}.mig.{j}.memoryAllocatedBytes``; ``j`` is the MIG device's index in NVML's
    enumeration (``nvmlDeviceGetMigDeviceHandleByIndex``) when first seen, and it stays
    with that MIG device (by UUID) when the instances are reconfigured. A MIG device made
    visible by its UUID reports its memory as ``gpu.{i}.*``.

    GPM (GPU Performance Monitoring: Hopper and newer, where ``nvmlGpmQueryDeviceSupport``
    says so; never on MIG): over the interval since the previous tick (absent at the first),
    ``gpu.{i}.smActive`` (% of SMs busy), ``gpu.{i}.smOccupancy`` (% of warps active vs the
    maximum), ``gpu.{i}.pipeTensorActive`` (% of time any tensor op ran), ``gpu.{i}.dramActive``
    (% of the DRAM bandwidth used), ``gpu.{i}.pcieTxBytes``/``pcieRxBytes`` (PCIe bytes/s
    from/to the GPU), ``gpu.{i}.nvlinkTxBytes``/``nvlinkRxBytes`` (NVLink bytes/s, all links;
    NVML's MiB/s times 2**20). Two sample buffers a GPU, allocated once, freed by
    :meth:`close`. Without GPM (an older GPU or driver) the keys are absent; so is a metric
    whose own ``nvmlReturn`` is an error (NOT_SUPPORTED and the like: never asked again).

    ``energyJoules`` is ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver
    loaded, Volta and later) less its first reading; where NVML has no such counter, the
    integral of ``powerWatts`` over time (a trapezoid between consecutive samples), which
    misses what changes between samples.

    ``memoryAllocatedBytes`` is ``used`` of ``nvmlDeviceGetMemoryInfo_v2``: allocated
    memory, without what the driver reserves, as nvidia-smi shows it. Where the driver has
    no v2 (before R510) or rejects its struct version, it is v1's ``used``, which includes
    the reserved memory (one or the other for the whole run: it depends on the driver).

    Cadence (:data:`PERIODS`, per device, on a monotonic clock): what changes slowly is
    read less often than every tick, and its latest reading is reported at every tick in
    between, so these keys stay present in every sample: the process lists, and the
    attribution to the process tree they drive (``gpu.process.{i}.*`` present or not,
    ``processMemoryAllocatedBytes``), every 5 s, and at the first sample; the volatile ECC
    counts every 5 s; ``enforcedPowerLimitWatts`` every 30 s (``powerPercent`` is this
    tick's power over the latest limit). A repeated reading is not a new measurement: a
    change shows up to 5 s (30 s for the limit) late, and the ``gpu.process.{i}.*`` keys
    of a process that started or ended follow within 5 s. The values of the
    ``gpu.process.{i}.*`` keys are this tick's. What does not change while NVML runs is
    read once, when the GPU is first described: its UUID, minor number and MIG mode (and
    the MIG handles, fetched again as told below). ``periods`` (s, 0: every tick) changes
    the cadence of one collector. The other fields are read at every tick. A GPU that
    answers nothing in a tick reports none of its earlier readings.

    Faults: a field a device does not support, or may not be read (NOT_SUPPORTED,
    FUNCTION_NOT_FOUND, NO_PERMISSION), is dropped for that device (one debug line). Any
    other error (TIMEOUT, UNKNOWN, ...) skips the field for 1, 2, 4, ... ticks (at most
    16) before it is tried again, its key absent meanwhile (a slow field too: it is tried
    again at the ticks the backoff allows, not 5 or 30 s later; a process list's skips
    count its reads, 5 s apart, not ticks); a GPU that answers nothing at all gives one warning.
    UNINITIALIZED (another library shut NVML down under us) initialises NVML again and
    retries. A GPU that is lost is dropped with one warning.

    "Used by the process tree": NVML lists one of its PIDs among the GPU's compute,
    graphics or MPS client processes (a PID in several lists counts once); the process
    lists are read with the newest functions the driver exports (``_v3``, ``_v2`` or v1)
    in the layout they write. Inside a container, where NVML lists host PIDs that do not
    exist here, the ``/dev/nvidiaN`` files the tree holds open; a GPU with no process is
    never the tree's, although CUDA opens every visible GPU's device file. A GPU in MIG
    mode is never attributed by its device file (every instance's process opens it); its
    own lists need root (NO_PERMISSION otherwise), so without root its MIG devices' lists
    are read instead.

    Args:
        nvml: the initialised ``pynvml`` module.
        gpu_ids: CUDA indices or UUIDs to watch; all visible GPUs by default.
        pid: the root of the process tree, or the job (every local rank's tree).
        track_process_tree: attribute GPU use of descendants too.
        source: host readings, to find the process tree.
        proc_root: procfs, for the device files fallback.

    Raises:
        ValueError: a ``gpu_ids`` entry names no visible GPU.

    """

    name = "nvidia"

    def __init__(
        self,
        nvml: ModuleType | Any,
        source: HostSource,
        pid: int | Job,
        gpu_ids: Sequence[GpuId] | None = None,
        track_process_tree: bool = True,
        proc_root: str = "/proc",
    ) -> None:
        self.nvml = nvml
        self.source = source
        self.job = pid if isinstance(pid, Job) else Job(pid)  # the watched roots
        self.pid = self.job.pid
        self.track_process_tree = track_process_tree
        self.proc_root = proc_root
        self._minors: tuple[float, set[int]] | None = None
        self._layout: _Layout | None = None  # of the process lists, found at first use
        self._tick = 0
        # s: for energy, MIG re-fetch and the periods (a test may put its own clock here)
        self._clock: Callable[[], float] = time.monotonic
        self.periods = dict(PERIODS)  # s between reads of the slow fields; 0: every tick
        self._reinit_tick = -1
        self._permanent = _errors(nvml, *_PERMANENT)
        self.devices = [
            self._describe(i, h, u) for i, h, u in select(visible_devices(nvml), gpu_ids)
        ]

    @classmethod
    def create(
        cls,
        source: HostSource,
        pid: int | Job,
        gpu_ids: Sequence[GpuId] | None = None,
        track_process_tree: bool = True,
        nvml: ModuleType | Any | None = None,
    ) -> NvidiaCollector | None:
        """The collector, or None (one debug line) where there is no NVML, driver or GPU.

        Raises:
            TypeError: ``gpu_ids`` is not a list.
            ValueError: ``gpu_ids`` were given but NVML has no GPUs, or one is not visible.

        """
        if gpu_ids is not None and (
            isinstance(gpu_ids, (str, int)) or not isinstance(gpu_ids, Sequence)
        ):
            raise TypeError(f"gpu_ids={gpu_ids!r} is invalid: use a list of CUDA indices or UUIDs")
        nvml = nvml or _optional.pynvml()
        reason = "pynvml cannot be imported"
        if nvml is not None:
            try:
                nvml.nvmlInit()
                if nvml.nvmlDeviceGetCount() > 0:
                    try:
                        return cls(nvml, source, pid, gpu_ids, track_process_tree)
                    except ValueError:
                        nvml.nvmlShutdown()
                        raise
                reason = "NVML sees no GPU"
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                reason = f"NVML failed to start: {exc}"
        if gpu_ids:
            raise ValueError(f"gpu_ids={list(gpu_ids)!r} cannot be watched: {reason}")
        log.debug("sysmetrics: NVIDIA collector unavailable: %s", reason)
        return None

    def _describe(self, index: int, handle: Any, uuid: str) -> _Device:
        nvml = self.nvml
        dev = _Device(index, handle, uuid, fields=_Fields(list(_FIELDS)))
        minor = self._call(lambda: nvml.nvmlDeviceGetMinorNumber(handle))  # None on MIG
        dev.minor = None if minor is None else int(minor)
        if self._call(lambda: nvml.nvmlDeviceIsMigDeviceHandle(handle), False):
            dev.fields.names = list(_MIG_FIELDS)
        elif self._call(lambda: nvml.nvmlDeviceGetMigMode(handle)[0], 0) == 1:
            dev.mig_mode = True
            dev.fields.names = [f for f in dev.fields.names if f not in _MIG_PARENT_SKIPS]
            self._fetch_mig(dev)
        else:
            dev.gpm = _Gpm.open(nvml, handle)
        return dev

    def _fetch_mig(self, dev: _Device) -> None:
        """(Re)fetch the MIG handles of ``dev``; ``j`` is stable for a MIG device kept.

        ``j`` is the MIG device's index in NVML's enumeration (the index of
        ``nvmlDeviceGetMigDeviceHandleByIndex``) when first seen; a MIG device still there
        after a reconfiguration (the same UUID) keeps its ``j``, a new one takes its NVML
        index, or the lowest ``j`` free where a kept device holds that.
        """
        nvml, handle = self.nvml, dev.handle
        dev.mig_fetched = self._clock()
        found: list[tuple[int, Any, str]] = []
        for k in range(self._call(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle), 0)):
            mig = self._call(partial(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, k))
            if mig is not None:
                found.append((k, mig, self._call(partial(_uuid, nvml, mig), f"#{k}")))
        before = {m.uuid: (j, m) for j, m in dev.mig.items()}
        taken = {before[u][0] for _, _, u in found if u in before}
        mig_devices: dict[int, _Mig] = {}
        for k, mig, uuid in found:
            if uuid in before:
                j, old = before[uuid]
                mig_devices[j] = _Mig(mig, uuid, old.fields, old.lists)
                continue
            j = k
            while j in taken or j in mig_devices:
                j = min(n for n in range(len(found) + len(taken) + 1)
                        if n not in taken and n not in mig_devices)  # fmt: skip
            taken.add(j)
            mig_devices[j] = _Mig(mig, uuid)
        dev.mig = dict(sorted(mig_devices.items()))

    def _read_mig(self, dev: _Device, out: dict[str, float]) -> None:
        """The fields of each MIG device, ``gpu.{i}.mig.{j}.*``.

        NVML invalidates MIG handles when instances are destroyed or created: calls then
        answer INVALID_ARGUMENT or NOT_FOUND, and the GPU's MIG handles are fetched again
        (at most once in ``_MIG_REFETCH_S`` seconds) and read at once; they are also
        fetched again every ``_MIG_RESCAN_S`` seconds, to find instances created meanwhile.
        """
        stale = _errors(self.nvml, "InvalidArgument", "NotFound")
        if self._clock() - dev.mig_fetched >= _MIG_RESCAN_S:
            self._fetch_mig(dev)
        for _ in range(2):
            found: dict[str, float] = {}
            outdated = False
            for j, mig in dev.mig.items():
                try:
                    values = self._read(dev, mig.fields, mig.handle, stale)
                except stale:
                    outdated = True
                    continue
                for k, v in values.items():
                    found[f"gpu.{dev.index}.mig.{j}.{k}"] = v
            if not outdated or self._clock() - dev.mig_fetched < _MIG_REFETCH_S:
                break
            log.debug("sysmetrics: gpu.%s: MIG handles outdated, fetched again", dev.index)
            self._fetch_mig(dev)
        out.update(found)

    def _call(self, fn: Callable[[], Any], default: Any = None) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError:
            return default

    def _nvml(self, fn: Callable[[], Any]) -> Any:
        """``fn()``; where NVML was shut down under us, initialise it again and retry once.

        Another library in the process calling ``nvmlShutdown`` once too often leaves NVML
        uninitialised: every call answers UNINITIALIZED. One ``nvmlInit`` a tick at most.
        """
        try:
            return fn()
        except self.nvml.NVMLError_Uninitialized:
            if self._reinit_tick == self._tick:
                raise
            self._reinit_tick = self._tick
            log.debug("sysmetrics: NVML was shut down by someone else: initialising it again")
            self.nvml.nvmlInit()
            return fn()

    def _try(
        self,
        dev: _Device,
        fields: _Fields,
        name: str,
        fn: Callable[[], Any],
        stale: tuple[type[Exception], ...] = (),
    ) -> Any:
        """``fn()`` for field ``name``, or None: skipped for now, failed, or dropped.

        Raises:
            NVMLError_GpuIsLost: the GPU is lost.
            Exception: one of ``stale`` (an outdated MIG handle), which the caller handles.

        """
        nvml = self.nvml
        if fields.skip.get(name, 0) > 0:
            fields.skip[name] -= 1
            return None
        try:
            value = self._nvml(fn)
        except nvml.NVMLError_GpuIsLost:
            raise
        except stale:
            raise
        except self._permanent as exc:
            fields.names.remove(name)
            log.debug("sysmetrics: gpu.%s: %s unavailable, not read again: %s",
                      dev.index, name, exc)  # fmt: skip
            return None
        except nvml.NVMLError as exc:
            dev.failed += 1
            n = fields.fails[name] = fields.fails.get(name, 0) + 1
            fields.skip[name] = min(2 ** (n - 1), _BACKOFF_TICKS)
            log.debug("sysmetrics: gpu.%s: %s failed (%s), skipped for %d ticks",
                      dev.index, name, exc, fields.skip[name])  # fmt: skip
            return None
        dev.answered += 1
        fields.fails.pop(name, None)
        return value

    def _read(
        self,
        dev: _Device,
        fields: _Fields,
        handle: Any,
        stale: tuple[type[Exception], ...] = (),
    ) -> dict[str, float]:
        """Read ``fields`` of one device handle, under the fault rules of :meth:`_try`."""
        nvml = self.nvml
        now = self._clock()
        values: dict[str, float] = {}
        for name in list(fields.names):
            period = self.periods.get(name, 0.0)
            if period > 0.0 and name in fields.held and now < fields.due[name]:
                v = fields.held[name]  # read less often: the latest reading
            else:
                v = self._try(dev, fields, name, partial(_FIELDS[name], nvml, handle), stale)
                if v is None:
                    fields.held.pop(name, None)
                    continue
                if period > 0.0:
                    fields.held[name], fields.due[name] = v, now + period
            if name == "utilization":
                values["gpu"], values["memory"] = float(v.gpu), float(v.memory)
            elif name == "memory":
                values["memoryAllocatedBytes"] = float(v.used)
                values["memoryAllocated"] = v.used / v.total * 100.0 if v.total else 0.0
            elif name == "energy":
                if dev.energy_base is None or v < dev.energy_base:  # first, or driver reload
                    dev.energy_base = v - dev.energy * 1000.0
                dev.energy = values["energyJoules"] = (v - dev.energy_base) / 1000.0
            elif name == "throttle":
                for key, bits in _THROTTLE.items():
                    values[f"throttle.{key}"] = 1.0 if int(v) & bits else 0.0
            else:
                values[name] = float(v)
        limit = values.get("enforcedPowerLimitWatts")
        if limit and "powerWatts" in values:
            values["powerPercent"] = values["powerWatts"] / limit * 100.0
        if fields is dev.fields and "energy" not in fields.names and "powerWatts" in values:
            values["energyJoules"] = self._integrate(dev, values["powerWatts"])
        return values

    def _integrate(self, dev: _Device, watts: float) -> float:
        """J since the monitor started from power readings (trapezoids between samples)."""
        now = self._clock()
        if dev.power_at is not None:
            then, before = dev.power_at
            dev.energy += (before + watts) / 2.0 * max(now - then, 0.0)
        dev.power_at = (now, watts)
        return dev.energy

    def sample(self) -> dict[str, float]:
        """Every field of every watched GPU, and the same for the GPUs the tree uses."""
        nvml = self.nvml
        self._tick += 1
        now = self._clock()
        tree: set[int] | None = None  # the process tree, found where process lists are read
        out: dict[str, float] = {}
        read: list[tuple[_Device, dict[str, float]]] = []
        # Devices whose NVML PIDs are outside our PID namespace.
        foreign: list[_Device] = []
        for dev in self.devices:
            if dev.lost:
                continue
            dev.answered = dev.failed = 0
            lists_due = now >= dev.lists_due
            try:
                values = self._read(dev, dev.fields, dev.handle)
                gpm = dev.gpm
                if gpm is not None and gpm.fields.names:
                    read_gpm = partial(gpm.read, nvml, dev.handle)
                    values.update(self._try(dev, gpm.fields, "gpm", read_gpm) or {})
                self._read_mig(dev, out)
                procs = self._processes(dev) if lists_due else {}
            except nvml.NVMLError_GpuIsLost as exc:
                dev.lost = True
                warnings.warn(
                    f"sysmetrics: gpu.{dev.index} ({dev.uuid}) is lost and no longer "
                    f"sampled: {exc}",
                    SystemMetricsWarning,
                    stacklevel=2,
                )
                continue
            if self._check_answering(dev):  # nothing it read before is reported
                for name in dev.fields.held:
                    values.pop(name, None)
                dev.fields.held.clear()
                dev.ours, dev.lists_due, lists_due = None, float("-inf"), False
            prefix = f"gpu.{dev.index}."
            for k, v in values.items():
                out[prefix + k] = v
            read.append((dev, values))
            if not lists_due:
                continue  # dev.ours: as the last lists said
            dev.lists_due = now + self.periods.get("processes", 0.0)
            if tree is None:
                tree = {p for p, _ in process_tree(self.source, self.job.roots,
                                                   self.track_process_tree)}  # fmt: skip
            ours = {pid: held for pid, held in procs.items() if pid in tree}
            dev.ours = ours or None
            if not ours and not dev.mig_mode and any(not self._pid_exists(p) for p in procs):
                # NVML lists PIDs of another namespace (a container): whose, the files tell.
                # An empty list is an idle GPU, whatever device files the tree holds open.
                # Not in MIG mode: every instance's process opens the parent's device file.
                foreign.append(dev)
        if foreign and tree is not None:  # NVML reports host PIDs: the device files open
            minors = self._open_device_minors(tree)
            for dev in foreign:
                if dev.minor in minors:
                    dev.ours = {}
        for dev, values in read:
            if dev.ours is not None:
                self._process_keys(out, dev, values, dev.ours)
        return out

    def _check_answering(self, dev: _Device) -> bool:
        """Whether a GPU answered nothing this tick and some calls failed; warn once."""
        stalled = dev.answered == 0 and dev.failed > 0
        if stalled and not dev.warned:
            dev.warned = True
            warnings.warn(
                f"sysmetrics: gpu.{dev.index} ({dev.uuid}) stopped answering NVML; its "
                "fields are retried, less and less often",
                SystemMetricsWarning,
                stacklevel=3,
            )
        return stalled

    def _processes(self, dev: _Device) -> dict[int, int | None]:
        """PID -> bytes held (None: not reported) of the compute, graphics and MPS lists.

        A PID in several lists is counted once (each list reports its whole memory). A GPU
        in MIG mode whose own lists are refused (NO_PERMISSION without root, as NVML
        documents) is read through its MIG devices' lists, which NVML gives any user.
        """
        procs = self._lists(dev, dev.lists, dev.handle)
        if dev.mig_mode and not dev.lists.names:
            for mig in dev.mig.values():  # a process's memory on each instance adds up
                for pid, held in self._lists(dev, mig.lists, mig.handle).items():
                    before = procs.get(pid, 0)
                    procs[pid] = None if held is None or before is None else before + held
        return procs

    def _lists(self, dev: _Device, lists: _Fields, handle: Any) -> dict[int, int | None]:
        """PID -> bytes held (None: not reported) in the process lists of one handle."""
        procs: dict[int, int | None] = {}
        for kind in list(lists.names):
            listed = self._try(dev, lists, kind, partial(self._list, handle, kind))
            for pid, held in listed or []:
                before = procs.get(pid)
                procs[pid] = held if before is None else max(before, held or 0)
        return procs

    def _list(self, handle: Any, kind: str) -> list[tuple[int, int | None]]:
        """One process list, in the layout of the functions the driver exports."""
        if self._layout is None:
            self._layout = process_layout(self.nvml)
        listed = list_processes(self.nvml, handle, kind, self._layout)
        if self._layout[0] == "_v3" and any(pid == 0 for pid, _ in listed[1:]):
            # Entries after the first are garbage: _v3 writes a layout other than the one
            # read (early R535 and a binding reading 24 bytes an entry). _v2 has one layout.
            log.debug("sysmetrics: NVML _v3 process lists are garbled: using _v2 instead")
            self._layout = ("_v2", _ProcessInfoV2)
            listed = list_processes(self.nvml, handle, kind, self._layout)
        return listed

    @staticmethod
    def _process_keys(
        out: dict[str, float], dev: _Device, values: dict[str, float], ours: dict[int, Any]
    ) -> None:
        prefix = f"gpu.process.{dev.index}."
        for k, v in values.items():
            out[prefix + k] = v
        held = list(ours.values())
        if held and all(isinstance(m, int) for m in held):
            out[prefix + "processMemoryAllocatedBytes"] = float(sum(held))

    def _pid_exists(self, pid: int) -> bool:
        return os.path.exists(f"{self.proc_root}/{pid}")

    def _open_device_minors(self, tree: set[int]) -> set[int]:
        """N of the /dev/nvidiaN files the tree holds open (rescanned every 10 s at most)."""
        now = time.monotonic()
        if self._minors is not None and now - self._minors[0] < 10.0:
            return self._minors[1]
        minors = set()
        for pid in tree:
            fd_dir = f"{self.proc_root}/{pid}/fd"
            try:
                fds = os.listdir(fd_dir)
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"{fd_dir}/{fd}")
                except OSError:
                    continue
                if target.startswith("/dev/nvidia") and target[11:].isdigit():
                    minors.add(int(target[11:]))
        self._minors = (now, minors)
        return minors

    def close(self) -> None:
        """Free the GPM samples, and shut NVML down (it counts its initialisations)."""
        for dev in self.devices:
            if dev.gpm is not None:
                _Gpm.free(self.nvml, dev.gpm.samples)
                dev.gpm = None
        self._call(self.nvml.nvmlShutdown)
