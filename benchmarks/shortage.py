"""Faults that come and go (issue 30): how fast sampling recovers, measured in one run.

Run: ``python benchmarks/shortage.py`` (Linux; about 20 s). It prints:

1. Descriptor shortage: a real ``SystemMonitor()`` (the default collectors, 0.1 s
   interval) in a child process whose ``RLIMIT_NOFILE`` is filled up for ``--hold`` s
   (2 by default), then freed: the samples during the shortage, how long after the
   release the last collector's keys were back (the back-off: tries 1, 3, 7 s after a
   collector's first failure), the collectors left, and the warnings.
2. Stuck collectors in turn: ``--stuck`` collectors (3) block one after another, each
   while the one before (left behind) returns, with ``STUCK_AFTER`` set to ``--after`` s
   (1): for each, the seconds from blocking to being left behind (``STUCK_AFTER`` plus the
   watchdog's lateness), and the seconds until the others sampled again.
3. Engine cost per tick (µs, median of 2000 ticks, 10 trivial collectors): all sampling,
   against one of them backing off after a shortage (skipped ticks cost a dict lookup).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sysmetrics.monitor as sysmetrics_monitor  # noqa: E402
from sysmetrics import BaseCollector, SystemMonitor  # noqa: E402

CHILD = """
import errno, json, os, resource, sys, time, warnings
from sysmetrics import SystemMonitor

hold = float(sys.argv[1])
warned = []
warnings.simplefilter("always")
warnings.showwarning = lambda message, *args, **kwargs: warned.append(str(message))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
m = SystemMonitor(interval=0.1)
r = m.reader(buffer=100_000)
m.start()
time.sleep(1.0)
stable = set.intersection(*(set(s.values) for s in r.samples()))
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as exc:
    assert exc.errno == errno.EMFILE
time.sleep(hold)
short = r.samples()
for fd in fds:
    os.close(fd)
released = time.monotonic()
back = None
while time.monotonic() < released + 30 and back is None:
    time.sleep(0.02)
    for s in r.samples():
        if stable <= set(s.values):
            back = s.monotonic - released
            break
m.stop()
print(json.dumps({"keys": len(stable), "short": len(short),
                  "short_missing": sum(not stable <= set(s.values) for s in short),
                  "back": back, "collectors": [c.name for c in m.collectors],
                  "warned": warned}))
"""


def shortage(hold: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(hold)], capture_output=True, text=True, env=env
    )
    if out.returncode:
        print(out.stderr[-2000:])
        return
    r = json.loads(out.stdout.splitlines()[-1])
    print(f"1. Descriptor shortage of {hold:g} s, default collectors, interval 0.1 s")
    print(f"   stable keys before: {r['keys']}")
    print(f"   samples during it: {r['short']}, of which missing keys: {r['short_missing']}")
    back = "never (within 30 s)" if r["back"] is None else f"{r['back']:.2f} s"
    print(f"   all keys back after the release: {back}")
    print(f"   collectors left: {', '.join(r['collectors'])}")
    print(f"   warnings: {len(r['warned'])}")
    for w in r["warned"]:
        print(f"     {w[:110]}...")


class Blocks(BaseCollector):
    """Blocks in ``sample()`` once ``block`` is set, until ``go``; notes when it blocked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.block, self.go, self.blocked = threading.Event(), threading.Event(), 0.0

    def sample(self) -> dict[str, float]:  # noqa: D102
        if self.block.is_set() and not self.go.is_set():
            self.blocked = time.monotonic()
            self.go.wait(60)
        return {f"{self.name}.x": 1.0}


class Counting(BaseCollector):
    """Notes the time of each sample."""

    name = "good"

    def __init__(self) -> None:
        self.times: list[float] = []

    def sample(self) -> dict[str, float]:  # noqa: D102
        self.times.append(time.monotonic())
        return {"good.n": float(len(self.times))}


def wait(fn: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not fn():  # type: ignore[operator]
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def stuck_in_turn(n: int, after: float) -> None:
    sysmetrics_monitor.STUCK_AFTER = after
    good, stuck = Counting(), [Blocks(f"blocks{i}") for i in range(n)]
    print(f"2. {n} collectors stuck in turn, STUCK_AFTER = {after:g} s, interval 0.02 s")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = SystemMonitor(interval=0.02, collectors=[good, *stuck]).start()
        try:
            for i, c in enumerate(stuck):
                c.block.set()
                wait(lambda c=c: c.blocked, 5)
                if i:
                    stuck[i - 1].go.set()
                found = wait(lambda c=c: c not in m.collectors, 3 * after + 5)
                left = time.monotonic()
                if not found:
                    print(f"   {c.name}: never found")
                    break
                wait(lambda left=left: good.times and good.times[-1] > left, 5)
                print(
                    f"   {c.name}: left behind {left - c.blocked:.3f} s after it blocked; "
                    f"the others sampled again {good.times[-1] - left:.3f} s later"
                )
        finally:
            for c in stuck:
                c.go.set()
            m.stop()


class Trivial(BaseCollector):
    """One key; or, with ``fail``, ``EMFILE`` at every sample."""

    def __init__(self, i: int, fail: bool = False) -> None:
        self.name, self.fail = f"t{i}", fail

    def sample(self) -> dict[str, float]:  # noqa: D102
        if self.fail:
            raise OSError(errno.EMFILE, "Too many open files")
        return {f"{self.name}.x": 1.0}


def tick_cost(ticks: int) -> None:
    print(f"3. Engine cost per tick, 10 trivial collectors (median of {ticks} ticks)")
    for label, failing in (("all sampling", False), ("one backing off", True)):
        cs = [Trivial(i, fail=failing and i == 0) for i in range(10)]
        m = SystemMonitor(interval=3600, collectors=cs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m._sample_once(0)  # the failing one starts backing off (for 1 s)
        costs = []
        for _ in range(ticks):
            t = time.perf_counter()
            m._sample_once(0)
            costs.append(time.perf_counter() - t)
        m.stop()
        print(f"   {label}: {statistics.median(costs) * 1e6:.1f} µs")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hold", type=float, default=2.0, help="seconds without descriptors")
    p.add_argument("--stuck", type=int, default=3, help="collectors stuck in turn")
    p.add_argument("--after", type=float, default=1.0, help="STUCK_AFTER, seconds")
    p.add_argument("--ticks", type=int, default=2000, help="ticks timed in part 3")
    a = p.parse_args()
    shortage(a.hold)
    stuck_in_turn(a.stuck, a.after)
    tick_cost(a.ticks)


if __name__ == "__main__":
    main()
