"""Where each key's values come from: the Metrics page's tables, one per source.

Each :class:`Table` lists the key families one source (a collector, or the step clock)
emits, with the columns that say where each value is read; the key's unit and how the
monitor aggregates it are not written here but taken from its
:class:`~sysmetrics.descriptions.Description` when the page is built
(:func:`sysmetrics._docs.source_table`), so the page has one row per key and no second
copy of what the descriptions say. ``tests/test_docs.py`` checks that every
described family is in a table and every key of a table is described.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sysmetrics.collectors.process import ProcessCollector


@dataclass(frozen=True)
class SourceRow:
    """One row: key families, what the unit cell adds, where the values come from.

    Attributes:
        keys: the families of the row (``"gpu.{i}.smClock"``), or one ``"<prefix>.*"``
            standing for keys listed above it.
        note: the unit cell's text after the families' units (``" of core `i` busy"``);
            the whole cell for a ``.*`` row.
        sources: one cell per source column of the table.
        aggregation: how the monitor aggregates the keys, where their collector decides
            it otherwise than their description (IPU: ``last``); None: from the
            description (:attr:`~sysmetrics.descriptions.Description.aggregation`).

    """

    keys: tuple[str, ...]
    note: str
    sources: tuple[str, ...]
    aggregation: Optional[str] = None


@dataclass(frozen=True)
class Table:
    """One source's table: its marker name, its source columns' headers and its rows."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[SourceRow, ...]


