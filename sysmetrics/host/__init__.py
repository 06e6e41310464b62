"""Where the host numbers come from: Linux procfs read directly, or psutil elsewhere.

Both sources answer the same small set of questions in the same units
(:class:`HostSource`, whose readings are named tuples), so the collectors are written
once. On Linux :class:`ProcfsSource` reads the same ``/proc`` files psutil would, without
psutil's per-call overhead, and its ``root`` can point at a captured procfs tree.
:class:`PsutilSource` serves macOS, Windows and Linux systems without procfs.

Modules: :mod:`~sysmetrics.host.source` (the protocol, its records, the job and its
process tree), :mod:`~sysmetrics.host.procfs`, :mod:`~sysmetrics.host.psutil_source`,
and :mod:`~sysmetrics.host.statfs` (disk usage of mounts that may hang, in a helper
process). Every name is importable from ``sysmetrics.host``.
"""

from __future__ import annotations

import sys

from sysmetrics.host.procfs import ProcfsSource
from sysmetrics.host.psutil_source import PsutilSource
from sysmetrics.host.source import (
    IFF_LOOPBACK,
    MAX_INTERFACES,
    SECTOR_BYTES,
    CpuTime,
    DiskIO,
    DiskUsage,
    HostSource,
    Job,
    MemoryInfo,
    NetInterface,
    ProcStat,
    SwapInfo,
    TreeProcess,
    process_tree,
)
from sysmetrics.host.statfs import (
    LOCAL_FILESYSTEMS,
    MOUNTINFO,
    MOUNTS_EVERY,
    PROBE_CURRENT,
    PROBE_EVERY,
    PROBE_TIMEOUT,
    PROBE_WAIT,
    MountWatch,
    StatfsProbe,
    _mount_type,
    _path_type,
    _statvfs_usage,
    _usage,
    filesystem_type,
    is_local,
    local_path,
)

__all__ = [
    "IFF_LOOPBACK",
    "LOCAL_FILESYSTEMS",
    "MAX_INTERFACES",
    "MOUNTINFO",
    "MOUNTS_EVERY",
    "PROBE_CURRENT",
    "PROBE_EVERY",
    "PROBE_TIMEOUT",
    "PROBE_WAIT",
    "SECTOR_BYTES",
    "CpuTime",
    "DiskIO",
    "DiskUsage",
    "HostSource",
    "Job",
    "MemoryInfo",
    "MountWatch",
    "NetInterface",
    "ProcStat",
    "ProcfsSource",
    "PsutilSource",
    "StatfsProbe",
    "SwapInfo",
    "TreeProcess",
    "_mount_type",
    "_path_type",
    "_statvfs_usage",
    "_usage",
    "default_source",
    "filesystem_type",
    "is_local",
    "local_path",
    "process_tree",
]


def default_source() -> HostSource:
    """Procfs on Linux when it has what we need, psutil everywhere else."""
    if sys.platform.startswith("linux") and ProcfsSource.supported():
        return ProcfsSource()
    return PsutilSource()
