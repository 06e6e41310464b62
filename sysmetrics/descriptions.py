"""What every metric key means: one :class:`Description` per key family, in one place.

Each family of keys a collector emits (``cpu``, ``gpu.{i}.gpu``,
``disk.{path}.usagePercent``, ...) has its unit, kind (gauge or counter), a one-line
help, its placeholders and its Prometheus name. The README's key tables, the Prometheus
exporter and reports derive from :data:`DESCRIPTIONS`; :func:`describe` finds the family
of a concrete key such as ``gpu.0.gpu``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal, NamedTuple, Optional

Kind = Literal["gauge", "counter"]

Aggregation = Literal["mean", "last", "peak"]
"""How the monitor folds a key's samples between two snapshots.

``mean``: gauges, averaged over the window. ``last``: cumulative counters, the latest
value. ``peak``: gauges averaged, plus a ``<key>.max`` companion with the window's maximum.
"""

Weight = Literal["sample", "steps", "step_seconds"]
"""How much each sample of a key counts in a mean over a window or a run.

``sample``: once each (every key but the step keys). ``steps``: by the optimizer steps
the sample stands for (a per-step value: ``step.seconds``). ``step_seconds``: by those
steps' seconds (a share of step time, or a rate over it: ``step.dataWaitPercent``).
"""

_MIB = 1024.0**2
_GIB = 1024.0**3


@dataclass(frozen=True)
class Description:
    """One key family: what its values are and how they are exported to Prometheus.

    Attributes:
        key: the family as the README writes it, placeholders in braces:
            ``"gpu.{i}.gpu"``, ``"disk.{path}.usagePercent"``.
        unit: the unit of the value as sysmetrics reports it (``"%"``, ``"MiB"``, ...).
        kind: ``"counter"`` for values cumulative since the monitor started (or since
            the driver loaded, for ECC errors); ``"gauge"`` for everything else.
        help: one line saying what the value is.
        prometheus: the Prometheus metric name without the exporter's ``sysmetrics_``
            prefix, in the base unit; None where the family is not exported.
        scale: the factor from ``unit`` to the Prometheus base unit (MiB: 1048576).
        prometheus_labels: the Prometheus label of each placeholder of ``key``, in order.
        peak: whether the monitor adds a ``<key>.max`` companion holding each window's
            peak (memory gauges, whose short peaks a mean hides).
        weight: how each sample counts in a mean (:data:`Weight`): the monitor's
            readers, the step collector, the report's table and the findings all read
            it here (:func:`sysmetrics.weights.weighted_mean`).

    """

    key: str
    unit: str
    kind: Kind
    help: str
    prometheus: str | None
    scale: float = 1.0
    prometheus_labels: tuple[str, ...] = ()
    peak: bool = False
    weight: Weight = "sample"

    @property
    def aggregation(self) -> Aggregation:
        """How the monitor aggregates the family: counters ``last``, ``peak``, else ``mean``."""
        return "last" if self.kind == "counter" else "peak" if self.peak else "mean"

    @property
    def rate_unit(self) -> str:
        """The unit of a counter's rate (:func:`counter_rate`): ``W`` for ``J``, else unit/s."""
        return "W" if self.unit == "J" else f"{self.unit}/s"

    @property
    def labels(self) -> tuple[str, ...]:
        """The placeholders of ``key``, in order: ``("i",)``, ``("path",)``, ``("i", "j")``."""
        return tuple(_PLACEHOLDER.findall(self.key))


def _gpu(key: str, unit: str, help: str, prometheus: str, scale: float = 1.0,
         kind: Kind = "gauge", peak: bool = False) -> Description:  # fmt: skip
    return Description(f"gpu.{{i}}.{key}", unit, kind, help, prometheus, scale, ("gpu",), peak)


