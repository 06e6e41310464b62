"""The run file: one JSON line per sample, written by the sink's own reader and thread."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import warnings
from types import TracebackType
from typing import Union

from sysmetrics._checks import positive_int
from sysmetrics.collectors.base import SystemMetricsWarning, quote
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Sample

log = logging.getLogger("sysmetrics")

PathLike = Union[str, "os.PathLike[str]"]

BUFFER = 1000  # samples kept for a writer that fell behind (the oldest are dropped)
CLOSE_WAIT = 1.0  # seconds close() waits for the writer to drain


def line(sample: Sample) -> bytes:
    """One sample as a run-file line (UTF-8 JSON and a newline).

    ``{"time": s since the epoch, "monotonic": s, "step": int or null, "metrics": {key: value}}``
    """
    record = {
        "time": round(sample.time, 6),
        "monotonic": round(sample.monotonic, 6),
        "step": sample.step,
        "metrics": sample.values,
    }
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()


class JsonlSink:
    """Append every sample of ``monitor`` to ``path`` as one JSON line (see :func:`line`).

    A reader with a buffer receives each sample; the sink's daemon thread writes what it
    holds with one ``write()`` per line on a file opened for appending, so a process killed
    with SIGKILL loses at most the line being written. The sampling thread never waits on
    the file: a writer that falls behind (a stalled disk) loses the oldest samples beyond
    ``buffer``, counted in :attr:`dropped`. A write that fails (disk full, the file
    removed from a network mount) stops the sink with one :class:`SystemMetricsWarning`;
    the monitor and training go on. The monitor is not started or stopped by the sink.

    Args:
        monitor: the monitor whose samples to write.
        path: the run file; created if missing, appended to if it exists. Its directory
            must exist.
        buffer: samples kept for a writer that fell behind.

    Raises:
        TypeError, ValueError: ``monitor``, ``path`` or ``buffer`` is invalid.
        OSError: the file cannot be opened for appending (the message names it).

    """

    def __init__(self, monitor: SystemMonitor, path: PathLike, buffer: int = BUFFER) -> None:
        if not isinstance(monitor, SystemMonitor):
            raise TypeError(f"monitor={monitor!r} is invalid: use a sysmetrics.SystemMonitor")
        if monitor._state == "stopped":
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
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            self._reader = monitor.reader(buffer=buffer)
        except BaseException:
            os.close(self._fd)
            raise
        self.lines = 0  # lines written
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._write, name="sysmetrics-jsonl", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Samples lost because the writer fell more than ``buffer`` samples behind."""
        return self._reader.dropped

    def _write(self) -> None:
        reader, closing = self._reader, self._closing
        try:
            while True:
                reader.wait(0.5)
                done = closing.is_set()  # taken before the last drain
                for sample in reader.samples():
                    os.write(self._fd, line(sample))
                    self.lines += 1
                if done:
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

    def close(self, timeout: float = CLOSE_WAIT) -> None:
        """Write what the reader holds and close the file; idempotent, waits ``timeout`` s.

        A writer stuck on a stalled disk is left behind on its daemon thread.
        """
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
