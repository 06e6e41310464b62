"""The diagnosis suite's training programs: small real jobs whose bottleneck is known.

``python workloads.py NAME [options]``: each job's bottleneck is known by construction.

Plain loops mark their steps with :func:`sysmetrics.batches` and :func:`sysmetrics.step`
(run them under ``sysmetrics record``); the framework jobs (``lightning``,
``transformers``, ``keras``) log through their ``SystemMetricsCallback`` into the run file
named by ``--run-file``. Each job trains for about ``--seconds`` seconds. Where a job's
own sleep stands for an accelerator's compute, it says so: the CPU is then idle, as the
training thread of a GPU job waits on its kernels.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import sysmetrics


def spin(seconds: float) -> None:
    """Pure-Python work for ``seconds`` of this thread's CPU time (holds the GIL)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x += i * i


def cgroup_limit_mib() -> float:
    """The cgroup v1 memory limit of this process, MiB."""
    with open("/proc/self/cgroup") as f:
        path = next(line.split(":", 2)[2].strip() for line in f if ":memory:" in line)
    with open(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes") as f:
        return int(f.read()) / (1 << 20)


def proportional_mib() -> float:
    """The proportional set size (PSS) of this process, MiB: what the recorder counts."""
    with open("/proc/self/smaps_rollup") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024


def _torch() -> Any:
    import torch

    return torch


def plain(args: argparse.Namespace) -> None:
    """A plain loop under ``sysmetrics record``, its bottleneck set by the options.

    Its fetch (``--fetch`` s, sleeping or ``--fetch-cpu`` spinning, in
    ``--workers`` DataLoader workers) and its step (``--step`` s asleep: the
    accelerator; ``--step-cpu`` s of Python; ``--matmul``: torch matrix products on all
    CPUs). ``--pause`` s at step ``--pause-at`` (idle, or ``--busy-pause``), ``--hang-at``:
    from that step on it sleeps until killed. ``--memory-mib``: held through the run.
    """
    torch = _torch()
    torch.set_num_threads((os.cpu_count() or 1) if args.matmul else 1)
    mib = args.memory_mib
    if args.fill_cgroup:  # PSS up to this share of this process's cgroup (v1) memory limit
        mib = max(0, int(args.fill_cgroup * cgroup_limit_mib() - proportional_mib()))
    held = bytearray(mib << 20)
    for i in range(0, len(held), 4096):  # touched: resident
        held[i] = 1

    class Items(torch.utils.data.Dataset):  # type: ignore[misc,name-defined]
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, i: int) -> Any:
            if args.fetch_cpu:
                spin(args.fetch_cpu)
            elif args.fetch:
                time.sleep(args.fetch)
            return torch.zeros(8)

    loader = torch.utils.data.DataLoader(
        Items(), batch_size=1, num_workers=args.workers,
        prefetch_factor=4 if args.workers else None, persistent_workers=bool(args.workers),
    )  # fmt: skip
    a = torch.randn(384, 384)
    start = time.monotonic()
    for step, _batch in enumerate(sysmetrics.batches(loader), start=1):
        if args.step:
            time.sleep(args.step)
        if args.step_cpu:
            spin(args.step_cpu)
        if args.matmul:
            for _ in range(args.matmul):
                a = torch.tanh(a @ a) * 0.5
        sysmetrics.step(step)
        if step == args.pause_at:
            spin(args.pause) if args.busy_pause else time.sleep(args.pause)
        if step == args.hang_at:
            while True:
                time.sleep(1.0)
        if time.monotonic() - start >= args.seconds:
            break
    del held


CHECKPOINT_CAP_MIB = 2048  # the most a checkpoint writes, whatever --checkpoint-seconds


def checkpoint(args: argparse.Namespace) -> None:
    """Write and fsync a checkpoint of ``--checkpoint-mib`` MiB or more to ``--scratch``.

    It goes on writing (and syncing every 32 MiB) until ``--checkpoint-seconds`` have
    passed since it began: a step that long whatever the disk's speed (on a quiet VM 200
    MiB took 0.2 s, under load over 1 s), its time spent in disk writes; past
    :data:`CHECKPOINT_CAP_MIB`, the rest asleep.
    """
    began = time.monotonic()
    block = os.urandom(1 << 20)
    written = 0
    with open(args.scratch, "wb") as f:
        while written < args.checkpoint_mib or (
            time.monotonic() - began < args.checkpoint_seconds and written < CHECKPOINT_CAP_MIB
        ):
            f.write(block)
            written += 1
            if written % 32 == 0:
                f.flush()
                os.fsync(f.fileno())
        f.flush()
        os.fsync(f.fileno())
    time.sleep(max(0.0, args.checkpoint_seconds - (time.monotonic() - began)))


