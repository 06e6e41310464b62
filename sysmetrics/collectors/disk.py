"""Disk usage per path and disk I/O since the first sample."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

from sysmetrics.collectors.base import BaseCollector, MiB
from sysmetrics.errors import SystemMetricsWarning, quote
from sysmetrics.host import HostSource, MountWatch, StatfsProbe, local_path
from sysmetrics.host.statfs import _mounts, _path_type, is_local

GiB = 1024 * MiB


class DiskCollector(BaseCollector):
    """Filesystem usage of each configured path, and system disk reads and writes.

    Keys: ``disk.{path}.usagePercent`` (percent of the space users can reach, as psutil
    and ``df`` count it), ``disk.{path}.usageGB`` (GiB used), ``disk.in`` and ``disk.out``
    (MiB read and written by the system's whole disks since the first sample, cumulative).
    Source: ``statvfs`` or ``psutil.disk_usage``; ``/proc/diskstats`` or
    ``psutil.disk_io_counters()``.

    A path on a filesystem that may hang (any type but the local ones, see
    :data:`~sysmetrics.host.LOCAL_FILESYSTEMS`: FUSE, NFS, Lustre, ...) is measured by a
    helper process (:class:`~sysmetrics.host.StatfsProbe`) every 5 s, so a dead mount
    never blocks a thread of this process; its latest measurement is reported in between.
    Where a path is placed comes from the mount table's text alone (never a call on the
    path that could wait on its server), read at construction and again when it changes
    (:class:`~sysmetrics.host.MountWatch`: at most once a second): a path on which a
    network filesystem is mounted after the start moves to a helper from the next
    sample on, and back in-process once it is unmounted.

    A path that cannot be read (removed, ``ESTALE``, ``EIO``) costs its own keys only:
    they are left out of the samples while it fails, with one
    :class:`SystemMetricsWarning` per path, and come back when it answers again.
    """

    name = "disk"

    def __init__(
        self,
        source: HostSource,
        paths: Sequence[str] = ("/",),
        probe: Callable[[str], StatfsProbe | None] | None = None,
        mountinfo: str | None = None,
    ) -> None:
        """Watch ``paths``, placed by the mount table ``mountinfo`` (``MOUNTINFO``).

        ``probe(path)``, where given, places each path once instead: the helper process
        measuring it, or None to read it here.
        """
        self.source = source
        self.paths = tuple(paths)
        self._probes: dict[str, StatfsProbe] = {}  # the paths measured by a helper
        self._parked: dict[str, StatfsProbe] = {}  # closed: their paths are local again
        self._watch: MountWatch | None = None
        if probe is not None:
            self._probes = {p: found for p in dict.fromkeys(self.paths) if (found := probe(p))}
        else:
            self._watch = MountWatch(mountinfo)
            self._place(self._watch.read())
        self._keys = [(p, f"disk.{p}.usagePercent", f"disk.{p}.usageGB") for p in self.paths]
        self._start: tuple[int, int] | None = None
        self._warned: set[str] = set()  # paths whose failure was warned

    def sample(self) -> dict[str, float]:
        """Usage of each path that answers, and MiB read and written since the first sample."""
        out: dict[str, float] = {}
        if self._watch is not None and self._watch.changed():
            table = self._watch.read()
            if table is not None:  # unreadable now: the paths stay where they are
                self._place(table)
        for path, percent_key, gb_key in self._keys:
            probe = self._probes.get(path)
            try:
                usage = self.source.disk_usage(path) if probe is None else probe.usage()
            except OSError as exc:
                self._failed(path, exc)
                continue
            if usage is None:  # its helper has not answered yet
                continue
            out[percent_key] = usage.percent
            out[gb_key] = usage.used / GiB
        io = self.source.disk_io()  # bytes
        read, written = io.read, io.written
        if self._start is None:
            self._start = (read, written)
        out["disk.in"] = (read - self._start[0]) / MiB
        out["disk.out"] = (written - self._start[1]) / MiB
        return out

    def _place(self, table: str | None) -> None:
        """Measure each path on a non-local filesystem of ``table`` by a helper.

        The others are read here (all of them where there is no table: not Linux). A
        path that comes back keeps its closed helper's probe, which starts no new helper
        while a killed one is still stuck in the kernel.
        """
        mounts = None if table is None else _mounts(table)
        for path in dict.fromkeys(self.paths):
            remote = mounts is not None and not is_local(_path_type(path, mounts))
            if remote and path not in self._probes:
                parked = self._parked.pop(path, None)
                self._probes[path] = StatfsProbe(path) if parked is None else parked
            elif not remote and path in self._probes:
                probe = self._parked[path] = self._probes.pop(path)
                probe.close()

    def _failed(self, path: str, exc: OSError) -> None:
        """Warn the first time ``path`` fails; its keys are left out of this sample."""
        if path in self._warned:
            return
        self._warned.add(path)
        warnings.warn(
            f"sysmetrics: disk path {quote(path, 120)!r} cannot be read; its keys are left "
            f"out while it fails and come back when it answers, the rest go on: "
            f"{type(exc).__name__}: {quote(str(exc), 120)}",
            SystemMetricsWarning,
            stacklevel=2,
        )

    def close(self) -> None:
        """Kill the helper processes (never waiting for one stuck in the kernel)."""
        for probe in [*self._probes.values(), *self._parked.values()]:
            probe.close()
        if self._watch is not None:
            self._watch.close()


def isolated_probe(path: str) -> StatfsProbe | None:
    """A :class:`StatfsProbe` for ``path`` unless its filesystem is a local one.

    None (read in-process) where the type is in ``LOCAL_FILESYSTEMS`` or unknown
    (no ``/proc/self/mountinfo``: not Linux), by :func:`~sysmetrics.host.local_path`.
    """
    return None if local_path(path) else StatfsProbe(path)
