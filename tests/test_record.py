"""``sysmetrics record -- COMMAND`` and ``sysmetrics.step``, with real child processes."""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest

import sysmetrics
from sysmetrics import _optional, stepfile

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


@pytest.mark.serial
@pytest.mark.kernel
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


def test_the_recorders_step_file_takes_the_commands_steps(tmp_path: Path) -> None:
    """The real path: the recorder makes the step file, the command's ``step()`` accepts
    it (no warning) and writes, and the samples carry the steps."""
    run = tmp_path / "run.jsonl"
    code = (
        "import time, warnings, sysmetrics\n"
        "warnings.simplefilter('error')\n"
        "for i in (5, 6, 7):\n"
        "    sysmetrics.step(i)\n"
        "    time.sleep(0.3)\n"
    )
    proc = record("-o", str(run), "--interval", "0.1", "--", sys.executable, "-c", code)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    marked = [s["step"] for s in lines(run) if s["step"] is not None]
    assert set(marked) == {5, 6, 7} and marked == sorted(marked), marked


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


def counted_sigints(tmp_path: Path, send: Any) -> tuple[list[str], int]:
    """The SIGINTs a command counts after ``send(recorder)``, and the recorder's status.

    The recorder runs as a batch system or CI runner starts a job: in a new session (a
    process group of its own, no terminal).
    """
    count, ready = tmp_path / "count", tmp_path / "ready"
    proc = record(
        "--output",
        str(tmp_path / "r.jsonl"),
        "--interval",
        "0.1",
        "--",
        sys.executable,
        "-c",
        COUNTS_SIGINT,
        str(count),
        str(ready),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline, "the command did not start"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        send(proc)
        proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return (count.read_text().splitlines() if count.exists() else []), proc.returncode


def sigint_to_the_group(proc: subprocess.Popen[str], count: Path) -> None:
    """``kill -INT -PGID`` of the recorder's group, the recorder reacting last.

    The recorder is held stopped until the command has taken the copy the group's signal
    gave it directly, where it shares the recorder's group: a forwarded copy sent while
    that one is still pending would merge with it (which hid the fault in some runs).
    """
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 30
    while not stopped(proc.pid):
        assert time.monotonic() < deadline, "the recorder did not stop"
        time.sleep(0.01)
    try:
        (command,) = psutil.Process(proc.pid).children()
        os.killpg(proc.pid, signal.SIGINT)
        if os.getpgid(command.pid) == proc.pid:  # the group's signal reached it
            while not count.exists():
                assert time.monotonic() < deadline, "no SIGINT"
                time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("run", range(5))
def test_a_sigint_to_the_process_group_reaches_the_command_once(tmp_path: Path, run: int) -> None:
    """Regression: ``kill -INT -PGID`` without a terminal (how batch systems and CI cancel
    a job) reached the command twice, the group's copy and the recorder's forwarded one: a
    second KeyboardInterrupt in its cleanup (3 runs in 5). Five runs, five times once."""
    count = tmp_path / "count"
    counted, status = counted_sigints(tmp_path, lambda p: sigint_to_the_group(p, count))
    assert counted == ["SIGINT"]
    assert status == 7


@pytest.mark.parametrize("run", range(3))
def test_a_sigint_to_the_process_group_unheld_reaches_the_command_once(
    tmp_path: Path, run: int
) -> None:
    """As above, the recorder running freely (the order left to the scheduler)."""
    counted, status = counted_sigints(tmp_path, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert counted == ["SIGINT"]
    assert status == 7


def test_a_sigint_to_the_recorder_alone_reaches_the_command_once(tmp_path: Path) -> None:
    counted, status = counted_sigints(tmp_path, lambda p: p.send_signal(signal.SIGINT))
    assert counted == ["SIGINT"]
    assert status == 7


@pytest.mark.parametrize("group", [True, False], ids=["group", "recorder"])
def test_a_sigkill_to_the_recorder_ends_the_command(tmp_path: Path, group: bool) -> None:
    """Without a terminal the command has its own process group; a SIGKILL to the
    recorder's group (a batch system's last resort) or to the recorder still ends it.
    Nothing removes the step file's folder then (docs/record-report.md): the test does."""
    pidfile = tmp_path / "pid"
    step_folder = None
    proc = record(
        "--output",
        str(tmp_path / "r.jsonl"),
        "--",
        sys.executable,
        "-c",
        SLEEPER,
        str(pidfile),
        start_new_session=True,
    )
    try:
        child = wait_for_pid(pidfile)
        environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        (named,) = [v for v in environ if v.startswith(b"SYSMETRICS_STEP_FILE=")]
        step_folder = Path(os.fsdecode(named.partition(b"=")[2])).parent
        assert os.getpgid(child) != os.getpgid(proc.pid)
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child}").exists() and not zombie(child):
            assert time.monotonic() < deadline, "the command outlived the recorder"
            time.sleep(0.02)
        assert step_folder.is_dir()  # left, as the docs say
    finally:
        proc.kill()
        proc.wait()
        if step_folder is not None and step_folder.name.startswith("sysmetrics-"):
            shutil.rmtree(step_folder, ignore_errors=True)


def zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    return False


def test_a_missing_command_exits_127_without_a_run_file(tmp_path: Path) -> None:
    """Regression: an empty run file was left behind when the command was not found."""
    run = tmp_path / "r.jsonl"
    proc = record("--output", str(run), "--", "no-such-command-sysmetrics")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert err == "sysmetrics record: no-such-command-sysmetrics: command not found\n"
    assert not run.exists()
    # An existing run file is left as it was: nothing appended, no "appending" line.
    run.write_text('{"earlier": 1}\n')
    proc = record("--output", str(run), "--", "no-such-command-sysmetrics")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert err == "sysmetrics record: no-such-command-sysmetrics: command not found\n"
    assert run.read_text() == '{"earlier": 1}\n'


def test_the_run_files_folders_are_made_as_the_loggers_make_theirs(tmp_path: Path) -> None:
    """Regression (issue 33): ``--output out/x.jsonl`` with no ``out/`` exited 2 (``cannot
    write 'out/x.jsonl': No such file or directory``), where the frameworks' loggers make
    their folders; and a command that cannot start leaves no folder it made behind."""
    command = ["--interval", "0.1", "--", sys.executable, "-c", "pass"]
    made = run_record("record", "--output", "out/deeper/x.jsonl", *command, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "out" / "deeper" / "x.jsonl").read_text()
    records = [json.loads(line) for line in text.splitlines()]
    assert "run" in records[0] and records[-1]["end"]["exit_status"] == 0
    gone = run_record("record", "--output", "new/sub/x.jsonl", "--", "no-such-command-sysmetrics",
                      cwd=tmp_path)  # fmt: skip
    assert gone.returncode == 127, gone.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # new/sub/ made and removed
    (tmp_path / "afile").write_text("")
    bad = run_record("record", "--output", "afile/x.jsonl", *command, cwd=tmp_path)
    assert bad.returncode == 2
    assert "sysmetrics record: error: argument --output: cannot write 'afile/x.jsonl': " in (
        bad.stderr
    )


def test_appending_to_an_existing_run_file_is_said(tmp_path: Path) -> None:
    run = tmp_path / "r.jsonl"
    command = ["--interval", "0.1", "--", sys.executable, "-c", "pass"]
    first = run_record("record", "-o", str(run), *command)  # -o, as report takes it
    assert first.returncode == 0, first.stderr
    assert "appending" not in first.stderr
    n = len(lines(run))
    second = run_record("record", "--output", str(run), *command)
    assert second.returncode == 0, second.stderr
    assert f"sysmetrics record: appending to the existing run file {run}\n" in second.stderr
    assert len(lines(run)) > n


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
    assert (
        "sysmetrics record: error: argument --interval: 0 is invalid: it must be a number of "
        "seconds between 0.01 and 3600\n"
    ) in err
    assert not marker.exists()
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--disk-path", "/no/such/dir"],
            "argument --disk-path: '/no/such/dir' does not exist: each entry must be an "
            "existing path whose filesystem to watch",
        ),
        (
            ["--open-metrics", "gpu=ftp://h/m"],
            "argument --open-metrics: gpu='ftp://h/m' is invalid: use an http:// or https:// URL",
        ),
        (
            ["--open-metrics", "a b=http://h/m"],
            "argument --open-metrics: name 'a b' is invalid: use letters, digits, _ and -",
        ),
        (
            ["--output", "/dev/null/r.jsonl"],  # a missing folder is made (issue 33)
            "argument --output: cannot write '/dev/null/r.jsonl': Not a directory",
        ),
    ],
    ids=["disk-path", "open-metrics-url", "open-metrics-name", "output"],
)
def test_errors_name_the_flag_typed(tmp_path: Path, args: list[str], message: str) -> None:
    """Regression: the monitor's messages named its options (``disk_paths contains ...``),
    which a user of the command line never typed."""
    proc = run_record("record", "-o", str(tmp_path / "r.jsonl"), *args, "--", "true")
    assert proc.returncode == 2
    assert proc.stderr.endswith(f"sysmetrics record: error: {message}\n"), proc.stderr
    assert "disk_paths" not in proc.stderr and "open_metrics" not in proc.stderr


