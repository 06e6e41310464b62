"""Lightning: real training on CPU, read back from CSVLogger and TensorBoardLogger files."""

from __future__ import annotations

import csv
import json
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pl = pytest.importorskip("lightning.pytorch", reason="needs the [lightning] extra")
torch = pytest.importorskip("torch")
event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="needs tensorboard"
)

from lightning.fabric.utilities.exceptions import MisconfigurationException  # noqa: E402
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from sysmetrics import SystemMetricsWarning, SystemMonitor  # noqa: E402
from sysmetrics.integrations.lightning import SystemMetricsCallback  # noqa: E402
from tests.windows import (  # noqa: E402
    assert_cpu_where_measurable,
    assert_fresh_points,
    run_file_steps,
)


class TinyModel(pl.LightningModule):
    """Steps of ``sleep`` seconds (20 ms by default): a logging point every 2 or 3 steps
    then has samples of its own at the tests' 0.02 s interval (a point with no new sample
    logs no system keys)."""

    def __init__(self, fail_at: int | None = None, sleep: float = 0.02) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.fail_at = fail_at
        self.sleep = sleep

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.fail_at is not None and self.global_step == self.fail_at:
            raise RuntimeError("boom")
        if self.sleep:
            time.sleep(self.sleep)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(batches: int = 8) -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(
        torch.randn(batches * 4, 8, generator=g), torch.randn(batches * 4, 1, generator=g)
    )
    return DataLoader(data, batch_size=4)


def fit(tmp_path: Path, callback: SystemMetricsCallback, epochs: int = 2, **kw: Any) -> Path:
    model = kw.pop("model", None) or TinyModel()
    csv_logger = CSVLogger(tmp_path, name="csv")
    tb_logger = TensorBoardLogger(tmp_path, name="tb")
    kw.setdefault("devices", 1)
    others = kw.pop("callbacks", [])
    trainer = pl.Trainer(
        max_epochs=epochs, logger=[csv_logger, tb_logger], callbacks=[callback, *others],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", **kw,
    )  # fmt: skip
    trainer.fit(model, loader())
    return tmp_path


