"""Step markers for a program run under ``sysmetrics record``.

``sysmetrics record`` creates a small file of :data:`WIDTH` spaces and names it in the
``SYSMETRICS_STEP_FILE`` environment variable of the command it runs; :func:`step` writes
the current step into it, and the recorder reads it at every sample. Outside ``sysmetrics
record`` (the variable unset) or where the file cannot be opened, :func:`step` does nothing.
"""

from __future__ import annotations

import mmap
import os

ENV = "SYSMETRICS_STEP_FILE"
WIDTH = 20  # bytes of the step file; each step overwrites them all, padded with spaces

_map: mmap.mmap | None = None  # the step file, mapped, once opened
_tried = False  # whether opening it was tried (it is tried once)


def _open() -> mmap.mmap | None:
    global _map, _tried
    _tried = True
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            _map = mmap.mmap(fd, WIDTH)
        finally:
            os.close(fd)
    except (OSError, ValueError):  # missing, unreadable, or shorter than WIDTH
        return None
    return _map


def step(n: int) -> None:
    """Mark the current training step ``n`` for ``sysmetrics record``.

    The first call maps the file named by ``SYSMETRICS_STEP_FILE`` into memory; each call
    then writes ``n`` into the mapping, with no system call (a few hundred ns, mostly
    formatting ``n``). Without the variable, or where the file cannot be opened, every call
    returns at once. A step longer than 20 characters is skipped (never an error in the
    loop); the recorder ignores what does not read as an integer.
    """
    m = _map
    if m is None and (_tried or (m := _open()) is None):
        return
    try:
        data = f"{n:<20}".encode()  # WIDTH bytes: nothing of a longer step is left behind
    except (TypeError, ValueError):  # not formattable (a tensor of several elements, ...)
        return
    if len(data) == WIDTH:
        m[:WIDTH] = data
