"""MIG (Multi-Instance GPU) devices of a GPU in MIG mode, and their fields.

Each is numbered stably across reconfigurations (by its UUID).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from sysmetrics.collectors.nvidia.devices import _errors, _uuid
from sysmetrics.collectors.nvidia.fields import FieldReader, _Device, _Mig

log = logging.getLogger("sysmetrics")

_MIG_REFETCH_S = 5.0  # at most one re-fetch of a GPU's MIG handles in this many seconds
_MIG_RESCAN_S = 60.0  # and one at least this often, to find instances created meanwhile


class MigReader:
    """Fetches and reads the MIG devices of a GPU in MIG mode; the collector holds one.

    It reads them through the collector's
    :class:`~sysmetrics.collectors.nvidia.fields.FieldReader`.
    """

    def __init__(self, fields: FieldReader) -> None:
        self._fields = fields

    def fetch(self, dev: _Device) -> None:
        """(Re)fetch the MIG handles of ``dev``; ``j`` is stable for a MIG device kept.

        ``j`` is the MIG device's index in NVML's enumeration (the index of
        ``nvmlDeviceGetMigDeviceHandleByIndex``) when first seen; a MIG device still there
        after a reconfiguration (the same UUID) keeps its ``j``, a new one takes its NVML
        index, or the lowest ``j`` free where a kept device holds that.
        """
        fields = self._fields
        nvml, handle, call = fields.nvml, dev.handle, fields.call
        dev.mig_fetched = fields.clock()
        found: list[tuple[int, Any, str]] = []
        for k in range(call(lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle), 0)):
            mig = call(partial(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, k))
            if mig is not None:
                found.append((k, mig, call(partial(_uuid, nvml, mig), f"#{k}")))
        before = {m.uuid: (j, m) for j, m in dev.mig.items()}
        taken = {before[u][0] for _, _, u in found if u in before}
        mig_devices: dict[int, _Mig] = {}
        for k, mig, uuid in found:
            if uuid in before:
                j, old = before[uuid]
                mig_devices[j] = _Mig(mig, uuid, old.fields, old.lists)
                continue
            j = k
            while j in taken or j in mig_devices:
                j = min(n for n in range(len(found) + len(taken) + 1)
                        if n not in taken and n not in mig_devices)  # fmt: skip
            taken.add(j)
            mig_devices[j] = _Mig(mig, uuid)
        dev.mig = dict(sorted(mig_devices.items()))

    def read(self, dev: _Device, out: dict[str, float]) -> None:
        """The fields of each MIG device, ``gpu.{i}.mig.{j}.*``.

        NVML invalidates MIG handles when instances are destroyed or created: calls then
        answer INVALID_ARGUMENT or NOT_FOUND, and the GPU's MIG handles are fetched again
        (at most once in ``_MIG_REFETCH_S`` seconds) and read at once; they are also
        fetched again every ``_MIG_RESCAN_S`` seconds, to find instances created meanwhile.
        """
        fields = self._fields
        stale = _errors(fields.nvml, "InvalidArgument", "NotFound")
        if fields.clock() - dev.mig_fetched >= _MIG_RESCAN_S:
            self.fetch(dev)
        for _ in range(2):
            found: dict[str, float] = {}
            outdated = False
            for j, mig in dev.mig.items():
                try:
                    values = fields.read(dev, mig.fields, mig.handle, stale)
                except stale:
                    outdated = True
                    continue
                for k, v in values.items():
                    found[f"gpu.{dev.index}.mig.{j}.{k}"] = v
            if not outdated or fields.clock() - dev.mig_fetched < _MIG_REFETCH_S:
                break
            log.debug("sysmetrics: gpu.%s: MIG handles outdated, fetched again", dev.index)
            self.fetch(dev)
        out.update(found)
