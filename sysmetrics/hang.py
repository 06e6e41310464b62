"""Hangs told live: the step has not advanced for long, and where the training thread is.

A :class:`HangWatch` runs on every rank of a callback's run, on a daemon thread of its
own (``sysmetrics-hang``), and looks every ``LOOK_EVERY`` s at the run's step totals
(:class:`~sysmetrics.steptime.StepTotals`, the callback's step clock) and at the phase
the framework announced through the callback's hooks (:class:`Progress`: ``train``,
``evaluation``, ``checkpoint``). The step is *stalled* when it has not advanced, in the
``train`` phase, for ``max(hang_after, P99_FACTOR x the p99 step time so far)`` s
(:func:`threshold`; before the first step has completed, ``FIRST_STEP_FACTOR x
hang_after``: the first step compiles and warms up). Time in an announced evaluation or
checkpoint does not count: the stall's clock starts again when training resumes.

Each step time that enters the p99 is the mean over the steps completed between two looks
(``LOOK_EVERY`` s apart): exact for steps longer than that, an average of the shorter ones.

When a stall begins, the watch reads the training thread's Python stack from the
sampling side (``sys._current_frames()``: the loop is never stopped) and classifies it
(:func:`classify`): in a collective (``torch.distributed``: the operation's name),
fetching data (a DataLoader's next, its worker queue), saving a checkpoint, evaluating,
in backward, or elsewhere (file:line of the innermost frame of the user's code). Then,
once per stall:

- the process that tells the findings (global rank 0) says one line (:func:`stall_line`;
  with several ranks, the job's view from every rank's progress, see
  :mod:`sysmetrics.progress`);
- the run file gets a ``stall`` record with a bounded stack excerpt (``STACK_FRAMES``
  frames, ``STACK_CHARS`` characters at most; :func:`sysmetrics.runfile.stall_line`);
- the monitor's :attr:`~sysmetrics.SystemMonitor.stall` says since when the step is
  stalled (the Prometheus exporter's ``sysmetrics_training_stalled_seconds``) until the
  step advances again.

Any error of the watch disables it with one :class:`~sysmetrics.SystemMetricsWarning`;
training never sees it.
"""

from __future__ import annotations

import bisect
import os
import sys
import sysconfig
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, Optional

from typing_extensions import Protocol

from sysmetrics.errors import SystemMetricsWarning, quote
from sysmetrics.steptime import StepTotals

if TYPE_CHECKING:
    from sysmetrics.monitor import SystemMonitor

LOOK_EVERY = 1.0  # s between two looks at the step
P99_FACTOR = 5.0  # a stall: no step for this many times the p99 step time (or hang_after)
FIRST_STEP_FACTOR = 10.0  # before the first step completes: this many times hang_after
STEP_TIMES = 10_000  # step times kept for the p99 (the latest)
MAX_FRAMES = 128  # frames of the training thread's stack read at most (innermost first)
STACK_FRAMES = 12  # frames kept in the run file's excerpt (innermost first)
STACK_CHARS = 2_000  # characters of the excerpt at most
CLOSE_WAIT = 1.0  # s close() waits for the watch's thread

PHASES = ("train", "evaluation", "checkpoint")  # what the framework's hooks announce


def threshold(hang_after: float, p99: float | None) -> float:
    """Seconds without a step that make a stall: ``max(hang_after, P99_FACTOR x p99)``.

    ``p99``: the p99 step time so far (s); None before the first step, when the
    threshold is ``FIRST_STEP_FACTOR x hang_after``.
    """
    if p99 is None:
        return FIRST_STEP_FACTOR * hang_after
    return max(hang_after, P99_FACTOR * p99)


class Progress:
    """Where the training loop is, as the framework's hooks announce it (training thread).

    ``step``: the training step the hooks last set (None before); ``phase``: one of
    :data:`PHASES`; ``since``: when the phase was announced (``time.monotonic()``).
    Setting them costs an attribute store or two; the watch reads them.
    """

    __slots__ = ("phase", "since", "step")

    def __init__(self) -> None:
        self.step: int | None = None
        self.phase = "train"
        self.since = time.monotonic()

    def announce(self, phase: str) -> None:
        """The loop enters ``phase`` (one of :data:`PHASES`) now."""
        self.since = time.monotonic()
        self.phase = phase

    def training(self) -> None:
        """A training batch starts: back in the ``train`` phase if it was not."""
        if self.phase != "train":
            self.announce("train")


