"""Rules over the job's CPU (``cpu``) and the host's: cpu-bound, single-core, contention."""

from __future__ import annotations

from dataclasses import dataclass

from sysmetrics.findings._base import (
    MIN_SAMPLES,
    Finding,
    Rule,
    Subject,
    cpus,
    host_cpu,
    mean,
    threshold,
    view,
    where,
)
from sysmetrics.runfile import Run

CPU_BOUND_PERCENT = 90.0  # %: the job's cpu (of its available CPUs) above this ...
CPU_BOUND_SHARE = 0.5  # ... in at least this share of the samples with cpu

SINGLE_CORE_LOW = 0.75  # CPUs' worth: the job's CPU use between this ...
SINGLE_CORE_HIGH = 1.25  # ... and this (about one CPU) ...
SINGLE_CORE_SHARE = 0.5  # ... in at least this share of the samples, with 2 or more CPUs
SINGLE_CORE_GPU_PERCENT = 80.0  # %: samples where the job's GPUs are this busy are left out
SINGLE_CORE_THREAD_SHARE = 0.8  # share: on a saturated host, the busiest thread's of the job's CPU
BUSIEST_THREAD_KEY = "proc.cpu.busiestThreadPercent"  # % of one CPU, the job's busiest thread

CONTENTION_HOST_PERCENT = 90.0  # %: the host's CPU (mean of its cores) above this ...
CONTENTION_JOB_PERCENT = 60.0  # %: ... while the job's cpu is below this ...
CONTENTION_MIN_CPUS = 0.15  # CPUs' worth: ... and above this (the job works, not sleeps) ...
CONTENTION_SHARE = 0.3  # ... in at least this share of the samples with both
CONTENTION_MEMORY_PERCENT = 90.0  # %: the host's memory above this ...
CONTENTION_JOB_MEMORY_SHARE = 0.5  # ... with the job holding less than this share of it


@dataclass(frozen=True)
class CpuBoundThresholds:
    """``cpu-bound``'s thresholds (defaults: the module's constants)."""

    percent: float = threshold(
        CPU_BOUND_PERCENT, "CPU_BOUND_PERCENT", "%", "the job's cpu (of its CPUs) above this ..."
    )
    share: float = threshold(
        CPU_BOUND_SHARE, "CPU_BOUND_SHARE", "share", "... in at least this share of the samples"
    )


@dataclass(frozen=True)
class SingleCoreThresholds:
    """``single-core``'s thresholds (defaults: the module's constants)."""

    low: float = threshold(
        SINGLE_CORE_LOW, "SINGLE_CORE_LOW", "CPUs", "the job's CPU use between this ..."
    )
    high: float = threshold(
        SINGLE_CORE_HIGH, "SINGLE_CORE_HIGH", "CPUs", "... and this (about one CPU's worth) ..."
    )
    share: float = threshold(
        SINGLE_CORE_SHARE,
        "SINGLE_CORE_SHARE",
        "share",
        "... in at least this share of the samples, with 2 or more CPUs",
    )
    host_percent: float = threshold(
        CONTENTION_HOST_PERCENT,
        "CONTENTION_HOST_PERCENT",
        "%",
        "samples where the host's CPU is above this are left out, unless ...",
    )
    thread_share: float = threshold(
        SINGLE_CORE_THREAD_SHARE,
        "SINGLE_CORE_THREAD_SHARE",
        "share",
        "... the job's busiest thread used at least this share of the job's CPU there",
    )
    gpu_percent: float = threshold(
        SINGLE_CORE_GPU_PERCENT,
        "SINGLE_CORE_GPU_PERCENT",
        "%",
        "samples where the job's GPUs are this busy are left out (the GPU sets the pace)",
    )


@dataclass(frozen=True)
class ContentionThresholds:
    """``contention``'s thresholds (defaults: the module's constants)."""

    host_percent: float = threshold(
        CONTENTION_HOST_PERCENT,
        "CONTENTION_HOST_PERCENT",
        "%",
        "the host's CPU (mean of its cores) above this ...",
    )
    job_percent: float = threshold(
        CONTENTION_JOB_PERCENT,
        "CONTENTION_JOB_PERCENT",
        "%",
        "... while the job's cpu is below this ...",
    )
    min_cpus: float = threshold(
        CONTENTION_MIN_CPUS,
        "CONTENTION_MIN_CPUS",
        "CPUs",
        "... and above this (the job works, not sleeps) ...",
    )
    share: float = threshold(
        CONTENTION_SHARE,
        "CONTENTION_SHARE",
        "share",
        "... in at least this share of the samples with both",
    )
    memory_percent: float = threshold(
        CONTENTION_MEMORY_PERCENT,
        "CONTENTION_MEMORY_PERCENT",
        "%",
        "the host's memory above this ...",
    )
    job_memory_share: float = threshold(
        CONTENTION_JOB_MEMORY_SHARE,
        "CONTENTION_JOB_MEMORY_SHARE",
        "share",
        "... with the job holding less than this share of it",
    )


