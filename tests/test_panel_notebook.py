"""The live panel in a real notebook, run by a real Jupyter kernel (nbclient + ipykernel).

Each test executes a notebook and records every message of the cell's output as the
kernel sends it: the panel is one ``display_data`` with a display id, then several
``update_display_data`` with the same id while training runs, and the notebook keeps the
last one, the run's summary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (the [test] extra)")
nbclient = pytest.importorskip("nbclient", reason="needs nbclient (the [test] extra)")
pytest.importorskip("ipykernel", reason="needs ipykernel (the [test] extra)")

ROOT = Path(__file__).resolve().parent.parent


class Recording(nbclient.NotebookClient):  # type: ignore[misc,name-defined]
    """A notebook client that keeps every output message of the kernel, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.messages: list[dict[str, Any]] = []

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        if msg["msg_type"] in ("display_data", "update_display_data", "stream", "error"):
            self.messages.append(msg)
        return super().process_message(msg, cell, cell_index)


def run_notebook(*cells: str, timeout: int = 300) -> tuple[Any, list[dict[str, Any]]]:
    """Run ``cells`` in a fresh kernel (this Python, this checkout's code)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    client = Recording(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {}})
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        client.execute(cwd=str(ROOT))
    return nb, client.messages


def panel_messages(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The panel's display id and the plain text of its display and each update, in order."""
    shown = [m for m in messages if m["msg_type"] == "display_data"]
    panels = [m for m in shown if "sysmetrics-panel" in m["content"]["data"].get("text/html", "")]
    assert len(panels) == 1, [m["content"]["data"].get("text/plain") for m in shown]
    display_id = panels[0]["content"]["transient"]["display_id"]
    texts = [panels[0]["content"]["data"]["text/plain"]]
    for m in messages:  # the panel's updates (a framework may update displays of its own)
        if m["msg_type"] == "update_display_data":
            data = m["content"]["data"]
            ours = m["content"]["transient"]["display_id"] == display_id
            assert ours == ("sysmetrics-panel" in data.get("text/html", "")), data
            if ours:
                texts.append(data["text/plain"])
    return display_id, texts


def check_panel(nb: Any, messages: list[dict[str, Any]], cell: int) -> list[str]:
    """The panel updated in place while training ran, and the notebook keeps the summary."""
    errors = [m for m in messages if m["msg_type"] == "error"]
    assert not errors, errors
    _, texts = panel_messages(messages)
    live = [t for t in texts[1:] if "run ended" not in t]
    assert len(live) >= 2, texts  # several redraws while training ran
    assert all(t.startswith("sysmetrics") and "cpu " in t and "mem " in t for t in live), live
    assert "run ended" in texts[-1], texts[-1]  # the last update: the summary
    # What the saved notebook shows: the summary, in place of the panel (one output).
    kept = [
        o
        for o in nb.cells[cell].outputs
        if o["output_type"] == "display_data"
        and "sysmetrics-panel" in o["data"].get("text/html", "")
    ]
    assert len(kept) == 1
    assert "run ended" in kept[0]["data"]["text/plain"]
    return texts


def test_watch_draws_a_live_panel_and_leaves_a_summary() -> None:
    nb, messages = run_notebook(
        "import time, sysmetrics\n"
        "with sysmetrics.watch(interval=0.2) as monitor:\n"
        "    end = time.monotonic() + 6\n"
        "    step = 0\n"
        "    while time.monotonic() < end:\n"
        "        step += 1\n"
        "        monitor.step = step\n"
        "        sum(i * i for i in range(20000))\n"
        "        time.sleep(0.01)\n"
    )
    texts = check_panel(nb, messages, 0)
    assert any("step " in t for t in texts[1:-1])  # the step stamped on the monitor
    assert len({t for t in texts[1:-1]}) >= 2  # its values change


LIGHTNING = """
import tempfile, time, torch, lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset
from sysmetrics.integrations.lightning import SystemMetricsCallback

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
    def training_step(self, batch, batch_idx):
        time.sleep(0.05)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
callback = SystemMetricsCallback(interval=0.2)
trainer = pl.Trainer(max_epochs=6, callbacks=[callback],
                     logger=pl.loggers.CSVLogger(tempfile.mkdtemp()),
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator="cpu", devices=1)
"""


@pytest.mark.long
def test_lightning_callback_draws_a_live_panel_in_a_kernel() -> None:
    # panel= is left to its default: on, since this runs in a Jupyter kernel.
    nb, messages = run_notebook(LIGHTNING, "trainer.fit(Tiny(), data)", timeout=600)
    texts = check_panel(nb, messages, 1)
    assert any("s/step " in t for t in texts[1:-1])  # the steps are timed
    assert "s/step " in texts[-1]  # and summed up


TRANSFORMERS = """
import tempfile, time, torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from sysmetrics.integrations.transformers import SystemMetricsCallback

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=64):
        self.ids = torch.randint(0, 64, (n, 8), generator=torch.Generator().manual_seed(0))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

class Sleeps(TrainerCallback):
    def on_step_end(self, *args, **kw):
        time.sleep(0.05)

config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                    bos_token_id=0, eos_token_id=0)
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=4,
                         num_train_epochs=6, report_to=[], save_strategy="no", use_cpu=True,
                         logging_steps=5)  # tqdm on: the notebook's own progress table too
callback = SystemMetricsCallback(interval=0.2)
trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(),
                  callbacks=[callback, Sleeps()])
"""


@pytest.mark.long
def test_transformers_callback_draws_a_live_panel_in_a_kernel() -> None:
    pytest.importorskip("transformers", reason="needs the [transformers] extra")
    nb, messages = run_notebook(TRANSFORMERS, "trainer.train()", timeout=600)
    texts = check_panel(nb, messages, 1)
    assert any("s/step " in t for t in texts[1:-1])


