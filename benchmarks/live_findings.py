"""Live findings' memory and cost: the bounded store, and a training loop beside an evaluation.

Run: ``python benchmarks/live_findings.py`` (``--old REV`` also measures the store of
``sysmetrics/live_findings.py`` at git revision REV, e.g. the commit before the bounded store;
``--seconds`` per round of part b, ``--rounds``; ``--only a`` or ``--only b``).

a. Memory. Samples at 1 s, 1 h and 24 h of them, of 60 and 400 keys (a workstation's:
   CPU cores, one or eight GPUs, the job, disks, network, steps; padded with gauges),
   and of 60 keys plus one whose label value changes each sample (a churning key), are
   fed to a :class:`~sysmetrics.live_findings.LiveFindings` (through its reader, no monitor
   thread). Printed: the rows and keys kept, the store's bytes (``_Store.nbytes``:
   its arrays, columns and keys), the bytes tracemalloc saw it keep (1 h rows only:
   tracemalloc makes feeding 20x slower), the CPU seconds feeding took, and one
   evaluation's CPU seconds (a fresh run built from the store plus every rule). With
   ``--old``, the old store at 1 h (tracemalloc).
b. Step rate. A small CPU-bound Python loop (a training-like step) runs on the main
   thread in rounds of ``--seconds``, alternating: no evaluation; the findings thread
   (nice 19, its throttle) evaluating a 24 h store of 60 keys back to back; the same
   evaluations on a plain thread without the throttle (what the old code did). Printed:
   steps/s of each (the median over the rounds), the ratio to "none", the least and
   largest of each round's ratio to its "none" (the noise), the share of the wall time
   the loop was blocked (waiting for the interpreter's lock, from schedstat: what
   other processes on a shared machine do not change), the evaluating thread's CPU
   share of the round's wall time, and the evaluations it finished.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from types import ModuleType
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sysmetrics import live_findings
from sysmetrics.collectors.base import BaseCollector
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Sample

HOUR = 3600
DAY = 86_400


class _Nothing(BaseCollector):
    name = "nothing"

    def sample(self) -> dict[str, float]:
        return {}


class FedReader:
    """A reader the benchmark feeds (no monitor thread, no clock)."""

    def __init__(self) -> None:
        self.fed: list[Sample] = []

    def samples(self) -> list[Sample]:
        """What was fed since the last call."""
        out, self.fed = self.fed, []
        return out

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Nothing comes: a short sleep."""
        time.sleep(min(timeout or 0.0, 0.01))
        return False

    def close(self) -> None:
        """Nothing to close."""


def live_of(module: ModuleType) -> tuple[Any, FedReader]:
    """A LiveFindings of ``module`` (its thread not started) reading a fed reader."""
    with SystemMonitor(interval=1.0, collectors=[_Nothing()]) as m:
        live = module.LiveFindings(m, lambda line: None, every=0.0, first=0.0)
    live._reader.close()
    reader = FedReader()
    live._reader = reader
    return live, reader


def names(keys: int) -> list[str]:
    """``keys`` metric keys: a workstation's (1 GPU and 16 cores, or 8 GPUs and 64), padded."""
    gpus, cores = (1, 16) if keys < 200 else (8, 64)
    out = ["cpu", "proc.cpu.threads", "proc.memory.rssMB", "proc.memory.pssMB",
           "proc.memory.percent", "proc.memory.availableMB", "memory", "memory.swapPercent",
           "disk./.usagePercent", "disk./.usageGB", "disk.in", "disk.out", "network.sent",
           "network.recv", "step.seconds", "step.dataWaitPercent"]  # fmt: skip
    out += [f"cpu.{i}.cpu_percent" for i in range(cores)]
    for i in range(gpus):
        out += [f"gpu.{i}.{k}" for k in ("gpu", "memory", "memoryAllocated", "temp",
                                         "powerWatts", "smClock", "throttle.thermal",
                                         "throttle.powerCap", "energyJoules")]  # fmt: skip
        out.append(f"gpu.process.{i}.gpu")
    out += [f"openmetrics.app.gauge.{k}" for k in range(max(0, keys - len(out)))]
    return out[:keys]