_GPU = (
    _gpu("gpu", "%", "GPU utilization: % of time a kernel ran (NVIDIA), GPU use (AMD, Apple)",
         "gpu_utilization_percent"),
    _gpu("memory", "%", "% of time the GPU memory was read or written (memory controller busy)",
         "gpu_memory_utilization_percent"),
    _gpu("memoryAllocated", "%", "% of the GPU's memory in use (Apple: of the machine's RAM)",
         "gpu_memory_allocated_percent"),
    _gpu("memoryAllocatedBytes", "bytes", "GPU memory in use",
         "gpu_memory_allocated_bytes", peak=True),
    _gpu("temp", "°C", "GPU temperature", "gpu_temperature_celsius"),
    _gpu("powerWatts", "W", "GPU power draw", "gpu_power_watts"),
    _gpu("powerPercent", "%", "GPU power draw as % of its power limit (Apple: of 16.5 W)",
         "gpu_power_percent"),
    _gpu("smClock", "MHz", "SM clock", "gpu_sm_clock_hertz", 1e6),
    _gpu("memoryClock", "MHz", "Memory clock", "gpu_memory_clock_hertz", 1e6),
    _gpu("graphicsClock", "MHz", "Graphics clock", "gpu_graphics_clock_hertz", 1e6),
    _gpu("correctedMemoryErrors", "count",
         "Corrected ECC memory errors (volatile: since the driver loaded)",
         "gpu_corrected_memory_errors_total", kind="counter"),
    _gpu("uncorrectedMemoryErrors", "count",
         "Uncorrected ECC memory errors (volatile: since the driver loaded)",
         "gpu_uncorrected_memory_errors_total", kind="counter"),
    _gpu("encoderUtilization", "%", "Video encoder utilization",
         "gpu_encoder_utilization_percent"),
    _gpu("enforcedPowerLimitWatts", "W", "Power limit the driver enforces (NVIDIA)",
         "gpu_enforced_power_limit_watts"),
    _gpu("energyJoules", "J", "GPU energy used since the monitor started (NVIDIA: NVML's "
         "counter, else power integrated between samples)", "gpu_energy_joules_total",
         kind="counter"),
    _gpu("fanSpeed", "%", "Fan speed, % of its maximum (NVIDIA)", "gpu_fan_speed_percent"),
    _gpu("throttle.thermal", "0/1", "Clocks held down by a SW or HW thermal slowdown (NVIDIA)",
         "gpu_throttle_thermal"),
    _gpu("throttle.powerCap", "0/1", "Clocks held down by the SW power cap (NVIDIA)",
         "gpu_throttle_power_cap"),
    _gpu("throttle.hwSlowdown", "0/1", "Clocks held down by a HW slowdown or power brake (NVIDIA)",
         "gpu_throttle_hw_slowdown"),
    _gpu("smActive", "%", "% of SMs busy, between two samples (NVIDIA GPM, Hopper and newer)",
         "gpu_sm_activity_percent"),
    _gpu("smOccupancy", "%", "% of warps active vs the SMs' maximum (NVIDIA GPM, Hopper and "
         "newer)", "gpu_sm_occupancy_percent"),
    _gpu("pipeTensorActive", "%", "% of time the SMs ran any tensor op (NVIDIA GPM, Hopper and "
         "newer)", "gpu_tensor_activity_percent"),
    _gpu("dramActive", "%", "% of the DRAM bandwidth used (NVIDIA GPM, Hopper and newer)",
         "gpu_dram_activity_percent"),
    _gpu("pcieTxBytes", "bytes/s", "PCIe traffic from the GPU (NVIDIA GPM, Hopper and newer)",
         "gpu_pcie_transmit_bytes_per_second"),
    _gpu("pcieRxBytes", "bytes/s", "PCIe traffic to the GPU (NVIDIA GPM, Hopper and newer)",
         "gpu_pcie_receive_bytes_per_second"),
    _gpu("nvlinkTxBytes", "bytes/s", "NVLink traffic sent, all links (NVIDIA GPM, Hopper and "
         "newer)", "gpu_nvlink_transmit_bytes_per_second"),
    _gpu("nvlinkRxBytes", "bytes/s", "NVLink traffic received, all links (NVIDIA GPM, Hopper "
         "and newer)", "gpu_nvlink_receive_bytes_per_second"),
)  # fmt: skip


