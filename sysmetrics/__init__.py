"""sysmetrics: system metrics on the training step axis.

One :class:`SystemMonitor` samples CPU, memory, disk, network (and accelerator)
metrics on a background thread; the framework callbacks in
``sysmetrics.integrations`` log its :meth:`~SystemMonitor.snapshot` through each
framework's own loggers. This module imports nothing heavy.
"""

from sysmetrics.collectors.base import (
    Aggregation,
    BaseCollector,
    Collector,
)
from sysmetrics.errors import OptionError, OptionTypeError, SystemMetricsWarning
from sysmetrics.monitor import SystemMonitor
from sysmetrics.panel import watch
from sysmetrics.stepfile import batches, step

__version__ = "0.1.0"

__all__ = [
    "Aggregation",
    "BaseCollector",
    "Collector",
    "OptionError",
    "OptionTypeError",
    "SystemMetricsWarning",
    "SystemMonitor",
    "__version__",
    "batches",
    "step",
    "watch",
]
