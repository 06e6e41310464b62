"""Cost of one monitor tick with 1, 2 and 4 readers attached.

Run: ``python benchmarks/readers.py``. A tick is what the sampling thread does each
interval: every collector's ``sample()``, the value checks, and the fold of every value
into every open reader. Measured side by side in this one run (the variants alternate,
so machine noise hits them alike), with the default host collectors plus a static
collector of 8 GPUs' keys (as NVML would report them) so the fold sees a realistic key
count. "1 reader" is the monitor's own default reader alone; each extra reader is one
more ``monitor.reader()`` (a callback, an exporter's or a run file's reader).

Prints each variant's tick in µs and its ratio to the 1-reader tick; the target is under
5 % per extra reader.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from host_sample import per_call_us

from sysmetrics import BaseCollector, SystemMonitor
from sysmetrics.collectors import host_collectors

GPU_KEYS = ("gpu", "memory", "memoryAllocated", "memoryAllocatedBytes", "temp", "powerWatts",
            "powerPercent", "smClock", "memoryClock", "graphicsClock",
            "correctedMemoryErrors", "uncorrectedMemoryErrors", "encoderUtilization")  # fmt: skip


class EightGpus(BaseCollector):
    """The keys of 8 NVIDIA GPUs, without NVML: the fold's cost, not the driver's."""

    name = "gpus"

    def __init__(self) -> None:
        self.values = {f"gpu.{i}.{k}": float(i) for i in range(8) for k in GPU_KEYS}

    def sample(self) -> dict[str, float]:
        """The same values every tick."""
        return self.values


def monitor_with(readers: int, buffered: bool) -> tuple[SystemMonitor, list[object]]:
    m = SystemMonitor(interval=3600, collectors=[*host_collectors(), EightGpus()])
    extra = [m.reader(buffer=1000 if buffered else 0) for _ in range(readers - 1)]
    return m, extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=200, help="ticks per run")
    args = parser.parse_args()
    variants = {}
    keep = []
    for n in (1, 2, 4):
        m, extra = monitor_with(n, buffered=False)
        keep.append((m, extra))
        variants[f"{n} reader{'s' if n > 1 else ''}"] = m._sample_once
    m, extra = monitor_with(4, buffered=True)
    keep.append((m, extra))
    variants["4 readers, 3 buffering"] = m._sample_once

    def drain() -> None:  # keep the buffered readers from filling between runs
        for r in extra:
            r.samples()  # type: ignore[attr-defined]

    times = per_call_us(*variants.values(), number=args.number)
    drain()
    m0 = keep[0][0]
    keys = len(m0.snapshot())
    print(f"one tick, {keys} keys (host collectors + 8 GPUs' keys), median of 9 runs:")
    base = times[0]
    for (name, _), t in zip(variants.items(), times):
        extra_readers = int(name.split()[0]) - 1
        per = f", {(t / base - 1) / extra_readers:+.1%} per extra reader" if extra_readers else ""
        print(f"  {name:<24} {t:8.1f} µs   x{t / base:.3f}{per}")
    for m, _ in keep:
        m.stop()


if __name__ == "__main__":
    main()
