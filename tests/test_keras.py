"""Keras 3 on the torch backend: real fit() runs, read back from History, CSVLogger and
the batch logs another callback receives."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras", reason="needs the [keras] extra")
np = pytest.importorskip("numpy")

from sysmetrics import SystemMonitor  # noqa: E402
from sysmetrics.collectors.process import ProcessCollector  # noqa: E402
from sysmetrics.console_view import CONSOLE_KEYS  # noqa: E402
from sysmetrics.integrations.keras import SystemMetricsCallback  # noqa: E402
from tests.conftest import ScriptedCollector  # noqa: E402
from tests.polling import wait_for  # noqa: E402
from tests.windows import assert_fresh_points, run_file_steps  # noqa: E402


def model(fail_at: int | None = None) -> Any:
    calls = [0]

    def maybe_fail(x: Any, training: bool | None = None) -> Any:
        calls[0] += bool(training)
        if fail_at is not None and calls[0] > fail_at:
            raise RuntimeError("boom")
        return x

    m = keras.Sequential(
        [keras.Input((8,)), keras.layers.Lambda(maybe_fail), keras.layers.Dense(1)]
    )
    m.compile(optimizer="sgd", loss="mse")
    return m


def data() -> tuple[Any, Any]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(64, 8)).astype("float32"), rng.normal(size=(64, 1)).astype("float32")


def test_epoch_metrics_fill_history_and_csv_whatever_the_position(tmp_path: Path) -> None:
    x, y = data()
    log = tmp_path / "log.csv"
    history = model().fit(
        x, y, batch_size=16, epochs=3, verbose=0,
        callbacks=[keras.callbacks.CSVLogger(str(log)), SystemMetricsCallback(interval=0.05)],
    )  # fmt: skip
    for key in ("system/cpu", "system/proc.memory.rssMB", "system/memory", "system/disk.out"):
        assert len(history.history[key]) == 3, key
    with open(log) as f:
        rows = list(csv.DictReader(f))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    for r in rows:
        assert float(r["system/cpu"]) >= 0.0
        assert 50 < float(r["system/proc.memory.rssMB"]) < 10000
        assert float(r["loss"]) > 0


def test_the_runs_numbers_are_at_hand_after_fit() -> None:
    """Issue 35: after fit, the last window and the whole run as Python objects."""
    x, y = data()
    cb = SystemMetricsCallback(interval=0.05)
    assert cb.summary() is None and cb.findings() == []
    history = model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    summary = cb.summary()
    assert summary is not None
    assert summary.last["cpu"] == pytest.approx(history.history["system/cpu"][-1])
    whole = summary.whole
    assert whole["proc.memory.rssMB.max"] >= whole["proc.memory.rssMB"] > 0
    # cpu is the last sample's own, unless that sample came within the shortest window
    # cpu is measured over (half a clock tick) of the one before: then it is that one's,
    # and its age says so (1.4 ms once, beside parallel workers)
    assert 0.0 <= whole["cpu"] <= 100.0
    assert 0.0 <= whole.age("cpu") < ProcessCollector.min_cpu_window_s
    assert isinstance(cb.findings(), list)


def test_batch_level_logging_when_asked(tmp_path: Path) -> None:
    x, y = data()
    seen: list[dict[str, Any]] = []
    recorder = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: seen.append(dict(logs))
    )
    cb = SystemMetricsCallback(interval=30.0, logging_interval="step", log_every_n_steps=2,
                               include="cpu")  # fmt: skip
    history = model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[recorder, cb])
    assert len(seen) == 8  # 4 batches x 2 epochs
    # A point every 2nd batch; only the first has a sample (the start-up one): the later
    # ones have no new sample and get no system keys.
    assert ["system/cpu" in logs for logs in seen] == [False, True] + [False] * 6
    # Epoch logs keep the latest values (CSVLogger fixed its columns at the first epoch).
    assert len(history.history["system/cpu"]) == 2


def test_no_batch_point_repeats_the_previous_window(tmp_path: Path) -> None:
    """Regression (issue 22): at interval=1.0 with ~15 ms batches, batch points repeated
    the previous window. At most one point per sample taken (the run file has every
    sample), each with a sample of its own; the epoch logs (History, CSVLogger) keep
    their columns filled."""
    x, y = data()
    seen: list[tuple[int, dict[str, Any]]] = []
    recorder = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: time.sleep(0.015),
        on_train_batch_end=lambda b, logs: seen.append(
            (len(seen) + 1, {k: v for k, v in (logs or {}).items() if k.startswith("system/")})
        ),
    )
    log = tmp_path / "log.csv"
    cb = SystemMetricsCallback(interval=1.0, logging_interval="step", run_file=tmp_path / "r.jsonl")
    csv_logger = keras.callbacks.CSVLogger(str(log))
    history = model().fit(x, y, batch_size=4, epochs=8, verbose=0,
                          callbacks=[recorder, cb, csv_logger])  # fmt: skip
    assert len(seen) == 128  # 16 batches x 8 epochs
    points = [(batch, logs) for batch, logs in seen if logs]
    assert_fresh_points(points, run_file_steps(tmp_path / "r.jsonl"))
    assert len(history.history["system/cpu"]) == 8
    with open(log) as f:
        assert all(r["system/cpu"] not in ("", "NA") for r in csv.DictReader(f))


def test_epoch_values_cover_the_whole_epoch_beside_batch_points() -> None:
    """Regression: batch snapshots reset the one window, so the epoch values in History
    covered only the time since the last batch, and the epoch's peak was lost."""
    x, y = data()
    c = ScriptedCollector({"gauge": 0.0, "peak": 0.0})
    script = [[(10.0, 100.0), (20.0, 900.0), (30.0, 300.0), (40.0, 100.0)],
              [(1.0, 5.0), (2.0, 6.0), (3.0, 7.0), (6.0, 8.0)]]  # fmt: skip
    fed = [1]  # start() took the first sample

    def feed(epoch: int, batch: int) -> None:
        gauge, peak = script[epoch][batch]
        c.feed({"gauge": gauge, "peak": peak})
        fed[0] += 1
        c.wait_entered(fed[0] + 1)  # stored before training goes on

    epoch = [0]
    feeder = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda e, logs: epoch.__setitem__(0, e),
        on_train_batch_end=lambda b, logs: feed(epoch[0], b),
    )
    cb = SystemMetricsCallback(interval=0.01, logging_interval="step", collectors=[c])
    try:
        history = model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb, feeder])
    finally:
        c.release()
    h = history.history
    assert h["system/gauge"] == [25.0, 3.0]  # the means of each epoch's four samples
    assert h["system/peak"] == [350.0, 6.5]
    assert h["system/peak.max"] == [900.0, 8.0]  # the peak a batch point took, kept


