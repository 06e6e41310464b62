"""Cost of one full host sample, and of finding descendants among unrelated processes.

Run: ``python benchmarks/host_sample.py`` (Linux). Prints, measured side by side in this
one run:

1. one full host sample (every host collector's ``sample()``) in µs, beside the raw reads
   it needs (the same /proc and cgroup files opened and read, ``statvfs``, the affinity
   syscall, no parsing) and beside psutil's calls for the same metrics, as ratios;
2. the cost of finding a process's descendants with 0 and with 500 unrelated idle
   processes running, for sysmetrics (``/proc/<pid>/task/<tid>/children``) and for
   ``psutil.Process.children(recursive=True)`` (a scan of every process);
3. the cost of a path on a filesystem that may hang (FUSE, NFS, ...), whose ``statvfs``
   a helper process does (``StatfsProbe``): one request answered (a socket pair round trip),
   the sampler's call at the default cadence (every 5 s: most calls only look at the
   clock), beside ``statvfs`` in-process; the helper's start, and its CPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

from sysmetrics.cgroup import find_cgroup
from sysmetrics.collectors import ProcessCollector, host_collectors
from sysmetrics.host import ProcfsSource, StatfsProbe


def per_call_us(
    *fns: Callable[[], object],
    number: int,
    repeat: int = 9,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Mean time of one call of each function in µs, median over ``repeat`` runs.

    The functions' runs alternate (A B C A B C ...), so machine noise hits them alike.
    ``clock`` is wall time by default; ``time.thread_time`` gives CPU time instead.
    """
    for fn in fns:
        fn()
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, runs):
            t = clock()
            for _ in range(number):
                fn()
            out.append((clock() - t) / number * 1e6)
    return [statistics.median(r) for r in runs]


def raw_reads(pid: int, disk_paths: tuple[str, ...]) -> Callable[[], None]:
    """The reads a full host sample needs, done directly: open, read, nothing else."""
    cg = find_cgroup(pid=pid)
    cgroup_files = []
    if cg is not None:
        name = "memory.max" if cg.version == 2 else "memory.limit_in_bytes"
        cgroup_files = [os.path.join(d, name) for d in cg.memory_dirs]
    system_files = ["/proc/stat", "/proc/meminfo", "/proc/diskstats", "/proc/net/dev"]

    def read(path: str) -> None:
        try:
            with open(path, "rb") as f:
                f.read()
        except OSError:
            pass

    def run() -> None:
        tree = [pid]
        i = 0
        while i < len(tree):  # the same children files the collector reads
            task = f"/proc/{tree[i]}/task"
            for tid in os.listdir(task):
                with open(f"{task}/{tid}/children", "rb") as f:
                    tree.extend(int(c) for c in f.read().split())
            i += 1
        for p in tree:
            read(f"/proc/{p}/stat")
        os.sched_getaffinity(pid)
        for path in system_files + cgroup_files:
            read(path)
        for path in disk_paths:
            os.statvfs(path)

    return run


def psutil_sample(pid: int, disk_paths: tuple[str, ...]) -> Callable[[], None]:
    """The same metrics through psutil's public calls, as W&B's formulas write them."""
    root = psutil.Process(pid)

    def run() -> None:
        for p in [root, *root.children(recursive=True)]:
            with p.oneshot():
                p.cpu_times()
                p.num_threads()
                p.memory_info()
        psutil.cpu_percent(percpu=True)
        psutil.virtual_memory()
        psutil.disk_io_counters()
        psutil.net_io_counters()
        for path in disk_paths:
            psutil.disk_usage(path)

    return run


def full_sample(pid: int, disk_paths: tuple[str, ...]) -> Callable[[], None]:
    collectors = host_collectors(source=ProcfsSource(), pid=pid, disk_paths=disk_paths)

    def run() -> None:
        for c in collectors:
            c.sample()

    return run


