"""What each finding says to change, and what it would gain (issue 32 item 5).

:func:`advise` gives a finding its :attr:`~sysmetrics.findings.Finding.advice`: a
concrete change suited to its evidence and, where the step anatomy says how much time
the cause took, the gain of removing it::

    Removing the 44 % data wait would make steps up to 1.8x faster (0.1 -> 0.056 s per
    step): raise the DataLoader's num_workers, ...

and the same numbers in its evidence (``gain_times``, ``step_seconds_before``,
``step_seconds_after``). The gain is an upper bound: all of the cause's time removed,
nothing else changed (a fix that removes part of it gains less; one that frees a
resource the rest of the step shares may gain a little more). A share ``s`` of the
steps' time removed makes them ``1 / (1 - s)`` times faster. The steps' time is the mean
seconds per step (``step.seconds`` weighted by the steps each sample closed) over the
finding's samples; without step keys a finding gets its change and no gain.

The advice of each rule is declared here, by its code, so a rule's module keeps to what
it finds; a rule without an entry gets none. The findings' functions
(:func:`sysmetrics.findings.findings` and the rest) apply it to every finding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import NamedTuple, Optional

from sysmetrics.findings._base import Finding, gpu_indices, view
from sysmetrics.findings.training import INPUT_BOUND, STALL
from sysmetrics.findings.verdict import OVERHEAD_KEY
from sysmetrics.runfile import Run
from sysmetrics.weights import sample_weights

ARROW = "->"  # between a step's seconds before and after, as in "0.1 -> 0.056 s"


class Gain(NamedTuple):
    """Removing ``share`` (0 to 1) of the steps' time: ``before`` and ``after`` s per step."""

    share: float
    before: float
    after: float

    @property
    def times(self) -> float:
        """How many times faster the steps would be."""
        return self.before / self.after if self.after > 0 else float("inf")


def _samples(run: Run, finding: Finding) -> list[int]:
    """The samples of ``finding``'s span (all of the run's where it has none)."""
    span = finding.span
    if span is None:
        return list(range(len(run)))
    axis = run.step if span.axis == "step" else run.time
    return [j for j, x in enumerate(axis) if x is not None and span.first <= x <= span.last]


def step_seconds(run: Run, samples: Optional[Sequence[int]] = None) -> Optional[float]:
    """The mean seconds per step over ``samples`` (all where None): None without step keys.

    Each sample's ``step.seconds`` weighted by the steps it closed (the readers' weight).
    """
    column = run.columns.get("step.seconds")
    if column is None:
        return None
    steps = sample_weights(run, "steps")
    total = count = 0.0
    for j in range(len(run)) if samples is None else samples:
        v, n = column[j], steps[j]
        if v == v and n == n and n > 0:
            total += v * n
            count += n
    return total / count if count > 0 else None


def wall_per_step(run: Run) -> Optional[float]:
    """The run's wall-clock seconds per step, stalls and slow steps included (None: none).

    From each part's first sample with a step to its last, over the steps advanced.
    """
    seconds, steps = _wall(run)
    return seconds / steps if steps > 0 else None


def _wall(run: Run) -> tuple[float, float]:
    """The seconds from each part's first sample with a step to its last, and the steps."""
    seen = view(run)
    seconds = steps = 0.0
    for part in seen.parts:
        marked = [(t, s) for j in part if (t := seen.clock[j]) is not None
                  and (s := run.step[j]) is not None]  # fmt: skip
        if len(marked) >= 2 and marked[-1][1] > marked[0][1]:
            seconds += marked[-1][0] - marked[0][0]
            steps += marked[-1][1] - marked[0][1]
    return seconds, steps


def gain(before: Optional[float], share: float) -> Optional[Gain]:
    """Removing ``share`` of ``before`` s per step; None where either is unknown or 0."""
    if before is None or not before > 0 or not 0 < share < 1:
        return None
    return Gain(share, before, before * (1 - share))


def _said(g: Gain, what: str, fix: str) -> tuple[str, dict[str, float]]:
    words = (
        f"Removing {what} would make steps up to {g.times:.2g}x faster "
        f"({g.before:.2g} {ARROW} {g.after:.2g} s per step): {fix}."
    )
    return words, {
        "gain_times": g.times,
        "step_seconds_before": g.before,
        "step_seconds_after": g.after,
    }


Advice = tuple[str, dict[str, float]]


def _input_bound(run: Run, f: Finding) -> Advice:
    e, t = f.evidence, INPUT_BOUND
    cpu, disk = e.get("cpu_percent_mean", float("nan")), e.get("disk_read_mib_s", float("nan"))
    gpus = bool(gpu_indices(run.columns))
    if cpu > t.cpu_percent:
        fix = (
            "make each item's transforms cheaper (decode once and cache the result, smaller "
            "inputs) or move the augmentation to the GPU; more workers will not help, the "
            "CPUs are saturated"
        )
    elif disk > t.disk_read_mib_s:
        fix = "cache the data set in memory or on a faster disk, or read fewer, larger files"
    else:
        fix = (
            "raise the DataLoader's num_workers, with persistent_workers=True and "
            "prefetch_factor=4 (so the next batches load while a step runs)"
            + (", and pin_memory=True for the copy to the GPU" if gpus else "")
        )
    wait = e.get("wait_percent")
    g = None if wait is None else gain(step_seconds(run, _samples(run, f)), wait / 100)
    if g is None:
        return f"To change: {fix}.", {}
    return _said(g, f"the {wait:.0f} % data wait", fix)