def csv_rows(root: Path) -> list[dict[str, str]]:
    (path,) = root.glob("csv/version_0/metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


def steps_with(rows: list[dict[str, str]], column: str) -> list[int]:
    return sorted(int(r["step"]) for r in rows if r.get(column))


def tb_steps(root: Path, tag: str) -> list[int]:
    (events,) = root.glob("tb/version_0/events.out.tfevents.*")
    acc = event_accumulator.EventAccumulator(str(events))
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return sorted(e.step for e in acc.Scalars(tag))


def test_step_metrics_sit_beside_the_loss(tmp_path: Path) -> None:
    fit(tmp_path, SystemMetricsCallback(interval=0.02), log_every_n_steps=3)
    rows = csv_rows(tmp_path)
    loss_steps = steps_with(rows, "train_loss_step")
    assert loss_steps == [2, 5, 8, 11, 14]  # 16 steps, logged every 3
    for key in ("system/cpu", "system/proc.memory.rssMB", "system/proc.memory.rssMB.max",
                "system/memory", "system/disk./.usagePercent", "system/network.sent"):  # fmt: skip
        assert steps_with(rows, key) == loss_steps, key
    assert tb_steps(tmp_path, "system/cpu") == tb_steps(tmp_path, "train_loss_step") == loss_steps
    rss = [float(r["system/proc.memory.rssMB"]) for r in rows if r.get("system/proc.memory.rssMB")]
    assert all(50 < v < 5000 for v in rss)


def test_epoch_metrics_once_per_epoch_at_the_epoch_step(tmp_path: Path) -> None:
    fit(tmp_path, SystemMetricsCallback(interval=0.02, logging_interval="epoch"), epochs=3)
    rows = csv_rows(tmp_path)
    epoch_steps = steps_with(rows, "train_loss_epoch")
    assert epoch_steps == [7, 15, 23]
    assert steps_with(rows, "system/cpu") == epoch_steps
    assert tb_steps(tmp_path, "system/cpu") == epoch_steps


def test_own_cadence_include_exclude_and_prefix(tmp_path: Path) -> None:
    cb = SystemMetricsCallback(
        interval=0.02, log_every_n_steps=4, prefix="sys/", include=["cpu*", "proc.*"],
        exclude="*.max",
    )  # fmt: skip
    fit(tmp_path, cb, log_every_n_steps=50)
    rows = csv_rows(tmp_path)
    assert steps_with(rows, "sys/cpu") == [3, 7, 11, 15]
    keys = {k for r in rows for k, v in r.items() if v and k.startswith("sys/")}
    assert "sys/proc.memory.rssMB" in keys and "sys/cpu.0.cpu_percent" in keys
    assert not any(k.endswith(".max") or k.startswith("sys/disk") for k in keys)


def test_fast_steps_log_no_stale_point(tmp_path: Path) -> None:
    """Steps far shorter than the interval: only the first point (the start-up sample) has
    system keys; the others have no new sample and log none (a gap, not a repeat)."""
    fit(tmp_path, SystemMetricsCallback(interval=30.0), log_every_n_steps=1)
    rows = csv_rows(tmp_path)
    assert steps_with(rows, "train_loss_step") == list(range(16))
    assert steps_with(rows, "system/cpu") == [0]
    assert steps_with(rows, "system/memory") == [0]


def test_no_point_repeats_the_previous_window(tmp_path: Path) -> None:
    """Regression (issue 22): at interval=1.0 with ~15 ms steps, 125 of 150 points were the
    previous window again. Read back from the CSV and TensorBoard files: at most one point
    per sample taken (the run file has every sample), each with a sample of its own."""
    cb = SystemMetricsCallback(interval=1.0, run_file=True)
    trainer_kw = {"log_every_n_steps": 5, "max_steps": 150}
    model = TinyModel(sleep=0.015)
    fit(tmp_path, cb, epochs=100, model=model, **trainer_kw)
    rows = csv_rows(tmp_path)
    assert len(steps_with(rows, "train_loss_step")) == 30  # 150 steps, logged every 5
    points = [(int(r["step"]), {k: v for k, v in r.items() if k.startswith("system/")})
              for r in rows if r.get("system/cpu")]  # fmt: skip
    samples = run_file_steps(tmp_path / "csv/version_0/system_metrics.jsonl")
    assert_fresh_points(points, samples)
    assert tb_steps(tmp_path, "system/cpu") == [step for step, _ in points]


def test_failing_training_step_leaves_no_sampler_thread(tmp_path: Path) -> None:
    cb = SystemMetricsCallback(interval=0.02)
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, cb, model=TinyModel(fail_at=3))
    assert cb.core.monitor is None
    assert "sysmetrics-monitor" not in [t.name for t in threading.enumerate()]


def test_no_logger_is_a_clear_error_at_setup(tmp_path: Path) -> None:
    trainer = pl.Trainer(max_epochs=1, logger=False, callbacks=[SystemMetricsCallback()],
                         enable_progress_bar=False, default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(MisconfigurationException, match="no logger"):
        trainer.fit(TinyModel(), loader())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"logging_interval": "batch"}, "logging_interval='batch' is invalid"),
        ({"log_every_n_steps": 0}, "log_every_n_steps=0 is invalid"),
        ({"interval": -1}, "interval=-1 is invalid"),
        ({"intervall": 1}, "unknown option 'intervall'"),
        ({"include": [""]}, "include contains ''"),
        ({"disk_paths": ["/nope/nope"]}, "does not exist"),
    ],
)
def test_bad_options_fail_at_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        SystemMetricsCallback(**kwargs)


def run_file_lines(path: Path) -> list[dict[str, Any]]:
    """The sample lines of a run file (its ``run`` and ``end`` markers left out)."""
    return [x for x in map(json.loads, path.read_text().splitlines()) if "metrics" in x]


