"""Step markers and plain-loop step timing for a program run under ``sysmetrics record``.

``sysmetrics record`` creates a step file with :func:`create` in a private directory of
its own (:func:`private_directory`: ``mkdtemp``, mode 0700, in memory where it can) and
names it in the ``SYSMETRICS_STEP_FILE`` environment variable of the command it runs;
:func:`step` writes the current step into it, and the recorder reads it at every sample.
Where the command wraps its loop in :func:`batches`, :func:`step` also closes a timed
optimizer step on a
:class:`~sysmetrics.steptime.StepClock` and writes the clock's totals into the file,
from which the recorder's monitor makes the ``step.*`` keys (``monitor.step_timing``).

The file (format 2) is :data:`MAGIC`, :data:`WIDTH` bytes holding the step padded with
spaces, padding to an 8-byte boundary, and the timing block at :data:`TIMING`: a
sequence number, the writer's pid, the :class:`~sysmetrics.steptime.StepTotals` (steps,
seconds, wait, samples) and the sequence number again, native 8-byte fields. The writer
stores them in that order, the sequence number one higher than the last in the file;
the reader loads the second sequence number, then the pid and totals, then the first,
and keeps what it read only where the two agree (a write that began after the reader's
first load changed the first sequence number; one that had not ended changed nothing
of the second yet). A read that raced a write is tried again, up to
:data:`STEP_TRIES` times, then the last consistent totals stand: a writer stopped in
the middle of a write never blocks the recorder. (The writer stores with one
``pwritev``, a buffer per part, the reader loads with one ``pread`` per part: each
part is copied after the one before, and each process sees the other's stores in the
order they were made, as on x86-64.)

Both sides use ``pwrite``/``pread`` on a descriptor, never a mapping: a file that the
command truncates (``> $SYSMETRICS_STEP_FILE``) would raise SIGBUS at the next access
of a mapping, killing the process that touched it. A write extends the file again; a
read of a file shorter than :data:`SIZE` is no read (the recorder warns once, see
:class:`_StepReader`). A write that fails (the disk full, the descriptor closed by the
command) warns once, and the process marks no more steps.

One process of the command times steps, so that the block has one writer: the first one
that calls :func:`batches` among those whose ``LOCAL_RANK`` (else ``RANK``) is unset or
0 (``torchrun``'s local rank 0: on each node, that node's recorder gets that rank's
steps), holding an exclusive ``flock`` on the step file until it exits; another process
that tries warns once and only marks its steps (a forked child opens the file anew, so
the lock decides there too). A process that takes the file over after
the previous writer exited continues its totals (the recorder adds them to the
previous writer's: the pid in the block tells them apart).

:func:`step` writes only into a step file: a regular file (not a link) of exactly
:data:`SIZE` bytes that starts with :data:`MAGIC` (or a format 1 file of an older
recorder: :data:`MAGIC_1`, :data:`SIZE_1` bytes, the step only, no timing), owned by
this user, in a directory owned by this user that no one else may enter. Anything else
named by the variable (an unrelated file, a FIFO, a device) is left untouched, with one
:class:`~sysmetrics.SystemMetricsWarning`. Outside ``sysmetrics record`` (the variable
unset) :func:`step` does nothing and :func:`batches` returns the iterable's own iterator.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import struct
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Optional, TypeVar

from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.steptime import BatchSizer, StepClock, StepTotals

try:  # where the file can be locked (not on Windows: there, the ranks rule alone)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from sysmetrics.monitor import SystemMonitor

T = TypeVar("T")

ENV = "SYSMETRICS_STEP_FILE"
MAGIC = b"sysmetrics step file 2\n"  # the first bytes of every step file
MAGIC_1 = b"sysmetrics step file 1\n"  # format 1 (an older recorder): the step only
WIDTH = 20  # bytes of the step; each step overwrites them all, padded with spaces
SIZE_1 = len(MAGIC_1) + WIDTH  # bytes of a format 1 step file, exactly
STEP_AT = len(MAGIC)  # offset of the step (both formats: the headers have one length)
TIMING = (STEP_AT + WIDTH + 7) // 8 * 8  # offset of the timing block: 8-byte aligned
_GAP = b" " * (TIMING - STEP_AT - WIDTH)  # the padding between the step and the block
_SEQ = struct.Struct("=Q")  # a sequence number
_TOTALS = struct.Struct("=qqddd")  # writer's pid, steps, seconds, wait, samples
_BLOCK = struct.Struct("=QqqdddQ")  # the whole block, as the writer stores it
TOTALS_AT = TIMING + _SEQ.size  # offset of the pid and totals
TAIL_AT = TOTALS_AT + _TOTALS.size  # offset of the second sequence number
SIZE = TIMING + _BLOCK.size  # bytes of a step file, exactly
STEP_POLL = 0.1  # longest seconds between two reads of the step file
STEP_TRIES = 20  # reads of the step file at most, until two in a row agree (or seqs)
RANK_VARS = ("LOCAL_RANK", "RANK")  # the first one set says whether this process times
MEMORY_DIR = "/dev/shm"  # memory (tmpfs): a step's write never waits on a disk's journal

# The step file's descriptor is moved to the lowest free number at or above this (where
# the descriptor limit allows), so that a command that closes it and opens other files is
# unlikely to get its number back for another file, which step() would then write into.
HIGH_FD = 512
_fd: int | None = None  # the step file, open, once opened (format 2: the timing lock)
_format_2 = False  # whether it is a format 2 file (it has the timing block)
_tried = False  # whether opening it was tried (it is tried once)
_timing: _Timing | None = None  # this process's step timing, once batches() set it up
_timing_tried = False  # whether setting it up was tried (it is tried once)


def private_directory() -> str:
    """Make the recorder's private directory (``mkdtemp``: mode 0700) and return its path.

    In :data:`MEMORY_DIR` where a directory can be made there: every ``step()`` writes
    the file, and on a disk's filesystem (ext4 under ``/tmp``) a write that changes its
    mtime may wait for the journal. Else in the system's temporary directory.

    Raises:
        OSError: no directory can be made in either.

    """
    with contextlib.suppress(OSError):  # missing, not a directory, full, read-only
        return tempfile.mkdtemp(prefix="sysmetrics-", dir=MEMORY_DIR)
    return tempfile.mkdtemp(prefix="sysmetrics-")


def create(directory: str) -> str:
    """Create the step file in ``directory`` (private to this user) and return its path.

    Raises:
        OSError: the file cannot be created (it exists already, among others).

    """
    path = os.path.join(directory, "step")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, MAGIC + b" " * WIDTH + _GAP + bytes(_BLOCK.size))
    finally:
        os.close(fd)
    return path


def refusal(path: str, fd: int) -> str | None:
    """Why the open file ``fd`` (at ``path``) is not a step file, or None where it is one."""
    st = os.fstat(fd)
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid  # no owners on Windows
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != uid:
        return "it belongs to another user"
    if st.st_size not in (SIZE, SIZE_1):
        return f"it has {st.st_size} bytes, not {SIZE}"
    os.lseek(fd, 0, os.SEEK_SET)
    if os.read(fd, len(MAGIC)) != (MAGIC if st.st_size == SIZE else MAGIC_1):
        return "it does not start with the step file's header"
    parent = os.stat(os.path.dirname(os.path.abspath(path)))
    if hasattr(os, "geteuid") and (parent.st_uid != uid or parent.st_mode & 0o077):
        return "its directory is not private to this user (made by the recorder, mode 0700)"
    return None


def _write(fd: int, parts: list[bytes], offset: int) -> None:
    """Write ``parts`` one after the other at ``offset`` of ``fd``, with one system call."""
    if hasattr(os, "pwritev"):
        os.pwritev(fd, parts, offset)
    else:  # pragma: no cover - Windows: no pwritev (the descriptor is this module's alone)
        os.lseek(fd, offset, os.SEEK_SET)
        os.write(fd, b"".join(parts))


def _read(fd: int, n: int, offset: int) -> bytes:
    """Up to ``n`` bytes at ``offset`` of ``fd`` (fewer where the file is shorter)."""
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, n)  # pragma: no cover


def _open(stacklevel: int = 3) -> int | None:
    global _fd, _format_2, _tried
    _tried = True
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        # O_NONBLOCK: a FIFO never blocks the open; O_NOCTTY: a terminal is never taken.
        flags = os.O_RDWR
        for name in ("O_CLOEXEC", "O_NOFOLLOW", "O_NONBLOCK", "O_NOCTTY"):  # where they exist
            flags |= getattr(os, name, 0)
        fd = os.open(path, flags)
        try:
            why = refusal(path, fd)
            if why is None:  # kept open: step() writes it, batches() locks it to time steps
                _format_2 = os.fstat(fd).st_size == SIZE
                _fd, fd = _high(fd), -1
        finally:
            if fd >= 0:
                os.close(fd)
    except (OSError, ValueError) as exc:  # missing, unreadable, a link
        why = f"it cannot be opened ({exc.strerror if isinstance(exc, OSError) else exc})"
    if why is not None:
        warnings.warn(
            f"sysmetrics: {ENV}={path[:120]!r} names no step file made by sysmetrics record "
            f"({why}); sysmetrics.step() marks no steps in this process",
            SystemMetricsWarning,
            stacklevel=stacklevel,
        )
    return _fd


def _high(fd: int) -> int:
    """``fd`` moved to a number at or above :data:`HIGH_FD` (closing ``fd``); else ``fd``.

    Before any lock is taken on it (closing a descriptor drops the process's locks).
    """
    try:
        import fcntl
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY and soft <= HIGH_FD:
            return fd
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    except (ImportError, OSError, ValueError, AttributeError):  # Windows; no free number
        return fd
    os.close(fd)
    return high


def _unwritable(exc: OSError, stacklevel: int) -> None:
    """A write into the step file failed: warn once, and mark no more steps.

    The descriptor is left open (the command may have closed it and opened another file
    under its number): the process keeps its lock, if it had it, until it exits.
    """
    global _fd, _timing
    _fd = _timing = None  # _tried stays True: step() returns at once from now on
    warnings.warn(
        f"sysmetrics: cannot write the step file ({exc.strerror or exc}); "
        "sysmetrics.step() marks no more steps in this process",
        SystemMetricsWarning,
        stacklevel=stacklevel + 1,
    )


class _Timing:
    """The process's step clock, and the writer of its totals into the step file."""

    __slots__ = ("clock", "fd", "pid", "published", "samples", "seq", "sizer", "world")

    def __init__(self, fd: int, world: int) -> None:
        self.clock = StepClock()
        self.fd = fd
        self.pid = os.getpid()
        self.world = world  # WORLD_SIZE; 0: samples are not counted
        self.samples = 0.0  # samples of the optimizer step under way, whole job
        self.sizer = BatchSizer(
            "sysmetrics: sysmetrics.batches() cannot find the size of a batch",
            "pass batch_size=N to count them",
        )
        last = _read(fd, _SEQ.size, TIMING)  # a previous writer's last: go on from it
        (self.seq,) = _SEQ.unpack(last) if len(last) == _SEQ.size else (0,)
        self.published = self.clock.totals

    def close_step(self, step: bytes | None) -> bool:
        """An optimizer step ends: close it on the clock and write the totals.

        ``step``: the step's text (:data:`WIDTH` bytes), written in the same call, or
        None. Returns whether the file was written (the first step() of a loop only
        starts the timing: nothing is written then).

        Raises:
            OSError: the file cannot be written.

        """
        clock = self.clock
        clock.end(self.samples)
        self.samples = 0.0
        t = clock.totals
        if t is self.published:
            return False
        self.publish(t, step)
        return True

    def publish(self, t: StepTotals, step: bytes | None = None) -> None:
        """Write ``t`` into the timing block: sequence number, pid, totals, sequence number.

        With ``step`` (:data:`WIDTH` bytes), the step first, in the same system call.

        Raises:
            OSError: the file cannot be written.

        """
        self.published = t
        self.seq = seq = self.seq + 1
        mark = _SEQ.pack(seq)
        block = [mark, _TOTALS.pack(self.pid, *t), mark]
        if step is None:
            _write(self.fd, block, TIMING)
        else:
            _write(self.fd, [step, _GAP, *block], STEP_AT)


def _local_rank_zero() -> bool:
    """Whether ``LOCAL_RANK`` (else ``RANK``) is unset or 0 in this process."""
    for name in RANK_VARS:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value) == 0
            except ValueError:
                return False
    return True


