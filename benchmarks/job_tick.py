"""Per-tick cost of watching a job of sibling ranks, and of reading its PSS.

Run: ``python benchmarks/job_tick.py`` (Linux). It starts 8 sibling roots (as ``torchrun``
starts ranks), each with 2 workers of its own: 24 processes of 31 threads each (30 idle
threads, as a PyTorch process has dozens). Measured side by side in one run (the
variants alternate, see ``per_call_us``):

1. the bare reads of those 24 ``/proc/<pid>/stat`` files (``os.open``, ``os.read``,
   ``os.close``: the least any sampler pays) and one walk of the 8 trees alone;
2. ``ProcessCollector.sample()`` watching the 8 roots: walking the trees every tick (the
   cost before rediscovery was throttled, kept as ``rediscover_max_s = 0``); after, when
   no PID was allocated since the last walk (the steady state: counters only); and after,
   when one was allocated before every tick (PID churn: a walk every tick, the worst
   case at intervals of ``rediscover_min_s`` or more), as µs per tick, per watched
   process, and as ratios to the bare reads;
3. the cost of one PSS reading (``smaps_rollup`` of every process: what
   ``proc.memory.percent`` is made of) of a process with a 4 GiB touched heap and 8 forked
   workers that read it, and of a 1 GiB one with 0, 1, 3 and 7 workers (1 to 8
   processes), in ms per reading and per process, and the reading period the collector
   derives from it (``ProcessCollector.pss_period``: ``max(pss_interval_s, 100 x the
   reading, 400 x the longest walk of one process)``).

Every process it starts is killed and reaped on the way out.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

from host_sample import per_call_us

from sysmetrics.collectors import ProcessCollector
from sysmetrics.collectors.process import _walk_time, process_tree
from sysmetrics.host import Job, ProcfsSource

THREADS = 30
WORKER = f"""
import os, threading, time
stop = threading.Event()
for _ in range({THREADS}):
    threading.Thread(target=stop.wait, daemon=True).start()
parent = os.getppid()
while os.getppid() == parent:  # ends with its root
    time.sleep(0.2)
"""
RANK = f"""
import subprocess, sys, threading, time
stop = threading.Event()
for _ in range({THREADS}):
    threading.Thread(target=stop.wait, daemon=True).start()
workers = [subprocess.Popen([sys.executable, "-c", {WORKER!r}]) for _ in range(2)]
time.sleep(3600)
"""
HEAP = """
import os, sys, time
n = int(sys.argv[1]) << 20
heap = bytearray(n)
heap[::4096] = b"\\x01" * (n // 4096)  # every page touched: resident
os.write(1, b"h")
parent = os.getpid()
for _ in range(int(sys.argv[2])):
    if os.fork() == 0:
        total = sum(heap[::4096])  # read every page, write none
        os.write(1, b"r")
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(0)
time.sleep(3600)
"""


@contextlib.contextmanager
def started(args_list: list[list[str]], **kw: object) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start the processes; on the way out kill them, their descendants first, and reap."""
    procs: list[subprocess.Popen[bytes]] = []
    source = ProcfsSource()
    try:
        for args in args_list:
            procs.append(subprocess.Popen(args, **kw))  # type: ignore[call-overload]
        yield procs
    finally:
        roots = tuple(p.pid for p in procs)
        for pid, _ in reversed(process_tree(source, roots)[len(roots) :]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)  # not our children: their root, killed next, reaps them
        for p in procs:
            p.kill()
            p.wait()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.1)


class CountingSource(ProcfsSource):
    """Procfs, counting the walks (calls of ``children`` on a root)."""

    walked = 0
    roots: frozenset[int] = frozenset()

    def children(self, pid: int) -> list[int]:
        """The children of ``pid``, counting a walk when it is the first root."""
        self.walked += pid in self.roots
        return super().children(pid)


def bare_reads(pids: list[int]) -> Callable[[], None]:
    paths = [f"/proc/{pid}/stat" for pid in pids]

    def run() -> None:
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            os.read(fd, 4096)
            os.close(fd)

    return run


def collector(source: ProcfsSource, roots: list[int], mode: str) -> Callable[[], object]:
    """``sample()`` of a collector watching ``roots``.

    ``every`` walks at each tick, ``steady`` when a PID was allocated (as a real monitor),
    ``churn`` as if one was allocated before each tick.
    """
    job = Job(roots[0])
    job.watch(roots)
    c = ProcessCollector(source, roots[0], job=job)
    c.pss_interval_s = math.inf  # PSS is measured on its own below
    c.rediscover_min_s = 0.0  # check for births at every tick, as at a 1 s interval
    if mode == "every":
        c.rediscover_max_s = 0.0
    c.sample()
    if mode != "churn":
        return c.sample

    def churned() -> object:
        c._walk_pid = -1  # a PID was allocated since the last walk
        return c.sample()

    return churned


