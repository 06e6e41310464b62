"""Which GPUs this process sees, in CUDA's numbering.

From ``CUDA_VISIBLE_DEVICES`` (indices, UUIDs and their prefixes, MIG devices), or the
numbering of an imported ``torch`` that initialised CUDA.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Union

from sysmetrics.errors import OptionError

log = logging.getLogger("sysmetrics")

GpuId = Union[int, str]


def _errors(nvml: Any, *names: str) -> tuple[type[Exception], ...]:
    """The ``NVMLError_<name>`` classes this binding has (older ones lack some)."""
    return tuple(getattr(nvml, f"NVMLError_{n}") for n in names if hasattr(nvml, f"NVMLError_{n}"))


def _uuid(nvml: Any, handle: Any) -> str:
    u = nvml.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


_UUID_KINDS = ("GPU-", "MIG-")
_Visible = tuple[int, Any, str]  # (CUDA index, handle, UUID)


def _leading_int(entry: str) -> int | None:
    """The number ``strtoul`` reads at the start of ``entry`` (``"1gpu2"``: 1); None if none."""
    digits = entry[1:] if entry[:1] == "+" else entry
    n = len(digits) - len(digits.lstrip("0123456789"))
    return int(digits[:n]) if n else None


def _every_uuid(nvml: Any) -> dict[str, Any]:
    """UUID -> handle of every GPU and MIG device NVML lets this user open."""
    found: dict[str, Any] = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            found[_uuid(nvml, handle)] = handle
            if nvml.nvmlDeviceGetMigMode(handle)[0] != 1:
                continue
            for j in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
                except nvml.NVMLError:
                    continue
                found[_uuid(nvml, mig)] = mig
        except nvml.NVMLError:
            continue
    return found


def _by_uuid(nvml: Any, entry: str, known: dict[str, Any]) -> Any:
    """The handle a CUDA_VISIBLE_DEVICES UUID entry names (a unique prefix will do); or None."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    except (*_errors(nvml, "NotFound", "InvalidArgument"),):
        pass
    if not known:
        known.update(_every_uuid(nvml))
    match = [h for u, h in known.items() if u.startswith(entry)]
    return match[0] if len(match) == 1 else None


def _torch_order(nvml: Any) -> list[_Visible] | None:
    """CUDA's numbering as the imported ``torch`` has it, once it initialised CUDA; else None.

    torch is never imported here and CUDA never initialised: only a ``torch`` already in
    ``sys.modules`` whose ``torch.cuda.is_initialized()`` is consulted. Each CUDA device's
    ``get_device_properties(i).uuid`` (a UUID object printing without ``GPU-``, or a
    string) is looked up in NVML (a MIG device's as ``MIG-``); None where any is not found.
    """
    torch = sys.modules.get("torch")
    try:
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        uuids = [str(cuda.get_device_properties(i).uuid) for i in range(cuda.device_count())]
    except Exception as exc:
        log.debug("sysmetrics: torch's CUDA devices unreadable, numbering from the env: %s", exc)
        return None
    out: list[_Visible] = []
    for i, raw in enumerate(uuids):
        text = raw if raw.startswith(_UUID_KINDS) else f"GPU-{raw}"
        for candidate in (text, "MIG-" + text[4:]):
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(candidate)
            except nvml.NVMLError:
                continue
            out.append((i, handle, _uuid(nvml, handle)))
            break
        else:
            log.debug("sysmetrics: torch's CUDA %d (%s) unknown to NVML: numbering from "
                      "CUDA_VISIBLE_DEVICES", i, raw)  # fmt: skip
            return None
    return out


