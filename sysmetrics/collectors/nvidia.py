"""NVIDIA GPUs through NVML (``nvidia-ml-py``): ``gpu.{i}.*`` and ``gpu.process.{i}.*``."""

from __future__ import annotations

import logging
import os
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


def _memory(nvml: Any, h: Any) -> Any:
    try:  # v2 excludes the driver's reserved memory from "used", as nvidia-smi does
        return nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
    except (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NotSupported, TypeError):
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


# Each field is read on its own, so one a device does not support is dropped alone.
# name -> reader(nvml, handle) returning one number or a dict of named numbers.
_FIELDS: dict[str, Callable[[Any, Any], Any]] = {
    "utilization": lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h),
    "memory": _memory,
    "temp": _temperature,
    "powerWatts": lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "powerLimit": lambda nvml, h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
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


@dataclass
class _Device:
    index: int  # CUDA's number for it, the {i} in the keys
    handle: Any
    uuid: str
    minor: int | None = None  # N of /dev/nvidiaN
    fields: list[str] = field(default_factory=list)
    mig: list[Any] = field(default_factory=list)  # MIG device handles of a MIG-mode GPU
    lost: bool = False


def _uuid(nvml: Any, handle: Any) -> str:
    u = nvml.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


def visible_devices(nvml: Any, env: Mapping[str, str] | None = None) -> list[tuple[Any, str]]:
    """(handle, UUID) of each GPU CUDA shows this process, in CUDA's order.

    ``CUDA_VISIBLE_DEVICES`` entries are NVML indices or (``GPU-``/``MIG-``) UUIDs; as in
    CUDA, the list ends at the first entry that names no device.
    """
    spec = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    count = nvml.nvmlDeviceGetCount()
    entries = [str(i) for i in range(count)] if spec is None else spec.split(",")
    out = []
    for entry in (e.strip() for e in entries):
        try:
            if entry.isdigit():
                if int(entry) >= count:
                    break
                handle = nvml.nvmlDeviceGetHandleByIndex(int(entry))
            else:
                handle = nvml.nvmlDeviceGetHandleByUUID(entry)
        except nvml.NVMLError:
            break
        out.append((handle, _uuid(nvml, handle)))
    return out


def select(
    visible: list[tuple[Any, str]], gpu_ids: Sequence[GpuId] | None
) -> list[tuple[int, Any, str]]:
    """(CUDA index, handle, UUID) of the chosen GPUs; all when ``gpu_ids`` is None.

    Raises:
        ValueError: an id that names no visible GPU.

    """
    numbered = [(i, h, u) for i, (h, u) in enumerate(visible)]
    if gpu_ids is None:
        return numbered
    chosen = []
    for gid in gpu_ids:
        if isinstance(gid, int) and not isinstance(gid, bool) and 0 <= gid < len(numbered):
            chosen.append(numbered[gid])
            continue
        if isinstance(gid, str):
            match = [d for d in numbered if d[2] == gid or d[2].startswith(gid)]
            if len(match) == 1:
                chosen.append(match[0])
                continue
        spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" under CUDA_VISIBLE_DEVICES={spec!r}" if spec is not None else ""
        raise ValueError(
            f"gpu_ids contains {gid!r}, which names no GPU this process can see: use CUDA "
            f"indices 0..{len(numbered) - 1}{where} or UUIDs "
            f"({', '.join(u for _, _, u in numbered) or 'none'})"
        )
    return chosen