def test_run_file_beside_the_logs_on_the_logged_step_axis(tmp_path: Path) -> None:
    model = TinyModel(sleep=0.02)
    fit(tmp_path, SystemMetricsCallback(interval=0.02, run_file=True), model=model)
    path = tmp_path / "csv/version_0/system_metrics.jsonl"  # trainer.log_dir
    lines = run_file_lines(path)
    markers = [json.loads(x) for x in path.read_text().splitlines()]
    assert markers[0]["run"]["command"] is None and markers[0]["run"]["interval"] == 0.02
    assert markers[-1]["end"]["status"] == "finished"
    steps = [x["step"] for x in lines]
    assert len(lines) > 10
    assert_cpu_where_measurable(lines)  # all but windows under half a tick (the last)
    # 16 steps logged at 0..15: samples carry the step being trained (the first sample,
    # taken at train start, the first step's).
    assert {s for s in steps if s is not None} <= set(range(16)) and steps[0] == 0
    assert len({s for s in steps if s is not None}) >= 8
    known = [s for s in steps if s is not None]
    assert known == sorted(known)
    assert steps[-1] == 15  # the last sample, taken as the monitor stops, has the last step


def test_run_file_has_the_first_sample_the_loggers_got(tmp_path: Path) -> None:
    """Regression: at ``interval=2`` the run file started after the monitor's first sample,
    so the steps before the second sample were missing although the loggers had them."""
    path = tmp_path / "run.jsonl"
    fit(tmp_path, SystemMetricsCallback(interval=2.0, run_file=path), log_every_n_steps=1)
    lines = run_file_lines(path)
    rows = [r for r in csv_rows(tmp_path) if r.get("system/cpu")]
    # 16 quick steps: the start-up sample and the one taken at stop.
    assert [x["step"] for x in lines] == [0, 15]
    first = rows[0]
    assert int(first["step"]) == 0  # the loggers got the start-up window at step 0 ...
    # ... and it is the run file's first sample.
    assert float(first["system/cpu"]) == pytest.approx(lines[0]["metrics"]["cpu"], rel=1e-9)


def test_run_file_folders_are_made_at_train_start(tmp_path: Path) -> None:
    """Regression (issue 33): ``run_file="out/run.jsonl"`` with no ``out/`` was a
    ``ValueError`` at construction, while Lightning's own loggers make their folders."""
    path = tmp_path / "out" / "deeper" / "run.jsonl"
    callback = SystemMetricsCallback(interval=0.05, run_file=path)
    assert not (tmp_path / "out").exists()  # made when training starts, not before
    fit(tmp_path, callback)
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert "run" in records[0] and records[-1]["end"]["status"] == "finished"
    assert run_file_lines(path)


def test_run_file_says_whether_training_finished_or_failed(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    fit(tmp_path / "a", SystemMetricsCallback(interval=0.05, run_file=good))
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path / "b", SystemMetricsCallback(interval=0.05, run_file=bad),
            model=TinyModel(fail_at=3))  # fmt: skip
    for path, status in ((good, "finished"), (bad, "failed")):
        records = [json.loads(x) for x in path.read_text().splitlines()]
        assert "run" in records[0] and records[-1]["end"]["status"] == status, path
        assert records[-1]["end"]["samples"] == len(records) - 2


def test_a_shared_monitor_is_read_not_stopped(tmp_path: Path) -> None:
    monitor = SystemMonitor(interval=0.02)
    try:
        cb = SystemMetricsCallback(monitor=monitor, log_every_n_steps=4)
        fit(tmp_path, cb)
        assert monitor.running  # started by the callback (it was not), never stopped by it
        other = monitor.reader()
        fit(tmp_path / "again", SystemMetricsCallback(monitor=monitor, log_every_n_steps=4))
        assert other.snapshot()["cpu"] >= 0  # its own window, untouched by the callbacks
    finally:
        monitor.stop()
    assert steps_with(csv_rows(tmp_path), "system/cpu") == [3, 7, 11, 15]


