"""The job's processes and their descendants: ``cpu``, threads, resident and shared memory.

The job is the training process, or every local rank of a distributed run.
"""

from __future__ import annotations

import errno
import logging
import math
import threading
import time
import warnings

from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors.base import BaseCollector, MiB
from sysmetrics.errors import SystemMetricsWarning, quote
from sysmetrics.host import HostSource, Job, ProcfsSource, ProcStat, TreeProcess, process_tree
from sysmetrics.host.procfs import runqueue_wait

log = logging.getLogger("sysmetrics")

__all__ = ["ProcessCollector", "process_tree"]  # process_tree: from sysmetrics.host

_SAME = 1e-6  # seconds: start times closer than this are the same clock tick
# Errors of a PSS read that last (the process is another user's, or the system has no
# smaps_rollup): the keys are left out with one debug line, no warning. Anything else
# (out of descriptors or memory, no thread to read on) passes: warned once, retried.
_LASTING = frozenset({errno.EACCES, errno.EPERM, errno.ENOSYS, errno.ENOENT})


def _walk_time() -> float:
    """Seconds the calling thread has been runnable: its CPU time plus its waits for a CPU.

    Over a process's PSS read, the time the kernel held that process's mmap lock (its
    walk, preemptions in it included), without the wait for the GIL after it. Off Linux,
    the CPU time alone.
    """
    return time.thread_time() + runqueue_wait()


