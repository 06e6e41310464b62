"""The recorded command as a child process: its process group, signals, waiting, how it ended.

Used by ``sysmetrics record`` (:mod:`sysmetrics.cli`). The command gets each SIGINT once:
without a terminal it runs in a process group of its own (:func:`_own_group`); with one it
shares the recorder's group (:func:`_has_terminal`, :func:`_in_foreground`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any


def _in_foreground(pid: int) -> bool:
    """Whether ``pid``'s process group is the foreground one of the controlling terminal.

    The terminal is found through fd 0, 1 or 2, else ``/dev/tty``. Any error (no terminal,
    the process gone, a platform without process groups) means False.
    """
    if sys.platform == "win32":
        return False
    try:
        group = os.getpgid(pid)
    except OSError:
        return False
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):  # not a terminal, or not the controlling one
            return os.tcgetpgrp(fd) == group
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == group
    except OSError:
        return False
    finally:
        os.close(fd)


def _has_terminal() -> bool:
    """Whether this process has a controlling terminal (``/dev/tty`` opens)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # ENXIO: no controlling terminal
        return False
    os.close(fd)
    return True


# Why the command gets its own process group only without a terminal.
#
# A signal sent to a process group reaches every process in it, and the recorder cannot
# tell a SIGINT sent to its group from one sent to it alone (``kill(-pgid)`` and
# ``kill(pid)`` give the same ``siginfo``: ``SI_USER`` and the sender's pid). So either the
# command is in the recorder's group and the recorder must not forward a group's SIGINT (but
# then one sent to the recorder alone is lost), or it is in a group of its own and the
# recorder forwards every one (the group's copy never reaches it). The second gives exactly
# one copy for ``kill -INT -PGID`` and ``kill -INT RECORDER_PID`` alike, and is used
# without a terminal. With a terminal, the command must stay in the terminal's foreground
# group to read it and for Ctrl-C and Ctrl-Z to work (a group of its own would need the
# recorder to do a shell's job control), so it shares the recorder's group there, and a
# SIGINT is not forwarded while the command is in the foreground: Ctrl-C reached it.

PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent ends


def _own_group() -> Callable[[], None]:
    """What the command runs before ``exec`` without a terminal (see the comment above).

    It makes a process group of its own, so that a signal sent to the recorder's group
    reaches it only as the recorder forwards it: exactly once. On Linux it also asks for
    SIGKILL when the recorder ends, so that a SIGKILL sent to the recorder's group (a
    batch system's last resort) still ends the command, as it did in the same group.
    """
    parent = os.getpid()
    prctl: Any = None
    if sys.platform.startswith("linux"):  # resolved here: the child only calls it
        with contextlib.suppress(OSError, AttributeError):
            prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:  # the recorder ended before the request
                os.kill(os.getpid(), signal.SIGKILL)

    return setup


def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _ending(child: subprocess.Popen[bytes]) -> dict[str, Any]:
    """How ``child`` (exited) ended: ``{"exit_status": n}`` or ``{"signal": n, "signal_name"}``.

    Read without reaping it where the platform can (``waitid`` with ``WNOWAIT``).
    """
    code = child.returncode
    if code is None and hasattr(os, "waitid"):
        with contextlib.suppress(OSError):  # reaped already, or no WNOWAIT
            info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
            if info is not None and info.si_code == os.CLD_EXITED:
                code = info.si_status
            elif info is not None and info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
                code = -info.si_status
    if code is None:
        return {}
    if code >= 0:
        return {"exit_status": code}
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return {"signal": -code, "signal_name": name}


def _wait_exited(child: subprocess.Popen[bytes]) -> None:
    """Wait for ``child`` to exit, leaving it unreaped where the platform can.

    Its process stays readable (a zombie) for the monitor's last sample; the caller reaps it.

    Where Linux has pidfds, wait in ``select()`` on the child's pidfd and on a wakeup fd
    instead: any of the recorder's threads may take a signal, but Python runs the handler
    in the main thread only, once back in Python, which a ``waitid()`` would delay until
    the command exits (a SIGINT that came while the recorder was stopped, for one).
    """
    with contextlib.suppress(AttributeError, OSError):  # no pidfd: wait in waitid()
        pidfd = os.pidfd_open(child.pid)
        try:
            _select_exited(pidfd)
            return
        finally:
            os.close(pidfd)
    if hasattr(os, "waitid"):
        with contextlib.suppress(ChildProcessError):  # reaped already
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    else:
        child.wait()


def _select_exited(pidfd: int) -> None:
    """Wait until ``pidfd`` is readable (its process exited), running signal handlers."""
    wake, woken = os.pipe()
    try:
        os.set_blocking(wake, False)
        os.set_blocking(woken, False)
        previous = signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
        try:
            while pidfd not in select.select([pidfd, wake], [], [])[0]:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 512)  # a signal came: its handler runs on the way back
        finally:
            signal.set_wakeup_fd(previous)
    finally:
        os.close(wake)
        os.close(woken)
