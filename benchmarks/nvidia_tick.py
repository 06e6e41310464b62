"""Per-tick cost of the NVIDIA collector per GPU, and what it sees under a real CUDA load.

Run on a machine with an NVIDIA GPU: ``python benchmarks/nvidia_tick.py``. It

1. times ``NvidiaCollector.sample()`` (every field of every GPU, process attribution)
   and prints µs per tick and per GPU;
2. starts a child process that allocates 4 GiB with torch on GPU 0 and runs matmuls,
   monitors it for a few seconds, and prints utilization, the change of allocated bytes
   and the ``gpu.process.0.*`` keys seen for the process tree.

Elsewhere it says there is no GPU and exits 0.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from sysmetrics import SystemMonitor
from sysmetrics.collectors import NvidiaCollector
from sysmetrics.host import default_source

LOAD = """
import sys, time, torch
x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # 4 GiB
a = torch.randn(8192, 8192, device="cuda")
print("ready", flush=True)
t = time.time()
while time.time() - t < float(sys.argv[1]):
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
"""


def main() -> None:
    c = NvidiaCollector.create(default_source(), os.getpid())
    if c is None:
        print("no NVIDIA GPU, driver or NVML here: nothing to measure")
        return
    n = len(c.devices)
    c.sample()
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(200):
            c.sample()
        runs.append((time.perf_counter() - t) / 200 * 1e6)
    tick = statistics.median(runs)
    print(f"{n} GPU(s): {tick:.1f} µs per tick, {tick / n:.1f} µs per GPU")
    c.close()

    with SystemMonitor(interval=0.2) as m:
        before = m.snapshot()
        child = subprocess.Popen(
            [sys.executable, "-c", LOAD, "4"], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        m.snapshot()
        time.sleep(3)
        during = m.snapshot()
        child.wait()
    grew = during["gpu.0.memoryAllocatedBytes"] - before["gpu.0.memoryAllocatedBytes"]
    print(f"gpu.0.gpu under load: {during.get('gpu.0.gpu')} %")
    print(
        f"gpu.0.memoryAllocatedBytes grew by {grew / 2**30:.2f} GiB "
        "(4 GiB and a 256 MiB matrix allocated)"
    )
    print(
        "gpu.process.0 keys:", {k: v for k, v in during.items() if k.startswith("gpu.process.0.")}
    )


if __name__ == "__main__":
    main()
