"""Per-tick cost of the NVIDIA collector per GPU and per NVML call, and a real CUDA load.

``python benchmarks/nvidia_tick.py [--ticks N]`` (from the repository root) does:

1. with the fake NVML library of ``tests/fake_nvml.py`` under the real ``pynvml``
   binding (8 GPUs, 2 processes on each; any machine): µs of ``NvidiaCollector.sample()``
   per GPU per tick, NVML calls per GPU per tick, and µs per call, with the default
   cadence (``NvidiaCollector.periods``: process lists and ECC every 5 s, the power limit
   every 30 s) and in the old "everything every tick" mode (every period 0), and the
   ratios of the two. The fake's calls are Python callbacks, so µs per call here is the
   binding's and the collector's overhead, not a driver's;
2. on a machine with an NVIDIA GPU, the same two modes over the real NVML (calls counted
   and timed through a wrapper of the binding's library, about 0.5 µs a call), a table of
   each NVML function's calls and µs per call, then
   starts a child process that allocates 4 GiB with torch on GPU 0 and runs matmuls,
   monitors it for a few seconds, and prints utilization, the change of allocated bytes
   and the ``gpu.process.0.*`` keys seen for the process tree. Elsewhere it says there is
   no GPU and stops after step 1.

The ticks are timed back to back, each 1 s apart on the collector's own clock (the
monitor's default interval), so the slow reads fall where they would in a run; N (600 by
default, a multiple of 30 s) covers whole periods. Each figure is the median of 5 runs,
the two modes alternating.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sysmetrics import SystemMonitor
from sysmetrics.collectors import NvidiaCollector
from sysmetrics.host import default_source

ROOT = Path(__file__).resolve().parent.parent
INTERVAL_S = 1.0  # simulated time between ticks

LOAD = """
import sys, time, torch
x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # 4 GiB
a = torch.randn(8192, 8192, device="cuda")
print("ready", flush=True)
t = time.time()
while time.time() - t < float(sys.argv[1]):
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
"""


def measure(
    c: NvidiaCollector, calls: Callable[[], int], ticks: int, every_tick: bool
) -> tuple[float, float]:
    """(µs per GPU per tick, NVML calls per GPU per tick) of one run of ``ticks``."""
    saved = dict(c.periods)
    if every_tick:
        c.periods = dict.fromkeys(c.periods, 0.0)
    now = [0.0]
    c._field_reader.clock = lambda: now[0]
    for dev in c.devices:  # start the run as at the first sample
        dev.lists_due = float("-inf")
        dev.fields.held.clear()
    n = len(c.devices)
    try:
        before = calls()
        t = time.perf_counter()
        for _ in range(ticks):
            c.sample()
            now[0] += INTERVAL_S
        elapsed = time.perf_counter() - t
    finally:
        c.periods = saved
        c._field_reader.clock = time.monotonic
    return elapsed / ticks / n * 1e6, (calls() - before) / ticks / n


MODES = {"everything every tick": True, "cadence (default)": False}


def compare(label: str, c: NvidiaCollector, calls: Callable[[], int], ticks: int) -> None:
    """Both modes side by side (5 runs each, alternating; medians), and their ratios."""
    c.sample()  # process layout, function pointers
    print(f"{label}: {len(c.devices)} GPU(s), {ticks} ticks {INTERVAL_S:g} s apart")
    print(f"  {'mode':<22}{'µs/GPU/tick':>12}{'calls/GPU/tick':>16}{'µs/call':>10}")
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in MODES}
    for _ in range(5):
        for name, every in MODES.items():
            runs[name].append(measure(c, calls, ticks, every))
    rows = {}
    for name in MODES:
        us = statistics.median(r[0] for r in runs[name])
        n = statistics.median(r[1] for r in runs[name])
        rows[name] = (us, n)
        print(f"  {name:<22}{us:>12.1f}{n:>16.2f}{us / n:>10.2f}")
    (old_us, old_n), (new_us, new_n) = rows.values()
    print(f"  old/new: {old_us / new_us:.2f}x the time, {old_n / new_n:.2f}x the NVML calls")


def fake(ticks: int) -> None:
    """Step 1: 8 fake GPUs with 2 processes each (one of this process's, one not)."""
    sys.path.insert(0, str(ROOT))
    from tests.fake_nvml import FakeGpu, FakeNvmlLib, binding

    gpus = [
        FakeGpu(f"GPU-{n}", minor=n, compute=[(os.getpid(), 1 << 30), (1, 2 << 30)])
        for n in range(8)
    ]
    lib = FakeNvmlLib(gpus)
    c = NvidiaCollector.create(default_source(), os.getpid(), nvml=binding(lib))
    assert c is not None
    compare("fake NVML", c, lambda: sum(lib.calls.values()), ticks)
    c.close()


class _Counted:
    """A C function of the library, counting its calls (attributes go to the function)."""

    def __init__(self, fn: Any, name: str, calls: Counter[str], seconds: dict[str, float]) -> None:
        object.__setattr__(self, "_fn", fn)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_calls", calls)
        object.__setattr__(self, "_seconds", seconds)

    def __call__(self, *args: Any) -> Any:
        self._calls[self._name] += 1
        t = time.perf_counter()
        try:
            return self._fn(*args)
        finally:
            self._seconds[self._name] = self._seconds.get(self._name, 0.0) + time.perf_counter() - t

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fn, name, value)  # restype, argtypes