HOST = Table(
    "host",
    ("source (Linux / elsewhere)",),
    (
        SourceRow(
            ("cpu",),
            (
                " of the CPUs available to the process (affinity, capped by the cgroup CPU "
                "quota): the whole tree busy on every available CPU reads 100"
            ),
            (
                (
                    "`/proc/<pid>/stat` utime+stime of the process tree (+ the CPU time of "
                    "children reaped inside it) / `psutil.Process.cpu_times`"
                ),
            ),
        ),
        SourceRow(
            ("cpu.{i}.cpu_percent",),
            " of core `i` busy, system-wide",
            ("`/proc/stat` / `psutil.cpu_times(percpu=True)`",),
        ),
        SourceRow(
            ("proc.cpu.threads",),
            " (threads of the process tree)",
            ("`/proc/<pid>/stat` / `psutil.Process.num_threads`",),
        ),
        SourceRow(
            ("proc.cpu.busiestThreadPercent",),
            (
                " of one CPU (0..100), the job's busiest thread since the previous reading: "
                "one thread doing the work (the GIL) reads about 100 where the job gets one "
                f"CPU's worth. Linux only; read at most every {ProcessCollector.thread_window_s:g}"
                " s (the samples in between without it) and only where the job has at most "
                f"{ProcessCollector.max_threads} threads; absent on the first reading and "
                "where a process joined the job since the previous one. "
                "A thread that ended since the previous reading is not counted"
            ),
            ("`/proc/<pid>/task/<tid>/stat` utime+stime of each thread / none elsewhere",),
        ),
        SourceRow(
            ("proc.memory.rssMB",),
            (
                " resident, process tree, summed over its processes as W&B does: **pages shared "
                "by several processes (forked DataLoader workers reading one dataset) count once "
                "per process**, so this is not the job's memory (8 workers of a 2.5 GiB dataset: "
                "23 GiB)"
            ),
            ("`/proc/<pid>/stat` rss / `psutil.Process.memory_info().rss`",),
        ),
        SourceRow(
            ("proc.memory.pssMB",),
            (
                " proportional set size of the process tree: a page shared by several processes "
                "counts its share in each, so the pages forked workers share count once in all: "
                "the job's memory (Linux only; read on a thread of its own, about once a second "
                "for a small job, less often for a large one, see the notes; only in the samples "
                "with a new reading)"
            ),
            ("`/proc/<pid>/smaps_rollup` `Pss:` / none elsewhere",),
        ),
        SourceRow(
            ("proc.memory.percent",),
            (
                " of the memory available to the job (the host's, or the cgroup memory limit "
                "where lower, asked of the cgroup at each reading): the job's memory counted "
                "once, `proc.memory.pssMB` over that (0..100). Only in the samples with a new PSS"
                " reading; absent where PSS is (macOS, Windows, another user's process)"
            ),
            ("the PSS above / `MemTotal` or the limit",),
        ),
        SourceRow(
            ("memory",),
            (
                " of system memory in use; in a memory-limited cgroup, its usage less inactive "
                "file cache over its limit"
            ),
            ("`/proc/meminfo` / `psutil.virtual_memory`, cgroup `memory.*`",),
        ),
        SourceRow(
            ("proc.memory.availableMB",),
            (
                " available; in a memory-limited cgroup, the limit less its usage (capped by the "
                "host's)"
            ),
            ("as above",),
        ),
        SourceRow(
            ("memory.swapPercent",),
            (
                " of swap space in use; in a cgroup v2 whose `memory.swap.max` is below the "
                "host's swap, its `memory.swap.current` over that limit. Absent where the host "
                "has no swap or the cgroup's swap limit is 0"
            ),
            (
                (
                    "`/proc/meminfo` `SwapTotal`, `SwapFree` / `psutil.swap_memory`, cgroup "
                    "`memory.swap.*`"
                ),
            ),
        ),
        SourceRow(
            ("disk.{path}.usagePercent",),
            " of the filesystem's space in use (as `df`)",
            (
                (
                    "`statvfs` / `psutil.disk_usage`; on a FUSE or network filesystem `statvfs` "
                    "in a helper process every 5 s, the latest answer in between (see Faults)"
                ),
            ),
        ),
        SourceRow(
            ("disk.{path}.usageGB",),
            " in use on the filesystem",
            ("`statvfs` / `psutil.disk_usage`; likewise",),
        ),
        SourceRow(
            ("disk.in",),
            " read from whole disks since the monitor started",
            ("`/proc/diskstats` / `psutil.disk_io_counters`",),
        ),
        SourceRow(
            ("disk.out",),
            " written to whole disks since the monitor started",
            ("`/proc/diskstats` / `psutil.disk_io_counters`",),
        ),
        SourceRow(
            ("network.sent",),
            (
                " sent since the monitor started on every interface but loopback ones (`lo`: flag"
                " `IFF_LOOPBACK` in the interface's flags), whose traffic never leaves the "
                "machine; `network_loopback=True` counts them too. Each interface counts from the"
                " first sample, or from its creation when created later; one removed keeps what "
                "it counted"
            ),
            (
                (
                    "`/proc/net/dev`, `/sys/class/net/<if>/flags` / "
                    "`psutil.net_io_counters(pernic=True)`, `psutil.net_if_stats`"
                ),
            ),
        ),
        SourceRow(
            ("network.recv",),
            " received, likewise",
            ("as above",),
        ),
        SourceRow(
            ("cpu.energyJoules",),
            (
                " (joules) used by the CPU packages since the monitor started: the sum over the "
                "RAPL package zones, every socket (Linux only; where `energy_uj` is readable)"
            ),
            (
                (
                    "powercap `/sys/class/powercap/intel-rapl:N/energy_uj` (zones named "
                    "`package-N`; also `amd-rapl:N`), µJ / 1e6 / none elsewhere"
                ),
            ),
        ),
        SourceRow(
            ("memory.energyJoules",),
            (
                " (joules) used by DRAM since the monitor started, where the CPU reports it "
                "(zones named `dram`; many client CPUs and AMD have none)"
            ),
            ("powercap `intel-rapl:N:M/energy_uj` (name `dram`), µJ / 1e6 / none elsewhere",),
        ),
    ),
)

