"""System memory: ``memory`` and ``proc.memory.availableMB``, container-aware."""

from __future__ import annotations

from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors.base import BaseCollector, MiB
from sysmetrics.host import HostSource


class MemoryCollector(BaseCollector):
    """System memory in use and available.

    Keys: ``memory`` (percent of memory in use) and ``proc.memory.availableMB`` (MiB
    available to this process). Inside a cgroup whose memory limit is below the host's
    memory, both are relative to that limit: in use is the cgroup's usage less its
    inactive file cache (as ``docker stats`` counts it), available is the limit less that,
    capped by what the host has. Source: ``/proc/meminfo`` or ``psutil.virtual_memory()``,
    and the cgroup's ``memory.*`` files.
    """

    name = "memory"

    def __init__(self, source: HostSource, cgroup: Cgroup | None = None) -> None:
        self.source = source
        self.cgroup = cgroup

    def sample(self) -> dict[str, float]:
        """Memory percent in use and MiB available."""
        total, available = self.source.memory()
        limit = self.cgroup.memory_limit() if self.cgroup else None
        used = self.cgroup.memory_used() if self.cgroup and limit and limit < total else None
        if limit is not None and used is not None:
            percent = used / limit * 100.0
            available = min(available, max(0, limit - used))
        else:
            percent = (total - available) / total * 100.0
        return {"memory": percent, "proc.memory.availableMB": available / MiB}
