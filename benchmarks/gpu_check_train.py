"""The workloads of ``make gpu-check``: real training under each callback, timed, one process each.

``python benchmarks/gpu_check_train.py WORKLOAD --out DIR [--seconds S] [--interval I]
[--device cuda|cpu]``, WORKLOAD one of:

- ``lightning``: a Lightning MLP with ``SystemMetricsCallback(run_file=DIR/run.jsonl)``, a
  ``CSVLogger`` and (where tensorboard is installed) a ``TensorBoardLogger`` under DIR;
- ``transformers``: the HF ``Trainer`` on a plain torch model, ``report_to`` tensorboard
  where installed, its ``log_history`` written to DIR/log_history.csv;
- ``keras``: Keras 3 on the torch backend, ``keras.callbacks.CSVLogger`` to DIR/keras.csv;
- ``plain``: a torch loop calling ``sysmetrics.step(n)``, for ``sysmetrics record``;
- ``overhead``: ``benchmarks/overhead.py``'s training-overhead table on this device (its
  code, not a copy) and the NVIDIA collector's CPU µs per tick per GPU;

each for about ``--seconds`` of training, then DIR/result.json: the steps, the seconds,
the files the loggers wrote and ``problems`` (a logger file without the system metric the
device should give: ``system/gpu.0.gpu`` on cuda, ``system/cpu`` on cpu). Exit status 3
with a line ``skip: <reason>`` when the framework is not installed. ``--device cpu`` runs
the same code on the CPU (the tests' and a smoke run's way, on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

SKIP = 3  # exit status: the framework is missing
WIDTH, IN, BATCH = 4096, 256, 512  # the MLP: enough work per step to keep a GPU busy


class Skip(Exception):
    """The workload cannot run here (a framework is not installed)."""


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Skip(f"{module} is not installed ({exc})") from None


def _mlp(torch: Any, width: int) -> Any:
    return torch.nn.Sequential(
        torch.nn.Linear(IN, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 1),
    )


def _data(torch: Any, rows: int = BATCH * 32) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, IN, generator=g)
    return x, x.sum(1, keepdim=True)


def _csv_problems(path: Path, key: str) -> list[str]:
    """A logger CSV without a value of ``key`` in some row is a problem."""
    if not path.exists():
        return [f"{path.name}: not written"]
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not any(r.get(key) not in (None, "") for r in rows):
        return [f"{path.name}: no value of {key} in {len(rows)} rows"]
    return []


def _tb_problems(root: Path, tag: str) -> list[str]:
    """TensorBoard event files under ``root`` without a scalar ``tag`` are a problem."""
    files = sorted(root.rglob("events.out.tfevents.*"))
    if not files:
        return [f"no TensorBoard event file under {root.name}/"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for f in files:
        acc = EventAccumulator(str(f))
        acc.Reload()
        tags.update(acc.Tags().get("scalars", []))
    if not any(t.endswith(tag) for t in tags):
        return [f"TensorBoard: no scalar ending in {tag} ({len(tags)} tags)"]
    return []


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def lightning(args: argparse.Namespace, key: str) -> dict[str, Any]:
    pl = _need("lightning.pytorch")
    import torch
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from torch.utils.data import DataLoader, TensorDataset

    from sysmetrics.integrations.lightning import SystemMetricsCallback

    class Model(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp(torch, args.width)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=1e-4)

    out = Path(args.out)
    loggers: list[Any] = [CSVLogger(out, name="csv")]
    tensorboard = _has("tensorboard")
    if tensorboard:
        loggers.append(TensorBoardLogger(out, name="tb"))
    x, y = _data(torch)
    from datetime import timedelta

    trainer = pl.Trainer(
        max_epochs=-1,
        max_time=timedelta(seconds=args.seconds),
        logger=loggers,
        log_every_n_steps=10,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=[0] if args.device == "cuda" else 1,
        callbacks=[SystemMetricsCallback(interval=args.interval, run_file=out / "run.jsonl")],
    )
    trainer.fit(Model(), DataLoader(TensorDataset(x, y), batch_size=BATCH))
    metrics = Path(trainer.loggers[0].log_dir) / "metrics.csv"
    problems = _csv_problems(metrics, key)
    files = [str(metrics)]
    if tensorboard:
        problems += _tb_problems(out / "tb", key.split("/", 1)[1])
        files.append(str(out / "tb"))
    else:
        problems.append("tensorboard is not installed: TensorBoardLogger not tried")
    return {"steps": trainer.global_step, "files": files, "problems": problems}


def transformers(args: argparse.Namespace, key: str) -> dict[str, Any]:
    tf = _need("transformers")
    import torch

    from sysmetrics.integrations.transformers import SystemMetricsCallback

    class Model(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp(torch, args.width)

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}

    x, y = _data(torch)

    class Rows(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return len(x)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": x[i], "labels": y[i]}

    class StopAfter(tf.TrainerCallback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.start = time.monotonic()

        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> Any:
            if time.monotonic() - self.start > args.seconds:
                control.should_training_stop = True
            return control

    out = Path(args.out)
    tensorboard = _has("tensorboard")
    targs = tf.TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=BATCH,
        max_steps=10**7,
        logging_steps=10,
        report_to=["tensorboard"] if tensorboard else [],
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=args.device == "cpu",
        remove_unused_columns=False,
        dataloader_pin_memory=False,
    )
    callback = SystemMetricsCallback(interval=args.interval, run_file=str(out / "run.jsonl"))
    trainer = tf.Trainer(
        model=Model(), args=targs, train_dataset=Rows(), callbacks=[StopAfter(), callback]
    )
    trainer.train()
    history = trainer.state.log_history
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    columns = sorted({k for h in history for k in h})
    with open(out / "log_history.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(history)
    problems = _csv_problems(out / "log_history.csv", key)
    files = [str(out / "log_history.csv")]
    if tensorboard:
        problems += _tb_problems(out, key.split("/", 1)[1])
        files.append(str(out / "runs"))
    else:
        problems.append("tensorboard is not installed: report_to tensorboard not tried")
    return {"steps": trainer.state.global_step, "files": files, "problems": problems}


def keras_(args: argparse.Namespace, key: str) -> dict[str, Any]:
    os.environ["KERAS_BACKEND"] = "torch"
    keras = _need("keras")
    if keras.backend.backend() != "torch":
        raise Skip(f"Keras runs on the {keras.backend.backend()} backend, not torch")
    import numpy as np
    import torch

    from sysmetrics.integrations.keras import SystemMetricsCallback

    x, y = (t.numpy() for t in _data(torch))
    model = keras.Sequential(
        [
            keras.Input((IN,)),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(args.width, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
    start = time.monotonic()
    steps = [0]

    class StopAfter(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            steps[0] += 1
            if time.monotonic() - start > args.seconds:
                self.model.stop_training = True

    out = Path(args.out)
    model.fit(
        np.asarray(x),
        np.asarray(y),
        batch_size=BATCH,
        epochs=10**6,
        verbose=0,
        callbacks=[
            StopAfter(),
            keras.callbacks.CSVLogger(str(out / "keras.csv")),
            SystemMetricsCallback(interval=args.interval, run_file=str(out / "run.jsonl")),
        ],
    )
    device = str(model.weights[0].value.device) if model.weights else "?"
    problems = _csv_problems(out / "keras.csv", key)
    if args.device == "cuda" and not device.startswith("cuda"):
        problems.append(f"Keras trained on {device}, not the GPU")
    return {
        "steps": steps[0],
        "files": [str(out / "keras.csv")],
        "problems": problems,
        "keras_device": device,
    }


def plain(args: argparse.Namespace, key: str) -> dict[str, Any]:
    """A torch loop marking its steps; run it under ``sysmetrics record``."""
    import torch

    import sysmetrics

    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    model = _mlp(torch, args.width).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = (t.to(device) for t in _data(torch, BATCH))
    start, step = time.monotonic(), 0
    while time.monotonic() - start < args.seconds:
        sysmetrics.step(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 50 == 0 and device.type == "cuda":
            torch.cuda.synchronize()  # keep the queue short: the time bound stays true
    problems = [] if os.environ.get("SYSMETRICS_STEP_FILE") else ["not run under sysmetrics record"]
    return {"steps": step, "files": [], "problems": problems}


def overhead(args: argparse.Namespace, key: str) -> dict[str, Any]:
    """``overhead.py``'s training table on this device, and NVIDIA CPU µs/tick/GPU."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import overhead as bench

    from sysmetrics.collectors import NvidiaCollector
    from sysmetrics.host import default_source

    accelerator = "gpu" if args.device == "cuda" else "cpu"
    table = bench.training_overhead(
        quick=False, accelerator=accelerator, rounds=args.rounds, steps=args.steps
    )
    result: dict[str, Any] = {"steps": 0, "files": [], "problems": [], "training": table}
    c = NvidiaCollector.create(default_source(), os.getpid())
    if c is None:
        result["problems"].append("no NVIDIA collector here: no CPU cost per GPU")
        return result
    try:
        c.sample()
        us = bench.cpu_us_per_call(c.sample, 200)
        result["nvidia_cpu_us_per_tick"] = us
        result["nvidia_cpu_us_per_tick_per_gpu"] = us / len(c.devices)
        result["gpus"] = len(c.devices)
    finally:
        c.close()
    print(
        f"NVIDIA collector: {us:.1f} CPU µs per tick, {us / result['gpus']:.1f} per GPU "
        f"({result['gpus']} GPUs; median of 7 batches of 200 back-to-back samples)"
    )
    return result


WORKLOADS = {
    "lightning": lightning,
    "transformers": transformers,
    "keras": keras_,
    "plain": plain,
    "overhead": overhead,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--out", required=True, help="the folder for this workload's files")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of training")
    parser.add_argument("--interval", type=float, default=0.5, help="sysmetrics' interval, s")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--width", type=int, default=WIDTH, help="the MLP's hidden width")
    parser.add_argument("--rounds", type=int, default=6, help="overhead: alternating rounds")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="overhead: steps a run (default 2000 on cuda, about 6 s; 200 on cpu)",
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 2000 if args.device == "cuda" else 200
    os.makedirs(args.out, exist_ok=True)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    key = "system/gpu.0.gpu" if args.device == "cuda" else "system/cpu"
    start = time.monotonic()
    try:
        result = WORKLOADS[args.workload](args, key)
    except Skip as exc:
        print(f"skip: {exc}", flush=True)
        return SKIP
    result.update(
        workload=args.workload, device=args.device, seconds=round(time.monotonic() - start, 2)
    )
    (Path(args.out) / "result.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: v for k, v in result.items() if k != "training"}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
