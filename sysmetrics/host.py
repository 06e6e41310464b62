"""Where the host numbers come from: Linux procfs read directly, or psutil elsewhere.

Both sources answer the same small set of questions in the same units, so the
collectors are written once. On Linux :class:`ProcfsSource` reads the same
``/proc`` files psutil would, without psutil's per-call overhead, and its
``root`` can point at a captured procfs tree. :class:`PsutilSource` serves
macOS, Windows and Linux systems without procfs.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import struct
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple, Protocol

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size
IFF_LOOPBACK = 0x8  # <linux/if.h>: the interface is a loopback one
_SIOCGIFFLAGS = 0x8913  # <linux/sockios.h>
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

    def cpu_times(self) -> list[tuple[float, float]]:
        """Per core, cumulative (busy, total) CPU time, in any one unit."""

    def memory(self) -> tuple[int, int]:
        """System memory (total, available), bytes."""

    def swap(self) -> tuple[int, int]:
        """System swap space (total, used), bytes; total is 0 where no swap is configured."""

    def disk_io(self) -> tuple[int, int]:
        """Cumulative (read, written) bytes over the whole disks of the system."""

    def net_interfaces(self) -> list[NetInterface]:
        """Counters of every network interface (of this network namespace, on Linux).

        Raises:
            OSError: they cannot be read, or there are more than :data:`MAX_INTERFACES`.
            ValueError: a counter is not a 64-bit unsigned integer (a malformed line).

        """

    def disk_usage(self, path: str) -> tuple[int, int, float]:
        """(used bytes, total bytes, used percent) of the filesystem holding ``path``."""

    def process(self, pid: int) -> ProcStat | None:
        """Counters of process ``pid``, or None when it no longer exists."""

    def children(self, pid: int) -> list[int]:
        """Direct children of ``pid`` (empty when it no longer exists)."""

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

    def cpu_times(self) -> list[tuple[float, float]]:
        """Per core (busy, total) clock ticks from ``/proc/stat``, as psutil counts them."""
        out: list[tuple[float, float]] = []
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
            out.append((total - idle, total))
        return out

    def memory(self) -> tuple[int, int]:
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
        return total, available

    def swap(self) -> tuple[int, int]:
        """(SwapTotal, SwapTotal - SwapFree) from ``/proc/meminfo``, bytes; (0, 0) without them."""
        fields: dict[str, int] = {}
        for line in _read(f"{self.root}/meminfo").splitlines():
            name, _, rest = line.partition(":")
            if name in ("SwapTotal", "SwapFree"):
                fields[name] = int(rest.split()[0]) * 1024
                if len(fields) == 2:
                    break
        total = fields.get("SwapTotal", 0)
        return total, max(0, total - fields.get("SwapFree", total))

    def disk_io(self) -> tuple[int, int]:
        """Sectors read and written by whole disks in ``/proc/diskstats``, as bytes."""
        read = written = 0
        for line in _read(f"{self.root}/diskstats").splitlines():
            f = line.split()
            if len(f) < 10 or (self._disks is not None and f[2] not in self._disks):
                continue
            read += int(f[5])
            written += int(f[9])
        return read * SECTOR_BYTES, written * SECTOR_BYTES

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

    def disk_usage(self, path: str) -> tuple[int, int, float]:
        """``statvfs`` of ``path``, with psutil's percent (of the space users can reach)."""
        return _statvfs_usage(path)

    def process(self, pid: int) -> ProcStat | None:
        """Parse ``/proc/<pid>/stat`` (one read gives state, CPU, threads, RSS, start time)."""
        try:
            text = _read_record(f"{self.root}/{pid}/stat")
        except (FileNotFoundError, ProcessLookupError):
            return None
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


def _statvfs_usage(path: str) -> tuple[int, int, float]:
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    reachable = used + st.f_bavail * st.f_frsize
    return used, total, (used / reachable * 100.0 if reachable else 0.0)


