"""What a host source answers: the :class:`HostSource` protocol and the records it returns.

Every reading of more than one number is a named tuple whose fields say their units, so
a collector reads ``source.memory().available``, not the second element of a pair.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
IFF_LOOPBACK = 0x8  # <linux/if.h>: the interface is a loopback one
MAX_INTERFACES = 65536  # more network interfaces than this: too many to read at every sample


@dataclass(frozen=True)
class ProcStat:
    """One process's counters.

    Attributes:
        cpu_seconds: user + system CPU time of the process, seconds.
        children_cpu_seconds: user + system CPU time of its children that it has
            waited for (reaped), including theirs, seconds.
        threads: number of threads.
        rss_bytes: resident set size, bytes.
        start_time: when the process started, seconds on the source's :meth:`clock
            <HostSource.clock>` (Linux: since boot, exact to the clock tick).
        ppid: the parent's process id (0: unknown).
        zombie: the process has ended and its parent has not reaped it yet: its CPU
            times are final; it holds no memory and its thread count means nothing.

    """

    cpu_seconds: float
    children_cpu_seconds: float
    threads: int
    rss_bytes: int
    start_time: float
    ppid: int = 0
    zombie: bool = False


class CpuTime(NamedTuple):
    """One core's cumulative CPU time, in one unit (procfs: clock ticks; psutil: seconds).

    Attributes:
        busy: time the core spent running anything but the idle task (iowait is idle).
        total: all its time, busy and idle (guest time is already inside user time).

    """

    busy: float
    total: float


class MemoryInfo(NamedTuple):
    """System memory, bytes.

    Attributes:
        total: physical memory the kernel manages.
        available: memory that can be given to processes without swapping.

    """

    total: int
    available: int


class SwapInfo(NamedTuple):
    """System swap space, bytes.

    Attributes:
        total: swap configured (0: none).
        used: swap in use.

    """

    total: int
    used: int


class DiskIO(NamedTuple):
    """Disk traffic of the system's whole disks, bytes, cumulative (since boot on Linux).

    Attributes:
        read: bytes read.
        written: bytes written.

    """

    read: int
    written: int


class DiskUsage(NamedTuple):
    """Usage of one filesystem.

    Attributes:
        used: bytes in use.
        total: bytes of the filesystem.
        percent: ``used`` as a percent of the space users can reach (``df``'s and
            psutil's percent: the blocks reserved for root left out), 0 to 100.

    """

    used: int
    total: int
    percent: float


class TreeProcess(NamedTuple):
    """One process of a process tree.

    Attributes:
        pid: its process id.
        parent: the process id of the parent it was found under; 0 for a root.

    """

    pid: int
    parent: int


class NetInterface(NamedTuple):
    """One network interface's counters.

    Attributes:
        name: the interface's name (``lo``, ``eth0``, ...).
        sent: bytes it has sent, cumulative (since it was created).
        recv: bytes it has received, cumulative.
        loopback: whether it is a loopback interface (flag ``IFF_LOOPBACK``): traffic
            that never leaves the machine.

    """

    name: str
    sent: int
    recv: int
    loopback: bool


class HostSource(Protocol):
    """The host readings the collectors need; every method may raise ``OSError``."""

    def cpu_times(self) -> list[CpuTime]:
        """Per core, cumulative busy and total CPU time, in any one unit."""

    def memory(self) -> MemoryInfo:
        """System memory, total and available, bytes."""

    def swap(self) -> SwapInfo:
        """System swap space, total and used, bytes; total is 0 where no swap is configured."""

    def disk_io(self) -> DiskIO:
        """Cumulative bytes read and written over the whole disks of the system."""

    def net_interfaces(self) -> list[NetInterface]:
        """Counters of every network interface (of this network namespace, on Linux).

        Raises:
            OSError: they cannot be read, or there are more than :data:`MAX_INTERFACES`.
            ValueError: a counter is not a 64-bit unsigned integer (a malformed line).

        """

    def disk_usage(self, path: str) -> DiskUsage:
        """Bytes used and total, and percent used, of the filesystem holding ``path``."""

    def process(self, pid: int) -> ProcStat | None:
        """Counters of process ``pid``, or None when it no longer exists."""

    def children(self, pid: int) -> list[int]:
        """Direct children of ``pid`` (empty when it no longer exists)."""

    def pid_exists(self, pid: int) -> bool:
        """Whether a process ``pid`` exists in the reader's PID namespace."""

    def fd_targets(self, pid: int) -> list[str]:
        """What the open file descriptors of ``pid`` point at, one entry per descriptor.

        Paths (``/dev/nvidia0``), or the kernel's names of what is not one
        (``socket:[1234]``, ``anon_inode:[eventfd]``). Empty when the process ended or
        its descriptors cannot be read (another user's process, no such API).
        """

    def cpu_count(self, pid: int) -> int:
        """Number of CPUs ``pid`` may run on (its affinity mask)."""

    def cpus(self, pids: Iterable[int]) -> int:
        """Number of CPUs any of ``pids`` may run on: the union of their affinity masks.

        Processes that no longer exist are skipped; the logical CPU count where the OS has
        no affinity API or none of ``pids`` is left.
        """

    def pss(self, pid: int) -> int | None:
        """Proportional set size of ``pid``, bytes: each shared page split among its users.

        None when the process no longer exists (or is a zombie).

        Raises:
            OSError: it cannot be read here (not Linux, or another user's process).

        """

    def last_pid(self) -> int | None:
        """The process id most recently given to a process or thread in this PID namespace.

        While it stays the same, no process was born; None where the OS does not say.
        """

    def clock(self) -> float:
        """Now, on the clock of ``ProcStat.start_time``, rounded down to its resolution.

        A process born at or after a reading of this clock has a ``start_time`` no
        earlier than that reading.
        """


class Job:
    """The processes a monitor watches, as the roots of their trees.

    One root (the training process) by default; on a node running several ranks, the
    PIDs of every local rank, set once at train start (:meth:`watch`). The collectors that
    attribute things to the job (process CPU and memory, GPU processes) read ``roots`` at
    each sample; it is replaced in one assignment, so readers on other threads always see
    a whole tuple.
    """

    def __init__(self, pid: int) -> None:
        self.roots: tuple[int, ...] = (pid,)

    @property
    def pid(self) -> int:
        """The first root: the process the monitor was made for."""
        return self.roots[0]

    def watch(self, pids: Iterable[int]) -> None:
        """Watch the trees of ``pids`` (the first root is kept first; duplicates dropped)."""
        self.roots = tuple(dict.fromkeys((self.roots[0], *pids)))


def process_tree(
    source: HostSource, pid: int | tuple[int, ...], descendants: bool = True
) -> list[TreeProcess]:
    """``pid`` (or each root of a tuple) and its descendants, as ``source`` finds them.

    Descendants only with ``descendants``; each process once, also where one root descends
    from another (Lightning's ``ddp`` launcher starts rank 1 as a child of rank 0). Roots
    first, then breadth first.
    """
    roots = (pid,) if isinstance(pid, int) else pid
    out = [TreeProcess(root, 0) for root in dict.fromkeys(roots)]
    if descendants:
        seen = {p for p, _ in out}
        i = 0
        while i < len(out):
            parent = out[i].pid
            for child in source.children(parent):
                if child not in seen:
                    seen.add(child)
                    out.append(TreeProcess(child, parent))
            i += 1
    return out
