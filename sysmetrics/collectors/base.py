"""The collector protocol: one source each, flat ``{key: float}`` samples.

Also the toolkit of collectors that run vendor tools: finding them (:func:`find_tool`) and
running them (:class:`ToolRunner`: deadline, bounded output, killed on close).
"""

from __future__ import annotations

import contextlib
import glob
import io
import logging
import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from sysmetrics import descriptions
from sysmetrics.descriptions import Aggregation as Aggregation

# Re-exported (their home is sysmetrics.errors) for code that imports them from here.
from sysmetrics.errors import SystemMetricsWarning as SystemMetricsWarning
from sysmetrics.errors import quote as quote

log = logging.getLogger("sysmetrics")

MiB = 1024 * 1024
MAX_OUTPUT = 16 * MiB
"""Bytes a vendor tool may print in one run, and characters of one streamed line."""
STDERR_TAIL = 64 * 1024
"""Bytes of a tool's standard error kept (its end, for the error message)."""
TAIL_WAIT_S = 2.0
"""Seconds a streaming tool that closed its output has to exit before it is killed."""


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

    A vendor tool is run through ``self._tool`` (a :class:`ToolRunner`), never spawned
    directly: ``close()`` closes the runner, which kills what runs and starts nothing more.
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
        self._tool = ToolRunner()  # the collector's vendor tool, if it runs one

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        """The tool run in progress, if any."""
        return self._tool.running

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

    def close(self) -> None:
        """Ask the thread to end and wait for it up to ``join_timeout`` seconds.

        The collector's vendor tool (``_tool``), running or about to start, is killed, its
        whole process group.
        """
        self._closed.set()
        self._tool.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.join_timeout)


class ToolResult(NamedTuple):
    """One run of a vendor tool: its exit status and what it printed (decoded as UTF-8)."""

    returncode: int
    stdout: str
    stderr: str
    """The last ``STDERR_TAIL`` bytes of its standard error."""


class ToolClosedError(subprocess.SubprocessError):
    """The tool was not started: its collector is closed."""


class ToolRunner:
    """The one way a collector runs its vendor tool (``rocm-smi``, ``tpu-info``, ...).

    Each child starts in its own process group (its own children die with it), with
    standard input from ``/dev/null``. :meth:`run` runs a tool to its end within a deadline;
    :meth:`lines` follows a long-lived one line by line. Output is bounded: a run printing
    more than ``max_output`` bytes is killed, a streamed line longer than that is skipped.

    :meth:`close` kills every child running and keeps any from starting later: starting a
    child and closing take one lock, so a ``close()`` arriving just after the spawn still
    finds the child (a tool never outlives its collector).

    Args:
        max_output: bytes a run may print, and characters of one streamed line.

    """

    def __init__(self, max_output: int = MAX_OUTPUT) -> None:
        self.max_output = max_output
        self._lock = threading.Lock()
        self._closed = False
        self._running: list[subprocess.Popen[bytes]] = []
        self.streamed: subprocess.Popen[bytes] | None = None
        """The latest child started by :meth:`lines` (kept once it ended, for its status)."""

    @property
    def running(self) -> subprocess.Popen[bytes] | None:
        """The latest child started that has not been reaped yet, if any."""
        with self._lock:
            return self._running[-1] if self._running else None

    def _start(
        self, command: Sequence[str], stderr: int, preexec_fn: Callable[[], None] | None
    ) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._closed:
                raise ToolClosedError(f"{command[0]} not started: the collector is closed")
            proc = subprocess.Popen(
                list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                start_new_session=True, preexec_fn=preexec_fn,
            )  # fmt: skip
            self._running.append(proc)
        return proc

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill ``proc``'s group if it still runs, reap it, close its pipes."""
        if proc.poll() is None:
            kill_group(proc)
        proc.wait()
        with self._lock:
            self._running.remove(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    def run(self, command: Sequence[str], timeout: float) -> ToolResult:
        """Run ``command`` to its end, for at most ``timeout`` seconds.

        Raises:
            OSError: it cannot be started.
            subprocess.TimeoutExpired: it ran past ``timeout`` (its process group is killed).
            RuntimeError: it printed more than ``max_output`` bytes (likewise killed).
            ToolClosedError: the runner is closed (nothing was started).

        """
        proc = self._start(command, subprocess.PIPE, None)
        try:
            stdout, stderr = _read_bounded(proc, command[0], timeout, self.max_output)
        finally:
            self._end(proc)
        assert proc.returncode is not None
        return ToolResult(proc.returncode, stdout, stderr)

    def lines(
        self, command: Sequence[str], preexec_fn: Callable[[], None] | None = None
    ) -> Iterator[str]:
        """Start ``command`` now; the returned iterator yields its output lines.

        Iterate it at once: lines come until the child ends or the runner closes, and the
        child is then killed and reaped, however the iteration ends. A line over
        ``max_output`` characters is skipped (one debug line); standard error is
        discarded. Once the runner is closed nothing is started and nothing is yielded.

        Raises:
            OSError: it cannot be started.

        """
        try:
            proc = self._start(command, subprocess.DEVNULL, preexec_fn)
        except ToolClosedError:
            return iter(())
        self.streamed = proc
        return self._follow(proc, command[0])

    def _follow(self, proc: subprocess.Popen[bytes], name: str) -> Iterator[str]:
        assert proc.stdout is not None
        reader = io.TextIOWrapper(proc.stdout, encoding="utf-8", errors="replace")
        try:
            while not self._closed:
                line = reader.readline(self.max_output + 1)
                if not line:
                    proc.wait(TAIL_WAIT_S)  # ended: its status (killed past TAIL_WAIT_S)
                    return
                if len(line) > self.max_output:
                    while line and not line.endswith("\n"):  # the rest of the long line
                        line = reader.readline(self.max_output)
                    log.debug("sysmetrics: %s printed a line over %d characters: skipped",
                              name, self.max_output)  # fmt: skip
                    continue
                yield line
        except subprocess.TimeoutExpired:
            return
        finally:
            self._end(proc)

    def close(self) -> None:
        """Kill every child running (each whole process group); start none from now on."""
        with self._lock:
            self._closed = True
            for proc in self._running:
                kill_group(proc)


def _read_bounded(
    proc: subprocess.Popen[bytes], name: str, timeout: float, limit: int
) -> tuple[str, str]:
    """``proc``'s stdout (at most ``limit`` bytes) and its stderr's tail, once it exited.

    Raises subprocess.TimeoutExpired past ``timeout`` s, RuntimeError past ``limit`` bytes.
    """
    deadline = time.monotonic() + timeout
    out: list[bytes] = []
    size = 0
    err = b""
    with selectors.DefaultSelector() as selector:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                selector.register(pipe, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    out.append(data)
                    size += len(data)
                    if size > limit:
                        raise RuntimeError(f"{name} printed over {limit} bytes")
                else:
                    err = (err + data)[-STDERR_TAIL:]
    proc.wait(max(0.0, deadline - time.monotonic()))
    return b"".join(out).decode("utf-8", "replace"), err.decode("utf-8", "replace")


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session=True``).

    Nothing happens once ``proc`` has been reaped: its pid may already be someone else's.
    """
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


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