def _ipu(key: str, unit: str, help: str, prometheus: str, scale: float = 1.0) -> Description:
    return Description(f"ipu.{{device_id}}.{key}", unit, "gauge", help, prometheus, scale,
                       ("ipu",))  # fmt: skip


DESCRIPTIONS: tuple[Description, ...] = (
    # Process tree, CPU, memory, disk, network.
    Description("cpu", "%", "gauge",
                "CPU used by the process tree, % of the CPUs available to the process",
                "process_cpu_utilization_percent"),
    Description("cpu.{i}.cpu_percent", "%", "gauge", "System-wide busy % of CPU core i",
                "cpu_utilization_percent", prometheus_labels=("cpu",)),
    Description("proc.cpu.threads", "count", "gauge", "Threads of the process tree",
                "process_threads"),
    Description("proc.cpu.busiestThreadPercent", "%", "gauge",
                "CPU used by the process tree's busiest thread, % of one CPU (0-100)",
                "process_busiest_thread_cpu_percent"),
    Description("proc.memory.rssMB", "MiB", "gauge",
                "Resident memory of the process tree, summed: shared pages count once per process",
                "process_memory_rss_bytes", _MIB, peak=True),
    Description("proc.memory.pssMB", "MiB", "gauge",
                "Proportional set size of the process tree, shared pages split among their users",
                "process_memory_pss_bytes", _MIB, peak=True),
    Description("proc.memory.percent", "%", "gauge",
                "The process tree's PSS (shared pages counted once), % of system memory or of "
                "the cgroup limit", "process_memory_pss_percent"),
    Description("memory", "%", "gauge",
                "System memory in use, % (in a memory-limited cgroup, of its limit)",
                "memory_used_percent"),
    Description("proc.memory.availableMB", "MiB", "gauge",
                "Memory available (in a memory-limited cgroup, its limit less its usage)",
                "memory_available_bytes", _MIB),
    Description("memory.swapPercent", "%", "gauge",
                "Swap space in use, % of the swap available (the cgroup's swap limit where one "
                "is set)", "memory_swap_percent"),
    Description("disk.{path}.usagePercent", "%", "gauge",
                "Space in use on the filesystem of path, % (as df counts it)",
                "disk_usage_percent", prometheus_labels=("path",)),
    Description("disk.{path}.usageGB", "GiB", "gauge", "Space in use on the filesystem of path",
                "disk_usage_bytes", _GIB, ("path",)),
    Description("disk.in", "MiB", "counter",
                "Data read from whole disks since the monitor started",
                "disk_read_bytes_total", _MIB),
    Description("disk.out", "MiB", "counter",
                "Data written to whole disks since the monitor started",
                "disk_written_bytes_total", _MIB),
    Description("network.sent", "bytes", "counter",
                "Data sent on every interface but loopback (unless network_loopback) since "
                "the monitor started",
                "network_transmit_bytes_total"),
    Description("network.recv", "bytes", "counter",
                "Data received on every interface but loopback (unless network_loopback) "
                "since the monitor started",
                "network_receive_bytes_total"),
    Description("cpu.energyJoules", "J", "counter",
                "Energy used by the CPU packages (RAPL) since the monitor started",
                "cpu_energy_joules_total"),
    Description("memory.energyJoules", "J", "counter",
                "Energy used by DRAM (RAPL) since the monitor started",
                "memory_energy_joules_total"),
    # Training steps (sysmetrics.steptime): where step time goes, from the step hooks.
    Description("step.seconds", "s", "gauge",
                "Wall-clock seconds per optimizer step, waits included (mean over the steps "
                "completed in the window)", "training_step_seconds", weight="steps"),
    Description("step.dataWaitPercent", "%", "gauge",
                "% of step time spent waiting for the next batch: the loop's fetch where the "
                "callback times it, else all the time between steps", "training_data_wait_percent",
                weight="step_seconds"),
    Description("step.overheadPercent", "%", "gauge",
                "% of step time spent between steps outside the batch fetch (other callbacks, "
                "the progress bar, logging; callbacks that time the fetch only)",
                "training_overhead_percent", weight="step_seconds"),
    Description("step.samplesPerSecond", "samples/s", "gauge",
                "Training samples per second over the whole job (all ranks), where the batch "
                "size is known", "training_samples_per_second",
                weight="step_seconds"),
    Description("step.energyJoules", "J", "gauge",
                "Energy per optimizer step: the growth of every energy counter read "
                "(gpu.{i}, cpu, memory .energyJoules) over the steps completed",
                "training_step_energy_joules", weight="steps"),
    Description("step.maxSeconds", "s", "gauge",
                "Wall-clock seconds of the longest optimizer step completed in the window "
                "(callbacks only; where windows are folded, the mean of their longest)",
                "training_step_max_seconds"),
    Description("step.slowPercent", "%", "gauge",
                "% of the optimizer steps completed in the window that took over 3 times the "
                "running median step (callbacks only; from the 4th sample with steps)",
                "training_slow_steps_percent", weight="steps"),
    # Every rank's steps and its arrival at the gradient all-reduce (sysmetrics.arrival),
    # on its node's samples; then the node's aggregates over its ranks.
    Description("rank.{rank}.step.seconds", "s", "gauge",
                "Rank's wall-clock seconds per optimizer step (mean over its steps in the "
                "window)", "training_rank_step_seconds", prometheus_labels=("rank",),
                weight="steps"),
    Description("rank.{rank}.step.dataWaitPercent", "%", "gauge",
                "% of the rank's step time spent between steps waiting for the next batch",
                "training_rank_data_wait_percent", prometheus_labels=("rank",),
                weight="step_seconds"),
    Description("rank.{rank}.step.forwardSeconds", "s", "gauge",
                "Rank's seconds per step from the batch's start to its backward's start "
                "(forward and loss; on CUDA their launches)", "training_rank_forward_seconds",
                prometheus_labels=("rank",), weight="steps"),
    Description("rank.{rank}.step.arrivalSeconds", "s", "gauge",
                "Rank's seconds from the step's start (the previous step's end) until its "
                "backward produced its last gradient: its arrival at the all-reduce (DDP; "
                "on CUDA from events, from the previous backward's end)",
                "training_rank_arrival_seconds", prometheus_labels=("rank",), weight="steps"),
    Description("rank.{rank}.step.peerWaitPercent", "%", "gauge",
                "% of the rank's step time spent after its last gradient until the "
                "all-reduce completed: waiting for its peers (and the last bucket's transfer)",
                "training_rank_peer_wait_percent", prometheus_labels=("rank",),
                weight="step_seconds"),
    Description("step.rankMaxSeconds", "s", "gauge",
                "The longest mean step among the node's ranks in the window (s)",
                "training_rank_max_step_seconds"),
    Description("step.maxDataWaitPercent", "%", "gauge",
                "The highest data wait share among the node's ranks in the window",
                "training_rank_max_data_wait_percent"),
    Description("step.arrivalSpreadSeconds", "s", "gauge",
                "The node's last rank's arrival at the all-reduce minus its first's (s)",
                "training_arrival_spread_seconds"),
    # GPUs: NVIDIA (NVML), AMD (rocm-smi, amd-smi), Apple (gpu.0 only).
    *_GPU,
    *(replace(d, key=d.key.replace("gpu.", "gpu.process.", 1), prometheus=None,
              scale=1.0, prometheus_labels=(), help=f"{d.help}, of a GPU the process tree uses")
      for d in _GPU),
    Description("gpu.process.{i}.processMemoryAllocatedBytes", "bytes", "gauge",
                "GPU memory held by the process tree's processes", "gpu_process_memory_bytes",
                prometheus_labels=("gpu",), peak=True),
    Description("gpu.{i}.mig.{j}.memoryAllocated", "%", "gauge",
                "% of the MIG instance's memory in use", "gpu_mig_memory_allocated_percent",
                prometheus_labels=("gpu", "mig")),
    Description("gpu.{i}.mig.{j}.memoryAllocatedBytes", "bytes", "gauge",
                "Memory of the MIG instance in use", "gpu_mig_memory_allocated_bytes",
                prometheus_labels=("gpu", "mig"), peak=True),
    # PyTorch's caching allocator, in this process (gpu.{i} in CUDA's numbering; MPS as gpu.0).
    Description("gpu.{i}.torch.allocatedBytes", "bytes", "gauge",
                "GPU memory in PyTorch tensors of this process (torch.cuda.memory_allocated)",
                "gpu_torch_allocated_bytes", prometheus_labels=("gpu",), peak=True),
    Description("gpu.{i}.torch.reservedBytes", "bytes", "gauge",
                "GPU memory PyTorch's caching allocator holds, in tensors or cached "
                "(torch.cuda.memory_reserved)",
                "gpu_torch_reserved_bytes", prometheus_labels=("gpu",), peak=True),
    # AWS Trainium / Inferentia (neuron-monitor).
    Description("trn.{core}.neuroncore_utilization", "%", "gauge", "NeuronCore utilization",
                "neuroncore_utilization_percent", prometheus_labels=("core",)),
    Description("trn.host_total_memory_usage", "bytes", "gauge",
                "Host memory used by the Neuron runtime", "neuron_host_memory_used_bytes",
                peak=True),
    Description("trn.neuron_device_total_memory_usage", "bytes", "gauge",
                "Neuron device memory used", "neuron_device_memory_used_bytes", peak=True),
    Description("trn.host_total_memory_usage.{kind}", "bytes", "gauge",
                "Host memory used by the Neuron runtime, by kind",
                "neuron_host_memory_breakdown_bytes", prometheus_labels=("kind",)),
    Description("trn.{core}.neuroncore_memory_usage.{kind}", "bytes", "gauge",
                "Device memory used by a NeuronCore, by kind",
                "neuroncore_memory_used_bytes", prometheus_labels=("core", "kind")),
    # Google TPUs (tpu-info).
    Description("tpu.{i}.memoryUsageBytes", "bytes", "gauge", "TPU HBM in use",
                "tpu_memory_used_bytes", prometheus_labels=("tpu",), peak=True),
    Description("tpu.{i}.memoryUsage", "%", "gauge", "% of TPU HBM in use",
                "tpu_memory_used_percent", prometheus_labels=("tpu",)),
    Description("tpu.{i}.dutyCycle", "%", "gauge", "% of time the TensorCores were busy",
                "tpu_duty_cycle_percent", prometheus_labels=("tpu",)),
    # Graphcore IPUs (gcipuinfo): the attribute's name with its unit, as W&B names them.
    _ipu("average board temp (C)", "°C", "IPU board temperature",
         "ipu_board_temperature_celsius"),
    _ipu("average die temp (C)", "°C", "IPU die temperature", "ipu_die_temperature_celsius"),
    _ipu("clock (MHz)", "MHz", "IPU clock", "ipu_clock_hertz", 1e6),
    _ipu("ipu power (W)", "W", "IPU power draw", "ipu_power_watts"),
    _ipu("ipu utilisation (%)", "%", "IPU utilization", "ipu_utilization_percent"),
    _ipu("ipu utilisation (session) (%)", "%", "IPU utilization since the session began",
         "ipu_session_utilization_percent"),
    _ipu("link speed (GT/s)", "GT/s", "IPU PCIe link speed",
         "ipu_link_speed_transfers_per_second", 1e9),
    # OpenMetrics endpoints: foreign metrics, not exported again.
    Description("openmetrics.{name}.{metric}.{index}", "the endpoint's", "gauge",
                "A gauge or counter (_total) of endpoint name; index numbers its label sets",
                None),
)  # fmt: skip
"""Every key family the collectors emit."""