def job_ticks(number: int) -> None:
    source = ProcfsSource()
    ranks = [[sys.executable, "-c", RANK] for _ in range(8)]
    with started(ranks) as procs:
        roots = [p.pid for p in procs]

        def ready() -> bool:
            tree = process_tree(source, tuple(roots))
            stats = [source.process(pid) for pid, _ in tree]
            return len(tree) == 24 and all(s and s.threads > THREADS for s in stats)

        wait_for(ready, "8 roots with 2 workers of 31 threads each")
        tree = process_tree(source, tuple(roots))
        pids = [pid for pid, _ in tree]
        threads = sum(s.threads for pid in pids if (s := source.process(pid)))
        every, steady, churn = (collector(source, roots, m) for m in ("every", "steady", "churn"))
        counting = CountingSource()
        counting.roots = frozenset(roots[:1])
        steady_counted = collector(counting, roots, "steady")
        counting.walked = 0
        bare, walk, t_every, t_steady, t_churn, t_counted = per_call_us(
            bare_reads(pids),
            lambda: process_tree(source, tuple(roots)),
            every,
            steady,
            churn,
            steady_counted,
            number=number,
        )
    n = len(pids)
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {sys.platform}")
    print(f"\n1-2. one tick watching 8 roots x (1 + 2 workers) = {n} processes, {threads} threads")
    print(f"   {'what':<52}{'µs/tick':>10}{'µs/process':>12}{'x bare':>8}")
    rows = [
        ("bare reads of the 24 stat files", bare),
        ("one walk of the 8 trees alone (children files)", walk),
        ("before: sample(), walk every tick", t_every),
        ("after: sample(), no PID allocated (steady state)", t_steady),
        ("after: sample(), a PID allocated before each tick", t_churn),
    ]
    for label, us in rows:
        print(f"   {label:<52}{us:>10.1f}{us / n:>12.1f}{us / bare:>8.2f}")
    print(f"   before / after (steady): {t_every / t_steady:.1f}x")
    print(
        f"   a copy of the steady one ({t_counted:.1f} µs/tick) walked {counting.walked} times"
        f" in its {9 * number + 1} ticks (PIDs allocated on this machine meanwhile)"
    )


def pss_reading(mib: int, workers: int, repeat: int) -> tuple[int, int, int, float, float]:
    """Processes, RSS and PSS (bytes), median seconds of a PSS reading and of its longest walk.

    The job: a ``mib`` MiB touched heap read by ``workers`` forked workers. A walk is one
    process's read, timed by the reader's runnable time, as the collector times it.
    """
    source = ProcfsSource()
    with started(
        [[sys.executable, "-c", HEAP, str(mib), str(workers)]], stdout=subprocess.PIPE
    ) as (parent,):
        assert parent.stdout is not None
        if parent.stdout.read(1 + workers) != b"h" + b"r" * workers:
            sys.exit("the workers did not start")
        pids = [pid for pid, _ in process_tree(source, parent.pid)]
        rss = sum(s.rss_bytes for pid in pids if (s := source.process(pid)))
        times, walks, pss = [], [], 0
        for _ in range(repeat):
            t, longest, pss = time.perf_counter(), 0.0, 0
            for pid in pids:
                walk = _walk_time()
                pss += source.pss(pid) or 0
                longest = max(longest, _walk_time() - walk)
            times.append(time.perf_counter() - t)
            walks.append(longest)
    middle = len(times) // 2
    return len(pids), rss, pss, sorted(times)[middle], sorted(walks)[middle]


def pss_cost(gib: int, workers: int, repeat: int) -> None:
    rule = ProcessCollector(ProcfsSource(), os.getpid())
    print(
        f"\n3. one PSS reading (smaps_rollup of every process, on the collector's own thread;"
        f" period = max({rule.pss_interval_s:g} s, 100 x the reading, 400 x the longest"
        f" walk); median of {repeat})"
    )
    print(
        f"   {'heap':>6}{'processes':>10}{'RSS MiB':>10}{'PSS MiB':>10}{'ms/read':>9}"
        f"{'ms/process':>11}{'ms/GiB RSS':>11}{'walk ms':>8}{'period s':>9}"
    )
    cases = [(1024, w) for w in (0, 1, 3, 7)] + ([(gib * 1024, workers)] if gib > 0 else [])
    for mib, n in cases:
        procs, rss, pss, took, walk = pss_reading(mib, n, repeat)
        period = rule.pss_period(took, walk)
        print(
            f"   {mib // 1024:>4} G{procs:>10}{rss / 2**20:>10,.0f}{pss / 2**20:>10,.0f}"
            f"{took * 1e3:>9.1f}{took * 1e3 / procs:>11.1f}{took * 1e3 / (rss / 2**30):>11.1f}"
            f"{walk * 1e3:>8.1f}{period:>9.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=50, help="ticks per measurement")
    parser.add_argument("--pss-gib", type=int, default=4, help="heap of the large PSS case, GiB")
    parser.add_argument("--pss-workers", type=int, default=8, help="forked workers")
    parser.add_argument("--pss-repeat", type=int, default=5, help="PSS readings to time")
    args = parser.parse_args()
    if not ProcfsSource.supported():
        sys.exit("this benchmark needs Linux procfs")
    job_ticks(args.number)
    pss_cost(args.pss_gib, args.pss_workers, args.pss_repeat)


if __name__ == "__main__":
    main()
