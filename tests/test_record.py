"""``sysmetrics record -- COMMAND`` and ``sysmetrics.step``, with real child processes."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import sysmetrics
from sysmetrics import steps

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

WORKLOAD = """
import os, sys, time, sysmetrics
t, i = time.monotonic(), 0
while time.monotonic() - t < 1.0:  # one busy CPU for ~1 s, marking steps
    i += 1
    sysmetrics.step(i)
block = bytearray(300 * 2**20)
block[::4096] = b"1" * len(block[::4096])  # touch every page: ~300 MiB resident
with open(sys.argv[1], "wb") as f:  # 50 MiB written and synced
    for _ in range(50):
        f.write(os.urandom(2**20))
    f.flush()
    os.fsync(f.fileno())
sysmetrics.step(i + 1)
time.sleep(0.6)
"""

SLEEPER = """
import os, sys, time
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


def record(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """The recorder, as ``python -m sysmetrics record ARGS``."""
    cmd = [sys.executable, "-m", "sysmetrics", "record", *args]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, **kwargs)


def lines(path: Path) -> list[dict[str, Any]]:
    """The run file's samples (its ``run`` and ``end`` lines left out)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [x for x in records if "metrics" in x]


def test_records_the_commands_load_memory_and_steps(tmp_path: Path) -> None:
    run = tmp_path / "run.jsonl"
    out = tmp_path / "data.bin"
    proc = record(
        "--output", str(run), "--interval", "0.2", "--", sys.executable, "-c", WORKLOAD, str(out)
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    samples = lines(run)
    assert len(samples) >= 5
    assert max(s["metrics"].get("cpu", 0.0) for s in samples) > 30
    assert max(s["metrics"].get("proc.memory.rssMB", 0.0) for s in samples) >= 280
    marked = [s["step"] for s in samples if s["step"] is not None]
    assert len(set(marked)) >= 4  # steps read during the spin (a step every ~1 us), too
    assert marked == sorted(marked)
    assert all(s["step"] is None for s in samples[: len(samples) - len(marked)])
    assert out.stat().st_size == 50 * 2**20


@pytest.mark.parametrize("code", [0, 3])
def test_the_exit_code_passes_through(tmp_path: Path, code: int) -> None:
    proc = record(
        "--output", str(tmp_path / "r.jsonl"), "--", sys.executable, "-c", f"exit({code})"
    )
    proc.communicate(timeout=30)
    assert proc.returncode == code


def wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 20
    while not path.exists():
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.02)
    return int(path.read_text())


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGTERM, 128 + 15), (signal.SIGINT, 128 + 2)]
)
def test_signals_are_forwarded_and_nothing_is_left(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    pidfile = tmp_path / "pid"
    proc = record(
        "--output",
        str(tmp_path / "r.jsonl"),
        "--interval",
        "0.1",
        "--",
        sys.executable,
        "-c",
        SLEEPER,
        str(pidfile),
    )
    try:
        child = wait_for_pid(pidfile)
        proc.send_signal(signum)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == status  # Python re-raises an unhandled SIGINT on exit
    assert not Path(f"/proc/{child}").exists()


def test_a_signal_taken_while_stopped_is_forwarded_at_once(tmp_path: Path) -> None:
    # A signal sent while the recorder is stopped may be taken by any of its threads once
    # it continues; the main thread must still run the handler then, not at the end.
    pidfile = tmp_path / "pid"
    proc = record(
        "--output", str(tmp_path / "r.jsonl"), "--", sys.executable, "-c", SLEEPER, str(pidfile)
    )
    try:
        wait_for_pid(pidfile)
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while not stopped(proc.pid):
            assert time.monotonic() < deadline, "the recorder did not stop"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        proc.communicate(timeout=30)  # the command sleeps 60 s unless signalled
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    assert proc.returncode == 128 + 15


def stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped (state T in ``/proc``)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):
            states.append(stat.read_text().rpartition(")")[2].split()[0])
    return bool(states) and all(state == "T" for state in states)


# Writes a line to COUNT for each SIGINT it receives, says it is ready, and once
# interrupted takes 1.5 s to "save a checkpoint" (where a second SIGINT would land), then
# exits 7.
COUNTS_SIGINT = """
import os, signal, sys, time
count, ready = sys.argv[1], sys.argv[2]
def interrupted(signum, frame):
    with open(count, "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
signal.signal(signal.SIGINT, interrupted)
open(ready, "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(count) and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(1.5)
sys.exit(7)
"""

# Makes stdin (a pty's slave) the controlling terminal of this new session, then runs
# its arguments with Python: the terminal's foreground process group is this one.
IN_A_TERMINAL = """
import fcntl, os, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def test_ctrl_c_in_a_terminal_reaches_the_command_once(tmp_path: Path) -> None:
    # Ctrl-C signals the terminal's whole foreground group: recorder and command. The
    # recorder must not forward it again (a second KeyboardInterrupt in the command's
    # cleanup).
    count, ready = tmp_path / "count", tmp_path / "ready"
    master, slave = pty.openpty()
    output = bytearray()

    def drain() -> None:  # the terminal's output (echo, messages): never let writes block
        with contextlib.suppress(OSError):  # EIO once every slave end is closed
            while chunk := os.read(master, 4096):
                output.extend(chunk)

    run = str(tmp_path / "r.jsonl")
    recorder = ["-m", "sysmetrics", "record", "--output", run, "--interval", "0.1", "--"]
    command = [sys.executable, "-c", COUNTS_SIGINT, str(count), str(ready)]
    reader = threading.Thread(target=drain)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", IN_A_TERMINAL, *recorder, *command],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        slave = -1
        reader.start()
        try:
            deadline = time.monotonic() + 30
            while not ready.exists():
                assert time.monotonic() < deadline, f"the command did not start: {output!r}"
                assert proc.poll() is None, f"the recorder exited: {output!r}"
                time.sleep(0.02)
            # The recorder is held stopped until the command has taken the terminal's
            # SIGINT: a second one sent while the first is still pending would merge with
            # it. (This is the usual order anyway: the recorder takes a moment to react.)
            proc.send_signal(signal.SIGSTOP)
            while not stopped(proc.pid):
                assert time.monotonic() < deadline + 30, "the recorder did not stop"
                time.sleep(0.01)
            os.write(master, b"\x03")  # Ctrl-C (ISIG is on)
            while not count.exists():
                assert time.monotonic() < deadline + 30, f"no SIGINT: {output!r}"
                time.sleep(0.01)
            proc.send_signal(signal.SIGCONT)
            proc.wait(timeout=30)
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
        reader.join(timeout=30)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    assert count.read_text().splitlines() == ["SIGINT"], output
    assert proc.returncode == 7, output


def test_a_missing_command_exits_127(tmp_path: Path) -> None:
    proc = record("--output", str(tmp_path / "r.jsonl"), "--", "no-such-command-sysmetrics")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert "sysmetrics record: no-such-command-sysmetrics: command not found" in err


def test_a_bad_option_exits_2_before_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    proc = record(
        "--output",
        str(tmp_path / "r.jsonl"),
        "--interval",
        "0",
        "--",
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w')",
    )
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "sysmetrics record: error: interval=0 is invalid: it must be a number of seconds" in err
    assert not marker.exists()


def test_step_without_the_recorder_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(steps.ENV, raising=False)
    monkeypatch.setattr(steps, "_map", None)
    monkeypatch.setattr(steps, "_tried", False)
    sysmetrics.step(5)
    assert steps._tried and steps._map is None


def test_step_writes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "step"
    path.write_bytes(b" " * steps.WIDTH)
    monkeypatch.setenv(steps.ENV, str(path))
    monkeypatch.setattr(steps, "_map", None)
    monkeypatch.setattr(steps, "_tried", False)
    sysmetrics.step(123456)
    sysmetrics.step(7)
    assert path.read_bytes() == b"7".ljust(steps.WIDTH)
    # A step too long for the file is skipped, never an error in the training loop.
    sysmetrics.step(10**30)
    sysmetrics.step("é" * 15)  # type: ignore[arg-type]
    sysmetrics.step(object())  # type: ignore[arg-type]
    assert path.read_bytes() == b"7".ljust(steps.WIDTH)
    assert steps._map is not None
    steps._map.close()


@pytest.mark.parametrize(
    ("text", "mode", "message"),
    [("echo hi\n", 0o755, "Exec format error"), ("#!/bin/sh\n", 0o644, "Permission denied")],
    ids=["no-shebang", "not-executable"],
)
def test_a_command_that_cannot_be_executed_exits_126(
    tmp_path: Path, text: str, mode: int, message: str
) -> None:
    script = tmp_path / "x.sh"  # no shebang: execve() fails with ENOEXEC
    script.write_text(text)
    script.chmod(mode)
    proc = record("--output", str(tmp_path / "r.jsonl"), "--", str(script))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 126, err
    assert err == f"sysmetrics record: {script}: {message}\n"


def run_record(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``python -m sysmetrics ARGS`` run to its end, its output captured."""
    cmd = [sys.executable, "-m", "sysmetrics", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kwargs)


@pytest.mark.parametrize("port", ["70000", "-1", "x", "1.5"])
def test_a_bad_prometheus_port_exits_2_without_a_run_file(tmp_path: Path, port: str) -> None:
    run = tmp_path / "r.jsonl"
    proc = run_record("record", "--output", str(run), "--prometheus-port", port, "--", "true")
    assert not run.exists()
    assert proc.returncode == 2
    assert (
        f"sysmetrics record: error: argument --prometheus-port: {port} is invalid: "
        "use 0 to 65535 (0 picks a free port)\n"
    ) in proc.stderr


def test_a_busy_prometheus_port_exits_2_without_a_run_file(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    run, marker = tmp_path / "r.jsonl", tmp_path / "started"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_record(
            "record",
            "--output",
            str(run),
            "--prometheus-port",
            str(port),
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        )
    assert not run.exists()
    assert not marker.exists()
    assert proc.returncode == 2
    assert (
        f"sysmetrics record: error: argument --prometheus-port: cannot listen on "
        f"127.0.0.1:{port}: Address already in use (use another port, or 0 for a free one)\n"
    ) in proc.stderr


def test_a_bad_interval_reads_well(tmp_path: Path) -> None:
    proc = run_record("record", "--output", str(tmp_path / "r.jsonl"), "--interval", "abc")
    assert proc.returncode == 2
    assert (
        "sysmetrics record: error: argument --interval: 'abc' is invalid: it must be a "
        "number of seconds\n"
    ) in proc.stderr


def test_version() -> None:
    proc = run_record("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"sysmetrics {importlib.metadata.version('sysmetrics')}\n"


def test_help_shows_the_defaults() -> None:
    proc = run_record("record", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # as one line, wherever argparse wrapped it
    assert "--output PATH the run file, created or appended to (default: sysmetrics-run." in text
    assert "(default: 1.0)" in text
    assert "(repeatable; default: /)" in text
    assert "--prometheus-port PORT" in text
    assert "None" not in text


def test_disk_paths_are_made_absolute(tmp_path: Path) -> None:
    run = tmp_path / "r.jsonl"
    args = ["--output", str(run), "--interval", "0.1", "--disk-path", "."]
    proc = record(*args, "--", sys.executable, "-c", "pass", cwd=tmp_path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    keys = {key for sample in lines(run) for key in sample["metrics"]}
    assert f"disk.{os.path.abspath(tmp_path)}.usageGB" in keys
    assert "disk...usageGB" not in keys


def test_system_metrics_warnings_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: the scrape is refused
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/metrics"
    proc = run_record(
        "record",
        "--output",
        str(tmp_path / "r.jsonl"),
        "--interval",
        "0.1",
        "--open-metrics",
        f"name={url}",
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(1)",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith(
        f"sysmetrics: warning: OpenMetrics endpoint 'name' ({url}) failed, retrying every"
    )
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


def test_main_restores_the_warning_hook(
    capsys: pytest.CaptureFixture[str], recwarn: pytest.WarningsRecorder
) -> None:
    from sysmetrics import cli

    previous = warnings.showwarning
    with pytest.raises(SystemExit):
        cli.main(["record", "--interval", "abc"])
    assert warnings.showwarning is previous
    capsys.readouterr()
    with cli._short_warnings():
        warnings.warn("sysmetrics: short", sysmetrics.SystemMetricsWarning, stacklevel=1)
        warnings.warn("left to Python", UserWarning, stacklevel=1)
    assert warnings.showwarning is previous
    assert capsys.readouterr().err == "sysmetrics: warning: short\n"
    # The other warnings go to the hook that was there (here pytest's recorder).
    assert [str(w.message) for w in recwarn] == ["left to Python"]