def visible_devices(nvml: Any, env: Mapping[str, str] | None = None) -> list[_Visible]:
    """(CUDA index, handle, UUID) of each GPU CUDA shows this process, in CUDA's order.

    Where ``torch`` is imported and has initialised CUDA, its devices' UUIDs give the
    numbering (:func:`_torch_order`). Otherwise ``CUDA_VISIBLE_DEVICES`` is parsed as CUDA
    does (CUDA C Programming Guide, "CUDA Environment Variables"; as
    ``torch.cuda._parse_visible_devices`` and nvitop's ``_parse_cuda_visible_devices``):

    * entries are NVML indices (read as ``strtoul`` does: ``"1gpu2"`` is 1) or UUIDs,
      ``GPU-...``/``MIG-...``, of which a unique prefix will do (``GPU-8932f937``); the
      first entry decides which, an entry of the other kind is invalid;
    * the list ends at the first invalid entry (out of range, negative, no unique match);
    * a device named twice makes the whole list empty: CUDA then sees no device (torch:
      "Repeated ordinal results in empty set"; nvitop: "duplicate identifiers found");
    * an empty string means no GPU; unset, every NVML index in NVML's order.

    NVML numbers GPUs in PCI bus order, as CUDA does under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    CUDA's default, ``FASTEST_FIRST``, is taken to be the same order: true on a node of one
    GPU model, not always on a mixed one (where only torch's mapping is exact).

    A GPU NVML will not open (NO_PERMISSION, or any other error for a valid index) is
    skipped but keeps its place: the GPUs after it keep their CUDA numbers.
    """
    torch_order = _torch_order(nvml)
    if torch_order is not None:
        return torch_order
    spec = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    count = nvml.nvmlDeviceGetCount()
    entries = [str(i) for i in range(count)] if spec is None else spec.split(",")
    out: list[_Visible] = []
    seen: set[object] = set()
    known: dict[str, Any] = {}  # every UUID, read once at the first prefix
    kind: bool | None = None  # True: UUIDs
    for position, raw in enumerate(entries):
        entry = raw.strip()
        is_uuid = entry.startswith(_UUID_KINDS)
        if kind is not None and is_uuid != kind:
            break
        kind = is_uuid
        handle: Any = None
        try:
            if is_uuid:
                handle = _by_uuid(nvml, entry, known)
                if handle is None:
                    break
                identity: object = _uuid(nvml, handle)
            else:
                index = _leading_int(entry)
                if index is None or index >= count:
                    break
                identity = index
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            log.debug("sysmetrics: CUDA device %d (%r) cannot be opened, skipped: %s",
                      position, entry, exc)  # fmt: skip
            handle = None
            identity = entry
        if identity in seen:
            log.debug("sysmetrics: CUDA_VISIBLE_DEVICES=%r repeats a device: CUDA sees none",
                      spec)  # fmt: skip
            return []
        seen.add(identity)
        if handle is not None:
            try:
                out.append((position, handle, _uuid(nvml, handle)))
            except nvml.NVMLError as exc:
                log.debug("sysmetrics: CUDA device %d has no UUID, skipped: %s", position, exc)
    return out


def select(visible: list[_Visible], gpu_ids: Sequence[GpuId] | None) -> list[_Visible]:
    """(CUDA index, handle, UUID) of the chosen GPUs; all when ``gpu_ids`` is None.

    Raises:
        ValueError: an id that names no visible GPU.

    """
    numbered = visible
    if gpu_ids is None:
        return numbered
    chosen = []
    for gid in gpu_ids:
        if isinstance(gid, int) and not isinstance(gid, bool):
            match = [d for d in numbered if d[0] == gid]
            if match:
                chosen.append(match[0])
                continue
        if isinstance(gid, str):
            match = [d for d in numbered if d[2] == gid or d[2].startswith(gid)]
            if len(match) == 1:
                chosen.append(match[0])
                continue
        spec = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" under CUDA_VISIBLE_DEVICES={spec!r}" if spec is not None else ""
        last = numbered[-1][0] if numbered else -1
        raise OptionError(
            "gpu_ids",
            gid,
            f"use CUDA indices 0..{last}{where} or UUIDs "
            f"({', '.join(u for _, _, u in numbered) or 'none'})",
            problem="names no GPU this process can see",
            part="entry",
        )
    return chosen