CPU_BOUND = CpuBoundThresholds()
SINGLE_CORE = SingleCoreThresholds()
CONTENTION = ContentionThresholds()


def _cpus_words(run: Run) -> str:
    n, source = cpus(run)
    if n is None or source != "run":
        return "its CPUs"
    return f"its {n:g} CPU{'s' if n != 1 else ''}"


def cpu_bound(run: Run, t: CpuBoundThresholds = CPU_BOUND) -> list[Finding]:
    """``cpu-bound``: the job keeps the CPUs available to it busy most of the run."""
    held = run.present("cpu")
    if len(held) < MIN_SAMPLES:
        return []
    column = run.columns["cpu"]
    busy = [j for j in held if column[j] > t.percent]
    share = len(busy) / len(held)
    if share < t.share:
        return []
    level = mean(column[j] for j in busy)
    span = view(run).span(busy)
    return [
        Finding(
            "cpu-bound",
            f"The job kept {_cpus_words(run)} {level:.0f} % busy in {share:.0%} of the samples "
            f"({where(run, span)}): it is CPU-bound; more CPUs, or less CPU work per step "
            "(data preprocessing moved off the training loop), would speed it up.",
            {"cpu_percent_mean": level, "share": share, "samples": float(len(held))},
            span,
        )
    ]


def single_core(run: Run, t: SingleCoreThresholds = SINGLE_CORE) -> list[Finding]:
    """``single-core``: the job uses about one CPU's worth while more are available.

    A sample where the host's CPU is saturated (``CONTENTION_HOST_PERCENT``) counts only
    where the job's busiest thread (``proc.cpu.busiestThreadPercent``) used at least
    ``thread_share`` of the job's CPU (``SINGLE_CORE_THREAD_SHARE``): there the job may get
    one CPU's worth because others take the rest (``contention``), and the busiest thread
    tells one thread doing the work from several sharing what others left (issue 32: one
    cause hid another); without the key, such samples are left out. A run with the key
    lacks it in some samples (read at most every 0.45 s, less often for many threads):
    such a saturated sample at one CPU's worth is left out of the share's count, neither
    for nor against. Not where the job's
    GPUs are at least ``gpu_percent`` busy (``SINGLE_CORE_GPU_PERCENT``): one thread
    feeding a saturated GPU is the ordinary GPU job, bound by the GPU (issue 32).
    """
    n, source = cpus(run)
    held = run.present("cpu")
    if n is None or n < 2 or len(held) < MIN_SAMPLES:
        return []
    column = run.columns["cpu"]
    host = host_cpu(run)  # a saturated host has no more CPUs to give: contention ...
    thread = run.columns.get(BUSIEST_THREAD_KEY)  # ... unless one thread did the work
    gpu = view(run).job_gpu_percent  # a saturated GPU sets the pace: not the CPU

    one: list[int] = []
    unread = 0  # samples it would count on a thread reading the run has not there
    for j in held:
        used = column[j] * n / 100
        if not t.low <= used <= t.high or (gpu[j] or 0.0) >= t.gpu_percent:
            continue
        if not (host[j] or 0.0) > t.host_percent:
            one.append(j)
        elif thread is not None:  # without the key at all: left out, as before it existed
            busiest = thread[j]
            if busiest != busiest:  # not read in this sample (every k-th at most)
                unread += 1
            elif busiest / 100 >= t.thread_share * used:
                one.append(j)
    judged = len(held) - unread
    share = len(one) / judged if judged >= MIN_SAMPLES else 0.0
    if share < t.share:
        return []
    level = mean(column[j] for j in one)
    span = view(run).span(one)
    counted = "available to the job" if source == "run" else "on the host"
    return [
        Finding(
            "single-core",
            f"The job used about one CPU's worth ({level:.0f} % of {n:g} CPUs, "
            f"{level * n / 100:.2f} CPUs) in {share:.0%} of the samples ({where(run, span)}) "
            f"while {n:g} were {counted}: one thread does the work (the GIL, a loader "
            "with no workers, a single-threaded library).",
            {"cpu_percent_mean": level, "cpus": n, "share": share, "samples": float(judged)},
            span,
        )
    ]


