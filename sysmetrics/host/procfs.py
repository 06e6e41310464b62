"""Linux procfs read directly: :class:`ProcfsSource`, and the readers it shares with psutil's."""

from __future__ import annotations

import errno
import math
import os
import socket
import struct
import time
from collections.abc import Iterable

from sysmetrics.host import statfs
from sysmetrics.host.source import (
    IFF_LOOPBACK,
    MAX_INTERFACES,
    SECTOR_BYTES,
    CpuTime,
    DiskIO,
    DiskUsage,
    MemoryInfo,
    NetInterface,
    ProcStat,
    SwapInfo,
)

_SIOCGIFFLAGS = 0x8913  # <linux/sockios.h>


def _boot_clock(tick: float) -> float:
    """``CLOCK_BOOTTIME`` in whole clock ticks: the clock of /proc/<pid>/stat's starttime.

    Start times were once turned into wall-clock time with /proc/stat's ``btime``, which
    is truncated to whole seconds; every newborn process then looked up to a second older
    than it was. Both sides of the comparison now count the same ticks since boot.
    """
    return math.floor(time.clock_gettime(time.CLOCK_BOOTTIME) * tick) / tick


def _read(path: str) -> str:
    """The whole text of ``path``.

    ``os.open`` and ``os.read`` cost half of ``open()`` on a /proc file (which also stats
    the file and sets up buffers), and the sampler reads several files per process. A
    /proc file may come in pieces of a page (one per group of records), so read to the end.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")


def _read_record(path: str) -> str:
    """The text of a /proc file made of one record (``<pid>/stat``, ``smaps_rollup``).

    The kernel writes such a file whole into the first read that has room for it, so one
    read is enough: one system call less than :func:`_read`, on every process every tick.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, _CHUNK).decode("ascii", "replace")
    finally:
        os.close(fd)


_CHUNK = 65536  # bytes per read


def _affinity_union(pids: Iterable[int]) -> int:
    """Size of the union of the affinity masks of ``pids`` (``sched_getaffinity``)."""
    cpus: set[int] = set()
    for pid in pids:
        try:
            cpus |= os.sched_getaffinity(pid)
        except ProcessLookupError:
            continue  # that process ended
        except (AttributeError, OSError):
            return os.cpu_count() or 1
    return len(cpus) or os.cpu_count() or 1


def _last_pid(root: str) -> int | None:
    """The PID last allocated in the reader's PID namespace (``<root>/loadavg``'s last field)."""
    try:
        return int(_read(f"{root}/loadavg").split()[4])
    except (OSError, ValueError, IndexError):
        return None


def _counter(text: str) -> int:
    """A kernel counter (u64) from its decimal text.

    Raises:
        ValueError: it is not one.

    """
    if not (text.isascii() and text.isdigit()) or len(text) > 20 or int(text) >= 1 << 64:
        raise ValueError(f"{text[:30]!r} is not a 64-bit counter")
    return int(text)


