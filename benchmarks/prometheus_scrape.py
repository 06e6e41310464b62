"""Cost of one Prometheus scrape of the exporter, beside one monitor tick in the same run.

Run: ``python benchmarks/prometheus_scrape.py`` (needs the ``[prometheus]`` extra). The
monitor has the host collectors plus a scripted collector reporting the keys of 8 NVIDIA
GPUs (``gpu.{i}.*`` and ``gpu.process.{i}.*``, as NVML reports them for GPUs the process
uses). Prints, in µs of wall time per call (median over runs that alternate, as
``host_sample.py`` measures), and as a ratio to one tick:

1. one monitor tick: every collector's ``sample()`` and the fold into the monitor;
2. ``collect()``: ``monitor.latest()`` turned into metric families;
3. ``collect()`` and the exposition: the page in the Prometheus text format, and in
   OpenMetrics (what a Prometheus server asks for);
4. a whole scrape: an HTTP GET of ``/metrics`` over loopback (urllib, OpenMetrics).
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request

from host_sample import per_call_us
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from sysmetrics import BaseCollector, SystemMonitor
from sysmetrics.collectors import host_collectors
from sysmetrics.sinks import PrometheusExporter

GPU_KEYS = {
    "gpu": 87.0, "memory": 41.0, "memoryAllocated": 63.5, "memoryAllocatedBytes": 5.1e10,
    "temp": 71.0, "powerWatts": 612.4, "powerPercent": 87.5, "smClock": 1980.0,
    "memoryClock": 2619.0, "graphicsClock": 1980.0, "correctedMemoryErrors": 0.0,
    "uncorrectedMemoryErrors": 0.0, "encoderUtilization": 0.0,
}  # fmt: skip


class FakeGpus(BaseCollector):
    """The keys NVML gives for ``n`` GPUs the process tree uses, with fixed values."""

    name = "fake-gpus"
    last_keys = frozenset({"correctedMemoryErrors", "uncorrectedMemoryErrors"})
    peak_keys = frozenset({"memoryAllocatedBytes", "processMemoryAllocatedBytes"})

    def __init__(self, n: int) -> None:
        self.values: dict[str, float] = {}
        for i in range(n):
            for prefix in (f"gpu.{i}.", f"gpu.process.{i}."):
                self.values.update({prefix + k: v for k, v in GPU_KEYS.items()})
            self.values[f"gpu.process.{i}.processMemoryAllocatedBytes"] = 4.8e10

    def sample(self) -> dict[str, float]:
        """A copy of the fixed values."""
        return dict(self.values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=500, help="calls per measurement")
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs")
    args = parser.parse_args()

    monitor = SystemMonitor(interval=1.0, collectors=[FakeGpus(args.gpus), *host_collectors()])
    monitor._sample_once()  # a tick, so that latest() has every key
    monitor._sample_once()  # the host counters' second reading
    exporter = PrometheusExporter(monitor, port=0)
    request = urllib.request.Request(
        exporter.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )

    def scrape() -> bytes:
        with urllib.request.urlopen(request, timeout=10) as r:
            body: bytes = r.read()
        return body

    def collect() -> object:
        return list(exporter.registry.collect())

    try:
        tick, families, text, om, get = per_call_us(
            monitor._sample_once,
            collect,
            lambda: generate_latest(exporter.registry),
            lambda: generate_openmetrics(exporter.registry),
            scrape,
            number=args.number,
        )
        keys = len(monitor.latest())
        series = sum(len(f.samples) for f in exporter.registry.collect())
        page = len(scrape())
    finally:
        exporter.close()
        monitor.stop()
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {sys.platform}")
    print(
        f"monitor: {keys} keys (host collectors + {args.gpus} fake GPUs); "
        f"exported: {series} series, a page of {page / 1024:.1f} KiB (OpenMetrics)"
    )
    print(f"\n   {'what':<46}{'µs':>10}{'ratio to tick':>15}")
    rows = [
        ("one monitor tick (sample + fold)", tick),
        ("collect(): latest() to metric families", families),
        ("collect() + text exposition", text),
        ("collect() + OpenMetrics exposition", om),
        ("HTTP GET /metrics over loopback (urllib)", get),
    ]
    for label, us in rows:
        print(f"   {label:<46}{us:>10.1f}{us / tick:>15.2f}")


if __name__ == "__main__":
    main()
