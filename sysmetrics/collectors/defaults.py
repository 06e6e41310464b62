"""The default collector set and its options, in one place.

A new collector is one entry in :data:`DEFAULT_SET` (a function of the shared
:class:`Context`, returning None where its source is absent) plus its own module. A new
option is one entry in :data:`OPTIONS` (default, check, help) and one in
:class:`CollectorOptions` (its type, for ``SystemMonitor(**options)``); a test checks the
two agree and that the README lists every option.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from typing_extensions import TypedDict, Unpack

from sysmetrics._checks import one_or_many, positive_int
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
from sysmetrics.collectors.nvidia import GpuId, NvidiaCollector
from sysmetrics.collectors.openmetrics import Filters, OpenMetricsCollector
from sysmetrics.collectors.process import ProcessCollector
from sysmetrics.collectors.rapl import RaplCollector
from sysmetrics.collectors.torch_memory import TorchMemoryCollector
from sysmetrics.collectors.tpu import TPUCollector
from sysmetrics.collectors.trainium import TrainiumCollector
from sysmetrics.host import HostSource, Job, default_source

PathLike = Union[str, "os.PathLike[str]"]


class CollectorOptions(TypedDict, total=False):
    """The default collectors' options: keyword arguments of ``SystemMonitor``."""

    disk_paths: PathLike | Iterable[PathLike]
    track_process_tree: bool
    pid: int | None
    gpu_ids: Sequence[GpuId] | None
    rocm_smi_path: str | None
    open_metrics: Mapping[str, str] | None
    open_metrics_filters: Filters | None
    open_metrics_headers: Mapping[str, str] | None
    open_metrics_max_series: int
    network_loopback: bool


def _any(name: str, value: object) -> object:
    return value  # checked by the collector that takes it, with its own message


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}={value!r} is invalid: use True or False")
    return value


def _pid(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"pid={value!r} is invalid: it must be a positive process id")
    import psutil

    if not psutil.pid_exists(value):
        raise ValueError(f"pid={value!r} is invalid: no such process")
    return value


def _max_series(name: str, value: object) -> int:
    n = positive_int(value)
    if n is None:
        raise ValueError(
            f"{name}={value!r} is invalid: it must be a positive integer (series kept per endpoint)"
        )
    return n


def _disk_paths(name: str, value: object) -> tuple[str, ...]:
    items = one_or_many(value, (str, os.PathLike))
    if items is None:
        raise TypeError(
            f"disk_paths={value!r} is invalid: use a path or a list of paths whose "
            "filesystems to watch (an empty list for none)"
        )
    paths: list[str] = []
    for item in items:
        p = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        if not isinstance(p, str):
            raise TypeError(
                f"disk_paths contains {item!r}, which is not a path: each entry must be a "
                "string or os.PathLike naming an existing path"
            )
        paths.append(p)
    for p in paths:
        if not os.path.exists(p):
            raise ValueError(
                f"disk_paths contains {p!r}, which does not exist: each entry must be an "
                "existing path whose filesystem to watch"
            )
    return tuple(paths)


@dataclass(frozen=True)
class Option:
    """One option of the default collectors."""

    default: object
    check: Callable[[str, Any], object]  # (name, value) -> the value to use; raises if bad
    help: str


OPTIONS: dict[str, Option] = {
    "disk_paths": Option(
        ("/",), _disk_paths, "paths whose filesystems to report as disk.{path}.*; each must exist"
    ),
    "track_process_tree": Option(
        True, _bool, "include the process's descendants in the process metrics"
    ),
    "pid": Option(None, _pid, "the process to watch; this one by default"),
    "gpu_ids": Option(
        None,
        _any,
        "NVIDIA GPUs to watch, as CUDA numbers them under CUDA_VISIBLE_DEVICES (indices) "
        "or UUIDs; all by default",
    ),
    "rocm_smi_path": Option(
        None, _any, "the rocm-smi executable for AMD GPUs; found on PATH or in /opt/rocm"
    ),
    "open_metrics": Option(
        None,
        _any,
        "{name: url} of OpenMetrics/Prometheus endpoints to scrape into "
        "openmetrics.{name}.{metric}.{index} (needs the [openmetrics] extra)",
    ),
    "open_metrics_filters": Option(
        None,
        _any,
        'regexes on "{name}.{metric}", or {metric_regex: {label: label_regex}}; all by default',
    ),
    "open_metrics_headers": Option(
        None, _any, "HTTP headers for those requests (sent to the configured origin only)"
    ),
    "open_metrics_max_series": Option(
        10_000, _max_series, "series kept per endpoint and page (the first ones)"
    ),
    "network_loopback": Option(
        False,
        _bool,
        "count loopback interfaces (lo: traffic that never leaves the machine) in network.*",
    ),
}


def check_options(options: Mapping[str, object]) -> dict[str, Any]:
    """Every option, validated, with its default where not given (names must be known)."""
    return {
        name: opt.check(name, options[name]) if name in options else opt.default
        for name, opt in OPTIONS.items()
    }


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


# In order. The ones that may raise on a bad option come before the accelerators that
# open handles, NVML last.
DEFAULT_SET: tuple[Callable[[Context], Collector | None], ...] = (
    lambda c: ProcessCollector(c.source, c.pid, c.tree, c.cgroup, job=c.job),
    lambda c: CPUCollector(c.source),
    lambda c: MemoryCollector(c.source, c.cgroup),
    lambda c: DiskCollector(c.source, c.options["disk_paths"]),
    lambda c: NetworkCollector(c.source, c.options["network_loopback"]),
    lambda c: RaplCollector.create(),
    _open_metrics,
    _amd,
    lambda c: AppleCollector.create(),
    lambda c: TrainiumCollector.create(c.source, c.job, c.tree),
    lambda c: TPUCollector.create(),
    lambda c: IPUCollector.create(c.source, c.job, c.tree),
    # This process's torch only: nothing to read when watching another process (pid=).
    lambda c: TorchMemoryCollector.create() if c.pid == os.getpid() else None,
    lambda c: NvidiaCollector.create(c.source, c.job, c.options["gpu_ids"], c.tree),
)


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
        **options: see :data:`OPTIONS`.

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
