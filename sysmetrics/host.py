"""Where the host numbers come from: Linux procfs read directly, or psutil elsewhere.

Both sources answer the same small set of questions in the same units, so the
collectors are written once. On Linux :class:`ProcfsSource` reads the same
``/proc`` files psutil would, without psutil's per-call overhead, and its
``root`` can point at a captured procfs tree. :class:`PsutilSource` serves
macOS, Windows and Linux systems without procfs.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
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
    return _usage(st.f_blocks, st.f_bfree, st.f_bavail, st.f_frsize)


def _usage(blocks: int, bfree: int, bavail: int, frsize: int) -> tuple[int, int, float]:
    """(used, total, percent) bytes of a ``statvfs``, percent of the space users can reach."""
    total = blocks * frsize
    used = (blocks - bfree) * frsize
    reachable = used + bavail * frsize
    return used, total, (used / reachable * 100.0 if reachable else 0.0)


# -- disk usage of filesystems that may hang: network and FUSE -----------------------

LOCAL_FILESYSTEMS = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "bcachefs",
        "zfs",
        "f2fs",
        "jfs",
        "reiserfs",
        "nilfs2",
        "vfat",
        "msdos",
        "exfat",
        "ntfs",
        "ntfs3",
        "hfs",
        "hfsplus",
        "udf",
        "iso9660",
        "squashfs",
        "erofs",
        "tmpfs",
        "ramfs",
        "devtmpfs",
        "overlay",
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "mqueue",
        "hugetlbfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "efivarfs",
        "bpf",
        "configfs",
        "binfmt_misc",
        "rootfs",
    }
)
"""Filesystem types the local kernel answers ``statfs`` for: read in-process. Any other
type (``fuse*``, ``nfs*``, ``cifs``, ``lustre``, ``ceph``, ``9p``, ``autofs``, ...) may
block in the kernel for as long as its server does, so it is read by a helper process."""

PROBE_EVERY = 5.0  # s between two statfs of a path read by a helper process
PROBE_WAIT = 0.1  # s a sample waits for the helper's answer (a later answer counts later)
PROBE_TIMEOUT = 10.0  # s without an answer: the helper is killed, the path has failed
PROBE_CURRENT = 1.0  # s an answer stays current after the next one is due
_MOUNTINFO_BYTES = 16 * 1024 * 1024  # read at most this much of /proc/self/mountinfo
_ANSWER_BYTES = 4096  # an answer longer than this is garbled
_OCTAL = re.compile(r"\\([0-7]{3})")


def filesystem_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The type of the filesystem ``path`` is on (``"ext4"``, ``"fuse.gcsfuse"``), or None.

    The mount in ``mountinfo`` with the longest mount point that holds ``path`` made
    real (the last one mounted of those on the same point). None where ``mountinfo``
    cannot be read (not Linux) or names no mount of it. Reads at most 16 MiB.
    """
    try:
        fd = os.open(mountinfo, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks, size = [], 0
        while size < _MOUNTINFO_BYTES and (chunk := os.read(fd, _CHUNK)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _mount_type(os.fsdecode(b"".join(chunks)), os.path.realpath(path))


def _mount_type(mountinfo: str, path: str) -> str | None:
    """The type of the innermost mount of the absolute ``path`` in ``mountinfo``'s text."""
    found, longest = None, -1
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, kind = left.split(" "), right.split(" ", 1)[0]
        if not sep or len(fields) < 5 or not kind:
            continue
        point = _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        if not point.startswith("/"):
            continue
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= longest:
            found, longest = kind, len(point)
    return found


_HELPER = """
import os, sys
path = sys.argv[1]
while sys.stdin.buffer.readline():
    try:
        st = os.statvfs(path)
        out = "%d %d %d %d\\n" % (st.f_blocks, st.f_bfree, st.f_bavail, st.f_frsize)
    except OSError as exc:
        out = "E %d\\n" % (exc.errno or 0)
    sys.stdout.write(out)
    sys.stdout.flush()
"""


class StatfsProbe:
    """``statvfs`` of one path done by a helper process that can be killed.

    A ``statfs`` that blocks in the kernel (a FUSE or network filesystem whose server
    does not answer) puts the calling thread in uninterruptible sleep: a process with
    such a thread cannot exit, SIGKILL included, until the server answers. The helper
    takes that risk instead: :meth:`usage` never blocks more than ``wait`` seconds.

    The helper is started at the first :meth:`usage`, asked at most every ``every``
    seconds (a line on its stdin; one line back: four numbers or an errno). A request not
    answered in ``timeout`` seconds kills it (SIGKILL; it goes when the kernel lets it)
    and raises; no new helper is started for the path while the killed one still lives,
    so a dead mount holds at most one process. An answer is current for ``every`` seconds
    and ``PROBE_CURRENT`` more (a slow mount's next answer comes in time), no longer.

    Args:
        path: the path whose filesystem to measure.
        command: the helper's command line (a fake one in tests); Python's own by default.
        every, wait, timeout: seconds; ``PROBE_EVERY``, ``PROBE_WAIT``, ``PROBE_TIMEOUT``
            by default.

    """

    def __init__(
        self,
        path: str,
        command: Sequence[str] | None = None,
        every: float | None = None,
        wait: float | None = None,
        timeout: float | None = None,
    ) -> None:
        self.path = path
        self.command = list(command or [sys.executable, "-I", "-S", "-c", _HELPER, path])
        self.every = PROBE_EVERY if every is None else every
        self.wait = PROBE_WAIT if wait is None else wait
        self.timeout = PROBE_TIMEOUT if timeout is None else timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._killed: subprocess.Popen[bytes] | None = None  # may still be in the kernel
        self._buffer = b""
        self._sent: float | None = None  # monotonic time of the request in flight
        self._asked = -math.inf  # monotonic time of the latest request
        self._value: tuple[int, int, float] | None = None
        self._measured = -math.inf

    @property
    def pid(self) -> int | None:
        """The helper's process id, None while there is none."""
        return self._proc.pid if self._proc is not None else None

    def usage(self) -> tuple[int, int, float] | None:
        """(used, total, percent) like ``disk_usage``, or None while nothing is current.

        Raises:
            OSError: the path's own error (``ENOENT``, ``ESTALE``, ...), the helper ended,
                or ``TimeoutError``: no answer in ``timeout`` seconds (the helper is killed).

        """
        now = time.monotonic()
        if self._sent is not None:
            self._receive(now, 0.0)
        if self._sent is None and now - self._asked >= self.every and self._ask(now):
            self._receive(now, self.wait)
        if self._value is not None and now - self._measured <= self.every + PROBE_CURRENT:
            return self._value
        return None

    def _ask(self, now: float) -> bool:
        """Send a request (starting a helper if needed); False while a killed one lives."""
        if self._killed is not None:
            if self._killed.poll() is None:
                return False
            self._killed = None
        if self._proc is None:
            proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C is not for it
            )
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            self._proc = proc
        assert self._proc.stdin is not None
        try:
            os.write(self._proc.stdin.fileno(), b"\n")
        except OSError:
            self._fail()
            raise OSError(errno.EPIPE, "the statfs helper process ended") from None
        self._sent = self._asked = now
        return True

    def _receive(self, now: float, wait: float) -> None:
        """Take the helper's answer if there is one, waiting at most ``wait`` s."""
        sent = self._sent
        assert self._proc is not None and self._proc.stdout is not None and sent is not None
        fd = self._proc.stdout.fileno()
        if wait > 0:
            select.select([fd], [], [], wait)
        try:
            data: bytes | None = os.read(fd, _ANSWER_BYTES)
        except BlockingIOError:
            data = None
        if data == b"":
            self._fail()
            raise OSError(errno.EPIPE, "the statfs helper process ended")
        self._buffer += data or b""
        answer, newline, rest = self._buffer.partition(b"\n")
        if newline:
            self._buffer, self._sent = rest, None
            self._value = None
            fields = answer.split()
            if len(fields) == 2 and fields[0] == b"E" and fields[1].isdigit():
                code = int(fields[1])
                raise OSError(code, os.strerror(code), self.path)
            if len(fields) != 4 or not all(f.isdigit() for f in fields):
                self._fail()
                raise OSError(errno.EPROTO, f"the statfs helper answered {answer[:60]!r}")
            blocks, bfree, bavail, frsize = (int(f) for f in fields)
            if not (bfree <= blocks and bavail <= blocks):
                raise OSError(
                    errno.EPROTO, f"statfs answered more free blocks than blocks: {answer[:60]!r}"
                )
            self._value, self._measured = _usage(blocks, bfree, bavail, frsize), now
        elif len(self._buffer) > _ANSWER_BYTES:
            self._fail()
            raise OSError(errno.EPROTO, "the statfs helper's answer is garbled")
        elif time.monotonic() - sent > self.timeout:
            self._fail()
            raise TimeoutError(
                errno.ETIMEDOUT,
                f"statfs did not answer in {self.timeout:g} s (a hung mount?); its helper "
                "process was killed",
            )

    def _fail(self) -> None:
        """Kill the helper; nothing is current until a new one answers."""
        self._value, self._sent, self._buffer = None, None, b""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        if proc.poll() is None:
            self._killed = proc  # in a statfs the kernel does not interrupt: wait for it

    def close(self) -> None:
        """Kill the helper; never waits for it."""
        self._fail()


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
