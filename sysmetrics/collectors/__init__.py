"""Collectors: one module per source, each knowing nothing about training frameworks."""

from __future__ import annotations

from collections.abc import Sequence

from sysmetrics.cgroup import find_cgroup
from sysmetrics.collectors.base import Aggregation, BaseCollector, Collector
from sysmetrics.collectors.cpu import CPUCollector
from sysmetrics.collectors.disk import DiskCollector
from sysmetrics.collectors.memory import MemoryCollector
from sysmetrics.collectors.network import NetworkCollector
from sysmetrics.collectors.process import ProcessCollector
from sysmetrics.host import HostSource, default_source

__all__ = [
    "Aggregation",
    "BaseCollector",
    "CPUCollector",
    "Collector",
    "DiskCollector",
    "MemoryCollector",
    "NetworkCollector",
    "ProcessCollector",
    "host_collectors",
]


def host_collectors(
    pid: int,
    disk_paths: Sequence[str] = ("/",),
    track_process_tree: bool = True,
    source: HostSource | None = None,
) -> list[Collector]:
    """The host collectors (process, CPU, memory, disk, network) for process ``pid``."""
    source = source or default_source()
    cgroup = find_cgroup(pid=pid)
    return [
        ProcessCollector(source, pid, track_process_tree, cgroup),
        CPUCollector(source),
        MemoryCollector(source, cgroup),
        DiskCollector(source, disk_paths),
        NetworkCollector(source),
    ]
