"""Graphcore IPUs through the ``gcipuinfo`` library: ``ipu.{device_id}.{metric (unit)}``."""

from __future__ import annotations

import logging
import re
from typing import Any

from sysmetrics import _optional
from sysmetrics.collectors._values import CELSIUS, GT_S, MHZ, PERCENT, WATTS, Range, checked
from sysmetrics.collectors.base import Aggregation, BaseCollector
from sysmetrics.collectors.process import process_tree
from sysmetrics.host import HostSource, Job

log = logging.getLogger("sysmetrics")

# The catalogue's metrics: gcipuinfo attribute -> the unit its value string ends with.
METRICS = {
    "average board temp": "C",
    "average die temp": "C",
    "clock": "MHz",
    "ipu power": "W",
    "ipu utilisation": "%",
    "ipu utilisation (session)": "%",
    "link speed": "GT/s",
}
_RANGES: dict[str, Range] = {"C": CELSIUS, "MHz": MHZ, "W": WATTS, "%": PERCENT, "GT/s": GT_S}
_NUMBER = re.compile(r"[-+]?[0-9]+(?:\.[0-9]+)?")


def parse_attribute(name: str, value: str) -> tuple[str, float] | None:
    """``("clock", "1300MHz")`` -> ``("clock (MHz)", 1300.0)``; None for "N/A" or others.

    The key is the attribute's name with its unit in parentheses, as W&B names them.
    Never raises; a value out of range is None too (one debug line): % outside 0..100,
    °C outside -50..200, W outside 0..10000, MHz outside 0..100000, GT/s outside 0..1000.
    """
    unit = METRICS.get(name)
    text = value.strip()
    if unit is None or not text.endswith(unit):
        return None
    number = text[: -len(unit)].strip()
    if not _NUMBER.fullmatch(number):
        return None
    key = f"{name} ({unit})"
    parsed = checked(key, float(number), _RANGES[unit])
    return None if parsed is None else (key, parsed)


class IPUCollector(BaseCollector):
    """The IPUs this process tree uses, through ``gcipuinfo`` (Poplar SDK).

    Keys ``ipu.{device_id}.{metric} ({unit})`` for ``average board temp (C)``, ``average
    die temp (C)``, ``clock (MHz)``, ``ipu power (W)``, ``ipu utilisation (%)``, ``ipu
    utilisation (session) (%)`` and ``link speed (GT/s)``, of each device whose ``user
    process id`` is this process (or, with ``track_process_tree``, a descendant). A metric
    is reported the first time it is read and then only when its value changes, so a
    snapshot holds it only when it changed in that window (aggregation ``last``).

    Args:
        info: a ``gcipuinfo.gcipuinfo()`` object.
        source: the host readings (for the process tree).
        pid: the training process, or the job (every local rank's tree).
        track_process_tree: count IPUs opened by descendants too.

    """

    name = "ipu"

    def __init__(
        self, info: Any, source: HostSource, pid: int | Job, track_process_tree: bool = True
    ) -> None:
        self.info = info
        self.source = source
        self.job = pid if isinstance(pid, Job) else Job(pid)  # the watched roots
        self.pid = self.job.pid
        self.track_process_tree = track_process_tree
        self._reported: dict[str, float] = {}

    @classmethod
    def create(
        cls, source: HostSource, pid: int | Job, track_process_tree: bool = True
    ) -> IPUCollector | None:
        """The collector where ``gcipuinfo`` imports and lists an IPU; else None (debug line)."""
        module = _optional.gcipuinfo()
        if module is None:
            return None
        try:
            info = module.gcipuinfo()
            info.setUpdateMode(True)  # fresh attributes on every getDevices()
            if info.getDevices():
                return cls(info, source, pid, track_process_tree)
            reason = "gcipuinfo lists no IPU"
        except Exception as exc:  # the library's own errors, whatever their class
            reason = f"gcipuinfo failed: {exc}"
        log.debug("sysmetrics: IPU collector unavailable: %s", reason)
        return None

    def sample(self) -> dict[str, float]:
        """Read every device's attributes; return the changed metrics of ours."""
        tree = {p for p, _ in process_tree(self.source, self.job.roots, self.track_process_tree)}
        out: dict[str, float] = {}
        for device in self.info.getDevices():
            attrs = dict(device)
            owner = str(attrs.get("user process id", ""))
            if not owner.isdigit() or int(owner) not in tree or "id" not in attrs:
                continue
            for name, value in attrs.items():
                parsed = parse_attribute(name, str(value))
                if parsed is None:
                    continue
                key = f"ipu.{attrs['id']}.{parsed[0]}"
                if self._reported.get(key) != parsed[1]:
                    self._reported[key] = out[key] = parsed[1]
        return out

    def aggregation(self, key: str) -> Aggregation:
        """``last``: a metric is reported only when it changes."""
        return "last"