KERAS = """
import os
os.environ.setdefault("KERAS_BACKEND", "torch")
import time, keras, numpy as np
from sysmetrics.integrations.keras import SystemMetricsCallback

m = keras.Sequential([keras.Input((8,)), keras.layers.Lambda(lambda x: x), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
sleeps = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: time.sleep(0.05))
x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
callback = SystemMetricsCallback(interval=0.2)
"""


@pytest.mark.long
def test_keras_callback_draws_a_live_panel_in_a_kernel() -> None:
    pytest.importorskip("keras", reason="needs the [keras] extra")
    nb, messages = run_notebook(
        KERAS,
        "m.fit(x, x[:, :1], batch_size=4, epochs=2, verbose=0, callbacks=[callback, sleeps])",
        timeout=600,
    )
    texts = check_panel(nb, messages, 1)
    assert any("s/step " in t for t in texts[1:-1])


@pytest.mark.long
def test_lightning_callback_draws_no_panel_when_told_not_to() -> None:
    _, messages = run_notebook(
        LIGHTNING.replace("interval=0.2", "interval=0.2, panel=False"),
        "trainer.fit(Tiny(), data)",
        timeout=600,
    )
    assert not [m for m in messages if m["msg_type"] == "error"]
    assert not [m for m in messages if m["msg_type"] == "update_display_data"]
    assert not [
        m
        for m in messages
        if m["msg_type"] == "display_data"
        and "sysmetrics-panel" in m["content"]["data"].get("text/html", "")
    ]


def test_no_panel_outside_a_kernel() -> None:
    # The default (panel=None) draws nothing in a plain process: IPython is not imported.
    from sysmetrics.panel import in_kernel

    assert "IPython" not in sys.modules or not in_kernel()
    assert not in_kernel()


@pytest.mark.long
def test_transformers_notebook_table_shows_the_console_keys() -> None:
    """Issue 35: in a notebook, transformers' progress table (NotebookProgressCallback)
    showed ``Step | Training Loss`` alone even with ``console=True``; now its rows hold the
    console's short keys too, at most six, each value whole, and never a logger's key."""
    pytest.importorskip("transformers", reason="needs the [transformers] extra")
    import html
    import re

    from sysmetrics.console_view import CONSOLE_KEYS

    setup = TRANSFORMERS.replace("interval=0.2", "interval=0.2, console=True, panel=False")
    _, messages = run_notebook(setup, "trainer.train()", timeout=600)
    assert not [m for m in messages if m["msg_type"] == "error"]
    tables = [
        data["text/html"]
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
        and "Training Loss" in (data := m["content"]["data"]).get("text/html", "")
    ]
    assert tables, "no progress table: is NotebookProgressCallback not the printer here?"
    last = tables[-1]
    header = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", last)]
    labels = [c.label for c in CONSOLE_KEYS]
    ours = [h for h in header if h in labels]
    assert header[:2] == ["Step", "Training Loss"], header
    assert set(header[2:]) <= set(labels) and 1 <= len(ours) <= 6, header
    assert {"cpu", "s/step"} <= set(ours), header
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", last, re.S)]
    rows = [r for r in rows if r]
    assert len(rows) >= 5, rows  # logging_steps=5 over 96 steps
    for row in rows:  # each of our cells a whole number (no "…"), or the table's "No Log"
        for label, cell in zip(header, row):
            if label in labels:
                assert cell == "No Log" or re.fullmatch(r"-?\d+(\.\d+)?", cell), (label, cell)
    assert all(re.fullmatch(r"-?\d+\.\d+", c) for c in rows[-1][2 : 2 + len(ours)]), rows[-1]
    assert "system/" not in "".join(tables)


def test_notebook_table_with_evaluation_holds_the_short_keys_in_its_rows(
    tmp_path: Path,
) -> None:
    """With evaluation, the notebook table's rows are the evaluations' (``Step | Training
    Loss | Validation Loss``): the short keys go into the row of the step they were
    logged at. The real Trainer and printer, in this process (IPython draws as text)."""
    pytest.importorskip("transformers", reason="needs the [transformers] extra")
    pytest.importorskip("IPython", reason="needs IPython (the [test] extra)")
    from transformers.utils.notebook import NotebookProgressCallback

    from sysmetrics.console_view import CONSOLE_KEYS
    from tests.test_transformers import EVAL_STRATEGY, SystemMetricsCallback, train

    tables: list[list[list[Any]]] = []

    class Kept(NotebookProgressCallback):  # type: ignore[misc]
        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            tables.append(self.training_tracker.inner_table)  # the table, before it goes
            super().on_train_end(args, state, control, **kw)

    callback = SystemMetricsCallback(interval=0.02, console=True, panel=False)
    kept = Kept()
    train(tmp_path, callback, extra_callbacks=(kept,), logging_steps=4, eval_steps=4,
          report_to=[], **{EVAL_STRATEGY: "steps"})  # fmt: skip
    header, *rows = tables[0]
    labels = [c.label for c in CONSOLE_KEYS]
    assert header[:3] == ["Step", "Training Loss", "Validation Loss"], header
    assert "cpu" in header and set(header[3:]) <= set(labels), header
    assert [row[0] for row in rows] == [4, 8, 12, 16], rows  # one row per evaluation
    cpu = header.index("cpu")
    assert all(isinstance(row[cpu], float) for row in rows), rows
    assert "on_log" not in vars(kept) and "on_evaluate" not in vars(kept)  # unwrapped