class Scrapes(pl.Callback):
    """Scrapes the exporter once mid-training and counts the sampling threads then."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.page = ""
        self.samplers = 0

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == 8:
            with urllib.request.urlopen(self.url, timeout=10) as response:
                self.page = response.read().decode()
            self.samplers = sum(t.name == "sysmetrics-monitor" for t in threading.enumerate())


def test_a_callback_and_an_exporter_share_one_sampler(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client", reason="needs the [prometheus] extra")
    from sysmetrics.sinks import PrometheusExporter

    with SystemMonitor(interval=0.02) as monitor, PrometheusExporter(monitor, port=0) as ex:
        scrapes = Scrapes(ex.url)
        fit(tmp_path, SystemMetricsCallback(monitor=monitor, log_every_n_steps=4),
            callbacks=[scrapes])  # fmt: skip
    assert scrapes.samplers == 1  # one sampling thread for the callback and the exporter
    assert "sysmetrics_process_memory_rss_bytes{" in scrapes.page
    assert steps_with(csv_rows(tmp_path), "system/cpu") == [3, 7, 11, 15]


def test_the_step_series_ends_with_training_while_the_process_stays_up(tmp_path: Path) -> None:
    """What docs/prometheus.md says of a process that stays up after training: the step
    series (and the step.* ones) are served while training runs and are gone once it ends,
    so TrainingStalled (``rate(sysmetrics_training_step[5m]) == 0``) has nothing to fire on;
    the shared monitor's other series go on."""
    pytest.importorskip("prometheus_client", reason="needs the [prometheus] extra")
    from sysmetrics.sinks import PrometheusExporter

    with SystemMonitor(interval=0.02) as monitor, PrometheusExporter(monitor, port=0) as ex:
        scrapes = Scrapes(ex.url)
        fit(tmp_path, SystemMetricsCallback(monitor=monitor, log_every_n_steps=4),
            callbacks=[scrapes])  # fmt: skip
        reader = monitor.reader(buffer=4)
        try:
            assert reader.wait(10)  # a sample taken after training
            reader.samples()
            assert reader.wait(10)  # and the next: the one the scrape reads is from after
            with urllib.request.urlopen(ex.url, timeout=10) as response:
                after = response.read().decode()
        finally:
            reader.close()
        assert monitor.running
    assert "sysmetrics_training_step{" in scrapes.page  # during training
    assert "sysmetrics_process_memory_rss_bytes{" in after  # the process is still served
    assert "sysmetrics_training_" not in after  # the step and the step.* keys: gone


