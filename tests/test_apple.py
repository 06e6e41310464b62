"""Apple Silicon GPU collector. This machine is Linux on x86_64: the tests call ``create()``
as on macOS arm64 and put stand-in ``ioreg`` and ``macmon`` executables on PATH that print
captured output (``tests/fixtures/apple/``, sources in ``tests/fixtures/README.md``), so
the real child processes, reader thread and parsing run."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import AppleCollector
from sysmetrics.collectors.apple import MAX_POWER_W, parse_ioreg, parse_macmon
from tests.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "apple"
GIB = 1024**3

MACMON = """#!{python}
import os, sys, time
assert sys.argv[1:3] == ["pipe", "-i"] and int(sys.argv[3]) >= 100, sys.argv
open(os.environ["STANDIN_PIDFILE"], "w").write(str(os.getpid()))
line = open(os.environ["STANDIN_MACMON"]).read()
while True:
    sys.stdout.write(line)
    sys.stdout.flush()
    time.sleep(0.05)
"""


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``ioreg`` printing the M4 capture (exit code from ``tmp_path/rc``); no ``macmon`` yet."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "rc").write_text("0")
    executable(
        bin_dir / "ioreg",
        f"#!/bin/sh\n[ \"$*\" = '-r -d 1 -w 0 -c IOAccelerator' ] || exit 9\n"
        f"cat '{FIXTURES / 'ioreg_m4.txt'}'\nexit $(cat '{tmp_path / 'rc'}')\n",
    )
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]))
    monkeypatch.setenv("STANDIN_MACMON", str(FIXTURES / "macmon_pipe.jsonl"))
    monkeypatch.setenv("STANDIN_PIDFILE", str(tmp_path / "macmon.pid"))
    monkeypatch.setattr("psutil.virtual_memory", lambda: type("VM", (), {"total": 16 * GIB}))
    return tmp_path


def add_macmon(on_path: Path) -> None:
    executable(on_path / "bin" / "macmon", MACMON.format(python=sys.executable))


def test_ioreg_reads_device_utilization_and_in_use_memory() -> None:
    """The M4 entry also holds Tiler/Renderer Utilization (15) and an "In use system
    memory (driver)" of 0: neither may be read in place of the right key."""
    snap = parse_ioreg((FIXTURES / "ioreg_m4.txt").read_text(), 16 * GIB)
    assert snap == pytest.approx({
        "gpu.0.gpu": 17.0,
        "gpu.0.memoryAllocatedBytes": 430571520.0,
        "gpu.0.memoryAllocated": 430571520 / (16 * GIB) * 100,
    })  # fmt: skip
    assert parse_ioreg('+-o IOAccelerator\n  "PerformanceStatistics" = {"x"=1}\n', GIB) == {}


def test_macmon_line_gives_temperature_and_power() -> None:
    snap = parse_macmon((FIXTURES / "macmon_pipe.jsonl").read_text())
    assert snap == pytest.approx({
        "gpu.0.temp": 36.95167, "gpu.0.powerWatts": 0.017451683,
        "gpu.0.powerPercent": 0.017451683 / MAX_POWER_W * 100, "gpu.0.gpu": 2.1497859,
    })  # fmt: skip
    assert parse_macmon("macmon: warming up") == {} and parse_macmon("[1, 2]") == {}


def test_with_macmon_all_five_keys_and_the_child_stops_with_the_monitor(on_path: Path) -> None:
    add_macmon(on_path)
    c = AppleCollector.create(system="darwin", machine="arm64")
    assert c is not None and c.macmon is not None
    with SystemMonitor(interval=0.05, collectors=[c]) as m:
        snap = wait_for(lambda: (s := m.snapshot()) and "gpu.0.temp" in s and s)
    assert snap["gpu.0.gpu"] == 17.0  # ioreg's, preferred to macmon's 2.1
    assert snap["gpu.0.temp"] == pytest.approx(36.95167)
    assert snap["gpu.0.powerWatts"] == pytest.approx(0.017451683)
    assert snap["gpu.0.memoryAllocatedBytes"] == 430571520.0
    pid = int((on_path / "macmon.pid").read_text())  # the stand-in did run
    assert c.process is not None and c.process.pid == pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped by the monitor's stop()


def test_without_macmon_ioreg_keys_only(on_path: Path) -> None:
    c = AppleCollector(None, 16 * GIB, interval=0.05)
    with SystemMonitor(interval=0.05, collectors=[c]) as m:
        snap = wait_for(m.snapshot)
    assert set(snap) == {"gpu.0.gpu", "gpu.0.memoryAllocatedBytes", "gpu.0.memoryAllocated",
                         "gpu.0.memoryAllocatedBytes.max"}  # fmt: skip


def test_only_on_macos_arm64_and_only_with_a_gpu(on_path: Path) -> None:
    assert AppleCollector.create(system="linux", machine="x86_64") is None
    assert AppleCollector.create(system="darwin", machine="x86_64") is None  # Intel Mac
    (on_path / "rc").write_text("1")
    assert AppleCollector.create(system="darwin", machine="arm64") is None


def test_failing_ioreg_warns_once_and_keeps_trying(on_path: Path) -> None:
    c = AppleCollector(None, 16 * GIB, interval=0.02)
    (on_path / "rc").write_text("1")
    with pytest.warns(SystemMetricsWarning) as record:
        c.sample()  # starts the thread
        time.sleep(0.3)
        (on_path / "rc").write_text("0")
        wait_for(c.sample)
        c.close()
    warnings = [w for w in record if "ioreg exited with 1" in str(w.message)]
    assert len(warnings) == 1