class StallClock:
    """Decides, look by look, whether the step is stalled (pure: times are given).

    Args:
        hang_after: the option ``hang_after``: seconds without a step, at least.

    """

    def __init__(self, hang_after: float) -> None:
        self.hang_after = hang_after
        self._times: list[float] = []  # step times, sorted (the latest STEP_TIMES)
        self._order: deque[float] = deque()  # the same, oldest first
        self._steps = 0
        self._seconds = 0.0
        self._moved: float | None = None  # when the step (or the phase) last moved

    @property
    def moved(self) -> float | None:
        """When the step (monotonic s) last moved as the looks saw it; None before any look."""
        return self._moved

    def p99(self) -> float | None:
        """The p99 of the step times seen so far (s); None before the first."""
        times = self._times
        if not times:
            return None
        return times[min(len(times) - 1, int(0.99 * len(times)))]

    def look(self, totals: StepTotals | None, phase: str, since: float, now: float) -> float | None:
        """Seconds the step has been stalled at ``now``, or None where it is not (yet).

        ``totals``: the step clock's totals; ``phase`` and ``since``: the phase announced
        and when (monotonic s).
        """
        if totals is None:  # no steps known (a command that never calls sysmetrics.step)
            return None
        steps, seconds = totals.steps, totals.seconds
        if self._moved is None:
            self._moved = now
        if steps > self._steps:
            mean = (seconds - self._seconds) / (steps - self._steps)
            self._steps, self._seconds = steps, seconds
            self._moved = now
            if mean > 0.0:
                bisect.insort(self._times, mean)
                self._order.append(mean)
                if len(self._order) > STEP_TIMES:
                    old = self._order.popleft()
                    del self._times[bisect.bisect_left(self._times, old)]
        if phase != "train":
            return None
        still = now - max(self._moved, since)
        return still if still >= threshold(self.hang_after, self.p99()) else None


# -- where the training thread is ---------------------------------------------------------


class Frame(NamedTuple):
    """One frame of a stack: its file, line and function."""

    file: str
    line: int
    function: str


class Where(NamedTuple):
    """Where a thread is: ``kind`` and ``what`` (see :func:`classify`)."""

    kind: str  # collective, data, checkpoint, evaluation, backward, elsewhere, kernel, unknown
    what: str  # the collective ("all_reduce"), "file.py:42 (function)", or ""

    def phrase(self, many: bool = False) -> str:
        """How a line says it after the rank: ``waits ... in all_reduce``, ``is ... fetching data``.

        Returns ``"{verb} at step {{step}} {where}"`` to be formatted with the step;
        ``many``: the verb for several ranks.
        """
        be, wait = ("are", "wait") if many else ("is", "waits")
        if self.kind == "collective":
            return f"{wait} at step {{step}} in {self.what}"
        if self.kind == "backward":
            return f"{be} at step {{step}} in backward"
        if self.kind == "kernel":  # what: "do_select (state S, sleeping)"
            return f"{be} at step {{step}}; the kernel says its main thread waits in {self.what}"
        where = {
            "data": "fetching data",
            "checkpoint": "saving a checkpoint",
            "evaluation": "evaluating",
            "elsewhere": f"at {self.what}",
        }.get(self.kind, "")
        return f"{be} at step {{step}}" + (f" {where}" if where else "")


UNKNOWN = Where("unknown", "")

_SEP = os.sep
_TORCH_DIST = f"torch{_SEP}distributed{_SEP}"
_TORCH_DATA = f"torch{_SEP}utils{_SEP}data{_SEP}"
_TORCH_AUTOGRAD = f"torch{_SEP}autograd{_SEP}"
# Wrappers in torch.distributed whose name is no collective's.
_NOT_OPS = frozenset({"wrapper", "_fn", "inner", "wait", "__call__", "_wait", "forward"})
_SAVES = frozenset({"save", "_save", "save_checkpoint", "_save_checkpoint", "save_file"})
_EVALS = frozenset({"evaluate", "evaluation_loop", "prediction_step", "_evaluation_step"})


