"""Keras 3 on the torch backend: real fit() runs, read back from History, CSVLogger and
the batch logs another callback receives."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras", reason="needs the [keras] extra")
np = pytest.importorskip("numpy")

from sysmetrics.integrations.keras import SystemMetricsCallback  # noqa: E402


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
    assert ["system/cpu" in logs for logs in seen] == [False, True] * 4
    assert len(history.history["system/cpu"]) == 2


def sampler_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "sysmetrics-monitor"]


def test_exception_in_a_training_step_stops_the_sampler_at_once() -> None:
    x, y = data()
    cb = SystemMetricsCallback(interval=0.05)
    m = model(fail_at=2)
    with pytest.raises(RuntimeError, match="boom"):
        m.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    assert cb.core.monitor is None and sampler_threads() == []


def test_exception_elsewhere_in_fit_stops_the_sampler_once_handled() -> None:
    def fail(batch: int, logs: Any) -> None:
        if batch == 2:
            raise ValueError("a callback failed")

    x, y = data()
    cb = SystemMetricsCallback(interval=0.05)
    failing = keras.callbacks.LambdaCallback(on_train_batch_end=fail)
    with contextlib.suppress(ValueError):
        model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb, failing])
    assert cb.core.monitor is None and sampler_threads() == []
    # The callback can train again afterwards; the old run's clean-up does not touch it.
    history = model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    assert len(history.history["system/cpu"]) == 1


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
      callbacks=[keras.callbacks.CSVLogger(path), SystemMetricsCallback(interval=0.05)])
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