STEPS = Table(
    "steps",
    ("source",),
    (
        SourceRow(
            ("step.seconds",),
            (
                " (wall-clock seconds) per optimizer step, waits included: from the end of the "
                "previous optimizer step (or the start of the epoch) to the end of this one; with"
                " gradient accumulation, per optimizer step"
            ),
            ("the step hooks' times (`time.perf_counter`)",),
        ),
        SourceRow(
            ("step.dataWaitPercent",),
            (
                " of that time spent waiting for the next batch, 0..100: the training loop's "
                "fetch of each batch where the callback times it (it wraps the framework's "
                "train dataloader iterator: Lightning, transformers 4.46+, Keras 3 with the "
                "torch or JAX backend), else all the time from the end of one batch's hooks "
                "to the start of the next; with gradient accumulation, every micro-batch's"
            ),
            ("as above, and the timed `next()` on the loop's batch iterator",),
        ),
        SourceRow(
            ("step.overheadPercent",),
            (
                " of that time spent between batches outside the fetch, 0..100: from the end "
                "of one batch's hooks to the start of the next, less the fetch in it (other "
                "callbacks, the progress bar, logging); only where the fetch is timed"
            ),
            ("as above",),
        ),
        SourceRow(
            ("step.samplesPerSecond",),
            (
                " over the whole job (all ranks): samples of the steps over their seconds, where "
                "the batch size is known"
            ),
            ("the batch size (see the callbacks)",),
        ),
        SourceRow(
            ("step.energyJoules",),
            (
                " per optimizer step: the growth of every energy counter the monitor reads "
                "(`gpu.{i}.energyJoules` of the watched GPUs, `cpu.energyJoules` RAPL packages, "
                "`memory.energyJoules` RAPL DRAM) between the samples that closed steps, over the"
                " steps closed. Absent without any energy counter, and at a sample where the set "
                "of counters changed"
            ),
            ("the energy keys above",),
        ),
        SourceRow(
            ("step.maxSeconds",),
            (
                " of the longest optimizer step completed in the window, so that one slow step "
                "(a checkpoint write) among many fast ones is not averaged away. Callbacks only "
                "(a plain loop under `sysmetrics record` has none); absent at a sample where more"
                " than one step ended between the clock's reads (rare: the longest is then "
                "unknown); a folded window's value is the mean of its samples' longest"
            ),
            ("the step hooks' times",),
        ),
        SourceRow(
            ("step.slowPercent",),
            (
                " of the optimizer steps completed in the window that took over 3 times the "
                "running median (the median `step.seconds` of up to 64 previous samples, the "
                "first sample's steps, the warm-up, left out), 0..100. Callbacks only; from the "
                "4th sample that closed steps (before, there is no median to judge by)"
            ),
            ("the step hooks' times",),
        ),
        # Every rank's (sysmetrics.arrival): several ranks only, on its node's samples.
        SourceRow(
            ("rank.{rank}.step.seconds",),
            (
                ": `step.seconds` of global rank `rank` from its own step clock (several ranks:"
                " each node's sampling process reads its ranks' as of their latest backward; "
                "logged only where `include` names them; so are the `rank.` keys below)"
            ),
            ("each rank's step hooks, through a slot in `/dev/shm`",),
        ),
        SourceRow(
            ("rank.{rank}.step.dataWaitPercent",),
            ": `step.dataWaitPercent` of global rank `rank`, 0..100",
            ("as above",),
        ),
        SourceRow(
            ("rank.{rank}.step.forwardSeconds", "rank.{rank}.step.arrivalSeconds"),
            (
                " per step: from the batch's start to the backward's start (the forward and "
                "loss); from the step's start (the previous step's end) until the rank's "
                "backward produced its last gradient, its arrival at the gradient all-reduce "
                "(DDP). On CUDA the arrival is from CUDA events read later without waiting, "
                "measured from the previous backward's end; the forward is the CPU's (launches)"
            ),
            (
                "`register_post_accumulate_grad_hook` on each trained parameter; the "
                "framework's before-backward hook or a forward hook",
            ),
        ),
        SourceRow(
            ("rank.{rank}.step.peerWaitPercent",),
            (
                " of the rank's step time spent after its last gradient until the backward "
                "ended (DDP's final callback waits for the all-reduce): waiting for its peers, "
                "plus the last bucket's transfer, 0..100"
            ),
            ("an autograd final callback queued after DDP's",),
        ),
        SourceRow(
            ("step.rankMaxSeconds", "step.arrivalSpreadSeconds"),
            (
                ": over the node's ranks in the sample: the longest mean step; the last arrival"
                " minus the first (where two ranks or more arrived)"
            ),
            ("the `rank.{rank}.step.*` keys",),
        ),
        SourceRow(
            ("step.maxDataWaitPercent",),
            ": the highest `step.dataWaitPercent` among the node's ranks in the sample",
            ("as above",),
        ),
    ),
)

