"""Findings told live (:mod:`sysmetrics.announce`), over a real monitor's samples."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from sysmetrics import findings
from sysmetrics.announce import LiveFindings, identity
from sysmetrics.collectors.base import BaseCollector
from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.monitor import SystemMonitor


class Script(BaseCollector):
    """Reports ``values`` (the test changes them between samples)."""

    name = "script"

    def __init__(self, values: Mapping[str, float]) -> None:
        self.values = dict(values)

    def sample(self) -> dict[str, float]:
        return dict(self.values)


def wait_for(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_finding_is_said_once_while_the_run_goes_on() -> None:
    script = Script({"proc.memory.percent": 40.0, "gpu.0.memoryAllocated": 10.0,
                     "gpu.process.0.gpu": 5.0})  # fmt: skip
    lines: list[str] = []
    with SystemMonitor(interval=0.02, collectors=[script]) as m:
        live = LiveFindings(m, lines.append, every=0.05, first=0.0).start()
        time.sleep(0.3)
        assert lines == []  # nothing to say yet
        script.values["proc.memory.percent"] = 96.0
        wait_for(lambda: lines)
        script.values["proc.memory.percent"] = 98.0  # the same finding, a higher peak
        script.values["gpu.0.memoryAllocated"] = 99.0  # another one
        wait_for(lambda: len(lines) == 2)
        time.sleep(0.3)
        live.close()
    assert len(lines) == 2, lines
    assert lines[0].startswith("sysmetrics: The job's memory peaked at 96 %")
    assert lines[1].startswith("sysmetrics: GPU 0's memory peaked at 99 %")


def test_close_says_what_the_whole_run_showed() -> None:
    script = Script({"proc.memory.percent": 97.0})
    lines: list[str] = []
    with SystemMonitor(interval=0.02, collectors=[script]) as m:
        live = LiveFindings(m, lines.append).start()  # the first evaluation is 20 s away
        time.sleep(0.1)
        live.close()
        live.close()  # idempotent
    assert len(lines) == 1 and "memory peaked at 97 %" in lines[0]


def test_identity_keeps_names_and_drops_measures() -> None:
    a = identity("gpu-throttling", "GPU 1 was held down in 12 % of samples, steps 10-40")
    b = identity("gpu-throttling", "GPU 1 was held down in 31 % of samples, steps 10-400")
    c = identity("gpu-throttling", "GPU 0 was held down in 12 % of samples, steps 10-40")
    assert a == b != c
    grown = identity("stall", "The step stayed at 124 for 800 ms")
    assert grown == identity("stall", "The step stayed at 124 for 1.2 s")
    early = identity("input-bound", "Steps 2-38 spent 75 % of their time waiting")
    assert early == identity("input-bound", "Steps 2-400 spent 61 % of their time waiting")
    assert identity("stall", "Step 5 stalled") == identity("stall", "Steps 5-9 stalled")
    first = identity("stall", "The step stayed at 100 for 12 s", at=100)
    assert first == identity("stall", "The step stayed at 100 for 40 s", at=100)
    assert first != identity("stall", "The step stayed at 500 for 12 s", at=500)
    assert identity("straggler-node", "node 1 waited 40 %") != identity(
        "straggler-node", "node 2 waited 40 %"
    )


def test_failing_rules_stop_the_announcing_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def broken(run: object) -> list[findings.Finding]:
        calls.append(threading.current_thread().name)
        raise ZeroDivisionError("a rule divided by zero")

    monkeypatch.setattr(findings, "findings", broken)
    lines: list[str] = []
    with SystemMonitor(interval=0.02, collectors=[Script({"cpu": 1.0})]) as m:
        live = LiveFindings(m, lines.append, every=0.02, first=0.0).start()
        with pytest.warns(SystemMetricsWarning, match="live findings failed.*ZeroDivisionError"):
            wait_for(lambda: calls)
            time.sleep(0.2)
            live.close()
    assert len(calls) == 1 and lines == []


LIGHTNING_JOB = """
import logging, sys, time
import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, Dataset

import sysmetrics.announce
from sysmetrics.integrations.lightning import SystemMetricsCallback

sysmetrics.announce.LIVE_FIRST = sysmetrics.announce.LIVE_EVERY = 1.0  # not 20 s, 30 s

class Slow(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.02)  # each batch of 1 waits 20 ms for its item
        return torch.ones(4), torch.ones(1)

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        time.sleep(0.005)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

class End(pl.Callback):  # before sysmetrics' callback: says when training ended
    def on_train_end(self, trainer, module):
        logging.getLogger("lightning.pytorch").info("TRAINING ENDED")

trainer = pl.Trainer(
    max_epochs=1, max_time={"seconds": 8}, accelerator="cpu", devices=1,
    logger=CSVLogger(sys.argv[1]), log_every_n_steps=10,
    callbacks=[End(), SystemMetricsCallback(interval=0.1, live_findings=sys.argv[2] == "on")],
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Model(), DataLoader(Slow(), batch_size=1))
"""


@pytest.mark.parametrize("live", ["on", "off"])
def test_a_real_lightning_run_with_a_slow_dataset_is_told_input_bound_once(
    tmp_path: Path, live: str
) -> None:
    """The line reaches Lightning's console during training, once; off, the console is
    as it is without sysmetrics."""
    pytest.importorskip("lightning")
    script = tmp_path / "job.py"
    script.write_text(LIGHTNING_JOB)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), live],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    console = (done.stdout + done.stderr).splitlines()
    told = [line for line in console if line.startswith("sysmetrics: ")]
    ended = console.index("TRAINING ENDED")
    if live == "off":
        assert told == []
        return
    input_bound = [line for line in told if "waiting for data" in line]
    assert len(input_bound) == 1, told
    assert console.index(input_bound[0]) < ended, "said after training, not during it"
    assert len(told) == len(set(told))
