"""The one way collectors run a vendor tool (``collectors.base.ToolRunner``), and each
collector that runs one. The tools are real child processes: stand-in shell scripts that
record their pid (the pid of the ``sleep`` they become, or of the ``sleep`` they leave in
the background) and hang, as a stuck ``rocm-smi`` or ``tpu-info`` would; no hardware is
modelled, only a process that does not end by itself."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmetrics.collectors import AMDCollector, AppleCollector, TPUCollector, TrainiumCollector
from sysmetrics.collectors.base import BackgroundCollector, ToolClosedError, ToolRunner
from sysmetrics.host import default_source
from tests.polling import wait_for

GIB = 1024**3


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def script(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def hanging_tool(path: Path, pid_file: Path) -> str:
    """An executable at ``path`` that writes its pid to ``pid_file`` and then sleeps 60 s."""
    return script(path, f"echo $$ > '{pid_file}.tmp'\nmv '{pid_file}.tmp' '{pid_file}'\n"
                        "exec sleep 60\n")  # fmt: skip


@pytest.fixture
def kill_leftovers() -> Iterator[list[Path]]:
    """Pid files whose processes the test kills at its end, whatever happened."""
    pid_files: list[Path] = []
    yield pid_files
    for pid_file in pid_files:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def amd(tmp_path: Path, pid_file: Path) -> BackgroundCollector:
    return AMDCollector(hanging_tool(tmp_path / "bin" / "rocm-smi", pid_file))


def tpu(tmp_path: Path, pid_file: Path) -> BackgroundCollector:
    return TPUCollector(hanging_tool(tmp_path / "bin" / "tpu-info", pid_file))


def apple_ioreg(tmp_path: Path, pid_file: Path) -> BackgroundCollector:
    hanging_tool(tmp_path / "bin" / "ioreg", pid_file)  # run by name, from PATH
    return AppleCollector(None, 16 * GIB)


def apple_macmon(tmp_path: Path, pid_file: Path) -> BackgroundCollector:
    return AppleCollector(hanging_tool(tmp_path / "bin" / "macmon", pid_file), 16 * GIB)


def trainium(tmp_path: Path, pid_file: Path) -> BackgroundCollector:
    path = hanging_tool(tmp_path / "bin" / "neuron-monitor", pid_file)
    return TrainiumCollector(path, default_source(), os.getpid())


@pytest.mark.parametrize("make", [amd, tpu, apple_ioreg, apple_macmon, trainium])
def test_close_just_after_the_spawn_stops_the_tool(
    make: Callable[[Path, Path], BackgroundCollector],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kill_leftovers: list[Path],
) -> None:
    """Regression: ``close()`` arriving while the reader thread was between starting
    ``tpu-info`` and recording it found no child to kill, and the tool outlived the
    collector (here by 60 s; a real one until its 30 s timeout). Likewise Apple's ``ioreg``,
    which no ``close()`` stopped. ``close()`` is made to arrive exactly there: the first
    ``Popen`` of the test starts a thread calling ``close()`` and gives it 0.5 s before
    returning the child."""
    pid_file = tmp_path / "tool.pid"
    kill_leftovers.append(pid_file)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    collector = make(tmp_path, pid_file)
    closers: list[threading.Thread] = []
    real_popen = subprocess.Popen

    class SpawnThenClose(real_popen):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if not closers:
                closers.append(threading.Thread(target=collector.close))
                closers[0].start()
                closers[0].join(0.5)

    monkeypatch.setattr(subprocess, "Popen", SpawnThenClose)
    collector.sample()  # starts the reader thread, which starts the tool
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    wait_for(lambda: not alive(pid), timeout=3.0)  # less than any tool's own timeout
    wait_for(lambda: not closers[0].is_alive(), timeout=5.0)
    assert collector._thread is not None
    collector._thread.join(5.0)
    assert not collector._thread.is_alive()
    assert collector.sample() == {}


def test_run_past_its_deadline_kills_the_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleep.pid"
    tool = script(tmp_path / "tool", f"sleep 60 &\necho $! > '{pid_file}'\nwait\n")
    runner = ToolRunner()
    with pytest.raises(subprocess.TimeoutExpired):
        runner.run([tool], timeout=1.0)
    wait_for(lambda: not alive(int(pid_file.read_text())), timeout=3.0)  # the tool's child too
    assert runner.running is None


def test_run_returns_status_output_and_the_end_of_stderr(tmp_path: Path) -> None:
    tool = script(tmp_path / "tool", "printf 'out\\n\\377'\necho err >&2\nexit 3\n")
    assert tuple(ToolRunner().run([tool], timeout=10.0)) == (3, "out\n\ufffd", "err\n")


def test_output_over_the_bound_kills_the_run(tmp_path: Path) -> None:
    """A tool that never stops printing: killed at ``max_output`` bytes, not read whole."""
    tool = script(tmp_path / "tool", f"exec '{sys.executable}' -c 'while 1: print(\"x\" * 999)'\n")
    runner = ToolRunner(max_output=100_000)
    with pytest.raises(RuntimeError, match="printed over 100000 bytes"):
        runner.run([tool], timeout=30.0)
    assert runner.running is None


def test_a_streamed_line_over_the_bound_is_skipped(tmp_path: Path) -> None:
    tool = script(tmp_path / "tool", "echo first\nhead -c 5000 /dev/zero | tr '\\0' x\necho\n"
                                     "echo last\n")  # fmt: skip
    runner = ToolRunner(max_output=1000)
    assert list(runner.lines([tool])) == ["first\n", "last\n"]
    assert runner.streamed is not None and runner.streamed.returncode == 0
    assert runner.running is None


def test_closed_runner_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tool = script(tmp_path / "tool", f"touch '{marker}'\n")
    runner = ToolRunner()
    runner.close()
    with pytest.raises(ToolClosedError):
        runner.run([tool], timeout=10.0)
    assert list(runner.lines([tool])) == []
    assert not marker.exists()


def test_close_ends_a_stream_and_reaps_its_child(tmp_path: Path) -> None:
    tool = script(tmp_path / "tool", "while :; do echo tick; sleep 0.05; done\n")
    runner = ToolRunner()
    lines = runner.lines([tool])
    assert next(lines) == "tick\n"
    proc = runner.running
    assert proc is not None
    runner.close()
    assert list(lines) == []  # nothing more once closed
    assert proc.returncode == -signal.SIGKILL
    assert runner.running is None