class _CountingLib:
    """Stands for the binding's ``nvmlLib`` (a CDLL) and counts the calls of each function."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.calls: Counter[str] = Counter()
        self.seconds: dict[str, float] = {}  # wall time inside each function
        self._fns: dict[str, _Counted] = {}

    def __getattr__(self, name: str) -> Any:
        if name not in self._fns:
            self._fns[name] = _Counted(getattr(self.lib, name), name, self.calls, self.seconds)
        return self._fns[name]

    def table(self) -> str:
        """Each function's calls and µs per call, the costliest (in all) first."""
        rows = sorted(self.calls, key=lambda n: -self.seconds.get(n, 0.0))
        total = sum(self.seconds.values()) or 1.0
        lines = [f"  {'NVML function':<44}{'calls':>8}{'µs/call':>10}{'share':>8}"]
        for n in rows:
            s = self.seconds.get(n, 0.0)
            lines.append(
                f"  {n:<44}{self.calls[n]:>8}{s / self.calls[n] * 1e6:>10.1f}"
                f"{s / total * 100:>7.1f}%"
            )
        return "\n".join(lines)


def real(ticks: int) -> bool:
    """Step 2 on the real NVML; False where there is none."""
    c = NvidiaCollector.create(default_source(), os.getpid())
    if c is None:
        print("real NVML: no NVIDIA GPU, driver or NVML here: nothing more to measure")
        return False
    nvml = c.nvml
    counting = _CountingLib(nvml.nvmlLib)
    cache = nvml._nvmlGetFunctionPointer_cache
    saved = dict(cache)
    nvml.nvmlLib = counting
    cache.clear()  # the binding caches the functions it looked up
    try:
        compare("real NVML", c, lambda: sum(counting.calls.values()), ticks)
        print("real NVML, each function over both modes' runs (wall time inside the call):")
        print(counting.table())
    finally:
        nvml.nvmlLib = counting.lib
        cache.clear()
        cache.update(saved)
    c.close()
    return True


def load() -> None:
    """A child process loading GPU 0, as the monitor sees it."""
    with SystemMonitor(interval=0.2) as m:
        before = m.snapshot()
        child = subprocess.Popen(
            [sys.executable, "-c", LOAD, "4"], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        m.snapshot()
        time.sleep(6)  # past the next read of the process lists (every 5 s)
        during = m.snapshot()
        child.wait()
    grew = during["gpu.0.memoryAllocatedBytes"] - before["gpu.0.memoryAllocatedBytes"]
    print(f"gpu.0.gpu under load: {during.get('gpu.0.gpu')} %")
    print(
        f"gpu.0.memoryAllocatedBytes grew by {grew / 2**30:.2f} GiB "
        "(4 GiB and a 256 MiB matrix allocated)"
    )
    print(
        "gpu.process.0 keys:", {k: v for k, v in during.items() if k.startswith("gpu.process.0.")}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=600, help="ticks a run (default 600)")
    args = parser.parse_args()
    fake(args.ticks)
    if real(args.ticks):
        load()


if __name__ == "__main__":
    main()
