"""Step time, data wait and throughput from each callback's hooks, in real CPU training.

Every framework trains on batches whose fetch sleeps ``FETCH`` (20 ms, in the collate
function, ``num_workers=0``) and steps that sleep ``COMPUTE`` (30 ms per batch): a step
is then ~50 ms of which ~40 % waits for its batch, and with gradient accumulation of 2
an optimizer step is ~100 ms with the same share. The keys are read back from what the
real loggers wrote (Lightning's CSVLogger file, the Trainer's ``log_history``, Keras'
batch logs and CSVLogger file) at the loss steps.

What each step really took is the test's own reading: a callback beside sysmetrics' reads
``time.perf_counter()`` at each optimizer step's end (``Stamps``). The sleeps are the
floor of every window; the windows' median must be within 20 % of the steps' as the test
timed them, whatever the machine's load added to both (the tests ran alone, `serial`,
while they compared with the sleeps alone: a 2-CPU CI runner once added 50 ms to one of
Lightning's 4-step windows).
"""

from __future__ import annotations

import csv
import inspect
import json
import os
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from sysmetrics import SystemMonitor  # noqa: E402
from tests.lightning_models import sleepy_module  # noqa: E402
from tests.polling import Stamps  # noqa: E402

FETCH = 0.020  # s per batch, in the collate function
COMPUTE = 0.030  # s per batch, in the training step
BATCH = 4
INTERVAL = 0.05  # a few samples between logging points, each closing a step or so


def slow_collate(items: list[tuple[Any, ...]]) -> Any:
    time.sleep(FETCH)
    return torch.utils.data.default_collate(items)


def data(batches: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    n = batches * BATCH
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))


def check_points(
    points: Iterable[Mapping[str, Any]],
    per_step: float,
    prefix: str,
    truth: list[float],
    skip: int = 1,
    waits: float | None = None,
) -> int:
    """The points' step keys against the sleeps and the steps as the test timed them
    (``truth``: each step's seconds, ``Stamps.steps``); returns how many points were
    checked.

    The first ``skip`` points with step keys are left out: the first step carries the
    framework's one-off work (Lightning's and the Trainer's first backward and optimizer
    step; accelerate's loader fetches two batches at its first ``next``), which is true
    but not the sleeps'. ``waits``: the seconds of each step spent between steps, where
    not every fetch is (all of them by default).

    A step never takes less than its sleeps, and a window's mean step no more than the
    longest step timed; the points' median is within 20 % of the timed steps' (of their
    mean, for one point: a whole run's): an error in what the clock counts moves every
    window (step time without the fetch reads 60 %), load moves the truth alike. The data
    wait is checked against the point's own seconds, the time beyond the sleeps counted
    in either part of the step.
    """
    checked: list[float] = []
    for point in points:
        seconds = point.get(prefix + "step.seconds")
        if seconds in (None, ""):
            continue
        if skip:
            skip -= 1
            continue
        seconds = float(seconds)
        checked.append(seconds)
        wait = float(point[prefix + "step.dataWaitPercent"])
        throughput = float(point[prefix + "step.samplesPerSecond"])
        batches = round(per_step / (FETCH + COMPUTE))
        waited = batches * FETCH if waits is None else waits
        assert 0.9 * per_step <= seconds <= 1.1 * max(truth), (point, truth)
        extra = max(seconds - per_step, 0.0)
        assert 100 * waited / seconds - 10 <= wait <= 100 * (waited + extra) / seconds + 10, point
        # Samples over the same seconds: the batch size over the step time (the window's
        # weighting of both by seconds keeps them consistent to rounding).
        assert abs(throughput - batches * BATCH / seconds) <= 0.05 * throughput, point
    if checked:
        timed = statistics.median(truth) if len(checked) > 1 else statistics.mean(truth)
        assert abs(statistics.median(checked) - timed) <= 0.2 * timed, (checked, truth)
    return len(checked)


# ---- Lightning ---------------------------------------------------------------------------