NVIDIA = Table(
    "nvidia",
    ("NVML source",),
    (
        SourceRow(
            ("gpu.{i}.gpu",),
            " of time a kernel ran",
            ("`nvmlDeviceGetUtilizationRates().gpu`",),
        ),
        SourceRow(
            ("gpu.{i}.memory",),
            " of time memory was read or written",
            ("`nvmlDeviceGetUtilizationRates().memory`",),
        ),
        SourceRow(
            ("gpu.{i}.memoryAllocated",),
            " of GPU memory in use",
            ("`nvmlDeviceGetMemoryInfo` (v2) used / total",),
        ),
        SourceRow(
            ("gpu.{i}.memoryAllocatedBytes",),
            " in use",
            ("`nvmlDeviceGetMemoryInfo` (v2) used",),
        ),
        SourceRow(
            ("gpu.{i}.temp",),
            "",
            ("`nvmlDeviceGetTemperatureV`",),
        ),
        SourceRow(
            ("gpu.{i}.powerWatts",),
            "",
            ("`nvmlDeviceGetPowerUsage` / 1000",),
        ),
        SourceRow(
            ("gpu.{i}.powerPercent",),
            " of the enforced power limit",
            ("`nvmlDeviceGetPowerUsage` / `nvmlDeviceGetEnforcedPowerLimit`",),
        ),
        SourceRow(
            ("gpu.{i}.smClock", "gpu.{i}.memoryClock", "gpu.{i}.graphicsClock"),
            "",
            ("`nvmlDeviceGetClockInfo`",),
        ),
        SourceRow(
            ("gpu.{i}.correctedMemoryErrors", "gpu.{i}.uncorrectedMemoryErrors"),
            " (volatile ECC)",
            ("`nvmlDeviceGetTotalEccErrors`",),
        ),
        SourceRow(
            ("gpu.{i}.encoderUtilization",),
            "",
            ("`nvmlDeviceGetEncoderUtilization`",),
        ),
        SourceRow(
            ("gpu.{i}.enforcedPowerLimitWatts",),
            ", the power limit the driver enforces",
            ("`nvmlDeviceGetEnforcedPowerLimit` / 1000",),
        ),
        SourceRow(
            ("gpu.{i}.energyJoules",),
            " since the monitor started",
            (
                (
                    "`nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded) less its "
                    "first reading. The counter is read at most 0.1 % of one CPU's time: every "
                    "sample where a read takes microseconds, less often where it is slow (an H100"
                    " in a Firecracker VM took 4.2 ms a read: about every 4 s; at most every 60 "
                    "s), and in between `powerWatts` is integrated (trapezoids between samples) "
                    "on top of the last reading, so the value is exact at each read and "
                    "approximate by the power readings' error in between; it never decreases "
                    "(where the integration ran ahead, it holds until the counter passes it). "
                    "Where NVML has no counter (before Volta), `powerWatts` integrated over time"
                ),
            ),
        ),
        SourceRow(
            ("gpu.{i}.fanSpeed",),
            " of the fan's maximum speed",
            ("`nvmlDeviceGetFanSpeed` (absent on passively cooled boards)",),
        ),
        SourceRow(
            (
                "gpu.{i}.throttle.thermal",
                "gpu.{i}.throttle.powerCap",
                "gpu.{i}.throttle.hwSlowdown",
            ),
            (
                ": 1 while the clocks are held down for that reason, else 0 (a snapshot's mean: "
                "the share of samples)"
            ),
            (
                (
                    "`nvmlDeviceGetCurrentClocksEventReasons` "
                    "(`nvmlDeviceGetCurrentClocksThrottleReasons` before R535): thermal = SW or "
                    "HW thermal slowdown, powerCap = SW power cap, hwSlowdown = HW slowdown or "
                    "power brake"
                ),
            ),
        ),
        SourceRow(
            ("gpu.{i}.smActive",),
            " of SMs busy (Hopper and newer; from the second sample)",
            (
                (
                    "GPM `NVML_GPM_METRIC_SM_UTIL` between the previous sample and this one "
                    "(`nvmlGpmSampleGet`, `nvmlGpmMetricsGet`)"
                ),
            ),
        ),
        SourceRow(
            ("gpu.{i}.smOccupancy",),
            " of warps active vs the SMs' maximum (Hopper and newer)",
            ("GPM `NVML_GPM_METRIC_SM_OCCUPANCY`",),
        ),
        SourceRow(
            ("gpu.{i}.pipeTensorActive",),
            " of time the SMs ran any tensor op (Hopper and newer)",
            ("GPM `NVML_GPM_METRIC_ANY_TENSOR_UTIL`",),
        ),
        SourceRow(
            ("gpu.{i}.dramActive",),
            " of the DRAM bandwidth used (Hopper and newer)",
            ("GPM `NVML_GPM_METRIC_DRAM_BW_UTIL`",),
        ),
        SourceRow(
            ("gpu.{i}.pcieTxBytes", "gpu.{i}.pcieRxBytes"),
            " over PCIe from / to the GPU (Hopper and newer)",
            ("GPM `NVML_GPM_METRIC_PCIE_TX_PER_SEC` / `_RX_PER_SEC` (MiB/s) \u00d7 2^20",),
        ),
        SourceRow(
            ("gpu.{i}.nvlinkTxBytes", "gpu.{i}.nvlinkRxBytes"),
            " over all NVLinks, sent / received (Hopper and newer)",
            (
                (
                    "GPM `NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC` / `_TOTAL_RX_PER_SEC` (MiB/s) "
                    "\u00d7 2^20"
                ),
            ),
        ),
        SourceRow(
            ("gpu.process.{i}.*",),
            "the keys above, for each GPU the process tree uses",
            ("",),
            "as above",
        ),
        SourceRow(
            ("gpu.process.{i}.processMemoryAllocatedBytes",),
            " held by the tree's processes on GPU `i`",
            ("`usedGpuMemory` of NVML's compute/graphics processes",),
        ),
        SourceRow(
            ("gpu.{i}.mig.{j}.memoryAllocated", "gpu.{i}.mig.{j}.memoryAllocatedBytes"),
            (
                " of MIG device `j` (its index in NVML's enumeration "
                "`nvmlDeviceGetMigDeviceHandleByIndex` when first seen; kept by that MIG device "
                "across reconfigurations)"
            ),
            ("`nvmlDeviceGetMemoryInfo` on the MIG handle",),
        ),
    ),
)

