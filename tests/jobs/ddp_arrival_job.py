"""A plain ``DistributedDataParallel`` loop of 2 ranks (gloo, CPU) with arrival timing.

Usage: ``python ddp_arrival_job.py OUT RANK`` (``MASTER_ADDR``, ``MASTER_PORT`` set): 20
steps; rank 1 sleeps 40 ms after its forward each step. Each rank writes its
:class:`sysmetrics.arrival.RankTotals` to OUT/rank{RANK}.json.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from sysmetrics.arrival import ArrivalTimer
from sysmetrics.steptime import StepClock


def main() -> None:
    out, rank = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 1))
    model = DistributedDataParallel(layers)
    clock = StepClock()
    timer = ArrivalTimer(clock, None)
    timer.attach(model.module, forward=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    clock.restart()
    for _ in range(20):
        clock.begin()
        loss = model(torch.randn(8, 16)).sum()
        if rank == 1:
            time.sleep(0.04)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        clock.end()
    assert not timer.failed
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(list(timer.totals()), f)
    timer.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