class ProcessCollector(BaseCollector):
    """CPU, threads and memory of the job's processes, by default with all their descendants.

    The job is one process (``pid``) or the roots of several trees (every local rank,
    :meth:`Job.watch <sysmetrics.host.Job.watch>`); ``job.roots`` is read once per sample.

    Keys:

    - ``cpu``: CPU used by the job since the previous sample, percent of the CPUs available
      to it (the union of the roots' affinity masks, read at each walk, capped by the cgroup
      CPU quota as it is at the sample, :meth:`Cgroup.cpu_limit`), so a job keeping every
      available CPU busy reads 100. The first sample is the average since the earliest
      root started. Children that ended and were reaped inside the tree are counted up
      to their end, and a root that ended but is not reaped
      yet (a zombie) with its final CPU time. Process CPU times move in clock ticks
      (10 ms), so a window shorter than ``min_cpu_window_s`` (half a tick; the first,
      from the earliest root's start, ``first_cpu_window_s``) would read 0 or far too
      much: such a sample has no ``cpu``, and the next one covers both windows.
    - ``proc.cpu.threads``: threads of the job (count).
    - ``proc.cpu.busiestThreadPercent``: CPU used by the job's busiest thread since the
      previous reading of the threads, % of one CPU (0 to 100: a thread runs on one CPU
      at a time). Tells one thread doing the work (the GIL) from a job that gets one
      CPU's worth because other processes took the rest. Linux only
      (``/proc/<pid>/task/<tid>/stat`` of each thread of the job's live processes),
      read at most once per ``thread_window_s`` (0.45 s: the counters move in 10 ms
      ticks, so a shorter window would err by more; a 0.5 s interval still reads at
      every sample whatever the timer jitter) and never sooner than 2000 times the
      previous reading's CPU time (``thread_cpu_share``: 0.05 % of a core; a reading
      costs about 12 µs per thread, so a job of 64 threads is read every 1.6 s, every
      other sample at 1 s), the samples in between without it. Left
      out (never guessed) where the job has more than ``max_threads`` threads (the
      reads are bounded), on the first reading, and where a thread older than the
      previous reading was not read then (a process that just joined the job: it could
      be the busiest). A thread that ended since the previous
      reading is not counted (its last CPU is lost with it). Where the threads cannot
      be read, the key is left out from then on with one :class:`SystemMetricsWarning`.
    - ``proc.memory.rssMB``: resident set size of the job, MiB (with ``.max``), W&B's
      meaning: the sum over its processes, so pages shared by forked workers count once
      per process, as ``ps`` shows them (8 workers reading a 2.5 GiB dataset: 23 GiB).
    - ``proc.memory.pssMB``: proportional set size of the job, MiB (with ``.max``): each
      shared page split among the processes mapping it, so pages shared by forked workers
      count once in all. Linux only (``smaps_rollup``), left out where a process of the job
      cannot be read (another user's). The kernel walks every mapped page to answer (12
      to 30 ms per GiB, per process mapping it) holding that process's mmap lock, so its
      ``mmap``/``munmap`` calls wait for the walk: it is read on a thread of its own, at
      once at the first sample and when the roots change, then at the first sample once
      :meth:`pss_period` has passed since the latest reading began: ``pss_interval_s``
      (1 s), but never sooner than 100 times that reading's CPU time (the reader's own:
      at most 1 % of a core, ``pss_cpu_share``) nor than 400 times the longest walk of
      one process in it (that process's lock held at most 0.25 % of the time,
      ``pss_lock_share``). Each
      reading is reported once, by the first sample after it ended (the sample after the
      one that began it, or the first sample itself, which waits ``pss_first_wait_s`` for
      it); the samples in between have no PSS key. A reading that fails for a reason that
      passes (no thread can start: ``pids.max``; out of descriptors or memory) costs these
      two keys only, with one :class:`SystemMetricsWarning`, and is tried again after
      ``pss_retry_s`` (1 s), twice as long after each failure in a row, up to
      ``pss_retry_max_s`` (60 s).
    - ``proc.memory.percent``: the job's memory counted once: ``proc.memory.pssMB`` as a
      percent of the memory available to the job (the host's, or the cgroup memory limit
      where that is lower, asked of the cgroup at each reading). In the samples with a
      PSS reading only, so absent where PSS is (macOS, Windows, another user's process).

    Zombies (processes that ended, not reaped yet) hold no memory: they add nothing to the
    threads and memory keys, and a sample where every root is one (the command of
    ``sysmetrics record`` that exited, kept for its final CPU time) has ``cpu`` only.

    Descendants are found by following ``/proc/<pid>/task/<tid>/children`` from the roots
    (psutil elsewhere), so the cost grows with the tree, not with the machine's process
    count. That walk reads one file per thread (dozens per PyTorch process: 25 times the
    cost of reading the counters), so it is redone only when the tree may have changed:
    at the first sample after the roots change, when a process of the tree was
    re-parented (its parent ended), and when a PID was allocated in this PID namespace
    since the last walk (``/proc/loadavg``: a process or thread was born somewhere), at
    most once per ``rediscover_min_s`` and at least once per ``rediscover_max_s``. Where
    the source cannot tell (psutil on macOS and Windows), every ``rediscover_ticks``
    samples. The samples in between read the known processes' counters only, and check
    their parents. What that means:

    - a process born between two walks shows (threads, memory) from the walk that finds
      it, and its CPU time since birth is spread evenly over the time it ran: the share of
      the windows since the previous sample counts (all of it when it was born since),
      the share of windows already reported is lost (never put into one window, which
      could read over 100);
    - a process that ended since the previous sample is dropped at once; its CPU since that
      sample counts when a process of the tree reaps it (the parent's children time);
    - a process that ends without being reaped inside the tree (a root, which its launcher
      reaps; a worker whose parent ended first, re-parented to init) loses its CPU since
      the previous sample, all of it if no walk found it alive. Walks follow births within
      ``rediscover_min_s`` (0.2 s), so that takes a process living less than that or one
      interval; walking every sample narrows the window to one interval, as before.

    Args:
        source: the host readings.
        pid: the root process, when no ``job`` is given.
        track_process_tree: include descendants (DataLoader workers, spawned helpers).
        cgroup: the root's cgroup, for the CPU quota and memory limit.
        job: the watched roots, shared with the monitor; ``Job(pid)`` by default.

    Attributes:
        rediscover_min_s: seconds at least between two walks, roots changes aside.
        rediscover_max_s: seconds at most between two walks (0: walk at every sample).
        rediscover_ticks: samples between two walks where no PID counter is known.
        min_cpu_window_s: seconds at least that ``cpu`` is measured over (half a clock tick).
        first_cpu_window_s: the same for the first sample, measured from the earliest
            root's start (five ticks: that start is known to the tick).
        pss_interval_s: seconds at least between two readings of the proportional set
            size; more where :meth:`pss_period` says so.
        pss_cpu_share: the share of one core (0.01: 1 %) the readings may take (a
            reading's CPU time over the period, :meth:`pss_period`).
        pss_lock_share: the share of wall time (0.0025: 0.25 %) the readings may hold
            one process's mmap lock (its longest walk over the period).
        pss_retry_s: seconds before a reading that failed for now is tried again, doubled
            after each failure in a row up to ``pss_retry_max_s`` seconds.
        thread_window_s: seconds at least between two readings of the threads' CPU.
        thread_cpu_share: the share of a core (0.0005: 0.05 %) the readings may take
            (the previous reading's CPU time over the period until the next).
        max_threads: threads of the job read at most per reading; more: no reading.

    """

    name = "process"

    # Under PID churn (other processes forking all the time), at most five walks a second:
    # one per sample at intervals of 0.25 s or more, whatever the timer jitter, and one per
    # 20 or more samples at the shortest ones. A process born between two samples its walk
    # does not follow is found late, and the windows before have none of its CPU: at
    # 0.5 s, a 0.25 s window of torchrun's start-up read 0.0 where its ranks used 38 %.
    # A walk a minute in any case, in case a change went unseen; it costs a few µs per
    # process and tick at 1 s.
    rediscover_min_s = 0.2
    rediscover_max_s = 60.0
    rediscover_ticks = 10
    # Process CPU times have clock-tick resolution (USER_HZ = 100 on Linux): over a
    # window much shorter than a tick they move by 0 or a whole tick, which reads 0 or
    # 133 % of a 2-CPU box over 3.75 ms. Half a tick, not a whole one: at the shortest
    # interval (0.01 s) windows jitter just under a tick, and every one must keep ``cpu``.
    min_cpu_window_s = 0.005
    # The first window runs from the earliest root's start time, itself known only to the
    # tick: a command started a few ms ago read 0.0. Five ticks keep that error under 20 %.
    first_cpu_window_s = 0.05
    # ``proc.memory.percent`` comes from these readings, and each is reported once (a
    # value not measured since the previous sample is never shown), so they must come
    # about as often as samples: once a second at most, and never sooner than 100 times
    # the latest reading's duration (1 % of a core). A reading costs 12 to 30 ms per GiB
    # mapped per process (benchmarks/job_tick.py), and the process read waits that long
    # in any mmap or munmap meanwhile (benchmarks/pss_stall.py: 57 ms for a 4 GiB heap),
    # so each process's walk is spaced by 400 times its duration too: 0.25 % of its
    # time at most, half the 0.5 % a 1 s monitor may cost training (performance.md).
    # A small job is read every second, a 1 GiB process alone (13 ms) every 5 s, a
    # 4 GiB rank with 8 forked workers (0.55 s) about once a minute.
    pss_interval_s = 1.0
    pss_cpu_share = 0.01
    pss_lock_share = 0.0025
    pss_first_wait_s = 0.2  # the first sample waits this long for the first reading
    pss_retry_s = 1.0
    pss_retry_max_s = 60.0
    # The busiest thread's CPU (proc.cpu.busiestThreadPercent): thread CPU times move in
    # 10 ms ticks, so a window of 0.45 s errs by 2.2 % at most; one file read per thread
    # (benchmarks/thread_tick.py: 0.1 ms at 8 threads, 0.8 at 64, 3.2 at 256), at most
    # max_threads of them per reading, spaced so that they take 0.05 % of a core.
    thread_window_s = 0.45
    thread_cpu_share = 0.0005
    max_threads = 256

    def __init__(
        self,
        source: HostSource,
        pid: int,
        track_process_tree: bool = True,
        cgroup: Cgroup | None = None,
        job: Job | None = None,
    ) -> None:
        self.source = source
        self.job = job or Job(pid)
        self.track_process_tree = track_process_tree
        self.cgroup = cgroup  # its limits are read through it, so they stay current
        self._host_memory = source.memory().total
        # pid -> (stat, parent pid) at the previous sample; its keys are the processes the
        # samples between two walks read.
        self._prev: dict[int, tuple[ProcStat, int]] = {}
        # time.monotonic() when the window of the next ``cpu`` began: the previous sample's
        # counter reads, or an earlier one's where samples since had too short a window.
        self._prev_time = 0.0
        self._cpu_pending = 0.0  # CPU seconds used since then (counted at those samples)
        self._walked: tuple[int, ...] = ()  # the roots of the latest walk
        self._walk_time = 0.0  # time.monotonic() of the latest walk
        self._walk_clock = 0.0  # source.clock() before the latest walk
        self._walk_pid: int | None = None  # source.last_pid() before the latest walk
        self._moved = False  # a process changed parents since the latest walk
        self._ticks = 0  # samples since the latest walk
        self._cpus = 1.0  # CPUs of the roots' affinity, as of the latest walk
        self._pss_lock = threading.Lock()
        self._pss_reading: threading.Thread | None = None  # the reading under way
        self._pss: int | None = None  # bytes, the latest reading (None: not readable)
        self._pss_time = -math.inf  # time.monotonic() when it began
        self._pss_roots: tuple[int, ...] = ()  # the roots it covered
        self._pss_new = False  # it ended after the latest sample: not reported yet
        self._pss_asked: tuple[int, ...] = ()  # the roots of the latest reading begun
        self._pss_period = self.pss_interval_s  # seconds between two readings
        self._pss_logged = False
        self._pss_failures = 0  # readings in a row that failed for now
        self._pss_error: BaseException | None = None  # the first such failure, to warn of
        self._pss_warned = False
        # Thread readings (proc.cpu.busiestThreadPercent): (pid, tid) -> (CPU seconds,
        # start time) at the previous one, when it was (time.monotonic(), the source's
        # clock before it); off where the source cannot list threads or failed to.
        self._threads_on = isinstance(source, ProcfsSource)
        self._threads: dict[tuple[int, int], tuple[float, float]] | None = None
        self._threads_time = -math.inf
        self._threads_period = self.thread_window_s  # seconds until the next reading
        self._threads_clock = 0.0

    @property
    def pid(self) -> int:
        """The first root: the process the collector was made for."""
        return self.job.pid

    @property
    def cpu_quota(self) -> float | None:
        """The cgroup's CPU quota in CPUs, current (:meth:`Cgroup.cpu_limit`); None: none."""
        return self.cgroup.cpu_limit() if self.cgroup else None

    @property
    def memory_total(self) -> int:
        """Bytes of memory the job may use: the host's, or the cgroup limit (current) if lower."""
        limit = self.cgroup.memory_limit() if self.cgroup else None
        return min(self._host_memory, limit) if limit else self._host_memory

    @property
    def available_cpus(self) -> float:
        """CPUs the job may use: the union of the roots' affinity, capped by the CPU quota."""
        return self._capped(float(self.source.cpus(self.job.roots)))

    def _capped(self, cpus: float) -> float:
        """``cpus`` capped by the CPU quota as it is now."""
        quota = self.cpu_quota
        return min(cpus, quota) if quota else cpus

    def tree(self) -> list[TreeProcess]:
        """(pid, parent pid) of every root and, when tracking, every descendant (a walk)."""
        return process_tree(self.source, self.job.roots, self.track_process_tree)

    def _walk_due(self, roots: tuple[int, ...], now: float) -> bool:
        """Whether the tree may have changed since the latest walk (see the class doc)."""
        since = now - self._walk_time
        if roots != self._walked or self._moved or since >= self.rediscover_max_s:
            return True
        if since < self.rediscover_min_s or not self.track_process_tree:
            return False
        if self._walk_pid is None:
            return self._ticks >= self.rediscover_ticks
        return self.source.last_pid() != self._walk_pid

    def sample(self) -> dict[str, float]:
        """CPU percent, threads, RSS, PSS and memory percent of the job.

        ``cpu`` is left out where the window since the previous sample is too short
        (``min_cpu_window_s``), the others where every root is a zombie.

        Raises:
            ProcessLookupError: every root has ended.

        """
        roots = self.job.roots
        self._ticks += 1
        walk = self._walk_due(roots, time.monotonic())
        if walk:
            # A process missing from this walk and born after this reading is new at the
            # next walk: its whole CPU time counts there.
            clock, last_pid = self.source.clock(), self.source.last_pid()
            members = process_tree(self.source, roots, self.track_process_tree)
            cpus = float(self.source.cpus(roots))
        else:
            members = [TreeProcess(pid, parent) for pid, (_, parent) in self._prev.items()]
        # Time-stamp the counter reads themselves, not the tree walk before them: under a
        # busy training thread every read can wait for the GIL, and a stamp taken far from
        # the reads turns that wait into phantom CPU percent.
        start = time.monotonic()
        now = self.source.clock()
        stats: dict[int, tuple[ProcStat, int]] = {}
        for pid, parent in members:
            st = self.source.process(pid)
            if st is None:
                continue
            if not walk:
                if abs(self._prev[pid][0].start_time - st.start_time) >= _SAME:
                    continue  # the process ended and its PID was reused outside the job
                if parent and st.ppid and st.ppid != parent:
                    self._moved = True  # its parent ended: walk again at the next sample
            stats[pid] = (st, parent)
        mono = (start + time.monotonic()) / 2
        alive = [stats[r][0].start_time for r in roots if r in stats]
        if not alive:
            raise ProcessLookupError(f"processes {list(roots)} no longer exist")

        born_after = self._walk_clock  # the clock before the walk before this one
        if walk:
            self._walked, self._walk_time, self._walk_clock = roots, start, clock
            self._walk_pid, self._moved, self._ticks, self._cpus = last_pid, False, 0, cpus
        # The first sample is the average since the earliest root started.
        first = not self._prev
        elapsed = now - min(alive) if first else mono - self._prev_time
        # CPU since the previous sample, plus what samples with too short a window left.
        cpu = self._cpu_seconds(stats, born_after, now, elapsed) + self._cpu_pending
        self._prev = stats
        out: dict[str, float] = {}
        shortest = max(self.min_cpu_window_s, self.first_cpu_window_s if first else 0.0)
        if elapsed > 0 and elapsed >= shortest - _SAME:
            out["cpu"] = cpu / elapsed / self._capped(self._cpus) * 100.0
            self._prev_time, self._cpu_pending = mono, 0.0
        else:  # within a clock tick: the next sample measures from the same start
            if first:  # from the earliest root's start, on this clock
                self._prev_time = mono - max(0.0, elapsed)
            self._cpu_pending = cpu

        if all(stats[r][0].zombie for r in roots if r in stats):
            return out  # the job has ended: no memory, no threads to show
        live = [st for st, _ in stats.values() if not st.zombie]
        rss = sum(st.rss_bytes for st in live)
        threads = sum(st.threads for st in live)
        out["proc.cpu.threads"] = float(threads)
        busiest = self._busiest_thread(stats, threads)
        if busiest is not None:
            out["proc.cpu.busiestThreadPercent"] = busiest
        out["proc.memory.rssMB"] = rss / MiB
        pss = self._pss_bytes(roots, stats, mono)
        if pss is not None:  # a reading that ended since the previous sample
            out["proc.memory.pssMB"] = pss / MiB
            out["proc.memory.percent"] = pss / self.memory_total * 100.0
        return out

    def held_for(self) -> dict[str, float]:
        """The PSS keys, current for two reading periods and a second after a reading.

        A reading is reported once, at the first sample after it ended (never again), and
        the next begins ``pss_period`` later: between the two, the monitor's windows keep
        the latest reading with the time it was measured (``Snapshot.measured``). Nothing
        while readings fail: the keys are left out until one succeeds.
        """
        with self._pss_lock:
            if self._pss_failures or self._pss is None:
                return {}
            hold = 2.0 * self._pss_period + 1.0
        return {"proc.memory.pssMB": hold, "proc.memory.percent": hold}

    def _pss_bytes(
        self, roots: tuple[int, ...], stats: dict[int, tuple[ProcStat, int]], now: float
    ) -> int | None:
        """The PSS reading of the job that ended since the previous sample, if any.

        Each reading is reported once, at the first sample after it ended, and only for
        the roots it covered; begins the next reading when due.
        """
        with self._pss_lock:
            first = self._pss_asked == ()
            reading = self._pss_reading
            if reading is None and (
                now - self._pss_time >= self._pss_period or roots != self._pss_asked
            ):
                self._pss_asked = roots
                pids = tuple(pid for pid, (st, _) in stats.items() if not st.zombie)
                reading = self._pss_reading = threading.Thread(
                    target=self._read_pss,
                    args=(roots, pids, now),
                    name="sysmetrics-pss",
                    daemon=True,
                )
                try:
                    reading.start()
                except Exception as exc:  # "can't start new thread" (pids.max, ulimit -u)
                    reading = self._pss_reading = None
                    self._pss_failed(exc, now)
                else:
                    self._own_birth(reading.native_id)
        if first and reading is not None:
            reading.join(self.pss_first_wait_s)  # small jobs: the key from the first sample
        with self._pss_lock:
            new, self._pss_new = self._pss_new, False
            error, self._pss_error = self._pss_error, None
            pss = self._pss if new and self._pss_roots == roots else None
        if error is not None:
            text = quote(str(error), 120)
            warnings.warn(
                f"sysmetrics: the job's PSS cannot be read now; proc.memory.pssMB and "
                f"proc.memory.percent are left out until it can (retried after "
                f"{self.pss_retry_s:g} s, then twice as long each time up to "
                f"{self.pss_retry_max_s:g} s), the other keys go on: "
                f"{type(error).__name__}{': ' + text if text else ''}",
                SystemMetricsWarning,
                stacklevel=3,
            )
        return pss

    def pss_period(self, took: float, longest: float) -> float:
        """Seconds from the start of a PSS reading to the start of the next one.

        ``took`` is the reading's CPU time (seconds, the reading thread's, all its
        processes: on a loaded host its waits for a CPU would space readings for nothing) and
        ``longest`` the longest walk of one process among them (seconds the reading
        thread was runnable over that process's read, on the CPU or waiting for one: the
        kernel's walk of its page tables, during which its mmap lock is held, preempted
        or not; a wait for the GIL after it is left out, though under CPU contention the
        wait for a CPU on waking from it is not, which only spaces readings more).

        The period is ``pss_interval_s``, but at least ``took / pss_cpu_share`` (100
        times it: 1 % of a core) and at least ``longest / pss_lock_share`` (400 times it:
        the readings hold a process's mmap lock at most 0.25 % of the time, and its
        ``mmap`` and ``munmap`` wait for them).
        """
        return max(self.pss_interval_s, took / self.pss_cpu_share, longest / self.pss_lock_share)

    def _pss_failed(self, exc: BaseException, now: float) -> None:
        """A reading failed for now (under ``_pss_lock``): retry later, warn of the first.

        The next one is tried ``pss_retry_s`` after ``now`` (``time.monotonic()``), twice
        as long after each failure in a row, up to ``pss_retry_max_s``.
        """
        self._pss_failures += 1
        self._pss_time = now
        self._pss_period = min(
            self.pss_retry_max_s, self.pss_retry_s * 2.0 ** (self._pss_failures - 1)
        )
        if self._pss_warned:
            log.debug("proc.memory.pssMB left out again: %s: %s", type(exc).__name__, exc)
        else:
            self._pss_warned, self._pss_error = True, exc

    def _own_birth(self, tid: int | None) -> None:
        """Take the PSS thread just started (``tid``) off the births a walk looks for.

        PIDs are given in sequence: when ours is the only one since the latest walk's
        reading, nothing else was born and the tree needs no walk for it.
        """
        last = self._walk_pid
        if last is not None and tid == last + 1 and self.source.last_pid() == tid:
            self._walk_pid = tid

    def _read_pss(self, roots: tuple[int, ...], pids: tuple[int, ...], began: float) -> None:
        """Sum the PSS of ``pids`` (the reading thread) and publish it.

        Each process's walk is timed by the time this thread was runnable in it: it holds
        that process's mmap lock (:meth:`pss_period`).
        """
        total: int | None = 0
        longest = 0.0  # seconds runnable, the longest walk of one process
        failed: BaseException | None = None
        cpu = time.thread_time()  # the reading's own CPU time, not its waits for a CPU
        try:
            for pid in pids:
                start = _walk_time()
                pss = self.source.pss(pid)  # None: it ended
                longest = max(longest, _walk_time() - start)
                total = (total or 0) + (pss or 0)
        except BaseException as exc:  # whatever ends the thread
            total = None  # a partial sum would pass for the job's
            lasting = isinstance(exc, ValueError) or (
                isinstance(exc, OSError) and exc.errno in _LASTING
            )
            if not lasting:  # out of descriptors or memory, or unforeseen: retried
                failed = exc
            elif not self._pss_logged:  # not Linux, or another user's process
                self._pss_logged = True
                log.debug("proc.memory.pssMB left out: %s", exc)
        finally:
            end = time.monotonic()
            with self._pss_lock:
                self._pss_reading = None
                if failed is not None:
                    self._pss_failed(failed, end)
                else:
                    self._pss, self._pss_time, self._pss_roots = total, began, roots
                    self._pss_new = True
                    self._pss_failures = 0
                    self._pss_period = self.pss_period(time.thread_time() - cpu, longest)

    def _busiest_thread(self, stats: dict[int, tuple[ProcStat, int]], count: int) -> float | None:
        """The CPU of the job's busiest thread since the previous reading, % of one CPU.

        None where not read now (see ``proc.cpu.busiestThreadPercent`` in the class doc):
        within the period of the previous reading (``thread_window_s``, or more where
        the reading's CPU time needs it: ``thread_cpu_share``), more than ``max_threads``
        threads (``count``, from the processes' counters: nothing is listed then), the
        first reading, a thread older than the previous reading unseen by it.
        """
        if not self._threads_on or time.monotonic() - self._threads_time < self._threads_period:
            return None
        if count > self.max_threads:
            self._threads = None  # the next reading has nothing to measure from
            return None
        source = self.source
        assert isinstance(source, ProcfsSource)
        clock = source.clock()
        start, cpu_start = time.monotonic(), time.thread_time()
        now: dict[tuple[int, int], tuple[float, float]] = {}
        try:
            for pid, (st, _) in stats.items():
                if st.zombie:
                    continue
                threads = source.threads(pid)  # None: it ended
                for tid, t in threads or ():
                    now[pid, tid] = (t.cpu_seconds, t.start_time)
                if len(now) > self.max_threads:  # born since the processes were read
                    self._threads = None
                    return None
        except (OSError, ValueError, IndexError) as exc:
            self._threads_on = False
            text = quote(str(exc), 120)
            warnings.warn(
                "sysmetrics: the job's threads cannot be read; proc.cpu.busiestThreadPercent "
                f"is left out from now on, the other keys go on: {type(exc).__name__}"
                f"{': ' + text if text else ''}",
                SystemMetricsWarning,
                stacklevel=4,
            )
            return None
        mono = (start + time.monotonic()) / 2
        took = time.thread_time() - cpu_start  # CPU time: waits for the GIL left out
        self._threads_period = max(self.thread_window_s, took / self.thread_cpu_share)
        before, since, born_after = self._threads, mono - self._threads_time, self._threads_clock
        self._threads, self._threads_time, self._threads_clock = now, mono, clock
        if before is None or not since > 0:
            return None
        busiest = 0.0
        for key, (cpu, started) in now.items():
            prev = before.get(key)
            if prev is not None and abs(prev[1] - started) < _SAME:
                used = cpu - prev[0]
            elif started >= born_after - _SAME:  # born since the previous reading
                used = cpu
            else:  # older, and not read then: it could be the busiest
                return None
            busiest = max(busiest, used)
        return min(100.0, max(0.0, busiest / since * 100.0))

    def _own(self, st: ProcStat) -> float:
        if self.track_process_tree:
            return st.cpu_seconds + st.children_cpu_seconds
        return st.cpu_seconds

    def _cpu_seconds(
        self,
        stats: dict[int, tuple[ProcStat, int]],
        born_after: float,
        now: float,
        window: float,
    ) -> float:
        """CPU seconds the job used since the previous sample (since start on the first).

        A process seen for the first time counts when it started at or after
        ``born_after`` (the clock reading before the previous walk, which could not have
        found it), and from now on otherwise (an older process that joined: a new root).
        One that counts and is older than this ``window`` (seconds; ``now`` is the source's
        clock) was born before the previous sample: its CPU since birth is spread evenly
        over the time it ran and only this window's share counts, since the earlier
        windows are already reported. Put whole into this window, two ranks found 0.5 s
        after their birth read 174 % over a 0.25 s window.
        """
        if not self._prev:
            return sum(self._own(st) for st, _ in stats.values())
        used = 0.0
        reaped: dict[int, float] = {}  # growth of children_cpu_seconds per continuing pid
        for pid, (st, _) in stats.items():
            prev = self._prev.get(pid)
            # Start times are whole clock ticks on the source's clock: compared exactly
            # (the tolerance only absorbs float rounding).
            if prev is not None and abs(prev[0].start_time - st.start_time) < _SAME:
                used += st.cpu_seconds - prev[0].cpu_seconds
                if self.track_process_tree:
                    reaped[pid] = st.children_cpu_seconds - prev[0].children_cpu_seconds
            elif st.start_time >= born_after - _SAME:  # born since the previous walk began
                lived = now - st.start_time
                share = window / lived if lived > window > 0 else 1.0
                used += self._own(st) * share
            # else: an older process that just joined the tree; it is counted from now on
        if self.track_process_tree:
            # A child that ended and was reaped moved its whole CPU time into its parent's
            # children time; the part counted at earlier samples must not count twice.
            for pid, (prev_st, parent) in self._prev.items():
                if pid in stats:
                    continue
                while parent in self._prev and parent not in stats:
                    parent = self._prev[parent][1]
                if parent in reaped:
                    reaped[parent] -= self._own(prev_st)
            used += sum(max(0.0, r) for r in reaped.values())
        return max(0.0, used)
