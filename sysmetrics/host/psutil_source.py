"""psutil, for systems without procfs (macOS, Windows): :class:`PsutilSource`."""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from sysmetrics.host.procfs import _boot_clock, _fd_targets, _last_pid, _smaps_pss
from sysmetrics.host.source import (
    MAX_INTERFACES,
    CpuTime,
    DiskIO,
    DiskUsage,
    MemoryInfo,
    NetInterface,
    ProcStat,
    SwapInfo,
)


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

    def cpu_times(self) -> list[CpuTime]:
        """Per core busy and total seconds, busy as psutil's ``cpu_percent`` counts it."""
        out: list[CpuTime] = []
        for t in self.psutil.cpu_times(percpu=True):
            d = t._asdict()
            total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
            out.append(CpuTime(total - d["idle"] - d.get("iowait", 0.0), total))
        return out

    def memory(self) -> MemoryInfo:
        """Total and available bytes from ``psutil.virtual_memory()``."""
        vm = self.psutil.virtual_memory()
        return MemoryInfo(int(vm.total), int(vm.available))

    def swap(self) -> SwapInfo:
        """Total and used bytes from ``psutil.swap_memory()``."""
        sm = self.psutil.swap_memory()
        return SwapInfo(int(sm.total), int(sm.used))

    def disk_io(self) -> DiskIO:
        """Bytes read and written from ``psutil.disk_io_counters()``; zeros when it has none."""
        io = self.psutil.disk_io_counters()
        return DiskIO(int(io.read_bytes), int(io.write_bytes)) if io else DiskIO(0, 0)

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

    def disk_usage(self, path: str) -> DiskUsage:
        """``psutil.disk_usage(path)``."""
        du = self.psutil.disk_usage(path)
        return DiskUsage(int(du.used), int(du.total), float(du.percent))

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

    def pid_exists(self, pid: int) -> bool:
        """``/proc/<pid>`` exists on Linux (as procfs says); ``psutil.pid_exists`` elsewhere."""
        if self._linux:
            return os.path.exists(f"/proc/{pid}")
        return bool(self.psutil.pid_exists(pid))

    def fd_targets(self, pid: int) -> list[str]:
        """The links of ``/proc/<pid>/fd`` on Linux.

        Elsewhere the regular files psutil lists (``Process.open_files()``: no devices);
        empty where it may not look.
        """
        if sys.platform.startswith("linux"):
            return _fd_targets("/proc", pid)
        try:
            return [f.path for f in self._proc(pid).open_files()]
        except self.psutil.Error:
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
