"""Optional imports, in one place. Nothing here is imported before it is needed."""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

log = logging.getLogger("sysmetrics")


def pynvml() -> ModuleType | None:
    """The NVML binding (``nvidia-ml-py``), or None where it cannot be imported."""
    try:
        return importlib.import_module("pynvml")
    except Exception as exc:  # ImportError, or a broken install
        log.debug("sysmetrics: NVIDIA collector unavailable: cannot import pynvml: %s", exc)
        return None
