"""Overhead of sysmetrics beside the samplers users run today, measured in one run.

Run: ``python benchmarks/overhead.py`` (Linux; ``tox -e overhead`` installs the peers).
``--quick`` shortens every part (a smoke run, not figures to quote). It prints four tables:

1. Sampler cost: CPU time per sample of the full host metric set, and CPU seconds per
   hour of monitoring at a 1 s interval, for the raw /proc reads (the floor), sysmetrics,
   MLflow's system metrics monitor (its CPU, disk and network monitors'
   ``collect_metrics()``) and W&B's sampler (an offline run; its ``wandb-symon`` process
   is measured from /proc, its samples counted in the run file). CPU time comes from
   ``time.thread_time()`` around calls, or from ``/proc/<pid>/task/<tid>/schedstat``
   (nanoseconds on CPU) for a sampler running on its own thread or process.
2. Training overhead: a tiny MLP trained with Lightning on the CPU (about 10 ms steps),
   with no monitoring, with sysmetrics' callback at 1 s and 0.1 s, and with Lightning's
   ``DeviceStatsMonitor(cpu_stats=True)``. Runs alternate (A B C D A B C D ...); each
   round gives each variant's mean step time over the same round's unmonitored run, and
   the table shows the median ratio and its range over rounds.
3. Callback cost per training step (µs, median), when not logging and when logging, for
   Lightning, transformers and Keras (``callback_cost.py``'s measurement).
4. Scaling: CPU per tick against descendant processes (0, 8, 64), against OpenMetrics
   series (100 and 10 000 served by a local HTTP server in another process), and, where
   NVML finds GPUs, per GPU.

A peer that is not installed is reported as missing; nothing here is a dependency of
sysmetrics.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Optional

from host_sample import per_call_us, raw_reads

from sysmetrics import SystemMonitor
from sysmetrics.collectors import NvidiaCollector
from sysmetrics.collectors.openmetrics import OpenMetricsCollector
from sysmetrics.collectors.process import process_tree
from sysmetrics.host import ProcfsSource, default_source

os.environ.setdefault("KERAS_BACKEND", "torch")
warnings.filterwarnings("ignore", ".*does not have many workers.*")


# -- measuring ----------------------------------------------------------------------


def cpu_us_per_call(fn: Callable[[], object], number: int) -> float:
    """CPU µs of one call (thread CPU clock), median over 7 batches of ``number`` calls."""
    return per_call_us(fn, number=number, repeat=7, clock=time.thread_time)[0]


def task_cpu_ns(pid: int, tid: int | None = None) -> int:
    """Nanoseconds on CPU of one thread, or of every live thread of a process."""
    tids = [tid] if tid is not None else [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    total = 0
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


# -- 1. sampler cost ------------------------------------------------------------------


def sysmetrics_running(seconds: float, interval: float) -> tuple[float, int]:
    """CPU µs per tick of a running SystemMonitor's thread, and the number of ticks."""
    monitor = SystemMonitor(interval=interval).start()
    thread = monitor._thread  # benchmark-only look inside: the sampling thread's id
    assert thread is not None and thread.native_id is not None
    tid = thread.native_id
    before, ticks0 = task_cpu_ns(os.getpid(), tid), monitor._series_store.tick
    time.sleep(seconds)
    after, ticks = task_cpu_ns(os.getpid(), tid), monitor._series_store.tick - ticks0
    monitor.stop()
    return (after - before) / 1e3 / ticks, ticks


def mlflow_collect() -> Callable[[], None] | None:
    try:
        from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
        from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
        from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor
    except ImportError:
        return None
    monitors = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]

    calls = [0]

    def run() -> None:
        for m in monitors:
            m.collect_metrics()
        calls[0] += 1
        if calls[0] % 10 == 0:  # it aggregates and clears every few samples; so do we
            for m in monitors:
                m.clear_metrics()

    return run


def wandb_stats_records(run_dir: str) -> int:
    """Count the system-metrics records in an offline run's ``.wandb`` file.

    The file is a LevelDB-style log (W&B's documented datastore format): a 7-byte
    header, then 32 KiB blocks of chunks, each with a 7-byte header (CRC, length, type).
    """
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(os.path.join(run_dir, "*.wandb"))
    with open(path, "rb") as f:
        data = f.read()
    pos, buf, count = 7, b"", 0
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if left < 7 or (kind == 0 and length == 0):
            pos += left
            continue
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # full or last chunk: a record is complete
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            count += record.WhichOneof("record_type") == "stats"
            buf = b""
    return count


