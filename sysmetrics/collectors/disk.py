"""Disk usage per path and disk I/O since the first sample."""

from __future__ import annotations

from collections.abc import Sequence

from sysmetrics.collectors.base import BaseCollector, MiB
from sysmetrics.host import HostSource

GiB = 1024 * MiB


class DiskCollector(BaseCollector):
    """Filesystem usage of each configured path, and system disk reads and writes.

    Keys: ``disk.{path}.usagePercent`` (percent of the space users can reach, as psutil
    and ``df`` count it), ``disk.{path}.usageGB`` (GiB used), ``disk.in`` and ``disk.out``
    (MiB read and written by the system's whole disks since the first sample, cumulative).
    Source: ``statvfs`` or ``psutil.disk_usage``; ``/proc/diskstats`` or
    ``psutil.disk_io_counters()``.
    """

    name = "disk"
    last_keys = frozenset({"in", "out"})

    def __init__(self, source: HostSource, paths: Sequence[str] = ("/",)) -> None:
        self.source = source
        self.paths = tuple(paths)
        self._keys = [(p, f"disk.{p}.usagePercent", f"disk.{p}.usageGB") for p in self.paths]
        self._start: tuple[int, int] | None = None

    def sample(self) -> dict[str, float]:
        """Usage of each path, and MiB read and written since the first sample."""
        out: dict[str, float] = {}
        for path, percent_key, gb_key in self._keys:
            used, _total, percent = self.source.disk_usage(path)
            out[percent_key] = percent
            out[gb_key] = used / GiB
        read, written = self.source.disk_io()
        if self._start is None:
            self._start = (read, written)
        out["disk.in"] = (read - self._start[0]) / MiB
        out["disk.out"] = (written - self._start[1]) / MiB
        return out