class RecordingCallback(SystemMetricsCallback):
    """Writes, per rank, whether it sampled; a module-level class so ddp_spawn can pickle it."""

    def __init__(self, out: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.out = out

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        with open(f"{self.out}/rank{trainer.global_rank}", "w") as f:
            f.write("sampled" if self.core.monitor is not None else "idle")
        super().on_train_end(trainer, pl_module)


@pytest.mark.long
def test_ddp_one_sampler_per_node_and_one_point_per_step(tmp_path: Path) -> None:
    cb = RecordingCallback(str(tmp_path), interval=0.02)
    fit(tmp_path, cb, epochs=1, log_every_n_steps=2, strategy="ddp_spawn", devices=2,
        model=TinyModel())  # fmt: skip
    assert (tmp_path / "rank0").read_text() == "sampled"
    assert (tmp_path / "rank1").read_text() == "idle"  # same node: local rank 1 does not sample
    rows = csv_rows(tmp_path)
    loss_steps = steps_with(rows, "train_loss_step")
    assert loss_steps == [1, 3]  # 8 batches over 2 ranks = 4 steps
    assert steps_with(rows, "system/cpu") == loss_steps  # one point per step, not per rank


class StopsAt(TinyModel):
    """Sets ``trainer.should_stop`` in its own ``on_train_batch_end``, which runs after
    every callback's (as a module reacting to its loss would)."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.stop_batch = batch

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == self.stop_batch:
            self.trainer.should_stop = True


class StopCallback(pl.Callback):
    """Stops training in ``on_train_batch_end`` after ours, as ``Timer(max_time)`` does."""

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == 5:
            trainer.should_stop = True


@pytest.mark.parametrize("how", ["module", "later-callback", "max_time"])
def test_the_stopping_step_has_a_system_point(tmp_path: Path, how: str) -> None:
    """Regression: the trainer logs the step at which training stops (should_stop), and
    the system metrics were missing there."""
    cb = SystemMetricsCallback(interval=0.02)
    kw: dict[str, Any] = {"log_every_n_steps": 3}
    if how == "module":
        kw["model"] = StopsAt(4)
    elif how == "later-callback":
        kw["callbacks"] = [cb, StopCallback()]
    else:
        kw["model"] = TinyModel(sleep=0.05)
        kw["max_time"] = {"seconds": 0.4}
    model = kw.pop("model", None) or TinyModel()
    callbacks = kw.pop("callbacks", [cb])
    trainer = pl.Trainer(
        max_epochs=2, logger=[CSVLogger(tmp_path, name="csv")], callbacks=callbacks,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", devices=1, **kw,
    )  # fmt: skip
    trainer.fit(model, loader())
    rows = csv_rows(tmp_path)
    loss_steps = steps_with(rows, "train_loss_step")
    assert trainer.global_step < 16 and loss_steps[-1] == trainer.global_step - 1
    if how != "max_time":
        assert loss_steps == [2, 4]
    assert steps_with(rows, "system/cpu") == loss_steps


@pytest.mark.parametrize("console", [False, True])
def test_progress_bar_shows_system_metrics_only_when_asked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    console: bool,
) -> None:  # fmt: skip
    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)  # no tqdm thread left behind
    cb = SystemMetricsCallback(interval=0.02, include="cpu", console=console)
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="csv"), callbacks=[cb],
        enable_checkpointing=False, enable_model_summary=False, accelerator="cpu", devices=1,
        log_every_n_steps=2,
    )  # fmt: skip
    trainer.fit(TinyModel(), loader())
    captured = capfd.readouterr()
    console_text = captured.out + captured.err
    assert "Epoch 0" in console_text  # the real progress bar was drawn
    assert "system/" not in console_text  # never the loggers' keys
    # the short key (tqdm draws cpu=1.2, Rich cpu: 1.2), where include lets cpu in
    assert bool(re.search(r"\bcpu[=:]", console_text)) == console
    assert not re.search(r"\bmem[=:]", console_text)  # include="cpu" leaves the others out
    assert steps_with(csv_rows(tmp_path), "system/cpu") == [1, 3, 5, 7]
    bar = trainer.progress_bar_callback
    assert bar is not None and "get_metrics" not in vars(bar)  # unwrapped at the end


def test_console_shows_six_short_keys_at_most(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: console=True put ~20 keys into the bar, which wrapped into a column where
    five read ``system/proc.memo…``; now the console's short keys, none cut."""
    from sysmetrics.console_view import CONSOLE_KEYS

    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)
    seen: list[dict[str, Any]] = []

    class Spy(pl.Callback):  # what the bar would draw now (its get_metrics, as wrapped)
        def on_train_batch_end(self, trainer: pl.Trainer, module: Any, *a: Any) -> None:
            bar = trainer.progress_bar_callback
            assert bar is not None
            seen.append(dict(bar.get_metrics(trainer, module)))

    cb = SystemMetricsCallback(interval=0.02, console=True)
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="csv"), callbacks=[cb, Spy()],
        enable_checkpointing=False, enable_model_summary=False, accelerator="cpu", devices=1,
        log_every_n_steps=2,
    )  # fmt: skip
    trainer.fit(TinyModel(), loader())
    text = "".join(capfd.readouterr())
    labels = {c.label for c in CONSOLE_KEYS}
    ours = [{k for k in m if k in labels} for m in seen]
    assert max(map(len, ours)) <= 6 and {"cpu", "s/step"} <= set().union(*ours)
    assert all(set(m) - labels <= {"v_num", "loss", "train_loss"} for m in seen), seen[-1]
    assert "system/" not in text and "proc.memo" not in text


def no_sysmetrics_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection: every thread sysmetrics starts fails as under a ``pids.max`` or
    ``ulimit -u`` limit (``RuntimeError: can't start new thread``, what CPython raises
    when ``pthread_create`` fails); the framework's own threads are left alone."""
    start = threading.Thread.start

    def failing_start(self: threading.Thread) -> None:
        if self.name.startswith("sysmetrics"):
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", failing_start)


