"""Launching the tests' real multi-process jobs: a free port, several launches side by side.

One home for what test_distributed, test_straggler, test_hang and the Prometheus server
helper each defined alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

TIMEOUT = 300  # s a launch may take (a real 2-node job on a loaded 2-CPU machine)
ABORT_WAIT_S = 10  # s a hung launch has to print its stacks after SIGABRT
LAST_CHARS = 12_000  # of a hung launch's output, shown when its test fails
LAUNCH_MARK = "SYSMETRICS_TEST_LAUNCH"  # in the environment of every process of a launch


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name`` that ``make(folder)`` filled, made once in this test session.

    Under pytest-xdist each worker has its own session fixtures: the first to ask makes
    the folder in the session's temporary folder (its workers' parent) while the others
    wait on a file lock, then read the same folder. A ``make`` that failed is tried again
    by the next to ask (each then fails alike).
    """
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, shared by its workers
    folder = base / name
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / ".made"
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


def marked(name: str, token: str) -> list[int]:
    """The pids of the live processes (of any parent: orphans too) whose environment holds
    ``name=token``, this one left out; none where there is no ``/proc``."""
    tag = f"{name}={token}".encode() + b"\0"
    found = []
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != str(os.getpid()):
                with contextlib.suppress(OSError):  # gone, or another user's
                    if tag in (entry / "environ").read_bytes() and not zombie(int(entry.name)):
                        found.append(int(entry.name))
    return found


def zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and awaits its reaper (False if it is gone)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    return False


def run_all(
    commands: list[tuple[list[str], dict[str, str]]], timeout: float = TIMEOUT
) -> list[str]:
    """Run the launches side by side (each ``(argv, env added to os.environ)``), stdout and
    stderr together; fail with the output of one that failed, else return the outputs.

    Each launch waits at most ``timeout`` s. One still running then is stopped with every
    process it started, found by a mark in their environment (``LAUNCH_MARK``): torchrun
    starts each rank in a session of its own, and a rank outlives a launcher killed
    alone. They get SIGABRT, on which Python's ``faulthandler``, enabled in every process
    of the launch, prints each thread's stack, then SIGKILL after ``ABORT_WAIT_S`` s; the
    test fails with the end of that output, which says where it hung. Whatever a launch
    left running when it ended is killed too.
    """
    tokens = [f"{os.getpid()}-{time.monotonic_ns()}-{i}" for i in range(len(commands))]
    procs = [
        subprocess.Popen(cmd, env={**os.environ, "PYTHONFAULTHANDLER": "1",
                                   LAUNCH_MARK: token, **env},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for (cmd, env), token in zip(commands, tokens)
    ]  # fmt: skip
    outputs = []
    try:
        for p, token in zip(procs, tokens):
            try:
                outputs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                out = _stop(p, token)
                pytest.fail(f"{p.args} was still running after {timeout:.0f} s; stopped. "
                            f"The end of its output:\n{out[-LAST_CHARS:]}")  # fmt: skip
    finally:
        for p, token in zip(procs, tokens):
            ended = p.poll() is not None  # reaped: its pid may be another's now
            _signal([*([] if ended else [p.pid]), *marked(LAUNCH_MARK, token)], signal.SIGKILL)
            p.wait()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]
    return outputs


def _stop(p: subprocess.Popen[str], token: str) -> str:
    """Stop a hung launch: SIGABRT to its processes, SIGKILL to those left after
    ``ABORT_WAIT_S`` s; its output (a note where it cannot be read to its end)."""
    _signal([p.pid, *marked(LAUNCH_MARK, token)], signal.SIGABRT)
    deadline = time.monotonic() + ABORT_WAIT_S
    while marked(LAUNCH_MARK, token) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal([p.pid, *marked(LAUNCH_MARK, token)], signal.SIGKILL)
    try:
        return str(p.communicate(timeout=ABORT_WAIT_S)[0])
    except subprocess.TimeoutExpired:  # a process without the mark holds the pipe
        return "(its output cannot be read: a process it started without its mark holds it)"


def _signal(pids: list[int], sig: signal.Signals) -> None:
    """Send ``sig`` to each of ``pids`` that is still there."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
