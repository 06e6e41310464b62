"""Rules over the training steps: input-bound, stall, slow-steps.

They read the step keys (``step.seconds``, ``step.dataWaitPercent``) where the run has
them, and the samples' ``step`` and clock otherwise (``sysmetrics.step`` under
``record``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from sysmetrics.descriptions import family, split_node, weight
from sysmetrics.findings._base import (
    MIN_SAMPLES,
    Finding,
    Rule,
    Subject,
    cpus,
    duration,
    gpu_indices,
    host_cpu,
    mean,
    present,
    rates,
    threshold,
    view,
    where,
)
from sysmetrics.findings.cpu import CONTENTION_HOST_PERCENT
from sysmetrics.findings.machine import DISK_READ_MIB_S, SWAP_KEY, THROTTLE_REASONS
from sysmetrics.hang import Where
from sysmetrics.runfile import Run, Span
from sysmetrics.runview import Pace
from sysmetrics.steptime import SLOW_MULTIPLE
from sysmetrics.weights import sample_weights, weighted_mean

WAIT_KEY = "step.dataWaitPercent"
MAX_KEY = "step.maxSeconds"  # a sample's longest step (sysmetrics.steptime)
INPUT_WAIT_PERCENT = 30.0  # %: steps' data wait above this, weighted by their seconds ...
INPUT_SPAN_SHARE = 0.30  # ... over a stretch of at least this share of the steps' seconds
INPUT_CPU_PERCENT = 80.0  # %: the job's cpu above this: saturated (both paths)
INPUT_IDLE_PERCENT = 50.0  # %: the job's cpu below this while waiting: I/O or few workers
INPUT_GPU_PERCENT = 50.0  # %: without step keys, mean GPU utilization below this ...
INPUT_SHARE = 0.30  # ... while cpu > INPUT_CPU_PERCENT in at least this share of samples

STALL_SECONDS = 10.0  # s: the step did not advance for at least this long ...
STALL_SHARE = 0.5  # ... or for this share of the part's duration, at least ...
STALL_MIN_SECONDS = 3.0  # ... this long; either way at least ...
STALL_STEP_TIMES = 10.0  # ... this many times the run's median seconds per step
STALL_IDLE_PERCENT = 10.0  # %: the job's cpu and GPUs below this while stalled: idle
MAX_STALLS = 5  # stall findings at most (the longest)

SLOW_FACTOR = SLOW_MULTIPLE  # a step slower than this many times the run's median is slow ...
SLOW_SHARE = 0.05  # ... in at least this share of the samples (or step changes) ...
SLOW_LOST_SHARE = 0.05  # ... and their time over the median this share of the steps' time
SPIKE_FACTOR = 2.0  # a key whose mean during slow steps is this many times its median ...
SPIKE_POINTS = 20.0  # ... (a % key: this many points above it) coincided with them
SPIKE_DISK_MIB_S = 10.0  # MiB/s: a disk read or write rate that coincides is at least this


@dataclass(frozen=True)
class InputBoundThresholds:
    """``input-bound``'s thresholds (defaults: the module's constants)."""

    wait_percent: float = threshold(
        INPUT_WAIT_PERCENT,
        "INPUT_WAIT_PERCENT",
        "%",
        "with step keys: the steps' data wait above this ...",
    )
    span_share: float = threshold(
        INPUT_SPAN_SHARE,
        "INPUT_SPAN_SHARE",
        "share",
        "... over a stretch of at least this share of the steps' seconds",
    )
    cpu_percent: float = threshold(
        INPUT_CPU_PERCENT,
        "INPUT_CPU_PERCENT",
        "%",
        "the job's cpu above this: saturated (the cause; without step keys)",
    )
    idle_percent: float = threshold(
        INPUT_IDLE_PERCENT,
        "INPUT_IDLE_PERCENT",
        "%",
        "the job's cpu below this while waiting: I/O or few workers",
    )
    disk_read_mib_s: float = threshold(
        DISK_READ_MIB_S,
        "DISK_READ_MIB_S",
        "MiB/s",
        "a disk read rate above this while waiting: the disk",
    )
    gpu_percent: float = threshold(
        INPUT_GPU_PERCENT,
        "INPUT_GPU_PERCENT",
        "%",
        "without step keys: the job's mean GPU utilization below this ...",
    )
    share: float = threshold(
        INPUT_SHARE,
        "INPUT_SHARE",
        "share",
        "... while its cpu is saturated in at least this share of samples",
    )


@dataclass(frozen=True)
class StallThresholds:
    """``stall``'s thresholds (defaults: the module's constants)."""

    seconds: float = threshold(
        STALL_SECONDS, "STALL_SECONDS", "s", "the step did not advance for at least this ..."
    )
    share: float = threshold(
        STALL_SHARE,
        "STALL_SHARE",
        "share",
        "... or for this share of its recording's duration, at least ...",
    )
    min_seconds: float = threshold(
        STALL_MIN_SECONDS, "STALL_MIN_SECONDS", "s", "... this long; either way at least ..."
    )
    step_times: float = threshold(
        STALL_STEP_TIMES,
        "STALL_STEP_TIMES",
        "times",
        "... this many times the run's median seconds per step",
    )
    idle_percent: float = threshold(
        STALL_IDLE_PERCENT,
        "STALL_IDLE_PERCENT",
        "%",
        "the job's cpu and GPUs below this while stalled: a hang",
    )
    max_stalls: float = threshold(
        MAX_STALLS, "MAX_STALLS", "stalls", "stall findings at most (the longest)"
    )


@dataclass(frozen=True)
class SlowStepsThresholds:
    """``slow-steps``' thresholds (defaults: the module's constants)."""

    factor: float = threshold(
        SLOW_FACTOR,
        "SLOW_FACTOR",
        "times",
        "a step slower than this many times the run's median is slow ...",
    )
    share: float = threshold(
        SLOW_SHARE,
        "SLOW_SHARE",
        "share",
        "... in at least this share of the samples (or step changes) ...",
    )
    lost_share: float = threshold(
        SLOW_LOST_SHARE,
        "SLOW_LOST_SHARE",
        "share",
        "... and the slow steps' time over the median at least this share of all the steps' time",
    )
    spike_factor: float = threshold(
        SPIKE_FACTOR,
        "SPIKE_FACTOR",
        "times",
        "a key during the slow steps this many times its median coincided",
    )
    spike_points: float = threshold(
        SPIKE_POINTS, "SPIKE_POINTS", "points", "... a % key: this many points above its median"
    )
    spike_disk_mib_s: float = threshold(
        SPIKE_DISK_MIB_S,
        "SPIKE_DISK_MIB_S",
        "MiB/s",
        "a disk read or write rate that coincides is at least this",
    )


INPUT_BOUND = InputBoundThresholds()
STALL = StallThresholds()
SLOW_STEPS = SlowStepsThresholds()


def _machine(run: Run, samples: Sequence[int]) -> tuple[float, float]:
    """The job's mean ``cpu`` and mean GPU utilization over ``samples`` (NaN: unknown)."""
    gpus = view(run).job_gpu_percent
    return (
        mean(present(run.columns.get("cpu"), samples)),
        mean(g for j in samples if (g := gpus[j]) is not None),
    )