def _overhead(run: Run, f: Finding) -> Advice:
    fix = (
        "turn the progress bar's refresh rate down (Lightning: TQDMProgressBar(refresh_rate="
        "50)), log less often, or train on a larger batch (fewer steps for the same data)"
    )
    samples = _samples(run, f)
    column = run.columns.get(OVERHEAD_KEY)
    weights = sample_weights(run, "step_seconds")
    held = [(column[j], weights[j]) for j in samples] if column is not None else []
    held = [(v, w) for v, w in held if v == v and w == w and w > 0]
    if not held:
        return f"To change: {fix}.", {}
    share = sum(v * w for v, w in held) / sum(w for _, w in held)
    g = gain(step_seconds(run, samples), share / 100)
    if g is None:
        return f"To change: {fix}.", {}
    return _said(g, f"the {share:.0f} % between steps", fix)


def _slow_steps(run: Run, f: Finding) -> Advice:
    e = f.evidence
    if "disk_write_mib_s" in e:
        fix = (
            "write checkpoints less often, or asynchronously (a background thread, "
            "torch.distributed.checkpoint.async_save)"
        )
    elif "disk_read_mib_s" in e:
        fix = "find what reads the disk during the slow steps (a cache refill, an evaluation)"
    elif "swap_rise_points" in e:
        fix = "use less memory (a smaller batch, fewer workers) so nothing is swapped out"
    elif any(k.endswith(("_thermal_share", "_powerCap_share", "_hwSlowdown_share")) for k in e):
        fix = "cool the GPU or raise its power limit"
    else:
        fix = "find what the slow steps do (garbage collection, logging, a periodic task)"
    lost = e.get("lost_share")
    g = None if lost is None else gain(step_seconds(run), lost)
    if g is None:
        return f"To change: {fix}.", {}
    return _said(g, f"the slow steps' {lost:.0%} of the steps' time", fix)


def _stall(run: Run, f: Finding) -> Advice:
    e = f.evidence
    idle = e.get("cpu_percent_mean", 100.0) < STALL.idle_percent and not (
        e.get("gpu_percent_mean", 0.0) >= STALL.idle_percent
    )
    if idle and "host_cpu_percent_mean" in e:  # starved of CPU: it may be either
        fix = (
            "run where other processes leave the job its CPUs, then see whether it still "
            "stalls (py-spy dump of each process)"
        )
    elif idle:
        fix = (
            "find what it waited for (py-spy dump of each process); give collectives a "
            "timeout (torch.distributed.init_process_group(timeout=...)) so a hang fails fast"
        )
    else:
        fix = "evaluate less often or on fewer batches, and save checkpoints asynchronously"
    # The wall-clock seconds per step, the stall's included (a step's own seconds may
    # leave out time between steps), against the stall's seconds over all the steps'.
    wall, steps = _wall(run)
    seconds = e.get("seconds", 0.0)
    if not steps > 0 or not wall > seconds > 0:
        return f"To change: {fix}.", {}
    g = gain(wall / steps, seconds / wall)
    if g is None:
        return f"To change: {fix}.", {}
    return _said(g, f"the {seconds:.3g} s stall", fix)


def _fix(text: str) -> Callable[[Run, Finding], Advice]:
    return lambda run, f: (f"To change: {text}.", {})


ADVICE: dict[str, Callable[[Run, Finding], Advice]] = {
    "input-bound": _input_bound,
    "framework-overhead": _overhead,
    "slow-steps": _slow_steps,
    "stall": _stall,
    "cpu-bound": _fix(
        "more CPUs, or less CPU work per step (preprocess the data once, ahead of training)"
    ),
    "single-core": _fix(
        "spread the work over the CPUs: DataLoader workers (num_workers) for the data, "
        "torch.set_num_threads for the math, processes where the GIL holds it"
    ),
    "contention": _fix(
        "run where no other process shares the job's CPUs (a dedicated node, or CPU "
        "pinning with taskset or a cgroup for the others)"
    ),
    "memory-limit": _fix("a smaller batch, fewer DataLoader workers, or a higher memory limit"),
    "gpu-memory-limit": _fix(
        "a smaller batch, activation checkpointing or mixed precision, before it runs out"
    ),
    "gpu-throttling": _fix("cool the GPU or raise its power limit (nvidia-smi -q -d PERFORMANCE)"),
    "unused-gpu": _fix("use every GPU you were given (DDP), or ask for fewer"),
}
"""Each rule's advice, by its code (a rule without an entry gets none)."""


def advise(run: Run, finding: Finding) -> Finding:
    """``finding`` with its advice (what to change, what it would gain) from ``run``.

    ``run`` is the samples the finding was made of (one node's). The gain's numbers go
    into the evidence too. A finding whose rule has no advice is returned as it is.
    """
    make = ADVICE.get(finding.rule)
    if make is None or finding.advice:
        return finding
    words, numbers = make(run, finding)
    return replace(finding, advice=words, evidence={**finding.evidence, **numbers})
