"""Findings: what a run file says about the run, in plain language.

:func:`read_run` (from :mod:`sysmetrics.runfile`, where the run file's schema is) reads a
run file into a :class:`Run`, one column per key (a day at 1 s with 70 keys is about 50 MB);
:func:`findings` applies the rules below and returns one :class:`Finding` per thing worth
saying. A rule says nothing when its evidence is not in the
run (its keys are missing, or there are too few samples).

Rules and thresholds (each a module-level constant):

- ``input-bound``: the job's GPUs are mostly idle while its CPU is saturated. Over the
  samples where the job uses a GPU (a ``gpu.process.{i}.*`` key is present) and ``cpu`` is
  known, the mean of ``gpu.{i}.gpu`` over the job's GPUs is below ``INPUT_GPU_PERCENT``
  (50 %) and ``cpu`` is above ``INPUT_CPU_PERCENT`` (80 % of the job's available CPUs) in at
  least ``INPUT_SHARE`` (30 %) of those samples.
- ``memory-limit``: ``proc.memory.percent`` (the job's PSS, pages shared by forked workers
  counted once, as % of RAM or of the cgroup limit when lower) peaks above
  ``MEMORY_PERCENT`` (90 %). Never ``proc.memory.rssMB``, which counts shared pages once
  per process (8 workers sharing a dataset read 8 times its size).
- ``gpu-memory-limit``: ``gpu.{i}.memoryAllocated`` (% of the GPU's memory) peaks above
  ``GPU_MEMORY_PERCENT`` (95 %); one finding per GPU.
- ``gpu-throttling``: ``gpu.{i}.throttle.thermal``, ``.powerCap`` or ``.hwSlowdown`` (0/1)
  is 1 in more than ``THROTTLE_SHARE`` (10 %) of the samples that report it; one finding
  per GPU and reason.
- ``disk-bound``: the disk read rate (the change of the ``disk.in`` counter between two
  samples over the seconds between them, MiB/s) is above ``DISK_READ_MIB_S`` (100 MiB/s)
  while the job's GPU utilization is below ``DISK_GPU_PERCENT`` (30 %), in at least
  ``DISK_SHARE`` (20 %) of the intervals where both are known.
- ``straggler-node``: with ``node{k}/cpu`` or ``node{k}/gpu.{i}.gpu`` keys from at least
  ``STRAGGLER_MIN_NODES`` (3) nodes (with two, neither is the odd one out), a node's mean
  (over samples, and over its GPUs) differs from the median of the nodes' means by more
  than ``STRAGGLER_POINTS`` (25 percentage points).
- ``swap``: ``SWAP_KEY`` (``memory.swapPercent``, % of swap in use; absent where there is
  no swap) rose by more than ``SWAP_RISE_POINTS`` (5 percentage points) from its first
  value to its peak.
- ``unused-gpu``: ``gpu.{i}.*`` keys are present but no ``gpu.process.{i}.*`` key ever is:
  the job never used GPU ``i`` (or NVML could not see the job's processes, as in a
  container without the host's PID namespace).

Rules based on means or shares (``input-bound``, ``gpu-throttling``, ``disk-bound``,
``straggler-node``) need at least ``MIN_SAMPLES`` (5) samples (intervals for
``disk-bound``). :mod:`sysmetrics.runfile` says how much :func:`read_run` reads at most.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Callable, Optional

from sysmetrics.descriptions import counter_rate, family, gpu_key, split_node

# The run file's reader lives with its schema; its names stay importable from here.
from sysmetrics.runfile import MAX_KEYS as MAX_KEYS
from sysmetrics.runfile import MAX_LINE_BYTES as MAX_LINE_BYTES
from sysmetrics.runfile import MAX_LINES as MAX_LINES
from sysmetrics.runfile import PathLike as PathLike
from sysmetrics.runfile import Recording as Recording
from sysmetrics.runfile import Run, Span
from sysmetrics.runfile import read_run as read_run

MIN_SAMPLES = 5  # samples (or intervals) a mean- or share-based rule needs

INPUT_GPU_PERCENT = 50.0  # %: mean GPU utilization below this ...
INPUT_CPU_PERCENT = 80.0  # %: ... while the job's CPU is above this ...
INPUT_SHARE = 0.30  # ... in at least this share of the samples

MEMORY_PERCENT = 90.0  # %: proc.memory.percent peak above this
GPU_MEMORY_PERCENT = 95.0  # %: gpu.{i}.memoryAllocated peak above this

THROTTLE_SHARE = 0.10  # share of samples with a throttle reason at 1, above this
THROTTLE_REASONS = {
    "thermal": "thermal slowdown",
    "powerCap": "the power cap",
    "hwSlowdown": "a hardware slowdown or power brake",
}

DISK_READ_MIB_S = 100.0  # MiB/s: disk read rate above this ...
DISK_GPU_PERCENT = 30.0  # %: ... while GPU utilization is below this ...
DISK_SHARE = 0.20  # ... in at least this share of the intervals

STRAGGLER_POINTS = 25.0  # percentage points from the median node's mean
STRAGGLER_MIN_NODES = 3  # nodes needed to name one the odd one out

SWAP_KEY = "memory.swapPercent"  # % of swap in use (MemoryCollector, where there is swap)
SWAP_RISE_POINTS = 5.0  # percentage points from the first value to the peak

_NAN = math.nan
_NODE_FAMILIES = {"cpu": "cpu", "gpu.{i}.gpu": "gpu"}  # per node: the job's CPU, each GPU


@dataclass(frozen=True)
class Finding:
    """One thing the run says: a rule id, a sentence, the numbers behind it, and where."""

    rule: str
    sentence: str
    evidence: dict[str, float] = field(default_factory=dict)
    span: Optional[Span] = None


def input_bound(run: Run) -> list[Finding]:
    """``input-bound``: the job's GPUs mostly idle while its CPU is saturated."""
    cpu = run.columns.get("cpu")
    if cpu is None:
        return []
    pairs = [
        (j, gpu, cpu[j])
        for j, gpu in enumerate(run.job_gpu_percent)
        if gpu is not None and cpu[j] == cpu[j]
    ]
    if len(pairs) < MIN_SAMPLES:
        return []
    gpu_mean = statistics.fmean(gpu for _, gpu, _ in pairs)
    busy = [j for j, _, c in pairs if c > INPUT_CPU_PERCENT]
    share = len(busy) / len(pairs)
    if gpu_mean >= INPUT_GPU_PERCENT or share < INPUT_SHARE:
        return []
    return [
        Finding(
            "input-bound",
            f"The GPUs waited on the CPU: they were busy {gpu_mean:.0f} % of the time on "
            f"average while the job's CPU was above {INPUT_CPU_PERCENT:.0f} % in "
            f"{share:.0%} of the samples; data loading or preprocessing is likely the "
            "bottleneck.",
            {
                "gpu_mean_percent": gpu_mean,
                "cpu_saturated_share": share,
                "samples": float(len(pairs)),
            },
            run.span(busy),
        )
    ]


