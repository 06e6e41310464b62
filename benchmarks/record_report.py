"""The cost of ``sysmetrics record`` per sample, and of a report of a 24-hour run file.

Run: ``python benchmarks/record_report.py`` (Linux; needs the ``[report]`` extra). Measured
in one run:

1. ``record``'s own CPU per sample: ``sysmetrics record --interval 0.05 -- sleep S`` for a
   short and a long S, side by side; the difference of the recorders' CPU times (user +
   system, from ``RUSAGE_CHILDREN``; ``sleep`` itself uses none) over the difference of
   their samples is the CPU of one sample (sampling, the run-file line, the step file),
   without the interpreter's start. Also as the share of one core at the default 1 s.
2. ``sysmetrics report`` of a generated run file of 24 hours at 1 s (86,400 lines) as a
   single-GPU workstation writes it: 16 cores, the NVIDIA keys of one GPU the job uses
   (``gpu.0.*`` and ``gpu.process.0.*``), host memory, disk, network, RAPL energy, and
   steps. It runs in a fresh interpreter so its peak RSS is the report's alone; wall
   time and peak RSS are printed against the targets (10 s, 500 MB), with the time of
   each phase (reading, series, findings, figures, page) and the peak RSS over the
   file's size. ``--gpus 8`` writes an 8-GPU box's file instead (1 GiB; the worst case).
3. The same for files whose keys come and go (issue 30: a 4.5 MB file of 10,000
   distinct keys peaked at 1.66 GB, a 37 MB day-long one was killed at 4 GiB): 20,000
   samples and a day of 86,400 samples, each with 10,000 keys that live 10 and 60
   samples (``generate_sparse``); the target is a peak RSS within a few times the
   file's size above the interpreter's own (imports) RSS.

``--cases`` picks among ``record``, ``day``, ``sparse`` and ``sparse-day`` (all by default).
``--repeat N`` reports each file N times and prints the fastest (a loaded machine);
``--against DIR`` also reports each file with the sysmetrics tree in DIR (``git archive
REV sysmetrics | tar -x -C DIR``), by turns with this one: before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

TARGET_S = 10.0
TARGET_MB = 500.0


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record_cpu(tmp: str, seconds: float, interval: float = 0.05) -> tuple[float, int]:
    """CPU s of one ``record`` of ``sleep seconds``, and the samples it wrote."""
    out = os.path.join(tmp, f"sleep{seconds}.jsonl")
    before = _cpu_children()
    cmd = [sys.executable, "-m", "sysmetrics", "record", "--interval", str(interval),
           "--output", out, "--", "sleep", str(seconds)]  # fmt: skip
    subprocess.run(cmd, check=True)
    with open(out, "rb") as f:
        samples = sum(1 for _ in f)
    return _cpu_children() - before, samples


def generate(path: str, samples: int, gpus: int, cores: int = 16) -> int:
    """Write a run file of ``samples`` lines at 1 s; return its number of keys."""
    rng = random.Random(0)
    gpu_keys = {
        "gpu": 80.0, "memory": 40.0, "memoryAllocated": 70.0,
        "memoryAllocatedBytes": 56e9, "temp": 70.0, "powerWatts": 300.0,
        "powerPercent": 75.0, "smClock": 1700.0, "memoryClock": 2600.0,
        "graphicsClock": 1700.0, "correctedMemoryErrors": 0.0,
        "uncorrectedMemoryErrors": 0.0, "throttle.thermal": 0.0, "throttle.powerCap": 0.0,
        "throttle.hwSlowdown": 0.0, "pcieTxBytes": 1e8, "pcieRxBytes": 1e9,
        "energyJoules": 0.0,
    }  # fmt: skip
    keys = 0
    start = 1_790_000_000.0
    with open(path, "w") as f:
        for n in range(samples):
            wave = 0.5 + 0.5 * math.sin(n / 600)
            m: dict[str, float] = {
                "cpu": 60 + 30 * wave + rng.random() * 5,
                "proc.cpu.threads": 48.0,
                "proc.memory.rssMB": 20_000 + 10 * (n % 3600),
                "proc.memory.pssMB": 18_000.0,
                "proc.memory.percent": 30 + wave,
                "proc.memory.availableMB": 90_000.0,
                "memory": 35 + wave,
                "disk./.usagePercent": 61.2,
                "disk./.usageGB": 512.3,
                "disk.in": 5.0 * n,
                "disk.out": 1.0 * n,
                "network.sent": 1e6 * n,
                "network.recv": 5e7 * n,
                "cpu.energyJoules": 150.0 * n,
                "memory.energyJoules": 20.0 * n,
            }
            for c in range(cores):
                m[f"cpu.{c}.cpu_percent"] = 50 + 40 * wave + rng.random() * 10
            for i in range(gpus):
                for key, value in gpu_keys.items():
                    v = value * (0.9 + 0.1 * wave) if key != "energyJoules" else 300.0 * n
                    m[f"gpu.{i}.{key}"] = v
                    m[f"gpu.process.{i}.{key}"] = v
            keys = len(m)
            record = {"time": start + n, "monotonic": 1000.0 + n, "step": n // 2, "metrics": m}
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    return keys


def generate_sparse(path: str, samples: int, keys: int, window: int = 10) -> int:
    """Write a run file of ``samples`` lines at 1 s whose ``keys`` keys come and go.

    Beside a few keys every sample has, key ``k`` is in the ``window`` samples from
    ``k * (samples - window) // keys`` on (per-process or per-mount keys of processes and
    mounts that come and go): ``keys * window`` values in all, not ``keys * samples``.
    Returns the number of distinct keys.
    """
    starts: dict[int, list[int]] = {}
    for k in range(keys):
        starts.setdefault(k * (samples - window) // keys, []).append(k)
    live: list[tuple[int, int]] = []  # (last sample, key)
    start = 1_790_000_000.0
    with open(path, "w") as f:
        for n in range(samples):
            live = [(last, k) for last, k in live if last >= n]
            live += [(n + window - 1, k) for k in starts.get(n, [])]
            m = {"cpu": 50.0 + n % 7, "memory": 30.0, "proc.memory.rssMB": 900.0 + n % 11}
            for _, k in live:
                m[f"proc.child.{k}.cpu"] = float(k % 100)
            record = {"time": start + n, "monotonic": 1000.0 + n, "step": n, "metrics": m}
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
    return keys + 3


REPORT = """
import resource, sys, time
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
from sysmetrics import report
from sysmetrics.findings import read_run
from sysmetrics.report.page import run_findings
import matplotlib.pyplot
t1 = time.perf_counter()
base = rss()
run = read_run(sys.argv[1])
t2 = time.perf_counter()
all_series = report.series(run)
t3 = time.perf_counter()
found = run_findings(run)
t4 = time.perf_counter()
pngs = report.figures(run, all_series)
t5 = time.perf_counter()
page = report.render(run, "bench", pngs, all_series, found=found)
with open(sys.argv[2], "w") as f:
    f.write(page)
