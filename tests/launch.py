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
from collections.abc import Callable
from pathlib import Path

import pytest

TIMEOUT = 300  # s a launch may take (a real 2-node job on a loaded 2-CPU machine)
ABORT_WAIT_S = 10  # s a hung launch has to print its stacks after SIGABRT
LAST_CHARS = 12_000  # of a hung launch's output, shown when its test fails


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


def run_all(
    commands: list[tuple[list[str], dict[str, str]]], timeout: float = TIMEOUT
) -> list[str]:
    """Run the launches side by side (each ``(argv, env added to os.environ)``), stdout and
    stderr together; fail with the output of one that failed, else return the outputs.

    Each launch waits at most ``timeout`` s. One still running then is stopped with all
    its processes (each launch is a process group of its own: killing a launcher alone
    left its ranks running): SIGABRT first, on which Python's ``faulthandler``, enabled
    in every process of the launch, prints each thread's stack, then SIGKILL; the test
    fails with the end of that output, which says where it hung.
    """
    procs = [
        subprocess.Popen(cmd, env={**os.environ, "PYTHONFAULTHANDLER": "1", **env},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
        for cmd, env in commands
    ]  # fmt: skip
    outputs = []
    try:
        for p in procs:
            try:
                outputs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGABRT)
                try:
                    out = p.communicate(timeout=ABORT_WAIT_S)[0]
                except subprocess.TimeoutExpired:
                    _signal_group(p, signal.SIGKILL)
                    out = p.communicate()[0]
                pytest.fail(f"{p.args} was still running after {timeout:.0f} s; stopped. "
                            f"The end of its output:\n{out[-LAST_CHARS:]}")  # fmt: skip
    finally:
        for p in procs:
            _signal_group(p, signal.SIGKILL)
            p.wait()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]
    return outputs


def _signal_group(p: subprocess.Popen[str], sig: signal.Signals) -> None:
    """Send ``sig`` to the launch's process group (its launcher, ranks and their
    children), which may already be gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, sig)
