"""Rules over the machine's keys: memory, GPU memory, throttling, disk, swap, unused GPUs."""

from __future__ import annotations

import math
import statistics

from sysmetrics.findings._base import MIN_SAMPLES, Finding, gpu_indices, rates
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


def _over(run: Run, key: str, limit: float) -> tuple[float, list[int]]:
    """The peak of ``key`` (NaN where absent) and the samples above ``limit``."""
    column = run.columns.get(key)
    if column is None:
        return _NAN, []
    held = [v for v in column if v == v]
    return (max(held) if held else _NAN), [j for j, v in enumerate(column) if v > limit]


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
    for i in gpu_indices(run.columns):
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


def throttled(run: Run, i: str) -> dict[str, float]:
    """GPU ``i``'s share of samples held down by each throttle reason that reports."""
    out = {}
    for reason in THROTTLE_REASONS:
        column = run.columns.get(f"gpu.{i}.throttle.{reason}")
        held = [v for v in column if v == v] if column is not None else []
        if len(held) >= MIN_SAMPLES:
            out[reason] = statistics.fmean(held)
    return out


def gpu_throttling(run: Run) -> list[Finding]:
    """``gpu-throttling``: a GPU's clocks held down in more than ``THROTTLE_SHARE`` of samples."""
    out = []
    for i in gpu_indices(run.columns):
        for reason, share in throttled(run, i).items():
            if share > THROTTLE_SHARE:
                column = run.columns[f"gpu.{i}.throttle.{reason}"]
                samples = sum(1 for v in column if v == v)
                out.append(
                    Finding(
                        "gpu-throttling",
                        f"GPU {i} was slowed down by {THROTTLE_REASONS[reason]} in "
                        f"{share:.0%} of the samples.",
                        {"gpu": float(i), "share": share, "samples": float(samples)},
                        run.span([j for j, v in enumerate(column) if v > 0]),
                    )
                )
    return out


def disk_bound(run: Run) -> list[Finding]:
    """``disk-bound``: reading from disk fast while the job's GPUs are idle."""
    gpus = run.job_gpu_percent
    intervals = [
        (j, rate, gpu)
        for j, (rate, gpu) in enumerate(zip(rates(run, "disk.in"), gpus))
        if rate is not None and gpu is not None
    ]
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


def swap_rise(run: Run) -> tuple[float, float, list[int]]:
    """``SWAP_KEY``'s first value, its peak, and the samples above the first by the rise.

    NaNs and no samples where the run has no swap key.
    """
    held = run.present(SWAP_KEY)
    if not held:
        return _NAN, _NAN, []
    column = run.columns[SWAP_KEY]
    first = column[held[0]]
    peak = max(column[j] for j in held)
    return first, peak, [j for j in held if column[j] - first > SWAP_RISE_POINTS]


def swap(run: Run) -> list[Finding]:
    """``swap``: the share of swap in use (``SWAP_KEY``) rose during the run."""
    first, peak, risen = swap_rise(run)
    if not risen:
        return []
    return [
        Finding(
            "swap",
            f"Swap use rose from {first:.0f} % to {peak:.0f} % during the run: memory ran "
            "short and pages went to disk, which slows everything down.",
            {"first_percent": first, "peak_percent": peak},
            run.span(risen),
        )
    ]


def unused_gpu(run: Run) -> list[Finding]:
    """``unused-gpu``: a GPU reported in the run that the job never used."""
    out = []
    for i in gpu_indices(run.columns):
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
