"""The loader told apart from the framework: each callback times the loop's fetch itself.

Every framework trains on batches whose fetch sleeps ``FETCH`` (in the collate function,
``num_workers=0``), steps that sleep ``COMPUTE``, and a slow callback after sysmetrics'
that sleeps ``SLOW`` between steps (Lightning: its progress bar, redrawing slowly as in
a notebook). ``step.dataWaitPercent`` must be the fetch's share of the step and
``step.overheadPercent`` the slow callback's: before each callback timed the fetch, all
the time between the hooks was counted as waiting for data (issue 32: the progress bar
blamed on the loader). The keys are read back from what the real loggers wrote.

The test times the fetch and the slow callback itself (``TIMED``): on a loaded machine
each sleep overruns, and the bounds follow what each really took, not the sleeps alone.
"""

from __future__ import annotations

import csv
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

from tests.lightning_models import sleepy_module  # noqa: E402

FETCH = 0.020  # s per batch, in the collate function
COMPUTE = 0.020  # s per batch, in the training step
SLOW = 0.030  # s per step, in a callback after sysmetrics' (between the step hooks)
BATCH = 4
BATCHES = 30
INTERVAL = 0.05
# What the fetches and the slow callback really took, s each (this test's own clock).
TIMED: dict[str, list[float]] = {"fetch": [], "slow": []}


@pytest.fixture(autouse=True)
def timed() -> None:
    for seconds in TIMED.values():
        seconds.clear()


def timing(part: str, sleep: float) -> None:
    """Sleep ``sleep`` s, recording how long it really took as one of ``part``'s."""
    start = time.perf_counter()
    time.sleep(sleep)
    TIMED[part].append(time.perf_counter() - start)


def slow_collate(items: list[tuple[Any, ...]]) -> Any:
    start = time.perf_counter()
    time.sleep(FETCH)
    batch = torch.utils.data.default_collate(items)
    TIMED["fetch"].append(time.perf_counter() - start)
    return batch


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    n = BATCHES * BATCH
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))


def check(points: Iterable[Mapping[str, Any]], prefix: str) -> None:
    """The fetch is the wait, the slow callback the overhead (each to within 15 ms of
    what it took, as ``TIMED`` has it).

    Medians over the points with step keys, in seconds of the step; the first point is
    left out (the first step's one-off work). Each is at least 90 % of its sleep; what
    the step took beyond the timed fetch, the compute's sleep and the timed callback (a
    loaded machine's delays elsewhere in the loop) may fall in either.
    """
    rows = [p for p in points if p.get(prefix + "step.seconds") not in (None, "")][1:]
    assert len(rows) >= 2, rows
    seconds = [float(p[prefix + "step.seconds"]) for p in rows]
    step = statistics.median(seconds)
    assert step >= FETCH + COMPUTE + SLOW
    fetch, slow = statistics.median(TIMED["fetch"]), statistics.median(TIMED["slow"])
    extra = max(step - fetch - COMPUTE - slow, 0.0)
    waits = [float(p[prefix + "step.dataWaitPercent"]) / 100 * s for p, s in zip(rows, seconds)]
    wait = statistics.median(waits)
    assert FETCH * 0.9 <= wait <= fetch + 0.015 + extra, (step, wait, fetch, extra)
    overs = [float(p[prefix + "step.overheadPercent"]) / 100 * s for p, s in zip(rows, seconds)]
    over = statistics.median(overs)
    assert SLOW * 0.9 <= over <= slow + 0.015 + extra, (step, wait, over, slow, extra)


# ---- Lightning ---------------------------------------------------------------------------


def test_lightning_progress_bar_is_overhead_not_data_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress bar that redraws slowly (a notebook's) is overhead, the fetch the wait."""
    pl = pytest.importorskip("lightning.pytorch", reason="needs the [lightning] extra")
    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)  # no tqdm thread left behind
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    from sysmetrics.integrations.lightning import SystemMetricsCallback

    class SlowBar(TQDMProgressBar):  # type: ignore[misc]
        def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
            super().on_train_batch_end(*args, **kwargs)
            timing("slow", SLOW)  # a redraw in a notebook's output area

    cb = SystemMetricsCallback(interval=INTERVAL)
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="csv"), callbacks=[cb, SlowBar()],
        log_every_n_steps=4, enable_checkpointing=False, enable_model_summary=False,
        accelerator="cpu", devices=1,
    )  # fmt: skip
    trainer.fit(
        sleepy_module(COMPUTE), DataLoader(data(), batch_size=BATCH, collate_fn=slow_collate)
    )
    (path,) = tmp_path.glob("csv/version_0/metrics.csv")
    with open(path) as f:
        check(list(csv.DictReader(f)), "system/")