_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
_PATTERNS = {"i": "[0-9]+", "j": "[0-9]+", "core": "[0-9]+", "device_id": "[0-9]+",
             "index": "[0-9]+", "path": ".+", "kind": "[^.]+", "name": "[^.]+",
             "metric": "[^.]+", "rank": "[0-9]+"}  # fmt: skip
"""What each placeholder matches: indices are digits, a path anything (dots, slashes)."""


def _compile(d: Description) -> re.Pattern[str]:
    parts = _PLACEHOLDER.split(d.key)  # literal, name, literal, name, ..., literal
    return re.compile(
        "".join(re.escape(p) if n % 2 == 0 else f"(?P<{p}>{_PATTERNS[p]})"
                for n, p in enumerate(parts)),
        re.DOTALL,
    )  # fmt: skip


_BY_ROOT: dict[str, list[tuple[re.Pattern[str], Description]]] = {}
for _d in DESCRIPTIONS:
    _BY_ROOT.setdefault(_d.key.split(".", 1)[0], []).append((_compile(_d), _d))
del _d

_CACHE_LIMIT = 10_000
_cache: dict[str, tuple[Description, dict[str, str]] | None] = {}


def _families(key: str) -> list[tuple[Description, dict[str, str]]]:
    """Every family whose pattern matches ``key`` exactly (one at most, by design)."""
    out = []
    for pattern, d in _BY_ROOT.get(key.split(".", 1)[0], ()):
        m = pattern.fullmatch(key)
        if m is not None:
            out.append((d, m.groupdict()))
    return out


