"""TPU collector. This machine has no TPU: the tests put a stand-in ``tpu-info`` on PATH, a
real executable that prints captured ``tpu-info`` output (``tests/fixtures/tpu/``, see the
README there), and a stand-in sysfs PCI tree with a Google device, so the real detection,
subprocess, thread and parsing run."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import TPUCollector
from sysmetrics.collectors.tpu import parse_tpu_info

FIXTURES = Path(__file__).parent / "fixtures" / "tpu"
GiB = float(1 << 30)


def standin(tmp_path: Path, output: str, rc: int = 0, sleep: float = 0.0) -> Path:
    """A ``tpu-info`` executable in ``tmp_path/bin`` that prints ``output``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "out.txt").write_text(output)
    exe = bin_dir / "tpu-info"
    exe.write_text(f"#!/bin/sh\nsleep {sleep}\ncat '{tmp_path / 'out.txt'}'\nexit {rc}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def pci_tree(tmp_path: Path, vendors: list[str]) -> str:
    root = tmp_path / f"pci-{'-'.join(vendors)}"
    for i, vendor in enumerate(vendors):
        (root / f"0000:00:{i:02x}.0").mkdir(parents=True)
        (root / f"0000:00:{i:02x}.0" / "vendor").write_text(vendor + "\n")
    root.mkdir(exist_ok=True)
    return str(root)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_static_output_four_chips() -> None:
    snap = parse_tpu_info((FIXTURES / "static_v6e.txt").read_text())
    assert set(snap) == {f"tpu.{i}.{k}" for i in range(4)
                         for k in ("memoryUsageBytes", "memoryUsage", "dutyCycle")}  # fmt: skip
    assert snap["tpu.0.memoryUsageBytes"] == pytest.approx(18.45 * GiB)
    assert snap["tpu.0.memoryUsage"] == pytest.approx(18.45 / 31.25 * 100)
    assert snap["tpu.3.memoryUsage"] == pytest.approx(10.40 / 31.25 * 100)
    assert snap["tpu.2.dutyCycle"] == 100.0  # not TensorCore utilization (13-15 %)


def test_streaming_frame_keeps_the_runtime_device_ids() -> None:
    snap = parse_tpu_info((FIXTURES / "streaming_v6e.txt").read_text())
    assert {k.split(".")[1] for k in snap} == {"8", "9", "12", "13"}
    assert snap["tpu.8.memoryUsageBytes"] == pytest.approx(17.26 * GiB)
    assert snap["tpu.13.dutyCycle"] == 100.0


def test_metric_tables_duty_cycle_and_hbm_separately() -> None:
    snap = parse_tpu_info((FIXTURES / "metric_v6e_8chips.txt").read_text())
    assert len(snap) == 8 * 3
    assert snap["tpu.0.memoryUsage"] == pytest.approx(29.50 / 31.25 * 100)
    assert snap["tpu.7.memoryUsageBytes"] == pytest.approx(21.50 * GiB)
    assert snap["tpu.5.dutyCycle"] == 100.0


def test_box_drawn_rows_and_colour_codes_parse_alike() -> None:
    """The same capture as rich draws it on a terminal: box characters and ANSI colours."""
    text = (FIXTURES / "static_v6e.txt").read_text()
    boxed = "\n".join(
        "\x1b[1m" + line.replace("|", "│") + "\x1b[0m" if line.startswith("|") else line
        for line in text.splitlines()
    )
    assert parse_tpu_info(boxed) == parse_tpu_info(text)


def test_no_workload_yet_gives_no_keys() -> None:
    text = (FIXTURES / "static_v6e.txt").read_text().split("TPU Runtime Utilization")[0]
    unavailable = "Libtpu metrics unavailable. Is there a framework using the TPU?"
    assert parse_tpu_info(text + unavailable) == {}


def test_found_and_polled_on_its_own_thread(on_path: Path) -> None:
    standin(on_path, (FIXTURES / "static_v6e.txt").read_text())
    c = TPUCollector.create(pci_tree(on_path, ["0x8086", "0x1ae0"]))
    assert c is not None and c.command == [str(on_path / "bin" / "tpu-info")]
    monitor = SystemMonitor(interval=0.05, collectors=[c]).start()
    try:
        deadline = time.monotonic() + 10
        while "tpu.1.memoryUsageBytes" not in monitor.snapshot() and time.monotonic() < deadline:
            time.sleep(0.05)
        snap = monitor.snapshot()
    finally:
        monitor.stop()
    assert snap["tpu.1.memoryUsageBytes"] == pytest.approx(10.40 * GiB)
    assert snap["tpu.0.memoryUsageBytes.max"] == pytest.approx(18.45 * GiB)


def test_never_imports_libtpu_jax_or_torch_xla(on_path: Path) -> None:
    """In a fresh interpreter (other tests import jax): find, poll, read, close."""
    standin(on_path, (FIXTURES / "static_v6e.txt").read_text())
    code = (
        "import sys, time\n"
        "from sysmetrics.collectors import TPUCollector\n"
        "c = TPUCollector.create(sys.argv[1])\n"
        "c.sample()\n"
        "while not c.sample(): time.sleep(0.05)\n"
        "c.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jax', 'jaxlib', 'libtpu', 'torch_xla', 'torch')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, pci_tree(on_path, ["0x1ae0"])],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"


def test_absent_without_a_tpu_or_without_tpu_info(on_path: Path) -> None:
    assert TPUCollector.create(pci_tree(on_path, ["0x10de", "0x8086"])) is None
    standin(on_path, (FIXTURES / "static_v6e.txt").read_text())
    assert TPUCollector.create(pci_tree(on_path, ["0x10de"])) is None  # tool, no TPU
    assert TPUCollector.create(str(on_path / "nowhere")) is None
    os.remove(on_path / "bin" / "tpu-info")
    assert TPUCollector.create(pci_tree(on_path, ["0x1ae0"])) is None  # TPU, no tool
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SystemMonitor(interval=1.0).stop()  # the default set here: quietly no TPU


def test_failing_tool_warns_once_and_keeps_trying(on_path: Path) -> None:
    standin(on_path, "", rc=1)
    c = TPUCollector.create(pci_tree(on_path, ["0x1ae0"]))
    assert c is not None
    c.poll_interval = 0.05
    with pytest.warns(SystemMetricsWarning, match="exited with 1") as record:
        assert c.sample() == {}
        time.sleep(0.5)
        standin(on_path, (FIXTURES / "metric_v6e_8chips.txt").read_text())
        deadline = time.monotonic() + 10
        while not c.sample() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(c.sample()) == 24
    assert len([w for w in record if issubclass(w.category, SystemMetricsWarning)]) == 1
    c.close()


def test_close_kills_a_running_tpu_info(on_path: Path) -> None:
    standin(on_path, "", sleep=30)
    c = TPUCollector.create(pci_tree(on_path, ["0x1ae0"]))
    assert c is not None
    c.sample()
    deadline = time.monotonic() + 5
    while c._proc is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc = c._proc
    assert proc is not None
    started = time.monotonic()
    c.close()
    assert proc.wait(5) != 0 and time.monotonic() - started < 2
