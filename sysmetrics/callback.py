"""What the framework callbacks share: options, the monitor's lifecycle, key filtering.

No framework is imported here; ``sysmetrics.integrations.<framework>`` wraps this in
each framework's own callback class.
"""

from __future__ import annotations

import difflib
import fnmatch
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import Any

from sysmetrics import _watch
from sysmetrics.monitor import _OPTIONS as MONITOR_OPTIONS
from sysmetrics.monitor import SystemMonitor, one_or_many, positive_int

LOGGING_INTERVALS = ("step", "epoch")


CALLBACK_OPTIONS = (
    "interval",
    "logging_interval",
    "log_every_n_steps",
    "prefix",
    "include",
    "exclude",
    "console",
)
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
        owner: the callback's name, for error messages.
        monitor_options: passed to :class:`~sysmetrics.SystemMonitor` (``disk_paths``,
            ``track_process_tree``, ...).

    Raises:
        TypeError, ValueError: an option is unknown or invalid (raised at construction).

    """

    def __init__(
        self,
        interval: float = 1.0,
        logging_interval: str = "step",
        log_every_n_steps: int | None = None,
        prefix: str = "system/",
        include: str | Iterable[str] | None = None,
        exclude: str | Iterable[str] | None = None,
        console: bool = False,
        owner: str = "SystemMetricsCallback",
        **monitor_options: Any,
    ) -> None:
        _check_unknown(owner, monitor_options)
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
        self.monitor_options: dict[str, Any] = {"interval": interval, **monitor_options}
        # Validate every monitor option now, with the monitor's own messages, and keep
        # that monitor for the first start (its collectors may have run a vendor tool).
        self._unstarted: SystemMonitor | None = SystemMonitor(**self.monitor_options)
        self.monitor: SystemMonitor | None = None
        self._names: dict[tuple[str, str], str | None] = {}
        self._produced: set[str] = set()  # every name ``named()`` has given out
        self._lock = threading.Lock()
        self._run = 0
        self._cancel_watch: Callable[[], None] | None = None
        self._cleanup: Callable[[], None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # ddp_spawn pickles callbacks; a monitor holds locks and handles, so the copy
        # builds its own at start.
        state = self.__dict__.copy()
        state["_unstarted"] = None
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
    ) -> None:
        """Start a run: a monitor where ``sample`` (one process per node).

        Args:
            sample: whether this process samples.
            watch: the frame of the framework's training call; when it leaves its
                thread's stack without :meth:`stop` (the call raised), the run ends.
            cleanup: called once when the run ends, whichever way.

        """
        self.stop()
        with self._lock:
            self._run += 1
            run = self._run
            monitor, self._unstarted = self._unstarted, None
            self._cleanup = cleanup
            if sample:
                self.monitor = (monitor or SystemMonitor(**self.monitor_options)).start()
            elif monitor is not None:
                monitor.stop()  # frees what its collectors opened
            if watch is not None:
                self._cancel_watch = _watch.watch(watch, lambda: self._end(run))

    def stop(self) -> None:
        """End the run: stop the monitor if one runs, run the cleanup; idempotent."""
        with self._lock:
            self._end_locked()

    def _end(self, run: int) -> None:
        with self._lock:
            if run == self._run:  # not a later run started since
                self._end_locked()

    def _end_locked(self) -> None:
        cancel, self._cancel_watch = self._cancel_watch, None
        cleanup, self._cleanup = self._cleanup, None
        monitor, self.monitor = self.monitor, None
        if cancel is not None:
            cancel()
        try:
            if cleanup is not None:
                cleanup()
        finally:
            if monitor is not None:
                monitor.stop()

    def snapshot(self) -> dict[str, float]:
        """The monitor's snapshot (starts a new window); empty where nothing samples."""
        return self.monitor.snapshot() if self.monitor is not None else {}

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

    def metrics(self, separator: str = "/") -> dict[str, float]:
        """A new snapshot, filtered and prefixed: for frameworks with one log sink."""
        return self.named(self.snapshot(), separator)

    def _name(self, key: str, separator: str) -> str | None:
        if self.include and not any(fnmatch.fnmatchcase(key, p) for p in self.include):
            return None
        if any(fnmatch.fnmatchcase(key, p) for p in self.exclude):
            return None
        prefix = self.prefix
        if prefix.endswith("/") and separator != "/":
            prefix = prefix[:-1] + separator
        return sys.intern(prefix + key)

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