def stall(run: Run, t: StallThresholds = STALL) -> list[Finding]:
    """``stall``: the step did not advance for a long time, and what the job did meanwhile."""
    seen = view(run)
    median = seen.median_step
    longest = sorted(seen.stalls(t), key=lambda s: -s.seconds)[: int(t.max_stalls)]
    found = sorted(longest, key=lambda s: s.first)
    start = seen.start
    segment = seen.segment
    out = []
    for s in found:
        mine = (run.node[s.first], segment[s.first])  # its part's samples only
        samples = [j for j in range(s.first, s.last + 1) if (run.node[j], segment[j]) == mine]
        # The first sample's values cover the time before it, when the step still moved.
        cpu, gpu = _machine(run, samples[1:] or samples)
        r = run.recording[s.first]
        end = run.recordings[r].end if r >= 0 else None
        finished = end is not None and (
            end.get("exit_status") == 0 or end.get("status") == "finished"
        )
        evidence = {
            "step": float(s.step),
            "seconds": s.held,
            "share": s.held / s.part_seconds if s.part_seconds > 0 else 1.0,
            "ended_stalled": float(s.ended and not finished),
        }
        if median is not None:
            evidence["median_step_seconds"] = median
        t0 = run.time[s.first]
        if start is not None and t0 is not None:
            evidence["from_seconds"] = t0 - start
        said = []
        if cpu == cpu:
            evidence["cpu_percent_mean"] = cpu
            said.append(f"the job's CPU was {cpu:.0f} % busy")
        if gpu == gpu:
            evidence["gpu_percent_mean"] = gpu
            said.append(f"its GPUs {gpu:.0f} %")
        idle = cpu == cpu and cpu < t.idle_percent and not gpu >= t.idle_percent
        # A job starved of CPU by other processes looks idle too: where the host's CPUs
        # were saturated meanwhile, its low CPU does not tell a hang from work (issue 32:
        # a 15 s busy evaluation, starved to 0.16 CPUs, was called a hang).
        host = host_cpu(run)
        host_mean = mean(h for j in (samples[1:] or samples) if (h := host[j]) is not None)
        starved = idle and host_mean > CONTENTION_HOST_PERCENT
        if starved:
            evidence["host_cpu_percent_mean"] = host_mean
        meanwhile = ""
        if said:
            work = (
                "work outside the steps (a long evaluation, a checkpoint, data "
                "preparation) or a busy wait"
            )
            hang = (
                "a hang or a deadlock (a collective waiting for a peer, a lock, a stuck "
                "data worker)"
            )
            cause = (
                f"{hang}, or {work} starved of CPU: the host's CPUs were {host_mean:.0f} % "
                "busy with other processes"
                if starved
                else hang
                if idle
                else work
            )
            meanwhile = f"; meanwhile {' and '.join(said)}: likely {cause}"
        into = (
            ""
            if "from_seconds" not in evidence
            else f", from {evidence['from_seconds']:.0f} s into the run"
        )
        ending = ""
        if s.ended:  # to the part's last sample: the run ended there, or it is still stalled
            if end is None:  # live, or killed without an end line
                ending = ", still at the last sample"
            elif finished:
                ending = ", until the run finished"
            else:
                ending = ", until the run ended stalled (killed, failed or timed out)"
        found_live = _found_live(run, s.first, s.last, s.step)
        if found_live:
            evidence["found_live"] = 1.0
        out.append(
            Finding(
                "stall",
                f"The step stayed at {s.step} for {duration(s.held)} "
                f"({evidence['share']:.0%} of the run{into}){ending}{meanwhile}{found_live}.",
                evidence,
                view(run).span(samples),
                Subject("step", str(s.step)),
            )
        )
    return out