class NvidiaCollector(BaseCollector):
    """NVIDIA GPU metrics from NVML, per GPU and for the GPUs this process tree uses.

    Keys, per GPU ``i`` (CUDA's numbering under ``CUDA_VISIBLE_DEVICES``):
    ``gpu.{i}.gpu`` (% of time a kernel ran), ``gpu.{i}.memory`` (% of time memory was read
    or written), ``gpu.{i}.memoryAllocated`` (% of memory in use),
    ``gpu.{i}.memoryAllocatedBytes`` (bytes in use, with ``.max``), ``gpu.{i}.temp`` (°C),
    ``gpu.{i}.powerWatts`` (W), ``gpu.{i}.powerPercent`` (% of the enforced power limit),
    ``gpu.{i}.smClock``, ``gpu.{i}.memoryClock``, ``gpu.{i}.graphicsClock`` (MHz),
    ``gpu.{i}.correctedMemoryErrors``, ``gpu.{i}.uncorrectedMemoryErrors`` (volatile ECC
    counts, latest), ``gpu.{i}.encoderUtilization`` (%). For a GPU the process tree uses,
    the same keys again as ``gpu.process.{i}.*``, plus
    ``gpu.process.{i}.processMemoryAllocatedBytes`` (bytes the tree's processes hold on
    it, with ``.max``; absent when NVML does not report it). A GPU in MIG mode reports no
    utilization, and each MIG instance ``j`` reports ``gpu.{i}.mig.{j}.memoryAllocated`` and
    ``gpu.{i}.mig.{j}.memoryAllocatedBytes``; a MIG device made visible by its UUID reports
    its memory as ``gpu.{i}.*``.

    A field a device does not support is dropped for that device (one debug line); a GPU
    that is lost is dropped with one warning. "Used by the process tree": NVML lists one
    of its PIDs among the GPU's compute or graphics processes; inside a container, where
    NVML reports host PIDs, the ``/dev/nvidiaN`` files the tree holds open.

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
    last_keys = frozenset({"correctedMemoryErrors", "uncorrectedMemoryErrors"})
    peak_keys = frozenset({"memoryAllocatedBytes", "processMemoryAllocatedBytes"})

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
        dev = _Device(index, handle, uuid, fields=list(_FIELDS))
        minor = self._call(lambda: nvml.nvmlDeviceGetMinorNumber(handle))  # None on MIG
        dev.minor = None if minor is None else int(minor)
        if self._call(lambda: nvml.nvmlDeviceIsMigDeviceHandle(handle), False):
            dev.fields = list(_MIG_FIELDS)
        elif self._call(lambda: nvml.nvmlDeviceGetMigMode(handle)[0], 0) == 1:
            dev.fields = [f for f in dev.fields if f not in _MIG_PARENT_SKIPS]
            slots = self._call(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle), 0)
            for j in range(slots):
                mig = self._call(partial(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, j))
                if mig is not None:
                    dev.mig.append(mig)
        return dev

    def _call(self, fn: Callable[[], Any], default: Any = None) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError:
            return default

    def _read(self, dev: _Device, names: list[str], handle: Any) -> dict[str, float]:
        """Read ``names`` of one device; drop the ones it does not support."""
        nvml = self.nvml
        values: dict[str, float] = {}
        for name in list(names):
            try:
                v = _FIELDS[name](nvml, handle)
            except nvml.NVMLError_GpuIsLost:
                raise
            except nvml.NVMLError as exc:
                names.remove(name)
                log.debug("sysmetrics: gpu.%s: %s unavailable, not read again: %s",
                          dev.index, name, exc)  # fmt: skip
                continue
            if name == "utilization":
                values["gpu"], values["memory"] = float(v.gpu), float(v.memory)
            elif name == "memory":
                values["memoryAllocatedBytes"] = float(v.used)
                values["memoryAllocated"] = v.used / v.total * 100.0 if v.total else 0.0
            else:
                values[name] = float(v)
        limit = values.pop("powerLimit", None)
        if limit and "powerWatts" in values:
            values["powerPercent"] = values["powerWatts"] / limit * 100.0
        return values

    def sample(self) -> dict[str, float]:
        """Every field of every watched GPU, and the same for the GPUs the tree uses."""
        nvml = self.nvml
        tree = {p for p, _ in process_tree(self.source, self.job.roots, self.track_process_tree)}
        out: dict[str, float] = {}
        # Devices whose NVML PIDs are all outside our PID space, with their values.
        foreign: list[tuple[_Device, dict[str, float]]] = []
        for dev in self.devices:
            if dev.lost:
                continue
            try:
                values = self._read(dev, dev.fields, dev.handle)
                for j, mig in enumerate(dev.mig):
                    for k, v in self._read(dev, ["memory"], mig).items():
                        out[f"gpu.{dev.index}.mig.{j}.{k}"] = v
                procs = self._processes(dev)
            except nvml.NVMLError_GpuIsLost as exc:
                dev.lost = True
                warnings.warn(
                    f"sysmetrics: gpu.{dev.index} ({dev.uuid}) is lost and no longer "
                    f"sampled: {exc}",
                    SystemMetricsWarning,
                    stacklevel=2,
                )
                continue
            prefix = f"gpu.{dev.index}."
            for k, v in values.items():
                out[prefix + k] = v
            ours = [p for p in procs if p.pid in tree]
            if ours:
                self._process_keys(out, dev, values, ours)
            elif not any(self._pid_exists(p.pid) for p in procs):
                foreign.append((dev, values))  # no process, or only PIDs of another namespace
        if foreign:  # NVML reports host PIDs: look at the device files the tree holds open
            minors = self._open_device_minors(tree)
            for dev, values in foreign:
                if dev.minor in minors:
                    self._process_keys(out, dev, values, [])
        return out

    def _processes(self, dev: _Device) -> list[Any]:
        procs: list[Any] = []
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs.extend(getattr(self.nvml, fn)(dev.handle))
            except self.nvml.NVMLError_GpuIsLost:
                raise
            except self.nvml.NVMLError:
                pass
        return procs

    @staticmethod
    def _process_keys(
        out: dict[str, float], dev: _Device, values: dict[str, float], ours: list[Any]
    ) -> None:
        prefix = f"gpu.process.{dev.index}."
        for k, v in values.items():
            out[prefix + k] = v
        held = [getattr(p, "usedGpuMemory", None) for p in ours]
        if held and all(isinstance(m, int) for m in held):
            out[prefix + "processMemoryAllocatedBytes"] = float(sum(m for m in held if m))

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
        """Shut NVML down (it counts its initialisations)."""
        self._call(self.nvml.nvmlShutdown)