def _if_flags(sys_class_net: str, name: str) -> int:
    """The flags (``IFF_*``) of network interface ``name``; 0 where they cannot be read.

    From sysfs (``<sys_class_net>/<name>/flags``, hexadecimal), else from the kernel for
    this network namespace (``ioctl(SIOCGIFFLAGS)``), else, as a last resort, by name.
    Only a name Linux allows (up to 15 characters, no ``/``) is looked up.
    """
    if not 0 < len(name) <= 15 or "/" in name or name in (".", ".."):
        return IFF_LOOPBACK if name == "lo" else 0
    try:
        return int(_read_record(f"{sys_class_net}/{name}/flags").strip()[:18], 16)
    except (OSError, ValueError):
        pass
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("16sH22x", name.encode("ascii", "replace")[:15], 0)  # ifreq
            return int(struct.unpack_from("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, req))[1])
    except (ImportError, OSError, ValueError):
        return IFF_LOOPBACK if name == "lo" else 0


def _smaps_pss(root: str, pid: int) -> int | None:
    """``Pss:`` of ``<root>/<pid>/smaps_rollup`` in bytes; None when the process is gone.

    The kernel walks the process's page tables to answer (17 ms per GiB mapped on the VM
    of ``benchmarks/job_tick.py``), holding its mmap lock for reading, which it lets go
    when a writer waits (Linux 5.10+).
    """
    try:
        text = _read_record(f"{root}/{pid}/smaps_rollup")
    except (FileNotFoundError, ProcessLookupError):  # ended; ESRCH for a zombie
        return None
    start = text.find("\nPss:")
    if start < 0:
        return 0  # no memory mapped (a kernel thread)
    return int(text[start + 5 : text.index("kB", start)]) * 1024


def runqueue_wait() -> float:
    """Seconds the calling thread has waited for a CPU while runnable, since it began.

    The second field of ``/proc/thread-self/schedstat`` (nanoseconds, exact to the
    context switch; Linux 4.2+ with ``CONFIG_SCHED_INFO``). 0.0 where it cannot be read
    (not Linux), so that a difference of two readings is 0.
    """
    try:
        return int(_read_record("/proc/thread-self/schedstat").split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def _fd_targets(root: str, pid: int) -> list[str]:
    """Where the links of ``<root>/<pid>/fd`` point; empty where that cannot be listed."""
    fd_dir = f"{root}/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            out.append(os.readlink(f"{fd_dir}/{fd}"))
        except OSError:
            continue  # closed between listdir and readlink
    return out


class ProcfsSource:
    """Linux procfs read directly.

    Args:
        root: the procfs mount, ``/proc`` by default; point it at a captured tree in tests.
        sys_block: the folder listing whole block devices (``/sys/block``), used to
            leave partitions out of disk I/O as psutil does.
        sys_class_net: the folder of network interfaces (``/sys/class/net``), whose
            ``flags`` say which are loopback ones.

    """

    def __init__(
        self,
        root: str = "/proc",
        sys_block: str = "/sys/block",
        sys_class_net: str = "/sys/class/net",
    ) -> None:
        self.root = root
        self._sys_class_net = sys_class_net
        self._if_loopback: dict[str, bool] = {}  # interface name -> IFF_LOOPBACK is set
        self._tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._disks: frozenset[str] | None = frozenset(
                name.replace("!", "/") for name in os.listdir(sys_block)
            )
        except OSError:
            self._disks = None

    def cpu_times(self) -> list[CpuTime]:
        """Per core busy and total clock ticks from ``/proc/stat``, as psutil counts them."""
        out: list[CpuTime] = []
        for line in _read(f"{self.root}/stat").splitlines():
            if not line.startswith("cpu") or line[3] == " ":
                if out:
                    break  # per-core lines are contiguous
                continue
            f = [float(x) for x in line.split()[1:]]
            # user nice system idle iowait irq softirq steal [guest guest_nice]; guest
            # time is already inside user and nice.
            total = sum(f[:8])
            idle = f[3] + f[4]
            out.append(CpuTime(total - idle, total))
        return out

    def memory(self) -> MemoryInfo:
        """(MemTotal, MemAvailable) from ``/proc/meminfo``, bytes."""
        wanted = {"MemTotal", "MemAvailable", "MemFree", "Buffers", "Cached"}
        fields: dict[str, int] = {}
        for line in _read(f"{self.root}/meminfo").splitlines():
            name, _, rest = line.partition(":")
            if name in wanted:
                fields[name] = int(rest.split()[0]) * 1024
                if len(fields) == len(wanted):
                    break  # they are the first five lines
        total = fields["MemTotal"]
        available = fields.get("MemAvailable")
        if available is None:  # kernels before 3.14
            available = fields["MemFree"] + fields.get("Buffers", 0) + fields.get("Cached", 0)
        return MemoryInfo(total, available)

    def swap(self) -> SwapInfo:
        """(SwapTotal, SwapTotal - SwapFree) from ``/proc/meminfo``, bytes; (0, 0) without them."""
        fields: dict[str, int] = {}
        for line in _read(f"{self.root}/meminfo").splitlines():
            name, _, rest = line.partition(":")
            if name in ("SwapTotal", "SwapFree"):
                fields[name] = int(rest.split()[0]) * 1024
                if len(fields) == 2:
                    break
        total = fields.get("SwapTotal", 0)
        return SwapInfo(total, max(0, total - fields.get("SwapFree", total)))

    def disk_io(self) -> DiskIO:
        """Sectors read and written by whole disks in ``/proc/diskstats``, as bytes."""
        read = written = 0
        for line in _read(f"{self.root}/diskstats").splitlines():
            f = line.split()
            if len(f) < 10 or (self._disks is not None and f[2] not in self._disks):
                continue
            read += int(f[5])
            written += int(f[9])
        return DiskIO(read * SECTOR_BYTES, written * SECTOR_BYTES)

    def net_interfaces(self) -> list[NetInterface]:
        """Counters of ``/proc/net/dev``; loopback as the interface's flags say.

        The flags come from ``<sys_class_net>/<name>/flags``, or from the kernel
        (``SIOCGIFFLAGS``) where sysfs has no such interface (a network namespace whose
        sysfs was not remounted); they are read once per interface name.
        """
        lines = _read(f"{self.root}/net/dev").splitlines()[2:]
        if len(lines) > MAX_INTERFACES:
            raise OSError(
                errno.E2BIG, f"{len(lines)} network interfaces, more than {MAX_INTERFACES}"
            )
        out: list[NetInterface] = []
        for line in lines:
            name, _, rest = line.partition(":")
            f = rest.split()
            if len(f) < 9:
                raise ValueError(f"/proc/net/dev: a line of {len(f)} counters, not 16")
            name = name.strip()
            sent, recv = _counter(f[8]), _counter(f[0])
            out.append(NetInterface(name, sent, recv, self._loopback(name)))
        if len(self._if_loopback) > len(out):  # keep the names that still exist
            names = {i.name for i in out}
            self._if_loopback = {k: v for k, v in self._if_loopback.items() if k in names}
        return out

    def _loopback(self, name: str) -> bool:
        known = self._if_loopback.get(name)
        if known is None:
            known = self._if_loopback[name] = bool(
                _if_flags(self._sys_class_net, name) & IFF_LOOPBACK
            )
        return known

    def disk_usage(self, path: str) -> DiskUsage:
        """``statvfs`` of ``path``, with psutil's percent (of the space users can reach)."""
        return statfs._statvfs_usage(path)

    def process(self, pid: int) -> ProcStat | None:
        """Parse ``/proc/<pid>/stat`` (one read gives state, CPU, threads, RSS, start time)."""
        try:
            text = _read_record(f"{self.root}/{pid}/stat")
        except (FileNotFoundError, ProcessLookupError):
            return None
        return self._stat(text)

    def threads(self, pid: int) -> list[tuple[int, ProcStat]] | None:
        """``(tid, counters)`` of each thread of ``pid``, from ``/proc/<pid>/task/<tid>/stat``.

        A thread's ``stat`` has its process's format (:meth:`process`), its ``cpu_seconds``
        the thread's own. A thread that ended between the listing and its read is left
        out; None where the process ended.

        Raises:
            OSError: the listing or a thread's file cannot be read (not for its end).
            ValueError: a file is not a ``stat`` record.

        """
        task = f"{self.root}/{pid}/task"
        try:
            tids = os.listdir(task)
        except (FileNotFoundError, ProcessLookupError):
            return None
        out: list[tuple[int, ProcStat]] = []
        for name in tids:
            try:
                text = _read_record(f"{task}/{name}/stat")
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread ended after the listing
            out.append((int(name), self._stat(text)))
        return out

    def _stat(self, text: str) -> ProcStat:
        """A ``stat`` record (of a process or of one of its threads) as its counters."""
        # f[0] is field 3 (state); field n is f[n - 3]; split no further than f[21] (rss).
        f = text[text.rindex(")") + 2 :].split(None, 22)
        tick = self._tick
        return ProcStat(
            cpu_seconds=(int(f[11]) + int(f[12])) / tick,
            children_cpu_seconds=(int(f[13]) + int(f[14])) / tick,
            threads=int(f[17]),
            rss_bytes=int(f[21]) * self._page,
            start_time=int(f[19]) / tick,  # clock ticks since boot
            ppid=int(f[1]),
            zombie=f[0] == "Z",
        )

    def children(self, pid: int) -> list[int]:
        """Read ``/proc/<pid>/task/<tid>/children`` for each thread: no scan of all processes."""
        task = f"{self.root}/{pid}/task"
        out: list[int] = []
        try:
            tids = os.listdir(task)
        except OSError:
            return out
        for tid in tids:
            try:
                out.extend(int(c) for c in _read(f"{task}/{tid}/children").split())
            except OSError:
                continue  # the thread ended between listdir and read
        return out

    def pid_exists(self, pid: int) -> bool:
        """Whether ``<root>/<pid>`` exists."""
        return os.path.exists(f"{self.root}/{pid}")

    def fd_targets(self, pid: int) -> list[str]:
        """The link targets of ``<root>/<pid>/fd/*`` (a descriptor closed meanwhile: left out)."""
        return _fd_targets(self.root, pid)

    def cpu_count(self, pid: int) -> int:
        """Size of the affinity mask of ``pid`` (cpusets included)."""
        try:
            return len(os.sched_getaffinity(pid))
        except (AttributeError, OSError):
            return os.cpu_count() or 1

    def cpus(self, pids: Iterable[int]) -> int:
        """Size of the union of the affinity masks of ``pids`` (cpusets included)."""
        return _affinity_union(pids)

    def pss(self, pid: int) -> int | None:
        """``Pss:`` of ``/proc/<pid>/smaps_rollup`` (Linux 4.14+), bytes."""
        return _smaps_pss(self.root, pid)

    def last_pid(self) -> int | None:
        """The last field of ``/proc/loadavg``; None when it cannot be read."""
        return _last_pid(self.root)

    def clock(self) -> float:
        """Seconds since boot (``CLOCK_BOOTTIME``), in whole clock ticks."""
        return _boot_clock(self._tick)

    @staticmethod
    def supported(root: str = "/proc") -> bool:
        """Whether ``root`` is a procfs with the per-thread ``children`` files we need."""
        tid = os.getpid()
        return os.path.exists(f"{root}/stat") and os.path.exists(
            f"{root}/{tid}/task/{tid}/children"
        )
