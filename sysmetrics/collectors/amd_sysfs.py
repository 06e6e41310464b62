"""AMD GPUs through the amdgpu driver's sysfs files: ``gpu.{i}.*`` without running a tool.

The files are the kernel's documented ABI (docs.kernel.org/gpu/amdgpu/driver-misc.html and
thermal.html), read under ``/sys/class/drm/card*/device/``. Each is one decimal integer;
a tick reads a handful of them (microseconds each), where ``rocm-smi`` or ``amd-smi``
start a Python program (a second or more).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sysmetrics.collectors._values import gpu_values
from sysmetrics.collectors.base import BaseCollector

log = logging.getLogger("sysmetrics")

DRM_ROOT = "/sys/class/drm"
READ_LIMIT = 256
"""Bytes a sysfs file holds at most here (one integer or a short label); one more byte is
read to tell a longer file, which counts as unreadable."""

_CARD = re.compile(r"card[0-9]{1,5}")  # not the card0-DP-1 connectors, nor renderD128
_INT = re.compile(rb"\s*(-?[0-9]{1,20})\s*")
_INDEX = re.compile(r"[0-9]{1,5}")
_TEMP_INPUT = re.compile(r"temp([0-9]{1,3})_input")
_TEMP_LABELS = ("edge", "junction", "mem")
"""Preferred first; amdgpu's fixed label of channel ``temp{n}`` is ``_TEMP_LABELS[n - 1]``."""
_VISIBLE = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
"""Applied in this order: HIP's indices count the GPUs ROCR left visible."""

# What each field of a card is read from, under device/ (or its hwmon folder).
_DEVICE_FILES = {
    "gpu": "gpu_busy_percent",  # %
    "memory": "mem_busy_percent",  # %, memory controller busy
    "used": "mem_info_vram_used",  # bytes
    "total": "mem_info_vram_total",  # bytes
}
_HWMON_FILES = {
    "power": ("power1_average", "power1_input"),  # µW, the first present
    "cap": ("power1_cap",),  # µW
}


def parse_int(data: bytes) -> int | None:
    """The decimal integer that ``data`` (a sysfs file's bytes) holds; None for anything else.

    Whitespace around it is allowed (the kernel ends it with a newline); a sign other than
    a leading ``-``, a fraction, text or more than 20 digits give None.
    """
    match = _INT.fullmatch(data)
    return int(match.group(1)) if match else None


