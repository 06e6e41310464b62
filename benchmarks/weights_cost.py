"""The cost of a key's weighted mean over a day's run, the old numpy code beside the shared one.

The report's numpy weights of before issue 31, beside
:func:`sysmetrics.weights.weighted_mean`, which the table and the findings share now.
Run: ``python benchmarks/weights_cost.py`` (``--samples``, default 86,400: a day at 1 s).
It builds a :class:`~sysmetrics.runfile.Run` in memory with ``step.seconds`` and
``step.dataWaitPercent`` at every other sample and a step mark growing by 1-3 per
sample with step keys, and times, in one run, side by side (best of ``--repeat``): the
numpy weights and ``np.average`` the report used before issue 31 (copied here), and
``weighted_mean`` (pure Python, a pass over the samples), for ``step.dataWaitPercent``.
It prints both means (they must agree: the same rule) and the ratio of the costs.
"""

from __future__ import annotations

import argparse
import time
from array import array
from typing import Any

import numpy as np

from sysmetrics.runfile import Run
from sysmetrics.weights import weighted_mean


def make(samples: int) -> Run:
    run = Run()
    nan = float("nan")
    step = 0
    seconds, wait = array("d"), array("d")
    for j in range(samples):
        timed = j % 2 == 1
        step += 1 + j % 3 if timed else 0
        run.time.append(1.7e9 + j)
        run.monotonic.append(float(j))
        run.step.append(step)
        run.steps.append(None)  # weighed by the marks' growth, the longer way
        run.node.append(None)
        run.recording.append(0)
        seconds.append(0.5 + 0.1 * (j % 7) if timed else nan)
        wait.append(10.0 + (j % 13) if timed else nan)
    run.columns = {"step.seconds": seconds, "step.dataWaitPercent": wait}
    return run


def old_numpy(run: Run, key: str) -> float:
    """The report's step_weights + np.average of before issue 31 (seconds weights)."""
    per_step = np.frombuffer(run.columns["step.seconds"], dtype=float)
    steps = np.full(len(run), np.nan)
    previous: Any = None
    for j in np.flatnonzero(~np.isnan(per_step)).tolist():
        here = run.step[j]
        if previous is not None and here is not None and here > previous:
            steps[j] = here - previous
        previous = here if here is not None else previous
    has = ~np.isnan(per_step)
    known = steps[has & ~np.isnan(steps)]
    steps[has & np.isnan(steps)] = float(np.median(known)) if known.size else 1.0
    w = steps * per_step
    values = np.frombuffer(run.columns[key], dtype=float)
    ok = ~np.isnan(values) & ~np.isnan(w) & (w > 0)
    return float(np.average(values[ok], weights=w[ok]))


def best(fn: Any, repeat: int) -> tuple[float, float]:
    times, out = [], float("nan")
    for _ in range(repeat):
        began = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - began)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=86_400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    run = make(args.samples)
    key = "step.dataWaitPercent"
    old_s, old = best(lambda: old_numpy(run, key), args.repeat)
    new_s, new = best(lambda: weighted_mean(run, key), args.repeat)
    print(f"samples: {args.samples:,}, best of {args.repeat}")
    print(f"old numpy step_weights + np.average: {old_s * 1e3:8.1f} ms  mean {old:.6f}")
    print(f"weighted_mean (shared):              {new_s * 1e3:8.1f} ms  mean {new:.6f}")
    print(f"ratio new/old: {new_s / old_s:.2f}")


if __name__ == "__main__":
    main()