def wandb_running(seconds: float, interval: float) -> tuple[float, int, float] | None:
    """CPU µs per sample of ``wandb-symon``, samples seen, and wandb-core's µs per sample."""
    try:
        import wandb
    except ImportError:
        return None
    os.environ["WANDB_SILENT"] = "true"
    root = tempfile.mkdtemp()
    run = wandb.init(
        mode="offline", dir=root, settings=wandb.Settings(x_stats_sampling_interval=interval)
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            procs = {comm(p): p for p, _ in process_tree(ProcfsSource(), os.getpid())[1:]}
            if "wandb-symon" in procs or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        symon, core = procs.get("wandb-symon"), procs.get("wandb-core")
        if symon is None or core is None:
            return None
        time.sleep(2 * interval + 1)  # past its start-up
        s0, c0 = task_cpu_ns(symon), task_cpu_ns(core)
        t0 = time.time()
        time.sleep(seconds)
        s1, c1 = task_cpu_ns(symon), task_cpu_ns(core)
        window = time.time() - t0
    finally:
        run.finish()
    (run_dir,) = glob.glob(os.path.join(root, "wandb", "offline-run-*"))
    total = wandb_stats_records(run_dir)
    samples = max(1, round(window / interval))  # samples inside the measured window
    if total < samples * 0.8:  # it sampled less often than asked: count what it wrote
        samples = max(1, round(total * window / (window + 2 * interval + 1)))
    return (s1 - s0) / 1e3 / samples, samples, (c1 - c0) / 1e3 / samples


def cpu_us_every(fn: Callable[[], object], interval: float, seconds: float) -> float:
    """Mean CPU µs of one call made every ``interval`` s, as a sampler runs (caches cold)."""
    fn()
    runs = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(interval)
        t = time.thread_time()
        fn()
        runs.append(time.thread_time() - t)
    return statistics.fmean(runs) * 1e6


def sampler_cost(quick: bool) -> None:
    pid, seconds, interval = os.getpid(), (3.0 if quick else 20.0), 0.1
    number = 50 if quick else 300
    Row = tuple[str, Optional[float], Optional[float], Optional[float]]

    def in_process(name: str, fn: Callable[[], object] | None) -> Row:
        if fn is None:
            return (name, None, None, None)
        return (name, cpu_us_per_call(fn, number), cpu_us_every(fn, interval, seconds), None)

    probe = SystemMonitor(interval=1.0)
    rows = [
        in_process("raw /proc reads (floor)", raw_reads(pid, ("/",))),
        in_process("sysmetrics SystemMonitor", probe._sample_once),
    ]
    probe.stop()
    thread_us, ticks = sysmetrics_running(seconds, interval)
    rows.append((f"  its own thread ({ticks} ticks)", None, None, thread_us))
    rows.append(in_process("MLflow SystemMetricsMonitor", mlflow_collect()))
    wb = wandb_running(seconds, interval)
    if wb is None:
        rows.append(("W&B wandb-symon", None, None, None))
    else:
        rows.append((f"W&B wandb-symon ({wb[1]} samples)", None, None, wb[0]))
        rows.append(("  + wandb-core receiving them", None, None, wb[2]))
    floor = rows[0][2] or 1.0
    print(f"\n1. Sampler cost: CPU µs per sample of the full host metric set; idle machine; "
          f"every {interval:g} s for {seconds:g} s per sampler")  # fmt: skip
    print(f"   {'sampler':<34}{'back-to-back':>13}{'every 0.1 s':>12}{'as it runs':>12}"
          f"{'CPU s/h @1s':>13}{'x floor':>9}")  # fmt: skip
    for name, b2b, every, running in rows:
        real = running if running is not None else every
        if real is None:
            print(f"   {name:<34}{'not installed':>13}")
            continue
        cells = "".join(f"{v:>12.1f}" if v is not None else f"{'':>12}" for v in (every, running))
        first = f"{b2b:>13.1f}" if b2b is not None else f"{'':>13}"
        print(f"   {name:<34}{first}{cells}{real * 3600 / 1e6:>13.2f}{real / floor:>9.2f}")


# -- 2. training overhead --------------------------------------------------------------


def train_mean_step(
    variant: str, steps: int, warmup: int, accelerator: str = "cpu"
) -> tuple[float, float]:
    """Mean s per step after ``warmup`` steps of one Lightning run, and sampler CPU share.

    The share is the CPU time of sysmetrics' threads over the run's wall time.
    ``accelerator`` is Lightning's (``"cpu"``, or ``"gpu"`` for the first GPU).
    """
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import DeviceStatsMonitor
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader, TensorDataset

    from sysmetrics.integrations.lightning import SystemMetricsCallback

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            w = 1024
            self.net = torch.nn.Sequential(
                torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                torch.nn.Linear(w, 1),
            )  # fmt: skip

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Clock(pl.Callback):
        """Step start times; at train end (before the sampler stops) its thread's CPU."""

        def __init__(self) -> None:
            self.times: list[float] = []
            self.sampler_share = 0.0

        def on_train_batch_start(self, *args: Any) -> None:
            self.times.append(time.perf_counter())

        def on_train_end(self, *args: Any) -> None:
            wall = time.perf_counter() - self.times[0]
            ns = sum(task_cpu_ns(os.getpid(), t.native_id) for t in threading.enumerate()
                     if t.name.startswith("sysmetrics") and t.native_id)  # fmt: skip
            self.sampler_share = ns / 1e9 / wall

    clock = Clock()
    callbacks: list[pl.Callback] = [clock]
    if variant == "sysmetrics 1 s":
        callbacks.append(SystemMetricsCallback(interval=1.0))
    elif variant == "sysmetrics 0.1 s":
        callbacks.append(SystemMetricsCallback(interval=0.1))
    elif variant == "DeviceStatsMonitor":
        callbacks.append(DeviceStatsMonitor(cpu_stats=True))
    torch.manual_seed(0)
    x = torch.randn(64 * 50, 1024)
    loader = DataLoader(TensorDataset(x, x[:, :1]), batch_size=64)
    with tempfile.TemporaryDirectory() as logdir:
        trainer = pl.Trainer(
            max_steps=steps, logger=CSVLogger(logdir), log_every_n_steps=50,
            callbacks=callbacks, enable_progress_bar=False, enable_checkpointing=False,
            enable_model_summary=False, accelerator=accelerator, devices=1,
        )  # fmt: skip
        trainer.fit(Model(), loader)
    t = clock.times[warmup:]
    return (t[-1] - t[0]) / (len(t) - 1), clock.sampler_share


def training_overhead(
    quick: bool, accelerator: str = "cpu", rounds: int | None = None, steps: int | None = None
) -> dict[str, dict[str, float]]:
    """Print table 2 (on Lightning's ``accelerator``); return each variant's figures.

    ``rounds`` overrides the number of alternating rounds (2 quick, 16 otherwise), ``steps``
    the steps a run (60 quick, 200 otherwise). A run must outlast several sampling
    intervals, or the monitor's start (its first sample, NVML's handles) is what is timed:
    on a GPU, where a step of this model takes about 3 ms, give 2000 or more.
    """
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    variants = ["none", "sysmetrics 1 s", "sysmetrics 0.1 s", "DeviceStatsMonitor"]
    rounds, steps = (rounds or 2, steps or 60) if quick else (rounds or 16, steps or 200)
    means: dict[str, list[float]] = {v: [] for v in variants}
    shares: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        order = variants[r % 4 :] + variants[: r % 4]  # each variant takes each position
        for v in order:
            mean, share = train_mean_step(v, steps, warmup=10, accelerator=accelerator)
            means[v].append(mean)
            shares[v].append(share)
    base = means["none"]
    where = "CPU" if accelerator == "cpu" else accelerator.upper()
    print(f"\n2. Training overhead: Lightning, {where}, {steps} steps a run, {rounds} rounds "
          "of alternating runs (order rotated each round)")  # fmt: skip
    print(f"   {'variant':<20}{'step ms':>9}{'ratio':>8}{'IQR of round ratios':>22}"
          f"{'sampler CPU':>13}{'bound':>8}   target")  # fmt: skip
    targets = {"sysmetrics 1 s": 1.005, "sysmetrics 0.1 s": 1.02}
    figures: dict[str, dict[str, float]] = {}
    for v in variants:
        ratios = sorted(m / b for m, b in zip(means[v], base))
        q1, _, q3 = statistics.quantiles(ratios, n=4)
        share = statistics.fmean(shares[v])
        figures[v] = {"step_ms": statistics.median(means[v]) * 1e3,
                      "ratio": statistics.median(ratios), "q1": q1, "q3": q3,
                      "sampler_cpu_share": share}  # fmt: skip
        bound = f"{1 + share:>8.4f}" if v.startswith("sysmetrics") else f"{'':>8}"
        target = targets.get(v)
        verdict = "" if target is None else f"<={target:g}"
        print(f"   {v:<20}{statistics.median(means[v]) * 1e3:>9.2f}"
              f"{statistics.median(ratios):>8.4f}{f'{q1:.4f} .. {q3:.4f}':>22}"
              f"{share * 100:>12.3f}%{bound}   {verdict}")  # fmt: skip
    print("   ratio: median over rounds of the run's mean step time over the same round's run")
    print("   without monitoring. sampler CPU: CPU time of sysmetrics' threads over the run's")
    print("   wall time; bound = 1 + that share, the slowdown if every sampler microsecond")
    print("   delayed the training loop (it runs beside it, on another core when one is free).")
    return figures


# -- 3. callback cost ------------------------------------------------------------------


def callback_costs() -> None:
    import callback_cost

    print("\n3. Callback cost per training step (median µs of the callback's own hook)")
    print(
        f"   {'framework':<14}{'quiet':>10}{'logging':>10}{'stamp':>10}{'n quiet':>10}{'n log':>8}"
    )
    for name, fn in (("Lightning", callback_cost.lightning),
                     ("transformers", callback_cost.transformers),
                     ("Keras", callback_cost.keras_)):  # fmt: skip
        try:
            samples = fn()
        except ImportError as exc:
            print(f"   {name:<14}not installed ({exc.name})")
            continue
        print("   ", end="")
        callback_cost.report(name, samples)


# -- 4. scaling --------------------------------------------------------------------------


def metrics_page(series: int) -> str:
    """A page of ``series`` gauges: 100 metrics, each with ``series // 100`` label sets."""
    lines = []
    for m in range(100):
        lines += [f"# HELP bench_m{m} A value.", f"# TYPE bench_m{m} gauge"]
        for i in range(series // 100):
            lines.append(f'bench_m{m}{{gpu="{i}",host="node-1"}} {m + i}.5')
    return "\n".join(lines) + "\n"


def scaling(quick: bool) -> None:
    number = 30 if quick else 200
    print("\n4. Scaling: CPU µs per tick")
    print(f"   {'what':<46}{'CPU µs':>10}{'x first row':>13}{'x raw reads':>13}")
    sleepers: list[subprocess.Popen[bytes]] = []
    first = None
    try:
        for n in (0, 8, 64):
            while len(sleepers) < n:
                sleepers.append(subprocess.Popen(["sleep", "600"]))
            monitor = SystemMonitor(interval=1.0, track_process_tree=True)
            us = cpu_us_per_call(monitor._sample_once, number)
            raw = cpu_us_per_call(raw_reads(os.getpid(), ("/",)), number)
            monitor.stop()
            first = first or us
            label = f"host sample, {n} descendant processes"
            print(f"   {label:<46}{us:>10.1f}{us / first:>13.2f}{us / raw:>13.2f}")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()

    with tempfile.TemporaryDirectory() as root:
        for n in (100, 10_000):
            with open(os.path.join(root, f"m{n}"), "w") as f:
                f.write(metrics_page(n))
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "-d", root],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            port = server.stdout.readline().split("port ")[1].split()[0]
            first = None
            cases = [(100, None, "steady"), (10_000, None, "first page"),
                     (10_000, None, "steady"), (10_000, [r"dcgm\.bench_m0"], "steady")]  # fmt: skip
            for n, filters, when in cases:
                url = f"http://127.0.0.1:{port}/m{n}"
                c = OpenMetricsCollector({"dcgm": url}, filters)
                scrape = lambda c=c, url=url: c.scrape("dcgm", url)  # noqa: E731
                if when == "first page":
                    t = time.thread_time()
                    scrape()
                    us = (time.thread_time() - t) * 1e6
                else:
                    us = cpu_us_per_call(scrape, max(5, number // 10))
                kept = len(c._latest)
                c.close()
                first = first or us
                label = f"OpenMetrics, {n} series, {kept} kept, {when}"
                print(f"   {label:<46}{us:>10.1f}{us / first:>13.2f}")
        finally:
            server.kill()
            server.wait()

    gpu = NvidiaCollector.create(default_source(), os.getpid())
    if gpu is None:
        print(f"   {'NVIDIA collector per GPU':<46}{'no NVIDIA GPU on this machine':>23}")
        return
    us = cpu_us_per_call(gpu.sample, number)
    n = len(gpu.devices)
    print(f"   {f'NVIDIA collector, {n} GPUs':<46}{us:>10.1f}")
    print(f"   {'NVIDIA collector per GPU':<46}{us / n:>10.1f}")
    gpu.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--only", choices=["1", "2", "3", "4"], action="append",
                        help="run only these parts (repeatable)")  # fmt: skip
    args = parser.parse_args()
    if not ProcfsSource.supported():
        sys.exit("this benchmark needs Linux procfs")
    import platform

    print(f"machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"Python {sys.version.split()[0]}, {platform.platform()}")  # fmt: skip
    parts = args.only or ["1", "2", "3", "4"]
    if "1" in parts:
        sampler_cost(args.quick)
    if "2" in parts:
        training_overhead(args.quick)
    if "3" in parts:
        callback_costs()
    if "4" in parts:
        scaling(args.quick)


if __name__ == "__main__":
    main()
