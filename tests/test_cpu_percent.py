"""No percentage above 100 (issue 22, item 2).

Through the real path: ``sysmetrics record --interval 0.25`` of ``torchrun
--nproc-per-node 2`` (two gloo ranks on CPU) and of a plain loop over a DataLoader with 2
workers. Every process of those jobs logs its own CPU time (``time.process_time()``,
every 20 ms, from a thread started before anything else), which is the truth: over each
window between two samples of the run file, the job's CPU is at least what those
processes used. ``cpu`` must never be above 100, nor below half that truth at start-up,
where ranks and workers are born between two walks of the tree (``cpu`` read 174 there,
after a window that read 0).

Then one test per source of percentages: each real collector, inside a real
:class:`~sysmetrics.SystemMonitor`, fed raw readings that make its percentage pass 100 (or
go below 0) at the lowest level (the host source, the cgroup files, NVML's C library);
every output holds it within 0..100.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import SystemMonitor
from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors import (
    CPUCollector,
    DiskCollector,
    MemoryCollector,
    NvidiaCollector,
    ProcessCollector,
)
from sysmetrics.descriptions import describe
from sysmetrics.host import CpuTime, DiskUsage, ProcfsSource, ProcStat
from sysmetrics.sinks.jsonl import JsonlSink
from tests.fake_nvml import FakeGpu, FakeNvmlLib, binding

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

# Started first in every process of the job: its CPU time, every 20 ms, to LOG.<pid>.
CPU_LOG = """
import os, threading, time
def _log(path):
    with open(path, "a") as f:
        while True:
            f.write(f"{time.monotonic()} {time.process_time()}\\n")
            f.flush()
            time.sleep(0.02)
def start_log():
    path = os.environ["CPU_LOG"] + f".{os.getpid()}"
    threading.Thread(target=_log, args=(path,), daemon=True).start()
"""

DDP = (
    CPU_LOG
    + """
start_log()
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.zeros(1)
end = time.monotonic() + 2.0
while time.monotonic() < end:  # each rank busy on one CPU
    t += 1
dist.all_reduce(t)
dist.destroy_process_group()
"""
)

LOADER = (
    CPU_LOG
    + """