def spawn(n: int, args: list[str]) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(args) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per measurement")
    parser.add_argument("--unrelated", type=int, default=500, help="unrelated idle processes")
    args = parser.parse_args()
    if not ProcfsSource.supported():
        sys.exit("this benchmark needs Linux procfs")

    pid, paths = os.getpid(), ("/",)
    ours, raw, ps = per_call_us(
        full_sample(pid, paths),
        raw_reads(pid, paths),
        psutil_sample(pid, paths),
        number=args.number // 4,
    )
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {sys.platform}")
    print("\n1. one full host sample (process tree, CPU, memory, disk, network)")
    print(f"   {'what':<40}{'µs':>10}{'ratio to raw':>15}")
    print(f"   {'raw reads (same files, no parsing)':<40}{raw:>10.1f}{1.0:>15.2f}")
    print(f"   {'sysmetrics full host sample':<40}{ours:>10.1f}{ours / raw:>15.2f}")
    print(f"   {'psutil calls for the same metrics':<40}{ps:>10.1f}{ps / raw:>15.2f}")

    # The watched root is a child with two children of its own; the unrelated processes
    # are its siblings, so they are never part of its tree.
    root = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, time\n"
         "k = [subprocess.Popen(['sleep', '600']) for _ in range(2)]\ntime.sleep(600)"],
    )  # fmt: skip
    unrelated: list[subprocess.Popen[bytes]] = []
    try:
        collector = ProcessCollector(ProcfsSource(), root.pid, True, None)
        while len(collector.tree()) < 3:
            time.sleep(0.01)
        proc = psutil.Process(root.pid)
        number = max(50, args.number // 10)
        rows = []
        for label in ("0 unrelated", f"{args.unrelated} unrelated"):
            if unrelated == [] and label != "0 unrelated":
                unrelated = spawn(args.unrelated, ["sleep", "600"])
                time.sleep(0.5)
            assert len(collector.tree()) == 3
            ours_us, psutil_us = per_call_us(
                collector.tree, lambda: proc.children(recursive=True), number=number
            )
            rows.append((label, ours_us, psutil_us))
        n = len(psutil.pids())
        print(f"\n2. finding the descendants of a process (tree of 3); {n} processes now")
        print(f"   {'':<20}{'sysmetrics µs':>15}{'psutil µs':>15}")
        for label, a, b in rows:
            print(f"   {label:<20}{a:>15.1f}{b:>15.1f}")
        (_, a0, b0), (_, a1, b1) = rows
        print(f"   {'ratio':<20}{a1 / a0:>15.2f}{b1 / b0:>15.2f}")
    finally:
        for c in psutil.Process(root.pid).children(recursive=True):
            c.kill()
        for p in [root, *unrelated]:
            p.kill()
            p.wait()
    isolated_statfs(args.number)


def isolated_statfs(number: int) -> None:
    """Section 3: statvfs through the helper process, beside statvfs in-process."""
    path = os.getcwd()
    each = StatfsProbe(path, every=0.0)  # asks at every call: one round trip each
    cadence = StatfsProbe(path)  # the default: asks every PROBE_EVERY s
    try:
        t = time.perf_counter()
        assert each.usage() is not None  # starts the helper and waits for its answer
        start_ms = (time.perf_counter() - t) * 1e3
        local, round_trip, sampled = per_call_us(
            lambda: os.statvfs(path), each.usage, cadence.usage, number=number
        )
        assert each.pid is not None
        with open(f"/proc/{each.pid}/stat") as f:
            ticks = sum(int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        with open(f"/proc/{each.pid}/status") as f:
            rss = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024
        calls = 1 + 9 * number + number  # per_call_us: one warm-up call, 9 repeats
        helper_cpu = ticks / os.sysconf("SC_CLK_TCK") / calls * 1e6
    finally:
        each.close()
        cadence.close()
    print(f"\n3. disk usage of a path that may hang, read by a helper process ({path})")
    print(f"   {'what':<48}{'µs':>10}{'ratio':>10}")
    print(f"   {'statvfs in-process':<48}{local:>10.1f}{1.0:>10.2f}")
    print(f"   {'helper: one request answered (round trip)':<48}{round_trip:>10.1f}"
          f"{round_trip / local:>10.2f}")  # fmt: skip
    print(f"   {'helper: the sampler call, default cadence':<48}{sampled:>10.1f}"
          f"{sampled / local:>10.2f}")  # fmt: skip
    print(f"   {'helper CPU per request (its own process)':<48}{helper_cpu:>10.1f}"
          f"{helper_cpu / local:>10.2f}")  # fmt: skip
    print(f"   helper start (once per path, and after a hang): {start_ms:.1f} ms; "
          f"its RSS {rss:.1f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