def _world_size(stacklevel: int) -> int:
    """``WORLD_SIZE`` (1 where unset); 0, with one warning, where it is no positive integer."""
    value = os.environ.get("WORLD_SIZE")
    if value is None:
        return 1
    try:
        world = int(value)
    except ValueError:
        world = 0
    if world < 1:
        warnings.warn(
            f"sysmetrics: WORLD_SIZE={value[:40]!r} is not a positive integer; "
            "sysmetrics.batches() counts no samples (no step.samplesPerSecond)",
            SystemMetricsWarning,
            stacklevel=stacklevel + 1,
        )
        return 0
    return world


def _setup(stacklevel: int) -> _Timing | None:
    """The process's :class:`_Timing`, where it is the one that times (see the module)."""
    global _timing, _timing_tried
    _timing_tried = True
    fd = _fd
    if fd is None and (_tried or (fd := _open(stacklevel + 1)) is None):
        return None
    if not _format_2 or not _local_rank_zero():  # a format 1 file; another rank
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the process exits
        except OSError as exc:
            warnings.warn(
                "sysmetrics: another process of this command times its steps already "
                f"(the step file is locked: {exc.strerror}); sysmetrics.step() marks this "
                "process's steps without timing them",
                SystemMetricsWarning,
                stacklevel=stacklevel,
            )
            return None
    _timing = _Timing(fd, _world_size(stacklevel))
    return _timing


