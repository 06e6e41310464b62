"""The default collector set, built from the options of :mod:`sysmetrics.options`.

A new collector is one entry in :data:`DEFAULT_SET` (a function of the shared
:class:`Context`, returning None where its source is absent) plus its own module. Its
options are declared in :mod:`sysmetrics.options`; the entry reads them from
``Context.options``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from typing_extensions import Unpack

from sysmetrics import options as options_module
from sysmetrics.cgroup import Cgroup, find_cgroup
from sysmetrics.collectors.amd import AMDCollector
from sysmetrics.collectors.amd_sysfs import AMDSysfsCollector
from sysmetrics.collectors.apple import AppleCollector
from sysmetrics.collectors.base import Collector
from sysmetrics.collectors.cpu import CPUCollector
from sysmetrics.collectors.disk import DiskCollector
from sysmetrics.collectors.ipu import IPUCollector
from sysmetrics.collectors.memory import MemoryCollector
from sysmetrics.collectors.network import NetworkCollector
from sysmetrics.collectors.nvidia import NvidiaCollector
from sysmetrics.collectors.openmetrics import OpenMetricsCollector
from sysmetrics.collectors.process import ProcessCollector
from sysmetrics.collectors.rapl import RaplCollector
from sysmetrics.collectors.torch_memory import TorchMemoryCollector
from sysmetrics.collectors.tpu import TPUCollector
from sysmetrics.collectors.trainium import TrainiumCollector
from sysmetrics.host import HostSource, Job, default_source
from sysmetrics.options import COLLECTOR_OPTIONS, CollectorOptions


def check_options(options: Mapping[str, object]) -> dict[str, Any]:
    """Every collector option, validated, with its default where not given (names known)."""
    return options_module.check(COLLECTOR_OPTIONS, options)


@dataclass(frozen=True)
class Context:
    """What every default collector is built from: the options and shared handles."""

    options: Mapping[str, Any]  # every option, validated, defaults filled in
    job: Job  # the watched processes: the process, or every local rank (job.watch)
    source: HostSource  # procfs or psutil
    cgroup: Cgroup | None  # the watched process's cgroup, where there is one

    @property
    def pid(self) -> int:
        """The watched process (the job's first root)."""
        return self.job.pid

    @property
    def tree(self) -> bool:
        """Whether the process's descendants are watched with it."""
        return bool(self.options["track_process_tree"])


def _process(c: Context) -> Collector:
    """The job's processes: ``pid`` (or every local rank), with ``track_process_tree``."""
    return ProcessCollector(c.source, c.pid, c.tree, c.cgroup, job=c.job)


def _cpu(c: Context) -> Collector:
    return CPUCollector(c.source)


def _memory(c: Context) -> Collector:
    return MemoryCollector(c.source, c.cgroup)


def _disk(c: Context) -> Collector:
    """The filesystems of the ``disk_paths`` option."""
    return DiskCollector(c.source, paths=c.options["disk_paths"])


def _network(c: Context) -> Collector:
    """The interfaces, loopback ones with the ``network_loopback`` option."""
    return NetworkCollector(c.source, loopback=c.options["network_loopback"])


def _rapl(c: Context) -> Collector | None:
    return RaplCollector.create()


def _open_metrics(c: Context) -> Collector | None:
    o = c.options
    if not o["open_metrics"]:
        if o["open_metrics_filters"] is not None or o["open_metrics_headers"] is not None:
            raise ValueError("open_metrics_filters and open_metrics_headers need open_metrics")
        return None
    return OpenMetricsCollector(
        o["open_metrics"],
        o["open_metrics_filters"],
        o["open_metrics_headers"],
        max_series=o["open_metrics_max_series"],
    )


def _amd(c: Context) -> Collector | None:
    """The AMD collector: the amdgpu driver's sysfs first, else rocm-smi/amd-smi.

    The tool is used where sysfs has no amdgpu card, or where ``rocm_smi_path`` names it
    (which still checks that path).
    """
    path = c.options["rocm_smi_path"]
    if path is None:
        found = AMDSysfsCollector.create()
        if found is not None:
            return found
    return AMDCollector.create(path)


def _apple(c: Context) -> Collector | None:
    return AppleCollector.create()


def _trainium(c: Context) -> Collector | None:
    return TrainiumCollector.create(c.source, c.job, c.tree)


def _tpu(c: Context) -> Collector | None:
    return TPUCollector.create()


def _ipu(c: Context) -> Collector | None:
    return IPUCollector.create(c.source, c.job, c.tree)


def _torch_memory(c: Context) -> Collector | None:
    """Torch's memory in this process only: nothing to read watching another (``pid``)."""
    return TorchMemoryCollector.create() if c.pid == os.getpid() else None


def _nvidia(c: Context) -> Collector | None:
    """The NVIDIA GPUs of the ``gpu_ids`` option (all by default)."""
    return NvidiaCollector.create(c.source, c.job, c.options["gpu_ids"], c.tree)


# In order. The ones that may raise on a bad option come before the accelerators that
# open handles, NVML last.
DEFAULT_SET: tuple[Callable[[Context], Collector | None], ...] = (
    _process, _cpu, _memory, _disk, _network, _rapl, _open_metrics, _amd, _apple,
    _trainium, _tpu, _ipu, _torch_memory, _nvidia,
)  # fmt: skip


def host_collectors(
    *,
    source: HostSource | None = None,
    job: Job | None = None,
    **options: Unpack[CollectorOptions],
) -> list[Collector]:
    """The default collectors: host ones, and the accelerators found here.

    Args:
        source: where host values are read (procfs or psutil); the best one here by default.
        job: the watched processes, shared by the collectors that attribute to them;
            the ``pid`` option's process (this one by default) alone otherwise.
        **options: see :data:`sysmetrics.options.OPTIONS`.

    Raises:
        TypeError, ValueError: an option is invalid (``gpu_ids`` name GPUs that cannot be
            watched, ``rocm_smi_path`` is not an executable, an OpenMetrics URL, name or
            filter is malformed, ...). Collectors made before the error are closed.

    """
    checked = check_options(options)
    job = job or Job(checked["pid"] or os.getpid())
    context = Context(checked, job, source or default_source(), find_cgroup(pid=job.pid))
    made: list[Collector] = []
    try:
        for make in DEFAULT_SET:
            collector = make(context)
            if collector is not None:
                made.append(collector)
    except BaseException:
        for collector in made:
            collector.close()
        raise
    return made
