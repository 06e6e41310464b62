"""Does watching the GPU slow a training loop on it? Step time side by side, on GPU 0.

``python benchmarks/gpu_interference.py [--rounds N] [--seconds S]`` (repository root; a
machine with an NVIDIA GPU and a CUDA torch; elsewhere it says so and exits 0).

The loop is a plain torch one (an MLP 1024 wide, batch 64, SGD, ``loss.item()`` each
step, as most loops read the loss), so a step is about as short as a GPU step gets and
anything that delays a kernel launch or the host shows. Variants, each ``S`` seconds of
steps after a warm-up, in an order rotated each round:

- ``none``: nothing watches;
- ``sysmetrics 0.1 s``: a :class:`~sysmetrics.SystemMonitor` with the default collectors
  sampling every 0.1 s in this process (its thread beside the loop);
- ``sysmetrics 0.1 s, no NVIDIA``: the same without the NVIDIA collector: what is left
  of the difference is the host collectors' (the GIL), not the driver's;
- ``NVML hot loop``: another process reading every NVML field of GPU 0 back to back,
  as fast as it can (about 10 000 times sysmetrics' rate at 0.1 s): if NVML calls hold a
  lock the training's CUDA calls need, this shows it many times over; it holds no GIL of
  the loop's.

Each round's ratio is the variant's mean step time over that round's ``none``; the
figure printed is the median over rounds, with the quartiles of the round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

HOT_LOOP = """
import sys, time
import pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
calls = [
    lambda: n.nvmlDeviceGetUtilizationRates(h),
    lambda: n.nvmlDeviceGetMemoryInfo(h),
    lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
    lambda: n.nvmlDeviceGetPowerUsage(h),
    lambda: n.nvmlDeviceGetTotalEnergyConsumption(h),
    lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
    lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
    lambda: n.nvmlDeviceGetCurrentClocksEventReasons(h),
]
print("ready", flush=True)
k = 0
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for c in calls:
        try:
            c()
        except n.NVMLError:
            pass
    k += len(calls)
print(k, flush=True)
"""

VARIANTS = ["none", "sysmetrics 0.1 s", "sysmetrics 0.1 s, no NVIDIA", "NVML hot loop"]


def steps_for(seconds: float, step: Any) -> float:
    """Mean seconds per step over ``seconds`` of steps."""
    n = 0
    t = time.perf_counter()
    end = t + seconds
    while True:
        step()
        n += 1
        now = time.perf_counter()
        if now >= end:
            return (now - t) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_interference: no CUDA GPU here: nothing to measure")
        return 0
    from sysmetrics import SystemMonitor
    from sysmetrics.collectors import NvidiaCollector, host_collectors

    dev = torch.device("cuda", 0)
    w = 1024
    net = torch.nn.Sequential(
        torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
        torch.nn.Linear(w, 1),
    ).to(dev)  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(64, w, device=dev)
    y = torch.randn(64, 1, device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        loss.item()

    steps_for(2.0, step)  # warm-up: kernels loaded, clocks up
    means: dict[str, list[float]] = {v: [] for v in VARIANTS}
    hot_calls: list[float] = []
    for r in range(args.rounds):
        order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
        for v in order:
            if v == "none":
                means[v].append(steps_for(args.seconds, step))
            elif v == "NVML hot loop":
                p = subprocess.Popen(
                    [sys.executable, "-c", HOT_LOOP, str(args.seconds + 1.0)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
                means[v].append(steps_for(args.seconds, step))
                out, _ = p.communicate(timeout=60)
                hot_calls.append(float(out.split()[-1]) / (args.seconds + 1.0))
            else:
                collectors = None
                if v.endswith("no NVIDIA"):
                    collectors = [
                        c for c in host_collectors() if not isinstance(c, NvidiaCollector)
                    ]
                with SystemMonitor(interval=0.1, collectors=collectors):
                    time.sleep(0.3)  # past its first sample
                    means[v].append(steps_for(args.seconds, step))
    print(
        f"GPU step time with and without watching: {torch.cuda.get_device_name(0)}, "
        f"{args.rounds} rounds of {args.seconds:g} s a variant (order rotated each round)"
    )
    print(f"  {'variant':<30}{'step ms':>9}{'ratio':>8}{'quartiles of round ratios':>28}")
    for v in VARIANTS:
        ratios = sorted(m / b for m, b in zip(means[v], means["none"]))
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
        print(
            f"  {v:<30}{statistics.median(means[v]) * 1e3:>9.3f}"
            f"{statistics.median(ratios):>8.4f}{f'{q1:.4f} .. {q3:.4f}':>28}"
        )
    if hot_calls:
        print(f"  the hot loop made {statistics.median(hot_calls):.0f} NVML calls a second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
