"""A plain PyTorch loop, no framework, with step markers for ``sysmetrics record``.

    sysmetrics record --output run.jsonl -- python examples/plain_loop.py
    sysmetrics report run.jsonl -o report.html

It writes a small dataset to disk (with fsync) and reads it back, then trains a tiny MLP
on the CPU; every third epoch its DataLoader gets slow transforms, so the report shows
the CPU busy with data work (and ``step.dataWaitPercent`` up: ``sysmetrics.batches``
times the loop's waits for each batch, ``sysmetrics.step(n)`` closes each step).
Outside ``record`` both do nothing.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset

import sysmetrics


class Noisy(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows of a tensor file; ``slow`` adds work per item, as heavy augmentation would."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, slow: bool) -> None:
        self.x, self.y, self.slow = x, y, slow

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.x[i]
        if self.slow:
            for _ in range(40):
                x = x + 0.001 * torch.tanh(x)
        return x, self.y[i]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:  # write the data, then read it back
        path = os.path.join(tmp, "data.pt")
        with open(path, "wb") as f:
            torch.save((torch.randn(args.rows, 256), torch.randn(args.rows, 1)), f)
            f.flush()
            os.fsync(f.fileno())
        x, y = torch.load(path)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = 0
    for epoch in range(args.epochs):
        data = DataLoader(Noisy(x, y, slow=epoch % 3 == 2), batch_size=256, shuffle=True)
        for xb, yb in sysmetrics.batches(data):  # times the waits for each batch
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            sysmetrics.step(step)  # one optimizer step done
        print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
