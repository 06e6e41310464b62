"""Per-core system CPU utilisation: ``cpu.{i}.cpu_percent``."""

from __future__ import annotations

from sysmetrics.collectors.base import BaseCollector
from sysmetrics.host import HostSource


class CPUCollector(BaseCollector):
    """System-wide busy percent of each core since the previous sample.

    Keys: ``cpu.{i}.cpu_percent`` (percent of core ``i``, 0-100; the first sample is the
    average since boot). Source: ``/proc/stat`` or ``psutil.cpu_times(percpu=True)``.
    """

    name = "cpu"

    def __init__(self, source: HostSource) -> None:
        self.source = source
        self._prev: list[tuple[float, float]] = []

    def sample(self) -> dict[str, float]:
        """Busy share of each core since the previous sample, percent."""
        now = self.source.cpu_times()
        prev = self._prev if len(self._prev) == len(now) else [(0.0, 0.0)] * len(now)
        out = {}
        for i, ((busy, total), (pbusy, ptotal)) in enumerate(zip(now, prev)):
            dt = total - ptotal
            # Held within 0..100 by the monitor, with every percentage.
            out[f"cpu.{i}.cpu_percent"] = (busy - pbusy) / dt * 100.0 if dt > 0 else 0.0
        self._prev = now
        return out