def test_a_shared_monitor_feeds_the_callback_and_a_run_file(tmp_path: Path) -> None:
    x, y = data()
    run_file = tmp_path / "run.jsonl"
    slow = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: time.sleep(0.03))
    with SystemMonitor(interval=0.01) as monitor:
        cb = SystemMetricsCallback(monitor=monitor, run_file=run_file, logging_interval="step")
        history = model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb, slow])
        assert monitor.step is None  # training is over: later samples have no step
        assert sampler_threads() == ["sysmetrics-monitor"]  # one sampler for everything
        assert monitor.running  # the callback did not start it, so it does not stop it
        assert len(history.history["system/cpu"]) == 2
    records = [json.loads(x) for x in run_file.read_text().splitlines()]
    lines = [x for x in records if "metrics" in x]
    assert "run" in records[0] and records[-1]["end"]["status"] == "finished"
    # At 0.01 s a late tick followed by one on time leaves a window under 5 ms, too short
    # for a cpu reading: such a sample has the other keys.
    assert lines and all(x["metrics"] for x in lines)
    assert sum("cpu" in x["metrics"] for x in lines) >= 0.8 * len(lines)
    steps = [x["step"] for x in lines if x["step"] is not None]
    assert set(steps) <= set(range(1, 9)) and len(set(steps)) >= 4  # batches of this fit, from 1


def sampler_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "sysmetrics-monitor"]


def stopped(cb: SystemMetricsCallback) -> bool:
    return cb.core.monitor is None and sampler_threads() == []


def test_exception_in_a_training_step_stops_the_sampler() -> None:
    x, y = data()
    cb = SystemMetricsCallback(interval=0.05)
    m = model(fail_at=2)
    with pytest.raises(RuntimeError, match="boom") as failure:
        m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    # The traceback (and with it fit's frames) is still alive here, as in a notebook.
    assert failure.tb is not None
    wait_for(lambda: stopped(cb), timeout=2.0)


def test_exception_elsewhere_in_fit_stops_the_sampler_while_the_traceback_lives() -> None:
    """Regression: with the traceback kept (a notebook keeps sys.last_traceback), the
    sampler ran for as long as the traceback lived."""

    def fail(batch: int, logs: Any) -> None:
        if batch == 2:
            raise ValueError("a callback failed")

    x, y = data()
    cb = SystemMetricsCallback(interval=0.05)
    failing = keras.callbacks.LambdaCallback(on_train_batch_end=fail)
    kept: list[BaseException] = []
    try:
        model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb, failing])
    except ValueError as exc:
        kept.append(exc)  # keeps exc.__traceback__, fit's frames and its callback list
    assert kept and kept[0].__traceback__ is not None
    wait_for(lambda: stopped(cb), timeout=2.0)
    # The callback can train again afterwards; the old run's clean-up does not touch it.
    history = model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    assert len(history.history["system/cpu"]) == 1
    assert stopped(cb)


