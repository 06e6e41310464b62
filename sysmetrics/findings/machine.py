"""Rules over the machine's keys: memory, GPU memory, throttling, disk, swap, unused GPUs."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from sysmetrics.findings._base import (
    MIN_SAMPLES,
    Finding,
    Rule,
    Subject,
    gpu_indices,
    rates,
    threshold,
    view,
)
from sysmetrics.runfile import Run

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

SWAP_KEY = "memory.swapPercent"  # % of swap in use (MemoryCollector, where there is swap)
SWAP_RISE_POINTS = 5.0  # percentage points from the first value to the peak

_NAN = math.nan


@dataclass(frozen=True)
class MemoryLimitThresholds:
    """``memory-limit``'s threshold (default: the module's constant)."""

    percent: float = threshold(
        MEMORY_PERCENT, "MEMORY_PERCENT", "%", "proc.memory.percent peak above this"
    )


@dataclass(frozen=True)
class GpuMemoryLimitThresholds:
    """``gpu-memory-limit``'s threshold (default: the module's constant)."""

    percent: float = threshold(
        GPU_MEMORY_PERCENT, "GPU_MEMORY_PERCENT", "%", "gpu.{i}.memoryAllocated peak above this"
    )


@dataclass(frozen=True)
class GpuThrottlingThresholds:
    """``gpu-throttling``'s threshold (default: the module's constant)."""

    share: float = threshold(
        THROTTLE_SHARE,
        "THROTTLE_SHARE",
        "share",
        "share of the samples with a throttle reason at 1, above this",
    )


@dataclass(frozen=True)
class DiskBoundThresholds:
    """``disk-bound``'s thresholds (defaults: the module's constants)."""

    read_mib_s: float = threshold(
        DISK_READ_MIB_S, "DISK_READ_MIB_S", "MiB/s", "disk read rate above this ..."
    )
    gpu_percent: float = threshold(
        DISK_GPU_PERCENT,
        "DISK_GPU_PERCENT",
        "%",
        "... while the job's GPU utilization is below this ...",
    )
    share: float = threshold(
        DISK_SHARE, "DISK_SHARE", "share", "... in at least this share of the intervals"
    )


@dataclass(frozen=True)
class SwapThresholds:
    """``swap``'s threshold (default: the module's constant)."""

    rise_points: float = threshold(
        SWAP_RISE_POINTS,
        "SWAP_RISE_POINTS",
        "points",
        "memory.swapPercent's rise from its first value to its peak",
    )


@dataclass(frozen=True)
class UnusedGpuThresholds:
    """``unused-gpu`` has none: a GPU the job never used, in the whole run."""


MEMORY_LIMIT = MemoryLimitThresholds()
GPU_MEMORY_LIMIT = GpuMemoryLimitThresholds()
GPU_THROTTLING = GpuThrottlingThresholds()
DISK_BOUND = DiskBoundThresholds()
SWAP = SwapThresholds()
UNUSED_GPU = UnusedGpuThresholds()


def _over(run: Run, key: str, limit: float) -> tuple[float, list[int]]:
    """The peak of ``key`` (NaN where absent) and the samples above ``limit``."""
    column = run.columns.get(key)
    if column is None:
        return _NAN, []
    held = [v for v in column if v == v]
    return (max(held) if held else _NAN), [j for j, v in enumerate(column) if v > limit]


def memory_limit(run: Run, t: MemoryLimitThresholds = MEMORY_LIMIT) -> list[Finding]:
    """``memory-limit``: the job's memory peaks near its limit."""
    peak, over = _over(run, "proc.memory.percent", t.percent)
    if not over:
        return []
    return [
        Finding(
            "memory-limit",
            f"The job's memory peaked at {peak:.0f} % of the memory available to it "
            "(its PSS, shared pages counted once, of RAM or its cgroup limit): it is "
            "close to being killed for lack of memory.",
            {"peak_percent": peak},
            view(run).span(over),
        )
    ]


