"""``memory-creep``: the job's memory grows steadily across steps, past the warm-up.

The series read: the job's PSS (``proc.memory.pssMB``; its RSS, ``proc.memory.rssMB``,
where the PSS was read in too few samples: the kernel's walk of the pages is read
seldom where it is slow, see :class:`~sysmetrics.collectors.process.ProcessCollector`)
and, where PyTorch's allocator keys exist, each GPU's ``gpu.{i}.torch.allocatedBytes``
and ``reservedBytes``. Over the
samples of the longest recording that have a step, past the warm-up (the first
``CREEP_WARMUP_SHARE`` of its steps) and up to its last step (the samples after it are the
job's exit or idle time), a least-squares line of the memory (MiB) against
the step (:func:`fit`) gives the slope (MiB per step) and its standard error. It fires
where

- the slope is at least ``CREEP_T`` standard errors above zero (the growth is no noise),
- the memory grew, along the line, by at least ``CREEP_MIN_MIB`` MiB and
  ``CREEP_MIN_RISE`` of its value at the window's start (not a few pages), and
- the later half of the window grows at least ``CREEP_STEADY`` times as fast as the
  earlier half (steady: memory that rises and then plateaus, as caches and the
  allocator's warm-up do, is quiet).

With the limit known (the PSS's: ``proc.memory.percent`` is it as a % of the memory
available to the job, RAM or its cgroup limit; a GPU's: ``gpu.{i}.memoryAllocatedBytes``
at ``gpu.{i}.memoryAllocated`` %), the finding projects the line to the limit: the step
it reaches it at, and in how long at the run's median seconds per step. The projection
is a straight line's: a leak that speeds up arrives sooner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Optional

from sysmetrics.findings._base import Finding, Rule, Subject, threshold, view
from sysmetrics.runfile import Run, Span

CREEP_WARMUP_SHARE = 0.25  # share of the steps left out at the start (the warm-up)
CREEP_MIN_SAMPLES = 12  # samples with a step and a value past the warm-up, at least
CREEP_T = 8.0  # slope / its standard error, at least
CREEP_MIN_MIB = 32.0  # MiB the line rises over the window, at least ...
CREEP_MIN_RISE = 0.05  # ... and this share of its value at the window's start
CREEP_STEADY = 0.5  # the later half's slope over the earlier half's, at least

_MIB = 1024.0**2


@dataclass(frozen=True)
class MemoryCreepThresholds:
    """``memory-creep``'s thresholds (defaults: the module's constants)."""

    warmup_share: float = threshold(
        CREEP_WARMUP_SHARE, "CREEP_WARMUP_SHARE", "share",
        "share of the recording's steps left out at its start (the warm-up)",
    )  # fmt: skip
    min_samples: float = threshold(
        CREEP_MIN_SAMPLES, "CREEP_MIN_SAMPLES", "samples",
        "samples with a step and a value past the warm-up, at least",
    )  # fmt: skip
    t: float = threshold(
        CREEP_T, "CREEP_T", "times", "the slope over its standard error, at least ..."
    )
    min_mib: float = threshold(
        CREEP_MIN_MIB, "CREEP_MIN_MIB", "MiB", "... the line's rise over the window, at least ..."
    )
    min_rise: float = threshold(
        CREEP_MIN_RISE, "CREEP_MIN_RISE", "share",
        "... and this share of its value at the window's start ...",
    )  # fmt: skip
    steady: float = threshold(
        CREEP_STEADY, "CREEP_STEADY", "times",
        "... and the later half's slope this many times the earlier half's, at least",
    )  # fmt: skip


MEMORY_CREEP = MemoryCreepThresholds()


class Fit(NamedTuple):
    """A least-squares line ``y = intercept + slope * x`` and the slope's standard error.

    ``stderr`` is ``inf`` with fewer than 3 points (no error to estimate), 0 where every
    point is on the line; ``slope`` is 0 where every ``x`` is the same.
    """

    slope: float
    intercept: float
    stderr: float
    n: int

    def at(self, x: float) -> float:
        """The line's value at ``x``."""
        return self.intercept + self.slope * x