t6 = time.perf_counter()
phases = " ".join(str(b - a) for a, b in zip((t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6)))
print(f"{phases} {base} {rss()} {len(pngs)} {len(page)} {len(run)} {len(run.columns)}")
"""


def _report_once(path: str, out: str, src: str | None) -> tuple[float, list[str]]:
    """Wall time and printed fields of one report in a fresh interpreter.

    ``src`` is the sysmetrics tree it imports (this one where None).
    """
    env = None if src is None else {**os.environ, "PYTHONPATH": src}
    t = time.perf_counter()
    # In src: "python -c" imports from its working directory first, before PYTHONPATH.
    done = subprocess.run([sys.executable, "-c", REPORT, path, out], cwd=src,
                          check=True, capture_output=True, text=True, env=env)  # fmt: skip
    return time.perf_counter() - t, done.stdout.split()


def report(path: str, label: str, against: str | None = None, repeat: int = 1) -> None:
    """``report`` of the file at ``path`` in a fresh interpreter: print its figures.

    ``repeat`` times, the fastest printed (a loaded machine); with ``against`` (a folder
    holding another sysmetrics tree, e.g. ``git archive`` of an earlier commit), that
    tree's report of the same file too, run by turns with this one: before and after.
    """
    out = path + ".html"
    trees = [None] if against is None else [against, None]
    best: dict[str | None, tuple[float, list[str]]] = {}
    for _ in range(repeat):
        for src in trees:
            took = _report_once(path, out, src)
            if src not in best or took[0] < best[src][0]:
                best[src] = took
    for src in trees:
        _print_report(path, label + ("" if src is None else f" [the tree at {src}]"), *best[src])


def _print_report(path: str, label: str, wall: float, fields: list[str]) -> None:
    size = os.path.getsize(path) / 2**20
    imports, read, series, found, draw, render = map(float, fields[:6])
    base, peak = float(fields[6]), float(fields[7])
    figures, page, samples, keys = map(int, fields[8:])
    print(f"\nreport of {label}: {samples} samples, {keys} keys, {size:.1f} MiB")
    print(f"  imports {imports:.2f} s, read {read:.2f} s, series {series:.2f} s, findings "
          f"{found:.2f} s, {figures} figures {draw:.2f} s, page {render:.2f} s "
          f"({page / 2**20:.1f} MiB)")  # fmt: skip
    print(f"  wall {wall:.2f} s = {wall / TARGET_S:.2f} x the {TARGET_S:.0f} s target")
    print(f"  peak RSS {peak:.0f} MB = {peak / TARGET_MB:.2f} x the {TARGET_MB:.0f} MB target; "
          f"above the imports' {base:.0f} MB: {peak - base:.0f} MB = "
          f"{(peak - base) / size:.1f} x the file's size")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--samples", type=int, default=86_400)
    parser.add_argument("--cases", default="record,day,sparse,sparse-day")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="report each file this many times; the fastest is printed",
    )
    parser.add_argument("--against", metavar="DIR",
                        help="also report each file with the sysmetrics tree in DIR, by turns "
                        "with this one (before and after: git archive REV sysmetrics | tar -x "
                        "-C DIR)")  # fmt: skip
    args = parser.parse_args()
    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        if "record" in cases:
            short_cpu, short_n = record_cpu(tmp, 2)
            long_cpu, long_n = record_cpu(tmp, 12)
            per_sample = (long_cpu - short_cpu) / (long_n - short_n)
            print("record (interval 0.05 s, sleep 2 s vs 12 s)")
            print(f"  CPU of the recorder: {short_cpu:.2f} s for {short_n} samples, "
                  f"{long_cpu:.2f} s for {long_n}")  # fmt: skip
            print(f"  per sample: {per_sample * 1e3:.2f} ms; at 1 s: {per_sample:.2%} of a core")
        if "day" in cases:
            path = os.path.join(tmp, "day.jsonl")
            t = time.perf_counter()
            generate(path, args.samples, args.gpus)
            took = time.perf_counter() - t
            report(path, f"a day at 1 s, {args.gpus} GPU(s) (generated in {took:.0f} s)",
                   args.against, args.repeat)  # fmt: skip
            os.unlink(path)
        if "sparse" in cases:
            path = os.path.join(tmp, "sparse.jsonl")
            generate_sparse(path, 20_000, 10_000, 10)
            report(path, "10,000 keys that come and go (10 samples each)", args.against,
                   args.repeat)  # fmt: skip
            os.unlink(path)
        if "sparse-day" in cases:
            path = os.path.join(tmp, "sparse-day.jsonl")
            generate_sparse(path, 86_400, 10_000, 60)
            report(path, "a day at 1 s of 10,000 keys that come and go (60 samples each)",
                   args.against, args.repeat)  # fmt: skip


if __name__ == "__main__":
    main()