def _found_live(run: Run, first: int, last: int, step: int) -> str:
    """Where the hang watch found the ranks (or the training thread) during a stall.

    From the run file's ``stall`` records (:mod:`sysmetrics.hang`): the one of the same
    node at the stall's step, else the first found between the stall's first sample and
    its last. ``""`` where there is none.
    """
    node = run.node[first]
    start, end = run.time[first], run.time[last]
    mine = [r for r in run.stalls if r.get("node") in (node, None)]
    records = [r for r in mine if r.get("step") == step] or [
        r
        for r in mine
        if start is not None
        and end is not None
        and isinstance(r.get("time"), (int, float))
        and start <= r["time"] <= end
    ]
    if not records:
        return ""
    record = records[0]
    ranks = record.get("ranks")
    if isinstance(ranks, str) and ranks:
        return f"; the hang watch found, live, where every rank was: {ranks}"
    kind, what = record.get("kind"), record.get("where")
    if not isinstance(kind, str) or not isinstance(what, str):
        return ""
    said = Where(kind, what).phrase().format(step=step)
    who = "the command" if kind == "kernel" else "the training thread"
    return f"; the hang watch found, live, that {who} {said}"


def _coincided(
    run: Run, slow: Sequence[int], rest: Sequence[int], t: SlowStepsThresholds
) -> tuple[list[str], dict[str, float]]:
    """What was different during the ``slow`` samples from the ``rest``: words and numbers."""
    said: list[str] = []
    evidence: dict[str, float] = {}
    for key, what, name in (("disk.in", "reads", "read"), ("disk.out", "writes", "write")):
        disk = rates(run, key)
        during = mean(r for j in slow if (r := disk[j]) is not None)
        usual = [r for j in rest if (r := disk[j]) is not None]
        base = statistics.median(usual) if usual else 0.0
        if during == during and during >= max(t.spike_factor * base, t.spike_disk_mib_s):
            said.append(f"disk {what} at {during:.0f} MiB/s (elsewhere {base:.0f})")
            evidence[f"disk_{name}_mib_s"] = during
    swap_column = run.columns.get(SWAP_KEY)
    swap_during, swap_rest = present(swap_column, slow), present(swap_column, rest)
    if swap_during and swap_rest:
        rise = mean(swap_during) - statistics.median(swap_rest)
        if rise > 1.0:
            said.append(f"swap use {rise:.0f} points higher")
            evidence["swap_rise_points"] = rise
    for i in gpu_indices(run.columns):
        for reason, words in THROTTLE_REASONS.items():
            column = run.columns.get(f"gpu.{i}.throttle.{reason}")
            share = mean(present(column, slow))
            if share == share and share > mean(present(column, rest)) + 0.25:
                said.append(f"GPU {i} slowed by {words} in {share:.0%} of them")
                evidence[f"gpu{i}_throttle_{reason}_share"] = share
    best: Optional[tuple[float, str, float, float, str]] = None
    for key in run.columns:  # a key's column is made only where it is used
        d = family(key)
        if (
            d is None
            or d.kind != "gauge"
            or key.startswith(("step.", "gpu.process."))
            or ".throttle." in key
            or key == SWAP_KEY
            or split_node(key) is not None
        ):
            continue
        column = run.columns[key]
        during_values, rest_values = present(column, slow), present(column, rest)
        if not during_values or not rest_values:
            continue
        value, usual_value = max(during_values), statistics.median(rest_values)
        if d.unit == "%":
            score = (value - usual_value) / t.spike_points
        else:
            score = value / (t.spike_factor * usual_value) if usual_value > 0 else 0.0
        if score >= 1.0 and (best is None or score > best[0]):
            best = (score, key, value, usual_value, d.unit)
    if best is not None:
        _, key, value, usual_value, unit = best
        said.append(f"{key} peaked at {value:.3g} {unit} (elsewhere {usual_value:.3g})")
        evidence["spike_value"], evidence["spike_usual"] = value, usual_value
    return said, evidence


