"""Per-tick cost of the job's busiest thread (``proc.cpu.busiestThreadPercent``).

Run: ``python benchmarks/thread_tick.py`` (Linux). For a job of 8, 64 and 256 threads
(one process: its main thread and idle ones, as a PyTorch process has dozens), and of
257 (over ``ProcessCollector.max_threads``: nothing is read), it times
``ProcessCollector.sample()`` with the thread reading on at every tick
(``thread_window_s = 0``, no ``thread_cpu_share`` spacing) and off, alternating
(``per_call_us``), in wall time and in the sampling thread's CPU time; the difference
is the reading's cost. From it: the period the collector spaces readings by (at least
``thread_window_s``, and the reading's CPU time over ``thread_cpu_share``) and their
cost per second. It prints figures and ratios; nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable

from host_sample import per_call_us

from sysmetrics.collectors import ProcessCollector
from sysmetrics.host import ProcfsSource

JOB = """
import sys, threading, time
stop = threading.Event()
for _ in range(int(sys.argv[1]) - 1):
    threading.Thread(target=stop.wait, daemon=True).start()
print("ready", flush=True)
time.sleep(3600)
"""


def sampler(pid: int, threads: bool) -> Callable[[], object]:
    """``sample()`` of a collector of ``pid``, reading the threads at every tick or never."""
    c = ProcessCollector(ProcfsSource(), pid)
    c.pss_interval_s = float("inf")  # PSS aside
    # A reading at every tick (by default at most every 0.45 s, and spaced to 0.05 % of
    # a core: ``thread_cpu_share``).
    c.thread_window_s, c.thread_cpu_share = 0.0, float("inf")
    c._threads_on = threads
    c.sample()
    return c.sample


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--number", type=int, default=200, help="ticks per timed run")
    args = p.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {sys.platform}")
    print(
        f"{'threads':>8}{'off µs':>10}{'on µs':>10}{'reading µs':>12}{'CPU µs':>10}"
        f"{'x off':>8}{'period s':>10}{'µs/s':>8}"
    )
    for n in (8, 64, 256, ProcessCollector.max_threads + 1):
        job = subprocess.Popen([sys.executable, "-c", JOB, str(n)], stdout=subprocess.PIPE)
        try:
            assert job.stdout is not None and job.stdout.readline().strip() == b"ready"
            off, on = sampler(job.pid, False), sampler(job.pid, True)
            wall_off, wall_on = per_call_us(off, on, number=args.number)
            cpu_off, cpu_on = per_call_us(off, on, number=args.number, clock=time.thread_time)
            read = on()
            assert (n > ProcessCollector.max_threads) != ("proc.cpu.busiestThreadPercent" in read)
        finally:
            job.kill()
            job.wait()
        cost = max(0.0, cpu_on - cpu_off)  # µs of CPU per reading
        # The default spacing of readings (ProcessCollector): at least thread_window_s,
        # and the reading's CPU over thread_cpu_share; what that costs per second.
        period = max(
            ProcessCollector.thread_window_s, cost / 1e6 / ProcessCollector.thread_cpu_share
        )
        print(
            f"{n:>8}{wall_off:>10.1f}{wall_on:>10.1f}{wall_on - wall_off:>12.1f}"
            f"{cost:>10.1f}{wall_on / wall_off:>8.2f}{period:>10.2f}{cost / period:>8.1f}"
        )


if __name__ == "__main__":
    main()