def _forked() -> None:
    """In a forked child: open the step file anew on its first use, as a new process.

    The inherited descriptor shares the parent's lock: kept, the child (a DataLoader
    worker) could time beside a parent that times, or take the lock a parent that did
    not time yet would then share. Closing the child's copy leaves the parent's lock.
    """
    global _fd, _tried, _timing, _timing_tried
    if _fd is not None:
        with contextlib.suppress(OSError):
            os.close(_fd)
    _fd = _timing = None
    _tried = _timing_tried = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _check_batch_size(value: object) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"batch_size={value!r} is invalid: use the number of samples in each item "
            "(a positive integer), or None to take it from each item"
        )
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"batch_size={value!r} is invalid: use the number of samples in each item "
            "(a positive integer), or None to take it from each item"
        )
    return float(value)


def batches(iterable: Iterable[T], batch_size: Optional[int] = None) -> Iterator[T]:
    """Yield ``iterable``'s items, timing the loop's waits for each, for ``sysmetrics record``.

    ``for batch in sysmetrics.batches(loader): ...; sysmetrics.step(i)``: under the
    recorder, each ``next()`` on ``iterable`` is timed (``time.perf_counter``) as the
    loop's wait for data, each :func:`step` closes an optimizer step, and the recorder's
    run file gets ``step.seconds``, ``step.dataWaitPercent``, ``step.samplesPerSecond``
    and ``step.energyJoules``. Each call starts a new loop (an epoch): the time since the
    previous loop's last step is no step's. With gradient accumulation, call
    :func:`step` once per optimizer step: its waits are all its items' waits.

    Args:
        iterable: the training loop's batches (a ``DataLoader``, a list, a generator).
        batch_size: samples in each item; None (the default) takes it from each item
            (the first dimension of its first tensor or array, see
            :func:`sysmetrics.steptime.batch_size`; an item without one counts none).
            Multiplied by ``WORLD_SIZE`` where it is set: samples of the whole job.

    Without the recorder, or in a process that does not time (see
    :mod:`sysmetrics.stepfile`: ``LOCAL_RANK`` not 0, ...), this returns ``iter(iterable)``:
    nothing is added per item.

    Raises:
        TypeError, ValueError: ``batch_size`` is not a positive number (with or
            without the recorder).

    """
    size = _check_batch_size(batch_size)
    timing = _timing if _timing_tried else _setup(stacklevel=3)
    if timing is None:
        return iter(iterable)
    return _timed(iterable, timing, size)


