"""A fake NVML *library* under the real ``pynvml`` binding, for machines without a GPU (CI).

The double sits below the binding: :class:`FakeNvmlLib` replaces ``pynvml.nvmlLib`` (the
``CDLL`` of ``libnvidia-ml.so.1``), and its attributes are NVML's C functions written in
Python as ``ctypes`` callbacks. The binding's own code (argument packing, struct layouts,
version fields, return-code to ``NVMLError_*`` mapping) runs in every test. Only the
functions the collector calls exist.

What it models, after the NVML API reference (https://docs.nvidia.com/deploy/nvml-api/):

* exported symbols per driver generation (:data:`DRIVERS`): a symbol a driver lacks is
  missing from the library, so ``getattr`` raises ``AttributeError``, which the binding
  turns into ``NVMLError_FunctionNotFound`` (and its unversioned process-list wrappers,
  decorated ``throwOnVersionMismatch``, into ``NVMLLibraryMismatchError``, not an
  ``NVMLError``);
* the process-list ABI: v1 entries ``{pid, usedGpuMemory}`` (16 bytes), ``_v2``/``_v3``
  entries with ``gpuInstanceId``/``computeInstanceId`` (24 bytes), and R535's ``_v3``,
  which writes 32-byte entries (an extra ``usedGpuCcProtectedMemory``); the
  two-call protocol (``INSUFFICIENT_SIZE`` with the count, then the array);
* ``nvmlDeviceGetMemoryInfo_v2`` checks the struct's ``version`` field
  (``ARGUMENT_VERSION_MISMATCH``) and reports ``used`` without the reserved memory, where
  v1's ``used`` includes it;
* ``nvmlInit``/``nvmlShutdown`` reference counting: once shut down as often as started,
  every call returns ``UNINITIALIZED``;
* return codes injected per GPU and C function (:attr:`FakeGpu.errors`, or
  :attr:`FakeGpu.failing` for every call): NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, UNKNOWN,
  ...; ``FakeGpu.lost`` answers GPU_IS_LOST; a handle it does not know, INVALID_ARGUMENT;
  ``FakeGpu.denied``: ``nvmlDeviceGetHandleByIndex`` answers NO_PERMISSION (the user may
  not open that GPU's device file) and ``nvmlDeviceGetHandleByUUID`` does not find it;
* MIG: ``nvmlDeviceGetMigDeviceHandleByIndex`` over up to 7 slots (an empty slot, None in
  :attr:`FakeGpu.mig`, answers NOT_FOUND); :meth:`FakeNvmlLib.reconfigure_mig` destroys
  and creates instances, after which the old MIG handles answer INVALID_ARGUMENT, as NVML
  documents for handles of destroyed instances;
* fan speed (%), total energy (``unsigned long long`` mJ since the driver loaded), current
  clocks event (throttle) reasons as an ``unsigned long long`` bit mask, under its R535
  name ``nvmlDeviceGetCurrentClocksEventReasons`` and the older
  ``nvmlDeviceGetCurrentClocksThrottleReasons``; None in a field answers NOT_SUPPORTED;
* GPM (GPU Performance Monitoring, Hopper and newer; symbols from R525):
  ``nvmlGpmQueryDeviceSupport`` fills ``nvmlGpmSupport_t`` (checks its ``version``) with
  ``isSupportedDevice`` (:attr:`FakeGpu.gpm` not None); ``nvmlGpmSampleAlloc`` hands out
  opaque sample handles (addresses of blocks the fake owns), ``nvmlGpmSampleFree`` takes
  them back (INVALID_ARGUMENT for one it does not know; :attr:`FakeNvmlLib.samples` holds
  those not freed), ``nvmlGpmSampleGet`` fills one for a GPU (NOT_SUPPORTED where the GPU
  has no GPM); ``nvmlGpmMetricsGet`` checks the struct's ``version`` and that ``sample1``
  and ``sample2`` are two samples of one GPU, the second taken later (INVALID_ARGUMENT
  otherwise), and fills each asked ``metrics[k]``'s ``value`` from :attr:`FakeGpu.gpm`
  (in NVML's units: %, MiB/s) and its ``nvmlReturn`` (:attr:`FakeGpu.gpm_errors`, and
  NOT_SUPPORTED for a metric the GPU does not have), the call itself answering SUCCESS.

Every C function call is counted, per function name, in :attr:`FakeNvmlLib.calls`
(failing calls included), so tests and ``benchmarks/nvidia_tick.py`` can tell how many
NVML calls a tick makes.

The binding under test is a private copy of ``pynvml`` (:func:`binding`), so no test
changes the imported module.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from ctypes import c_char_p, c_int, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pynvml import (
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN,
    NVML_SUCCESS,
)

# The library's side of the ABI, written from nvml.h: the binding's classes are not used,
# so a layout the binding gets wrong shows up as it would on a real driver.


class Memory(ctypes.Structure):
    """``nvmlMemory_t``: ``used`` includes the memory the driver reserves."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class MemoryV2(ctypes.Structure):
    """``nvmlMemory_v2_t``: ``used`` is allocated memory only."""

    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


