"""Cost of gathering every node's numbers at one logging step, 2 simulated nodes on gloo.

Run: ``python benchmarks/node_gather.py``. Two processes on this machine form a gloo
process group, each as the sampling rank of its own node (node ranks 0 and 1), and call
``sysmetrics.distributed.gather`` with a realistic snapshot (a real monitor's keys plus
8 GPUs' keys) as the callbacks do at each logging step; rank 0 also turns the result into
the logged keys (``per_node``). Prints the median µs per logging step on rank 0, beside a
bare ``all_gather_object`` of a small int (the collective's floor on this machine) and
one snapshot of the monitor, measured in the same run.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from sysmetrics import SystemMonitor, distributed

ROUNDS = 200


def snapshot_of_a_node() -> dict[str, float]:
    with SystemMonitor(interval=0.05) as monitor:
        time.sleep(0.2)
        snap = monitor.snapshot()
    fields = ("gpu", "memory", "temp", "powerWatts", "memoryAllocated", "memoryAllocatedBytes",
              "memoryAllocatedBytes.max", "smClock")  # fmt: skip
    gpus = {f"gpu.{i}.{k}": 1.0 for i in range(8) for k in fields}
    return {**snap, **gpus}


def rank(r: int, port: int, snapshot: dict[str, float], out: dict[str, float]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=r, world_size=2)
    where = distributed.Layout(node=r, nodes=(0, 1), local_pids=(os.getpid(),))
    floor, ours = [], []
    for _ in range(ROUNDS):
        box: list[object] = [None, None]
        t = time.perf_counter()
        dist.all_gather_object(box, r)
        floor.append(time.perf_counter() - t)
        t = time.perf_counter()
        nodes = distributed.gather(snapshot, where)
        if r == 0 and nodes is not None:
            distributed.per_node(nodes)
        ours.append(time.perf_counter() - t)
    if r == 0:
        out["floor"] = statistics.median(floor) * 1e6
        out["gather"] = statistics.median(ours) * 1e6
    dist.destroy_process_group()


def main() -> None:
    snapshot = snapshot_of_a_node()
    t = time.perf_counter()
    with SystemMonitor(interval=3600) as monitor:
        t = time.perf_counter()
        for _ in range(ROUNDS):
            monitor.snapshot()
        snap_us = (time.perf_counter() - t) / ROUNDS * 1e6
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(rank, args=(port, snapshot, out), nprocs=2, join=True)
    print(f"one logging step, 2 nodes on gloo, {len(snapshot)} keys per node, "
          f"median of {ROUNDS} (Python {sys.version.split()[0]}):")  # fmt: skip
    print(f"  all_gather_object of an int (floor)   {out['floor']:9.1f} µs")
    print(f"  gather() + per_node() on rank 0       {out['gather']:9.1f} µs"
          f"   x{out['gather'] / out['floor']:.2f} the floor")  # fmt: skip
    print(f"  one monitor.snapshot(), for scale     {snap_us:9.1f} µs")


if __name__ == "__main__":
    main()