def lightning_fit(
    tmp_path: Path, callback: Any, accumulate: int = 1, batches: int = 24
) -> tuple[Path, Stamps]:
    pl = pytest.importorskip("lightning.pytorch", reason="needs the [lightning] extra")
    from lightning.pytorch.loggers import CSVLogger

    stamps = Stamps()

    class Clock(pl.Callback):  # type: ignore[misc]
        def on_train_epoch_start(self, *args: Any) -> None:
            stamps.mark()

        def on_train_batch_end(self, *args: Any) -> None:
            batch_idx = args[-1]
            if (batch_idx + 1) % accumulate == 0:  # an optimizer step ends
                stamps.mark()

    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="csv"), callbacks=[callback, Clock()],
        log_every_n_steps=4, accumulate_grad_batches=accumulate, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
    )  # fmt: skip
    loader = DataLoader(data(batches), batch_size=BATCH, collate_fn=slow_collate)
    trainer.fit(sleepy_module(COMPUTE), loader)
    (path,) = tmp_path.glob("csv/version_0/metrics.csv")
    return path, stamps


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("accumulate", [1, 2])
def test_lightning_step_time_and_data_wait(tmp_path: Path, accumulate: int) -> None:
    from sysmetrics.integrations.lightning import SystemMetricsCallback

    cb = SystemMetricsCallback(interval=INTERVAL, run_file=True)
    path, stamps = lightning_fit(tmp_path, cb, accumulate)
    rows = csv_rows(path)
    loss_steps = {r["step"] for r in rows if r.get("train_loss")}
    timed = [r for r in rows if r.get("system/step.seconds")]
    assert {r["step"] for r in timed} <= loss_steps
    per_step = accumulate * (FETCH + COMPUTE)
    assert check_points(timed, per_step, "system/", stamps.steps()) >= 2, rows
    # The run file has them too, on each sample that closed a step (none on the others).
    lines = [json.loads(x) for x in (path.parent / "system_metrics.jsonl").read_text().splitlines()]
    samples = [x["metrics"] for x in lines if "metrics" in x]
    closed = [m for m in samples if "step.seconds" in m]
    assert 0 < len(closed) < len(samples)
    median, timed = statistics.median(m["step.seconds"] for m in closed), stamps.steps()
    assert abs(median - statistics.median(timed)) <= 0.2 * statistics.median(timed), closed


def test_lightning_shared_monitor_gets_the_keys_for_the_run_only(tmp_path: Path) -> None:
    from sysmetrics.integrations.lightning import SystemMetricsCallback

    monitor = SystemMonitor(interval=INTERVAL)
    try:
        reader = monitor.reader()
        path, stamps = lightning_fit(tmp_path, SystemMetricsCallback(monitor=monitor), batches=12)
        assert check_points(csv_rows(path), FETCH + COMPUTE, "system/", stamps.steps()) >= 1
        assert monitor.step_timing is None  # unset at the run's end: the monitor is ours
        # The user's own reader: every step of the run, the first one's warm-up included.
        whole = reader.snapshot()
        assert check_points([whole], FETCH + COMPUTE, "", stamps.steps(0), skip=0) == 1, whole
    finally:
        monitor.stop()


# ---- transformers ------------------------------------------------------------------------


def transformers_train(
    tmp_path: Path, callback: Any, accumulate: int = 1
) -> tuple[list[Any], Stamps]:
    transformers = pytest.importorskip("transformers", reason="needs the [transformers] extra")
    stamps = Stamps()

    class Clock(transformers.TrainerCallback):  # type: ignore[misc]
        def on_epoch_begin(self, *args: Any, **kw: Any) -> None:
            stamps.mark()

        def on_step_end(self, *args: Any, **kw: Any) -> None:  # an optimizer step's
            stamps.mark()

    class Tiny(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}

    class SleepyTrainer(transformers.Trainer):  # type: ignore[misc]
        def training_step(self, *args: Any, **kw: Any) -> Any:
            time.sleep(COMPUTE)  # per micro-batch
            return super().training_step(*args, **kw)

    def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        time.sleep(FETCH)
        return {k: torch.stack([i[k] for i in items]) for k in items[0]}

    ds = data(24 * accumulate)
    items = [{"x": x, "labels": y} for x, y in ds]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=accumulate, num_train_epochs=1, logging_steps=4,
        report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0,
    )  # fmt: skip
    trainer = SleepyTrainer(
        model=Tiny(), args=args, train_dataset=items, data_collator=collate,
        callbacks=[callback, Clock()],
    )  # fmt: skip
    trainer.train()
    return list(trainer.state.log_history), stamps