def _library_roots() -> tuple[str, ...]:
    """The directories of the standard library and installed packages (not the user's)."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    here = os.path.dirname(os.path.abspath(__file__))
    return tuple(sorted(r.rstrip(_SEP) + _SEP for r in roots | {here} if r))


_LIBRARY = _library_roots()


def _user(file: str) -> bool:
    """Whether ``file`` is the user's code: not the standard library, a package or sysmetrics."""
    return not (
        file.startswith(_LIBRARY)
        or file.startswith("<")
        or f"{_SEP}site-packages{_SEP}" in file
        or f"{_SEP}dist-packages{_SEP}" in file
    )


def classify(frames: Sequence[Frame]) -> Where:
    """Where a thread whose stack is ``frames`` (innermost first) is.

    In this order: ``collective`` (a ``torch.distributed`` frame: ``what`` is the
    outermost such function that is no wrapper, ``all_reduce``, ``barrier``, ...; a
    ``Work.wait`` called from the user's code reads ``wait``); ``data`` (a
    ``torch.utils.data`` frame: a DataLoader's next, its worker queue); ``checkpoint``
    (``torch.save`` or a framework's ``save_checkpoint``); ``evaluation`` (a framework's
    evaluation loop); ``backward`` (autograd: under DDP, where gradients are
    all-reduced); else ``elsewhere``, ``what`` the innermost frame of the user's code as
    ``file.py:line (function)``; ``unknown`` for an empty stack.
    """
    if not frames:
        return UNKNOWN
    dist = [f for f in frames if _TORCH_DIST in f.file]
    if dist:
        ops = [f.function for f in dist if f.function not in _NOT_OPS]
        return Where("collective", ops[-1] if ops else dist[-1].function)
    if any(_TORCH_DATA in f.file for f in frames):
        return Where("data", "")
    for f in frames:
        if f.function in _SAVES and (f"torch{_SEP}serialization" in f.file or not _user(f.file)):
            return Where("checkpoint", f.function)
    for f in frames:
        if not _user(f.file) and (f.function in _EVALS or "evaluation_loop" in f.file):
            return Where("evaluation", f.function)
    if any(_TORCH_AUTOGRAD in f.file and f.function.endswith("backward") for f in frames):
        return Where("backward", "")
    user = next((f for f in frames if _user(f.file)), frames[0])
    return Where("elsewhere", f"{os.path.basename(user.file)}:{user.line} ({user.function})")


def stack(thread_id: int) -> list[Frame]:
    """The Python stack of the thread ``thread_id`` now, innermost first (``MAX_FRAMES``).

    Read from another thread (``sys._current_frames()``): the thread runs on; empty where
    it has ended.
    """
    frame = sys._current_frames().get(thread_id)
    out: list[Frame] = []
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        out.append(Frame(code.co_filename, frame.f_lineno or 0, code.co_name))
        frame = frame.f_back
    return out


_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped",
           "t": "stopped by a debugger", "Z": "a zombie", "X": "dead"}  # fmt: skip


def kernel_where(pid: int, proc: str = "/proc") -> Where:
    """What the kernel says of process ``pid``'s main thread: ``/proc/PID/wchan`` and state.

    For a process that is not ours to inspect (the command under ``sysmetrics record``):
    ``Where("kernel", "do_select (state S, sleeping)")``; ``wchan`` reads ``0`` while it
    runs, and may read ``0`` or be unreadable where the kernel hides it. Bounded reads.
    """
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read(4096).decode("ascii", "replace")
        state = stat[stat.rindex(")") + 2 :].split(" ", 1)[0]
    except (OSError, ValueError):
        return UNKNOWN
    try:
        with open(f"{proc}/{pid}/wchan", "rb") as f:
            wchan = f.read(128).decode("ascii", "replace").strip()
    except OSError:
        wchan = ""
    said = f"state {state}, {_STATES.get(state, 'unknown')}"
    if not wchan or wchan == "0" or not wchan.replace("_", "").replace(".", "").isalnum():
        return Where("kernel", f"no kernel function ({said})")
    return Where("kernel", f"{wchan} ({said})")