def slow_steps(run: Run, t: SlowStepsThresholds = SLOW_STEPS) -> list[Finding]:
    """``slow-steps``: steps much slower than the run's median, and what coincided."""
    column = run.columns.get("step.seconds")
    paces: list[Pace]
    steps: dict[int, float]  # the steps each pace stands for, by its first sample
    if column is not None and any(v == v for v in column):
        # A sample's longest step (step.maxSeconds, where the clock kept it) is what is
        # judged: one slow step among many fast ones is not averaged away.
        longest = run.columns.get(MAX_KEY)
        paces = [
            Pace(j, [j], v, m if longest is not None and (m := longest[j]) == m else v)
            for j, v in enumerate(column)
            if v == v
        ]
        closed = sample_weights(run, "steps")
        steps = {p.first: closed[p.first] if closed[p.first] > 0 else 1.0 for p in paces}
        source = "samples"
    else:
        seen = view(run)
        stalls = {s.first for s in seen.stalls(STALL)}  # the stall rule's
        paces = [p for p in seen.paces if p.first not in stalls]
        steps = {p.first: _advanced(run, p) for p in paces}
        source = "step changes of the samples"
    # Each recording's first steps are its warm-up (compilation, the first batch, the
    # workers starting): never slow steps.
    firsts: set[int] = set()
    warm = []
    for p in paces:
        if run.recording[p.first] not in firsts:
            firsts.add(run.recording[p.first])
            continue
        warm.append(p)
    paces = warm
    if len(paces) < MIN_SAMPLES:
        return []
    # The median of the longest each step may have taken, and slow where even the shortest
    # is over the factor: the samples' resolution never makes a step look slow.
    median = statistics.median(p.seconds for p in paces)
    slow = [p for p in paces if p.least > t.factor * median]
    if not median > 0 or not slow or len(slow) < t.share * len(paces):
        return []
    # What they cost: the slow windows' time over the median (at least the slowest
    # step's own excess), of all the steps' time. A slow step or two of an overloaded
    # machine in a long run costs little: not worth a finding (issue 32).
    total = sum(steps[p.first] * p.seconds for p in paces)
    keyed = source == "samples"
    lost = sum(_lost(p, steps[p.first], median, keyed) for p in slow)
    if not total > 0 or lost < t.lost_share * total:
        return []
    during = sorted({j for p in slow for j in p.covered})
    chosen = set(during)
    rest = [j for p in paces for j in p.covered if j not in chosen]
    slowest = max(p.least for p in slow)
    said, evidence = _coincided(run, during, rest, t)
    span = view(run).span([p.first for p in slow])
    coincided = f"; at the same time: {'; '.join(said)}" if said else ""
    return [
        Finding(
            "slow-steps",
            f"Steps took over {t.factor:g} times the run's median {duration(median)} per "
            f"step in {len(slow)} of {len(paces)} {source} (the slowest at least "
            f"{duration(slowest)} per step; "
            f"{where(run, span)}){coincided}.",
            {
                "median_seconds": median,
                "slowest_seconds": slowest,
                "slow_samples": float(len(slow)),
                "samples": float(len(paces)),
                "lost_share": lost / total,
                **evidence,
            },
            span,
        )
    ]