def _over(run: Run, key: str, limit: float) -> tuple[float, list[int]]:
    """The peak of ``key`` (NaN where absent) and the samples above ``limit``."""
    column = run.columns.get(key)
    if column is None:
        return _NAN, []
    held = [v for v in column if v == v]
    return (max(held) if held else _NAN), [j for j, v in enumerate(column) if v > limit]


def _gpu_indices(keys: Iterable[str]) -> list[str]:
    """Every GPU index with a ``gpu.{i}.*`` key among ``keys``, in numeric order."""
    return sorted({g.i for key in keys if (g := gpu_key(key)) and not g.process}, key=int)


def memory_limit(run: Run) -> list[Finding]:
    """``memory-limit`` and ``gpu-memory-limit``: memory peaks near its limit."""
    out = []
    peak, over = _over(run, "proc.memory.percent", MEMORY_PERCENT)
    if over:
        out.append(
            Finding(
                "memory-limit",
                f"The job's memory peaked at {peak:.0f} % of the memory available to it "
                "(its PSS, shared pages counted once, of RAM or its cgroup limit): it is "
                "close to being killed for lack of memory.",
                {"peak_percent": peak},
                run.span(over),
            )
        )
    for i in _gpu_indices(run.columns):
        peak, over = _over(run, f"gpu.{i}.memoryAllocated", GPU_MEMORY_PERCENT)
        if over:
            out.append(
                Finding(
                    "gpu-memory-limit",
                    f"GPU {i}'s memory peaked at {peak:.0f} % in use: close to running "
                    "out of GPU memory.",
                    {"gpu": float(i), "peak_percent": peak},
                    run.span(over),
                )
            )
    return out


def gpu_throttling(run: Run) -> list[Finding]:
    """``gpu-throttling``: a GPU's clocks held down in more than ``THROTTLE_SHARE`` of samples."""
    out = []
    for i in _gpu_indices(run.columns):
        for reason, words in THROTTLE_REASONS.items():
            column = run.columns.get(f"gpu.{i}.throttle.{reason}")
            held = [v for v in column if v == v] if column is not None else []
            if len(held) < MIN_SAMPLES:
                continue
            share = statistics.fmean(held)
            if share > THROTTLE_SHARE:
                out.append(
                    Finding(
                        "gpu-throttling",
                        f"GPU {i} was slowed down by {words} in {share:.0%} of the samples.",
                        {"gpu": float(i), "share": share, "samples": float(len(held))},
                        run.span([j for j, v in enumerate(column or ()) if v > 0]),
                    )
                )
    return out


