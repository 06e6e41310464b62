"""Run files shaped like GPU jobs, for the diagnosis suite's ``crafted`` scenarios.

There is no GPU on the machines the suite runs on; these runs carry the keys a recording
of one NVIDIA GPU job would (``gpu.{i}.*``, the job's ``gpu.process.{i}.*``, the step
keys, the job's ``cpu`` and the host's cores), written with the run file's own writer
(:mod:`sysmetrics.runfile`), 60 samples at 1 s with a small deterministic wobble.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sysmetrics import runfile

T0 = 1_800_000_000.0  # s since the epoch: the runs' start
N = 60  # samples
CPUS = 8.0  # the job's CPUs
Metrics = dict[str, float]


def wobble(n: int, value: float, spread: float) -> float:
    """``value`` moved by up to ``spread`` (a sine over the samples: no randomness)."""
    return value + spread * math.sin(n * 1.3)


def gpu(n: int, busy: float, memory: float = 40.0, i: int = 0, job: bool = True) -> Metrics:
    """GPU ``i`` at ``busy`` % and ``memory`` % allocated, the job's process on it."""
    out = {
        f"gpu.{i}.gpu": wobble(n, busy, 1.0),
        f"gpu.{i}.memoryAllocated": memory,
        f"gpu.{i}.powerPercent": wobble(n, 0.8 * busy, 2.0),
    }
    if job:
        out[f"gpu.process.{i}.gpu"] = out[f"gpu.{i}.gpu"]
    return out


def job(n: int, cpu: float, step: float, wait: float) -> Metrics:
    """The job's ``cpu`` (% of :data:`CPUS`), its steps, the host's 8 cores a little busier."""
    return {
        "cpu": wobble(n, cpu, 0.5),
        "step.seconds": wobble(n, step, 0.002),
        "step.dataWaitPercent": wobble(n, wait, 0.5),
        **{f"cpu.{c}.cpu_percent": wobble(n + c, cpu + 3.0, 1.0) for c in range(int(CPUS))},
        "proc.memory.percent": 12.0,
    }


def recording(samples: list[Metrics], step: float) -> bytes:
    """One recording of ``samples``, 1 s apart, steps advancing at ``1 / step`` per s."""
    out = [
        runfile.run_line(command=["python", "train.py"], host="crafted", node=0, pid=1,
                         start=T0, interval=1.0, cpus=CPUS, version="crafted")
    ]  # fmt: skip
    for n, metrics in enumerate(samples):
        out.append(runfile.sample_line(T0 + n, 100.0 + n, int(n / step), metrics, 0))
    out.append(runfile.end_line(seconds=float(N), node=0, samples=N, exit_status=0))
    return b"".join(out)


RUNS: dict[str, Callable[[], bytes]] = {
    # An ordinary single-GPU job: the GPU saturated, the loader keeps up, one CPU of 8.
    "gpu-bound": lambda: recording(
        [{**gpu(n, 99.0), **job(n, 12.5, 0.1, 1.0)} for n in range(N)], 0.1
    ),
    # The loader cannot keep up: 70 % of each step waiting, the GPU mostly idle, the
    # CPUs mostly idle too (I/O, or too few workers).
    "gpu-input-bound": lambda: recording(
        [{**gpu(n, 25.0), **job(n, 20.0, 0.3, 70.0)} for n in range(N)], 0.3
    ),
    # GPU-bound, thermally throttled in every other sample.
    "gpu-throttled": lambda: recording(
        [
            {**gpu(n, 95.0), **job(n, 12.5, 0.1, 1.0), "gpu.0.throttle.thermal": float(n % 2)}
            for n in range(N)
        ],
        0.1,
    ),
    # Two GPUs; the job runs on GPU 0 only.
    "gpu-unused": lambda: recording(
        [
            {**gpu(n, 95.0), **gpu(n, 0.0, memory=1.0, i=1, job=False), **job(n, 12.5, 0.1, 1.0)}
            for n in range(N)
        ],
        0.1,
    ),
    # GPU 0's memory 97 % allocated (a batch size at the edge).
    "gpu-memory-near-limit": lambda: recording(
        [{**gpu(n, 95.0, memory=97.0), **job(n, 12.5, 0.1, 1.0)} for n in range(N)], 0.1
    ),
}
"""Each crafted scenario's run file, by its name in ``labels.SCENARIOS``."""
