"""CPU package and DRAM energy from Linux powercap (RAPL): ``{cpu,memory}.energyJoules``."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

from sysmetrics.collectors.base import BaseCollector

log = logging.getLogger("sysmetrics")

POWERCAP_ROOT = "/sys/class/powercap"
_ZONE = re.compile(r"(?:intel-rapl|amd-rapl):[0-9]+(?::[0-9]+)?")  # not intel-rapl-mmio
_PACKAGE = re.compile(r"package-[0-9]+")
_READ_LIMIT = 64  # bytes read from a sysfs file: one decimal integer or a short name
_UJ_PER_J = 1_000_000

Reader = Callable[[str], int]
"""Reads a powercap counter file (``energy_uj``, ``max_energy_range_uj``): its integer, µJ."""


def read_uj(path: str) -> int:
    """The non-negative integer in the small sysfs file ``path`` (at most 64 bytes read).

    Raises:
        OSError: the file cannot be read (gone, root only, a directory, ...).
        ValueError: it does not hold a non-negative integer.

    """
    with open(path, "rb", buffering=0) as f:
        data = f.read(_READ_LIMIT)
    value = int(data.strip())
    if value < 0:
        raise ValueError(f"{path} holds {value}, a negative counter")
    return value


def _read_name(path: str) -> str | None:
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read(_READ_LIMIT).decode("ascii", "replace").strip()
    except OSError:
        return None


def _kind(name: str | None) -> str | None:
    """``cpu`` for a package zone, ``memory`` for a DRAM zone, None for the rest."""
    if name is None:
        return None
    if _PACKAGE.fullmatch(name):
        return "cpu"
    if name == "dram":
        return "memory"
    return None  # core, uncore (parts of their package), psys (the whole platform), ...


def _zone_dirs(root: str) -> list[str]:
    """Every RAPL zone directory under ``root`` and one level below it, each once.

    The kernel lists each subzone twice: in its package's directory and as a link in
    ``/sys/class/powercap``; the real path tells them apart.
    """
    try:
        top = [os.path.join(root, n) for n in sorted(os.listdir(root)) if _ZONE.fullmatch(n)]
    except OSError:
        return []
    found: dict[str, str] = {}
    for path in top:
        found.setdefault(os.path.realpath(path), path)
        try:
            subs = sorted(os.listdir(path))
        except OSError:
            continue
        for n in subs:
            if _ZONE.fullmatch(n):
                sub = os.path.join(path, n)
                found.setdefault(os.path.realpath(sub), sub)
    return sorted(found.values(), key=os.path.basename)


class _Zone:
    """One counter: where it is read, what it adds to, its range and previous reading."""

    def __init__(self, label: str, kind: str, energy: str, max_range: int | None) -> None:
        self.label = label  # the zone's directory name, "intel-rapl:0:1"
        self.kind = kind  # "cpu" or "memory"
        self.energy = energy  # its energy_uj file
        self.max_range = max_range  # max_energy_range_uj, µJ; None where unreadable
        self.prev: int | None = None  # the previous good reading, µJ


def energy_delta(prev: int, new: int, max_range: int | None) -> int | None:
    """µJ used between two readings of a counter that wraps at ``max_range`` µJ.

    A reading lower than the previous one is a wrap: ``max_range - prev + new``. None
    where that cannot be told (no known range, or a previous reading above it).
    """
    if new >= prev:
        return new - prev
    if max_range is None or prev > max_range:
        return None
    return max_range - prev + new


class RaplCollector(BaseCollector):
    """Energy used by the CPU packages and by DRAM since the first sample, from RAPL.

    Keys (cumulative counters, aggregated as the latest value; joules, J):

    - ``cpu.energyJoules``: energy of every CPU package since the first sample (which
      is 0), the sum over the package zones (``intel-rapl:N`` or ``amd-rapl:N`` whose
      ``name`` is ``package-N``);
    - ``memory.energyJoules``: energy of DRAM since the first sample, the sum over the
      zones named ``dram`` (usually subzones, ``intel-rapl:N:M``), where there are any.

    A key is present where the machine has such a zone. Source: the Linux powercap
    sysfs ABI (``Documentation/power/powercap/powercap.rst``), ``/sys/class/powercap``:
    each zone's ``energy_uj`` (a counter in microjoules, µJ) is read once per sample
    (at most 64 bytes), its ``name`` and ``max_energy_range_uj`` (µJ) once, at
    :meth:`create`. Values are reported in joules (µJ / 1e6). The energy used during a
    training step is the difference of two points on the step axis.

    Not counted twice: a package's subzones ``core`` and ``uncore`` are parts of it and
    are skipped, as is ``psys`` (the whole platform, packages included) and the
    ``intel-rapl-mmio`` control type (the package counter again, through MMIO); each
    subzone, listed both under its package and in ``/sys/class/powercap``, is read once.

    Each counter wraps at its ``max_energy_range_uj`` (on the order of 262 kJ: minutes
    at a few hundred watts), handled per zone: a reading lower than the previous one
    adds ``max_energy_range_uj - previous + new``. A zone whose range is unreadable
    skips the interval of a wrap. More than one wrap between two samples cannot be seen
    (sample more often than the counter wraps), and neither can a counter reset by the
    driver reloading (it is taken for a wrap).

    The totals never go down. A zone whose reading fails (one debug line until it reads
    again) adds nothing that tick; its next good reading adds what was used since its
    previous good one. A zone whose files vanish is dropped (one debug line); what it
    used stays in the total.

    Since Linux 5.10 (and the stable kernels patched for CVE-2020-8694, "Platypus",
    November 2020) ``energy_uj`` is readable by root only on many systems: there
    :meth:`create` gives None, unless an administrator has made the files readable.
    """

    name = "rapl"

    def __init__(self, zones: list[_Zone], read: Reader = read_uj) -> None:
        self._zones = zones
        self._read = read
        self._kinds = sorted({z.kind for z in zones})
        self._totals = dict.fromkeys(self._kinds, 0)  # µJ per kind, never lowered
        self._failing: set[str] = set()

    @classmethod
    def create(cls, root: str = POWERCAP_ROOT, read: Reader = read_uj) -> RaplCollector | None:
        """The collector over every readable RAPL package and DRAM zone under ``root``.

        None, with one debug line, where there is none: not Linux (no ``root``), no
        RAPL zone, or ``energy_uj`` readable by root only.

        Args:
            root: the powercap class directory.
            read: reads a counter file's integer (a stand-in for tests).

        """
        if not os.path.isdir(root):
            log.debug("sysmetrics: RAPL collector unavailable: no %s (not Linux?)", root)
            return None
        zones: list[_Zone] = []
        unreadable: list[str] = []
        for path in _zone_dirs(root):
            kind = _kind(_read_name(os.path.join(path, "name")))
            if kind is None:
                continue
            label = os.path.basename(path)
            energy = os.path.join(path, "energy_uj")
            try:
                read(energy)
            except (OSError, ValueError) as exc:
                unreadable.append(f"{label}: {type(exc).__name__}")
                continue
            try:
                max_range: int | None = read(os.path.join(path, "max_energy_range_uj"))
            except (OSError, ValueError):
                max_range = None
            zones.append(_Zone(label, kind, energy, max_range or None))
        if not zones:
            if unreadable:
                reason = (
                    f"energy_uj unreadable ({', '.join(unreadable)}); "
                    "it is root-only on many kernels since 2020"
                )
            else:
                reason = f"no RAPL package or dram zone in {root}"
            log.debug("sysmetrics: RAPL collector unavailable: %s", reason)
            return None
        return cls(zones, read)

    def sample(self) -> dict[str, float]:
        """Joules used by the CPU packages and DRAM since the first sample."""
        kept: list[_Zone] = []
        for zone in self._zones:
            try:
                new = self._read(zone.energy)
            except FileNotFoundError:
                log.debug("sysmetrics: RAPL zone %s vanished; no longer read", zone.label)
                continue
            except (OSError, ValueError) as exc:
                if zone.label not in self._failing:
                    self._failing.add(zone.label)
                    log.debug("sysmetrics: RAPL zone %s unreadable: %s", zone.label, exc)
                kept.append(zone)
                continue
            self._failing.discard(zone.label)
            kept.append(zone)
            if zone.prev is not None:
                delta = energy_delta(zone.prev, new, zone.max_range)
                if delta is not None:
                    self._totals[zone.kind] += delta
            zone.prev = new
        self._zones = kept
        return {f"{kind}.energyJoules": self._totals[kind] / _UJ_PER_J for kind in self._kinds}