def describe(key: str) -> tuple[Description, dict[str, str]] | None:
    """The family of a concrete key and its placeholder values, or None when undescribed.

    ``describe("gpu.0.gpu")`` is ``(<gpu.{i}.gpu>, {"i": "0"})``. A key ending in ``.max``
    is the monitor's peak companion of the key before it, never a family of its own: it
    gets that key's family and values, or None where that key is undescribed (so a
    Trainium memory kind named ``max`` would read as the peak of its total). Results are
    cached (the cache is emptied when it passes 10,000 keys).
    """
    found = _described(key)
    return None if found is None else (found[0], dict(found[1]))


def _described(key: str) -> tuple[Description, dict[str, str]] | None:
    """:func:`describe` from its cache, the values not copied (the caller keeps them)."""
    try:
        return _cache[key]
    except KeyError:
        base = key[: -len(".max")] if key.endswith(".max") else key
        matches = [] if base.endswith(".max") else _families(base)
        found = matches[0] if matches else None
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = found
        return found


def clamp_percent(key: str, value: float) -> float:
    """``value`` within 0..100 where ``key``'s family is in percent (unit ``%``), else as is.

    The one place percentages are held to their range, for every collector (the monitor
    calls it on every value): a ratio of two counters read a few µs apart (``cpu``, a
    core's busy time) passes 100 by clock-tick noise, and no share of a whole is more
    than the whole. Values a vendor tool gets far wrong are dropped before this, by the
    collector (:mod:`sysmetrics.collectors._values`). The family is looked up in
    :func:`describe`'s cache.
    """
    found = _described(key)
    return min(100.0, max(0.0, value)) if found is not None and found[0].unit == "%" else value