def disk_bound(run: Run) -> list[Finding]:
    """``disk-bound``: reading from disk fast while the job's GPUs are idle."""
    read = run.columns.get("disk.in")
    if read is None:
        return []
    clock = [m if m is not None else t for m, t in zip(run.monotonic, run.time)]
    gpus = run.job_gpu_percent
    intervals = []  # (later sample, MiB/s, job GPU %)
    for j in range(1, len(run)):
        t0, t1, gpu = clock[j - 1], clock[j], gpus[j]
        if t0 is None or t1 is None or gpu is None:
            continue
        rate = counter_rate(read[j - 1], read[j], t1 - t0)  # None: a restart, a clock back
        if rate is not None:
            intervals.append((j, rate, gpu))
    if len(intervals) < MIN_SAMPLES:
        return []
    bound = [
        (j, rate) for j, rate, gpu in intervals if rate > DISK_READ_MIB_S and gpu < DISK_GPU_PERCENT
    ]
    share = len(bound) / len(intervals)
    if share < DISK_SHARE:
        return []
    rate_mean = statistics.fmean(rate for _, rate in bound)
    return [
        Finding(
            "disk-bound",
            f"The job read from disk at {rate_mean:.0f} MiB/s on average while its GPUs were "
            f"below {DISK_GPU_PERCENT:.0f} % busy, in {share:.0%} of the intervals: reading "
            "the data is likely the bottleneck.",
            {"read_mib_s_mean": rate_mean, "share": share, "intervals": float(len(intervals))},
            run.span([j for j, _ in bound]),
        )
    ]


def straggler_node(run: Run) -> list[Finding]:
    """``straggler-node``: one node's mean CPU or GPU utilization far from the others'."""
    values: dict[str, dict[int, list[float]]] = {"cpu": {}, "gpu": {}}
    for key, column in run.columns.items():
        gathered = split_node(key)
        if gathered is None or gathered.node is None:  # nodes_min/, nodes_max/, no node's
            continue
        d = family(gathered.key)
        kind = None if d is None else _NODE_FAMILIES.get(d.key)
        if kind is not None:
            values[kind].setdefault(gathered.node, []).extend(v for v in column if v == v)
    out = []
    for kind, nodes in values.items():
        means = {k: statistics.fmean(v) for k, v in nodes.items() if len(v) >= MIN_SAMPLES}
        if len(means) < STRAGGLER_MIN_NODES:
            continue
        median = statistics.median(means.values())
        for node, mean in sorted(means.items()):
            if abs(mean - median) > STRAGGLER_POINTS:
                what = "CPU" if kind == "cpu" else "GPU"
                side = "below" if mean < median else "above"
                out.append(
                    Finding(
                        "straggler-node",
                        f"Node {node}'s {what} utilization averaged {mean:.0f} %, "
                        f"{abs(mean - median):.0f} points {side} the median node "
                        f"({median:.0f} %): it may hold the others back or do different work.",
                        {"node": float(node), "mean_percent": mean, "median_percent": median},
                        run.span(range(len(run))),
                    )
                )
    return out


def swap(run: Run) -> list[Finding]:
    """``swap``: the share of swap in use (``SWAP_KEY``) rose during the run."""
    held = run.present(SWAP_KEY)
    if not held:
        return []
    column = run.columns[SWAP_KEY]
    first = column[held[0]]
    peak = max(column[j] for j in held)
    if peak - first <= SWAP_RISE_POINTS:
        return []
    return [
        Finding(
            "swap",
            f"Swap use rose from {first:.0f} % to {peak:.0f} % during the run: memory ran "
            "short and pages went to disk, which slows everything down.",
            {"first_percent": first, "peak_percent": peak},
            run.span([j for j in held if column[j] - first > SWAP_RISE_POINTS]),
        )
    ]


def unused_gpu(run: Run) -> list[Finding]:
    """``unused-gpu``: a GPU reported in the run that the job never used."""
    out = []
    for i in _gpu_indices(run.columns):
        if i in run.used_gpus:
            continue
        held = sorted(
            {j for key in run.columns if key.startswith(f"gpu.{i}.") for j in run.present(key)}
        )
        out.append(
            Finding(
                "unused-gpu",
                f"The job never used GPU {i} (no process of the job ran on it in "
                f"{len(held)} samples); if it should have, check the device placement, "
                "or whether NVML can see the job's processes (containers).",
                {"gpu": float(i), "samples": float(len(held))},
                run.span(held),
            )
        )
    return out


RULES: tuple[Callable[[Run], list[Finding]], ...] = (
    input_bound,
    memory_limit,
    gpu_throttling,
    disk_bound,
    straggler_node,
    swap,
    unused_gpu,
)


def findings(run: Run) -> list[Finding]:
    """Every finding of every rule in ``RULES`` about ``run``, in rule order."""
    return [finding for rule in RULES for finding in rule(run)]