MEMORY_V2 = ctypes.sizeof(MemoryV2) | 2 << 24  # NVML_STRUCT_VERSION(Memory, 2)


class Utilization(ctypes.Structure):
    """``nvmlUtilization_t``."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class TemperatureV1(ctypes.Structure):
    """``nvmlTemperature_v1_t``."""

    _fields_ = [("version", c_uint), ("sensorType", c_uint), ("temperature", c_int)]


TEMPERATURE_V1 = ctypes.sizeof(TemperatureV1) | 1 << 24


class ProcessInfoV1(ctypes.Structure):
    """``nvmlProcessInfo_v1_t``: what the unversioned process-list functions write."""

    _fields_ = [("pid", c_uint), ("usedGpuMemory", c_ulonglong)]


class ProcessInfoV2(ctypes.Structure):
    """``nvmlProcessInfo_v2_t``, also what ``_v3`` writes from R545 on (24 bytes)."""

    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


class ProcessInfoR535(ctypes.Structure):
    """What R535's ``_v3`` process-list functions write (32 bytes an entry)."""

    _fields_ = [*ProcessInfoV2._fields_, ("usedGpuCcProtectedMemory", c_ulonglong)]


class GpmSupport(ctypes.Structure):
    """``nvmlGpmSupport_t``."""

    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


GPM_SUPPORT_VERSION = 1  # NVML_GPM_SUPPORT_VERSION
GPM_METRICS_GET_VERSION = 1  # NVML_GPM_METRICS_GET_VERSION


class GpmMetricInfo(ctypes.Structure):
    """The ``metricInfo`` of ``nvmlGpmMetric_t``."""

    _fields_ = [("shortName", c_char_p), ("longName", c_char_p), ("unit", c_char_p)]


class GpmMetric(ctypes.Structure):
    """``nvmlGpmMetric_t``: the caller sets ``metricId``, NVML the rest."""

    _fields_ = [
        ("metricId", c_uint),
        ("nvmlReturn", c_uint),  # nvmlReturn_t
        ("value", ctypes.c_double),
        ("metricInfo", GpmMetricInfo),
    ]


class GpmMetricsGet(ctypes.Structure):
    """``nvmlGpmMetricsGet_t`` up to its first metric (``metrics[NVML_GPM_METRIC_MAX]``)."""

    _fields_ = [
        ("version", c_uint),
        ("numMetrics", c_uint),
        ("sample1", c_void_p),
        ("sample2", c_void_p),
        ("metrics", GpmMetric * 1),
    ]


