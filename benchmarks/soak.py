"""Soak: the monitor at interval=0.01 for 10 minutes beside an endpoint whose labels churn.

Run: ``python benchmarks/soak.py [--minutes 10]``. A local OpenMetrics endpoint (its own
process) serves 1000 series whose label values change at every scrape, plus 100 stable
ones; a ``SystemMonitor(interval=0.01, open_metrics=...)`` with every default collector
samples it while a reader thread takes a snapshot every 50 ms, as a callback logging
every step would. Every 30 s it prints this process's RSS, open file descriptors and
threads, the keys the engine holds, the series the OpenMetrics collector remembers, and
samples per second; at the end, each figure's last/first ratio. Target: RSS and key
counts flat (within 5 %), samples per second unchanged.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any

from sysmetrics import SystemMonitor
from sysmetrics.collectors import OpenMetricsCollector

SERVER = r"""
import http.server, itertools, sys
counter = itertools.count()

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n = next(counter)
        lines = ["# TYPE churn gauge"]
        lines += [f'churn{{id="{n}-{i}"}} {i}' for i in range(1000)]
        lines += ["# TYPE stable gauge"] + [f'stable{{gpu="{i}"}} {n}' for i in range(100)]
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def row(monitor: SystemMonitor, om: OpenMetricsCollector, ticks: int, dt: float) -> dict[str, Any]:
    with monitor._lock:  # the engine's private state: what it holds right now
        keys = len(monitor._series_store.series)
        tick = monitor._series_store.tick
    series = sum(len(s) for s in getattr(om, "_series", {}).values())
    return {
        "rss MiB": rss_mib(),
        "fds": fds(),
        "threads": threading.active_count(),
        "engine keys": keys,
        "om series": series,
        "samples/s": (tick - ticks) / dt,
        "_tick": tick,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between rows")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    port = int(server.stdout.readline())
    stop = threading.Event()
    monitor = SystemMonitor(interval=0.01, open_metrics={"churn": f"http://127.0.0.1:{port}/"})
    om = next(c for c in monitor.collectors if isinstance(c, OpenMetricsCollector))

    def reader() -> None:
        while not stop.wait(0.05):
            monitor.snapshot()

    columns = ["rss MiB", "fds", "threads", "engine keys", "om series", "samples/s"]
    print(f"{'t s':>6}" + "".join(f"{c:>13}" for c in columns))
    rows: list[dict[str, Any]] = []
    try:
        monitor.start()
        thread = threading.Thread(target=reader)
        thread.start()
        t0 = last_t = time.monotonic()
        ticks = 0
        time.sleep(min(args.every, 10.0))  # past start-up: the first row is steady state
        end = t0 + args.minutes * 60
        while True:
            now = time.monotonic()
            r = row(monitor, om, ticks, now - last_t)
            ticks, last_t = r["_tick"], now
            rows.append(r)
            print(f"{now - t0:6.0f}" + "".join(f"{r[c]:13.1f}" for c in columns), flush=True)
            if now >= end:
                break
            time.sleep(min(args.every, max(0.0, end - now)))
    finally:
        stop.set()
        monitor.stop()
        server.kill()
        server.wait()
    first, last = rows[0], rows[-1]
    print("\nlast / first: " + ", ".join(
        f"{c} {last[c] / first[c]:.3f}" if first[c] else f"{c} -" for c in columns
    ))  # fmt: skip


if __name__ == "__main__":
    main()