def stream(keys: int, seconds: int, churn: bool = False) -> Iterator[list[Sample]]:
    """``seconds`` samples at 1 s of ``keys`` keys (counters rise), in batches of 600."""
    keyed = names(keys)
    counters = {k for k in keyed if k.startswith(("disk.in", "disk.out", "network."))}
    counters |= {k for k in keyed if k.endswith("energyJoules")}
    floats = [float(v) for v in range(101)]
    batch: list[Sample] = []
    for j in range(seconds):
        values = {
            k: (1e3 * j if k in counters else floats[(j + n) % 101]) for n, k in enumerate(keyed)
        }
        if churn:
            values[f"openmetrics.app.requests.{j}"] = 1.0
        batch.append(Sample(1.79e9 + j, 1e4 + j, j // 3, values))
        if len(batch) == 600:
            yield batch
            batch = []
    if batch:
        yield batch


def feed(live: Any, reader: FedReader, samples: Iterator[list[Sample]]) -> None:
    for batch in samples:
        reader.fed = batch
        del batch
        live._take()


def traced(module: ModuleType, keys: int, seconds: int, churn: bool) -> float:
    """MiB tracemalloc sees ``module``'s LiveFindings keep after ``seconds`` samples."""
    live, reader = live_of(module)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        feed(live, reader, stream(keys, seconds, churn))
        return (tracemalloc.get_traced_memory()[0] - before) / 2**20
    finally:
        tracemalloc.stop()


def old_module(rev: str) -> ModuleType:
    """``sysmetrics/live_findings.py`` (``announce.py`` before) at git revision ``rev``.

    Imported under another name, beside today's.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("live_findings.py", "announce.py"):
        shown = subprocess.run(["git", "-C", root, "show", f"{rev}:sysmetrics/{name}"],
                               capture_output=True, text=True)  # fmt: skip
        if shown.returncode == 0:
            break
    shown.check_returncode()
    text = shown.stdout
    path = os.path.join(tempfile.mkdtemp(), "live_findings_old.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("live_findings_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def memory(old: Optional[str]) -> None:
    print("a. Memory: samples at 1 s fed to LiveFindings")
    a = live_findings
    print(f"   bounds: LIVE_MAX_VALUES {a.LIVE_MAX_VALUES:,} (rows x keys), "
          f"LIVE_MAX_ROWS {a.LIVE_MAX_ROWS:,}, LIVE_MAX_KEYS {a.LIVE_MAX_KEYS:,}")  # fmt: skip
    print(
        "   what                      samples   rows  keys  store MiB  traced MiB  "
        "feed CPU s  eval CPU s"
    )
    cases = [(60, HOUR, False), (400, HOUR, False), (60, HOUR, True),
             (60, DAY, False), (400, DAY, False), (60, DAY, True)]  # fmt: skip
    for keys, seconds, churn in cases:
        label = f"{keys} keys{' + churn' if churn else ''}, {'1 h' if seconds == HOUR else '24 h'}"
        mib = traced(live_findings, keys, seconds, churn) if seconds == HOUR else math.nan
        live, reader = live_of(live_findings)
        began = time.process_time()
        feed(live, reader, stream(keys, seconds, churn))
        fed_s = time.process_time() - began
        store = live._store
        began = time.process_time()
        live._evaluate()
        eval_s = time.process_time() - began
        kept = store.nbytes() / 2**20
        print(f"   {label:<24} {store.samples:8d} {store.rows:6d} {len(store.columns):5d} "
              f"{kept:10.2f} {mib:11.2f} {fed_s:11.2f} {eval_s:11.3f}")  # fmt: skip
    if old:
        module = old_module(old)
        for keys, churn in ((60, False), (400, False), (60, True)):
            mib = traced(module, keys, HOUR, churn)
            print(f"   old store ({old}), {keys} keys{' + churn' if churn else ''}, 1 h: "
                  f"{mib:.2f} MiB traced")  # fmt: skip


def step() -> None:
    """One training-like step: a little Python arithmetic (about 100 µs)."""
    total = 0.0
    for x in range(400):
        total += x * 0.5
    if total < 0:
        raise AssertionError


class Evaluating:
    """Evaluates a 24 h store back to back on a thread of its own, throttled or not."""

    def __init__(self, live: Any, throttled: bool, nice: bool) -> None:
        self.live = live
        self.throttled = throttled
        self.nice = nice
        self.stop = threading.Event()
        self.evaluations = 0
        self.thread = threading.Thread(target=self._run, name="evaluating", daemon=True)

    def cpu(self) -> float:
        """The thread's CPU seconds so far (Linux, macOS: its own CPU clock)."""
        assert self.thread.ident is not None
        return time.clock_gettime(time.pthread_getcpuclockid(self.thread.ident))

    def _run(self) -> None:
        throttle = None
        if self.throttled:  # as the findings thread does
            if self.nice:
                live_findings._lowest_priority()
            throttle = live_findings._Throttle(self.stop)  # _evaluate installs it
        try:
            while not self.stop.is_set():
                self.live._evaluate(throttle)
                self.live._said.clear()
                self.evaluations += 1
        finally:
            sys.setprofile(None)


def schedstat() -> tuple[float, float]:
    """The calling thread's CPU s and s waiting on a run queue (Linux; elsewhere 0)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            cpu, queued = f.read().split()[:2]
        return int(cpu) / 1e9, int(queued) / 1e9
    except OSError:
        return time.thread_time(), 0.0


def steps_per_second(seconds: float) -> tuple[float, float]:
    """Steps/s of the loop, and the share of the wall time the loop was blocked.

    Blocked: neither running nor waiting for a CPU (the wall time less the thread's CPU
    time and its run-queue wait, from schedstat): waiting for the interpreter's lock,
    which the other processes of a shared machine do not cause.
    """
    end = time.perf_counter() + seconds
    n = 0
    cpu0, queued0 = schedstat()
    began = time.perf_counter()
    while time.perf_counter() < end:
        step()
        n += 1
    wall = time.perf_counter() - began
    cpu1, queued1 = schedstat()
    return n / wall, max(0.0, wall - (cpu1 - cpu0) - (queued1 - queued0)) / wall


def rate(seconds: int, rounds: int) -> None:
    live, reader = live_of(live_findings)
    feed(live, reader, stream(60, DAY))
    print(f"b. Step rate: a ~100 µs Python step on the main thread, {seconds} s rounds, "
          f"beside evaluations of a 24 h store ({live._store.rows} rows, "
          f"{len(live._store.columns)} keys)")  # fmt: skip
    modes = ("none", "throttled (LIVE_DUTY)", "throttled + nice 19", "plain thread (old)")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    shares: dict[str, list[float]] = {m: [] for m in modes}
    blocked: dict[str, list[float]] = {m: [] for m in modes}
    evaluations: dict[str, int] = dict.fromkeys(modes, 0)
    for r in range(rounds):
        for mode in modes[r % 4 :] + modes[: r % 4]:  # the order rotates each round
            evaluating = (
                None if mode == "none" else Evaluating(live, mode.startswith("thr"), "nice" in mode)
            )
            cpu = 0.0
            if evaluating is not None:
                evaluating.thread.start()
                time.sleep(0.2)  # it is evaluating
                cpu = evaluating.cpu()
            began = time.perf_counter()
            steps, held = steps_per_second(seconds)
            rates[mode].append(steps)
            blocked[mode].append(held)
            wall = time.perf_counter() - began
            if evaluating is not None:
                shares[mode].append((evaluating.cpu() - cpu) / wall)
                evaluating.stop.set()  # the throttled one finishes unthrottled, unmeasured
                evaluating.thread.join()
                evaluations[mode] += evaluating.evaluations
    base = statistics.median(rates["none"])
    print("   mode                           steps/s   ratio  rounds' ratios  loop blocked  "
          "eval CPU share  evaluations")  # fmt: skip
    for mode in modes:
        median = statistics.median(rates[mode])
        share = statistics.median(shares[mode]) if shares[mode] else 0.0
        ratios = [r / n for r, n in zip(rates[mode], rates["none"])]
        spread = f"{min(ratios):.2f} .. {max(ratios):.2f}"
        held = statistics.median(blocked[mode])
        print(f"   {mode:<29} {median:9.0f}  {median / base:6.3f}  {spread:>14}  {held:12.1%}  "
              f"{share:14.1%}  {evaluations[mode]:11d}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", help="a git revision whose live_findings.py to measure too")
    parser.add_argument("--seconds", type=int, default=3, help="seconds per round of b")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of b")
    parser.add_argument("--only", choices=("a", "b"))
    args = parser.parse_args()
    if args.only != "b":
        memory(args.old)
    if args.only != "a":
        rate(args.seconds, args.rounds)


if __name__ == "__main__":
    main()
