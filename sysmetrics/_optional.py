"""Optional imports, in one place. Nothing here is imported before it is needed."""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any, Callable

log = logging.getLogger("sysmetrics")

# The distribution's name on PyPI (pyproject.toml's project.name): the import package is
# `sysmetrics`, but PyPI's `sysmetrics` is another author's project (issue 33).
DIST = "sysmetrics-train"


def install(extra: str) -> str:
    """The pip command that installs this distribution with ``extra``."""
    return f"pip install '{DIST}[{extra}]'"


def pynvml() -> ModuleType | None:
    """The NVML binding (``nvidia-ml-py``), or None where it cannot be imported."""
    try:
        return importlib.import_module("pynvml")
    except Exception as exc:  # ImportError, or a broken install
        log.debug("sysmetrics: NVIDIA collector unavailable: cannot import pynvml: %s", exc)
        return None


def prometheus_parser() -> Any:
    """prometheus_client's text parser (``text_string_to_metric_families``).

    Raises:
        ImportError: prometheus-client is not installed, with how to install it.

    """
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError as exc:
        raise ImportError(
            f"open_metrics needs prometheus-client: {install('openmetrics')}"
        ) from exc
    return text_string_to_metric_families


def prometheus_client() -> ModuleType:
    """``prometheus_client``, for the Prometheus endpoint (:mod:`sysmetrics.sinks.prometheus`).

    Raises:
        ImportError: prometheus-client is not installed, with how to install it.

    """
    try:
        return importlib.import_module("prometheus_client")
    except ImportError as exc:
        raise ImportError(
            f"the Prometheus endpoint needs prometheus-client: {install('prometheus')}"
        ) from exc


def gcipuinfo() -> ModuleType | None:
    """Graphcore's ``gcipuinfo`` (from the Poplar SDK), or None where it cannot be imported."""
    try:
        return importlib.import_module("gcipuinfo")
    except Exception as exc:  # ImportError, or a broken install
        log.debug("sysmetrics: IPU collector unavailable: cannot import gcipuinfo: %s", exc)
        return None


def matplotlib_figure() -> Any:
    """Matplotlib's ``Figure`` class, for reports (:mod:`sysmetrics.report`); no pyplot.

    Raises:
        ImportError: matplotlib is not installed, with how to install it.

    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(f"the report's figures need matplotlib: {install('report')}") from exc
    return Figure


def fast_json_loads() -> Callable[[bytes], Any] | None:
    """``orjson.loads`` (the ``[report]`` extra: about 7x the stdlib's speed), or None."""
    try:
        return importlib.import_module("orjson").loads  # type: ignore[no-any-return]
    except ImportError:
        return None