def _advanced(run: Run, p: Pace) -> float:
    """The steps a pace of the samples' steps advanced (to the next step's first sample)."""
    first, last = run.step[p.first], run.step[p.covered[-1]] if p.covered else None
    return float(last - first) if first is not None and last is not None and last > first else 1.0


def _lost(p: Pace, steps: float, median: float, keyed: bool) -> float:
    """The seconds a slow pace of ``steps`` steps took over ``median`` s per step.

    ``keyed`` (a sample's step keys: ``seconds`` its mean, ``least`` its longest step):
    the window's time over the median, at least the longest step's own excess. Else
    (the samples' step changes: ``least`` the least each step took): from the least.
    """
    if keyed:
        return max(steps * (p.seconds - median), p.least - median, 0.0)
    return max(steps * (p.least - median), 0.0)


def _wait_weights(run: Run) -> list[tuple[int, float, float]]:
    """``(sample, step.dataWaitPercent, weight)``: the seconds of steps each sample closed.

    The weight is the key's :attr:`~sysmetrics.descriptions.Description.weight` made a
    number (:func:`sysmetrics.weights.sample_weights`), as the report's table and the
    monitor's readers weigh it: time outside steps counts as no waiting.
    """
    wait = run.columns.get(WAIT_KEY)
    if wait is None:
        return []
    weights = sample_weights(run, weight(WAIT_KEY))
    return [(j, v, w) for j, (v, w) in enumerate(zip(wait, weights)) if v == v and w > 0]


