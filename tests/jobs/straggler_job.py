"""A Lightning DDP run of 2 simulated nodes x 2 ranks (gloo, CPU) with one slow rank.

Usage: ``python straggler_job.py OUT`` on each node (the test launches node 0 and node 1
with ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``; Lightning starts each node's
second rank). ``JOB_SLOW=CAUSE:RANK`` slows global rank RANK by ``JOB_SLOW_SECONDS`` (0.03)
per step: ``forward`` sleeps in ``training_step`` before the loss, ``backward`` in a
gradient hook of the model's weight (during backward), ``data`` in the collate function
(the fetch); RANK ``*`` slows every rank alike. Without ``JOB_SLOW`` the four ranks are
equal. Each node's sampling rank
writes its run file to OUT/node{k}.jsonl (``interval`` 0.2 s); OUT/rank{r}.pid holds each
rank's PID.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from sysmetrics.integrations.lightning import SystemMetricsCallback

CAUSE, _, SLOW = os.environ.get("JOB_SLOW", ":").partition(":")
SLEEP = float(os.environ.get("JOB_SLOW_SECONDS", "0.03"))


def global_rank() -> int:
    return int(os.environ.get("NODE_RANK", "0")) * 2 + int(os.environ.get("LOCAL_RANK", "0"))


def slowed(cause: str) -> bool:
    return cause == CAUSE and SLOW in (str(global_rank()), "*")


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 1)
        if slowed("backward"):
            self.layer.weight.register_hook(self._slow_backward)

    @staticmethod
    def _slow_backward(grad: torch.Tensor) -> torch.Tensor:
        time.sleep(SLEEP)
        return grad

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        out = self.layer(x)
        if slowed("forward"):
            time.sleep(SLEEP)
        return torch.nn.functional.mse_loss(out, y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def collate(items: list[Any]) -> Any:
    if slowed("data"):
        time.sleep(SLEEP)
    return torch.utils.data.default_collate(items)


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{global_rank()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    node = int(os.environ.get("NODE_RANK", "0"))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(1600, 32, generator=g), torch.randn(1600, 1, generator=g))
    callback = SystemMetricsCallback(
        interval=0.2, live_findings=False, run_file=os.path.join(out, f"node{node}.jsonl")
    )
    trainer = pl.Trainer(
        max_steps=int(os.environ.get("JOB_STEPS", "80")), log_every_n_steps=10,
        accelerator="cpu", num_nodes=2, devices=2, strategy="ddp",
        logger=CSVLogger(out, name="csv"), callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Model(), DataLoader(data, batch_size=4, collate_fn=collate))
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
