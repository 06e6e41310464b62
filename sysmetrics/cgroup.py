"""Container limits: the CPU quota and memory limit of this process's cgroup (v1 and v2).

Inside a container ``/proc/meminfo`` and the CPU count describe the host, so
percentages computed from them are wrong: a container limited to 2 CPUs on a
64-core host that is busy on both reads 3%, and memory reads as a fraction of
the host's. :func:`find_cgroup` locates the cgroup folders of a process from
``/proc/<pid>/cgroup`` and ``/proc/<pid>/mountinfo``; :class:`Cgroup` reads
the limits, the effective one being the smallest along the hierarchy.

Limits can change while a job runs (Kubernetes in-place pod resize, ``docker update``),
so they are never kept for good: :meth:`Cgroup.cpu_limit`, :meth:`Cgroup.memory_limit`
and :meth:`Cgroup.swap_limit` return the current value, read from the files again once
the latest reading is ``refresh_s`` old (1 s by default). Reading all three took 0.16 ms
for this VM's cgroup v1 and 0.25 ms for a five-level v2 tree (``benchmarks/cgroup_limits.py``),
so keeping them current costs under 0.03 % of a core whatever the sampling interval. The
cgroup folders themselves are found once: a process moved to another cgroup is not followed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

_UNLIMITED = 1 << 60  # v1 writes "no limit" as a page-rounded 2**63 - 1
LIMITS_REFRESH_S = 1.0  # seconds a reading of the limits is used before they are read again

_T = TypeVar("_T")


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text == "max" or not text.lstrip("-").isdigit():
        return None
    try:
        return int(text)
    except ValueError:  # over Python's 4300-digit limit on int()
        return None


def _stat_field(path: str, names: tuple[str, ...]) -> int:
    """First of ``names`` found in a ``memory.stat`` file, 0 when none is."""
    try:
        with open(path, encoding="ascii") as f:
            stats = dict(line.split() for line in f if line.count(" ") == 1)
    except (OSError, ValueError):
        return 0
    for name in names:
        if name in stats:
            return int(stats[name])
    return 0


@dataclass
class Cgroup:
    """The cgroup folders of one process, innermost first, for each controller.

    The limits are the one place every collector reads them from; each is read again
    once its latest reading is ``refresh_s`` old, so a change shows within that time.

    Attributes:
        version: 1 or 2.
        memory_dirs: folders of the memory controller from the process's own cgroup
            up to the controller's mount point.
        cpu_dirs: the same for the CPU controller.
        refresh_s: seconds a reading of a limit is used before the files are read again
            (0: at every call).
        clock: the time, in seconds, that ``refresh_s`` is measured on (monotonic).

    """

    version: int
    memory_dirs: list[str] = field(default_factory=list)
    cpu_dirs: list[str] = field(default_factory=list)
    refresh_s: float = LIMITS_REFRESH_S
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    # limit name -> (clock() when read, value)
    _read_at: dict[str, tuple[float, object]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def _current(self, name: str, read: Callable[[], _T]) -> _T:
        """The latest reading of limit ``name``, read again once ``refresh_s`` old."""
        now = self.clock()
        latest = self._read_at.get(name)
        if latest is not None and 0.0 <= now - latest[0] < self.refresh_s:
            return latest[1]  # type: ignore[return-value]  # what read() returned for name
        value = read()
        self._read_at[name] = (now, value)
        return value

    def memory_limit(self) -> int | None:
        """Effective memory limit in bytes (smallest along the hierarchy), None if unlimited.

        The current one, as of at most ``refresh_s`` ago.
        """
        return self._current("memory", self._memory_limit)

    def _memory_limit(self) -> int | None:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        limits = [_read_int(os.path.join(d, name)) for d in self.memory_dirs]
        real = [v for v in limits if v is not None and 0 < v < _UNLIMITED]
        return min(real) if real else None

    def memory_used(self) -> int | None:
        """Memory charged to the cgroup less reclaimable inactive file cache, bytes.

        This is the figure ``docker stats`` and the kubelet report as usage.
        """
        if not self.memory_dirs:
            return None
        d = self.memory_dirs[0]
        if self.version == 2:
            usage = _read_int(os.path.join(d, "memory.current"))
            inactive = _stat_field(os.path.join(d, "memory.stat"), ("inactive_file",))
        else:
            usage = _read_int(os.path.join(d, "memory.usage_in_bytes"))
            inactive = _stat_field(
                os.path.join(d, "memory.stat"), ("total_inactive_file", "inactive_file")
            )
        if usage is None:
            return None
        return max(0, usage - inactive)

    def swap_limit(self) -> int | None:
        """Effective swap limit in bytes (v2 ``memory.swap.max``, smallest along the hierarchy).

        0 where the cgroup may not swap; None where no limit is set and on v1 (whose
        ``memory.memsw.*`` count memory and swap together). The current one, as of at most
        ``refresh_s`` ago.
        """
        return self._current("swap", self._swap_limit)

    def _swap_limit(self) -> int | None:
        if self.version != 2:
            return None
        limits = [_read_int(os.path.join(d, "memory.swap.max")) for d in self.memory_dirs]
        real = [v for v in limits if v is not None and 0 <= v < _UNLIMITED]
        return min(real) if real else None

    def swap_used(self) -> int | None:
        """Swap used by the cgroup (v2 ``memory.swap.current``), bytes; None on v1."""
        if self.version != 2 or not self.memory_dirs:
            return None
        used = _read_int(os.path.join(self.memory_dirs[0], "memory.swap.current"))
        return None if used is None else max(0, used)

    def cpu_limit(self) -> float | None:
        """CPUs allowed by the CFS quota (quota / period, smallest along the hierarchy).

        The current one, as of at most ``refresh_s`` ago; None where there is no quota.
        """
        return self._current("cpu", self._cpu_limit)

    def _cpu_limit(self) -> float | None:
        limits = []
        for d in self.cpu_dirs:
            if self.version == 2:
                try:
                    with open(os.path.join(d, "cpu.max"), encoding="ascii") as f:
                        quota, _, period = f.read().strip().partition(" ")
                except OSError:
                    continue
                if quota != "max" and quota.isdigit() and period.isdigit():
                    limits.append(int(quota) / int(period))
            else:
                q = _read_int(os.path.join(d, "cpu.cfs_quota_us"))
                p = _read_int(os.path.join(d, "cpu.cfs_period_us"))
                if q is not None and q > 0 and p:
                    limits.append(q / p)
        return min(limits) if limits else None


def _dirs_up(mountpoint: str, mount_root: str, cgroup_path: str) -> list[str]:
    """Folders from the process's cgroup up to ``mountpoint``, innermost first."""
    rel = cgroup_path
    if mount_root != "/" and (rel == mount_root or rel.startswith(mount_root + "/")):
        rel = rel[len(mount_root) :]
    leaf = os.path.normpath(mountpoint + "/" + rel.strip("/")) if rel.strip("/") else mountpoint
    if not os.path.isdir(leaf):
        # Namespaced container: /proc/self/cgroup shows a host path, the mount is ours.
        leaf = mountpoint
    dirs = [leaf]
    while dirs[-1] != mountpoint and len(dirs[-1]) > len(mountpoint):
        dirs.append(os.path.dirname(dirs[-1]))
    return dirs