_PROCESS_LISTS = ("Compute", "Graphics", "MPSCompute")
_V3 = {f"nvmlDeviceGet{k}RunningProcesses_v3" for k in _PROCESS_LISTS}
_V2 = {f"nvmlDeviceGet{k}RunningProcesses_v2" for k in _PROCESS_LISTS}
_LATER = {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTemperatureV"}
_CC = {"nvmlDeviceGetConfComputeMemSizeInfo", "nvmlDeviceGetRunningProcessDetailList"}
_EVENTS = {"nvmlDeviceGetCurrentClocksEventReasons"}  # the R535 name of the throttle reasons
_GPM = {"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
        "nvmlGpmSampleGet", "nvmlGpmMetricsGet"}  # fmt: skip

# Driver generation -> symbols it does NOT export (of those the fake implements). The
# releases are approximate (_v3 and nvmlMemory_v2 from R510, ConfCompute from R535,
# RunningProcessDetailList from R545); what the tests rely on is which symbols go together.
DRIVERS: dict[str, set[str]] = {
    "r440": _V3 | _V2 | _LATER | _CC | _EVENTS | _GPM,  # v1 process lists only
    "r470": _V3 | _LATER | _CC | _EVENTS | _GPM,  # before R510: no _v3, no v2 memory struct
    "r535": {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetRunningProcessDetailList"},
    "r550": {"nvmlDeviceGetTemperatureV"},
    "latest": set(),
}


@dataclass
class FakeGpu:
    """One GPU (or MIG device) as NVML reports it."""

    uuid: str
    minor: int = 0
    util: tuple[int, int] = (50, 20)  # gpu %, memory %
    used: int = 4 << 30  # allocated, without the reserved memory
    reserved: int = 300 << 20
    total: int = 16 << 30
    temp: int = 60
    power_mw: int = 150_000
    limit_mw: int = 300_000
    clocks: tuple[int, int, int] = (1300, 1400, 5000)  # NVML_CLOCK_GRAPHICS, _SM, _MEM
    ecc: tuple[int, int] = (3, 0)  # corrected, uncorrected
    encoder: int = 5
    fan: int | None = 30  # %; None: NOT_SUPPORTED (a passively cooled board)
    energy_mj: int | None = 5_000_000  # since the driver loaded; None: NOT_SUPPORTED
    clocks_event_reasons: int | None = 0  # bit mask, nvmlClocksEventReason*
    # (pid, bytes or None for "not available") per list
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    mps: list[tuple[int, int | None]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # C function name -> return code
    failing: int = NVML_SUCCESS  # a return code every call about this GPU answers
    lost: bool = False
    denied: bool = False  # NO_PERMISSION for its handle
    mig: Sequence[FakeGpu | None] | None = None  # MIG slots when in MIG mode (None: empty)
    is_mig: bool = False
    # GPM metric id -> value in NVML's unit (%, MiB/s); None: no GPM (before Hopper)
    gpm: dict[int, float] | None = None
    gpm_errors: dict[int, int] = field(default_factory=dict)  # metric id -> its nvmlReturn


_P = c_void_p  # every pointer argument: the fake reads and writes memory, as C does
# C functions whose first argument is not a device handle
_NO_HANDLE = {"nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetCount_v2",
              "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByUUID",
              "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmMetricsGet"}  # fmt: skip


def _at(address: int, ctype: Any) -> Any:
    """The ``ctype`` value at ``address``."""
    return ctype.from_address(address)


class FakeNvmlLib:
    """Stands for ``CDLL("libnvidia-ml.so.1")``; ``calls`` counts each C function's calls.

    Args:
        gpus: the GPUs, in NVML's index order.
        driver: a :data:`DRIVERS` generation, which decides the exported symbols.
        init_error: what ``nvmlInitWithFlags`` returns (e.g. DRIVER_NOT_LOADED).
        memory_v2_version: the struct version ``nvmlDeviceGetMemoryInfo_v2`` accepts.

    """

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver: str = "latest",
        init_error: int = NVML_SUCCESS,
        memory_v2_version: int = MEMORY_V2,
    ) -> None:
        self.gpus = gpus
        self.missing = DRIVERS[driver]
        self.driver = driver
        self.init_error = init_error
        self.memory_v2_version = memory_v2_version
        self.refcount = 0
        self.calls: Counter[str] = Counter()
        self.failures: list[BaseException] = []  # exceptions inside the fake: test bugs
        self._structs: dict[int, FakeGpu] = {}  # handle address -> GPU
        # GPM sample handle -> (GPU, when taken) or None (not filled yet); freed ones go
        self.samples: dict[int, tuple[FakeGpu, int] | None] = {}
        self._taken = 0  # samples taken so far: their order
        self._keep: list[Any] = []  # objects C pointers point into
        for gpu in self.everything():
            self._new_handle(gpu)
        self._fns: dict[str, Any] = {}

    def everything(self) -> list[FakeGpu]:
        """The GPUs and their MIG devices."""
        return self.gpus + [m for g in self.gpus for m in (g.mig or []) if m is not None]

    def reconfigure_mig(self, gpu: FakeGpu, instances: Sequence[FakeGpu | None]) -> None:
        """Destroy ``gpu``'s MIG instances and create ``instances``: old handles go stale.

        An instance of ``instances`` that was there before keeps its handle.
        """
        kept = {id(m) for m in instances if m is not None}
        for address in [a for a, g in self._structs.items() if g.is_mig and id(g) not in kept]:
            if any(g is self._structs[address] for g in gpu.mig or []):
                del self._structs[address]
        known = {id(g) for g in self._structs.values()}
        gpu.mig = instances
        for new in [m for m in instances if m is not None and id(m) not in known]:
            self._new_handle(new)

    def _new_handle(self, gpu: FakeGpu) -> None:
        block = ctypes.create_string_buffer(8)  # what an nvmlDevice_t points to
        self._keep.append(block)
        self._structs[ctypes.addressof(block)] = gpu

    def _give_handle(self, gpu: FakeGpu, out: int) -> int:
        _at(out, c_void_p).value = next(a for a, g in self._structs.items() if g is gpu)
        return NVML_ERROR_GPU_IS_LOST if gpu.lost else NVML_SUCCESS

    def __getattr__(self, name: str) -> Any:
        """The C function ``name``, as ``dlsym`` finds it; AttributeError where absent."""
        if name.startswith("_") or name in self.missing or not hasattr(self, f"_c_{name}"):
            raise AttributeError(name)
        if name not in self._fns:
            impl, *argtypes = getattr(self, f"_c_{name}")()
            restype = c_void_p if name == "nvmlErrorString" else c_int
            self._fns[name] = ctypes.CFUNCTYPE(restype, *argtypes)(self._wrap(name, impl))
        return self._fns[name]

    def _wrap(self, name: str, impl: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            self.calls[name] += 1
            try:
                if name not in ("nvmlInitWithFlags", "nvmlErrorString") and self.refcount <= 0:
                    return NVML_ERROR_UNINITIALIZED
                if name not in _NO_HANDLE:
                    gpu = self._structs.get(args[0] or 0)
                    if gpu is None:
                        return NVML_ERROR_INVALID_ARGUMENT
                    if gpu.lost:
                        return NVML_ERROR_GPU_IS_LOST
                    if gpu.failing != NVML_SUCCESS:
                        return gpu.failing
                    if name in gpu.errors:
                        return gpu.errors[name]
                    args = (gpu, *args[1:])
                return impl(*args)
            except BaseException as exc:  # a callback cannot raise: record, answer UNKNOWN
                self.failures.append(exc)
                return NVML_ERROR_UNKNOWN

        return call

    # Each _c_<name>() returns (implementation, C argument types...).

    def _c_nvmlInitWithFlags(self) -> tuple[Any, ...]:
        def f(flags: int) -> int:
            if self.init_error != NVML_SUCCESS:
                return self.init_error
            self.refcount += 1
            return NVML_SUCCESS

        return f, c_uint

    def _c_nvmlShutdown(self) -> tuple[Any, ...]:
        def f() -> int:
            if self.refcount <= 0:
                return NVML_ERROR_UNINITIALIZED
            self.refcount -= 1
            return NVML_SUCCESS

        return (f,)

    def _c_nvmlErrorString(self) -> tuple[Any, ...]:
        def f(code: int) -> int:  # the binding reads the answer as a char *
            buf = ctypes.create_string_buffer(f"fake NVML error {code}".encode())
            self._keep.append(buf)
            return ctypes.addressof(buf)

        return f, c_int

    def _c_nvmlDeviceGetCount_v2(self) -> tuple[Any, ...]:
        def f(count: int) -> int:
            _at(count, c_uint).value = len(self.gpus)
            return NVML_SUCCESS

        return f, _P

    def _c_nvmlDeviceGetHandleByIndex_v2(self) -> tuple[Any, ...]:
        def f(index: int, out: int) -> int:
            if not 0 <= index < len(self.gpus):
                return NVML_ERROR_INVALID_ARGUMENT
            if self.gpus[index].denied:
                return NVML_ERROR_NO_PERMISSION
            return self._give_handle(self.gpus[index], out)

        return f, c_uint, _P

    def _c_nvmlDeviceGetHandleByUUID(self) -> tuple[Any, ...]:
        def f(uuid: bytes, out: int) -> int:
            for gpu in self.everything():
                if gpu.uuid.encode() == uuid and not gpu.denied:
                    return self._give_handle(gpu, out)
            return NVML_ERROR_NOT_FOUND

        return f, c_char_p, _P

    def _c_nvmlDeviceGetUUID(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, buf: int, size: int) -> int:
            data = gpu.uuid.encode() + b"\0"
            if len(data) > size:
                return NVML_ERROR_INSUFFICIENT_SIZE
            ctypes.memmove(buf, data, len(data))
            return NVML_SUCCESS

        return f, _P, _P, c_uint

    @staticmethod
    def _uints(read: Callable[[FakeGpu], tuple[int, ...] | None], n: int = 1) -> tuple[Any, ...]:
        """A function writing the ``n`` numbers ``read(gpu)`` to its unsigned int pointers."""

        def f(gpu: FakeGpu, *outs: int) -> int:
            values = read(gpu)
            if values is None:
                return NVML_ERROR_NOT_SUPPORTED
            for out, value in zip(outs, values):
                _at(out, c_uint).value = value
            return NVML_SUCCESS

        return (f, _P, *[_P] * n)

    def _c_nvmlDeviceGetMinorNumber(self) -> tuple[Any, ...]:
        return self._uints(lambda g: None if g.is_mig else (g.minor,))

    def _c_nvmlDeviceIsMigDeviceHandle(self) -> tuple[Any, ...]:
        return self._uints(lambda g: (int(g.is_mig),))

    def _c_nvmlDeviceGetMigMode(self) -> tuple[Any, ...]:
        return self._uints(lambda g: (int(g.mig is not None),) * 2, 2)  # current, pending

    def _c_nvmlDeviceGetMaxMigDeviceCount(self) -> tuple[Any, ...]:
        return self._uints(lambda g: (7 if g.mig is not None else 0,))

    def _c_nvmlDeviceGetPowerUsage(self) -> tuple[Any, ...]:
        return self._uints(lambda g: (g.power_mw,))

    def _c_nvmlDeviceGetEnforcedPowerLimit(self) -> tuple[Any, ...]:
        return self._uints(lambda g: (g.limit_mw,))

    def _c_nvmlDeviceGetEncoderUtilization(self) -> tuple[Any, ...]:
        return self._uints(lambda g: (g.encoder, 167_000), 2)  # %, sampling period (us)

    def _c_nvmlDeviceGetFanSpeed(self) -> tuple[Any, ...]:
        return self._uints(lambda g: None if g.fan is None else (g.fan,))

    @staticmethod
    def _ulonglong(read: Callable[[FakeGpu], int | None]) -> tuple[Any, ...]:
        """A function writing ``read(gpu)`` to its ``unsigned long long`` pointer."""

        def f(gpu: FakeGpu, out: int) -> int:
            value = read(gpu)
            if value is None:
                return NVML_ERROR_NOT_SUPPORTED
            _at(out, c_ulonglong).value = value
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlDeviceGetTotalEnergyConsumption(self) -> tuple[Any, ...]:
        return self._ulonglong(lambda g: g.energy_mj)

    def _c_nvmlDeviceGetCurrentClocksEventReasons(self) -> tuple[Any, ...]:
        return self._ulonglong(lambda g: g.clocks_event_reasons)

    def _c_nvmlDeviceGetCurrentClocksThrottleReasons(self) -> tuple[Any, ...]:
        return self._ulonglong(lambda g: g.clocks_event_reasons)

    def _c_nvmlDeviceGetMigDeviceHandleByIndex(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, j: int, out: int) -> int:
            if gpu.mig is None or j >= len(gpu.mig):
                return NVML_ERROR_NOT_FOUND
            mig = gpu.mig[j]
            return NVML_ERROR_NOT_FOUND if mig is None else self._give_handle(mig, out)

        return f, _P, c_uint, _P

    def _c_nvmlDeviceGetUtilizationRates(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, out: int) -> int:
            if gpu.is_mig or gpu.mig is not None:  # not per MIG device, nor in MIG mode
                return NVML_ERROR_NOT_SUPPORTED
            u = _at(out, Utilization)
            u.gpu, u.memory = gpu.util
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlDeviceGetMemoryInfo(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, out: int) -> int:
            m = _at(out, Memory)
            m.total, m.used = gpu.total, gpu.used + gpu.reserved
            m.free = m.total - m.used
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlDeviceGetMemoryInfo_v2(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, out: int) -> int:
            m = _at(out, MemoryV2)
            if m.version != self.memory_v2_version:
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            m.total, m.reserved, m.used = gpu.total, gpu.reserved, gpu.used
            m.free = gpu.total - gpu.reserved - gpu.used
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlDeviceGetTemperatureV(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, out: int) -> int:
            t = _at(out, TemperatureV1)
            if t.version != TEMPERATURE_V1:
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            t.temperature = gpu.temp
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlDeviceGetTemperature(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, sensor: int, out: int) -> int:
            _at(out, c_uint).value = gpu.temp
            return NVML_SUCCESS

        return f, _P, c_uint, _P

    def _c_nvmlDeviceGetClockInfo(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, kind: int, out: int) -> int:
            if kind >= len(gpu.clocks):
                return NVML_ERROR_INVALID_ARGUMENT
            _at(out, c_uint).value = gpu.clocks[kind]
            return NVML_SUCCESS

        return f, _P, c_uint, _P

    def _c_nvmlDeviceGetTotalEccErrors(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, error_type: int, counter: int, out: int) -> int:
            _at(out, c_ulonglong).value = gpu.ecc[error_type]
            return NVML_SUCCESS

        return f, _P, c_uint, c_uint, _P

    def _c_nvmlDeviceGetConfComputeMemSizeInfo(self) -> tuple[Any, ...]:
        return (lambda gpu, out: NVML_ERROR_NOT_SUPPORTED), _P, _P  # exported: a marker

    def _c_nvmlDeviceGetRunningProcessDetailList(self) -> tuple[Any, ...]:
        return self._c_nvmlDeviceGetConfComputeMemSizeInfo()

    def _processes(self, which: str, entry: type[ctypes.Structure]) -> tuple[Any, ...]:
        """A process-list function: the count first, then the entries in ``entry``'s layout."""

        def f(gpu: FakeGpu, count_at: int, infos: int | None) -> int:
            procs = getattr(gpu, which)
            count = _at(count_at, c_uint)
            if infos is None or count.value < len(procs):
                count.value = len(procs)
                return NVML_SUCCESS if not procs else NVML_ERROR_INSUFFICIENT_SIZE
            for e, (pid, used) in zip((entry * len(procs)).from_address(infos), procs):
                e.pid = pid
                e.usedGpuMemory = (1 << 64) - 1 if used is None else used  # "not available"
            count.value = len(procs)
            return NVML_SUCCESS

        return f, _P, _P, _P

    def _c_nvmlDeviceGetComputeRunningProcesses(self) -> tuple[Any, ...]:
        return self._processes("compute", ProcessInfoV1)

    def _c_nvmlDeviceGetComputeRunningProcesses_v2(self) -> tuple[Any, ...]:
        return self._processes("compute", ProcessInfoV2)

    def _c_nvmlDeviceGetComputeRunningProcesses_v3(self) -> tuple[Any, ...]:
        return self._processes("compute", self._v3_entry())

    def _c_nvmlDeviceGetGraphicsRunningProcesses(self) -> tuple[Any, ...]:
        return self._processes("graphics", ProcessInfoV1)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v2(self) -> tuple[Any, ...]:
        return self._processes("graphics", ProcessInfoV2)

    def _c_nvmlDeviceGetGraphicsRunningProcesses_v3(self) -> tuple[Any, ...]:
        return self._processes("graphics", self._v3_entry())

    def _c_nvmlDeviceGetMPSComputeRunningProcesses(self) -> tuple[Any, ...]:
        return self._processes("mps", ProcessInfoV1)

    def _c_nvmlDeviceGetMPSComputeRunningProcesses_v2(self) -> tuple[Any, ...]:
        return self._processes("mps", ProcessInfoV2)

    def _c_nvmlDeviceGetMPSComputeRunningProcesses_v3(self) -> tuple[Any, ...]:
        return self._processes("mps", self._v3_entry())

    def _v3_entry(self) -> type[ctypes.Structure]:
        return ProcessInfoR535 if self.driver == "r535" else ProcessInfoV2

    def _c_nvmlGpmQueryDeviceSupport(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, out: int) -> int:
            support = _at(out, GpmSupport)
            if support.version != GPM_SUPPORT_VERSION:
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            support.isSupportedDevice = int(gpu.gpm is not None)
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlGpmSampleAlloc(self) -> tuple[Any, ...]:
        def f(out: int) -> int:
            block = ctypes.create_string_buffer(8)  # what an nvmlGpmSample_t points to
            self._keep.append(block)
            self.samples[ctypes.addressof(block)] = None
            _at(out, c_void_p).value = ctypes.addressof(block)
            return NVML_SUCCESS

        return f, _P

    def _c_nvmlGpmSampleFree(self) -> tuple[Any, ...]:
        def f(sample: int | None) -> int:
            if sample not in self.samples:
                return NVML_ERROR_INVALID_ARGUMENT
            del self.samples[sample]
            return NVML_SUCCESS

        return f, _P

    def _c_nvmlGpmSampleGet(self) -> tuple[Any, ...]:
        def f(gpu: FakeGpu, sample: int | None) -> int:
            if sample not in self.samples:
                return NVML_ERROR_INVALID_ARGUMENT
            if gpu.gpm is None or gpu.is_mig:
                return NVML_ERROR_NOT_SUPPORTED
            self._taken += 1
            self.samples[sample] = (gpu, self._taken)
            return NVML_SUCCESS

        return f, _P, _P

    def _c_nvmlGpmMetricsGet(self) -> tuple[Any, ...]:
        def f(out: int) -> int:
            head = _at(out, GpmMetricsGet)
            if head.version != GPM_METRICS_GET_VERSION:
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            first, second = self.samples.get(head.sample1), self.samples.get(head.sample2)
            if first is None or second is None or first[0] is not second[0]:
                return NVML_ERROR_INVALID_ARGUMENT
            gpu = second[0]
            if gpu.gpm is None or first[1] >= second[1]:
                return NVML_ERROR_INVALID_ARGUMENT
            if "nvmlGpmMetricsGet" in gpu.errors:
                return gpu.errors["nvmlGpmMetricsGet"]
            at = out + GpmMetricsGet.metrics.offset
            for m in (GpmMetric * head.numMetrics).from_address(at):
                m.nvmlReturn = gpu.gpm_errors.get(m.metricId, NVML_SUCCESS)
                if m.nvmlReturn == NVML_SUCCESS and m.metricId not in gpu.gpm:
                    m.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
                m.value = gpu.gpm.get(m.metricId, 0.0) if m.nvmlReturn == NVML_SUCCESS else 0.0
            return NVML_SUCCESS

        return f, _P


def binding(lib: FakeNvmlLib) -> ModuleType:
    """A private copy of the real ``pynvml`` module whose library is ``lib``.

    A copy, not the imported module patched: its ``nvmlLib``, function-pointer cache and
    error classes are its own, so nothing leaks into other tests or the real binding.
    """
    spec = importlib.util.find_spec("pynvml")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    real = sys.modules["pynvml"]
    sys.modules["pynvml"] = module  # it makes its NVMLError_* classes on sys.modules[__name__]
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules["pynvml"] = real
    module.nvmlLib = lib
    return module
