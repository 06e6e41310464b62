"""How long a PSS reading stalls the ``mmap``/``munmap`` calls of the process it reads.

Run: ``python benchmarks/pss_stall.py [--sizes 1,4,8] [--seconds 3]`` (Linux). The kernel
answers ``/proc/<pid>/smaps_rollup`` by walking the page tables of every mapping of the
process under its mmap lock, held for reading; it lets go between two mappings when a
writer waits, never inside one. ``mmap`` and ``munmap`` take that lock for writing, so
a training thread allocating or freeing (the allocator's large blocks, DataLoader shared
memory) while the collector reads its PSS waits for the walk of a large heap to end.

Measured side by side in one run, in this process (what the collector reads, since it
runs inside the training process), for each heap size (one anonymous mapping, every
page touched, transparent huge pages off for it, as a heap of 4 KiB pages):

1. a thread doing ``mmap`` + ``munmap`` of 1 MiB in a loop, each call timed (p50, p99,
   max, µs), with no PSS reading (the baseline);
2. the same beside PSS readings of this process (``ProcfsSource.pss``, the collector's
   reader) back to back: the worst case, the lock held nearly all the time; prints the
   time each reading takes;
3. the same beside readings spaced as the collector spaces them (its cadence rule,
   ``ProcessCollector.pss_period``, from the median reading's wall and CPU time), over
   two periods, at least ``--seconds`` and at most ``SPACED_MAX_S`` (a long period then
   has one reading in the phase): what a training thread pays.

Ratios are to the baseline of the same size, measured just before. 16 GiB needs that
much free memory and more: pass it in ``--sizes`` only on a machine with room (sizes
that would leave less than ``HEADROOM_GIB`` available are skipped, with the reason).
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import threading
import time

from sysmetrics.collectors.process import ProcessCollector, _walk_time
from sysmetrics.host import ProcfsSource

GiB = 1 << 30
CHURN = 1 << 20  # bytes mapped and unmapped by each call pair of the churn thread
HEADROOM_GIB = 3.0  # GiB left available at least, for the machine's other work
SPACED_MAX_S = 15.0  # seconds at most of phase 3


def available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1 << 20)
    return 0.0


def heap(size: int) -> mmap.mmap:
    """An anonymous mapping of ``size`` bytes, every 4 KiB page of it touched."""
    m = mmap.mmap(-1, size)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        m.madvise(mmap.MADV_NOHUGEPAGE)
    chunk = 64 << 20
    ones = b"\x01" * (chunk // 4096)
    for start in range(0, size, chunk):
        m[start : start + chunk : 4096] = ones[: len(range(start, min(size, start + chunk), 4096))]
    return m


def churn(stop: threading.Event, calls: list[float]) -> None:
    """``mmap`` + ``munmap`` of ``CHURN`` bytes until ``stop``; each call's seconds to ``calls``."""
    clock = time.perf_counter
    while not stop.is_set():
        t0 = clock()
        m = mmap.mmap(-1, CHURN)
        t1 = clock()
        m.close()
        t2 = clock()
        calls.append(t1 - t0)
        calls.append(t2 - t1)


def phase(
    seconds: float, read_every: float | None
) -> tuple[list[float], list[tuple[float, float]]]:
    """Churn for ``seconds``, reading this process's PSS every ``read_every`` s.

    ``read_every`` 0: back to back; None: never. Returns the call latencies and each
    reading's (wall, runnable) time, seconds: the collector's measure of a walk, the
    reading thread's CPU time plus its waits for a CPU.
    """
    source, pid = ProcfsSource(), os.getpid()
    calls: list[float] = []
    reads: list[tuple[float, float]] = []
    stop = threading.Event()
    worker = threading.Thread(target=churn, args=(stop, calls))
    worker.start()
    end = time.monotonic() + seconds
    try:
        if read_every is None:
            time.sleep(seconds)
        else:
            while (now := time.monotonic()) < end:
                runnable = _walk_time()
                source.pss(pid)
                took = time.monotonic() - now
                reads.append((took, _walk_time() - runnable))
                if read_every:
                    time.sleep(max(0.0, min(end - time.monotonic(), read_every - took)))
    finally:
        stop.set()
        worker.join()
    return calls, reads


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, calls: list[float], base: list[float] | None) -> str:
    us = [c * 1e6 for c in calls]
    p50, p99, top = pct(us, 0.5), pct(us, 0.99), max(us)
    text = f"   {label:<34} {len(us):>8} {p50:>8.1f} {p99:>9.1f} {top:>10.1f}"
    if base is not None:
        b = [c * 1e6 for c in base]
        text += f"   x{p50 / pct(b, 0.5):>5.2f} x{p99 / pct(b, 0.99):>7.2f} x{top / max(b):>8.1f}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,4,8", help="heap sizes, GiB (comma-separated)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per phase")
    args = parser.parse_args()
    if not os.path.exists("/proc/self/smaps_rollup"):
        sys.exit("needs Linux smaps_rollup")
    rule = ProcessCollector(ProcfsSource(), os.getpid()).pss_period  # (took, longest)
    print(
        f"PSS reading beside mmap/munmap of {CHURN >> 20} MiB in a loop, kernel "
        f"{os.uname().release}, {os.cpu_count()} CPUs; latencies of each call, µs"
    )
    print(
        f"   {'phase':<34} {'calls':>8} {'p50':>8} {'p99':>9} {'max':>10}"
        f"   {'p50':>6} {'p99':>8} {'max':>9}"
    )
    for size_gib in (float(s) for s in args.sizes.split(",")):
        left = available_gib() - size_gib
        if left < HEADROOM_GIB:
            print(f"{size_gib:g} GiB: skipped, {available_gib():.1f} GiB available")
            continue
        m = heap(int(size_gib * GiB))
        try:
            base, _ = phase(args.seconds, None)
            print(f"{size_gib:g} GiB heap, one mapping, touched")
            print(row("no PSS reading (baseline)", base, None))
            calls, reads = phase(args.seconds, 0.0)
            print(row("PSS read back to back", calls, base))
            wall = statistics.median(w for w, _ in reads)
            runnable = statistics.median(r for _, r in reads)
            period = rule(wall, runnable)
            seconds = min(SPACED_MAX_S, max(args.seconds, 2 * period + 0.5))
            spaced, spaced_reads = phase(seconds, period)
            print(row(f"PSS read every {period:.1f} s (the rule)", spaced, base))
            print(
                f"   one reading: median {wall * 1e3:.1f} ms wall, {runnable * 1e3:.1f} ms "
                f"runnable, "
                f"max {max(w for w, _ in reads) * 1e3:.1f} ms ({len(reads)} back to back; "
                f"{wall * 1e3 / size_gib:.1f} ms/GiB); at the rule's period the lock is held "
                f"{wall / period * 100:.2f} % of the time ({len(spaced_reads)} readings "
                f"in {seconds:.1f} s)"
            )
        finally:
            m.close()


if __name__ == "__main__":
    main()