start_log()
import torch
class Busy(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        end = time.process_time() + 0.01  # 10 ms of CPU per item
        while time.process_time() < end:
            pass
        return i
def init(_):
    start_log()  # in the worker, after the fork
loader = torch.utils.data.DataLoader(Busy(), batch_size=4, num_workers=2, worker_init_fn=init)
for epoch in range(8):  # new workers each epoch: 8 start-ups
    end = time.monotonic() + 0.4
    for batch in loader:
        if time.monotonic() > end:
            break
"""
)


def logged(log: Path) -> list[tuple[float, float]]:
    """(monotonic, CPU seconds) of one process, every 20 ms (a last line cut short is left)."""
    return [
        (float(t), float(c))
        for t, c in (line.split() for line in log.read_text().splitlines()[:-1])
    ]


def truth(points: list[tuple[float, float]], start: float, end: float) -> float:
    """CPU seconds a process used from ``start`` to ``end``, within the span of its log."""
    start, end = max(start, points[0][0]), min(end, points[-1][0])
    if start >= end:
        return 0.0

    def at(t: float) -> float:
        for (t0, c0), (t1, c1) in zip(points, points[1:]):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c0
        raise AssertionError(t)

    return at(end) - at(start)


def recorded(tmp_path: Path, command: list[str]) -> tuple[list[dict[str, Any]], list[Path]]:
    """The run file of ``sysmetrics record --interval 0.25 -- command``, and the CPU logs."""
    run = tmp_path / "run.jsonl"
    env = {**os.environ, "CPU_LOG": str(tmp_path / "cpu")}
    recorder = [sys.executable, "-m", "sysmetrics", "record", "--output", str(run)]
    done = subprocess.run(
        [*recorder, "--interval", "0.25", "--", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in run.read_text().splitlines()]
    return [x for x in lines if "metrics" in x], sorted(tmp_path.glob("cpu.*"))  # samples


def check_cpu(samples: list[dict[str, Any]], logs: list[Path], processes: int) -> None:
    """No ``cpu`` over 100; each within 0.5 to 1.5 times (give or take 10 points: a clock
    tick per process, and what a process used before its log began) what the job's
    processes used in its window, by their own logs, at start-up."""
    cpus = len(os.sched_getaffinity(0))
    points = sorted((logged(log) for log in logs), key=lambda p: p[0][0])
    assert len(points) == processes, logs
    cpu = [(s["monotonic"], s["metrics"].get("cpu")) for s in samples]
    outside = [(round(t, 2), v) for t, v in cpu if v is not None and not 0.0 <= v <= 100.0]
    assert not outside, (outside, cpu)
    # Start-up: from the first process's log to 0.5 s after the last one's began (after
    # that, a process that exits burns CPU its log no longer sees: Python's finalization),
    # and not past the first process's last log line: the launcher (the loader script's
    # main process) may end within that 0.5 s, and its finalization, unseen by its log,
    # read 80 % against a logged 41 % in one window (CI, 2026-11-27).
    start = points[0][0][0]
    end = min(max(p[0][0] for p in points) + 0.5, points[0][-1][0])
    checked = []
    for (a, _), (b, value) in zip(cpu, cpu[1:]):
        if value is None or a < start or b > end:
            continue
        true = sum(truth(p, a, b) for p in points) / (b - a) / cpus * 100.0
        checked.append((round(a, 2), round(value, 1), round(true, 1)))
    assert len(checked) >= 3, (checked, cpu)
    wrong = [c for c in checked if not 0.5 * c[2] <= c[1] <= 1.5 * c[2] + 10.0]
    assert not wrong, (wrong, checked)


TORCHRUN = Path(sys.executable).with_name("torchrun")
TORCHRUN_MAIN = "start_log()\nfrom torch.distributed.run import main\nmain()\n"  # as torchrun


@pytest.mark.skipif(not TORCHRUN.exists(), reason="torchrun comes with torch")
@pytest.mark.serial
@pytest.mark.kernel
def test_torchrun_start_up_reads_no_cpu_over_100(tmp_path: Path) -> None:
    """Regression: the ranks, found by a walk 0.5 s after their birth, had all their CPU
    since then put into one 0.25 s window (174 %), and the window before read 0.0."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    port = str(29_500 + os.getpid() % 1000)
    # torchrun itself (the launcher, whose children the ranks are) logs its CPU too.
    torchrun = [sys.executable, "-c", CPU_LOG + TORCHRUN_MAIN]
    samples, logs = recorded(
        tmp_path, [*torchrun, "--nproc-per-node", "2", "--master-port", port, str(script)]
    )
    check_cpu(samples, logs, 3)


@pytest.mark.serial
@pytest.mark.kernel
def test_dataloader_workers_start_up_reads_no_cpu_over_100(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    samples, logs = recorded(tmp_path, [sys.executable, str(script)])
    check_cpu(samples, logs, 1 + 2 * 8)


# --- one clamp test per source of percentages --------------------------------------------


class Skewed(ProcfsSource):
    """This machine's procfs, with the readings that make each percentage leave 0..100.

    What it models: counters read a few µs apart that move by more than the time between
    them (clock ticks), a filesystem whose used space passes what users can reach, and a
    process whose CPU time and PSS grow by more than the job can hold. Everything else is
    the real ``/proc``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reads = self.processes = 0

    def cpu_times(self) -> list[CpuTime]:
        self.reads += 1
        busy, idle = CpuTime(2.0 * self.reads, 1.0 * self.reads), CpuTime(0.0, 1.0 * self.reads)
        return [busy, idle]  # 200 %, 0 %

    def disk_usage(self, path: str) -> DiskUsage:
        return super().disk_usage(path)._replace(percent=101.5)

    def process(self, pid: int) -> ProcStat | None:
        st = super().process(pid)
        if st is None:
            return None
        self.processes += 1
        return dataclasses.replace(st, cpu_seconds=st.cpu_seconds + 1e6 * self.processes)

    def pss(self, pid: int) -> int | None:
        return 1 << 50  # 1 PiB: over any memory limit


def test_every_percentage_source_is_held_within_0_and_100(tmp_path: Path) -> None:
    """Regression: percentages were passed on as computed (``cpu`` 174, 100.1 to 102.1 at
    0.25 s); each source's out-of-range reading now reaches every output as 100 (or 0):
    the snapshot, a buffering reader (what the run file and callbacks read), the run file.
    """
    cgroup_dir = tmp_path / "cgroup"
    cgroup_dir.mkdir()
    (cgroup_dir / "memory.max").write_text(str(100 * 2**20))
    (cgroup_dir / "memory.current").write_text(str(150 * 2**20))  # the limit was lowered
    (cgroup_dir / "memory.stat").write_text("inactive_file 0\n")
    cgroup = Cgroup(2, memory_dirs=[str(cgroup_dir)])
    source = Skewed()
    gpus = [FakeGpu("GPU-a", power_mw=450_000, limit_mw=300_000)]  # 150 % of its cap
    nvidia = NvidiaCollector.create(source, os.getpid(), nvml=binding(FakeNvmlLib(gpus)))
    assert nvidia is not None
    collectors = [
        ProcessCollector(source, os.getpid(), cgroup=cgroup),
        CPUCollector(source),
        MemoryCollector(source, cgroup),
        DiskCollector(source, [str(tmp_path)]),
        nvidia,
    ]
    run = tmp_path / "run.jsonl"
    with SystemMonitor(interval=0.05, collectors=collectors) as monitor:
        reader = monitor.reader(buffer=100)
        with JsonlSink(monitor, run):
            time.sleep(0.5)
        snap = monitor.snapshot()
        samples = reader.samples()
    lines = [x["metrics"] for x in map(json.loads, run.read_text().splitlines()) if "metrics" in x]
    outputs = [snap, *(s.values for s in samples), *lines]
    expected = {
        "cpu": 100.0,  # a million s of CPU more at each sample
        "cpu.0.cpu_percent": 100.0,  # 200 %
        "cpu.1.cpu_percent": 0.0,
        "memory": 100.0,  # 150 % of the cgroup's limit
        f"disk.{tmp_path}.usagePercent": 100.0,  # 101.5 %
        "proc.memory.percent": 100.0,  # 1 PiB of PSS
        "gpu.0.powerPercent": 100.0,  # 150 % of its cap; powerWatts keeps the draw
    }
    for key, value in expected.items():
        seen = [out[key] for out in outputs if key in out]
        assert seen and all(v == value for v in seen), (key, seen)
    assert snap["gpu.0.powerWatts"] == 450.0
    for out in outputs:
        for key, value in out.items():
            found = describe(key)
            if found is not None and found[0].unit == "%":
                assert 0.0 <= value <= 100.0, (key, value)
