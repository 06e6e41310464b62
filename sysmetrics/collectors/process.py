"""The training process and its descendants: ``cpu``, threads and resident memory."""

from __future__ import annotations

import time

from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors.base import BaseCollector, MiB
from sysmetrics.host import HostSource, ProcStat

_SAME = 1e-6  # seconds: start times closer than this are the same clock tick


def process_tree(source: HostSource, pid: int, descendants: bool = True) -> list[tuple[int, int]]:
    """(pid, parent pid) of ``pid`` and, with ``descendants``, of every descendant."""
    out = [(pid, 0)]
    if descendants:
        i = 0
        while i < len(out):
            parent = out[i][0]
            out.extend((child, parent) for child in source.children(parent))
            i += 1
    return out


class ProcessCollector(BaseCollector):
    """CPU, threads and memory of one process, by default with all its descendants.

    Keys:

    - ``cpu``: CPU used by the process tree since the previous sample, percent of the CPUs
      available to the process (its affinity mask, capped by the cgroup CPU quota), so a
      tree keeping every available CPU busy reads 100. The first sample is the average
      since the process started. Children that ended and were reaped inside the tree are
      counted up to their end.
    - ``proc.cpu.threads``: threads of the tree (count).
    - ``proc.memory.rssMB``: resident set size of the tree, MiB (with ``.max``). Pages shared
      by forked workers count once per process, as ``ps`` shows them.
    - ``proc.memory.percent``: that RSS as a percent of system memory, or of the cgroup
      memory limit when that is lower.

    Descendants are found by following ``/proc/<pid>/task/<tid>/children`` from the root
    (psutil elsewhere), so the cost grows with the tree, not with the machine's process count.

    Args:
        source: the host readings.
        pid: the root process.
        track_process_tree: include descendants (DataLoader workers, spawned helpers).
        cgroup: the root's cgroup, for the CPU quota and memory limit.

    """

    name = "process"
    peak_keys = frozenset({"rssMB"})

    def __init__(
        self,
        source: HostSource,
        pid: int,
        track_process_tree: bool = True,
        cgroup: Cgroup | None = None,
    ) -> None:
        self.source = source
        self.pid = pid
        self.track_process_tree = track_process_tree
        self.cpu_quota = cgroup.cpu_limit() if cgroup else None
        limit = cgroup.memory_limit() if cgroup else None
        total = source.memory()[0]
        self.memory_total = min(total, limit) if limit else total
        # pid -> (stat, parent pid) at the previous sample
        self._prev: dict[int, tuple[ProcStat, int]] = {}
        self._prev_time = 0.0  # time.monotonic() of the previous sample's counter reads
        self._prev_clock = 0.0  # source.clock() before the previous sample's tree walk

    @property
    def available_cpus(self) -> float:
        """CPUs the process may use: its affinity mask, capped by the cgroup CPU quota."""
        n = float(self.source.cpu_count(self.pid))
        return min(n, self.cpu_quota) if self.cpu_quota else n

    def tree(self) -> list[tuple[int, int]]:
        """(pid, parent pid) of the root and, when tracking, every descendant."""
        return process_tree(self.source, self.pid, self.track_process_tree)

    def sample(self) -> dict[str, float]:
        """CPU percent, threads, RSS and memory percent of the process (tree)."""
        # A process missing from this walk and born after this reading is new at the next
        # sample: its whole CPU time counts there.
        clock = self.source.clock()
        tree = self.tree()
        # Time-stamp the counter reads themselves, not the tree walk before them: under a
        # busy training thread every read can wait for the GIL, and a stamp taken far from
        # the reads turns that wait into phantom CPU percent.
        start = time.monotonic()
        now = self.source.clock()
        stats: dict[int, tuple[ProcStat, int]] = {}
        for pid, parent in tree:
            st = self.source.process(pid)
            if st is not None:
                stats[pid] = (st, parent)
        mono = (start + time.monotonic()) / 2
        if self.pid not in stats:
            raise ProcessLookupError(f"process {self.pid} no longer exists")

        cpu = self._cpu_seconds(stats)
        # The first sample is the average since the root started.
        elapsed = mono - self._prev_time if self._prev else now - stats[self.pid][0].start_time
        self._prev, self._prev_time, self._prev_clock = stats, mono, clock

        rss = sum(st.rss_bytes for st, _ in stats.values())
        return {
            "cpu": cpu / elapsed / self.available_cpus * 100.0 if elapsed > 0 else 0.0,
            "proc.cpu.threads": float(sum(st.threads for st, _ in stats.values())),
            "proc.memory.rssMB": rss / MiB,
            "proc.memory.percent": rss / self.memory_total * 100.0,
        }

    def _own(self, st: ProcStat) -> float:
        if self.track_process_tree:
            return st.cpu_seconds + st.children_cpu_seconds
        return st.cpu_seconds

    def _cpu_seconds(self, stats: dict[int, tuple[ProcStat, int]]) -> float:
        """CPU seconds the tree used since the previous sample (since start on the first)."""
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
            elif st.start_time >= self._prev_clock - _SAME:
                used += self._own(st)  # born since the previous sample's walk began
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
