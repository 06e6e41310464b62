"""Train a tiny Keras 3 model (torch backend by default) with SystemMetricsCallback.

Run: ``python examples/keras_demo.py [output folder]``. System metrics join the epoch
logs, so ``History`` and ``CSVLogger`` (written to the output folder) get a column each.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

from sysmetrics.integrations.keras import SystemMetricsCallback


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sysmetrics-"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8192, 32)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(1)])  # fmt: skip
    model.compile(optimizer="adam", loss="mse")
    csv_path = out / "training.csv"
    history = model.fit(
        x, y, batch_size=64, epochs=4, verbose=0,
        callbacks=[keras.callbacks.CSVLogger(str(csv_path)), SystemMetricsCallback(interval=0.5)],
    )  # fmt: skip
    print(f"CSV: {csv_path} (backend {keras.backend.backend()})")
    h = history.history
    for epoch, loss in enumerate(h["loss"]):
        cpu, rss = h["system/cpu"][epoch], h["system/proc.memory.rssMB"][epoch]
        print(f"epoch {epoch}  loss {loss:.3f}  cpu {cpu:.1f}%  rss {rss:.0f} MiB")


if __name__ == "__main__":
    main()