def input_bound(run: Run, t: InputBoundThresholds = INPUT_BOUND) -> list[Finding]:
    """``input-bound``: the loop waited for data a large share of the time.

    From ``step.dataWaitPercent`` where the run has it; otherwise the job's GPUs mostly
    idle while its CPU is saturated.
    """
    keyed = _wait_weights(run)
    if not keyed:
        return _input_bound_machine(run, t)
    if len(keyed) < MIN_SAMPLES:
        return []
    over = [n for n, (_, w, _) in enumerate(keyed) if w > t.wait_percent]
    if not over:
        return []
    stretch = keyed[over[0] : over[-1] + 1]
    share = sum(w for _, _, w in stretch) / sum(w for _, _, w in keyed)
    samples = [j for j, _, _ in stretch]
    wait = weighted_mean(run, WAIT_KEY, samples)
    if share < t.span_share or not wait > t.wait_percent:
        return []
    cpu = mean(present(run.columns.get("cpu"), samples))
    read = rates(run, "disk.in")
    disk = mean(r for j in samples if (r := read[j]) is not None)
    n, source = cpus(run)
    mine = f"the job's {n:g} CPUs" if n is not None and source == "run" else "the job's CPUs"
    evidence = {"wait_percent": wait, "share": share, "samples": float(len(stretch))}
    if cpu == cpu:
        evidence["cpu_percent_mean"] = cpu
    if disk == disk:
        evidence["disk_read_mib_s"] = disk
    if cpu > t.cpu_percent:
        cause = f" while {mine} were saturated ({cpu:.0f} %); more DataLoader workers will not help"
    elif disk > t.disk_read_mib_s:
        cause = f" while reading from disk at {disk:.0f} MiB/s: the disk is likely the limit"
    elif cpu < t.idle_percent:
        cause = (
            f" while {mine} were only {cpu:.0f} % busy: the loader waits on I/O (disk, "
            "network) or has too few workers"
        )
    else:
        cause = ""
    span = view(run).span(samples)
    return [
        Finding(
            "input-bound",
            f"{_steps_words(run, span)} spent {wait:.0f} % of their time waiting for data{cause}.",
            evidence,
            span,
        )
    ]


def _steps_words(run: Run, span: Optional[Span]) -> str:
    """The steps of ``span``, to start a sentence: ``Steps 120-480`` (an en dash)."""
    if span is not None and span.axis == "step":
        return "S" + where(run, span)[1:]
    if span is None:
        return "The steps"
    return f"The steps {where(run, span)}"


def _input_bound_machine(run: Run, t: InputBoundThresholds) -> list[Finding]:
    """``input-bound`` without step keys: the job's GPUs mostly idle, its CPU saturated."""
    cpu = run.columns.get("cpu")
    if cpu is None:
        return []
    pairs = [
        (j, gpu, cpu[j])
        for j, gpu in enumerate(view(run).job_gpu_percent)
        if gpu is not None and cpu[j] == cpu[j]
    ]
    if len(pairs) < MIN_SAMPLES:
        return []
    gpu_mean = statistics.fmean(gpu for _, gpu, _ in pairs)
    busy = [j for j, _, c in pairs if c > t.cpu_percent]
    share = len(busy) / len(pairs)
    if gpu_mean >= t.gpu_percent or share < t.share:
        return []
    return [
        Finding(
            "input-bound",
            f"The GPUs waited on the CPU: they were busy {gpu_mean:.0f} % of the time on "
            f"average while the job's CPU was above {t.cpu_percent:.0f} % in "
            f"{share:.0%} of the samples; data loading or preprocessing is likely the "
            "bottleneck.",
            {
                "gpu_mean_percent": gpu_mean,
                "cpu_saturated_share": share,
                "samples": float(len(pairs)),
            },
            view(run).span(busy),
        )
    ]


INPUT_BOUND_RULE = Rule(
    code="input-bound",
    summary="the loop waited for data a large share of its time, with the likely cause",
    scope="node",
    live=True,
    thresholds=INPUT_BOUND,
    check=input_bound,
    why="Time spent waiting for a batch is time the accelerator idles: the loader, not the "
    "model, sets the pace.",
    how="**with step keys**: `step.dataWaitPercent`, each sample weighted by the seconds of "
    "the steps it closed (the growth of `step` since the previous sample with step keys, "
    "times `step.seconds`: time outside steps weighs nothing, as in the summary table); "
    "over the stretch from the first to the last sample above `wait_percent`, which "
    "holds at least `span_share` of the steps' seconds, the weighted mean is above "
    "`wait_percent`. Cause: the job's `cpu` above `cpu_percent` over the "
    'stretch: "the job\'s CPUs were saturated; more DataLoader workers will not help"; '
    "else the `disk.in` read rate above `disk_read_mib_s`: the disk; else `cpu` below "
    "`idle_percent`: I/O or too few workers. **Without step keys**: over samples where the "
    "job uses a GPU (`gpu.process.{i}.*` present), mean `gpu.{i}.gpu` of the job's GPUs "
    "below `gpu_percent` and `cpu` above `cpu_percent` in at least `share` of them",
)