@pytest.mark.parametrize(
    ("flag", "suggestion"),
    [("--outptu", "--output"), ("--disk-paths", "--disk-path"), ("--gpu_ids=0", "--gpu-ids")],
)
def test_an_unknown_flag_gets_records_usage_and_a_suggestion(
    tmp_path: Path, flag: str, suggestion: str
) -> None:
    """Regression: the top level's usage (``sysmetrics [-h] [--version] {record,report}``)
    and no hint."""
    run = tmp_path / "r.jsonl"
    proc = run_record("record", "-o", str(run), flag, "--", "true")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: sysmetrics record [-h] [-o PATH]"), proc.stderr
    assert proc.stderr.endswith(
        f"sysmetrics record: error: unrecognized arguments: {flag} (did you mean {suggestion}?)\n"
    )
    assert not run.exists()
    far = run_record("record", "-o", str(run), "--bogus", "--", "true")
    assert far.stderr.endswith("sysmetrics record: error: unrecognized arguments: --bogus\n")


def test_step_without_the_recorder_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(stepfile.ENV, raising=False)
    monkeypatch.setattr(stepfile, "_fd", None)
    monkeypatch.setattr(stepfile, "_tried", False)
    sysmetrics.step(5)
    assert stepfile._tried and stepfile._fd is None


