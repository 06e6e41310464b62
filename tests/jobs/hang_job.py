"""Lightning runs that stall, for tests/test_hang.py (gloo on CPU, real ranks).

Usage: ``python hang_job.py OUT MODE RANKS [OPTIONS]``; OPTIONS: the callback's options as
JSON. Every training step all-reduces a tensor explicitly (``torch.distributed``) before
its loss. MODE:

- ``stop``: at step ``STOP_STEP`` (4) the last rank sleeps ``JOB_SLEEP`` seconds before
  the all-reduce, the others wait in it;
- ``kill``: at that step the last rank kills itself (SIGKILL) before the all-reduce,
  leaving a child that holds its sockets open (its PID in OUT/orphan.pid); rank 0 exits
  once it has said the stall (the others would wait for gloo's timeout);
- ``checkpoint``: one process; ``ModelCheckpoint`` saves every 3 steps through a
  checkpoint writer that sleeps ``JOB_SLEEP`` seconds inside its ``save_checkpoint``;
- ``sleep``: one process; step ``STOP_STEP`` sleeps ``JOB_SLEEP`` seconds in
  ``training_step``.

With ``JOB_NODES=1`` (and ``NODE_RANK``), each rank is one simulated node
(``num_nodes=RANKS``), launched by the test one by one (Lightning's own launcher would
kill every rank when one dies). Rank 0 writes every stall line it said (the Lightning
logger's lines that start with ``sysmetrics: no step``) to OUT/said.json at the end (or,
under ``kill``, once said).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from torch.utils.data import DataLoader, TensorDataset

from sysmetrics.integrations.lightning import SystemMetricsCallback

STOP_STEP = 4


class Said(logging.Handler):
    """Keeps the stall lines said through Lightning's logger (global rank 0)."""

    def __init__(self, out: str, kill: bool) -> None:
        super().__init__()
        self.out, self.kill = out, kill
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage()
        if line.startswith("sysmetrics: no step"):
            self.lines.append(line)
            if self.kill:  # the job cannot end: its ranks wait for a dead one
                self.write()
                os._exit(0)

    def write(self) -> None:
        with open(os.path.join(self.out, "said.json"), "w") as f:
            json.dump(self.lines, f)


class Stalling(pl.LightningModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.mode = mode

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        world = self.trainer.world_size
        last = self.trainer.global_rank == world - 1
        if batch_idx == STOP_STEP and last:
            if self.mode == "kill":
                # A child that outlives it holds its sockets open (a DataLoader worker
                # would, for a while), so the others wait as they do under NCCL; gloo
                # would fail them at once on the closed connection instead.
                child = os.fork()
                if child == 0:
                    time.sleep(120)
                    os._exit(0)
                with open(os.path.join(self.trainer.default_root_dir, "orphan.pid"), "w") as f:
                    f.write(str(child))
                os.kill(os.getpid(), signal.SIGKILL)
            if self.mode in ("stop", "sleep"):
                time.sleep(float(os.environ["JOB_SLEEP"]))  # the stall's line
        if world > 1:
            torch.distributed.all_reduce(torch.ones(1))
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class SlowSave(TorchCheckpointIO):
    """A checkpoint writer that takes ``JOB_SLEEP`` seconds: a slow filesystem."""

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(float(os.environ["JOB_SLEEP"]))
        super().save_checkpoint(*args, **kwargs)


def main() -> None:
    out, mode, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    nodes = os.environ.get("JOB_NODES") == "1"  # a rank per simulated node, launched alone
    said = Said(out, kill=mode == "kill")
    logging.getLogger("lightning.pytorch").addHandler(said)
    g = torch.Generator().manual_seed(0)
    n = int(os.environ.get("JOB_SAMPLES", "96"))  # more: a run long enough for its findings
    data = TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
    callbacks: list[Any] = [SystemMetricsCallback(**options)]
    plugins: list[Any] = []
    if mode == "checkpoint":
        callbacks.append(ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), every_n_train_steps=3))
        plugins.append(SlowSave())
    trainer = pl.Trainer(
        max_epochs=1, log_every_n_steps=4, accelerator="cpu",
        devices=1 if nodes else ranks, num_nodes=ranks if nodes else 1,
        strategy="ddp" if ranks > 1 else "auto", default_root_dir=out,
        callbacks=callbacks, plugins=plugins, logger=CSVLogger(out, name="csv"),
        enable_checkpointing=mode == "checkpoint", enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Stalling(mode), DataLoader(data, batch_size=4))
    if trainer.is_global_zero:
        said.write()


if __name__ == "__main__":
    main()