def read_file(path: str, limit: int = READ_LIMIT) -> bytes | None:
    """At most ``limit`` bytes of ``path``; None where it cannot be read or is longer."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
    except OSError:
        return None
    return data if len(data) <= limit else None


def read_int(path: str) -> int | None:
    """The integer in the sysfs file ``path`` (see :func:`parse_int`); None if unreadable."""
    data = read_file(path)
    return None if data is None else parse_int(data)


def _driver(device: str) -> str | None:
    """The name of the driver bound to ``device``: its ``driver`` link, else its ``uevent``."""
    try:
        return os.path.basename(os.readlink(os.path.join(device, "driver")))
    except OSError:
        pass
    data = read_file(os.path.join(device, "uevent"), 1024)
    if data is None:
        return None
    for line in data.decode("ascii", "replace").splitlines():
        if line.startswith("DRIVER="):
            return line[len("DRIVER=") :].strip()
    return None


def _temp_file(hwmons: Sequence[str]) -> str | None:
    """The ``temp{n}_input`` to report: labelled ``edge``, else ``junction``, else ``mem``.

    A channel without a ``temp{n}_label`` file has amdgpu's fixed label for its number
    (1 edge, 2 junction, 3 mem); channels with other labels are not used.
    """
    found: dict[str, str] = {}
    for hwmon in hwmons:
        for path in sorted(glob.glob(os.path.join(hwmon, "temp*_input"))):
            match = _TEMP_INPUT.fullmatch(os.path.basename(path))
            if match is None or not os.path.isfile(path):
                continue
            n = int(match.group(1))
            data = read_file(os.path.join(hwmon, f"temp{n}_label"))
            if data is not None:
                label = data.decode("ascii", "replace").strip()
            else:
                label = _TEMP_LABELS[n - 1] if 1 <= n <= len(_TEMP_LABELS) else ""
            found.setdefault(label, path)
    return next((found[label] for label in _TEMP_LABELS if label in found), None)


def card_files(device: str) -> dict[str, str]:
    """The files present of one card (``cardN/device``), by field: found once, read each tick.

    Fields: ``gpu``, ``memory`` (%), ``used``, ``total`` (bytes), ``power``, ``cap`` (µW),
    ``temp`` (m°C). A field whose file the card lacks is absent.
    """
    files: dict[str, str] = {}
    for field, name in _DEVICE_FILES.items():
        path = os.path.join(device, name)
        if os.path.isfile(path):
            files[field] = path
    hwmons = sorted(glob.glob(os.path.join(device, "hwmon", "hwmon[0-9]*")))
    for field, names in _HWMON_FILES.items():
        paths = (os.path.join(h, n) for n in names for h in hwmons)
        found = next((p for p in paths if os.path.isfile(p)), None)
        if found is not None:
            files[field] = found
    temp = _temp_file(hwmons)
    if temp is not None:
        files["temp"] = temp
    return files


def _visible(devices: list[str], environ: Mapping[str, str]) -> list[str]:
    """The ``devices`` (in ROCm's order) left visible, in their new order.

    ``ROCR_VISIBLE_DEVICES`` applies first, then ``HIP_VISIBLE_DEVICES``: each lists
    indices into what is visible before it.

    The list ends at its first entry that is not a new index in range (a UUID among them:
    UUIDs are not supported here); an empty variable leaves no GPU.
    """
    for name in _VISIBLE:
        value = environ.get(name)
        if value is None:
            continue
        chosen: list[str] = []
        for entry in value.split(","):
            entry = entry.strip()
            index = int(entry) if _INDEX.fullmatch(entry) else -1
            if not 0 <= index < len(devices) or devices[index] in chosen:
                if entry:
                    log.debug("sysmetrics: %s entry %r ignored, and those after it", name, entry)
                break
            chosen.append(devices[index])
        devices = chosen
    return devices


@dataclass(frozen=True)
class Card:
    """One amdgpu card: its PCI bus id (``0000:03:00.0``) and its files by field."""

    bus_id: str
    files: Mapping[str, str]


def find_cards(root: str = DRM_ROOT, environ: Mapping[str, str] | None = None) -> list[Card]:
    """The amdgpu cards under ``root``, numbered as ROCm numbers GPUs.

    ``root/card*`` entries (not the ``card*-*`` connectors) whose ``device`` is bound to
    amdgpu (its ``driver`` link, else ``DRIVER=`` in its ``uevent``) are ordered by PCI bus
    id (the basename of where ``device`` leads), then filtered and renumbered by
    ``ROCR_VISIBLE_DEVICES`` and ``HIP_VISIBLE_DEVICES`` (comma-separated indices; the
    position in the returned list is the GPU's number). ``environ`` defaults to
    ``os.environ``.
    """
    try:
        names = sorted(n for n in os.listdir(root) if _CARD.fullmatch(n))
    except OSError:
        return []
    devices: dict[str, str] = {}
    for name in names:
        device = os.path.join(root, name, "device")
        if os.path.isdir(device) and _driver(device) == "amdgpu":
            devices.setdefault(os.path.basename(os.path.realpath(device)), device)
    ordered = _visible(sorted(devices), os.environ if environ is None else environ)
    return [Card(bus, card_files(devices[bus])) for bus in ordered]


def _scaled(value: int | None, divisor: int = 1) -> float | None:
    """``value / divisor`` (µW to W, m°C to °C); None stays None."""
    return None if value is None else value / divisor


class AMDSysfsCollector(BaseCollector):
    """AMD GPU metrics read from the amdgpu driver's sysfs files, per GPU ``i``.

    Keys (the ``rocm-smi`` collector's keys and units):

    - ``gpu.{i}.gpu``: ``gpu_busy_percent``, % of time the GPU is busy;
    - ``gpu.{i}.memory``: ``mem_busy_percent``, % of time the memory controller is busy;
    - ``gpu.{i}.memoryAllocatedBytes``: ``mem_info_vram_used``, bytes of VRAM in use;
    - ``gpu.{i}.memoryAllocated``: that over ``mem_info_vram_total``, %;
    - ``gpu.{i}.temp``: hwmon ``temp*_input`` (m°C) as °C: the edge sensor, else junction,
      else memory (by ``temp*_label``, else amdgpu's fixed channel numbers 1, 2, 3);
    - ``gpu.{i}.powerWatts``: hwmon ``power1_average``, else ``power1_input`` (µW), as W;
    - ``gpu.{i}.powerPercent``: that over hwmon ``power1_cap`` (µW, the current cap), %.

    Numbering: as ROCm numbers GPUs, by PCI bus id, then as ``ROCR_VISIBLE_DEVICES`` and
    ``HIP_VISIBLE_DEVICES`` select and reorder them (indices only: a UUID ends the list
    there). ``CUDA_VISIBLE_DEVICES`` is not read.

    Which files a card has is found once; a file it lacks leaves its key out for that card.
    Each tick reads at most 257 bytes of each file; a file that cannot be read, is longer,
    holds no integer or a value out of range (% outside 0..100, °C outside -50..200, ...)
    leaves its key out of that sample.

    Args:
        cards: the cards, in GPU order (see :func:`find_cards`).

    """

    name = "amd-sysfs"

    def __init__(self, cards: Sequence[Card]) -> None:
        self.cards = list(cards)

    @classmethod
    def create(cls, root: str = DRM_ROOT) -> AMDSysfsCollector | None:
        """The collector where ``root`` holds an amdgpu card with a metric file; else None.

        None (with one debug line) where there is no such card, or none visible under
        ``ROCR_VISIBLE_DEVICES`` / ``HIP_VISIBLE_DEVICES``, so that the ``rocm-smi``
        collector can be tried instead.
        """
        cards = find_cards(root)
        if not any(card.files for card in cards):
            log.debug("sysmetrics: AMD sysfs collector unavailable: no amdgpu card in %s", root)
            return None
        return cls(cards)

    def sample(self) -> dict[str, float]:
        """Read every card's files now."""
        out: dict[str, float] = {}
        for i, card in enumerate(self.cards):
            v = {field: read_int(path) for field, path in card.files.items()}
            raw = {
                "gpu": _scaled(v.get("gpu")),
                "memory": _scaled(v.get("memory")),
                "memoryAllocatedBytes": _scaled(v.get("used")),
                "temp": _scaled(v.get("temp"), 1000),
                "powerWatts": _scaled(v.get("power"), 1_000_000),
            }
            cap = _scaled(v.get("cap"), 1_000_000)
            out.update(gpu_values(f"gpu.{i}.", raw, _scaled(v.get("total")), cap))
        return out