def _timed(iterable: Iterable[T], timing: _Timing, size: Optional[float]) -> Iterator[T]:
    perf = time.perf_counter
    clock = timing.clock
    world = timing.world
    clock.restart()  # a new loop: its first step runs from here
    start = perf()
    it = iter(iterable)
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        clock.waited(perf() - start)
        if world:
            n = size if size is not None else timing.sizer(item, stacklevel=2)  # the loop's line
            if n:
                timing.samples += n * world
        yield item
        start = perf()


def step(n: int) -> None:
    """Mark the current training step ``n`` for ``sysmetrics record``.

    The first call opens the step file named by ``SYSMETRICS_STEP_FILE``; each call then
    writes ``n`` into it with one ``pwrite`` (about 1 µs). In a loop wrapped in
    :func:`batches`, each call also closes an optimizer step and writes the step
    timing's totals in the same system call (a µs or two more). Without the variable
    every call returns at once; where it names no step file made by the recorder (see
    the module), the file is never written: the first call warns once, the others
    return at once. A write that fails warns once, and later calls return at once. A
    step longer than 20 characters is not written (never an error in the loop); the
    recorder ignores what does not read as an integer.
    """
    fd = _fd
    if fd is None and (_tried or (fd := _open()) is None):
        return
    try:
        data: bytes | None = f"{n:<20}".encode()  # WIDTH bytes: nothing longer is left
    except (TypeError, ValueError):  # not formattable (a tensor of several elements, ...)
        data = None
    if data is not None and len(data) != WIDTH:
        data = None
    timing = _timing
    try:
        if timing is not None and timing.close_step(data):
            return  # the step went with the totals
        if data is not None:
            _write(fd, [data], STEP_AT)
    except OSError as exc:
        _unwritable(exc, stacklevel=2)


