"""System memory and swap: ``memory``, ``proc.memory.availableMB``, ``memory.swapPercent``."""

from __future__ import annotations

from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors.base import BaseCollector, MiB
from sysmetrics.host import HostSource

SWAP_KEY = "memory.swapPercent"


class MemoryCollector(BaseCollector):
    """System memory in use and available, and swap in use.

    Keys: ``memory`` (percent of memory in use), ``proc.memory.availableMB`` (MiB
    available to this process) and ``memory.swapPercent`` (percent of swap space in use).
    Inside a cgroup whose memory limit is below the host's memory, the first two are
    relative to that limit: in use is the cgroup's usage less its inactive file cache (as
    ``docker stats`` counts it), available is the limit less that, capped by what the host
    has. Likewise swap, inside a cgroup v2 whose ``memory.swap.max`` is below the host's
    swap space: the cgroup's ``memory.swap.current`` over that limit. ``memory.swapPercent``
    is left out where the host has no swap, or the cgroup's swap limit is 0. Source:
    ``/proc/meminfo`` or ``psutil.virtual_memory()`` and ``psutil.swap_memory()``, and the
    cgroup's ``memory.*`` files.
    """

    name = "memory"

    def __init__(self, source: HostSource, cgroup: Cgroup | None = None) -> None:
        self.source = source
        self.cgroup = cgroup

    def sample(self) -> dict[str, float]:
        """Memory percent in use and MiB available; swap percent in use where there is swap."""
        mem = self.source.memory()
        total, available = mem.total, mem.available  # bytes
        limit = self.cgroup.memory_limit() if self.cgroup else None
        used = self.cgroup.memory_used() if self.cgroup and limit and limit < total else None
        if limit is not None and used is not None:
            percent = used / limit * 100.0
            available = min(available, max(0, limit - used))
        else:
            percent = (total - available) / total * 100.0
        out = {"memory": percent, "proc.memory.availableMB": available / MiB}
        swap = self._swap_percent()
        if swap is not None:
            out[SWAP_KEY] = swap
        return out

    def _swap_percent(self) -> float | None:
        """% of swap in use: of the cgroup's swap limit where it is below the host's swap."""
        swap = self.source.swap()
        total, used = swap.total, swap.used  # bytes
        if total <= 0:
            return None  # no swap configured
        limit = self.cgroup.swap_limit() if self.cgroup else None
        if self.cgroup and limit is not None and limit < total:
            if limit == 0:
                return None  # the cgroup may not swap
            cgroup_used = self.cgroup.swap_used()
            if cgroup_used is not None:
                return min(cgroup_used, limit) / limit * 100.0  # above it: the limit was lowered
        return min(used, total) / total * 100.0