STALL_RULE = Rule(
    code="stall",
    summary="the step did not advance for a long time, and what the job did meanwhile "
    "(one per stall, the longest)",
    scope="node",
    live=True,
    thresholds=STALL,
    check=stall,
    why="A hang (a collective waiting for a peer, a deadlock) burns the allocation doing "
    "nothing; work outside the steps (evaluation, checkpoints) is time not training.",
    how="from the samples' `step` and clock, per recording and node (the run's view: the "
    "one stall detector, which the report's page draws too): from the sample where a step "
    "was first seen to the one where the next step was (or to the recording's last "
    "sample), at least `seconds`, or at least `share` of the recording and at least "
    "`min_seconds`; either way at least `step_times` times the run's median seconds per "
    "step (of `step.seconds`, else between step changes) per step advanced, so steadily "
    "slow steps are none. Its `seconds` are to the step's last sample (the time it "
    "certainly held). The job's mean `cpu` and GPU utilization over it: both "
    'below `idle_percent`: "a hang or a deadlock" (where the host\'s CPUs were over '
    "contention's `host_percent` meanwhile, a job starved of CPU looks idle too: both "
    'causes are said, "starved of CPU"); else work outside the steps '
    "(evaluation, checkpoint) or a busy wait. A run that ends while stalled is one too: "
    "`ended_stalled` = 1 where its `end` line says it did not finish (killed, failed, "
    'timed out) or it has none yet (live: "still at the last sample"); a run that '
    'finished normally after a long last step says "until the run finished". The '
    "duration is a lower bound: the step may have stopped up to one interval before its "
    "first sample. Its subject is its step: said live once per stall",
)

SLOW_STEPS_RULE = Rule(
    code="slow-steps",
    summary="steps much slower than the run's median, and what coincided",
    scope="node",
    # Only the whole run decides it: the share of time its slow steps cost shrinks as
    # the run goes on, so said live it would be contradicted by the report (issue 32
    # item 6: a transformers run's two 0.8 s steps were 5 % of its first 150 steps).
    live=False,
    thresholds=SLOW_STEPS,
    check=slow_steps,
    why="Occasional slow steps (a disk burst, swapping, throttling, garbage collection) "
    "cost time the mean hides.",
    how="a sample's longest step (`step.maxSeconds`, where the callbacks' clock kept it; "
    "else its mean `step.seconds`) above `factor` times the median `step.seconds` in at "
    "least `share` of the samples with it, where those slow samples' time over the "
    "median (their steps times their mean `step.seconds` less the median, at least the "
    "longest step's own excess) is at least `lost_share` of all the steps' time (a slow "
    "step or two in a long run is not worth a finding: `lost_share` in the evidence); "
    "each recording's first sample with a step "
    "(its warm-up: compilation, the first batch, workers starting) is left out. Without "
    "step keys, from the samples' step changes (stalls left out): a step took at most "
    "the time from its first sample to the next step's, and at least the time to its "
    "last sample; the median is of the most, and a step is slow where even its least is "
    "over `factor` times it, so a step faster than the samples never looks slow. "
    "Coincided, over the samples of the slow steps against the others' median: the "
    "`disk.in` read or `disk.out` write rate at least `spike_factor` times and at least "
    "`spike_disk_mib_s`; `memory.swapPercent` more than 1 point higher; a "
    "`gpu.{i}.throttle.*` reason in 25 % more of them; the gauge key whose peak stands "
    "out most (a % key at least `spike_points` points; any other at least `spike_factor` "
    "times). Without `step.maxSeconds` (a plain loop under `record`), a step.seconds "
    "value is the mean of the steps a sample closed: one slow step among many fast ones "
    "in one interval is diluted",
)
