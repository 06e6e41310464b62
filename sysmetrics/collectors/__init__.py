"""Collectors: one module per source, each knowing nothing about training frameworks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sysmetrics.cgroup import find_cgroup
from sysmetrics.collectors.amd import AMDCollector
from sysmetrics.collectors.apple import AppleCollector
from sysmetrics.collectors.base import Aggregation, BaseCollector, Collector
from sysmetrics.collectors.cpu import CPUCollector
from sysmetrics.collectors.disk import DiskCollector
from sysmetrics.collectors.ipu import IPUCollector
from sysmetrics.collectors.memory import MemoryCollector
from sysmetrics.collectors.network import NetworkCollector
from sysmetrics.collectors.nvidia import GpuId, NvidiaCollector
from sysmetrics.collectors.openmetrics import Filters, OpenMetricsCollector
from sysmetrics.collectors.process import ProcessCollector
from sysmetrics.collectors.tpu import TPUCollector
from sysmetrics.collectors.trainium import TrainiumCollector
from sysmetrics.host import HostSource, default_source

__all__ = [
    "AMDCollector",
    "Aggregation",
    "AppleCollector",
    "BaseCollector",
    "CPUCollector",
    "Collector",
    "DiskCollector",
    "IPUCollector",
    "MemoryCollector",
    "NetworkCollector",
    "NvidiaCollector",
    "OpenMetricsCollector",
    "ProcessCollector",
    "TPUCollector",
    "TrainiumCollector",
    "host_collectors",
]


def host_collectors(
    pid: int,
    disk_paths: Sequence[str] = ("/",),
    track_process_tree: bool = True,
    source: HostSource | None = None,
    gpu_ids: Sequence[GpuId] | None = None,
    rocm_smi_path: str | None = None,
    open_metrics: Mapping[str, str] | None = None,
    open_metrics_filters: Filters | None = None,
    open_metrics_headers: Mapping[str, str] | None = None,
    open_metrics_max_series: int = 10_000,
) -> list[Collector]:
    """The default collectors for process ``pid``: host ones, and accelerators found here.

    Raises:
        ValueError: ``gpu_ids`` name GPUs that cannot be watched; ``rocm_smi_path`` is
            not an executable; an OpenMetrics URL, name or filter is malformed.

    """
    if not open_metrics and (open_metrics_filters is not None or open_metrics_headers is not None):
        raise ValueError("open_metrics_filters and open_metrics_headers need open_metrics")
    source = source or default_source()
    cgroup = find_cgroup(pid=pid)
    collectors: list[Collector] = [
        ProcessCollector(source, pid, track_process_tree, cgroup),
        CPUCollector(source),
        MemoryCollector(source, cgroup),
        DiskCollector(source, disk_paths),
        NetworkCollector(source),
    ]
    if open_metrics:  # first: a malformed URL or filter raises before anything is opened
        collectors.append(
            OpenMetricsCollector(
                open_metrics,
                open_metrics_filters,
                open_metrics_headers,
                max_series=open_metrics_max_series,
            )
        )
    accelerators = [  # NVML last: the others may still raise on bad options
        AMDCollector.create(rocm_smi_path),
        AppleCollector.create(),
        TrainiumCollector.create(source, pid, track_process_tree),
        TPUCollector.create(),
        IPUCollector.create(source, pid, track_process_tree),
        NvidiaCollector.create(source, pid, gpu_ids, track_process_tree),
    ]
    collectors.extend(c for c in accelerators if c is not None)
    return collectors
