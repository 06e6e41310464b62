"""What the framework callbacks share: options, the monitor's lifecycle, key filtering.

No framework is imported here; ``sysmetrics.integrations.<framework>`` wraps this in
each framework's own callback class.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any

from sysmetrics import _watch, distributed
from sysmetrics._checks import one_or_many, positive_int
from sysmetrics.descriptions import split_node
from sysmetrics.errors import SystemMetricsWarning, quote
from sysmetrics.monitor import MONITOR_OPTIONS, SystemMonitor
from sysmetrics.reader import Reader
from sysmetrics.sinks.jsonl import JsonlSink

LOGGING_INTERVALS = ("step", "epoch")


CALLBACK_OPTIONS = (
    "interval",
    "logging_interval",
    "log_every_n_steps",
    "prefix",
    "include",
    "exclude",
    "console",
    "monitor",
    "run_file",
)
RUN_FILE = "system_metrics.jsonl"  # the run file's name in the run's log directory
RUN_FILE_NODE = "system_metrics.node{node}.jsonl"  # the same, one per node on several nodes
# What users of the frameworks type for our options: each framework's own name for it.
_ALIASES = {
    "logging_steps": "log_every_n_steps",  # transformers' TrainingArguments
    "every_n_steps": "log_every_n_steps",
    "logging_strategy": "logging_interval",  # transformers
    "update_freq": "logging_interval",  # Keras' TensorBoard
    "prog_bar": "console",  # Lightning's self.log
    "progress_bar": "console",
    "verbose": "console",
    "sampling_interval": "interval",
    "system_monitor": "monitor",
    "jsonl": "run_file",
    "log_file": "run_file",
}


def _patterns(name: str, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    items = one_or_many(value, str)
    if items is None:
        raise TypeError(
            f"{name}={value!r} is invalid: use a glob pattern or a list of glob patterns on "
            "metric keys, such as 'cpu' or ['cpu', 'proc.*']"
        )
    patterns: list[str] = []
    for p in items:
        if not isinstance(p, str) or not p:
            raise TypeError(
                f"{name} contains {p!r}: each entry must be a non-empty glob pattern on metric "
                "keys, such as 'cpu' or 'disk.*'"
            )
        patterns.append(p)
    return tuple(patterns)


def _elsewhere(message: str) -> None:
    """Warn that a per-machine setting does not hold here, inside a distributed run."""
    warnings.warn(
        f"sysmetrics: {message}; inside a distributed run this machine leaves it out (the "
        "other ranks keep it), rather than fail on some ranks only",
        SystemMetricsWarning,
        stacklevel=5,
    )


def _disk_paths_here(value: object) -> object:
    """``disk_paths`` without the paths this machine lacks (each with a warning).

    Entries that are not paths are kept, for the monitor's own ``TypeError``.
    """
    items = one_or_many(value, (str, os.PathLike))
    if items is None:
        return value
    kept = []
    for item in items:
        if isinstance(item, (str, os.PathLike)) and not os.path.exists(os.fspath(item)):
            _elsewhere(f"disk_paths contains {os.fspath(item)!r}, which does not exist here")
        else:
            kept.append(item)
    return kept


def _check_run_file(
    value: object, owner: str, run_dirs: bool, elsewhere: bool = False
) -> str | bool | None:
    if value is None or value is False:
        return None
    if value is True:
        if not run_dirs:
            raise ValueError(
                f"run_file=True is invalid for {owner}: the framework has no run log "
                "directory; give the run file's path"
            )
        return True
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path:
        raise TypeError(
            f"run_file={value!r} is invalid: use a path for the JSON-lines run file, True for "
            f"{RUN_FILE} in the run's log directory, or None"
        )
    path = os.path.expanduser(path)
    problem = None
    if os.path.isdir(path):
        problem = (
            f"run_file={value!r} is invalid: it is a directory; name the run file in it, "
            f"such as {os.path.join(path, RUN_FILE)!r}"
        )
    directory = os.path.dirname(os.path.abspath(path))
    if problem is None and not os.path.isdir(directory):
        problem = f"run_file={value!r} is invalid: its directory {directory!r} does not exist"
    if problem is None:
        return path
    if not elsewhere:
        raise ValueError(problem)
    _elsewhere(problem + " here")
    return None


def _check_unknown(owner: str, options: Mapping[str, object]) -> None:
    unknown = sorted(k for k in options if k not in MONITOR_OPTIONS)
    if not unknown:
        return
    name = unknown[0]
    close = _ALIASES.get(name) or next(
        iter(difflib.get_close_matches(name, CALLBACK_OPTIONS + MONITOR_OPTIONS, n=1)), None
    )
    hint = f" (did you mean {close!r}?)" if close else ""
    monitor_only = [o for o in MONITOR_OPTIONS if o not in CALLBACK_OPTIONS]
    raise TypeError(
        f"{owner} got an unknown option {name!r}{hint}; its options are: "
        f"{', '.join(CALLBACK_OPTIONS)}, and SystemMonitor's: {', '.join(monitor_only)}"
    )


class CallbackCore:
    """Options and monitor lifecycle common to every framework callback.

    Args:
        interval: seconds between samples (see :class:`~sysmetrics.SystemMonitor`).
        logging_interval: ``"step"`` or ``"epoch"``.
        log_every_n_steps: with ``"step"``, log every this many steps; None follows the
            framework's own logging cadence.
        prefix: put before every key, its trailing ``/`` replaced by the logger's group
            separator where the logger has one.
        include: glob patterns (``fnmatch``) on the un-prefixed keys to keep; all by default.
        exclude: glob patterns of keys to leave out, applied after ``include``.
        console: also show the metrics where the framework prints its logs (progress bar,
            printed log lines); by default they reach the loggers only.
        monitor: sample with this (shared) monitor instead of one of the callback's own;
            the callback reads it through a reader of its own, starts it if it is not
            running, and never stops it. Excludes ``interval`` and ``monitor_options``.
        run_file: also write every sample, with the training step, to this JSON-lines
            file (see :class:`~sysmetrics.sinks.jsonl.JsonlSink`); True for
            ``system_metrics.jsonl`` in the run's log directory, where the framework has
            one (``run_dirs`` says whether it does).
        owner: the callback's name, for error messages.
        run_dirs: whether the framework has a run log directory for ``run_file=True``.
        monitor_options: passed to :class:`~sysmetrics.SystemMonitor` (``disk_paths``,
            ``track_process_tree``, ...).

    Raises:
        TypeError, ValueError: an option is unknown or invalid (raised at construction).

    """

    def __init__(
        self,
        interval: float | None = None,
        logging_interval: str = "step",
        log_every_n_steps: int | None = None,
        prefix: str = "system/",
        include: str | Iterable[str] | None = None,
        exclude: str | Iterable[str] | None = None,
        console: bool = False,
        monitor: SystemMonitor | None = None,
        run_file: str | os.PathLike[str] | bool | None = None,
        owner: str = "SystemMetricsCallback",
        run_dirs: bool = True,
        **monitor_options: Any,
    ) -> None:
        _check_unknown(owner, monitor_options)
        if monitor is not None:
            if not isinstance(monitor, SystemMonitor):
                raise TypeError(
                    f"monitor={monitor!r} is invalid: use a sysmetrics.SystemMonitor to share, "
                    "or None for the callback's own"
                )
            given = sorted(monitor_options) + (["interval"] if interval is not None else [])
            if given:
                raise TypeError(
                    f"{owner} got {', '.join(given)} with monitor=: those configure the "
                    "callback's own monitor; configure the monitor you pass instead"
                )
            if monitor._state == "stopped":
                raise ValueError(
                    "monitor= is a stopped SystemMonitor, which cannot sample again: pass a "
                    "new or running one"
                )
        # Settings of this machine's files and devices may hold on some nodes only: inside
        # a distributed run one that does not hold here is left out with a warning, as
        # an error on some ranks only would leave the others waiting for them.
        elsewhere = distributed.launched()
        self.run_file = _check_run_file(run_file, owner, run_dirs, elsewhere)
        if logging_interval not in LOGGING_INTERVALS:
            raise ValueError(
                f"logging_interval={logging_interval!r} is invalid: use 'step' or 'epoch'"
            )
        every = None if log_every_n_steps is None else positive_int(log_every_n_steps)
        if log_every_n_steps is not None and every is None:
            raise ValueError(
                f"log_every_n_steps={log_every_n_steps!r} is invalid: use a positive integer, "
                "or None for the framework's own logging cadence"
            )
        if not isinstance(prefix, str):
            raise TypeError(f"prefix={prefix!r} is invalid: it must be a string (may be empty)")
        if not isinstance(console, bool):
            raise TypeError(f"console={console!r} is invalid: use True or False")
        self.logging_interval = logging_interval
        self.log_every_n_steps = every
        self.prefix = prefix
        self.include = _patterns("include", include)
        self.exclude = _patterns("exclude", exclude)
        self.console = console
        self.monitor_options: dict[str, Any] = {
            "interval": 1.0 if interval is None else interval,
            **monitor_options,
        }
        if elsewhere and "disk_paths" in monitor_options:
            self.monitor_options["disk_paths"] = _disk_paths_here(monitor_options["disk_paths"])
        self.shared = monitor  # a monitor the user owns: never stopped here
        # Validate every monitor option now, with the monitor's own messages, and keep
        # that monitor for the first start (its collectors may have run a vendor tool).
        self._unstarted: SystemMonitor | None = (
            self._new_monitor(elsewhere) if monitor is None else None
        )
        self.monitor: SystemMonitor | None = None  # the monitor of the current run
        self.reader: Reader | None = None  # this run's reader of it
        self._extra: list[Reader] = []  # more readers of this run (Keras: the epochs')
        self._sink: JsonlSink | None = None
        self.layout: distributed.Layout | None = None  # the run's ranks and nodes
        self._names: dict[tuple[str, str], str | None] = {}
        self._produced: set[str] = set()  # every name ``named()`` has given out
        self._lock = threading.Lock()
        self._run = 0
        self._cancel_watch: Callable[[], None] | None = None
        self._cleanup: Callable[[], None] | None = None

    def _new_monitor(self, elsewhere: bool) -> SystemMonitor:
        """The callback's own monitor, checking every option with the monitor's messages.

        Inside a distributed run, ``gpu_ids`` naming a GPU this machine lacks (or with no
        NVIDIA GPU here) watches no NVIDIA GPU here, with a warning.
        """
        options = self.monitor_options
        try:
            return SystemMonitor(**options)
        except ValueError as exc:
            if (
                not elsewhere
                or options.get("gpu_ids") is None
                or not str(exc).startswith("gpu_ids")
            ):
                raise
            _elsewhere(f"{exc}; no NVIDIA GPU is watched here")
            options["gpu_ids"] = []
            return SystemMonitor(**options)

    def __getstate__(self) -> dict[str, Any]:
        # ddp_spawn pickles callbacks; a monitor holds locks and handles, so the copy
        # builds its own at start.
        state = self.__dict__.copy()
        state["_unstarted"] = state["shared"] = None  # a shared monitor stays in its process
        state["layout"] = None
        state["_lock"] = None
        state["_cancel_watch"] = state["_cleanup"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def start(
        self,
        sample: bool = True,
        watch: FrameType | None = None,
        cleanup: Callable[[], None] | None = None,
        run_dir: str | None = None,
        node: int | None = None,
        step: int | None = None,
    ) -> None:
        """Start a run: sample where ``sample`` (one process per node).

        Every rank calls this at train start: in a process group of several ranks it
        learns the run's layout with one collective (:func:`distributed.layout`), and the
        sampling process watches the trees of every rank on its node.

        Args:
            sample: whether this process samples (the node's local rank 0).
            watch: the frame of the framework's training call; when it leaves its
                thread's stack without :meth:`stop` (the call raised), the run ends.
            cleanup: called once when the run ends, whichever way.
            run_dir: the run's log directory, for ``run_file=True``.
            node: this rank's node rank, where the framework knows it.
            step: the step the first sample is stamped with (the first step trained).

        """
        self.stop()
        self.layout = distributed.layout(node)  # a collective: before anything may fail
        with self._lock:
            self._run += 1
            run = self._run
            own, self._unstarted = self._unstarted, None
            self._cleanup = cleanup
            try:
                if sample:
                    self._open(own, run_dir, step)
                elif own is not None:
                    own.stop()  # frees what its collectors opened
                if watch is not None:
                    self._cancel_watch = _watch.watch(watch, lambda: self._end(run))
            except RuntimeError as exc:  # "can't start new thread" (pids.max, ulimit -u)
                # Training goes on exactly as without the callback: no metrics from this
                # process, but its hooks stay, so in a multi-node run it still joins every
                # gather (sending nothing) and no other rank waits for it.
                if own is not None:
                    own.stop()
                self._close_locked()
                warnings.warn(
                    f"sysmetrics: the system monitor could not start, training goes on "
                    f"without system metrics from this process: {type(exc).__name__}: "
                    f"{quote(str(exc))}",
                    SystemMetricsWarning,
                    stacklevel=3,
                )

    def _open(self, own: SystemMonitor | None, run_dir: str | None, step: int | None) -> None:
        """Open the run's monitor, reader and run file (under the lock).

        The run file is opened before the monitor starts, so it gets the first sample
        (the one the loggers get at the first logging point), stamped with ``step``.
        """
        if self.shared is None:
            monitor = own or SystemMonitor(**self.monitor_options)
            self.reader = monitor.default_reader
        else:
            monitor = self.shared
            if monitor._state == "stopped":
                warnings.warn(
                    "sysmetrics: the monitor given to the callback was stopped; this run "
                    "logs no system metrics",
                    SystemMetricsWarning,
                    stacklevel=4,
                )
                return
            self.reader = monitor.reader()
        self.monitor = monitor
        if step is not None:
            monitor.step = step
        if self.layout is not None:
            monitor.job.watch(self.layout.local_pids)  # every rank on this node
        self._open_run_file(monitor, run_dir)
        monitor.start()  # idempotent; the user stops a shared one

    def _open_run_file(self, monitor: SystemMonitor, run_dir: str | None) -> None:
        """The run's run file; on several nodes one per node under ``run_file=True``."""
        layout = self.layout or distributed.Layout(0, (0,), ())
        path = self.run_file
        if path is True:
            name = RUN_FILE_NODE.format(node=layout.node) if layout.multi_node else RUN_FILE
            path = os.path.join(run_dir or ".", name)
        if path:
            try:
                if run_dir is not None:
                    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                self._sink = JsonlSink(
                    monitor, path, node=layout.node, multi_node=layout.multi_node
                )
            except OSError as exc:
                warnings.warn(
                    f"sysmetrics: the run file cannot be written, training goes on without "
                    f"it: {type(exc).__name__}: {quote(str(exc))}",
                    SystemMetricsWarning,
                    stacklevel=5,
                )

    def extra_reader(self) -> Reader | None:
        """Another reader of this run's monitor, closed when the run ends; None if none."""
        with self._lock:
            if self.monitor is None:
                return None
            reader = self.monitor.reader()
            self._extra.append(reader)
            return reader

    def set_step(self, step: int) -> None:
        """Stamp the training step on the monitor's samples (for run files); cheap."""
        monitor = self.monitor
        if monitor is not None:
            monitor.step = step

    def stop(self, failed: bool = False) -> None:
        """End the run: readers, run file, the monitor it started, the cleanup; idempotent.

        ``failed``: training raised (the run file's ``end`` line says ``"failed"``).
        """
        with self._lock:
            self._end_locked(failed)

    def _end(self, run: int) -> None:
        with self._lock:
            if run == self._run:  # not a later run started since: training raised
                self._end_locked(failed=True)

    def _end_locked(self, failed: bool = False) -> None:
        cancel, self._cancel_watch = self._cancel_watch, None
        cleanup, self._cleanup = self._cleanup, None
        if cancel is not None:
            cancel()
        try:
            if cleanup is not None:
                cleanup()
        finally:
            self._close_locked(end={"status": "failed" if failed else "finished"})

    def _close_locked(self, end: Mapping[str, Any] | None = None) -> None:
        """Close the run's readers and run file, and stop the monitor it started.

        ``end``: more fields for the run file's end line (``status``).
        """
        monitor, self.monitor = self.monitor, None
        readers = [self.reader, *self._extra]
        self.reader, self._extra = None, []
        sink, self._sink = self._sink, None
        if monitor is not None and monitor is self.shared:
            monitor.step = None  # its samples after training belong to no step
        elif monitor is not None:
            monitor.stop()  # its last sample, with the last step, reaches the run file
        for reader in readers:
            if reader is not None:
                reader.close()
        if sink is not None:
            sink.close(end=end)

    def snapshot(self, reader: Reader | None = None, repeat: bool = False) -> dict[str, float]:
        """A new window of the run's reader (or ``reader``); empty where nothing samples.

        A key with no sample since the reader's previous window is left out (empty when
        the logging points come faster than ``interval``), so no logging point shows the
        previous window again; ``repeat=True`` keeps its latest value instead (Keras'
        epoch logs, whose columns ``CSVLogger`` fixes at the first epoch).
        """
        reader = reader or self.reader
        return reader.snapshot(repeat) if reader is not None else {}

    @property
    def multi_node(self) -> bool:
        """Whether this run spans several nodes (each logging point is then gathered)."""
        return self.layout is not None and self.layout.multi_node

    def point(self) -> dict[str, float]:
        """The metrics of one logging point, un-prefixed; call it on every rank.

        One node: this process's snapshot (empty where it does not sample, or where no
        sample came since the previous point). Several nodes: one collective gathers each
        node's snapshot (an empty one sends nothing, but every rank still calls it), and
        every rank gets every node's keys under ``node{k}/`` with ``nodes_min/`` and
        ``nodes_max/`` (see :func:`distributed.per_node`); only the logging rank uses them.
        """
        snapshot = self.snapshot()
        if not self.multi_node or self.layout is None:
            return snapshot
        nodes = distributed.gather(snapshot if self.reader is not None else None, self.layout)
        return snapshot if nodes is None else distributed.per_node(nodes)

    def named(self, snapshot: dict[str, float], separator: str = "/") -> dict[str, float]:
        """``snapshot`` filtered by include/exclude, keys prefixed for one logger."""
        out = {}
        names = self._names
        for key, value in snapshot.items():
            name = names.get((key, separator), "")
            if name == "":
                name = names[(key, separator)] = self._name(key, separator)
                if name is not None:
                    self._produced.add(name)
            if name is not None:
                out[name] = value
        return out

    def hidden(self, logs: Mapping[str, Any]) -> dict[str, Any]:
        """``logs`` without the keys this callback added: what the console shows."""
        produced = self._produced
        return {k: v for k, v in logs.items() if k not in produced}

    def metrics(
        self, separator: str = "/", reader: Reader | None = None, repeat: bool = False
    ) -> dict[str, float]:
        """A new snapshot, filtered and prefixed: for frameworks with one log sink."""
        return self.named(self.snapshot(reader, repeat), separator)

    def _name(self, key: str, separator: str) -> str | None:
        node = split_node(key)  # include/exclude see the plain key
        segment, key = (node.segment + separator, node.key) if node else ("", key)
        if self.include and not any(fnmatch.fnmatchcase(key, p) for p in self.include):
            return None
        if any(fnmatch.fnmatchcase(key, p) for p in self.exclude):
            return None
        prefix = self.prefix
        if prefix.endswith("/") and separator != "/":
            prefix = prefix[:-1] + separator
        return sys.intern(prefix + segment + key)

    def due(self, step: int, default_due: bool) -> bool:
        """Whether a step-granularity point is due at ``step`` (counted from 1)."""
        if self.logging_interval != "step":
            return False
        if self.log_every_n_steps is None:
            return default_due
        return step % self.log_every_n_steps == 0


def move_to_front(callbacks: list[Any], callback: Any) -> None:
    """Put ``callback`` first in a framework's callback list.

    Every other callback (reporters, loggers) then sees the keys it adds to ``logs``.
    """
    if callbacks and callbacks[0] is not callback:
        callbacks.remove(callback)
        callbacks.insert(0, callback)


def calling_frame(cls: type, depth: int = 6) -> tuple[Any, FrameType] | None:
    """The framework's callback list calling our hook, and the training call that called it.

    Neither transformers nor Keras hands a callback the list it is in. Among the callers
    of the hook that calls this (``depth`` frames at most), the list's dispatch methods
    are the first whose ``self`` is a ``cls``; the frame above them is the training loop.

    Returns:
        ``(callback list, training loop frame)``, or None when no caller is a ``cls``.

    """
    frame = sys._getframe(1).f_back
    for _ in range(depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if isinstance(obj, cls):
            # Above the list's own methods (on_train_begin -> call_event): the loop.
            while frame is not None and frame.f_locals.get("self") is obj:
                frame = frame.f_back
            return None if frame is None else (obj, frame)
        frame = frame.f_back
    return None