def fit(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """The least-squares line of ``ys`` against ``xs`` (same length, at least one point).

    Centred sums (``math.fsum``), so large steps and values (bytes) lose no precision.
    """
    n = len(xs)
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    dx = [x - mx for x in xs]
    dy = [y - my for y in ys]
    sxx = math.fsum(d * d for d in dx)
    if sxx <= 0:
        return Fit(0.0, my, math.inf, n)
    slope = math.fsum(a * b for a, b in zip(dx, dy)) / sxx
    if n < 3:
        return Fit(slope, my - slope * mx, math.inf, n)
    residual = math.fsum((b - slope * a) ** 2 for a, b in zip(dx, dy))
    return Fit(slope, my - slope * mx, math.sqrt(max(residual, 0.0) / (n - 2) / sxx), n)


class _Series(NamedTuple):
    key: str
    scale: float  # the key's unit in MiB
    what: str  # "The job's memory (PSS)"
    whose: str  # "the job" / "GPU 0"
    subject: Subject


def _series(run: Run) -> list[list[_Series]]:
    """The series to look at, each with its stand-ins: the PSS, else the RSS; each GPU's."""
    columns = run.columns
    out = []
    job = [
        _Series(key, 1.0, what, "the job", Subject("resource", "memory"))
        for key, what in (
            ("proc.memory.pssMB", "The job's memory (PSS)"),
            ("proc.memory.rssMB", "The job's memory (RSS of its processes, summed: its PSS "
             "was read too seldom)"),
        )
        if key in columns
    ]  # fmt: skip
    if job:
        out.append(job)
    ends = (".torch.allocatedBytes", ".torch.reservedBytes")
    gpus = sorted(
        {key.split(".")[1] for key in columns if key.startswith("gpu.") and key.endswith(ends)},
        key=lambda i: int(i) if i.isdigit() else -1,
    )
    for i in gpus:
        for kind, words in (("allocated", "in PyTorch tensors"), ("reserved", "PyTorch reserves")):
            key = f"gpu.{i}.torch.{kind}Bytes"
            if key in columns:
                out.append([_Series(key, 1.0 / _MIB, f"GPU {i}'s memory {words} ({kind})",
                                    f"GPU {i}", Subject("gpu", i, kind))])  # fmt: skip
    return out


def _limit(
    run: Run, series: _Series, samples: Sequence[int]
) -> Optional[tuple[float, Optional[float]]]:
    """The memory limit of ``series`` in MiB, and what is in use of it then (MiB, or None).

    From the last of ``samples`` that says it. The job's: its PSS over
    ``proc.memory.percent`` (read together; of the whole run where the RSS stands in for a
    PSS read too seldom), in use: None (the series itself). A GPU's: its memory in use
    over its % in use, in use: that memory (the device's: every process's, and what
    PyTorch's allocator caches), so the headroom is the device's.
    """
    columns = run.columns
    if series.key == "proc.memory.rssMB":
        samples = range(len(run))
    if series.key in ("proc.memory.pssMB", "proc.memory.rssMB"):
        used, percent, scale = columns.get("proc.memory.pssMB"), "proc.memory.percent", 1.0
    else:
        i = series.subject.id
        used, percent = columns.get(f"gpu.{i}.memoryAllocatedBytes"), f"gpu.{i}.memoryAllocated"
        scale = 1.0 / _MIB
    share = columns.get(percent)
    if used is None or share is None:
        return None
    for j in reversed(samples):
        u, p = used[j], share[j]
        if u == u and p == p and p > 0:
            return u * scale * 100.0 / p, (None if series.scale == 1.0 else u * scale)
    return None


def _round(value: float) -> float:
    """``value`` to 2 significant figures (a projection is no more precise)."""
    if value <= 0:
        return value
    digits = 1 - math.floor(math.log10(value))
    return round(value, digits)


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.2g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.2g} h"
    if seconds >= 60:
        return f"{seconds / 60:.2g} min"
    return f"{seconds:.2g} s"


def _size(mib: float) -> str:
    return f"{mib / 1024:.3g} GiB" if mib >= 1024 else f"{mib:.3g} MiB"


def _window(run: Run, t: MemoryCreepThresholds) -> list[int]:
    """The samples with a step of the recording with most of them, past its warm-up.

    None of the samples at the recording's last step: they may be the job ending (its
    memory freed as it exits: a leaking loop's last sample read 73 MiB after 628 MiB, in
    CI) or idle after training, no step's growth.
    """
    best: list[int] = []
    for part in view(run).parts:
        stepped = [j for j in part if run.step[j] is not None]
        if len(stepped) > len(best):
            best = stepped
    if not best:
        return []
    steps = [s for j in best if (s := run.step[j]) is not None]
    first, last = min(steps), max(steps)
    end = next(n for n, s in enumerate(steps) if s == last)
    start = first + t.warmup_share * (last - first)
    return [j for j, s in zip(best[:end], steps) if s >= start]