class _StepReader(threading.Thread):
    """Sets ``monitor.step`` from the step file every ``STEP_POLL`` s (or interval).

    It also sets ``monitor.step_timing`` to :meth:`timing`, the command's step totals.
    The file is read with ``pread``: a file the command truncated is read short, never
    with a fault. A short read (or one that fails) is no read: the first one warns, the
    step and totals read before stand, and the reads go on (the command's next
    ``step()`` writes the file whole again).

    Raises:
        OSError: the step file cannot be opened.

    """

    def __init__(self, monitor: SystemMonitor, path: str) -> None:
        super().__init__(name="sysmetrics-steps", daemon=True)
        self.monitor = monitor
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # -1 once closed
        self.done = threading.Event()
        # reads run on this thread, the sampling thread (timing()) and in close()
        self._lock = threading.Lock()
        self._warned = False  # whether a short or failed read was said
        self._totals: StepTotals | None = None  # the last consistent totals, as given
        self._seq = 0  # the sequence number they were read at
        self._pid = 0  # the writer they came from
        self._raw = StepTotals(0, 0, 0.0, 0.0)  # its totals, as in the file
        self._base = StepTotals(0, 0, 0.0, 0.0)  # the previous writers' totals
        monitor.step_timing = self.timing

    def _pread(self, n: int, offset: int) -> bytes | None:
        """``n`` bytes at ``offset``, or None (closed, short, failed: the first warns)."""
        if self.fd < 0:  # closed: the last read of close() stands
            return None
        try:
            data = _read(self.fd, n, offset)
        except OSError as exc:
            why = f"cannot read the step file ({exc.strerror or exc})"
        else:
            if len(data) == n:
                return data
            try:
                size = os.fstat(self.fd).st_size
            except OSError:
                size = 0
            if size >= SIZE:  # whole again since the read (a write): as a raced read
                return None
            why = f"the step file was truncated ({size} of {SIZE} bytes left)"
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"sysmetrics: {why}; samples get no new step nor step keys until "
                "sysmetrics.step() writes it again",
                SystemMetricsWarning,
                stacklevel=2,
            )
        return None

    def read(self) -> None:
        """Take the step in the file; what is not an integer is ignored.

        A read that raced a write (two reads that differ) is tried again, up to
        ``STEP_TRIES`` times: a loop that marks a step every microsecond still gets read.
        """
        with self._lock:
            text = self._pread(WIDTH, STEP_AT)
            for _ in range(STEP_TRIES):
                if text is None:
                    return
                again = self._pread(WIDTH, STEP_AT)
                if again == text:
                    with contextlib.suppress(ValueError):
                        self.monitor.step = int(text.decode())
                    return
                text = again

    def timing(self) -> StepTotals | None:
        """The command's step totals: the last consistent ones in the file (any thread).

        None until a process of the command has timed a step. A read that raced a write
        (the sequence numbers differ) is tried again, up to ``STEP_TRIES`` times; then,
        as for totals that are no totals (not finite, negative, going back), the last
        consistent totals stand. The totals of a writer that took the file over (another
        pid) are added to the previous writer's, so they only grow. The step is read
        too (:meth:`read`): a sample with step keys has the step they reached, not the
        one of the last poll.
        """
        self.read()
        with self._lock:
            for _ in range(STEP_TRIES):
                # in this order: see the module
                tail_data = self._pread(_SEQ.size, TAIL_AT)
                totals_data = tail_data and self._pread(_TOTALS.size, TOTALS_AT)
                head_data = totals_data and self._pread(_SEQ.size, TIMING)
                if not (tail_data and totals_data and head_data):
                    return self._totals
                if head_data == tail_data:
                    break
            else:  # a write under way at every try: a writer stopped in the middle
                return self._totals
            (tail,) = _SEQ.unpack(tail_data)
            pid, steps, seconds, wait, samples = _TOTALS.unpack(totals_data)
            if pid == 0 or tail == self._seq:  # nothing written yet, or nothing new
                return self._totals
            self._seq = tail
            raw = StepTotals(steps, seconds, wait, samples)
            if not (
                steps >= 0
                and all(math.isfinite(x) and x >= 0.0 for x in raw[1:])
                and wait <= seconds * (1 + 1e-9)
            ):
                return self._totals
            if pid != self._pid:  # a new writer: its totals count from zero
                self._pid = pid
                self._base = self._totals or self._base
            elif any(new < old for new, old in zip(raw, self._raw)):
                return self._totals
            self._raw = raw
            b = self._base
            self._totals = StepTotals(
                b.steps + steps, b.seconds + seconds, b.wait + wait, b.samples + samples
            )
            return self._totals

    def run(self) -> None:
        wait = min(self.monitor.interval, STEP_POLL)
        while not self.done.wait(wait):
            self.read()

    def close(self) -> None:
        """Stop, read the file a last time and close it."""
        self.done.set()
        if self.ident is not None:  # started
            self.join()
        self.read()
        self.timing()  # the monitor's last sample gets these (the file is closed then)
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