@pytest.mark.parametrize("console", [False, True])
@pytest.mark.parametrize("verbose", [1, 2])
def test_progress_bar_looks_as_without_sysmetrics_unless_asked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], console: bool, verbose: int
) -> None:
    """Regression: the progress bar printed every system key on each epoch line (and,
    with "step", on every batch), since Keras adds it after the user's callbacks."""
    x, y = data()
    log = tmp_path / "log.csv"
    cb = SystemMetricsCallback(interval=0.05, logging_interval="step", console=console)
    history = model().fit(
        x, y, batch_size=16, epochs=2, verbose=verbose,
        callbacks=[cb, keras.callbacks.CSVLogger(str(log))],
    )  # fmt: skip
    out = capfd.readouterr().out
    assert "Epoch 2/2" in out and "loss" in out  # the real progress bar printed
    assert "system/" not in out, out[-2000:]  # never every key: the loggers have them
    # console=True: the console's short keys alone (issue 35: ~20 keys wrapped the bar);
    # a short key whose key no window had yet (s/step before a sample closed a step) is
    # left out, so only cpu is sure to be there
    assert (" cpu: " in out) == console, out[-2000:]
    shown = set(re.findall(r" - ([\w/.]+): [-\d.e]+", out))
    assert shown <= {"loss"} | {c.label for c in CONSOLE_KEYS}, shown
    assert len(history.history["system/cpu"]) == 2  # the loggers get the keys either way
    with open(log) as f:
        assert "system/proc.memory.rssMB" in next(csv.reader(f))


STEPS_PER_EXECUTION_SCRIPT = """
import sys, time
import keras, numpy as np
from sysmetrics.console_view import CONSOLE_KEYS
from sysmetrics.integrations.keras import SystemMetricsCallback
x = np.random.default_rng(0).normal(size=(int(sys.argv[1]), 8)).astype("float32")
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
calls = []
recorder = keras.callbacks.LambdaCallback(  # calls of 30 ms: every point has samples
    on_train_batch_begin=lambda batch, logs: time.sleep(0.03),
    on_train_batch_end=lambda batch, logs: calls.append("system/cpu" in logs))
cb = SystemMetricsCallback(interval=0.02, logging_interval="step", log_every_n_steps=8,
                           include="cpu", live_findings=False)  # stdout: the calls only
m.fit(x, x[:, :1], batch_size=2, epochs=2, verbose=0, callbacks=[recorder, cb])
print([i for i, has in enumerate(calls) if has])
"""


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install jax)"
)
@pytest.mark.parametrize(
    ("samples", "calls_with_points"),
    [
        # 32 batches an epoch, 4 per call: batches 8, 16, ... end calls 1, 3, ...
        (64, [1, 3, 5, 7, 9, 11, 13, 15]),
        # 30 batches an epoch: the last call of each trains 2; batch 32 is in call 8.
        (60, [1, 3, 5, 8, 10, 12, 14]),
    ],
)
def test_log_every_n_steps_counts_batches_with_steps_per_execution(
    samples: int, calls_with_points: list[int]
) -> None:
    """Regression: on JAX with steps_per_execution=4 the callback runs once per 4 batches,
    and log_every_n_steps counted those calls (one point per 8 calls, not per 8 batches)."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", STEPS_PER_EXECUTION_SCRIPT, str(samples)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(calls_with_points), proc.stdout


def test_bad_options_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="logging_interval='batch' is invalid"):
        SystemMetricsCallback(logging_interval="batch")


JAX_SCRIPT = """
import csv, os, sys
import keras, numpy as np
from sysmetrics.integrations.keras import SystemMetricsCallback
assert keras.backend.backend() == "jax", keras.backend.backend()
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
path = sys.argv[1]
m.fit(x, x[:, :1], batch_size=16, epochs=2, verbose=0,
      callbacks=[keras.callbacks.CSVLogger(path),
                 SystemMetricsCallback(interval=0.05, live_findings=False)])  # stdout: "ok"
rows = list(csv.DictReader(open(path)))
assert len(rows) == 2 and all(float(r["system/proc.memory.rssMB"]) > 10 for r in rows), rows
print("ok")
"""


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed (pip install jax)"
)
def test_jax_backend(tmp_path: Path) -> None:
    """Keras picks its backend once per process, so the jax run is a child process."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT, str(tmp_path / "log.csv")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


class SlowValidation(keras.callbacks.Callback):
    """Each validation batch takes ``seconds``: a long evaluation inside fit."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        time.sleep(self.seconds)


@pytest.mark.long
def test_a_long_validation_is_no_hang(capsys: pytest.CaptureFixture[str]) -> None:
    """fit's validation is announced (``on_test_begin``): 4 s of it, with hang_after=1,
    tells no hang; the same 4 s inside a training batch does (the watch is on)."""
    x, y = data()
    model().fit(
        x, y, batch_size=16, epochs=2, verbose=0, validation_data=(x[:16], y[:16]),
        callbacks=[SystemMetricsCallback(interval=0.05, hang_after=1), SlowValidation(4.0)],
    )  # fmt: skip
    assert "sysmetrics: no step" not in capsys.readouterr().out

    class SlowBatch(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if batch == 2:
                time.sleep(4.0)

    model().fit(
        x, y, batch_size=16, epochs=1, verbose=0,
        callbacks=[SystemMetricsCallback(interval=0.05, hang_after=1), SlowBatch()],
    )  # fmt: skip
    said = [x for x in capsys.readouterr().out.splitlines() if x.startswith("sysmetrics: no step")]
    assert len(said) == 1 and "(on_train_batch_end)" in said[0], said
