"""What the arrival timing costs a rank per step, in µs, beside the same steps without it.

Run: ``python benchmarks/arrival_cost.py``. One process (no process group: the hooks and
the final callbacks run as under DDP, without the all-reduce), two copies of a small MLP
of ``layers`` linear layers (2 parameters each) on CPU, one with an
:class:`sysmetrics.arrival.ArrivalTimer` attached (a post-accumulate-grad hook per
parameter, two autograd final callbacks per backward, the slot's write), one without.
Their steps alternate, ``STEPS`` each, and each step's backward (where every hook runs)
is timed; it prints the median µs of the backward without and with the timer, side by
side, and their difference, per model size, then the slot's write alone. Medians of
alternating steps, so that other work on a shared machine slows both alike.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch

from sysmetrics.arrival import ArrivalTimer, RankSlot, RankTotals
from sysmetrics.steptime import StepClock

STEPS = 2000


def step(
    model: torch.nn.Module, x: torch.Tensor, clock: StepClock, timer: ArrivalTimer | None
) -> float:
    """One step; the µs of its backward."""
    clock.begin()
    loss = model(x).sum()
    if timer is not None:
        timer.forward_end()
    start = time.perf_counter()
    loss.backward()
    took = time.perf_counter() - start
    for p in model.parameters():
        p.grad = None
    clock.end()
    return took * 1e6


def main() -> None:
    torch.set_num_threads(1)
    folder = tempfile.mkdtemp()
    x = torch.randn(4, 16)
    print(f"{'layers':>6} {'params':>6} {'without µs':>11} {'with µs':>9} {'added µs':>9}")
    for layers in (4, 16, 64):
        bare = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(layers)))
        hooked = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(layers)))
        params = sum(1 for _ in hooked.parameters())
        clocks = StepClock(), StepClock()
        slot = RankSlot(0, os.path.join(folder, f"{layers}.slot"))
        timer = ArrivalTimer(clocks[1], slot)
        timer.attach(hooked)
        for clock in clocks:
            clock.restart()
        without, with_ = [], []
        for _ in range(STEPS):
            without.append(step(bare, x, clocks[0], None))
            with_.append(step(hooked, x, clocks[1], timer))
        assert not timer.failed and timer.totals().arrived == STEPS
        a, b = statistics.median(without), statistics.median(with_)
        print(f"{layers:>6} {params:>6} {a:>11.1f} {b:>9.1f} {b - a:>9.1f}")
        timer.close()
    slot = RankSlot(0, os.path.join(folder, "write.slot"))
    t = RankTotals(0, 1, 0.1, 0.0, 1.0, 0.05, 0.01, 0.02)
    n = 100_000
    start = time.perf_counter()
    for _ in range(n):
        slot.write(t)
    print(f"slot write alone: {(time.perf_counter() - start) / n * 1e6:.2f} µs")
    slot.close()
    os.rmdir(folder)


if __name__ == "__main__":
    main()
