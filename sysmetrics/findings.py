"""Findings: what a run file says about the run, in plain language.

:func:`read_run` reads a run file (JSON lines written by :class:`sysmetrics.sinks.jsonl.JsonlSink`)
into :class:`Record` objects; :func:`findings` applies the rules below and returns one
:class:`Finding` per thing worth saying. A rule says nothing when its evidence is not in the
run (its keys are missing, or there are too few samples).

Rules and thresholds (each a module-level constant):

- ``input-bound``: the job's GPUs are mostly idle while its CPU is saturated. Over the
  samples where the job uses a GPU (a ``gpu.process.{i}.*`` key is present) and ``cpu`` is
  known, the mean of ``gpu.{i}.gpu`` over the job's GPUs is below ``INPUT_GPU_PERCENT``
  (50 %) and ``cpu`` is above ``INPUT_CPU_PERCENT`` (80 % of the job's available CPUs) in at
  least ``INPUT_SHARE`` (30 %) of those samples.
- ``memory-limit``: ``proc.memory.percent`` (% of RAM, or of the cgroup limit when lower)
  peaks above ``MEMORY_PERCENT`` (90 %).
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
- ``swap``: sysmetrics reports no swap key today; this rule reads ``SWAP_KEY``
  (``memory.swapPercent``, % of swap in use) where a run has it, and speaks when it rose by
  more than ``SWAP_RISE_POINTS`` (5 percentage points) from its first value to its peak.
- ``unused-gpu``: ``gpu.{i}.*`` keys are present but no ``gpu.process.{i}.*`` key ever is:
  the job never used GPU ``i`` (or NVML could not see the job's processes, as in a
  container without the host's PID namespace).

Rules based on means or shares (``input-bound``, ``gpu-throttling``, ``disk-bound``,
``straggler-node``) need at least ``MIN_SAMPLES`` (5) samples (intervals for
``disk-bound``). :func:`read_run` reads at most ``MAX_LINES`` (1,000,000) lines and skips
any line over ``MAX_LINE_BYTES`` (1 MiB) or that is not a run-file record.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

MAX_LINES = 1_000_000  # lines read from a run file at most (junk lines count)
MAX_LINE_BYTES = 1 << 20  # bytes; a longer line is skipped

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

SWAP_KEY = "memory.swapPercent"  # % of swap in use; not reported by sysmetrics today
SWAP_RISE_POINTS = 5.0  # percentage points from the first value to the peak

_GPU_KEY = re.compile(r"gpu\.(\d+)\.")
_GPU_PROCESS_KEY = re.compile(r"gpu\.process\.(\d+)\.")
_NODE_KEY = re.compile(r"node(\d+)/(cpu|gpu\.\d+\.gpu)")


@dataclass(frozen=True)
class Record:
    """One sample of a run file: only its finite numeric metrics are kept.

    ``time`` is s since the epoch, ``monotonic`` s on the sampler's monotonic clock, ``step``
    the training step (``None`` where unknown).
    """

    time: Optional[float]
    monotonic: Optional[float]
    step: Optional[int]
    metrics: dict[str, float]


@dataclass(frozen=True)
class Span:
    """Where a finding held: ``axis`` is ``"step"`` or ``"time"`` (s since the epoch)."""

    axis: str
    first: float
    last: float


@dataclass(frozen=True)
class Finding:
    """One thing the run says: a rule id, a sentence, the numbers behind it, and where."""

    rule: str
    sentence: str
    evidence: dict[str, float] = field(default_factory=dict)
    span: Optional[Span] = None


def _number(value: Any) -> Optional[float]:
    """``value`` as a finite float, or ``None`` for anything else (bools included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _record(raw: bytes) -> Optional[Record]:
    """One line as a :class:`Record`, or ``None`` where it is not a run-file record."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        return None
    step = data.get("step")
    metrics = {}
    for key, value in data["metrics"].items():
        number = _number(value)
        if number is not None:
            metrics[key] = number
    return Record(
        time=_number(data.get("time")),
        monotonic=_number(data.get("monotonic")),
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        metrics=metrics,
    )


def read_run(path: PathLike, max_lines: int = MAX_LINES) -> list[Record]:
    """The records of the run file at ``path``, in file order.

    Reads at most ``max_lines`` lines; a line over ``MAX_LINE_BYTES`` bytes, or one that is
    not a JSON object with a ``metrics`` object, is skipped. Junk never raises; a file that
    cannot be opened does (``OSError``).
    """
    records: list[Record] = []
    with open(path, "rb") as file:
        for _ in range(max_lines):
            raw = file.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            if len(raw) > MAX_LINE_BYTES:  # too long: skip to the end of the line
                while raw and not raw.endswith(b"\n"):
                    raw = file.readline(MAX_LINE_BYTES)
                continue
            record = _record(raw)
            if record is not None:
                records.append(record)
    return records


def _span(records: Sequence[Record]) -> Optional[Span]:
    """The first and last step of ``records``, or their first and last time."""
    steps = [r.step for r in records if r.step is not None]
    if records and len(steps) == len(records):
        return Span("step", min(steps), max(steps))
    times = [r.time for r in records if r.time is not None]
    if records and len(times) == len(records):
        return Span("time", min(times), max(times))
    return None


def _used_gpus(record: Record) -> set[str]:
    """The GPU indices the job uses in this sample (those with ``gpu.process.{i}.*``)."""
    return {m.group(1) for key in record.metrics if (m := _GPU_PROCESS_KEY.match(key))}


def _job_gpu_percent(record: Record) -> Optional[float]:
    """The mean ``gpu.{i}.gpu`` (%) over the GPUs the job uses in this sample."""
    values = [record.metrics.get(f"gpu.{i}.gpu") for i in _used_gpus(record)]
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def input_bound(records: Sequence[Record]) -> list[Finding]:
    """``input-bound``: the job's GPUs mostly idle while its CPU is saturated."""
    pairs = [
        (r, gpu, r.metrics["cpu"])
        for r in records
        if (gpu := _job_gpu_percent(r)) is not None and "cpu" in r.metrics
    ]
    if len(pairs) < MIN_SAMPLES:
        return []
    gpu_mean = statistics.fmean(gpu for _, gpu, _ in pairs)
    busy = [r for r, _, cpu in pairs if cpu > INPUT_CPU_PERCENT]
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
            _span(busy),
        )
    ]


