"""The rules' example runs: each rule's ``fires`` and ``quiet`` run file, from a scenario.

``python -m tests.rule_examples`` (from the checkout) writes
``sysmetrics/findings/examples/<code>/{fires,quiet}.jsonl`` with the run file's own writer
(:mod:`sysmetrics.runfile`); ``tests/test_rules.py`` checks that the shipped files are
what this writes, that each rule fires on its ``fires`` run and not on its ``quiet`` one.
Each scenario below says what it models. They are crafted, not recorded: the GPU rules
need GPUs this machine lacks, and crafted numbers keep each example to the one thing it
shows (a recording carries everything else the machine did).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

from sysmetrics import runfile

EXAMPLES = Path(__file__).resolve().parents[1] / "sysmetrics" / "findings" / "examples"
T0 = 1_800_000_000.0  # s since the epoch: the examples' start (fixed, so the files are too)

Metrics = dict[str, float]


def recording(
    samples: list[Metrics],
    steps: Optional[list[Optional[int]]] = None,
    cpus: Optional[float] = 8.0,
    dt: float = 1.0,
    node: int = 0,
) -> bytes:
    """One recording of ``samples``, ``dt`` s apart: a ``run`` line, the samples, an ``end``."""
    out = [runfile.run_line(command=["python", "train.py"], host="example", node=node, pid=1,
                            start=T0, interval=dt, cpus=cpus, version="example")]  # fmt: skip
    for n, metrics in enumerate(samples):
        step = n if steps is None else steps[n]
        out.append(runfile.sample_line(T0 + n * dt, 100.0 + n * dt, step, metrics, node))
    out.append(runfile.end_line(seconds=len(samples) * dt, node=node, samples=len(samples),
                                exit_status=0))  # fmt: skip
    return b"".join(out)


def used(gpu: float, **extra: float) -> Metrics:
    """GPU 0 at ``gpu`` % with the job's process on it."""
    return {"gpu.0.gpu": gpu, "gpu.process.0.gpu": gpu, **extra}


def counter(step: float, n: int, **extra: float) -> list[Metrics]:
    """``n`` samples whose ``disk.in`` (MiB) grows by ``step`` each."""
    return [{"disk.in": 1000.0 + k * step, **extra} for k in range(n)]


def stuck(before: int, held: int, after: int) -> list[Optional[int]]:
    """Steps advancing each sample, ``held`` samples at one step, then advancing again."""
    return [*range(before), *[before] * held, *range(before + 1, before + 1 + after)]


def host(busy: float, cores: int = 4) -> Metrics:
    """The host's ``cores`` cores each ``busy`` % (``cpu.{i}.cpu_percent``)."""
    return {f"cpu.{i}.cpu_percent": busy for i in range(cores)}


def gathered(key: str, values: list[float], n: int = 20) -> list[Metrics]:
    """A callback's gather: ``node{k}/key`` at ``values[k]`` in each of ``n`` samples."""
    return [{f"node{k}/{key}": v for k, v in enumerate(values)}] * n


def pss(mib: float, limit: float = 16384.0) -> Metrics:
    """The job's PSS at ``mib`` MiB of a ``limit`` MiB limit, and 0.1 s steps."""
    return {"proc.memory.pssMB": mib, "proc.memory.percent": 100.0 * mib / limit,
            "step.seconds": 0.1}  # fmt: skip


N = 30  # samples in most examples
TIMED = {"step.seconds": 0.5, "step.dataWaitPercent": 3.0, "cpu": 30.0}  # a fetch-timing callback

