"""What the framework callbacks share: options, the monitor's lifecycle, key filtering.

No framework is imported here; ``sysmetrics.integrations.<framework>`` wraps this in
each framework's own callback class.
"""

from __future__ import annotations

import fnmatch
import os
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from sysmetrics import _watch, distributed
from sysmetrics import options as opts
from sysmetrics._checks import missing_here, one_or_many
from sysmetrics.arrival import RANK_FAMILY, ArrivalTimer, RankBoard, RankSlot
from sysmetrics.console_view import console_view
from sysmetrics.descriptions import split_node
from sysmetrics.errors import OptionError, OptionTypeError, SystemMetricsWarning, quote
from sysmetrics.hang import HangWatch, Progress
from sysmetrics.ledger import Prices
from sysmetrics.live_findings import LiveFindings
from sysmetrics.monitor import SystemMonitor
from sysmetrics.options import CALLBACK_OPTIONS, MONITOR_OPTIONS, CallbackOptions
from sysmetrics.panel import Panel, note_say, wanted
from sysmetrics.reader import Reader, Snapshot
from sysmetrics.sinks.jsonl import JsonlSink, nearest_existing
from sysmetrics.steptime import StepClock
from sysmetrics.training_session import TrainingSession

if TYPE_CHECKING:
    from sysmetrics.findings import Finding

RUN_FILE = "system_metrics.jsonl"  # the run file's name in the run's log directory
RUN_FILE_NODE = "system_metrics.node{node}.jsonl"  # the same, one per node on several nodes


def _elsewhere(message: str) -> None:
    """Warn that a per-machine setting does not hold here, inside a distributed run.

    Called by ``CallbackCore.__init__`` once every option is valid: a construction that
    raises leaves nothing out, so it does not say it does.
    """
    warnings.warn(
        f"sysmetrics: {message}; inside a distributed run this machine leaves it out (the "
        "other ranks keep it), rather than fail on some ranks only",
        SystemMetricsWarning,
        stacklevel=4,  # the user's line: _elsewhere, CallbackCore, the framework's callback
    )


def _disk_paths_here(value: object, left_out: list[str]) -> object:
    """``disk_paths`` without the paths this machine lacks (each said in ``left_out``).

    Entries that are not paths are kept, for the monitor's own ``TypeError``.
    """
    items = one_or_many(value, (str, os.PathLike))
    if items is None:
        return value
    kept = []
    for item in items:
        if isinstance(item, (str, os.PathLike)) and missing_here(os.fspath(item)):
            left_out.append(f"disk_paths contains {os.fspath(item)!r}, which does not exist here")
        else:
            kept.append(item)
    return kept


def check_monitor(value: object) -> SystemMonitor | None:
    """The ``monitor`` option checked: None, or a SystemMonitor that can still sample."""
    if value is None:
        return None
    if not isinstance(value, SystemMonitor):
        raise OptionTypeError(
            "monitor",
            value,
            "use a sysmetrics.SystemMonitor to share, or None for the callback's own",
        )
    if value.stopped:
        raise OptionError(
            "monitor",
            value,
            "pass a new or running one",
            problem="is a stopped SystemMonitor, which cannot sample again",
            subject="monitor=",
        )
    return value


def check_run_file(
    value: object, owner: str, run_dirs: bool, elsewhere: list[str] | None = None
) -> str | bool | None:
    """The ``run_file`` option checked: None, True (the run's log directory) or a path.

    ``owner`` names the callback in the message; ``run_dirs``: whether its framework has
    a run log directory; ``elsewhere`` (inside a distributed run): a path that cannot be
    written here is left out, its problem appended there for a warning, instead of an error.
    """
    if value is None or value is False:
        return None
    if value is True:
        if not run_dirs:
            raise OptionError(
                "run_file",
                value,
                "the framework has no run log directory; give the run file's path",
                problem=f"is invalid for {owner}",
            )
        return True
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path:
        raise OptionTypeError(
            "run_file",
            value,
            f"use a path for the JSON-lines run file, True for {RUN_FILE} in the run's log "
            "directory, or None",
        )
    path = os.path.expanduser(path)
    problem = None
    if os.path.isdir(path):
        problem = OptionError(
            "run_file",
            value,
            f"it is a directory; name the run file in it, such as {os.path.join(path, RUN_FILE)!r}",
        )
    directory = os.path.dirname(os.path.abspath(path))
    existing = nearest_existing(directory)  # missing folders are made at train start
    if problem is None and not os.path.isdir(existing):
        problem = OptionError(
            "run_file",
            value,
            f"its directory {directory!r} cannot be made: {existing!r} is not a directory",
        )
    if problem is None:
        return path
    if elsewhere is None:
        raise problem
    elsewhere.append(f"{problem} here")
    return None