def _peak(records: Sequence[Record], key: str) -> Optional[tuple[float, Record]]:
    """The highest value of ``key`` and the record that holds it."""
    held = [(r.metrics[key], r) for r in records if key in r.metrics]
    return max(held, key=lambda pair: pair[0]) if held else None


def _gpu_indices(records: Iterable[Record]) -> list[str]:
    """Every GPU index with a ``gpu.{i}.*`` key in the run, in numeric order."""
    found = {m.group(1) for r in records for key in r.metrics if (m := _GPU_KEY.match(key))}
    return sorted(found, key=int)


def memory_limit(records: Sequence[Record]) -> list[Finding]:
    """``memory-limit`` and ``gpu-memory-limit``: memory peaks near its limit."""
    out = []
    peak = _peak(records, "proc.memory.percent")
    if peak is not None and peak[0] > MEMORY_PERCENT:
        over = [r for r in records if r.metrics.get("proc.memory.percent", 0) > MEMORY_PERCENT]
        out.append(
            Finding(
                "memory-limit",
                f"The job's memory peaked at {peak[0]:.0f} % of the memory available to it "
                "(RAM or its cgroup limit): it is close to being killed for lack of memory.",
                {"peak_percent": peak[0]},
                _span(over),
            )
        )
    for i in _gpu_indices(records):
        key = f"gpu.{i}.memoryAllocated"
        peak = _peak(records, key)
        if peak is not None and peak[0] > GPU_MEMORY_PERCENT:
            over = [r for r in records if r.metrics.get(key, 0) > GPU_MEMORY_PERCENT]
            out.append(
                Finding(
                    "gpu-memory-limit",
                    f"GPU {i}'s memory peaked at {peak[0]:.0f} % in use: close to running "
                    "out of GPU memory.",
                    {"gpu": float(i), "peak_percent": peak[0]},
                    _span(over),
                )
            )
    return out


