"""The collector protocol: one source each, flat ``{key: float}`` samples.

Also the helpers of collectors that run vendor tools: finding them, stopping their children.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from sysmetrics import descriptions
from sysmetrics.descriptions import Aggregation as Aggregation

MiB = 1024 * 1024


def quote(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, with ``...`` where it was cut.

    Outside input quoted in a warning or an error stays short.
    """
    return text if len(text) <= limit else text[:limit] + "..."


class SystemMetricsWarning(RuntimeWarning):
    """A collector, or one device of it, failed and was disabled; the rest go on."""


@runtime_checkable
class Collector(Protocol):
    """What :class:`~sysmetrics.SystemMonitor` needs of a metric source.

    ``sample`` runs on the monitor's thread; when it raises, the monitor disables the
    collector with one warning and keeps the others sampling.
    """

    name: str

    def sample(self) -> Mapping[str, float]:
        """Read the source now and return flat ``{key: value}`` in the keys' units."""
        ...

    def aggregation(self, key: str) -> Aggregation:
        """How the monitor aggregates ``key`` between snapshots."""
        ...

    def close(self) -> None:
        """Free handles; called once when the monitor stops."""
        ...


class BaseCollector:
    """Convenience base: aggregation from the key's description, or the subclass's lists.

    A described key is aggregated as its family says (:mod:`sysmetrics.descriptions`:
    counters ``last``, memory gauges ``peak``). A subclass emitting keys of its own lists
    the last parts of its cumulative keys in ``last_keys`` and of its memory gauges that
    get a ``.max`` companion in ``peak_keys`` (these lists come first); every other key
    is averaged.
    """

    name = "collector"
    last_keys: frozenset[str] = frozenset()
    peak_keys: frozenset[str] = frozenset()

    def sample(self) -> Mapping[str, float]:
        """Read the source; subclasses implement it."""
        raise NotImplementedError

    def aggregation(self, key: str) -> Aggregation:
        """``last``, ``peak`` or ``mean`` for ``key``: the class's lists, else its description."""
        leaf = key.rsplit(".", 1)[-1]
        if leaf in self.last_keys:
            return "last"
        if leaf in self.peak_keys:
            return "peak"
        return descriptions.aggregation(key)

    def close(self) -> None:
        """Nothing to free by default."""


class BackgroundCollector(BaseCollector):
    """A collector whose source is read on its own daemon thread, so ``sample()`` never waits.

    The thread (``_run``, written by the subclass) starts at the first ``sample()``,
    publishes with :meth:`_set_latest` and ends once ``_closed`` is set; ``sample()``
    returns a copy of the latest values; ``close()`` sets ``_closed`` and waits
    ``join_timeout`` seconds for the thread.

    Nothing stale is presented as current: where ``stale_after`` is set, values published
    more than that many seconds ago (the source stopped answering, its child died) are
    not returned; subclasses without it remove what is no longer current themselves. An
    exception escaping ``_run`` is a collector failure: its values are dropped at once and
    the next ``sample()`` raises it, so the monitor disables the collector with one
    warning.
    """

    thread_name = "sysmetrics-background"
    join_timeout = 0.5
    stale_after: float | None = None  # seconds a published value stays current

    def __init__(self) -> None:
        self._latest: dict[str, float] = {}
        self._published = 0.0  # time.monotonic() of the latest _set_latest
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._warned: set[str] = set()
        self._proc: subprocess.Popen[str] | None = None  # a tool run in progress, if any

    def _run(self) -> None:
        raise NotImplementedError

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # the thread's end, whatever ended it
            with self._lock:
                self._latest = {}
                self._failure = exc

    def _set_latest(self, values: dict[str, float]) -> None:
        """Publish ``values`` as the current ones (from the thread)."""
        with self._lock:
            self._latest = values
            self._published = time.monotonic()

    def sample(self) -> dict[str, float]:
        """The latest values read by the thread (starts it on the first call); no I/O.

        Raises:
            RuntimeError: the thread failed (the collector is then disabled).

        """
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=self.thread_name, daemon=True)
            self._thread.start()
        with self._lock:
            failure = self._failure
            if failure is None:
                limit = self.stale_after
                if limit is not None and time.monotonic() - self._published > limit:
                    return {}
                return dict(self._latest)
        raise RuntimeError(
            f"its reader thread failed: {type(failure).__name__}: {quote(str(failure))}"
        ) from failure

    def _warn_once(self, what: str, message: str) -> None:
        """Warn ``message`` (a :class:`SystemMetricsWarning`) the first time ``what`` fails.

        For sources the thread keeps retrying: the collector is not disabled.
        """
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, SystemMetricsWarning, stacklevel=2)

    def _poll(
        self,
        read: Callable[[], dict[str, float]],
        what: str,
        errors: tuple[type[Exception], ...],
        interval: float,
    ) -> None:
        """Publish ``read()`` every ``interval`` s until closed (the body of a polling ``_run``).

        A run that raises one of ``errors`` publishes nothing current (``{}``) and warns once
        (``"<what> failed, retrying every <interval> s: <error>"``, the error's text bounded);
        the next run is tried as usual. Anything else ends the thread: a collector failure.
        """
        while not self._closed.is_set():
            try:
                values = read()
            except errors as exc:
                if self._closed.is_set():
                    return
                self._warn_once(
                    "run",
                    f"sysmetrics: {what} failed, retrying every {interval:g} s: {quote(str(exc))}",
                )
                values = {}
            if self._closed.is_set():
                return
            self._set_latest(values)
            self._closed.wait(interval)

    def _lines(self, proc: subprocess.Popen[str]) -> Iterator[str]:
        """``proc``'s output lines until it ends or the collector is closed.

        A child started after ``close()`` (which could not stop it yet) is stopped here.
        """
        if self._closed.is_set():
            stop_child(proc)
            return
        stdout = proc.stdout
        assert stdout is not None
        with stdout:
            for line in stdout:
                if self._closed.is_set():
                    return
                yield line

    def close(self) -> None:
        """Ask the thread to end and wait for it up to ``join_timeout`` seconds.

        A tool run still in progress (``_proc``) is killed, its whole process group.
        """
        self._closed.set()
        proc = self._proc
        if proc is not None:
            kill_group(proc)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session=True``).

    Nothing happens once ``proc`` has been reaped: its pid may already be someone else's.
    """
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def stop_child(proc: subprocess.Popen[str] | None, timeout: float = 2.0) -> None:
    """Terminate ``proc`` if it still runs, kill it after ``timeout`` seconds, and reap it."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def find_tool(name: str, locations: Sequence[str]) -> str | None:
    """``name`` on PATH, else the newest match of ``locations``; None when absent."""
    found = shutil.which(name)
    if found:
        return found
    for pattern in locations:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None