# ---- transformers ------------------------------------------------------------------------


def test_transformers_slow_callback_is_overhead_not_data_wait(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers", reason="needs the [transformers] extra")
    from sysmetrics.integrations.transformers import SystemMetricsCallback

    class Tiny(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            time.sleep(COMPUTE)
            return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}

    class Slow(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            timing("slow", SLOW)

    def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
        start = time.perf_counter()
        time.sleep(FETCH)
        batch = {k: torch.stack([i[k] for i in items]) for k in items[0]}
        TIMED["fetch"].append(time.perf_counter() - start)
        return batch

    items = [{"x": x, "labels": y} for x, y in data()]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=BATCH,
        num_train_epochs=1, logging_steps=4, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = transformers.Trainer(
        model=Tiny(), args=args, train_dataset=items, data_collator=collate,
        callbacks=[SystemMetricsCallback(interval=INTERVAL), Slow()],
    )  # fmt: skip
    trainer.train()
    check(trainer.state.log_history, "system/")


# ---- Keras -------------------------------------------------------------------------------


def test_keras_slow_callback_is_overhead_not_data_wait(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras", reason="needs the [keras] extra")
    from sysmetrics.integrations.keras import SystemMetricsCallback

    def sleepy(x: Any, training: bool | None = None) -> Any:
        if training:
            time.sleep(COMPUTE)
        return x

    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Lambda(sleepy), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(), loss="mse")
    seen: list[dict[str, Any]] = []
    # Listed before sysmetrics', which moves itself to the front: these run after it.
    recorder = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: seen.append(dict(logs))
    )
    slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: timing("slow", SLOW))
    cb = SystemMetricsCallback(interval=INTERVAL, logging_interval="step", log_every_n_steps=4)
    loader = DataLoader(data(), batch_size=BATCH, collate_fn=slow_collate)
    model.fit(loader, epochs=1, verbose=0, callbacks=[recorder, slow, cb])
    check(seen, "system/")


# ---- the suite's recorded runs -----------------------------------------------------------

RECORDED = Path(__file__).resolve().parent / "fixtures" / "runs"


@pytest.mark.parametrize(
    ("name", "fires"),
    [("lightning-slow-bar", True), ("transformers-slow-callback", True),
     ("healthy-lightning-bar", False)],
)  # fmt: skip
def test_recorded_runs_name_the_framework_not_the_loader(name: str, fires: bool) -> None:
    """The suite's recordings read back: the slow bar and callback are framework-overhead."""
    from sysmetrics.findings import findings, read_run

    said = {f.rule: f.sentence for f in findings(read_run(RECORDED / f"{name}.jsonl"))}
    assert "input-bound" not in said, said
    assert ("framework-overhead" in said) is fires, said
    if fires:
        assert "outside the batch fetch" in said["framework-overhead"]


# ---- where the fetch cannot be wrapped -----------------------------------------------------


def test_without_the_wrapped_attribute_the_callbacks_fall_back_to_the_gap() -> None:
    """A loop without the attribute (another version): not wrapped, the clock untimed.

    The clock then counts all the time between the hooks as waiting, as before, and
    writes no ``step.overheadPercent`` (the docs say so).
    """
    pytest.importorskip("lightning.pytorch", reason="needs the [lightning] extra")
    pytest.importorskip("transformers", reason="needs the [transformers] extra")
    from sysmetrics.integrations import _lightning, _transformers
    from sysmetrics.steptime import StepClock, StepCollector

    class Loop:  # a fit loop whose epoch loop has no fetch hooks
        epoch_loop = object()

    class Trainer:
        fit_loop = Loop()

    clock = StepClock()
    assert _lightning.time_fetch(Trainer(), clock) is None  # type: ignore[arg-type]
    assert _transformers.time_fetch(object(), clock) is None
    assert not clock.timed
    ticks = [0.0]
    clock = StepClock(lambda: ticks[0])
    read = clock.read
    collector = StepCollector(lambda: read)
    clock.restart()
    for _ in range(3):
        ticks[0] += 0.05  # between the hooks: a fetch and a slow callback, told apart by none
        clock.begin()
        ticks[0] += 0.05
        clock.end()
    out = collector.sample()
    assert out["step.dataWaitPercent"] == pytest.approx(50.0)
    assert "step.overheadPercent" not in out
