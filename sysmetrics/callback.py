"""What the framework callbacks share: options, the monitor's lifecycle, key filtering.

No framework is imported here; ``sysmetrics.integrations.<framework>`` wraps this in
each framework's own callback class.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Iterable
from typing import Any

from sysmetrics.monitor import SystemMonitor

LOGGING_INTERVALS = ("step", "epoch")


def _patterns(name: str, value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    for p in items:
        if not isinstance(p, str) or not p:
            raise TypeError(
                f"{name} contains {p!r}: each entry must be a non-empty glob pattern on metric "
                "keys, such as 'cpu' or 'disk.*'"
            )
    return tuple(items)


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
        **monitor_options: Any,
    ) -> None:
        if logging_interval not in LOGGING_INTERVALS:
            raise ValueError(
                f"logging_interval={logging_interval!r} is invalid: use 'step' or 'epoch'"
            )
        if log_every_n_steps is not None and (
            isinstance(log_every_n_steps, bool)
            or not isinstance(log_every_n_steps, int)
            or log_every_n_steps < 1
        ):
            raise ValueError(
                f"log_every_n_steps={log_every_n_steps!r} is invalid: use a positive integer, "
                "or None for the framework's own logging cadence"
            )
        if not isinstance(prefix, str):
            raise TypeError(f"prefix={prefix!r} is invalid: it must be a string (may be empty)")
        self.logging_interval = logging_interval
        self.log_every_n_steps = log_every_n_steps
        self.prefix = prefix
        self.include = _patterns("include", include)
        self.exclude = _patterns("exclude", exclude)
        self.monitor_options: dict[str, Any] = {"interval": interval, **monitor_options}
        # Validate every monitor option now, with the monitor's own messages, and keep
        # that monitor for the first start (its collectors may have run a vendor tool).
        self._unstarted: SystemMonitor | None = SystemMonitor(**self.monitor_options)
        self.monitor: SystemMonitor | None = None
        self._names: dict[tuple[str, str], str | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        # ddp_spawn pickles callbacks; a monitor holds locks and handles, so the copy
        # builds its own at start.
        state = self.__dict__.copy()
        state["_unstarted"] = None
        return state

    def start(self, sample: bool = True) -> None:
        """Start a monitor (only where ``sample``: one process per node)."""
        self.stop()
        monitor, self._unstarted = self._unstarted, None
        if not sample:
            if monitor is not None:
                monitor.stop()  # frees what its collectors opened
            return
        self.monitor = (monitor or SystemMonitor(**self.monitor_options)).start()

    def stop(self) -> None:
        """Stop the monitor if one runs; idempotent."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None

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
                out[name] = value
        return out

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


def caller_self(cls: type) -> Any:
    """The framework's callback list that is calling our hook, if it is a ``cls``.

    That is the ``self`` of the frame two levels up; None when it is something else.
    """
    frame = sys._getframe(2)
    obj = frame.f_locals.get("self")
    return obj if isinstance(obj, cls) else None
