"""One sampler, three readers: a Lightning callback, a Prometheus endpoint and a run file.

Run: ``python examples/sinks_demo.py [output folder]`` (needs the ``[prometheus]`` and
``[lightning]`` extras). One ``SystemMonitor`` samples; the callback logs its windows at
the trainer's steps, the exporter serves its latest sample on http://127.0.0.1:<port>/metrics
(scraped once here mid-training, as Prometheus would), and the callback's ``run_file``
writes every sample with its training step. The script prints what each one got.
"""

from __future__ import annotations

import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from sysmetrics import SystemMonitor
from sysmetrics.integrations.lightning import SystemMetricsCallback
from sysmetrics.sinks import PrometheusExporter


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


class ScrapeOnce(pl.Callback):
    """Reads the endpoint at step 100, as a Prometheus server would."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.page = ""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == 100:
            with urllib.request.urlopen(self.url, timeout=5) as response:
                self.page = response.read().decode()


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sysmetrics-"))
    x = torch.randn(8192, 64)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=64)
    monitor = SystemMonitor(interval=0.2).start()
    exporter = PrometheusExporter(monitor, port=0)  # a free port on 127.0.0.1
    scrape = ScrapeOnce(exporter.url)
    callback = SystemMetricsCallback(monitor=monitor, run_file=True)
    trainer = pl.Trainer(
        max_epochs=2,
        log_every_n_steps=32,
        logger=CSVLogger(out, name="csv"),
        callbacks=[callback, scrape],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        accelerator="cpu",
    )
    try:
        trainer.fit(Regressor(), data)
    finally:
        exporter.close()
        monitor.stop()

    print(f"Prometheus endpoint {exporter.url}, scraped at step 100:")
    for line in scrape.page.splitlines():
        if line.startswith(("sysmetrics_process_cpu", "sysmetrics_process_memory_rss")):
            print("  " + line)
    run_file = Path(trainer.log_dir or out) / "system_metrics.jsonl"
    lines = [json.loads(x) for x in run_file.read_text().splitlines()]
    steps = [x["step"] for x in lines if x["step"] is not None]
    print(f"run file {run_file}: {len(lines)} samples, steps {min(steps)}..{max(steps)}")
    print(f"  last: step {lines[-1]['step']}, cpu {lines[-1]['metrics'].get('cpu', 0):.1f} %")
    print(f"CSV logs in {out}/csv (system/* beside train_loss)")


if __name__ == "__main__":
    main()