@pytest.mark.parametrize("accumulate", [1, 2])
def test_transformers_step_time_and_data_wait(tmp_path: Path, accumulate: int) -> None:
    pytest.importorskip("transformers", reason="needs the [transformers] extra")
    from sysmetrics.integrations.transformers import SystemMetricsCallback

    history, stamps = transformers_train(
        tmp_path, SystemMetricsCallback(interval=INTERVAL), accumulate
    )
    timed = [h for h in history if "system/step.seconds" in h]
    assert all("loss" in h for h in timed), history
    per_step = accumulate * (FETCH + COMPUTE)
    # Before 4.46 the Trainer fetched each micro-batch after an optimizer step's first
    # inside the step (docs/callbacks.md): only the first fetch is between steps.
    version = tuple(int(p) for p in transformers_version().split(".")[:2])
    waits = FETCH if version < (4, 46) else None
    assert check_points(timed, per_step, "system/", stamps.steps(), waits=waits) >= 2, history


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


# ---- Keras -------------------------------------------------------------------------------


def keras_fit(tmp_path: Path, callback: Any, accumulate: int = 1) -> tuple[list[Any], Path, Stamps]:
    keras = pytest.importorskip("keras", reason="needs the [keras] extra")

    def sleepy(x: Any, training: bool | None = None) -> Any:
        if training:
            time.sleep(COMPUTE)
        return x

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Lambda(sleepy), keras.layers.Dense(1)]
    )
    accumulating = {"gradient_accumulation_steps": accumulate} if accumulate > 1 else {}
    optimizer = keras.optimizers.SGD(**accumulating)
    model.compile(optimizer=optimizer, loss="mse")
    seen: list[dict[str, Any]] = []
    recorder = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: seen.append(dict(logs))
    )
    stamps = Stamps()
    clock = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: stamps.mark(),
        on_train_batch_end=lambda b, logs: (b + 1) % accumulate or stamps.mark(),
    )  # each optimizer step's end
    log = tmp_path / "log.csv"
    loader = DataLoader(data(24), batch_size=BATCH, collate_fn=slow_collate)
    model.fit(
        loader, epochs=1, verbose=0,
        callbacks=[recorder, keras.callbacks.CSVLogger(str(log)), callback, clock],
    )  # fmt: skip
    return seen, log, stamps


@pytest.mark.parametrize("accumulate", [1, 2])
def test_keras_step_time_and_data_wait(tmp_path: Path, accumulate: int) -> None:
    keras = pytest.importorskip("keras", reason="needs the [keras] extra")
    from sysmetrics.integrations.keras import SystemMetricsCallback

    if (
        accumulate > 1
        and "gradient_accumulation_steps"
        not in inspect.signature(keras.optimizers.Optimizer.__init__).parameters
    ):
        pytest.skip(f"Keras {keras.__version__} has no gradient_accumulation_steps")
    cb = SystemMetricsCallback(interval=INTERVAL, logging_interval="step", log_every_n_steps=4)
    seen, log, stamps = keras_fit(tmp_path, cb, accumulate)
    per_step = accumulate * (FETCH + COMPUTE)
    assert check_points(seen, per_step, "system/", stamps.steps()) >= 2, seen
    (epoch,) = csv_rows(log)  # the epoch's point: every step of the epoch
    assert check_points([epoch], per_step, "system/", stamps.steps(0), skip=0) == 1, epoch