def fresh_step(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """``step()`` as in a new process whose ``SYSMETRICS_STEP_FILE`` names ``path``."""
    monkeypatch.setenv(stepfile.ENV, str(path))
    monkeypatch.setattr(stepfile, "_fd", None)
    monkeypatch.setattr(stepfile, "_tried", False)
    monkeypatch.setattr(stepfile, "_timing", None)
    monkeypatch.setattr(stepfile, "_timing_tried", False)


def test_step_writes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = Path(stepfile.create(str(private)))
    fresh_step(monkeypatch, path)
    sysmetrics.step(123456)
    sysmetrics.step(7)
    empty = bytes(stepfile.SIZE - stepfile.TIMING)  # no timing: no loop wrapped in batches()
    rest = b" " * (stepfile.TIMING - len(stepfile.MAGIC) - stepfile.WIDTH) + empty
    assert path.read_bytes() == stepfile.MAGIC + b"7".ljust(stepfile.WIDTH) + rest
    # A step too long for the file is skipped, never an error in the training loop.
    sysmetrics.step(10**30)
    sysmetrics.step("é" * 15)  # type: ignore[arg-type]
    sysmetrics.step(object())  # type: ignore[arg-type]
    assert path.read_bytes() == stepfile.MAGIC + b"7".ljust(stepfile.WIDTH) + rest
    assert stepfile._fd is not None
    os.close(stepfile._fd)


def step_file_copy(directory: Path, mode: int = 0o700) -> Path:
    """A file exactly like the recorder's step file, in ``directory`` (made with ``mode``)."""
    directory.mkdir(mode=mode)
    directory.chmod(mode)  # whatever the umask
    return Path(stepfile.create(str(directory)))


def step_file_bytes() -> bytes:
    """The bytes of a new step file, as the recorder writes them."""
    gap = stepfile.TIMING - len(stepfile.MAGIC) - stepfile.WIDTH
    return stepfile.MAGIC + b" " * (stepfile.WIDTH + gap) + bytes(stepfile.SIZE - stepfile.TIMING)


UNRELATED = {
    # The case: an ordinary file of 20 bytes, or longer.
    "a-file-of-20-bytes": lambda d: (d / "notes.txt", b"precious data here!\n"),
    "a-longer-file": lambda d: (d / "model.ckpt", os.urandom(4096)),
    # As long as a step file, but without its header.
    "the-step-file-size": lambda d: (d / "same-size", b"x" * stepfile.SIZE),
    # A step file's bytes exactly, but in a directory others may enter (not the recorder's).
    "in-a-shared-directory": lambda d: (step_file_copy(d / "shared", 0o755), None),
    # A step file with one byte more.
    "one-byte-longer": lambda d: (d / "longer", step_file_bytes() + b" "),
    # A format 1 step file's header at format 2's size, and the other way round.
    "old-header-new-size": lambda d: (d / "old", stepfile.MAGIC_1 + step_file_bytes()[23:]),
    "new-header-old-size": lambda d: (d / "new", (stepfile.MAGIC + b" " * 40)[: stepfile.SIZE_1]),
}


@pytest.mark.parametrize("kind", list(UNRELATED))
def test_step_never_writes_a_file_the_recorder_did_not_make(tmp_path: Path, kind: str) -> None:
    """Regression: ``sysmetrics.step(7)`` overwrote the first 20 bytes of any file named
    by ``SYSMETRICS_STEP_FILE``. Run as a user would, in a new interpreter."""
    path, content = UNRELATED[kind](tmp_path)
    if content is not None:
        path.write_bytes(content)
    before = path.read_bytes()
    code = "import sysmetrics\nfor i in range(3):\n    sysmetrics.step(7)\nprint('done')"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, stepfile.ENV: str(path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr
    assert path.read_bytes() == before
    # One warning, naming the variable and the file; the loop goes on.
    assert proc.stderr.count("SystemMetricsWarning") == 1, proc.stderr
    assert f"{stepfile.ENV}={str(path)!r} names no step file made by sysmetrics record" in (
        proc.stderr
    )


@pytest.mark.parametrize("kind", ["fifo", "missing", "symlink"])
def test_step_leaves_other_kinds_of_path_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A FIFO (an open that could block), a missing file, a link to a real step file."""
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(step_file_copy(tmp_path / "private"))
    fresh_step(monkeypatch, path)
    with pytest.warns(sysmetrics.SystemMetricsWarning, match="names no step file"):
        sysmetrics.step(7)
    sysmetrics.step(8)  # warned once: later calls return at once
    assert stepfile._tried and stepfile._fd is None
    if kind == "symlink":
        assert path.read_bytes() == step_file_bytes()


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
    assert proc.stdout == f"sysmetrics {importlib.metadata.version(_optional.DIST)}\n"


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


FAKE_ROCM_SMI = """#!/bin/sh
echo run >> "{count}"
echo "no GPU here"
"""


def test_the_monitor_is_built_once(tmp_path: Path) -> None:
    """Regression: record built its monitor twice (once to check the options), which ran
    the vendor tools' probes twice: ``rocm-smi`` ran twice on an AMD host.

    A ``rocm-smi`` on PATH that counts its runs and reports no GPU (the collector then
    gives up after its one probe, so each build runs it once; this machine has no amdgpu
    card in sysfs, so the tool is what the AMD collector tries).
    """
    drivers = glob.glob("/sys/class/drm/card*/device/driver")
    if "amdgpu" in {os.path.basename(os.path.realpath(p)) for p in drivers}:
        pytest.skip("this machine has an amdgpu card: the AMD collector reads sysfs, not rocm-smi")
    bin_dir, count = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()
    tool = bin_dir / "rocm-smi"
    tool.write_text(FAKE_ROCM_SMI.format(count=count))
    tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = run_record("record", "-o", str(tmp_path / "r.jsonl"), "--", "true", env=env)
    assert proc.returncode == 0, proc.stderr
    assert count.read_text().splitlines() == ["run"]


def test_a_gpu_only_nvml_can_check_exits_2_before_the_command_starts(tmp_path: Path) -> None:
    """``--gpu-ids`` naming a GPU NVML lacks (only NVML can tell): exit 2 with the flag
    named, no run file, and the command never started (a training command that started
    and was killed has already had its side effects)."""
    pytest.importorskip("pynvml")
    run, started = tmp_path / "r.jsonl", tmp_path / "started"
    proc = run_record("record", "-o", str(run), "--gpu-ids", "99", "--", "touch", str(started))
    assert proc.returncode == 2, proc.stderr
    assert "sysmetrics record: error: argument --gpu-ids: 99 cannot be watched: " in proc.stderr
    assert not run.exists()
    assert not started.exists(), "the command ran before its options were checked"