def excerpt(frames: Sequence[Frame]) -> list[str]:
    """The run file's excerpt: ``file:line function`` of the innermost ``STACK_FRAMES``.

    ``STACK_CHARS`` characters in all at most (a long path is cut at its start).
    """
    out: list[str] = []
    left = STACK_CHARS
    for f in frames[:STACK_FRAMES]:
        text = f"{f.file}:{f.line} {f.function}"
        if len(text) > 200:
            text = "..." + text[-197:]
        if len(text) > left:
            break
        out.append(text)
        left -= len(text)
    return out


STALL_HEAD = "sysmetrics: no step for {seconds:.0f} s: "  # how every stall line begins


def job_ranks(line: str) -> str:
    """Where each rank was, from a job's stall line (:func:`sysmetrics.progress.job_line`).

    What follows :data:`STALL_HEAD`: ``ranks 3 and 5 are at step 1200 fetching data
    (node 1); the other 6 ranks wait at step 1201 in all_reduce``.
    """
    head = STALL_HEAD.split("{", 1)[0]
    return line[line.index(": ", len(head)) + 2 :] if line.startswith(head) else line


def stall_line(seconds: float, step: int | None, where: Where) -> str:
    """The line said for one process's stall: ``sysmetrics: no step for 75 s: ...``."""
    said = where.phrase().format(step=step if step is not None else "?")
    who = "the command" if where.kind == "kernel" else "the training thread"
    return STALL_HEAD.format(seconds=seconds) + f"{who} {said}"


# -- the watch ------------------------------------------------------------------------------


class ProgressChannel(Protocol):
    """Every rank's progress, as the watch uses it (:class:`sysmetrics.progress.Channel`)."""

    every: float  # s between two records

    def open(self) -> None:
        """Connect (on the watch's thread)."""

    def due(self, now: float) -> bool:
        """Whether a record is due at ``now`` (monotonic s)."""

    def publish(
        self, step: int | None, phase: str, where: Where | None, now: float, force: bool = False
    ) -> None:
        """Publish this rank's record, when due (or now, ``force``)."""

    def job_line(self, seconds: float) -> str | None:
        """Rank 0's line for a stall of ``seconds``; None elsewhere."""

    @property
    def behind(self) -> dict[int, str]:
        """Rank 0, after :meth:`job_line`: the ranks behind and where (``progress.behind``)."""

    def close(self) -> None:
        """Drop the connection."""


@dataclass
class StepStall:
    """A stall under way, as this process sees it (:attr:`SystemMonitor.stall`)."""

    since: float  # when the step last moved (time.time(), s since the epoch)
    step: int | None  # the step it stalled at
    where: Where  # where the training thread was when it was found
    # Rank 0 of several: the ranks that hold the job back, and where ({rank: kind});
    # the Prometheus exporter serves them (sysmetrics_training_rank_behind_seconds).
    behind: dict[int, str] = field(default_factory=dict)