def lightning(args: argparse.Namespace) -> None:
    """Lightning, a tiny model whose step sleeps ``--step`` s (the accelerator).

    Every ``--every``-th step writes a checkpoint (:func:`checkpoint`); the first step sleeps
    ``--warmup`` s more; ``--bar``: the progress bar on (refreshing every step), each
    redraw taking ``--bar-redraw`` s more (a notebook's output area redrawing).
    """
    torch = _torch()
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    from sysmetrics.integrations.lightning import SystemMetricsCallback

    torch.set_num_threads(1)

    class Model(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(32, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            time.sleep(args.step + (args.warmup if self.global_step == 0 else 0.0))
            if args.every and self.global_step % args.every == args.every - 1:
                checkpoint(args)
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    steps = max(1, int(args.seconds / max(args.step, 0.01)))
    data = torch.utils.data.TensorDataset(torch.randn(steps * 8, 32), torch.randn(steps * 8, 1))
    callbacks: list[Any] = [SystemMetricsCallback(interval=args.interval, run_file=args.run_file)]

    class Bar(TQDMProgressBar):  # type: ignore[misc]
        def on_train_batch_end(self, *a: Any, **kw: Any) -> None:
            super().on_train_batch_end(*a, **kw)
            time.sleep(args.bar_redraw)

    if args.bar:
        callbacks.append((Bar if args.bar_redraw else TQDMProgressBar)(refresh_rate=1))
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(args.logs), enable_checkpointing=False,
        enable_progress_bar=args.bar, enable_model_summary=False, accelerator="cpu",
        devices=1, callbacks=callbacks,
    )  # fmt: skip
    trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=8))
    if args.every:
        os.unlink(args.scratch)


def transformers(args: argparse.Namespace) -> None:
    """A Trainer of transformers on a tiny config-built GPT-2 (nothing downloaded).

    Each forward sleeps ``--step`` s (the accelerator); ``--sleep-after``: a callback
    after sysmetrics' sleeps instead, at each step's end (a slow callback between steps).
    """
    torch = _torch()
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from sysmetrics.integrations.transformers import SystemMetricsCallback

    torch.set_num_threads(1)

    class Tokens(torch.utils.data.Dataset):  # type: ignore[misc,name-defined]
        def __init__(self, n: int) -> None:
            self.ids = torch.randint(0, 64, (n, 8))

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    class Sleeps(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *a: Any, **kw: Any) -> None:
            time.sleep(args.step)

    class Model(GPT2LMHeadModel):  # type: ignore[misc]
        """Its forward sleeps ``--step`` s (the accelerator), unless a callback does."""

        def forward(self, *a: Any, **kw: Any) -> Any:
            if not args.sleep_after:
                time.sleep(args.step)
            return super().forward(*a, **kw)

    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    steps = max(1, int(args.seconds / max(args.step, 0.01)))
    training = TrainingArguments(
        output_dir=args.logs, per_device_train_batch_size=4, max_steps=steps, report_to=[],
        logging_steps=10, save_strategy="no", use_cpu=True, disable_tqdm=True,
        remove_unused_columns=False,  # forward(*a, **kw) names no column: keep them all
    )  # fmt: skip
    Trainer(
        model=Model(config), args=training, train_dataset=Tokens(steps * 4),
        callbacks=[SystemMetricsCallback(interval=args.interval, run_file=args.run_file),
                   *([Sleeps()] if args.sleep_after else [])],
    ).train()  # fmt: skip


def keras_job(args: argparse.Namespace) -> None:
    """Keras (torch backend), a tiny model whose forward sleeps ``--step`` s (the accelerator).

    ``--sleep-after``: a callback after sysmetrics' sleeps instead.
    """
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras
    import numpy as np

    from sysmetrics.integrations.keras import SystemMetricsCallback

    _torch().set_num_threads(1)
    steps = max(1, int(args.seconds / max(args.step, 0.01)))

    def compute(x: Any) -> Any:  # the accelerator's compute, inside the step
        if not args.sleep_after:
            time.sleep(args.step)
        return x

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Lambda(compute), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    sleeps = keras.callbacks.LambdaCallback(  # --sleep-after: a slow callback between steps
        on_train_batch_end=lambda b, logs: time.sleep(args.step if args.sleep_after else 0.0)
    )
    cb = SystemMetricsCallback(interval=args.interval, run_file=args.run_file)
    x = np.random.rand(steps * 8, 8).astype("float32")
    model.fit(
        x,
        x[:, :1],
        batch_size=8,
        epochs=1,
        verbose=0,
        callbacks=[cb, sleeps],
    )


JOBS = {"plain": plain, "lightning": lightning, "transformers": transformers, "keras": keras_job}


def parser() -> argparse.ArgumentParser:
    """The workloads' options (see each job)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("job", choices=sorted(JOBS))
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--fetch", type=float, default=0.0)
    p.add_argument("--fetch-cpu", type=float, default=0.0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--step", type=float, default=0.0)
    p.add_argument("--step-cpu", type=float, default=0.0)
    p.add_argument("--matmul", type=int, default=0)
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--pause-at", type=int, default=-1)
    p.add_argument("--busy-pause", action="store_true")
    p.add_argument("--hang-at", type=int, default=-1)
    p.add_argument("--memory-mib", type=int, default=0)
    p.add_argument("--fill-cgroup", type=float, default=0.0)
    p.add_argument("--every", type=int, default=0)
    p.add_argument("--checkpoint-mib", type=int, default=0)
    p.add_argument("--checkpoint-seconds", type=float, default=0.0)
    p.add_argument("--warmup", type=float, default=0.0)
    p.add_argument("--bar", action="store_true")
    p.add_argument("--bar-redraw", type=float, default=0.0)
    p.add_argument("--sleep-after", action="store_true")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--run-file", default="run.jsonl")
    p.add_argument("--logs", default="logs")
    p.add_argument("--scratch", default="checkpoint.bin")
    return p


def main() -> None:
    args = parser().parse_args()
    JOBS[args.job](args)


if __name__ == "__main__":
    main()
