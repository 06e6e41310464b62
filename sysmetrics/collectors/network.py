"""Network traffic since the first sample: ``network.sent`` and ``network.recv``."""

from __future__ import annotations

from sysmetrics.collectors.base import BaseCollector
from sysmetrics.host import HostSource


class NetworkCollector(BaseCollector):
    """Bytes sent and received by every interface (loopback included) since the first sample.

    Keys: ``network.sent``, ``network.recv`` (bytes, cumulative: the snapshot carries the
    latest value). Inside a container these are the container's own interfaces. Source:
    ``/proc/net/dev`` or ``psutil.net_io_counters()``.
    """

    name = "network"
    last_keys = frozenset({"sent", "recv"})

    def __init__(self, source: HostSource) -> None:
        self.source = source
        self._start: tuple[int, int] | None = None

    def sample(self) -> dict[str, float]:
        """Bytes sent and received since the first sample."""
        sent, recv = self.source.net_io()
        if self._start is None:
            self._start = (sent, recv)
        return {
            "network.sent": float(sent - self._start[0]),
            "network.recv": float(recv - self._start[1]),
        }
