"""A Lightning DDP run of 2 simulated nodes x 2 ranks (gloo, CPU) with one slow rank.

Usage: ``python straggler_job.py OUT`` on each node (the test launches node 0 and node 1
with ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``; Lightning starts each node's
second rank). ``JOB_SLOW=CAUSE:RANK`` slows global rank RANK by ``JOB_SLOW_SECONDS`` (0.03)
per step: ``forward`` sleeps in ``training_step`` before the loss, ``backward`` in a
gradient hook of the model's weight (during backward), ``data`` in the collate function
(the fetch); RANK ``*`` slows every rank alike; empty, the four ranks are equal.
``JOB_SLOW`` may name several, comma-separated: the job trains once for each, one
``Trainer.fit`` after the other in the same processes and process group (the launch,
the imports and the rendezvous, most of a run's time on 2 CPUs, paid once). Run ``i``'s
sampling rank on each node writes its run file to OUT/{i}/node{k}.jsonl (``interval``
0.2 s); OUT/rank{r}.pid holds each rank's PID.
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

SLEEP = float(os.environ.get("JOB_SLOW_SECONDS", "0.03"))


def global_rank() -> int:
    return int(os.environ.get("NODE_RANK", "0")) * 2 + int(os.environ.get("LOCAL_RANK", "0"))


class Slow:
    """Which rank one run slows, and where (``CAUSE:RANK``; empty: none)."""

    def __init__(self, spec: str) -> None:
        self.cause, _, self.rank = spec.partition(":")

    def __call__(self, cause: str) -> bool:
        return cause == self.cause and self.rank in (str(global_rank()), "*")


class Model(pl.LightningModule):
    def __init__(self, slowed: Slow) -> None:
        super().__init__()
        self.slowed = slowed
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
        if self.slowed("forward"):
            time.sleep(SLEEP)
        return torch.nn.functional.mse_loss(out, y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Collate:
    def __init__(self, slowed: Slow) -> None:
        self.slowed = slowed

    def __call__(self, items: list[Any]) -> Any:
        if self.slowed("data"):
            time.sleep(SLEEP)
        return torch.utils.data.default_collate(items)


def fit(out: str, slowed: Slow, data: TensorDataset) -> None:
    """One run: its own model, callback, run files and logger under OUT."""
    os.makedirs(out, exist_ok=True)
    node = int(os.environ.get("NODE_RANK", "0"))
    callback = SystemMetricsCallback(
        interval=0.2, live_findings=False, run_file=os.path.join(out, f"node{node}.jsonl")
    )
    trainer = pl.Trainer(
        max_steps=int(os.environ.get("JOB_STEPS", "80")), log_every_n_steps=10,
        accelerator="cpu", num_nodes=2, devices=2, strategy="ddp",
        logger=CSVLogger(out, name="csv"), callbacks=[callback],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    loader = DataLoader(data, batch_size=4, collate_fn=Collate(slowed))
    trainer.fit(Model(slowed), loader)


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{global_rank()}.pid"), "w") as f:
        f.write(str(os.getpid()))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(1600, 32, generator=g), torch.randn(1600, 1, generator=g))
    for i, spec in enumerate(os.environ.get("JOB_SLOW", "").split(",")):
        fit(os.path.join(out, str(i)), Slow(spec), data)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