def family(key: str) -> Optional[Description]:
    """The family of ``key`` as it is, or None where it has none.

    Unlike :func:`describe`, a ``.max`` ending is no peak companion here: ``cpu.max`` has
    no family, and a Trainium memory kind named ``max`` is one.
    """
    found = _families(key)
    return found[0][0] if found else None


def weight(key: str) -> Weight:
    """How a sample of ``key`` counts in a mean: its family's :attr:`Description.weight`.

    ``sample`` for an undescribed key and for a ``.max`` companion (a peak, never averaged
    by steps). Looked up in :func:`describe`'s cache.
    """
    found = None if key.endswith(".max") else _described(key)
    return "sample" if found is None else found[0].weight


def aggregation(key: str) -> Aggregation:
    """How the monitor aggregates ``key``: its family's :attr:`Description.aggregation`.

    ``mean`` for an undescribed key. Collectors emit no ``.max`` companions (the monitor
    makes them), so ``key`` is matched as it is (:func:`family`).
    """
    d = family(key)
    return "mean" if d is None else d.aggregation


def counter_rate(before: float, after: float, seconds: float) -> Optional[float]:
    """A counter's increase per second between two samples ``seconds`` apart, or None.

    The one counter-to-rate rule (report, findings and the live line use it). None where
    the rate is unknown: a value or the interval is not a number (NaN), the interval is
    not positive (the clock went back, or no time passed), or the counter decreased (it
    restarted: a new monitor counts from zero again).
    """
    rise = after - before
    if not (seconds > 0 and rise >= 0):  # NaN compares false
        return None
    return rise / seconds


