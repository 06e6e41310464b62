"""The package's warning class and the bound on outside text quoted in messages.

At the bottom of the import graph (imports nothing of sysmetrics), so that every layer,
from collectors to sinks and callbacks, can warn without importing another layer.
"""

from __future__ import annotations


class SystemMetricsWarning(RuntimeWarning):
    """A collector, or one device of it, failed and was disabled; the rest go on."""


def quote(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, with ``...`` where it was cut.

    Outside input quoted in a warning or an error stays short.
    """
    return text if len(text) <= limit else text[:limit] + "..."
