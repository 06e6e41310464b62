"""What is read of each device, and how often.

One reader per field, the per-field backoff of failing ones, and the slower cadence of
what changes slowly (:data:`PERIODS`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from sysmetrics.collectors.nvidia.backoff import _Fields
from sysmetrics.collectors.nvidia.devices import _errors

if TYPE_CHECKING:
    from sysmetrics.collectors.nvidia.gpm import _Gpm

log = logging.getLogger("sysmetrics")


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

# The energy counter is read at most this share of one CPU's time (the time its last call
# took over this share, in s, to the next call; at most ENERGY_MAX_PERIOD s): on most
# drivers a call takes microseconds and it is read every tick, but on some (an H100 in a
# Firecracker VM: 4.2 ms a call, 96 % of the collector's time) it would cost more than
# every other field together. In between, power is integrated on top of the last reading.
ENERGY_DUTY = 0.001
ENERGY_MAX_PERIOD = 60.0

# Seconds between two reads of what changes slowly (0: every tick); the latest reading is
# reported in between. "processes": the process lists and the attribution they drive.
PERIODS: dict[str, float] = {
    "processes": 5.0,
    "correctedMemoryErrors": 5.0,
    "uncorrectedMemoryErrors": 5.0,
    "enforcedPowerLimitWatts": 30.0,
}


@dataclass
class _Mig:
    """One MIG device of a GPU in MIG mode: its handle, UUID, fields and process lists."""

    handle: Any
    uuid: str
    fields: _Fields = field(default_factory=lambda: _Fields(list(_MIG_FIELDS)))
    lists: _Fields = field(default_factory=lambda: _Fields(list(_PROCESS_LISTS)))


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
    energy_read: float | None = None  # J since the monitor started at the last counter read
    energy_since: float = 0.0  # J of power integrated since that read
    energy_due: float = float("-inf")  # when the counter is read again (s)
    power_at: tuple[float, float] | None = None  # (time s, W) of the last power reading
    answered: int = 0  # this tick: calls answered, and calls failing for now
    failed: int = 0
    warned: bool = False  # that it stopped answering
    gpm: _Gpm | None = None  # GPM metrics, where the GPU has them


class FieldReader:
    """Reads the fields of one device handle under the collector's fault rules.

    The NVIDIA collector holds one, and hands it to its MIG and attribution parts.

    Args:
        nvml: the initialised binding.

    Attributes:
        periods: s between reads of each slow field (0: every tick), :data:`PERIODS` by
            default.
        clock: monotonic seconds, for energy, the MIG re-fetch and the periods (a test
            may put its own here).
        tick: samples taken (the collector counts them): one ``nvmlInit`` a tick at most.

    """

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.periods = dict(PERIODS)
        self.clock: Callable[[], float] = time.monotonic
        self.tick = 0
        self._reinit_tick = -1  # the tick NVML was last initialised again
        self._permanent = _errors(nvml, *_PERMANENT)  # the errors that drop a field

    def call(self, fn: Callable[[], Any], default: Any = None) -> Any:
        """``fn()``, or ``default`` where NVML answers an error."""
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
            if self._reinit_tick == self.tick:
                raise
            self._reinit_tick = self.tick
            log.debug("sysmetrics: NVML was shut down by someone else: initialising it again")
            self.nvml.nvmlInit()
            return fn()

    def try_field(
        self,
        dev: _Device,
        fields: _Fields,
        name: str,
        fn: Callable[[], Any],
        stale: tuple[type[Exception], ...] = (),
    ) -> Any:
        """``fn()`` for field ``name`` of ``dev``, or None: skipped for now, failed, or dropped.

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

    def read(
        self,
        dev: _Device,
        fields: _Fields,
        handle: Any,
        stale: tuple[type[Exception], ...] = (),
    ) -> dict[str, float]:
        """Read ``fields`` of one device handle, under the fault rules of :meth:`try_field`."""
        nvml = self.nvml
        now = self.clock()
        values: dict[str, float] = {}
        for name in list(fields.names):
            period = self.periods.get(name, 0.0)
            if name == "energy" and dev.energy_read is not None and now < dev.energy_due:
                watts = values.get("powerWatts")  # between two counter reads
                if watts is not None:
                    dev.energy_since += self._trapezoid(dev, watts, now)
                    values["energyJoules"] = self._report(dev, dev.energy_read + dev.energy_since)
                continue
            if period > 0.0 and name in fields.held and now < fields.due[name]:
                v = fields.held[name]  # read less often: the latest reading
            else:
                started = self.clock()
                v = self.try_field(dev, fields, name, partial(_FIELDS[name], nvml, handle), stale)
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
                watts = values.get("powerWatts")
                values["energyJoules"] = self._counter(dev, v, watts, started, now)
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

    def _counter(
        self, dev: _Device, mj: float, watts: float | None, then: float, tick: float
    ) -> float:
        """J since the monitor started from NVML's counter ``mj``, read from ``then`` to now.

        Sets when it is read next (:data:`ENERGY_DUTY`) and restarts the integration of
        power (``watts``, read at the tick's time ``tick``) on top of it.
        """
        took = max(self.clock() - then, 0.0)
        dev.energy_due = then + min(took / ENERGY_DUTY, ENERGY_MAX_PERIOD)
        if dev.energy_base is None or mj < dev.energy_base:  # first, or driver reload
            dev.energy_base = mj - dev.energy * 1000.0
        dev.energy_read, dev.energy_since = (mj - dev.energy_base) / 1000.0, 0.0
        dev.power_at = None if watts is None else (tick, watts)
        return self._report(dev, dev.energy_read)

    @staticmethod
    def _report(dev: _Device, joules: float) -> float:
        """``joules``, but never less than reported before: a counter does not go back.

        Where power integrated between two counter reads ran ahead of the counter, the value
        holds until the counter catches up.
        """
        dev.energy = max(dev.energy, joules)
        return dev.energy

    def _trapezoid(self, dev: _Device, watts: float, now: float) -> float:
        """J since the last power reading (a trapezoid), and ``watts`` becomes the last."""
        joules = 0.0
        if dev.power_at is not None:
            then, before = dev.power_at
            joules = (before + watts) / 2.0 * max(now - then, 0.0)
        dev.power_at = (now, watts)
        return joules

    def _integrate(self, dev: _Device, watts: float) -> float:
        """J since the monitor started from power readings (trapezoids between samples)."""
        dev.energy += self._trapezoid(dev, watts, self.clock())
        return dev.energy