def memory_creep(run: Run, t: MemoryCreepThresholds = MEMORY_CREEP) -> list[Finding]:
    """``memory-creep``: memory that grows steadily across steps (one finding per series)."""
    window = _window(run, t)
    if len(window) < t.min_samples:
        return []
    out = []
    for choices in _series(run):
        for series in choices:  # the first with enough samples
            column = run.columns[series.key]
            points = [(j, float(s), v * series.scale) for j in window
                      if (s := run.step[j]) is not None and (v := column[j]) == v]  # fmt: skip
            if len(points) >= t.min_samples:
                break
        else:
            continue
        xs, ys = [p[1] for p in points], [p[2] for p in points]
        line = fit(xs, ys)
        if not (line.slope > 0 and line.slope >= t.t * line.stderr):
            continue
        start = line.at(xs[0])
        rise = line.at(xs[-1]) - start
        if rise < t.min_mib or rise < t.min_rise * max(start, 0.0):
            continue
        half = len(points) // 2
        early, late = fit(xs[:half], ys[:half]), fit(xs[half:], ys[half:])
        if not (early.slope > 0 and late.slope >= t.steady * early.slope):
            continue
        out.append(_finding(run, series, points, line, window))
    return out


def _finding(
    run: Run,
    series: _Series,
    points: Sequence[tuple[int, float, float]],
    line: Fit,
    window: Sequence[int],
) -> Finding:
    first, last = points[0][1], points[-1][1]
    per = 1000.0 if line.slope < 0.1 else 1.0  # MiB per 1,000 steps where per step is tiny
    unit = "per 1,000 steps" if per == 1000.0 else "per step"
    sentence = (
        f"{series.what} grows steadily by {line.slope * per:.3g} MiB {unit} "
        f"(\N{PLUS-MINUS SIGN} {2 * line.stderr * per:.2g}, 95 %; steps {first:,.0f}"
        f"\N{EN DASH}{last:,.0f}, past the warm-up)"
    )
    evidence = {
        "slope_mib_per_step": line.slope,
        "stderr_mib_per_step": line.stderr,
        "first_step": first,
        "last_step": last,
    }
    found = _limit(run, series, [p[0] for p in points])
    limit, used = found if found is not None else (None, None)
    now = line.at(last) if used is None else used
    if limit is not None and limit > 0:
        evidence["limit_mib"] = limit
        if now >= limit:
            sentence += f": {series.whose} is at its {_size(limit)} limit already."
        else:
            steps = (limit - now) / line.slope
            at = last + steps
            evidence["limit_step"] = at
            said = (
                f": at this rate {series.whose} reaches its {_size(limit)} limit around "
                f"step {_round(at):,.0f}"
            )
            median = view(run).median_step
            if median is not None and median > 0:
                evidence["limit_seconds"] = steps * median
                said += f", in about {_duration(steps * median)}"
            sentence += said + "."
    else:
        sentence += "; its limit is unknown (no projection)."
    return Finding("memory-creep", sentence, evidence, Span("step", first, last), series.subject)


MEMORY_CREEP_RULE = Rule(
    code="memory-creep",
    summary="the job's memory (PSS, or a GPU's PyTorch memory) grows steadily across steps",
    scope="node",
    live=False,
    thresholds=MEMORY_CREEP,
    check=memory_creep,
    why="memory that keeps growing step after step is a leak (tensors kept with their "
    "graph, a list of losses, a cache without bound): the job is killed for lack of memory "
    "at a step the projection says, hours in, its work since the last checkpoint lost",
    how="a least-squares line of the memory (MiB) against the step over the longest "
    "recording past its warm-up (the first `CREEP_WARMUP_SHARE` of its steps); it fires where "
    "the slope is `CREEP_T` standard errors above zero, the line rises `CREEP_MIN_MIB` MiB "
    "and `CREEP_MIN_RISE` of its start, and the later half grows at least `CREEP_STEADY` "
    "times as fast as the earlier (memory that plateaus is quiet); with the limit known "
    "(`proc.memory.percent`; a GPU's total memory) the line is projected to it; not said "
    "live: a run's warm-up rises too, and only the whole run shows it plateau",
)
