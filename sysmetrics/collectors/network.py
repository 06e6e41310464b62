"""Network traffic since the first sample: ``network.sent`` and ``network.recv``."""

from __future__ import annotations

from sysmetrics.collectors.base import BaseCollector
from sysmetrics.host import HostSource


class NetworkCollector(BaseCollector):
    """Bytes sent and received over the network since the first sample.

    Keys: ``network.sent``, ``network.recv`` (bytes, cumulative: the snapshot carries the
    latest value). Every interface counts except loopback ones (flag ``IFF_LOOPBACK``:
    ``lo``), whose traffic never leaves the machine (a single-node gloo job, the
    Prometheus exporter's own scrapes); ``loopback=True`` counts them too. Inside a
    container these are the container's own interfaces.

    Each interface is followed on its own, so the totals never go back: an interface
    created after the first sample counts from its creation, one removed keeps what it
    had counted, and one whose counters went back (re-created under the same name,
    reset) counts from its new value. Source: ``/proc/net/dev`` or
    ``psutil.net_io_counters(pernic=True)``.

    Args:
        source: the host readings.
        loopback: count loopback interfaces too.

    """

    name = "network"

    def __init__(self, source: HostSource, loopback: bool = False) -> None:
        self.source = source
        self.loopback = loopback
        self._last: dict[str, tuple[int, int]] | None = None  # None: before the first sample
        self._sent = self._recv = 0

    def sample(self) -> dict[str, float]:
        """Bytes sent and received since the first sample."""
        now = {
            i.name: (i.sent, i.recv)
            for i in self.source.net_interfaces()
            if self.loopback or not i.loopback
        }
        if self._last is not None:
            for name, (sent, recv) in now.items():
                last_sent, last_recv = self._last.get(name, (0, 0))
                self._sent += sent - last_sent if sent >= last_sent else sent
                self._recv += recv - last_recv if recv >= last_recv else recv
        self._last = now
        return {"network.sent": float(self._sent), "network.recv": float(self._recv)}
