"""Apple Silicon GPU (macOS arm64, no root): ``gpu.0.*`` from ``ioreg`` and ``macmon``."""

from __future__ import annotations

import json
import logging
import platform
import re
import shutil
import subprocess
import sys

import psutil

from sysmetrics.collectors._values import gpu_values, number
from sysmetrics.collectors.base import BackgroundCollector

log = logging.getLogger("sysmetrics")

IOREG = ("ioreg", "-r", "-d", "1", "-w", "0", "-c", "IOAccelerator")
TIMEOUT_S = 5.0
MAX_POWER_W = 16.5
"""The GPU power ``powerPercent`` is relative to: W&B's fixed figure (Apple gives none)."""

_STATS = re.compile(r'"PerformanceStatistics" = \{([^}]*)\}')
_PAIR = re.compile(r'"([^"]+)"=(-?\d+(?:\.\d+)?)(?=[,}]|$)')


def parse_ioreg(text: str, total_memory: float) -> dict[str, float]:
    """``gpu.0.*`` from ``ioreg -r -d 1 -w 0 -c IOAccelerator`` (the first GPU reporting use).

    Keys: ``gpu.0.gpu`` ("Device Utilization %", %), ``gpu.0.memoryAllocatedBytes`` ("In
    use system memory", bytes of unified memory the GPU driver has in use) and
    ``gpu.0.memoryAllocated`` (that over ``total_memory``, the machine's RAM in bytes, %).

    Never raises; values out of range are left out (one debug line each): % outside
    0..100, bytes outside 0..2**64, NaN or infinite.
    """
    for block in _STATS.findall(text):
        stats = {k: float(v) for k, v in _PAIR.findall(block)}
        if "Device Utilization %" not in stats:
            continue
        raw = {
            "gpu": stats["Device Utilization %"],
            "memoryAllocatedBytes": stats.get("In use system memory"),
        }
        return gpu_values("gpu.0.", raw, total=total_memory)
    return {}


def parse_macmon(line: str) -> dict[str, float]:
    """``gpu.0.*`` from one ``macmon pipe`` JSON line; {} for a line that is not one.

    Keys: ``gpu.0.temp`` (``temp.gpu_temp_avg``, °C), ``gpu.0.powerWatts`` (``gpu_power``,
    W), ``gpu.0.powerPercent`` (of :data:`MAX_POWER_W`, %), ``gpu.0.gpu`` (``gpu_usage``'s
    active fraction, as %; ioreg's figure is preferred where both are read).

    Never raises; values out of range are left out (one debug line each): % outside
    0..100 (power % outside 0..1000), °C outside -50..200, W outside 0..10000, NaN or
    infinite.
    """
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(doc, dict):
        return {}
    raw: dict[str, float | None] = {}
    temp = doc.get("temp")
    if isinstance(temp, dict):
        raw["temp"] = number(temp.get("gpu_temp_avg"))
    raw["powerWatts"] = number(doc.get("gpu_power"))
    usage = doc.get("gpu_usage")
    active = number(usage[1]) if isinstance(usage, list) and len(usage) == 2 else None
    if active is not None:
        raw["gpu"] = active * 100.0
    return gpu_values("gpu.0.", raw, cap=MAX_POWER_W)


class AppleCollector(BackgroundCollector):
    """The Apple Silicon GPU, read without root on the collector's own thread.

    Every ``interval`` seconds the thread runs ``ioreg`` (utilization and memory, see
    :func:`parse_ioreg`). Where ``macmon`` is installed (``brew install macmon``), it also
    runs one long-lived ``macmon pipe`` child for temperature and power (see
    :func:`parse_macmon`) and reads ``ioreg`` at each of its lines; without it those keys
    are absent (macOS gives them only to root, through ``powermetrics``). The child stops
    with the monitor; if this process dies, its next write fails and it exits.

    A failing ``ioreg`` or ``macmon`` costs one warning; the thread keeps trying.

    Args:
        macmon: the ``macmon`` executable, or None.
        total_memory: the machine's RAM in bytes (for ``memoryAllocated``).
        interval: seconds between readings.

    """

    name = "apple"
    thread_name = "sysmetrics-apple"
    join_timeout = 3.0

    def __init__(self, macmon: str | None, total_memory: float, interval: float = 1.0) -> None:
        super().__init__()
        self.macmon = macmon
        self.total_memory = total_memory
        self.interval = interval
        self.stale_after = 3 * interval + TIMEOUT_S  # ioreg runs every interval

    @classmethod
    def create(
        cls, system: str = sys.platform, machine: str = platform.machine()
    ) -> AppleCollector | None:
        """The collector on macOS arm64 where ``ioreg`` reports a GPU; None elsewhere."""
        if system != "darwin" or machine != "arm64":
            return None
        collector = cls(shutil.which("macmon"), float(psutil.virtual_memory().total))
        try:
            if collector.read_ioreg():
                return collector
            reason = "ioreg reports no GPU utilization"
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            reason = f"ioreg failed: {exc}"
        log.debug("sysmetrics: Apple GPU collector unavailable: %s", reason)
        return None

    def read_ioreg(self) -> dict[str, float]:
        """Run ``ioreg`` once and parse it."""
        returncode, stdout, stderr = self._tool.run(IOREG, TIMEOUT_S)
        if returncode != 0:
            raise RuntimeError(f"ioreg exited with {returncode}: {stderr[-300:]}")
        return parse_ioreg(stdout, self.total_memory)

    def _publish(self, values: dict[str, float]) -> None:
        try:
            values.update(self.read_ioreg())
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            if self._closed.is_set():  # stopped by close(): not a failure
                return
            self._warn_once("ioreg", f"sysmetrics: Apple GPU: {exc}; retrying")
        self._set_latest(values)

    def _run(self) -> None:
        if self.macmon is not None:
            self._follow_macmon(self.macmon)
        while not self._closed.is_set():
            self._publish({})
            self._closed.wait(self.interval)

    def _follow_macmon(self, path: str) -> None:
        """Publish at each ``macmon pipe`` line until it ends or the collector closes."""
        command = [path, "pipe", "-i", str(max(100, round(self.interval * 1000)))]
        try:
            lines = self._tool.lines(command)
        except OSError as exc:
            self._warn_once("macmon", f"sysmetrics: cannot start {path}: {exc}")
            return
        for line in lines:
            values = parse_macmon(line)
            if values:
                self._publish(values)
        if not self._closed.is_set():
            self._warn_once("macmon", f"sysmetrics: {path} ended; no GPU temperature or power")

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The ``macmon`` child started last (kept once it ended), or None."""
        return self._tool.streamed