class HangWatch(threading.Thread):
    """Looks for stalls on its own thread (see the module); :meth:`close` ends it.

    Args:
        hang_after: seconds (the option ``hang_after``).
        totals: the run's step totals (a step clock's ``read``).
        progress: the phase and step the hooks announce.
        thread_id: the training thread (``threading.get_ident()`` there).
        say: where the stall line is said (the process that tells findings); None: not here.
        monitor: the monitor whose ``stall`` to set, and whose run file gets the record.
        record: writes a ``stall`` record to the run file (``JsonlSink.record``); None: none.
        channel: every rank's progress (:class:`sysmetrics.progress.Channel`); None on
            one process.
        pid: watch this other process instead of a thread of this one (``sysmetrics
            record``'s command): where it is is what the kernel says (:func:`kernel_where`).
        step: where the step is read (``monitor.step``), instead of ``progress.step``.

    """

    def __init__(
        self,
        hang_after: float,
        totals: Callable[[], Optional[StepTotals]],
        progress: Progress,
        thread_id: int,
        say: Callable[[str], None] | None = None,
        monitor: SystemMonitor | None = None,
        record: Callable[[dict[str, object]], None] | None = None,
        channel: ProgressChannel | None = None,
        pid: int | None = None,
        step: Callable[[], int | None] | None = None,
    ) -> None:
        super().__init__(name="sysmetrics-hang", daemon=True)
        self._pid = pid  # another process (record's command): the kernel's view of it
        self._step = step  # the step, where the progress does not say it
        self.clock = StallClock(hang_after)
        self._totals = totals
        self.progress = progress
        self._thread_id = thread_id
        self._say = say
        self._monitor = monitor
        self._record = record
        self.channel = channel
        self._done = threading.Event()
        self.stall: StepStall | None = None
        self.said: list[str] = []  # the lines said (one per stall)

    def run(self) -> None:
        """Look every ``LOOK_EVERY`` s until :meth:`close`, or the first error."""
        try:
            if self.channel is not None:
                self.channel.open()  # and a first record: a rank that dies early is known
                self.channel.publish(
                    self.progress.step, self.progress.phase, None, time.monotonic(), force=True
                )
            while not self._done.wait(LOOK_EVERY):
                self.look()
        except Exception as exc:  # the watch must never reach training
            self._set(None)
            warnings.warn(
                "sysmetrics: the hang watch stopped, training goes on without it: "
                f"{type(exc).__name__}: {quote(str(exc))}",
                SystemMetricsWarning,
                stacklevel=1,
            )
        finally:
            if self.channel is not None:
                self.channel.close()

    def look(self) -> None:
        """One look: the step, the stall, the progress published (see the module)."""
        progress = self.progress
        now = time.monotonic()
        stalled = self.clock.look(self._totals(), progress.phase, progress.since, now)
        step = progress.step if self._step is None else self._step()
        channel = self.channel
        if stalled is None:
            if self.stall is not None:
                self._set(None)
            if channel is not None and channel.due(now):
                # Where it is, once its step has not moved for a publishing period: rank 0
                # may find a stall before this rank's own threshold passes.
                moved = self.clock.moved
                slow = moved is not None and now - moved >= channel.every
                channel.publish(step, progress.phase, self._where()[0] if slow else None, now)
            return
        if self.stall is not None:
            if channel is not None:
                channel.publish(step, progress.phase, self.stall.where, now)
            return
        where, frames = self._where()
        self._set(StepStall(time.time() - stalled, step, where))
        if channel is not None:
            channel.publish(step, progress.phase, where, now, force=True)
        line = stall_line(stalled, step, where)
        # Rank 0 reads every rank's record: its line, and where each rank was for the
        # run file's record (the stall finding says it).
        job = channel.job_line(stalled) if channel is not None else None
        if job is not None and channel is not None:
            line = job
            self._set(replace(self.stall, behind=dict(channel.behind)) if self.stall else None)
        if self._record is not None:
            self._record(
                {
                    "time": round(time.time(), 6),
                    "seconds": round(stalled, 3),
                    "step": step,
                    "kind": where.kind,
                    "where": where.what,
                    "stack": excerpt(frames),
                    **({"said": line} if self._say is not None else {}),
                    **({"ranks": job_ranks(job)} if job is not None else {}),
                }
            )
        if self._say is not None:
            self.said.append(line)
            self._say(line)

    def _where(self) -> tuple[Where, list[Frame]]:
        """Where the training thread (or the other process) is now, and its stack."""
        if self._pid is not None:
            return kernel_where(self._pid), []
        frames = stack(self._thread_id)
        return classify(frames), frames

    def _set(self, stall: StepStall | None) -> None:
        self.stall = stall
        if self._monitor is not None:
            self._monitor.stall = stall

    def close(self) -> None:
        """Stop looking (at once) and wait for the thread (``CLOSE_WAIT`` s at most)."""
        self._done.set()
        if self.ident is not None and self is not threading.current_thread():
            self.join(CLOSE_WAIT)
        self._set(None)