def find_cgroup(proc_root: str = "/proc", pid: int | str = "self") -> Cgroup | None:
    """Locate the cgroup of ``pid``; None where there is none (not Linux, no cgroupfs)."""
    try:
        with open(f"{proc_root}/{pid}/cgroup", encoding="utf-8") as f:
            memberships = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
        with open(f"{proc_root}/{pid}/mountinfo", encoding="utf-8") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    v1_paths = {c: p for _, ctrls, p in memberships if ctrls for c in ctrls.split(",")}
    v2_path = next((p for hier, ctrls, p in memberships if hier == "0" and not ctrls), None)

    v1: dict[str, list[str]] = {}
    v2: list[str] = []
    for line in mounts:
        pre, _, post = line.partition(" - ")
        fields, post_fields = pre.split(), post.split()
        if len(fields) < 5 or len(post_fields) < 3:
            continue
        mount_root, mountpoint, fstype = fields[3], fields[4], post_fields[0]
        if fstype == "cgroup":
            for ctrl in ("memory", "cpu"):
                if ctrl in post_fields[2].split(",") and ctrl in v1_paths:
                    v1[ctrl] = _dirs_up(mountpoint, mount_root, v1_paths[ctrl])
        elif fstype == "cgroup2" and v2_path is not None:
            v2 = _dirs_up(mountpoint, mount_root, v2_path)
    if "memory" in v1 or "cpu" in v1:
        return Cgroup(1, memory_dirs=v1.get("memory", []), cpu_dirs=v1.get("cpu", []))
    if v2 and os.path.exists(os.path.join(v2[-1], "cgroup.controllers")):
        return Cgroup(2, memory_dirs=v2, cpu_dirs=v2)
    return None
