"""The NVIDIA collector: ``gpu.{i}.*`` and ``gpu.process.{i}.*`` from NVML."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from functools import partial
from types import ModuleType
from typing import Any

from sysmetrics import _optional
from sysmetrics.collectors.base import BaseCollector
from sysmetrics.collectors.nvidia.attribution import Attribution
from sysmetrics.collectors.nvidia.backoff import _Fields
from sysmetrics.collectors.nvidia.devices import GpuId, select, visible_devices
from sysmetrics.collectors.nvidia.fields import (
    _FIELDS,
    _MIG_FIELDS,
    _MIG_PARENT_SKIPS,
    FieldReader,
    _Device,
)
from sysmetrics.collectors.nvidia.gpm import _Gpm
from sysmetrics.collectors.nvidia.mig import MigReader
from sysmetrics.errors import OptionError, OptionTypeError, SystemMetricsWarning
from sysmetrics.host import HostSource, Job, ProcfsSource

log = logging.getLogger("sysmetrics")


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
    exist here, the ``/dev/nvidiaN`` files the tree holds open (asked of ``source``, so a
    captured procfs root serves for both; rescanned every 10 s at most); a GPU with no
    process is never the tree's, although CUDA opens every visible GPU's device file. A
    GPU in MIG mode is never attributed by its device file (every instance's process opens
    it); its own lists need root (NO_PERMISSION otherwise), so without root its MIG
    devices' lists are read instead.

    Args:
        nvml: the initialised ``pynvml`` module.
        gpu_ids: CUDA indices or UUIDs to watch; all visible GPUs by default.
        pid: the root of the process tree, or the job (every local rank's tree).
        track_process_tree: attribute GPU use of descendants too.
        source: host readings, to find the process tree, and for the device files fallback
            which processes exist and which files they hold open.
        proc_root: a procfs root (a captured tree) asked for the device files fallback in
            place of ``source``; None: ``source`` itself.

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
        proc_root: str | None = None,
    ) -> None:
        self.nvml = nvml
        self.source = source
        self.job = pid if isinstance(pid, Job) else Job(pid)  # the watched roots
        self.pid = self.job.pid
        self.track_process_tree = track_process_tree
        # Its parts: the fields of each handle, the MIG devices, the tree's devices.
        self._field_reader = FieldReader(nvml)
        self._mig = MigReader(self._field_reader)
        self._attribution = Attribution(self._field_reader, source, self.job, track_process_tree)
        self.proc_root = proc_root  # sets the attribution's files
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
            raise OptionTypeError("gpu_ids", gpu_ids, "use a list of CUDA indices or UUIDs")
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
            raise OptionError("gpu_ids", list(gpu_ids), problem=f"cannot be watched: {reason}")
        log.debug("sysmetrics: NVIDIA collector unavailable: %s", reason)
        return None

    @property
    def proc_root(self) -> str | None:
        """The procfs root the device files fallback reads, None where ``source`` answers."""
        return self._proc_root

    @proc_root.setter
    def proc_root(self, root: str | None) -> None:
        self._proc_root = root
        self._attribution.files = self.source if root is None else ProcfsSource(root)

    @property
    def periods(self) -> dict[str, float]:
        """Seconds between reads of each slow field (0: every tick), as the class says."""
        return self._field_reader.periods

    @periods.setter
    def periods(self, periods: dict[str, float]) -> None:
        self._field_reader.periods = periods

    def _describe(self, index: int, handle: Any, uuid: str) -> _Device:
        nvml, call = self.nvml, self._field_reader.call
        dev = _Device(index, handle, uuid, fields=_Fields(list(_FIELDS)))
        minor = call(lambda: nvml.nvmlDeviceGetMinorNumber(handle))  # None on MIG
        dev.minor = None if minor is None else int(minor)
        if call(lambda: nvml.nvmlDeviceIsMigDeviceHandle(handle), False):
            dev.fields.names = list(_MIG_FIELDS)
        elif call(lambda: nvml.nvmlDeviceGetMigMode(handle)[0], 0) == 1:
            dev.mig_mode = True
            dev.fields.names = [f for f in dev.fields.names if f not in _MIG_PARENT_SKIPS]
            self._mig.fetch(dev)
        else:
            dev.gpm = _Gpm.open(nvml, handle)
        return dev

    def sample(self) -> dict[str, float]:
        """Every field of every watched GPU, and the same for the GPUs the tree uses."""
        nvml, fields, attribution = self.nvml, self._field_reader, self._attribution
        fields.tick += 1
        now = fields.clock()
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
                values = fields.read(dev, dev.fields, dev.handle)
                gpm = dev.gpm
                if gpm is not None and gpm.fields.names:
                    read_gpm = partial(gpm.read, nvml, dev.handle)
                    values.update(fields.try_field(dev, gpm.fields, "gpm", read_gpm) or {})
                self._mig.read(dev, out)
                procs = attribution.processes(dev) if lists_due else {}
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
                tree = attribution.job_tree()
            if attribution.attribute(dev, procs, tree):
                foreign.append(dev)
        if foreign and tree is not None:  # NVML reports host PIDs: the device files open
            attribution.attribute_by_files(foreign, tree)
        for dev, values in read:
            if dev.ours is not None:
                attribution.process_keys(out, dev, values, dev.ours)
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

    def close(self) -> None:
        """Free the GPM samples, and shut NVML down (it counts its initialisations)."""
        for dev in self.devices:
            if dev.gpm is not None:
                _Gpm.free(self.nvml, dev.gpm.samples)
                dev.gpm = None
        self._field_reader.call(self.nvml.nvmlShutdown)