TORCH = Table(
    "torch",
    ("source",),
    (
        SourceRow(
            ("gpu.{i}.torch.allocatedBytes",),
            " in this process's tensors",
            (
                (
                    '`torch.cuda.memory_stats(i)["allocated_bytes.all.current"]` (= '
                    "`memory_allocated(i)`); MPS: `torch.mps.current_allocated_memory()` as "
                    "`gpu.0`"
                ),
            ),
        ),
        SourceRow(
            ("gpu.{i}.torch.reservedBytes",),
            " the caching allocator holds from the driver (tensors and cache)",
            (
                (
                    '`"reserved_bytes.all.current"` (= `memory_reserved(i)`); MPS: '
                    "`torch.mps.driver_allocated_memory()` as `gpu.0`"
                ),
            ),
        ),
    ),
)

AMD = Table(
    "amd",
    ("sysfs file", "rocm-smi field", "amd-smi field"),
    (
        SourceRow(
            ("gpu.{i}.gpu",),
            "",
            (
                "`gpu_busy_percent`",
                "`GPU use (%)`",
                "`usage.gfx_activity`",
            ),
        ),
        SourceRow(
            ("gpu.{i}.memory",),
            " of time the memory controller is busy",
            (
                "`mem_busy_percent`",
                "`GPU memory use (%)`, else `GPU Memory Read/Write Activity (%)`",
                "`usage.umc_activity`",
            ),
        ),
        SourceRow(
            ("gpu.{i}.memoryAllocated",),
            " of VRAM in use",
            (
                "`mem_info_vram_used` / `mem_info_vram_total`",
                (
                    "`VRAM Total Used Memory (B)` / `VRAM Total Memory (B)`, else `GPU Memory "
                    "Allocated (VRAM%)`"
                ),
                "`mem_usage.used_vram` / `total_vram`",
            ),
        ),
        SourceRow(
            ("gpu.{i}.memoryAllocatedBytes",),
            " of VRAM in use",
            (
                "`mem_info_vram_used`",
                "`VRAM Total Used Memory (B)`",
                "`mem_usage.used_vram` (its MB are MiB)",
            ),
        ),
        SourceRow(
            ("gpu.{i}.temp",),
            "",
            (
                "hwmon `temp*_input` (m°C) labelled `edge`, else `junction`, else `mem`",
                "edge sensor, else junction, else memory",
                "`temperature.edge`, else `hotspot`, else `mem`",
            ),
        ),
        SourceRow(
            ("gpu.{i}.powerWatts",),
            "",
            (
                "hwmon `power1_average`, else `power1_input` (µW)",
                (
                    "`Average Graphics Package Power (W)`, else `Current Socket Graphics Package "
                    "Power (W)` (MI300)"
                ),
                "`power.socket_power`",
            ),
        ),
        SourceRow(
            ("gpu.{i}.powerPercent",),
            " of the power cap",
            (
                "of hwmon `power1_cap` (µW, read each tick)",
                "of `Max Graphics Package Power (W)`",
                (
                    "of the cap in `amd-smi static --limit --json` (`limit.socket_power`, or "
                    "`limit.ppt0.socket_power_limit` from ROCm 6.4), read once"
                ),
            ),
        ),
    ),
)

