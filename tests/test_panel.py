"""The live panel outside a kernel: what it shows, when it is on, and its faults contained.

The panel in a real notebook run by a real kernel: ``tests/test_panel_notebook.py``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest

import sysmetrics
from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.panel import Panel, PanelState, in_kernel, sparkline, summary_lines

GiB = 2.0**30


def test_a_value_measured_earlier_says_how_long_ago() -> None:
    state = PanelState()
    state.add({"cpu": 50.0, "proc.memory.percent": 12.0, "proc.memory.pssMB": 2048.0}, 100.0)
    state.add({"cpu": 60.0}, 101.0)  # PSS is measured at a slower cadence: kept, fresh enough
    assert state.job_text() == "cpu 60.0%  mem 12.0% (2.0 GiB PSS)"
    state.add({"cpu": 70.0, "proc.memory.percent": 12.0}, 120.0, {"proc.memory.percent": 100.0})
    assert "mem 12.0% (2.0 GiB PSS) (20 s ago)" in state.job_text()  # not shown as current


def test_rates_of_counters_between_two_readings() -> None:
    state = PanelState()
    state.add({"disk.in": 100.0, "disk.out": 0.0, "network.recv": 0.0, "network.sent": 0.0}, 10.0)
    assert state.io_text() is None  # one reading: no rate yet
    state.add(
        {"disk.in": 110.0, "disk.out": 1.0, "network.recv": 4 * 2.0**20, "network.sent": 0.0},
        12.0,
    )
    assert state.io_text() == "disk r 5.0 w 0.5 MiB/s  net in 2.0 out 0.0 MiB/s"
    state.add({"disk.in": 0.0}, 13.0)  # a counter that restarted: no rate from it
    assert state.rates["disk.in"] == (5.0, 12.0)


def test_each_gpu_its_use_memory_of_total_and_power() -> None:
    state = PanelState()
    state.add(
        {
            "gpu.0.gpu": 88.0,
            "gpu.0.memoryAllocated": 40.0,
            "gpu.0.memoryAllocatedBytes": 32 * GiB,
            "gpu.0.powerWatts": 245.0,
            "gpu.1.gpu": 3.0,
            "gpu.process.0.memoryAllocatedBytes": 1.0,  # the job's share: not a device
        },
        1.0,
    )
    assert state.gpus() == ["0", "1"]
    assert state.gpu_text("0") == "gpu0  88% 32.0/80.0 GiB 245 W"
    assert state.gpu_text("1") == "gpu1   3%"


def test_the_gpu_line_from_a_monitor_of_nvml_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real NVML binding over the fake library of tests/fake_nvml.py, in a real monitor.
    pytest.importorskip("pynvml")
    from sysmetrics.collectors import NvidiaCollector
    from sysmetrics.host import default_source
    from tests.fake_nvml import FakeGpu, FakeNvmlLib, binding

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    lib = FakeNvmlLib([FakeGpu("GPU-a"), FakeGpu("GPU-b", util=(90, 70), used=8 << 30, minor=1)])
    nvidia = NvidiaCollector.create(default_source(), 1, nvml=binding(lib))
    assert nvidia is not None
    monitor = SystemMonitor(interval=0.05, collectors=[nvidia]).start()
    try:
        reader = monitor.reader()
        time.sleep(0.2)
        snap = reader.snapshot()
    finally:
        monitor.stop()
    state = PanelState()
    state.add(snap, snap.time, snap.measured)
    # 16 GiB each; used: 4 and 8 GiB; 150 W of 300.
    assert state.lines()[1:3] == ["gpu0  50% 4.0/16.0 GiB 150 W", "gpu1  90% 8.0/16.0 GiB 150 W"]
    assert not lib.failures


def test_steps_sparklines_of_the_last_minutes() -> None:
    state = PanelState()
    for i in range(40):
        state.add({"step.seconds": 0.1 * (1 + i % 4), "step.dataWaitPercent": 50.0}, 10.0 * i)
    # Only the last SPARK_SECONDS (300 s) are drawn: 31 readings, the width's last 24.
    assert len(state.history["s/step"]) == 31
    text = state.step_text()
    assert text is not None and text.startswith("s/step 0.400 ")
    assert "wait 50.0% " + "▅" * 24 in text  # 50 % of a 0-100 scale
    assert sparkline([1.0, 2.0]) == "▅█" and sparkline([0.0]) == "▁"


def test_the_summary_of_a_run() -> None:
    whole = {"cpu": 40.0, "proc.memory.percent": 10.0, "proc.memory.percent.max": 30.0}
    lines = summary_lines(whole, ["GPU 0 idles."], 65.2)
    assert lines[0] == "sysmetrics: run ended after 65 s (means over the run; memory: peaks)"
    assert lines[1] == "cpu 40.0%  mem 30.0%"
    assert lines[-1] == "finding: GPU 0 idles."


def test_sysmetrics_never_imports_ipython() -> None:
    # Run where IPython is installed too (the notebook tests' environment): still not imported.
    code = (
        "import sys, sysmetrics, sysmetrics.callback, sysmetrics.panel, sysmetrics.top\n"
        "with sysmetrics.watch(interval=0.05):\n"
        "    pass\n"
        "assert 'IPython' not in sys.modules, 'IPython imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_watch_outside_a_kernel_samples_and_shows_nothing() -> None:
    assert not in_kernel()
    with sysmetrics.watch(interval=0.05) as monitor:
        assert isinstance(monitor, SystemMonitor)
        assert not [t for t in threading.enumerate() if t.name == "sysmetrics-panel"]
        time.sleep(0.2)
        assert "cpu" in monitor.snapshot()
    assert monitor.stopped


def test_watch_keeps_a_monitor_of_yours_running() -> None:
    monitor = SystemMonitor(interval=0.05)
    try:
        with sysmetrics.watch(monitor) as watched:
            assert watched is monitor and not monitor.stopped
        assert not monitor.stopped
        with pytest.raises(TypeError, match="monitor= and SystemMonitor options"):  # noqa: SIM117
            with sysmetrics.watch(monitor, interval=1.0):  # Python 3.9: no with (...)
                pass
    finally:
        monitor.stop()


def test_panel_true_outside_a_kernel_warns_once_and_samples() -> None:
    with pytest.warns(SystemMetricsWarning, match="not a Jupyter kernel") as caught:  # noqa: SIM117
        with sysmetrics.watch(panel=True, interval=0.05) as monitor:
            time.sleep(0.1)
    assert len(caught) == 1
    assert monitor.stopped


class _FailingHandle:
    def __init__(self) -> None:
        self.updates = 0

    def update(self, obj: Any) -> None:
        self.updates += 1
        raise RuntimeError("the display went away")


def test_a_failing_display_stops_the_panel_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An IPython whose display handle fails on update (a closed front end, say).
    handle = _FailingHandle()
    display_mod = types.ModuleType("IPython.display")
    display_mod.display = lambda obj, display_id=False: handle  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython.display", display_mod)
    monitor = SystemMonitor(interval=0.05).start()
    try:
        with pytest.warns(SystemMetricsWarning, match="live panel failed") as caught:
            panel = Panel(monitor, every=0.05).start()
            deadline = time.monotonic() + 30
            while handle.updates == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            panel.close({"cpu": 1.0}, [])  # no summary drawn on a failed panel
        assert len(caught) == 1 and handle.updates == 1
        assert not monitor.stopped  # the run goes on
        assert "cpu" in monitor.snapshot()
    finally:
        monitor.stop()


lightning = pytest.importorskip("lightning.pytorch", reason="needs the [lightning] extra")


def _fit(tmp_path: Path, **options: Any) -> Any:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from sysmetrics.integrations.lightning import SystemMetricsCallback

    class Tiny(lightning.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            assert not [t for t in threading.enumerate() if t.name == "sysmetrics-panel"]
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    callback = SystemMetricsCallback(interval=0.05, **options)
    trainer = lightning.Trainer(
        max_epochs=1,
        callbacks=[callback],
        logger=lightning.loggers.CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    trainer.fit(Tiny(), data)
    return callback


def test_the_callback_shows_no_panel_outside_a_kernel_by_default(tmp_path: Path) -> None:
    callback = _fit(tmp_path)
    assert callback.core.panel is None
    assert callback.summary() is not None  # it sampled, without a panel


def test_the_callback_with_panel_true_outside_a_kernel_warns_and_trains(tmp_path: Path) -> None:
    with pytest.warns(SystemMetricsWarning, match="not a Jupyter kernel"):
        callback = _fit(tmp_path, panel=True)
    assert callback.summary() is not None


def test_panel_is_an_option_true_false_or_none() -> None:
    from sysmetrics.integrations.lightning import SystemMetricsCallback

    with pytest.raises(TypeError, match="use True, False or None"):
        SystemMetricsCallback(panel="yes")  # type: ignore[arg-type]