def test_a_monitor_that_cannot_start_does_not_stop_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 23): the RuntimeError escaped on_train_start and ended the fit
    (in DDP, the rank and the job). Training goes on as without the callback: one
    warning, no system metrics, every loss step logged."""
    no_sysmetrics_threads(monkeypatch)
    cb = SystemMetricsCallback(interval=0.02, run_file=True)
    with pytest.warns(SystemMetricsWarning) as caught:
        fit(tmp_path, cb, log_every_n_steps=3)
    texts = [str(w.message) for w in caught if w.category is SystemMetricsWarning]
    assert len(texts) == 1 and "can't start new thread" in texts[0], texts
    assert "training goes on without system metrics" in texts[0]
    rows = csv_rows(tmp_path)
    assert steps_with(rows, "train_loss_step") == [2, 5, 8, 11, 14]
    assert not any(k.startswith("system/") and v for r in rows for k, v in r.items())
    assert cb.core.monitor is None and cb.core.reader is None
    assert not [t for t in threading.enumerate() if t.name.startswith("sysmetrics")]


class NestedModel(pl.LightningModule):
    """Batches are torch nested tensors, whose ``shape``/``size()`` raise: a model that
    trains fine without the callback (issue 30, item 7's Lightning side)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x = torch.stack(list(batch.unbind()))  # the nested rows are of one length here
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_a_batch_that_cannot_be_sized_does_not_stop_training(tmp_path: Path) -> None:
    rows = [torch.randn(8) for _ in range(16)]
    data = DataLoader(rows, batch_size=4, collate_fn=torch.nested.nested_tensor)
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="csv"), accelerator="cpu", devices=1,
        callbacks=[SystemMetricsCallback(interval=0.02, live_findings=False)],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    with pytest.warns(SystemMetricsWarning, match="cannot find the size of a batch") as got:
        trainer.fit(NestedModel(), data)
    assert trainer.global_step == 4
    assert len([w for w in got if "size of a batch" in str(w.message)]) == 1


@pytest.mark.skipif(
    tuple(int(p) for p in pl.__version__.split(".")[:2]) < (2, 6),
    reason="the bar is checked at the latest tested Lightning (2.6): the declared minimum's "
    "(2.2) RichProgressBar raises IndexError inside Rich 15 at train start (its "
    "_init_progress), with or without sysmetrics",
)
@pytest.mark.parametrize("width", [80, 140])
def test_rich_progress_bar_holds_the_short_keys_whole(tmp_path: Path, width: int) -> None:
    """Issue 35: in a terminal, console=True put ~20 keys into Lightning's Rich bar, which
    wrapped into a column where five read ``system/proc.memo…``. Now the bar holds the
    short keys alone, none cut: on one line at 140 columns; at 80, where the bar leaves
    the metrics too little room, Rich wraps them between words, each key and value whole."""
    import io

    pytest.importorskip("rich", reason="needs rich (the [top] extra)")
    from lightning.pytorch.callbacks import RichProgressBar

    from sysmetrics.console_view import CONSOLE_KEYS

    screen = io.StringIO()
    kwargs = {"file": screen, "force_terminal": True, "width": width, "color_system": None}
    bar = RichProgressBar(refresh_rate=1, console_kwargs=kwargs)
    cb = SystemMetricsCallback(interval=0.02, console=True)
    trainer = pl.Trainer(
        max_epochs=1, logger=CSVLogger(tmp_path, name="csv"), callbacks=[cb, bar],
        enable_checkpointing=False, enable_model_summary=False, accelerator="cpu", devices=1,
        log_every_n_steps=2,
    )  # fmt: skip
    trainer.fit(TinyModel(sleep=0.05), loader())
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", screen.getvalue()).splitlines()
    assert "…" not in "".join(lines) and "system/" not in "".join(lines), lines[-8:]
    assert all(len(line) <= width for line in lines)
    # The metrics of the last frame: from its line with "Epoch 0", and, wrapped, the lines
    # under it (the metrics column, right of the bar).
    last = max(i for i, line in enumerate(lines) if "Epoch 0" in line and "8/8" in line)
    frame = " ".join(lines[last : last + 6] if width < 100 else lines[last : last + 1])
    shown = dict(re.findall(r"([\w/.]+):\s+(-?\d+\.\d+)\b", frame))
    labels = {c.label for c in CONSOLE_KEYS}
    assert {"cpu", "s/step"} <= set(shown), frame
    assert set(shown) <= labels | {"v_num", "train_loss"}, shown
    assert len(set(shown) & labels) <= 6