# code -> (fires, quiet): each a recording's bytes.
SCENARIOS: dict[str, Callable[[], tuple[bytes, bytes]]] = {
    # A loop whose DataLoader cannot keep up: 60 % of each 0.5 s step spent waiting for
    # a batch while the job's CPUs are saturated (quiet: 5 % waiting).
    "input-bound": lambda: (
        recording([{"step.seconds": 0.5, "step.dataWaitPercent": 60.0, "cpu": 95.0}] * N),
        recording([{"step.seconds": 0.5, "step.dataWaitPercent": 5.0, "cpu": 60.0}] * N),
    ),
    # A callback whose fetch is timed: 45 % of each 0.5 s step went between steps outside
    # the 3 % fetch (a progress bar redrawing in a notebook); quiet: 4 % of it.
    "framework-overhead": lambda: (
        recording([{**TIMED, "step.overheadPercent": 45.0}] * N),
        recording([{**TIMED, "step.overheadPercent": 4.0}] * N),
    ),
    # A run idle at step 8 for 15 s in the middle (a collective waiting for a peer);
    # quiet: the same run advancing every second.
    "stall": lambda: (
        recording([{"cpu": 1.0}] * 29, steps=stuck(8, 16, 5)),
        recording([{"cpu": 60.0}] * 29),
    ),
    # Steps of 0.1 s, three of 1 s (a checkpoint every tenth step, say); quiet: all 0.1 s.
    "slow-steps": lambda: (
        recording([{"step.seconds": 1.0 if n % 10 == 5 else 0.1} for n in range(N)]),
        recording([{"step.seconds": 0.1}] * N),
    ),
    # A job keeping its 4 CPUs 97 % busy; quiet: 40 %.
    "cpu-bound": lambda: (
        recording([{"cpu": 97.0}] * N, cpus=4.0),
        recording([{"cpu": 40.0}] * N, cpus=4.0),
    ),
    # A job using one of its 8 CPUs (12.5 %: a loader with no workers); quiet: 4 of 8.
    "single-core": lambda: (
        recording([{"cpu": 12.5}] * N, cpus=8.0),
        recording([{"cpu": 50.0}] * N, cpus=8.0),
    ),
    # A host whose 4 cores are 98 % busy while the job gets 30 % of them (other tenants);
    # quiet: the host 40 % busy, the job the same 30 %.
    "contention": lambda: (
        recording([{"cpu": 30.0, **host(98.0)}] * N, cpus=4.0),
        recording([{"cpu": 30.0, **host(40.0)}] * N, cpus=4.0),
    ),
    # The job's memory at 95 % of its limit; quiet: 50 %.
    "memory-limit": lambda: (
        recording([{"proc.memory.percent": 95.0}] * N),
        recording([{"proc.memory.percent": 50.0}] * N),
    ),
    # GPU 0's memory 98 % allocated; quiet: 60 %.
    "gpu-memory-limit": lambda: (
        recording([used(90.0, **{"gpu.0.memoryAllocated": 98.0})] * N),
        recording([used(90.0, **{"gpu.0.memoryAllocated": 60.0})] * N),
    ),
    # GPU 0 held down by thermal slowdown in half of the samples; quiet: never.
    "gpu-throttling": lambda: (
        recording([used(90.0, **{"gpu.0.throttle.thermal": float(n % 2)}) for n in range(N)]),
        recording([used(90.0, **{"gpu.0.throttle.thermal": 0.0})] * N),
    ),
    # Reading 200 MiB/s from disk while GPU 0 is 10 % busy; quiet: 5 MiB/s, GPU 90 %.
    "disk-bound": lambda: (
        recording(counter(200.0, N, **used(10.0))),
        recording(counter(5.0, N, **used(90.0))),
    ),
    # Swap use rising from 2 % to 20 % as memory runs short; quiet: steady at 2 %.
    "swap": lambda: (
        recording([{"memory.swapPercent": 2.0 + 18.0 * n / (N - 1)} for n in range(N)]),
        recording([{"memory.swapPercent": 2.0}] * N),
    ),
    # GPU 0 reported, no process of the job ever on it (a wrong device placement);
    # quiet: the job's process on it.
    "unused-gpu": lambda: (
        recording([{"gpu.0.gpu": 0.0, "gpu.0.memoryAllocated": 1.0}] * N),
        recording([used(80.0, **{"gpu.0.memoryAllocated": 40.0})] * N),
    ),
    # The job's PSS growing 2 MiB a step (10 steps a sample, 0.1 s each) towards its 16 GiB
    # limit: a leak; quiet: 600 MiB more over the first 10 samples (caches filling, the
    # allocator's warm-up), then flat.
    "memory-creep": lambda: (
        recording([pss(1024.0 + 20.0 * n) for n in range(N)], steps=[10 * n for n in range(N)]),
        recording(
            [pss(1024.0 + 60.0 * min(n, 10)) for n in range(N)], steps=[10 * n for n in range(N)]
        ),
    ),
    # Two nodes gathered by a callback: node 1's steps take 1.6 s, node 0's 1.0 s;
    # quiet: 1.0 and 1.1 s.
    "straggler-node": lambda: (
        recording(gathered("step.seconds", [1.0, 1.6])),
        recording(gathered("step.seconds", [1.0, 1.1])),
    ),
}


def render(code: str) -> dict[str, bytes]:
    """The example files of rule ``code``: ``{"fires.jsonl": ..., "quiet.jsonl": ...}``."""
    fires, quiet = SCENARIOS[code]()
    return {"fires.jsonl": fires, "quiet.jsonl": quiet}


def main(argv: Optional[list[str]] = None) -> None:
    """Write every rule's example files under ``EXAMPLES``."""
    for code in SCENARIOS:
        folder = EXAMPLES / code
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in render(code).items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    main()