def _check_unknown(owner: str, options: Mapping[str, object]) -> None:
    unknown = opts.unknown(
        options, tuple(opts.BY_NAME), CALLBACK_OPTIONS + MONITOR_OPTIONS, aliases=True
    )
    if unknown is None:
        return
    monitor_only = [o for o in MONITOR_OPTIONS if o not in CALLBACK_OPTIONS]
    raise TypeError(
        f"{owner} got an unknown option {unknown}; its options are: "
        f"{', '.join(CALLBACK_OPTIONS)}, and SystemMonitor's: {', '.join(monitor_only)}"
    )


@dataclass(frozen=True)
class RunSummary:
    """What a callback's latest training run measured: ``callback.summary()`` after it.

    Attributes:
        whole: the whole run, one window from its first sample to its last: each gauge's
            mean over the run, each counter's latest value, each memory gauge's peak in
            ``<key>.max`` (keys and units as the loggers have them, un-prefixed). A
            :class:`~sysmetrics.reader.Snapshot`: ``whole.measured[key]`` is when each
            value was last measured, ``whole.time`` the last sample.
        last: the last window a logging point read (what the loggers got last).

    """

    whole: Snapshot
    last: dict[str, float]


class RunResults:
    """``summary()`` and ``findings()`` of a framework callback: what its core kept."""

    core: CallbackCore

    def summary(self) -> RunSummary | None:
        """What the latest training run measured, once it has ended; None before.

        The whole run's values and the last logged window (:class:`RunSummary`); None too
        on a rank that does not sample.
        """
        return self.core.summary()

    def findings(self) -> list[Finding]:
        """The latest training run's findings, once it has ended: every rule, the whole run.

        Each a :class:`sysmetrics.findings.Finding` (``rule``, ``sentence``, ``evidence``).
        Empty with ``live_findings=False`` and on ranks other than global rank 0.
        """
        return self.core.findings()


