"""Per-core system CPU utilisation: ``cpu.{i}.cpu_percent``."""

from __future__ import annotations

from sysmetrics.collectors.base import BaseCollector
from sysmetrics.host import CpuTime, HostSource


class CPUCollector(BaseCollector):
    """System-wide busy percent of each core since the previous sample.

    Keys: ``cpu.{i}.cpu_percent`` (percent of core ``i``, 0-100; the first sample is the
    average since boot). Source: ``/proc/stat`` or ``psutil.cpu_times(percpu=True)``.
    """

    name = "cpu"

    def __init__(self, source: HostSource) -> None:
        self.source = source
        self._prev: list[CpuTime] = []

    def sample(self) -> dict[str, float]:
        """Busy share of each core since the previous sample, percent."""
        now = self.source.cpu_times()
        prev = self._prev if len(self._prev) == len(now) else [CpuTime(0.0, 0.0)] * len(now)
        out = {}
        for i, (cur, before) in enumerate(zip(now, prev)):
            dt = cur.total - before.total
            # Held within 0..100 by the monitor, with every percentage.
            out[f"cpu.{i}.cpu_percent"] = (cur.busy - before.busy) / dt * 100.0 if dt > 0 else 0.0
        self._prev = now
        return out