# -- the grammar of concrete keys beyond one family: GPUs, and nodes of a gather ---------

NODES_MIN = "nodes_min"
"""The node segment of a gathered key's minimum over the nodes: ``nodes_min/cpu``."""
NODES_MAX = "nodes_max"
"""The node segment of a gathered key's maximum over the nodes: ``nodes_max/cpu``."""

_NODE = re.compile(r"(?:node([0-9]+)|nodes_min|nodes_max)/")
_GPU_KEY = re.compile(r"gpu\.(process\.)?([0-9]+)\.(.+)", re.DOTALL)


class NodeKey(NamedTuple):
    """A key of a multi-node gather, split: ``node3/gpu.0.gpu`` is ``("node3", 3, "gpu.0.gpu")``."""

    segment: str  # "node3", "nodes_min" or "nodes_max"
    node: Optional[int]  # the node rank; None for nodes_min and nodes_max
    key: str  # the node's own key


def node_key(node: int | str, key: str) -> str:
    """``key`` as a gather names it: ``node3/key`` for node rank 3, ``nodes_min/key``, ...."""
    return f"{node if isinstance(node, str) else f'node{node}'}/{key}"


def split_node(key: str) -> Optional[NodeKey]:
    """The node segment and the node's own key of a gathered key; None for any other key."""
    m = _NODE.match(key)
    if m is None:
        return None
    number = m.group(1)
    return NodeKey(m.group(0)[:-1], None if number is None else int(number), key[m.end() :])


class GpuKey(NamedTuple):
    """A key of one GPU, split: ``gpu.process.1.temp`` is ``("1", True, "temp")``."""

    i: str  # the GPU's index as the key writes it: "0"
    process: bool  # a gpu.process.{i}.* key: the process tree's view of GPU i
    rest: str  # what follows the index: "temp", "mig.1.memoryAllocated"

    @property
    def device_key(self) -> str:
        """The ``gpu.{i}.*`` key of the same reading (a ``gpu.process.{i}.*`` key's twin)."""
        return f"gpu.{self.i}.{self.rest}"


def gpu_key(key: str) -> Optional[GpuKey]:
    """``key`` split as ``gpu.{i}.{rest}`` or ``gpu.process.{i}.{rest}``; None for any other.

    Whether or not the key is described: a GPU key of a newer version or of a custom
    collector is still GPU ``i``'s.
    """
    m = _GPU_KEY.fullmatch(key)
    return None if m is None else GpuKey(m.group(2), m.group(1) is not None, m.group(3))


_BASE_UNITS = {"MiB": "bytes", "GiB": "bytes", "MHz": "Hz", "GT/s": "transfers/s"}
"""The Prometheus base unit of a family whose ``scale`` is not 1, by its unit."""


def markdown_table() -> str:
    """The README's table of Prometheus metrics, one row per exported family."""
    rows = [
        "| Prometheus metric | type | labels | unit | sysmetrics key | help |",
        "|---|---|---|---|---|---|",
    ]
    for d in DESCRIPTIONS:
        if d.prometheus is None:
            continue
        labels = ", ".join(f"`{label}`" for label in d.prometheus_labels)
        unit = d.unit if d.scale == 1.0 else _BASE_UNITS[d.unit]
        rows.append(
            f"| `sysmetrics_{d.prometheus}` | {d.kind} | {labels} | {unit} | `{d.key}` | {d.help} |"
        )
    return "\n".join(rows) + "\n"
