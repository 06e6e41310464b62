"""Which GPUs the job's process tree uses.

NVML's process lists, or, inside a container whose PIDs NVML does not know, the
``/dev/nvidiaN`` files the tree holds open: asked of the
:class:`~sysmetrics.host.HostSource`, so a captured procfs root serves as well.
"""

from __future__ import annotations

import logging
import time
from functools import partial
from typing import Any

from sysmetrics.collectors.nvidia.backoff import _Fields
from sysmetrics.collectors.nvidia.fields import FieldReader, _Device
from sysmetrics.collectors.nvidia.proclists import (
    _Layout,
    _ProcessInfoV2,
    list_processes,
    process_layout,
)
from sysmetrics.host import HostSource, Job, process_tree

log = logging.getLogger("sysmetrics")

_MINORS_RESCAN_S = 10.0  # the device files the tree holds open: scanned again at most this often


class Attribution:
    """Which devices the job's process tree uses; the collector holds one.

    The process lists, and the device files fallback.

    Args:
        fields: the collector's field reader (the process lists are read as its fields).
        source: host readings, to find the process tree.
        job: the watched roots.
        track_process_tree: the roots' descendants too.

    Attributes:
        files: the source asked which processes exist and which files they hold open
            (``source``, or a captured procfs root); setting it forgets the last scan.

    """

    def __init__(
        self, fields: FieldReader, source: HostSource, job: Job, track_process_tree: bool
    ) -> None:
        self._fields = fields
        self._source = source
        self._job = job
        self._track_process_tree = track_process_tree
        self._files = source
        self._minors: tuple[float, set[int]] | None = None  # the latest scan: when, minors
        self._layout: _Layout | None = None  # of the process lists, found at first use

    @property
    def files(self) -> HostSource:
        """The source of the device files fallback."""
        return self._files

    @files.setter
    def files(self, files: HostSource) -> None:
        self._files = files
        self._minors = None

    def job_tree(self) -> set[int]:
        """The PIDs of the job's process tree (its roots alone without tracking)."""
        return {p for p, _ in process_tree(self._source, self._job.roots, self._track_process_tree)}

    def attribute(self, dev: _Device, procs: dict[int, int | None], tree: set[int]) -> bool:
        """Set ``dev.ours`` from its process lists; whether the device files must tell.

        They must where the lists name no process of the tree, and some PID that does not
        exist here: NVML lists PIDs of another namespace (a container). An empty list is an
        idle GPU, whatever device files the tree holds open; a GPU in MIG mode never asks
        them (every instance's process opens the parent's device file).
        """
        ours = {pid: held for pid, held in procs.items() if pid in tree}
        dev.ours = ours or None
        return not ours and not dev.mig_mode and any(not self._pid_exists(p) for p in procs)

    def attribute_by_files(self, foreign: list[_Device], tree: set[int]) -> None:
        """Each of ``foreign`` whose ``/dev/nvidiaN`` the tree holds open is the tree's."""
        minors = self._open_device_minors(tree)
        for dev in foreign:
            if dev.minor in minors:
                dev.ours = {}

    def processes(self, dev: _Device) -> dict[int, int | None]:
        """PID -> bytes held (None: not reported) of the compute, graphics and MPS lists.

        A PID in several lists is counted once (each list reports its whole memory). A GPU
        in MIG mode whose own lists are refused (NO_PERMISSION without root, as NVML
        documents) is read through its MIG devices' lists, which NVML gives any user.
        """
        procs = self._lists(dev, dev.lists, dev.handle)
        if dev.mig_mode and not dev.lists.names:
            for mig in dev.mig.values():  # a process's memory on each instance adds up
                for pid, held in self._lists(dev, mig.lists, mig.handle).items():
                    before = procs.get(pid, 0)
                    procs[pid] = None if held is None or before is None else before + held
        return procs

    def _lists(self, dev: _Device, lists: _Fields, handle: Any) -> dict[int, int | None]:
        """PID -> bytes held (None: not reported) in the process lists of one handle."""
        procs: dict[int, int | None] = {}
        for kind in list(lists.names):
            listed = self._fields.try_field(dev, lists, kind, partial(self._list, handle, kind))
            for pid, held in listed or []:
                before = procs.get(pid)
                procs[pid] = held if before is None else max(before, held or 0)
        return procs

    def _list(self, handle: Any, kind: str) -> list[tuple[int, int | None]]:
        """One process list, in the layout of the functions the driver exports."""
        if self._layout is None:
            self._layout = process_layout(self._fields.nvml)
        listed = list_processes(self._fields.nvml, handle, kind, self._layout)
        if self._layout[0] == "_v3" and any(pid == 0 for pid, _ in listed[1:]):
            # Entries after the first are garbage: _v3 writes a layout other than the one
            # read (early R535 and a binding reading 24 bytes an entry). _v2 has one layout.
            log.debug("sysmetrics: NVML _v3 process lists are garbled: using _v2 instead")
            self._layout = ("_v2", _ProcessInfoV2)
            listed = list_processes(self._fields.nvml, handle, kind, self._layout)
        return listed

    @staticmethod
    def process_keys(
        out: dict[str, float], dev: _Device, values: dict[str, float], ours: dict[int, Any]
    ) -> None:
        """``dev``'s ``values`` again as ``gpu.process.{i}.*``, with the tree's memory held."""
        prefix = f"gpu.process.{dev.index}."
        for k, v in values.items():
            out[prefix + k] = v
        held = list(ours.values())
        if held and all(isinstance(m, int) for m in held):
            out[prefix + "processMemoryAllocatedBytes"] = float(sum(held))

    def _pid_exists(self, pid: int) -> bool:
        """Whether ``pid`` is a process of this PID namespace (NVML's may be the host's)."""
        return self._files.pid_exists(pid)

    def _open_device_minors(self, tree: set[int]) -> set[int]:
        """N of the /dev/nvidiaN files the tree holds open (rescanned every 10 s at most)."""
        now = time.monotonic()
        if self._minors is not None and now - self._minors[0] < _MINORS_RESCAN_S:
            return self._minors[1]
        minors = set()
        for pid in tree:
            for target in self._files.fd_targets(pid):
                if target.startswith("/dev/nvidia") and target[11:].isdigit():
                    minors.add(int(target[11:]))
        self._minors = (now, minors)
        return minors
