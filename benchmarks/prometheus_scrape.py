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

Then a crowd: ``--scrapers`` (200) clients on 127.0.0.1 scraping back to back for
``--seconds`` (15) s, each scrape with Prometheus's default 10 s timeout, against an
exporter in a process of its own (so the clients do not share its GIL), once with the
old listen backlog of 5 (``socketserver``'s default) and once with the exporter's
(:func:`sysmetrics.sinks.prometheus.listen_backlog`), side by side: scrapes started,
answered, timed out, failed, and the answered ones' p50 / p99 / max latency (connect
to the page's last byte). ``--crowd-only`` skips the per-call figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import urllib.request

from host_sample import per_call_us
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from sysmetrics import BaseCollector, SystemMonitor
from sysmetrics.collectors import host_collectors
from sysmetrics.sinks import PrometheusExporter, prometheus

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


OLD_BACKLOG = 5  # socketserver's request_queue_size, the exporter's listen backlog before
SCRAPE_TIMEOUT = 10.0  # s, Prometheus's default scrape_timeout
OPENMETRICS = b"application/openmetrics-text; version=1.0.0"


def sampled_monitor(gpus: int) -> SystemMonitor:
    """A running monitor whose latest() holds the host's and ``gpus`` fake GPUs' keys.

    It samples at start and then only when asked (``_sample_once``; its thread's next
    tick is an hour away): latest() is empty while a monitor is not running.
    """
    monitor = SystemMonitor(interval=3600.0, collectors=[FakeGpus(gpus), *host_collectors()])
    monitor.start()  # a tick, so that latest() has every key
    monitor._sample_once()  # the host counters' second reading
    return monitor


def serve_until_stdin_closes(backlog: int, gpus: int) -> None:
    """The crowd's exporter (``--serve``): prints its port, serves until stdin closes."""
    if backlog:
        prometheus.listen_backlog = lambda path=prometheus.SOMAXCONN: backlog
    monitor = sampled_monitor(gpus)
    with PrometheusExporter(monitor, port=0) as exporter:
        print(exporter.port, exporter._server.request_queue_size, flush=True)
        sys.stdin.read()
    monitor.stop()


async def crowd(port: int, scrapers: int, seconds: float) -> dict[str, list[float] | int]:
    """``scrapers`` clients scraping 127.0.0.1:``port`` back to back for ``seconds`` s."""
    request = (
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: " + OPENMETRICS + b"\r\n"
        b"Connection: close\r\n\r\n"
    )
    answered: list[float] = []
    counts = {"started": 0, "timeouts": 0, "errors": 0}

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            page = await reader.read()  # to the end: the server closes the connection
            if not page.startswith(b"HTTP/1.0 200"):
                raise OSError(f"answered {page[:40]!r}")
        finally:
            writer.close()

    async def scraper() -> None:
        while time.monotonic() < end:
            counts["started"] += 1
            start = time.monotonic()
            try:
                await asyncio.wait_for(one(), SCRAPE_TIMEOUT)
            except asyncio.TimeoutError:
                counts["timeouts"] += 1
            except OSError:
                counts["errors"] += 1
            else:
                answered.append(time.monotonic() - start)

    end = time.monotonic() + seconds
    await asyncio.gather(*(scraper() for _ in range(scrapers)))
    return {"answered": answered, **counts}


def run_crowd(backlog: int, args: argparse.Namespace) -> tuple[int, dict[str, list[float] | int]]:
    """The crowd against a fresh exporter process listening with ``backlog`` (0: its own)."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(backlog), "--gpus", str(args.gpus)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        port, queue = map(int, server.stdout.readline().split())
        result = asyncio.run(crowd(port, args.scrapers, args.seconds))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return queue, result


def print_crowds(args: argparse.Namespace) -> None:
    print(
        f"\n{args.scrapers} scrapers on 127.0.0.1 back to back for {args.seconds:g} s, "
        f"{SCRAPE_TIMEOUT:g} s timeout; latency of the answered ones, connect to last byte"
    )
    print(
        f"   {'listen backlog':<22}{'scrapes':>9}{'answered':>10}{'timeouts':>10}"
        f"{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    )
    for backlog, label in ((OLD_BACKLOG, "before"), (0, "now")):
        queue, r = run_crowd(backlog, args)
        answered = sorted(r["answered"])  # type: ignore[arg-type]
        if answered:
            p50 = statistics.median(answered) * 1e3
            p99 = answered[min(len(answered) - 1, int(0.99 * len(answered)))] * 1e3
            top = answered[-1] * 1e3
        else:
            p50 = p99 = top = float("nan")
        print(
            f"   {f'{queue} ({label})':<22}{r['started']:>9}{len(answered):>10}"
            f"{r['timeouts']:>10}{r['errors']:>8}{p50:>9.0f}{p99:>9.0f}{top:>9.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=500, help="calls per measurement")
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs")
    parser.add_argument("--scrapers", type=int, default=200, help="clients in the crowd")
    parser.add_argument("--seconds", type=float, default=15.0, help="s each crowd scrapes")
    parser.add_argument("--crowd-only", action="store_true", help="skip the per-call figures")
    parser.add_argument("--serve", type=int, metavar="BACKLOG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.scrapers <= 1000 or not 0 < args.seconds <= 120:
        parser.error("use 1 to 1000 --scrapers for at most 120 --seconds")
    if args.serve is not None:
        serve_until_stdin_closes(args.serve, args.gpus)
        return
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {sys.platform}")
    if not args.crowd_only:
        per_call(args)
    print_crowds(args)


def per_call(args: argparse.Namespace) -> None:
    monitor = sampled_monitor(args.gpus)
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