def gpu_throttling(records: Sequence[Record]) -> list[Finding]:
    """``gpu-throttling``: a GPU's clocks held down in more than ``THROTTLE_SHARE`` of samples."""
    out = []
    for i in _gpu_indices(records):
        for reason, words in THROTTLE_REASONS.items():
            key = f"gpu.{i}.throttle.{reason}"
            held = [r for r in records if key in r.metrics]
            if len(held) < MIN_SAMPLES:
                continue
            share = statistics.fmean(r.metrics[key] for r in held)
            if share > THROTTLE_SHARE:
                out.append(
                    Finding(
                        "gpu-throttling",
                        f"GPU {i} was slowed down by {words} in {share:.0%} of the samples.",
                        {"gpu": float(i), "share": share, "samples": float(len(held))},
                        _span([r for r in held if r.metrics[key] > 0]),
                    )
                )
    return out


def _clock(record: Record) -> Optional[float]:
    return record.monotonic if record.monotonic is not None else record.time


def disk_bound(records: Sequence[Record]) -> list[Finding]:
    """``disk-bound``: reading from disk fast while the job's GPUs are idle."""
    intervals = []  # (later record, MiB/s, job GPU %)
    for before, after in zip(records, records[1:]):
        t0, t1 = _clock(before), _clock(after)
        read0, read1 = before.metrics.get("disk.in"), after.metrics.get("disk.in")
        gpu = _job_gpu_percent(after)
        if t0 is None or t1 is None or read0 is None or read1 is None or gpu is None:
            continue
        if t1 <= t0 or read1 < read0:  # clock went back, or a new monitor restarted the count
            continue
        intervals.append((after, (read1 - read0) / (t1 - t0), gpu))
    if len(intervals) < MIN_SAMPLES:
        return []
    bound = [
        (r, rate) for r, rate, gpu in intervals if rate > DISK_READ_MIB_S and gpu < DISK_GPU_PERCENT
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
            _span([r for r, _ in bound]),
        )
    ]


def straggler_node(records: Sequence[Record]) -> list[Finding]:
    """``straggler-node``: one node's mean CPU or GPU utilization far from the others'."""
    values: dict[str, dict[int, list[float]]] = {"cpu": {}, "gpu": {}}
    for r in records:
        for key, value in r.metrics.items():
            m = _NODE_KEY.fullmatch(key)
            if m:
                kind = "cpu" if m.group(2) == "cpu" else "gpu"
                values[kind].setdefault(int(m.group(1)), []).append(value)
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
                        _span(records),
                    )
                )
    return out


def swap(records: Sequence[Record]) -> list[Finding]:
    """``swap``: the share of swap in use (``SWAP_KEY``) rose during the run."""
    held = [r for r in records if SWAP_KEY in r.metrics]
    if not held:
        return []
    first = held[0].metrics[SWAP_KEY]
    peak = max(r.metrics[SWAP_KEY] for r in held)
    if peak - first <= SWAP_RISE_POINTS:
        return []
    return [
        Finding(
            "swap",
            f"Swap use rose from {first:.0f} % to {peak:.0f} % during the run: memory ran "
            "short and pages went to disk, which slows everything down.",
            {"first_percent": first, "peak_percent": peak},
            _span([r for r in held if r.metrics[SWAP_KEY] - first > SWAP_RISE_POINTS]),
        )
    ]


def unused_gpu(records: Sequence[Record]) -> list[Finding]:
    """``unused-gpu``: a GPU reported in the run that the job never used."""
    used = set().union(*(_used_gpus(r) for r in records)) if records else set()
    out = []
    for i in _gpu_indices(records):
        if i in used:
            continue
        held = [r for r in records if any(key.startswith(f"gpu.{i}.") for key in r.metrics)]
        out.append(
            Finding(
                "unused-gpu",
                f"The job never used GPU {i} (no process of the job ran on it in "
                f"{len(held)} samples); if it should have, check the device placement, "
                "or whether NVML can see the job's processes (containers).",
                {"gpu": float(i), "samples": float(len(held))},
                _span(held),
            )
        )
    return out


RULES: tuple[Callable[[Sequence[Record]], list[Finding]], ...] = (
    input_bound,
    memory_limit,
    gpu_throttling,
    disk_bound,
    straggler_node,
    swap,
    unused_gpu,
)


def findings(records: Sequence[Record]) -> list[Finding]:
    """Every finding of every rule in ``RULES`` about ``records``, in rule order."""
    return [finding for rule in RULES for finding in rule(records)]
