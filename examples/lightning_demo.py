"""Train a tiny Lightning model on CPU for a few seconds with SystemMetricsCallback.

Run: ``python examples/lightning_demo.py [output folder]``. System metrics go to a
CSVLogger and a TensorBoardLogger at the trainer's logging steps, beside ``train_loss``;
the script prints where the files are and the system columns it finds in the CSV. A
logging step with no sample since the previous one (steps faster than ``interval``) has
no system values: a gap in the logger, never the previous values again.
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch.utils.data import DataLoader, TensorDataset

from sysmetrics.integrations.lightning import SystemMetricsCallback


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sysmetrics-"))
    x = torch.randn(8192, 64)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=64, num_workers=2)
    trainer = pl.Trainer(
        max_epochs=3,
        log_every_n_steps=32,
        logger=[CSVLogger(out, name="csv"), TensorBoardLogger(out, name="tb")],
        callbacks=[SystemMetricsCallback(interval=0.5)],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        accelerator="cpu",
    )
    trainer.fit(Regressor(), data)

    csv_path = Path(trainer.loggers[0].log_dir) / "metrics.csv"
    with open(csv_path) as f:
        every = list(csv.DictReader(f))
    logged = [r for r in every if r.get("train_loss")]  # the trainer's logging steps
    rows = [r for r in every if r.get("system/cpu")]
    # pssMB: the job's memory with pages shared by the workers counted once (the summed
    # rssMB counts them once per worker); a point without a PSS reading leaves it blank.
    shown = ["system/cpu", "system/proc.memory.pssMB", "system/proc.cpu.threads", "system/memory"]
    print(f"\nCSV: {csv_path}\nTensorBoard: {trainer.loggers[1].log_dir}")
    print(f"{'step':>6}" + "".join(f"{k:>28}" for k in shown))
    for r in rows:
        cells = (f"{float(r[k]):>28.1f}" if r.get(k) else f"{'':>28}" for k in shown)
        print(f"{r['step']:>6}" + "".join(cells))
    keys = max(sum(bool(v) and k.startswith("system/") for k, v in r.items()) for r in rows)
    print(f"{len(rows)} of {len(logged)} logging steps have system metrics, up to {keys} keys "
          "(DataLoader workers included in cpu and pssMB); the others had no new sample "
          "since the previous one")  # fmt: skip


if __name__ == "__main__":
    main()