class PsutilSource:
    """psutil, for systems without procfs (macOS, Windows).

    Args:
        psutil_module: the psutil module (injectable for tests); imported when omitted.

    """

    def __init__(self, psutil_module: ModuleType | None = None) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self.psutil: Any = psutil_module
        self._procs: dict[int, Any] = {}
        # On Linux psutil adds /proc/stat's whole-second btime to the start ticks; take it
        # off again and compare on the boot clock, as ProcfsSource does.
        self._linux = sys.platform.startswith("linux") and hasattr(time, "CLOCK_BOOTTIME")
        self._boot_time = float(psutil_module.boot_time()) if self._linux else 0.0
        self._tick = float(os.sysconf("SC_CLK_TCK")) if self._linux else 0.0

    def cpu_times(self) -> list[tuple[float, float]]:
        """Per core (busy, total) seconds, busy as psutil's ``cpu_percent`` counts it."""
        out: list[tuple[float, float]] = []
        for t in self.psutil.cpu_times(percpu=True):
            d = t._asdict()
            total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
            out.append((total - d["idle"] - d.get("iowait", 0.0), total))
        return out

    def memory(self) -> tuple[int, int]:
        """(total, available) bytes from ``psutil.virtual_memory()``."""
        vm = self.psutil.virtual_memory()
        return int(vm.total), int(vm.available)

    def swap(self) -> tuple[int, int]:
        """(total, used) bytes from ``psutil.swap_memory()``."""
        sm = self.psutil.swap_memory()
        return int(sm.total), int(sm.used)

    def disk_io(self) -> tuple[int, int]:
        """(read, written) bytes from ``psutil.disk_io_counters()``; zeros when it has none."""
        io = self.psutil.disk_io_counters()
        return (int(io.read_bytes), int(io.write_bytes)) if io else (0, 0)

    def net_interfaces(self) -> list[NetInterface]:
        """``psutil.net_io_counters(pernic=True)``; loopback as ``psutil.net_if_stats()`` says.

        Its ``flags`` (psutil 5.9.3+, not on Windows) name ``loopback``; without them, the
        usual loopback names (``lo``, ``lo0``, Windows' ``Loopback Pseudo-Interface 1``).
        """
        counters = self.psutil.net_io_counters(pernic=True)
        if len(counters) > MAX_INTERFACES:
            raise OSError(
                errno.E2BIG, f"{len(counters)} network interfaces, more than {MAX_INTERFACES}"
            )
        try:
            stats = self.psutil.net_if_stats()
        except (OSError, self.psutil.Error):
            stats = {}
        out: list[NetInterface] = []
        for name, io in counters.items():
            flags = getattr(stats.get(name), "flags", "")
            if flags:
                loopback = "loopback" in flags.split(",")
            else:
                loopback = name in ("lo", "lo0") or name.lower().startswith("loopback")
            out.append(NetInterface(name, int(io.bytes_sent), int(io.bytes_recv), loopback))
        return out

    def disk_usage(self, path: str) -> tuple[int, int, float]:
        """``psutil.disk_usage(path)`` as (used, total, percent)."""
        du = self.psutil.disk_usage(path)
        return int(du.used), int(du.total), float(du.percent)

    def _proc(self, pid: int) -> Any:
        proc = self._procs.get(pid)
        if proc is None:
            proc = self._procs[pid] = self.psutil.Process(pid)
        return proc

    def process(self, pid: int) -> ProcStat | None:
        """Counters of ``pid`` through one ``psutil.Process.oneshot()``."""
        ps = self.psutil
        try:
            proc = self._proc(pid)
            with proc.oneshot():
                t = proc.cpu_times()
                return ProcStat(
                    cpu_seconds=t.user + t.system,
                    children_cpu_seconds=getattr(t, "children_user", 0.0)
                    + getattr(t, "children_system", 0.0),
                    threads=proc.num_threads(),
                    rss_bytes=proc.memory_info().rss,
                    start_time=self._start_time(proc.create_time()),
                    ppid=proc.ppid(),
                    zombie=proc.status() == ps.STATUS_ZOMBIE,
                )
        except (ps.NoSuchProcess, ps.ZombieProcess):
            self._procs.pop(pid, None)
            return None

    def _start_time(self, create_time: float) -> float:
        if not self._linux:
            return float(create_time)
        return round((create_time - self._boot_time) * self._tick) / self._tick

    def last_pid(self) -> int | None:
        """``/proc/loadavg``'s last field on Linux; None elsewhere."""
        return _last_pid("/proc") if self._linux else None

    def clock(self) -> float:
        """Wall-clock seconds; seconds since boot in whole clock ticks on Linux."""
        return _boot_clock(self._tick) if self._linux else time.time()

    def children(self, pid: int) -> list[int]:
        """Direct children of ``pid`` (psutil scans the process table to find them)."""
        ps = self.psutil
        try:
            return [c.pid for c in self._proc(pid).children()]
        except (ps.NoSuchProcess, ps.ZombieProcess):
            return []

    def cpu_count(self, pid: int) -> int:
        """Affinity of ``pid`` where the OS has one (not macOS), else the logical CPU count."""
        try:
            return len(self._proc(pid).cpu_affinity())
        except (AttributeError, self.psutil.Error):
            return self.psutil.cpu_count() or 1

    def cpus(self, pids: Iterable[int]) -> int:
        """Size of the union of the affinity masks of ``pids``; the CPU count on macOS."""
        ps = self.psutil
        cpus: set[int] = set()
        for pid in pids:
            try:
                cpus.update(self._proc(pid).cpu_affinity())
            except (ps.NoSuchProcess, ps.ZombieProcess):
                self._procs.pop(pid, None)
            except (AttributeError, ps.Error):
                return ps.cpu_count() or 1
        return len(cpus) or ps.cpu_count() or 1

    def pss(self, pid: int) -> int | None:
        """``Pss:`` of ``/proc/<pid>/smaps_rollup`` on Linux, bytes.

        Raises:
            OSError: not Linux (macOS and Windows have no proportional set size).

        """
        if not sys.platform.startswith("linux"):
            raise OSError(errno.ENOSYS, "the proportional set size needs Linux smaps_rollup")
        return _smaps_pss("/proc", pid)


def default_source() -> HostSource:
    """Procfs on Linux when it has what we need, psutil everywhere else."""
    if sys.platform.startswith("linux") and ProcfsSource.supported():
        return ProcfsSource()
    return PsutilSource()