def gpu_memory_limit(run: Run, t: GpuMemoryLimitThresholds = GPU_MEMORY_LIMIT) -> list[Finding]:
    """``gpu-memory-limit``: a GPU's memory peaks near full (one finding per GPU)."""
    out = []
    for i in gpu_indices(run.columns):
        peak, over = _over(run, f"gpu.{i}.memoryAllocated", t.percent)
        if over:
            out.append(
                Finding(
                    "gpu-memory-limit",
                    f"GPU {i}'s memory peaked at {peak:.0f} % in use: close to running "
                    "out of GPU memory.",
                    {"gpu": float(i), "peak_percent": peak},
                    view(run).span(over),
                    Subject("gpu", i),
                )
            )
    return out


def throttled(run: Run, i: str) -> dict[str, float]:
    """GPU ``i``'s share of samples held down by each throttle reason that reports."""
    out = {}
    for reason in THROTTLE_REASONS:
        column = run.columns.get(f"gpu.{i}.throttle.{reason}")
        held = [v for v in column if v == v] if column is not None else []
        if len(held) >= MIN_SAMPLES:
            out[reason] = statistics.fmean(held)
    return out


def gpu_throttling(run: Run, t: GpuThrottlingThresholds = GPU_THROTTLING) -> list[Finding]:
    """``gpu-throttling``: a GPU's clocks held down in more than ``t.share`` of samples."""
    out = []
    for i in gpu_indices(run.columns):
        for reason, share in throttled(run, i).items():
            if share > t.share:
                column = run.columns[f"gpu.{i}.throttle.{reason}"]
                samples = sum(1 for v in column if v == v)
                out.append(
                    Finding(
                        "gpu-throttling",
                        f"GPU {i} was slowed down by {THROTTLE_REASONS[reason]} in "
                        f"{share:.0%} of the samples.",
                        {"gpu": float(i), "share": share, "samples": float(samples)},
                        view(run).span([j for j, v in enumerate(column) if v > 0]),
                        Subject("gpu", i, reason),
                    )
                )
    return out


def disk_bound(run: Run, t: DiskBoundThresholds = DISK_BOUND) -> list[Finding]:
    """``disk-bound``: reading from disk fast while the job's GPUs are idle."""
    gpus = view(run).job_gpu_percent
    intervals = [
        (j, rate, gpu)
        for j, (rate, gpu) in enumerate(zip(rates(run, "disk.in"), gpus))
        if rate is not None and gpu is not None
    ]
    if len(intervals) < MIN_SAMPLES:
        return []
    bound = [(j, rate) for j, rate, gpu in intervals if rate > t.read_mib_s and gpu < t.gpu_percent]
    share = len(bound) / len(intervals)
    if share < t.share:
        return []
    rate_mean = statistics.fmean(rate for _, rate in bound)
    return [
        Finding(
            "disk-bound",
            f"The job read from disk at {rate_mean:.0f} MiB/s on average while its GPUs were "
            f"below {t.gpu_percent:.0f} % busy, in {share:.0%} of the intervals: reading "
            "the data is likely the bottleneck.",
            {"read_mib_s_mean": rate_mean, "share": share, "intervals": float(len(intervals))},
            view(run).span([j for j, _ in bound]),
        )
    ]


def swap_rise(run: Run, rise: float = SWAP_RISE_POINTS) -> tuple[float, float, list[int]]:
    """``SWAP_KEY``'s first value, its peak, and the samples above the first by ``rise``.

    NaNs and no samples where the run has no swap key.
    """
    held = run.present(SWAP_KEY)
    if not held:
        return _NAN, _NAN, []
    column = run.columns[SWAP_KEY]
    first = column[held[0]]
    peak = max(column[j] for j in held)
    return first, peak, [j for j in held if column[j] - first > rise]


