"""Rules over the job's CPU (``cpu``) and the host's: cpu-bound, single-core, contention."""

from __future__ import annotations

from sysmetrics.findings._base import MIN_SAMPLES, Finding, cpus, host_cpu, mean, where
from sysmetrics.runfile import Run

CPU_BOUND_PERCENT = 90.0  # %: the job's cpu (of its available CPUs) above this ...
CPU_BOUND_SHARE = 0.5  # ... in at least this share of the samples with cpu

SINGLE_CORE_LOW = 0.75  # CPUs' worth: the job's CPU use between this ...
SINGLE_CORE_HIGH = 1.25  # ... and this (about one CPU) ...
SINGLE_CORE_SHARE = 0.5  # ... in at least this share of the samples, with 2 or more CPUs

CONTENTION_HOST_PERCENT = 90.0  # %: the host's CPU (mean of its cores) above this ...
CONTENTION_JOB_PERCENT = 60.0  # %: ... while the job's cpu is below this ...
CONTENTION_MIN_CPUS = 0.25  # CPUs' worth: ... and above this (the job works, not sleeps) ...
CONTENTION_SHARE = 0.3  # ... in at least this share of the samples with both
CONTENTION_MEMORY_PERCENT = 90.0  # %: the host's memory above this ...
CONTENTION_JOB_MEMORY_SHARE = 0.5  # ... with the job holding less than this share of it


def _cpus_words(run: Run) -> str:
    n, source = cpus(run)
    if n is None or source != "run":
        return "its CPUs"
    return f"its {n:g} CPU{'s' if n != 1 else ''}"


def cpu_bound(run: Run) -> list[Finding]:
    """``cpu-bound``: the job keeps the CPUs available to it busy most of the run."""
    held = run.present("cpu")
    if len(held) < MIN_SAMPLES:
        return []
    column = run.columns["cpu"]
    busy = [j for j in held if column[j] > CPU_BOUND_PERCENT]
    share = len(busy) / len(held)
    if share < CPU_BOUND_SHARE:
        return []
    level = mean(column[j] for j in busy)
    span = run.span(busy)
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


def single_core(run: Run) -> list[Finding]:
    """``single-core``: the job uses about one CPU's worth while more are available.

    Not in samples where the host's CPU is saturated (``CONTENTION_HOST_PERCENT``): there
    the job may get one CPU's worth because others take the rest (``contention``).
    """
    n, source = cpus(run)
    held = run.present("cpu")
    if n is None or n < 2 or len(held) < MIN_SAMPLES:
        return []
    column = run.columns["cpu"]
    host = host_cpu(run)  # a saturated host has no more CPUs to give: contention, not this
    one = [
        j
        for j in held
        if SINGLE_CORE_LOW <= column[j] * n / 100 <= SINGLE_CORE_HIGH
        and not (host[j] or 0.0) > CONTENTION_HOST_PERCENT
    ]
    share = len(one) / len(held)
    if share < SINGLE_CORE_SHARE:
        return []
    level = mean(column[j] for j in one)
    span = run.span(one)
    counted = "available to the job" if source == "run" else "on the host"
    return [
        Finding(
            "single-core",
            f"The job used about one CPU's worth ({level:.0f} % of {n:g} CPUs, "
            f"{level * n / 100:.2f} CPUs) in {share:.0%} of the samples ({where(run, span)}) "
            f"while {n:g} were {counted}: one thread does the work (the GIL, a loader "
            "with no workers, a single-threaded library).",
            {"cpu_percent_mean": level, "cpus": n, "share": share, "samples": float(len(held))},
            span,
        )
    ]


def contention(run: Run) -> list[Finding]:
    """``contention``: the host's CPU or memory near full while the job gets much less."""
    out = []
    host = host_cpu(run)
    job = run.columns.get("cpu")
    both = (
        [] if job is None else [j for j, h in enumerate(host) if h is not None and job[j] == job[j]]
    )
    if job is not None and len(both) >= MIN_SAMPLES:
        n = cpus(run)[0] or 1.0  # a host CPU % is known: so is the count of its cores
        floor = 100.0 * CONTENTION_MIN_CPUS / n
        taken = [
            j
            for j in both
            if (h := host[j]) is not None
            and h > CONTENTION_HOST_PERCENT
            and floor <= job[j] < CONTENTION_JOB_PERCENT
        ]
        share = len(taken) / len(both)
        if share >= CONTENTION_SHARE:
            host_mean = mean(h for j in taken if (h := host[j]) is not None)
            job_mean = mean(job[j] for j in taken)
            span = run.span(taken)
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
                )
            )
    memory, mine = run.columns.get("memory"), run.columns.get("proc.memory.percent")
    if memory is not None and mine is not None:
        pairs = [j for j, m in enumerate(memory) if m == m and mine[j] == mine[j]]
        full = [
            j
            for j in pairs
            if memory[j] > CONTENTION_MEMORY_PERCENT
            and mine[j] < CONTENTION_JOB_MEMORY_SHARE * memory[j]
        ]
        if full:
            host_peak = max(memory[j] for j in full)
            job_mean = mean(mine[j] for j in full)
            span = run.span(full)
            out.append(
                Finding(
                    "contention",
                    f"The machine's memory was {host_peak:.0f} % in use while the job held "
                    f"{job_mean:.0f} % of it ({where(run, span)}): other processes hold the "
                    "memory, and the job may be short of it or killed for lack of it.",
                    {"host_memory_percent_peak": host_peak, "job_memory_percent_mean": job_mean},
                    span,
                )
            )
    return out
