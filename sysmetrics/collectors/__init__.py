"""Collectors: one module per source, each knowing nothing about training frameworks."""

from __future__ import annotations

from sysmetrics.collectors.amd import AMDCollector
from sysmetrics.collectors.apple import AppleCollector
from sysmetrics.collectors.base import Aggregation, BaseCollector, Collector
from sysmetrics.collectors.cpu import CPUCollector
from sysmetrics.collectors.defaults import host_collectors
from sysmetrics.collectors.disk import DiskCollector
from sysmetrics.collectors.ipu import IPUCollector
from sysmetrics.collectors.memory import MemoryCollector
from sysmetrics.collectors.network import NetworkCollector
from sysmetrics.collectors.nvidia import NvidiaCollector
from sysmetrics.collectors.openmetrics import OpenMetricsCollector
from sysmetrics.collectors.process import ProcessCollector
from sysmetrics.collectors.tpu import TPUCollector
from sysmetrics.collectors.trainium import TrainiumCollector

__all__ = [
    "AMDCollector",
    "Aggregation",
    "AppleCollector",
    "BaseCollector",
    "CPUCollector",
    "Collector",
    "DiskCollector",
    "IPUCollector",
    "MemoryCollector",
    "NetworkCollector",
    "NvidiaCollector",
    "OpenMetricsCollector",
    "ProcessCollector",
    "TPUCollector",
    "TrainiumCollector",
    "host_collectors",
]