TRAINIUM = Table(
    "trainium",
    (),
    (
        SourceRow(
            ("trn.{core}.neuroncore_utilization",),
            " of NeuronCore `core`",
            (),
        ),
        SourceRow(
            ("trn.host_total_memory_usage",),
            " of host memory used by the Neuron runtime",
            (),
        ),
        SourceRow(
            ("trn.neuron_device_total_memory_usage",),
            " of device memory used",
            (),
        ),
        SourceRow(
            ("trn.host_total_memory_usage.{kind}",),
            (
                ", per `kind` neuron-monitor reports (application_memory, constants, dma_buffers,"
                " tensors)"
            ),
            (),
        ),
        SourceRow(
            ("trn.{core}.neuroncore_memory_usage.{kind}",),
            (
                ", per `kind` neuron-monitor reports (constants, model_code, "
                "model_shared_scratchpad, runtime_memory, tensors)"
            ),
            (),
        ),
    ),
)

APPLE = Table(
    "apple",
    ("source",),
    (
        SourceRow(
            ("gpu.0.gpu",),
            "",
            (
                (
                    '`ioreg -c IOAccelerator`: `PerformanceStatistics` "Device Utilization %" '
                    "(else macmon's `gpu_usage`)"
                ),
            ),
        ),
        SourceRow(
            ("gpu.0.memoryAllocatedBytes",),
            " of unified memory the GPU driver has in use",
            ('"In use system memory"',),
        ),
        SourceRow(
            ("gpu.0.memoryAllocated",),
            " of the machine's RAM",
            ('"In use system memory" / RAM',),
        ),
        SourceRow(
            ("gpu.0.temp",),
            "",
            ("`macmon pipe`: `temp.gpu_temp_avg`",),
        ),
        SourceRow(
            ("gpu.0.powerWatts",),
            "",
            ("`macmon pipe`: `gpu_power`",),
        ),
        SourceRow(
            ("gpu.0.powerPercent",),
            " of 16.5 W (W&B's fixed figure; Apple publishes no GPU power limit)",
            ("`gpu_power` / 16.5",),
        ),
    ),
)

TPU = Table(
    "tpu",
    ("tpu-info column",),
    (
        SourceRow(
            ("tpu.{i}.memoryUsageBytes",),
            " of HBM in use (tpu-info prints GiB with 2 decimals: ~10 MB resolution)",
            ("`HBM Usage` used",),
        ),
        SourceRow(
            ("tpu.{i}.memoryUsage",),
            " of HBM in use",
            ("`HBM Usage` used / total",),
        ),
        SourceRow(
            ("tpu.{i}.dutyCycle",),
            " of time the TensorCores were busy",
            ("`Duty cycle`",),
        ),
    ),
)

IPU = Table(
    "ipu",
    ("gcipuinfo attribute",),
    (
        SourceRow(
            ("ipu.{device_id}.average board temp (C)",),
            "",
            ("`average board temp`",),
            "latest",
        ),
        SourceRow(
            ("ipu.{device_id}.average die temp (C)",),
            "",
            ("`average die temp`",),
            "latest",
        ),
        SourceRow(
            ("ipu.{device_id}.clock (MHz)",),
            "",
            ("`clock`",),
            "latest",
        ),
        SourceRow(
            ("ipu.{device_id}.ipu power (W)",),
            "",
            ("`ipu power`",),
            "latest",
        ),
        SourceRow(
            ("ipu.{device_id}.ipu utilisation (%)",),
            "",
            ("`ipu utilisation`",),
            "latest",
        ),
        SourceRow(
            ("ipu.{device_id}.ipu utilisation (session) (%)",),
            " since the session began",
            ("`ipu utilisation (session)`",),
            "latest",
        ),
        SourceRow(
            ("ipu.{device_id}.link speed (GT/s)",),
            "",
            ("`link speed`",),
            "latest",
        ),
    ),
)

OPENMETRICS = Table(
    "openmetrics",
    ("source",),
    (
        SourceRow(
            ("openmetrics.{name}.{metric}.{index}",),
            "",
            (
                (
                    "gauges and counters (`_total`) of the endpoint; `index` numbers each label "
                    "set of the metric in the order first seen, stable for the run (the "
                    "collector's `labels` property maps each key to its labels)"
                ),
            ),
            "gauges mean, counters latest",
        ),
    ),
)

TABLES = (HOST, STEPS, NVIDIA, TORCH, AMD, TRAINIUM, APPLE, TPU, IPU, OPENMETRICS)
"""Every source's table, in the Metrics page's order."""
