"""Step markers for a program run under ``sysmetrics record``.

``sysmetrics record`` creates a step file with :func:`create` in a private directory of
its own (``mkdtemp``: mode 0700) and names it in the ``SYSMETRICS_STEP_FILE`` environment
variable of the command it runs; :func:`step` writes the current step into it, and the
recorder reads it at every sample.

The file is :data:`MAGIC` followed by :data:`WIDTH` bytes holding the step, padded with
spaces. :func:`step` writes only into such a file: a regular file (not a link) of exactly
:data:`SIZE` bytes that starts with :data:`MAGIC`, owned by this user, in a directory
owned by this user that no one else may enter. Anything else named by the variable (an
unrelated file, a FIFO, a device) is left untouched, with one
:class:`~sysmetrics.SystemMetricsWarning`. Outside ``sysmetrics record`` (the variable
unset) :func:`step` does nothing.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import threading
import warnings
from typing import TYPE_CHECKING

from sysmetrics.errors import SystemMetricsWarning

if TYPE_CHECKING:
    from sysmetrics.monitor import SystemMonitor

ENV = "SYSMETRICS_STEP_FILE"
MAGIC = b"sysmetrics step file 1\n"  # the first bytes of every step file
WIDTH = 20  # bytes of the step; each step overwrites them all, padded with spaces
SIZE = len(MAGIC) + WIDTH  # bytes of a step file, exactly
STEP_POLL = 0.1  # longest seconds between two reads of the step file
STEP_TRIES = 20  # reads of the step file at most, until two in a row agree

_map: mmap.mmap | None = None  # the step file, mapped, once opened
_tried = False  # whether opening it was tried (it is tried once)


def create(directory: str) -> str:
    """Create the step file in ``directory`` (private to this user) and return its path.

    Raises:
        OSError: the file cannot be created (it exists already, among others).

    """
    path = os.path.join(directory, "step")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, MAGIC + b" " * WIDTH)
    finally:
        os.close(fd)
    return path


def refusal(path: str, fd: int) -> str | None:
    """Why the open file ``fd`` (at ``path``) is not a step file, or None where it is one."""
    st = os.fstat(fd)
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid  # no owners on Windows
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != uid:
        return "it belongs to another user"
    if st.st_size != SIZE:
        return f"it has {st.st_size} bytes, not {SIZE}"
    os.lseek(fd, 0, os.SEEK_SET)
    if os.read(fd, len(MAGIC)) != MAGIC:
        return "it does not start with the step file's header"
    parent = os.stat(os.path.dirname(os.path.abspath(path)))
    if hasattr(os, "geteuid") and (parent.st_uid != uid or parent.st_mode & 0o077):
        return "its directory is not private to this user (made by the recorder, mode 0700)"
    return None


def _open() -> mmap.mmap | None:
    global _map, _tried
    _tried = True
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        # O_NONBLOCK: a FIFO never blocks the open; O_NOCTTY: a terminal is never taken.
        flags = os.O_RDWR
        for name in ("O_CLOEXEC", "O_NOFOLLOW", "O_NONBLOCK", "O_NOCTTY"):  # where they exist
            flags |= getattr(os, name, 0)
        fd = os.open(path, flags)
        try:
            why = refusal(path, fd)
            if why is None:
                _map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:  # missing, unreadable, a link
        why = f"it cannot be opened ({exc.strerror if isinstance(exc, OSError) else exc})"
    if why is not None:
        warnings.warn(
            f"sysmetrics: {ENV}={path[:120]!r} names no step file made by sysmetrics record "
            f"({why}); sysmetrics.step() marks no steps in this process",
            SystemMetricsWarning,
            stacklevel=3,
        )
    return _map


def step(n: int) -> None:
    """Mark the current training step ``n`` for ``sysmetrics record``.

    The first call maps the step file named by ``SYSMETRICS_STEP_FILE`` into memory; each
    call then writes ``n`` into the mapping, with no system call (a few hundred ns, mostly
    formatting ``n``). Without the variable every call returns at once; where it names
    no step file made by the recorder (see the module), the file is never written: the
    first call warns once, the others return at once. A step longer than 20 characters
    is skipped (never an error in the loop); the recorder ignores what does not read as
    an integer.
    """
    m = _map
    if m is None and (_tried or (m := _open()) is None):
        return
    try:
        data = f"{n:<20}".encode()  # WIDTH bytes: nothing of a longer step is left behind
    except (TypeError, ValueError):  # not formattable (a tensor of several elements, ...)
        return
    if len(data) == WIDTH:
        m[len(MAGIC) : SIZE] = data


class _StepReader(threading.Thread):
    """Sets ``monitor.step`` from the step file every ``STEP_POLL`` s (or interval)."""

    def __init__(self, monitor: SystemMonitor, path: str) -> None:
        super().__init__(name="sysmetrics-steps", daemon=True)
        self.monitor = monitor
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:  # mapped, as the command maps it: two reads take ~0.1 us, two preads ~2 us
            self.map = mmap.mmap(fd, SIZE, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.done = threading.Event()

    def read(self) -> None:
        """Take the step in the file; what is not an integer is ignored.

        A read that raced a write (two reads that differ) is tried again, up to
        ``STEP_TRIES`` times: a loop that marks a step every microsecond still gets read.
        """
        start = len(MAGIC)  # the header, then the step
        with contextlib.suppress(ValueError):
            text = self.map[start:]
            for _ in range(STEP_TRIES):
                again = self.map[start:]
                if again == text:
                    self.monitor.step = int(text.decode())
                    return
                text = again

    def run(self) -> None:
        wait = min(self.monitor.interval, STEP_POLL)
        while not self.done.wait(wait):
            self.read()

    def close(self) -> None:
        """Stop, read the file a last time and close it."""
        self.done.set()
        if self.ident is not None:  # started
            self.join()
        self.read()
        self.map.close()