def swap(run: Run, t: SwapThresholds = SWAP) -> list[Finding]:
    """``swap``: the share of swap in use (``SWAP_KEY``) rose during the run."""
    first, peak, risen = swap_rise(run, t.rise_points)
    if not risen:
        return []
    return [
        Finding(
            "swap",
            f"Swap use rose from {first:.0f} % to {peak:.0f} % during the run: memory ran "
            "short and pages went to disk, which slows everything down.",
            {"first_percent": first, "peak_percent": peak},
            view(run).span(risen),
        )
    ]


def unused_gpu(run: Run, t: UnusedGpuThresholds = UNUSED_GPU) -> list[Finding]:
    """``unused-gpu``: a GPU reported in the run that the job never used."""
    out = []
    for i in gpu_indices(run.columns):
        if i in view(run).used_gpus:
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
                view(run).span(held),
                Subject("gpu", i),
            )
        )
    return out


MEMORY_LIMIT_RULE = Rule(
    code="memory-limit",
    summary="the job's memory is close to its limit",
    scope="node",
    live=True,
    thresholds=MEMORY_LIMIT,
    check=memory_limit,
    why="Past its limit the job is killed (the OOM killer, its cgroup) and its work since "
    "the last checkpoint lost.",
    how="`proc.memory.percent` (the job's PSS, shared pages counted once, of RAM or the "
    "cgroup limit when lower) peaks above `percent`",
)

GPU_MEMORY_LIMIT_RULE = Rule(
    code="gpu-memory-limit",
    summary="a GPU's memory is nearly full (one per GPU)",
    scope="node",
    live=True,
    thresholds=GPU_MEMORY_LIMIT,
    check=gpu_memory_limit,
    why="A larger batch, a longer sequence or fragmentation next ends in an out-of-memory error.",
    how="`gpu.{i}.memoryAllocated` peaks above `percent`",
)

GPU_THROTTLING_RULE = Rule(
    code="gpu-throttling",
    summary="a GPU's clocks were held down, and why (one per GPU and reason)",
    scope="node",
    live=True,
    thresholds=GPU_THROTTLING,
    check=gpu_throttling,
    why="A throttled GPU computes slower than it can: cooling, power limits or hardware "
    "are the bottleneck, not the code.",
    how="`gpu.{i}.throttle.thermal`, `.powerCap` or `.hwSlowdown` is 1 in more than "
    "`share` of the samples that report it (at least 5)",
)

DISK_BOUND_RULE = Rule(
    code="disk-bound",
    summary="the job reads from disk fast while its GPUs idle",
    scope="node",
    live=True,
    thresholds=DISK_BOUND,
    check=disk_bound,
    why="The GPUs wait for the data to be read: a faster disk, caching or fewer reads "
    "speeds the run up.",
    how="the read rate from the `disk.in` counter (MiB between two samples / s between "
    "them) above `read_mib_s` while the job's GPU utilization is below `gpu_percent`, in "
    "at least `share` of the intervals (at least 5); an interval where the counter goes "
    "down is skipped",
)

SWAP_RULE = Rule(
    code="swap",
    summary="swap use rose during the run",
    scope="node",
    live=True,
    thresholds=SWAP,
    check=swap,
    why="Pages going to disk slow everything down; memory is short.",
    how="`memory.swapPercent` (`SWAP_KEY`, % of swap in use; absent where there is no "
    "swap) rises from its first value to its peak by more than `rise_points`",
)

UNUSED_GPU_RULE = Rule(
    code="unused-gpu",
    summary="a GPU in the run that the job never used (one per GPU)",
    scope="node",
    live=False,
    thresholds=UNUSED_GPU,
    check=unused_gpu,
    why="A GPU paid for and idle: the device placement is wrong, or NVML cannot see the "
    "job's processes (containers). Not said live: a GPU not used yet may be used later "
    "(a job that starts on GPU 1 after its data is loaded); only the whole run decides.",
    how="`gpu.{i}.*` present but `gpu.process.{i}.*` never; also what a container shows "
    "where NVML cannot see the job's processes",
)
