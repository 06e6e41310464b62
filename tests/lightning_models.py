"""A tiny LightningModule whose training step takes a known time (imports Lightning lazily)."""

from __future__ import annotations

import time
from typing import Any


def sleepy_module(compute: float) -> Any:
    """A ``Linear(8, 1)`` LightningModule whose ``training_step`` sleeps ``compute`` s first
    (standing for the accelerator's work), logs ``train_loss``, with SGD at lr 0.01."""
    import lightning.pytorch as pl
    import torch

    class Sleepy(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            time.sleep(compute)
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Sleepy()
