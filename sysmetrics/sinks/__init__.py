"""Sinks: where a running monitor's values go besides the framework loggers.

``JsonlSink`` writes the run file (one JSON line per sample).
``serve()`` and ``PrometheusExporter`` (a Prometheus ``/metrics`` endpoint, the
``[prometheus]`` extra) are imported on first use: importing this package imports no
optional dependency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sysmetrics.sinks.jsonl import JsonlSink
    from sysmetrics.sinks.prometheus import PrometheusExporter, serve

__all__ = ["JsonlSink", "PrometheusExporter", "serve"]

_LAZY = {
    "JsonlSink": "sysmetrics.sinks.jsonl",
    "PrometheusExporter": "sysmetrics.sinks.prometheus",
    "serve": "sysmetrics.sinks.prometheus",
}


def __getattr__(name: str) -> Any:
    """Import a sink's module on first use of one of its names (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