class CallbackCore:
    """Options and monitor lifecycle common to every framework callback.

    Args:
        owner: the callback's name, for error messages.
        run_dirs: whether the framework has a run log directory for ``run_file=True``.
        defaults: the framework's own defaults of some options (Keras: ``logging_interval``).
        **options: the callback's options and ``SystemMonitor``'s, each declared in
            :data:`sysmetrics.options.OPTIONS` (:class:`~sysmetrics.options.CallbackOptions`).
            ``monitor=`` excludes ``interval`` and the monitor's options.

    Raises:
        OptionError: an option is invalid (a ValueError; ``OptionTypeError``, also a
            TypeError, for a value of the wrong type), raised at construction.
        TypeError: an option is unknown, or options exclude each other.

    """

    def __init__(
        self,
        owner: str = "SystemMetricsCallback",
        run_dirs: bool = True,
        defaults: Mapping[str, object] | None = None,
        **options: Unpack[CallbackOptions],
    ) -> None:
        _check_unknown(owner, options)
        given: dict[str, Any] = {**(defaults or {}), **options}
        own = {k: given.pop(k) for k in CALLBACK_OPTIONS if k in given}
        interval, monitor = own.pop("interval", None), own.pop("monitor", None)
        monitor_options = given  # SystemMonitor's
        if monitor is not None:
            configured = sorted(monitor_options) + (["interval"] if interval is not None else [])
            if configured and isinstance(monitor, SystemMonitor):  # else: its own error first
                raise TypeError(
                    f"{owner} got {', '.join(configured)} with monitor=: those configure the "
                    "callback's own monitor; configure the monitor you pass instead"
                )
            check_monitor(monitor)
        # Settings of this machine's files and devices may hold on some nodes only: inside
        # a distributed run one that does not hold here is left out with a warning, as
        # an error on some ranks only would leave the others waiting for them.
        elsewhere = distributed.launched()
        left_out: list[str] = []  # warned once every option holds
        self.run_file = check_run_file(
            own.pop("run_file", None), owner, run_dirs, left_out if elsewhere else None
        )
        checked = opts.check(CALLBACK_OPTIONS[1:], own)  # interval is the monitor's
        self.logging_interval: str = checked["logging_interval"]
        self.log_every_n_steps: int | None = checked["log_every_n_steps"]
        self.prefix: str = checked["prefix"]
        self.include: tuple[str, ...] = checked["include"]
        self.exclude: tuple[str, ...] = checked["exclude"]
        self.console: bool = checked["console"]
        self.live_findings: bool = checked["live_findings"]
        self.hang_after: float | None = checked["hang_after"]
        self.panel: bool | None = checked["panel"]  # None: inside a Jupyter kernel only
        self.prices = Prices(  # the cost ledger's: the panel's cost line
            checked["price_per_kwh"],
            dict(checked["price_per_device_hour"] or {}),
            checked["carbon_intensity"],
        )
        self._panel: Panel | None = None  # the current run's live panel, if shown
        self.monitor_options: dict[str, Any] = {
            "interval": 1.0 if interval is None else interval,
            **monitor_options,
        }
        if elsewhere and "disk_paths" in monitor_options:
            self.monitor_options["disk_paths"] = _disk_paths_here(
                monitor_options["disk_paths"], left_out
            )
        self.shared = monitor  # a monitor the user owns: never stopped here
        # Validate every monitor option now, with the monitor's own messages, and keep
        # that monitor for the first start (its collectors may have run a vendor tool).
        self._unstarted: SystemMonitor | None = (
            self._new_monitor(elsewhere, left_out) if monitor is None else None
        )
        for message in left_out:
            _elsewhere(message)
        self._names: dict[tuple[str, str], str | None] = {}  # (key, separator) -> name
        self._produced: set[str] = set()  # every name ``named()`` has given out
        # console=True: the console's short keys (``console_view``), as of the latest window
        self.shown: dict[str, float] = {}
        self.last_window: dict[str, float] = {}  # the latest non-empty window read
        self._lock = threading.Lock()
        self.run: TrainingSession | None = None  # the current (or latest) run
        # The framework's hooks mark the steps on it (training thread); a new one each
        # run, so a shared monitor's step keys count this run's steps only.
        self.clock = StepClock()
        # The hooks announce the step and phase on it (training thread); the hang watch
        # reads it (sysmetrics.hang).
        self.progress = Progress()

    @property
    def monitor(self) -> SystemMonitor | None:
        """The monitor of the current run; None between runs or where none samples."""
        run = self.run
        return None if run is None else run.monitor

    @property
    def reader(self) -> Reader | None:
        """The current run's reader of its monitor; None between runs."""
        run = self.run
        return None if run is None else run.reader

    @property
    def layout(self) -> distributed.Layout | None:
        """The latest run's ranks and nodes; None before the first."""
        run = self.run
        return None if run is None else run.layout

    def _new_monitor(self, elsewhere: bool, left_out: list[str]) -> SystemMonitor:
        """The callback's own monitor, checking every option with the monitor's messages.

        Inside a distributed run, ``gpu_ids`` naming a GPU this machine lacks (or with no
        NVIDIA GPU here) watches no NVIDIA GPU here, said in ``left_out`` for a warning.
        """
        options = self.monitor_options
        try:
            return SystemMonitor(**options)
        except OptionError as exc:
            if (
                not elsewhere
                or options.get("gpu_ids") is None
                or exc.option != "gpu_ids"
                or isinstance(exc, TypeError)  # not a list: wrong on every node
            ):
                raise
            options["gpu_ids"] = []
            watched = SystemMonitor(**options)
            left_out.append(f"{exc}; no NVIDIA GPU is watched here")
            return watched

    def __getstate__(self) -> dict[str, Any]:
        # ddp_spawn pickles callbacks; a monitor holds locks and handles, so the copy
        # builds its own at start.
        state = self.__dict__.copy()
        state["_unstarted"] = state["shared"] = None  # a shared monitor stays in its process
        state["run"] = None
        state["_lock"] = state["_panel"] = None
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
        say: Callable[[str], None] | None = None,
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
            say: where the findings are told live (the framework's logging), on the
                process that logs (global rank 0); None elsewhere. Only a process that
                samples tells them (its node's findings), unless ``live_findings=False``.

        """
        self.stop()
        layout = distributed.layout(node)  # a collective: before anything may fail
        with self._lock:
            self.clock = StepClock()
            run = self.run = TrainingSession(layout, self.shared)
            own, self._unstarted = self._unstarted, None
            run.cleanup = cleanup
            try:
                if sample:
                    self._open(run, own, run_dir, step)
                    if say is not None and run.monitor is not None:
                        say = self._show_panel(run.monitor, say)
                    if say is not None and self.live_findings and run.monitor is not None:
                        run.findings = LiveFindings(run.monitor, say).start()
                elif own is not None:
                    own.stop()  # frees what its collectors opened
                if watch is not None:
                    run.cancel_watch = _watch.watch(watch, lambda: self._end(run))
            except RuntimeError as exc:  # "can't start new thread" (pids.max, ulimit -u)
                # Training goes on exactly as without the callback: no metrics from this
                # process, but its hooks stay, so in a multi-node run it still joins every
                # gather (sending nothing) and no other rank waits for it.
                if own is not None:
                    own.stop()
                run.close()
                self._close_panel(run)
                warnings.warn(
                    f"sysmetrics: the system monitor could not start, training goes on "
                    f"without system metrics from this process: {type(exc).__name__}: "
                    f"{quote(str(exc))}",
                    SystemMetricsWarning,
                    stacklevel=3,
                )
                return
            self._watch_hangs(run, say if self.live_findings else None, step)

    def _watch_hangs(
        self, run: TrainingSession, say: Callable[[str], None] | None, step: int | None
    ) -> None:
        """Start the run's hang watch (every rank; under the lock, on the training thread).

        In a process group of several ranks it publishes this rank's progress over the
        job's store (:mod:`sysmetrics.progress`); global rank 0 says the job's view.
        """
        if self.hang_after is None:
            return
        from sysmetrics.progress import Channel

        self.progress = Progress()
        self.progress.step = step
        dist = distributed._dist()
        channel = None
        if dist is not None:
            channel = Channel(
                dist.get_rank(), dist.get_world_size(), run.layout.node, self.hang_after
            )
        sink = run.sink
        watch = HangWatch(
            self.hang_after,
            self.clock.read,
            self.progress,
            threading.get_ident(),
            say=say,
            monitor=run.monitor,
            record=sink.stall if sink is not None else None,
            channel=channel,
        )
        try:
            watch.start()
        except RuntimeError as exc:  # "can't start new thread": training goes on
            warnings.warn(
                "sysmetrics: the hang watch could not start, training goes on without it: "
                f"{type(exc).__name__}: {quote(str(exc))}",
                SystemMetricsWarning,
                stacklevel=4,
            )
            return
        run.hang = watch

    def watch_arrival(self, model: Any, forward: bool = False) -> None:
        """Time this rank's steps and its arrival at the all-reduce (:mod:`sysmetrics.arrival`).

        Called by the adapters after :meth:`start`, on every rank, with the model whose
        parameters train (``forward``: hook its forward too, where the framework has no
        hook before the backward). Only in a process group of several ranks; a slot that
        cannot be made, or a model that cannot be hooked, leaves it out with one
        :class:`~sysmetrics.SystemMetricsWarning`.
        """
        run, dist = self.run, distributed._dist()
        if run is None or dist is None or model is None or run.arrival is not None:
            return
        try:
            slot = RankSlot(dist.get_rank())
        except (OSError, ValueError) as exc:
            warnings.warn(
                "sysmetrics: this rank's step slot cannot be made, so its node sees no "
                f"rank.{{r}}.step keys of it: {type(exc).__name__}: {quote(str(exc))}",
                SystemMetricsWarning,
                stacklevel=3,
            )
            return
        run.arrival = ArrivalTimer(self.clock, slot)
        run.arrival.attach(model, forward)

    def forward_end(self) -> None:
        """The framework starts the backward: the forward ended (for the arrival timing)."""
        run = self.run
        arrival = run.arrival if run is not None else None
        if arrival is not None:
            arrival.forward_end()

    def _open(
        self, run: TrainingSession, own: SystemMonitor | None, run_dir: str | None, step: int | None
    ) -> None:
        """Open the run's monitor, reader and run file (under the lock).

        The run file is opened before the monitor starts, so it gets the first sample
        (the one the loggers get at the first logging point), stamped with ``step``.
        """
        if run.shared is None:
            monitor = own or SystemMonitor(**self.monitor_options)
            run.reader = monitor.default_reader
        else:
            monitor = run.shared
            if monitor.stopped:
                warnings.warn(
                    "sysmetrics: the monitor given to the callback was stopped; this run "
                    "logs no system metrics",
                    SystemMetricsWarning,
                    stacklevel=4,
                )
                return
            run.reader = monitor.reader()
        run.monitor = monitor
        run.whole = monitor.reader()  # the whole run, for summary() at its end
        if step is not None:
            monitor.step = step
        # The step.* keys come from the hooks' marks; the run unsets it on a shared
        # monitor at its end (if it is still this run's).
        monitor.step_timing = run.step_timing = self.clock.read
        if distributed._dist() is not None:  # the node's ranks' step keys with this one's
            self.clock.peers = run.board = RankBoard(run.layout.local_pids)
        monitor.job.watch(run.layout.local_pids)  # every rank on this node
        self._open_run_file(run, monitor, run_dir)
        monitor.start()  # idempotent; the user stops a shared one

    def _open_run_file(
        self, run: TrainingSession, monitor: SystemMonitor, run_dir: str | None
    ) -> None:
        """The run's run file; on several nodes one per node under ``run_file=True``."""
        layout = run.layout
        path = self.run_file
        if path is True:
            name = RUN_FILE_NODE.format(node=layout.node) if layout.multi_node else RUN_FILE
            path = os.path.join(run_dir or ".", name)
        if path:
            try:  # its missing folders are made, as the loggers make theirs
                run.sink = JsonlSink(monitor, path, node=layout.node, multi_node=layout.multi_node)
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
            run = self.run
            if run is None or run.monitor is None:
                return None
            reader = run.monitor.reader()
            run.extra.append(reader)
            return reader

    def set_step(self, step: int) -> None:
        """Stamp the training step on the monitor's samples (for run files); cheap.

        Called where a training batch starts: back in the ``train`` phase, for the hang
        watch.
        """
        progress = self.progress
        progress.step = step
        if progress.phase != "train":
            progress.training()
        monitor = self.monitor
        if monitor is not None:
            monitor.step = step

    def stop(self, failed: bool = False) -> None:
        """End the run: readers, run file, the monitor it started, the cleanup; idempotent.

        ``failed``: training raised (the run file's ``end`` line says ``"failed"``).
        """
        with self._lock:
            if self.run is not None:
                self.run.end(failed)
                self._close_panel(self.run)

    def _end(self, run: TrainingSession) -> None:
        with self._lock:
            if run is self.run:  # not a later run started since: training raised
                run.end(failed=True)
                self._close_panel(run)

    def _show_panel(
        self, monitor: SystemMonitor, say: Callable[[str], None]
    ) -> Callable[[str], None]:
        """Show the live panel where ``panel`` says (None: in a Jupyter kernel); the ``say`` to use.

        The panel shows the latest finding said, so ``say`` also goes to it.
        """
        if not wanted(self.panel, stacklevel=5):
            return say
        self._panel = Panel(monitor, prices=self.prices).start()
        return note_say(self._panel, say)

    def _close_panel(self, run: TrainingSession) -> None:
        """Leave the run's summary where its live panel was (after ``run.end``)."""
        panel, self._panel = self._panel, None
        if panel is not None:
            panel.close(run.summary, [f.sentence for f in run.found])

    def snapshot(self, reader: Reader | None = None, repeat: bool = False) -> dict[str, float]:
        """A new window of the run's reader (or ``reader``); empty where nothing samples.

        A key with no sample since the reader's previous window is left out (empty when
        the logging points come faster than ``interval``), so no logging point shows the
        previous window again; ``repeat=True`` keeps its latest value instead (Keras'
        epoch logs, whose columns ``CSVLogger`` fixes at the first epoch).
        """
        reader = reader or self.reader
        if reader is None:
            return {}
        window = reader.snapshot(repeat)
        if window:
            self.last_window = window
            if self.console:
                self.shown.update(console_view(window, self._passes))
        return window

    def summary(self) -> RunSummary | None:
        """What the latest training run measured, once it has ended; None before.

        None also where this process did not sample (not its node's local rank 0).
        """
        run = self.run
        if run is None or run.summary is None or run.monitor is not None:
            return None
        return RunSummary(whole=run.summary, last=dict(self.last_window))

    def findings(self) -> list[Finding]:
        """The findings of the latest run's last evaluation (all rules, the whole run).

        Empty while it runs, with ``live_findings=False``, and on a process that does not
        tell them (only global rank 0 of a sampling node does).
        """
        run = self.run
        return [] if run is None or run.monitor is not None else list(run.found)

    def _passes(self, key: str) -> bool:
        """Whether include/exclude let ``key`` through (to the loggers, so to the console)."""
        name = self._names.get((key, "/"), "")
        if name == "":
            name = self._names[(key, "/")] = self._name(key, "/")
            if name is not None:
                self._produced.add(name)
        return name is not None

    def console_logs(self, logs: Mapping[str, Any]) -> dict[str, Any]:
        """What the console shows of ``logs``.

        The framework's own keys, without the ones this callback added, and with
        ``console=True`` the console's short keys
        (:data:`sysmetrics.console_view.CONSOLE_KEYS`) of the latest window.
        """
        shown = self.hidden(logs)
        if self.console:
            shown.update(self.shown)
        return shown

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
        # Each rank's series only where include names them: the node's aggregates by default.
        if key.startswith(RANK_FAMILY) and not any(
            fnmatch.fnmatchcase(key, p) for p in self.include
        ):
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
