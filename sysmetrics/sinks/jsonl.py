"""The run file: one JSON line per sample, written by the sink's own reader and thread.

The lines (a ``run`` marker, the samples, an ``end`` marker) are declared in
:mod:`sysmetrics.runfile`, with the reader.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import socket
import stat
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Optional, Union

from sysmetrics import runfile
from sysmetrics._checks import positive_int
from sysmetrics.errors import SystemMetricsWarning, quote
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Sample

log = logging.getLogger("sysmetrics")

PathLike = Union[str, "os.PathLike[str]"]

RECORDS = 64  # other records (stall) waiting to be written, at most (more are dropped)
BUFFER = 1000  # samples kept for a writer that fell behind (the oldest are dropped)
CLOSE_WAIT = 1.0  # seconds close() waits for the writer to drain
LINK_CHECK = 10.0  # seconds between two checks that the run file still has a name
RETRY = 1.0  # seconds between two tries to write a run file on a full disk
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk (or quota): space may return


def nearest_existing(folder: str) -> str:
    """``folder``, or its nearest ancestor that exists (what :func:`make_folders` builds on)."""
    while not os.path.lexists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder


def make_folders(path: PathLike) -> list[str]:
    """Make the missing folders of the run file ``path``, as the frameworks' loggers do.

    Returns:
        The folders made, outermost first (empty where the folder existed).

    Raises:
        OSError: a folder cannot be made (an ancestor is a file, no permission).

    """
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if missing:
        os.makedirs(missing[0], exist_ok=True)
    return missing[::-1]


def line(sample: Sample, node: Optional[int] = None) -> bytes:
    """One sample as a run-file line (UTF-8 JSON and a newline), see :mod:`sysmetrics.runfile`.

    ``{"time": s since the epoch, "monotonic": s, "step": int or null, "metrics": {key: value}}``,
    ``"steps": n`` where the sample closed steps and ``"node": k`` where ``node`` is given.
    """
    return runfile.sample_line(
        sample.time, sample.monotonic, sample.step, sample.values, node, sample.steps
    )


class JsonlSink:
    """Append a recording of ``monitor`` to ``path``: ``run`` line, samples, ``end`` line.

    The lines are those of :mod:`sysmetrics.runfile`. A reader with a buffer receives each
    sample from the next one on (make the sink before ``monitor.start()`` for its first
    sample); the sink's daemon thread writes the ``run`` line, then what the reader holds,
    with one ``write()`` per line on a file opened for appending, so a process killed
    with SIGKILL loses at most the line being written (and has no ``end`` line). A line
    is written whole or not at all (:meth:`_put`: a short write is finished, one that
    fails part way is truncated back), and a file that ends in half a line gets a
    newline first. The sampling thread never waits on the file: a writer that falls
    behind (a stalled disk) loses the oldest samples beyond ``buffer``, counted in
    :attr:`dropped`. A full disk (``ENOSPC``, ``EDQUOT``) costs one
    :class:`SystemMetricsWarning`: the samples wait (``buffer`` in the reader and as many
    taken out, the oldest dropped and counted) and the writer tries again every
    ``RETRY`` s. Any other write error (EIO, the file removed from a network mount)
    stops the sink with one :class:`SystemMetricsWarning`, and so does a run file that
    was deleted (its link count, checked every ``LINK_CHECK`` s, fell to 0: its
    directory was removed, say); the monitor and training go on. The monitor is not
    started or stopped by the sink.

    Args:
        monitor: the monitor whose samples to write.
        path: the run file; created if missing (its missing folders too, as the
            frameworks' loggers make theirs), appended to if it exists.
        buffer: samples kept for a writer that fell behind.
        command: the command recorded (``sysmetrics record``), for the ``run`` line.
        node: the node rank, for the ``run`` and ``end`` lines (0 by default).
        multi_node: the run spans several nodes: every sample line carries ``node``.

    Raises:
        TypeError, ValueError: ``monitor``, ``path`` or ``buffer`` is invalid.
        OSError: the file cannot be opened for appending, nor its missing folders made
            (the message names it).

    """

    def __init__(
        self,
        monitor: SystemMonitor,
        path: PathLike,
        buffer: int = BUFFER,
        *,
        command: Optional[Sequence[str]] = None,
        node: int = 0,
        multi_node: bool = False,
    ) -> None:
        if not isinstance(monitor, SystemMonitor):
            raise TypeError(f"monitor={monitor!r} is invalid: use a sysmetrics.SystemMonitor")
        if monitor.stopped:
            raise ValueError(
                "monitor is a stopped SystemMonitor, which samples no more: pass a new or "
                "running one"
            )
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path={path!r} is invalid: use the run file's path (str or PathLike)")
        if positive_int(buffer) is None:
            raise ValueError(
                f"buffer={buffer!r} is invalid: use a positive number of samples to keep for "
                "a writer that falls behind"
            )
        self.path = os.fspath(path)
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"path={path!r} is invalid: use the run file's path")
        if command is not None and (
            isinstance(command, str) or not all(isinstance(a, str) for a in command)
        ):
            raise TypeError(f"command={command!r} is invalid: use a list of arguments, or None")
        if type(node) is not int or node < 0:
            raise ValueError(f"node={node!r} is invalid: use the node rank, 0 or more")
        self._node = node
        self._multi_node = bool(multi_node)
        self._started = time.monotonic()
        self._run = runfile.run_line(
            command=None if command is None else list(command),
            host=socket.gethostname(),
            node=node,
            start=round(time.time(), 6),
            **monitor.header(),
            version=runfile.version(),
        )
        self._end: dict[str, Any] = {}
        make_folders(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            self._reader = monitor.reader(buffer=buffer)
        except BaseException:
            os.close(self._fd)
            raise
        self.lines = 0  # lines written
        self._buffer = buffer
        self._lost = 0  # samples dropped while the disk was full
        self._warned = False  # the full disk was said
        self._fragment = False  # the file ends in a fragment: the next line starts anew
        self._records: collections.deque[bytes] = collections.deque(maxlen=RECORDS)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._write, name="sysmetrics-jsonl", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Samples lost because the writer fell more than ``buffer`` samples behind.

        Behind a stalled disk (the reader's buffer) or a full one (the writer's).
        """
        return self._reader.dropped + self._lost

    def stall(self, fields: Mapping[str, Any]) -> None:
        """Write a ``stall`` record (:func:`sysmetrics.runfile.stall_line`) after the samples.

        Any thread; never waits (``RECORDS`` records wait at most, the oldest dropped).
        """
        if self._multi_node:
            fields = {**fields, "node": self._node}
        self._records.append(runfile.stall_line(fields))

    def _put(self, data: bytes) -> None:
        """Write ``data`` (whole lines) whole or not at all; raises the write's ``OSError``.

        A short write is followed by the rest. A write that fails part way (a full disk)
        truncates the file back to where ``data`` began, so it ends at a line boundary;
        where even that fails, the next line written starts with a newline of its own.
        """
        fd = self._fd
        if self._fragment:
            data = b"\n" + data
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                n = os.write(fd, view[done:])
                if n <= 0:  # nothing written and no error: call it a full disk
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += n
        except OSError:
            if done:
                try:  # O_APPEND: the offset is the end of what this write wrote
                    os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR) - done)
                except OSError:  # a pipe, or the file is gone
                    self._fragment = True
            raise
        self._fragment = False

    def _full(self, exc: OSError) -> None:
        """Say once that the disk is full; the samples wait in the buffer."""
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"sysmetrics: the run file {self.path!r} could not be written (the disk is "
            "full), training goes on; its samples wait (the oldest are dropped and "
            f"counted) and it is written again when there is space: {type(exc).__name__}: "
            f"{quote(str(exc))}",
            SystemMetricsWarning,
            stacklevel=1,
        )

    def _write(self) -> None:
        reader, closing, fd = self._reader, self._closing, self._fd
        node = self._node if self._multi_node else None
        pending: collections.deque[bytes] = collections.deque()  # lines not yet written
        head = [self._run]  # the run line: written first, never dropped
        try:
            self._fragment = self._ends_mid_line()
            checked = time.monotonic()
            stuck = False  # the last write found the disk full
            while True:
                if stuck:  # try again in RETRY s, or at close
                    closing.wait(RETRY)
                else:
                    reader.wait(0.5)
                done = closing.is_set()  # taken before the last drain
                for sample in reader.samples():
                    if len(pending) == self._buffer:
                        pending.popleft()
                        self._lost += 1
                    pending.append(line(sample, node))
                try:
                    while head:
                        self._put(head[0])
                        head.pop()
                    while pending:
                        self._put(pending[0])
                        pending.popleft()
                        self.lines += 1
                    while self._records:
                        self._put(self._records[0])
                        self._records.popleft()
                    if stuck:
                        log.info("sysmetrics: the run file %r is written again", self.path)
                    stuck = False
                    if done:
                        seconds = round(time.monotonic() - self._started, 3)
                        end = {"seconds": seconds, "node": self._node, "samples": self.lines}
                        end.update(dropped=self.dropped, **self._end)
                        self._put(runfile.end_line(**end))
                        return
                except OSError as exc:
                    if exc.errno not in FULL:
                        raise
                    self._full(exc)
                    stuck = True
                    if done:  # closing on a full disk: the lines written stay, whole
                        reader.close()
                        return
                    continue
                if time.monotonic() - checked >= LINK_CHECK:
                    checked = time.monotonic()
                    if os.fstat(fd).st_nlink == 0:
                        reader.close()
                        warnings.warn(
                            f"sysmetrics: the run file {self.path!r} was deleted (or its "
                            "directory was) and is no longer written, training goes on",
                            SystemMetricsWarning,
                            stacklevel=1,
                        )
                        return
        except Exception as exc:
            reader.close()
            warnings.warn(
                f"sysmetrics: the run file {self.path!r} could not be written and is no "
                f"longer written, training goes on: {type(exc).__name__}: {quote(str(exc))}",
                SystemMetricsWarning,
                stacklevel=1,
            )
        finally:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def _ends_mid_line(self) -> bool:
        """Whether the file (appended to) ends in a fragment: its last byte is no newline."""
        st = os.fstat(self._fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return False
        try:  # the descriptor is write-only (a FIFO must stay so): read it by name
            with open(self.path, "rb") as f:
                f.seek(st.st_size - 1)
                return f.read(1) != b"\n"
        except OSError:  # unreadable: a newline first costs an empty line at most
            return True

    def close(self, timeout: float = CLOSE_WAIT, end: Optional[Mapping[str, Any]] = None) -> None:
        """Write what the reader holds, the ``end`` line, and close the file; idempotent.

        Waits ``timeout`` s; a writer stuck on a stalled disk is left behind on its daemon
        thread. ``end``: more fields for the ``end`` line (``exit_status``, ``status``, ...;
        see :mod:`sysmetrics.runfile`), taken at the first call.
        """
        if not self._closing.is_set() and end:
            self._end = dict(end)
        self._closing.set()
        self._reader.close()  # no new samples; wakes the writer
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("sysmetrics: the run file %r is stalled; leaving it behind", self.path)

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
