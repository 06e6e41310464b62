"""A run as its readers see it: one view, derived once from a raw :class:`~sysmetrics.runfile.Run`.

:mod:`sysmetrics.runfile` reads a run file into raw columns (times, clocks, steps, nodes,
recordings, each key's values); everything derived from them has its one home here, in
:class:`RunView`, read by the findings (:mod:`sysmetrics.findings`), the report's page,
figures and ``--json`` (:mod:`sysmetrics.report`) and the live findings
(:mod:`sysmetrics.live_findings`), so none of them derives a series its own way:

- the **clock** (:attr:`RunView.clock`, s): each node's monotonic clock where every one
  of its samples has it, else its wall time (s since the epoch);
- the **recordings** (:attr:`RunView.segment`, :attr:`RunView.parts`,
  :attr:`RunView.starts`): from the run file's ``run`` markers; in a file written
  before them, guessed from the clock (:func:`segments`: where it goes back, or after a
  gap over ``GAP_INTERVALS`` median intervals and ``GAP_S`` s), the same way for every
  reader. Steps and clocks restart with a recording, and nodes' samples interleave, so
  every comparison of a sample with the one before is made within a *part* (the samples
  of one recording of one node);
- **counter rates** (:meth:`RunView.rates`, per s, through
  :func:`~sysmetrics.descriptions.counter_rate`), the **intervals** between samples;
- the **step timeline** (:attr:`RunView.stretches`, :attr:`RunView.paces`,
  :attr:`RunView.median_step`) and its **stalls** (:meth:`RunView.stalls`: the one
  detector the ``stall`` finding and the page's shaded stalls both read);
- the **job's GPU use** (:attr:`RunView.used_gpus`, :attr:`RunView.job_gpu_percent`),
  the **host's CPU** (:attr:`RunView.host_cpu`), and where a set of samples lies
  (:meth:`RunView.span`: its steps, else its times).

The recording header is the run file's ``run`` line as read (``Run.recordings``: raw,
one home, the monitor's header; nothing derived from it here).

A view is made from a run that no longer grows (a run file read, or a run built afresh
from the live store at each evaluation) and is never changed after: each of its parts is
made on first use and kept. Pure Python, one pass over the samples (or over the keys and
the samples) each: the rules run on it during training.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from functools import cached_property
from typing import NamedTuple, Optional, Protocol

from sysmetrics.descriptions import counter_rate, gpu_key
from sysmetrics.runfile import Run, Span

GAP_INTERVALS = 10.0  # a gap this many median intervals long (and over GAP_S) ...
GAP_S = 5.0  # ... or a clock that goes back starts a new recording (files without markers)


def segments(seconds: Sequence[Optional[float]]) -> list[int]:
    """The first sample of each recording in samples without ``run`` markers: a guess.

    A recording starts where the clock ``seconds`` goes back (another boot) or after a gap
    longer than ``GAP_INTERVALS`` median intervals and ``GAP_S`` s; a sample without a
    clock (None) starts none.
    """
    dt = [None if a is None or b is None else b - a for a, b in zip(seconds, seconds[1:])]
    known = [d for d in dt if d is not None and d > 0]
    median = statistics.median(known) if known else 0.0
    gap = max(GAP_INTERVALS * median, GAP_S)
    return [0, *(i + 1 for i, d in enumerate(dt) if d is not None and (d <= 0 or d > gap))]


class Stretch(NamedTuple):
    """Samples of one part where the step stayed at ``step``.

    From sample ``first`` (where the step was first seen) to ``last`` (the last sample
    with it); ``end`` is the sample that ends the stretch: the next step's first sample,
    or, where the part has no later step (``next_step`` None), the part's last sample
    with a clock. ``seconds`` is the clock from ``first`` to ``end``, ``held`` from
    ``first`` to ``last`` (the step held at least this long), ``part_seconds`` the
    part's duration (s).
    """

    step: int
    first: int
    last: int
    end: int
    next_step: Optional[int]
    seconds: float
    held: float
    part_seconds: float

    @property
    def ended(self) -> bool:
        """Whether its part has no later step (the run ended in it, or is still in it)."""
        return self.next_step is None


class Pace(NamedTuple):
    """The seconds per step from one step change to the next, in the samples' steps."""

    first: int  # the sample where the step appeared (its step is the one timed)
    covered: list[int]  # the samples whose metrics cover that time (after first, to the next)
    seconds: float  # s per step: at most this (from its first sample to the next step's)
    least: float  # s per step at least (to the last sample with the step)