def contention(run: Run, t: ContentionThresholds = CONTENTION) -> list[Finding]:
    """``contention``: the host's CPU or memory near full while the job gets much less."""
    out = []
    host = host_cpu(run)
    job = run.columns.get("cpu")
    both = (
        [] if job is None else [j for j, h in enumerate(host) if h is not None and job[j] == job[j]]
    )
    if job is not None and len(both) >= MIN_SAMPLES:
        n = cpus(run)[0] or 1.0  # a host CPU % is known: so is the count of its cores
        floor = 100.0 * t.min_cpus / n
        taken = [
            j
            for j in both
            if (h := host[j]) is not None and h > t.host_percent and floor <= job[j] < t.job_percent
        ]
        share = len(taken) / len(both)
        if share >= t.share:
            host_mean = mean(h for j in taken if (h := host[j]) is not None)
            job_mean = mean(job[j] for j in taken)
            span = view(run).span(taken)
            out.append(
                Finding(
                    "contention",
                    f"The host's CPUs were {host_mean:.0f} % busy while the job got "
                    f"{job_mean:.0f} % of {_cpus_words(run)}, in {share:.0%} of the samples "
                    f"({where(run, span)}): other processes on the machine (other tenants, "
                    "another job) took most of the CPU time, and the job likely got less than "
                    "it could use.",
                    {
                        "host_cpu_percent_mean": host_mean,
                        "job_cpu_percent_mean": job_mean,
                        "share": share,
                        "samples": float(len(both)),
                    },
                    span,
                    Subject("resource", "cpu"),
                )
            )
    memory, mine = run.columns.get("memory"), run.columns.get("proc.memory.percent")
    if memory is not None and mine is not None:
        pairs = [j for j, m in enumerate(memory) if m == m and mine[j] == mine[j]]
        full = [
            j
            for j in pairs
            if memory[j] > t.memory_percent and mine[j] < t.job_memory_share * memory[j]
        ]
        if full:
            host_peak = max(memory[j] for j in full)
            job_mean = mean(mine[j] for j in full)
            span = view(run).span(full)
            out.append(
                Finding(
                    "contention",
                    f"The machine's memory was {host_peak:.0f} % in use while the job held "
                    f"{job_mean:.0f} % of it ({where(run, span)}): other processes hold the "
                    "memory, and the job may be short of it or killed for lack of it.",
                    {"host_memory_percent_peak": host_peak, "job_memory_percent_mean": job_mean},
                    span,
                    Subject("resource", "memory"),
                )
            )
    return out


CPU_BOUND_RULE = Rule(
    code="cpu-bound",
    summary="the job kept the CPUs available to it busy",
    scope="node",
    live=True,
    thresholds=CPU_BOUND,
    check=cpu_bound,
    why="A job that uses all of its CPUs is as fast as they let it be: more CPUs, or less CPU "
    "work per step, is what speeds it up.",
    how="the job's `cpu` (% of its CPUs) above `percent` in at least `share` of the samples "
    "with it",
)

SINGLE_CORE_RULE = Rule(
    code="single-core",
    summary="the job used about one CPU's worth while more were available",
    scope="node",
    live=True,
    thresholds=SINGLE_CORE,
    check=single_core,
    why="The other CPUs idle while one thread (the GIL, a loader with no workers) sets the pace.",
    how="with 2 or more CPUs (the `run` line's `cpus`, else the per-core keys): the job's "
    "`cpu` times CPUs / 100 between `low` and `high` in at least `share` of the samples, "
    "leaving out samples where the host's CPU is above `host_percent` (no more CPUs to "
    "give: that is `contention`) unless the job's busiest thread "
    "(`proc.cpu.busiestThreadPercent`, % of one CPU) used at least `thread_share` of the "
    "job's CPUs' worth there (one thread did the work: both are said; such a sample "
    "without a reading of the key, where the run has it, is left out of the count), "
    "and samples "
    "where the job's GPUs (`gpu.{i}.gpu` of the GPUs with `gpu.process.{i}.*` keys) are "
    "at least `gpu_percent` busy (one thread "
    "feeding a saturated GPU: the GPU sets the pace)",
)

CONTENTION_RULE = Rule(
    code="contention",
    summary="the host's CPU (or memory) near full while the job got much less: other tenants",
    scope="node",
    live=True,
    thresholds=CONTENTION,
    check=contention,
    why="Other processes take the machine: the job is slower, or short of memory, for "
    "reasons outside it.",
    how="CPU: the host's busy % (mean of the per-core `cpu.{i}.cpu_percent`) above "
    "`host_percent` while the job's `cpu` is below `job_percent` and at least `min_cpus` "
    "CPUs' worth (a job that sleeps asks for no more), in at least `share` of the samples "
    "with both. Memory: `memory` above `memory_percent` while the job's "
    "`proc.memory.percent` is below `job_memory_share` of it. The run file does not say "
    "whether the job was waiting to run, only that others used the CPUs: the sentence says "
    '"likely"',
)