class StallBounds(Protocol):
    """What decides a stall (the ``stall`` rule's thresholds, declared in the findings)."""

    @property
    def seconds(self) -> float:
        """S without a new step, at least ..."""

    @property
    def share(self) -> float:
        """... or this share of the part (0 to 1) ..."""

    @property
    def min_seconds(self) -> float:
        """... and at least this long (s); either way ..."""

    @property
    def step_times(self) -> float:
        """... this many times the median s per step."""


class RunView:
    """The derived facts of one run (one node's, or several nodes' for cross-node rules).

    Each attribute is made once, on first use, from ``run``, which must not change after
    (see the module). ``run`` keeps its raw columns: a view reads ``run.columns``,
    ``run.step``, ``run.time``, ... and derives the rest.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self._rates: dict[str, list[Optional[float]]] = {}

    def __len__(self) -> int:
        return len(self.run)

    # -- the clock and the recordings ------------------------------------------------

    @cached_property
    def clock(self) -> list[Optional[float]]:
        """Each sample's seconds: its node's monotonic clock where all its samples have it.

        Else its wall time (s since the epoch); None where the sample has neither.
        """
        run = self.run
        lacking = {k for k, t in zip(run.node, run.monotonic) if t is None}
        if not lacking:
            return list(run.monotonic)
        return [w if k in lacking else m for k, m, w in zip(run.node, run.monotonic, run.time)]

    @cached_property
    def segment(self) -> list[int]:
        """Each sample's recording: its index in ``run.recordings`` where the file has markers.

        In a file without them, the ordinal of the recording :func:`segments` guesses
        from its node's clock.
        """
        run = self.run
        if run.recordings:
            return list(run.recording)
        out = [0] * len(run)
        by_node: dict[Optional[int], list[int]] = {}
        for j, k in enumerate(run.node):
            by_node.setdefault(k, []).append(j)
        clock = self.clock
        for samples in by_node.values():
            firsts = set(segments([clock[j] for j in samples])[1:])
            r = 0
            for n, j in enumerate(samples):
                r += n in firsts
                out[j] = r
        return out

    @cached_property
    def parts(self) -> list[list[int]]:
        """The samples of each recording of each node, in order: one clock, one step count."""
        out: dict[tuple[Optional[int], int], list[int]] = {}
        for j, key in enumerate(zip(self.run.node, self.segment)):
            out.setdefault(key, []).append(j)
        return list(out.values())

    @cached_property
    def starts(self) -> list[int]:
        """The first sample of each stretch of one recording of one node, in file order."""
        keys = list(zip(self.run.node, self.segment))
        return [0, *(j for j in range(1, len(keys)) if keys[j] != keys[j - 1])] if keys else [0]

    @cached_property
    def intervals(self) -> list[Optional[float]]:
        """For each sample, the seconds since the previous sample of its part (None: first)."""
        out: list[Optional[float]] = [None] * len(self.run)
        clock = self.clock
        for part in self.parts:
            for a, b in zip(part, part[1:]):
                t0, t1 = clock[a], clock[b]
                if t0 is not None and t1 is not None and t1 > t0:
                    out[b] = t1 - t0
        return out

    @cached_property
    def duration(self) -> float:
        """The run's seconds: its recordings' (first to last sample), gaps between left out."""
        clock = self.clock
        total = 0.0
        for part in self.parts:
            timed = [t for j in part if (t := clock[j]) is not None]
            if timed:
                total += timed[-1] - timed[0]
        return total

    @cached_property
    def interval(self) -> Optional[float]:
        """The median seconds between two samples of a part (None: fewer than 2)."""
        known = [d for d in self.intervals if d is not None]
        return statistics.median(known) if known else None

    @cached_property
    def start(self) -> Optional[float]:
        """The first sample's time, s since the epoch (None: no sample has one)."""
        return next((t for t in self.run.time if t is not None), None)

    def span(self, samples: Sequence[int]) -> Optional[Span]:
        """The first and last step of ``samples``, or their first and last time.

        On the step axis where every one of them has a step, else on the time axis (s
        since the epoch) where every one has a time; None otherwise (or for none).
        """
        run = self.run
        steps = [s for j in samples if (s := run.step[j]) is not None]
        if samples and len(steps) == len(samples):
            return Span("step", min(steps), max(steps))
        times = [t for j in samples if (t := run.time[j]) is not None]
        if samples and len(times) == len(samples):
            return Span("time", min(times), max(times))
        return None

    # -- counters, the host's CPU, the job's GPUs -------------------------------------

    def rates(self, key: str) -> list[Optional[float]]:
        """For each sample, the counter ``key``'s rise per second since the previous sample.

        None at a part's first sample and where :func:`counter_rate` says the rate is
        unknown (a counter that went back, no time between).
        """
        made = self._rates.get(key)
        if made is not None:
            return made
        out: list[Optional[float]] = [None] * len(self.run)
        column = self.run.columns.get(key)
        if column is not None:
            clock = self.clock
            for part in self.parts:
                for a, b in zip(part, part[1:]):
                    t0, t1 = clock[a], clock[b]
                    if t0 is not None and t1 is not None:
                        out[b] = counter_rate(column[a], column[b], t1 - t0)
        self._rates[key] = out
        return out

    @cached_property
    def host_cpu(self) -> list[Optional[float]]:
        """For each sample, the host's CPU busy % (the mean of its ``cpu.{i}.cpu_percent``)."""
        run = self.run
        columns = run.columns
        cores = [key for key in columns if core(key) is not None]  # no column for the rest
        if cores and columns.length == len(run) and all(columns.full(key) for key in cores):
            n = len(cores)
            return [sum(values) / n for values in zip(*(columns[key] for key in cores))]
        total = [0.0] * len(run)
        count = [0] * len(run)
        for key in cores:
            for j, v in enumerate(columns[key]):
                if v == v:
                    total[j] += v
                    count[j] += 1
        return [t / c if c else None for t, c in zip(total, count)]

    @cached_property
    def used_gpus(self) -> dict[str, list[bool]]:
        """For each GPU index the job uses at some point: whether it does in each sample.

        The job uses GPU ``i`` in a sample that has a ``gpu.process.{i}.*`` key.
        """
        run = self.run
        used: dict[str, list[bool]] = {}
        full: set[str] = set()  # GPUs the job uses in every sample: no more keys to look at
        columns = run.columns
        for key in columns:  # a column is made only where it is looked at
            gpu = gpu_key(key)
            if gpu is None or not gpu.process or gpu.i in full:
                continue
            if columns.full(key):
                used[gpu.i] = [True] * len(run)
                full.add(gpu.i)
                continue
            flags = used.setdefault(gpu.i, [False] * len(run))
            for j in columns.samples(key):
                flags[j] = True
        return used

    @cached_property
    def job_gpu_percent(self) -> list[Optional[float]]:
        """Per sample, the mean ``gpu.{i}.gpu`` (%) over the GPUs the job uses in it."""
        n = len(self.run)
        out: list[Optional[float]] = [None] * n
        counts = [0] * n
        for i, flags in self.used_gpus.items():
            column = self.run.columns.get(f"gpu.{i}.gpu")
            if column is None:
                continue
            for j, v in enumerate(column):
                if flags[j] and v == v:
                    total = out[j]
                    out[j] = v if total is None else total + v
                    counts[j] += 1
        return [None if t is None else t / c for t, c in zip(out, counts)]

    # -- the steps ----------------------------------------------------------------------

    @cached_property
    def _timeline(self) -> tuple[list[Stretch], list[Pace]]:
        run, clock = self.run, self.clock
        stretches: list[Stretch] = []
        paces: list[Pace] = []
        for part in self.parts:
            timed = [j for j in part if clock[j] is not None]
            # (position in the part, sample, step, seconds) of samples with a step and a clock
            known = [
                (n, j, step, t)
                for n, j in enumerate(part)
                if (step := run.step[j]) is not None and (t := clock[j]) is not None
            ]
            if not known:
                continue
            end_t = clock[timed[-1]]
            assert end_t is not None
            total = end_t - known[0][3]
            first = prev = known[0]
            for item in known[1:]:
                n, j, step, t = item
                if step != first[2]:
                    stretches.append(
                        Stretch(
                            first[2],
                            first[1],
                            prev[1],
                            j,
                            step,
                            t - first[3],
                            prev[3] - first[3],
                            total,
                        )
                    )
                    if step > first[2] and t > first[3]:
                        ds = step - first[2]
                        covered = part[first[0] + 1 : n + 1]
                        paces.append(
                            Pace(first[1], covered, (t - first[3]) / ds, (prev[3] - first[3]) / ds)
                        )
                    first = item
                prev = item
            stretches.append(
                Stretch(
                    first[2],
                    first[1],
                    prev[1],
                    timed[-1],
                    None,
                    end_t - first[3],
                    prev[3] - first[3],
                    total,
                )
            )
        return stretches, paces

    @property
    def stretches(self) -> list[Stretch]:
        """The stretches of unchanged step, part by part (see :class:`Stretch`)."""
        return self._timeline[0]

    @property
    def paces(self) -> list[Pace]:
        """The seconds per step between step changes (see :class:`Pace`)."""
        return self._timeline[1]

    @cached_property
    def median_step(self) -> Optional[float]:
        """The run's median seconds per step: of ``step.seconds``, else between step changes."""
        column = self.run.columns.get("step.seconds")
        keyed = [] if column is None else [v for v in column if v == v]
        values = keyed or [p.seconds for p in self.paces]
        return statistics.median(values) if values else None

    @cached_property
    def pace_median(self) -> Optional[float]:
        """The median seconds per step between the samples' step changes (None: none)."""
        paces = [p.seconds for p in self.paces]
        return statistics.median(paces) if paces else None

    def stalls(self, t: StallBounds) -> list[Stretch]:
        """The stretches that are stalls, in the run's order: the one stall detector.

        A stretch without a new step of ``seconds`` (from its first sample to the next
        step's first, or to its part's end) at least ``t.step_times`` times the median
        seconds per step (times the steps it advanced), and at least ``t.seconds``, or
        at least ``t.share`` of its part and ``t.min_seconds``.
        """
        median = self.median_step
        out = []
        for s in self.stretches:
            steps = 1 if s.next_step is None or s.next_step <= s.step else s.next_step - s.step
            if median is not None and s.seconds < t.step_times * median * steps:
                continue
            if s.seconds >= t.seconds or (
                s.seconds >= t.min_seconds and s.seconds >= t.share * s.part_seconds
            ):
                out.append(s)
        return sorted(out, key=lambda s: s.first)


def core(key: str) -> Optional[str]:
    """The core index of a ``cpu.{i}.cpu_percent`` key, else None."""
    if key.startswith("cpu.") and key.endswith(".cpu_percent"):
        i = key[4 : -len(".cpu_percent")]
        if i.isdigit():
            return i
    return None
