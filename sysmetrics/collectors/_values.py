"""Plausible ranges for the numbers read from vendor tools, and the check against them.

A value outside its range (NaN, ±inf, negative, a percentage over 100, ...) is dropped,
never clamped: the key is left out of that sample, with one debug line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("sysmetrics")

Range = tuple[float, float]

PERCENT: Range = (0.0, 100.0)
"""%: utilisation, busy time, memory in use."""
POWER_PERCENT: Range = (0.0, 1_000.0)
"""% of a power cap or a fixed figure: power briefly exceeds its cap, and an Apple Max or
Ultra GPU far exceeds the fixed 16.5 W that W&B's Apple figure is a percent of."""
CELSIUS: Range = (-50.0, 200.0)
"""°C: no working chip reports outside this."""
BYTES: Range = (0.0, 2.0**64)
"""Bytes: no device counts past 16 EiB."""
WATTS: Range = (0.0, 10_000.0)
"""W: no single accelerator draws 10 kW."""
MHZ: Range = (0.0, 100_000.0)
"""MHz: a clock of 100 GHz is a misread."""
GT_S: Range = (0.0, 1_000.0)
"""GT/s: a link transfer rate (PCIe 6 is 64 GT/s)."""


GPU: Mapping[str, Range] = {"gpu": PERCENT, "memory": PERCENT, "memoryAllocated": PERCENT,
                             "memoryAllocatedBytes": BYTES, "temp": CELSIUS,
                             "powerWatts": WATTS, "powerPercent": POWER_PERCENT}  # fmt: skip
"""The ranges of the ``gpu.{i}.*`` keys, by the name after the index."""


def number(obj: object) -> float | None:
    """A JSON number (int or float, not bool) as a float; None for anything else.

    An int too large for a float gives ±inf (which :func:`checked` then drops).
    """
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        return None
    try:
        return float(obj)
    except OverflowError:
        return math.inf if obj > 0 else -math.inf


def checked(name: str, value: float | None, bounds: Range) -> float | None:
    """``value`` where it is finite and within ``bounds`` (inclusive), else None.

    ``name`` (the key or field) is for the one debug line a dropped value costs; None
    passes through silently (nothing was read).
    """
    if value is None:
        return None
    low, high = bounds
    if math.isfinite(value) and low <= value <= high:
        return value
    log.debug("sysmetrics: dropped %s=%r: not within %g..%g", name, value, low, high)
    return None


def kept(
    prefix: str, raw: Mapping[str, float | None], ranges: Mapping[str, Range]
) -> dict[str, float]:
    """``{prefix + key: value}`` for the values of ``raw`` within ``ranges[key]``.

    The others are left out, one debug line each (see :func:`checked`).
    """
    out: dict[str, float] = {}
    for key, value in raw.items():
        value = checked(prefix + key, value, ranges[key])
        if value is not None:
            out[prefix + key] = value
    return out


def field(obj: object, *path: str) -> Any:
    """``obj[path[0]][path[1]]...`` of decoded JSON; None where a level is missing."""
    for name in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj


def gpu_values(
    prefix: str,
    raw: Mapping[str, float | None],
    total: float | None = None,
    cap: float | None = None,
) -> dict[str, float]:
    """The ``gpu.{i}.*`` values of ``raw`` within their ranges (:data:`GPU`), as ``prefix + key``.

    ``memoryAllocated`` is derived from ``memoryAllocatedBytes`` and ``total`` (bytes),
    ``powerPercent`` from ``powerWatts`` and ``cap`` (W), where those are in range.
    """
    used = checked(prefix + "memoryAllocatedBytes", raw.get("memoryAllocatedBytes"), BYTES)
    power = checked(prefix + "powerWatts", raw.get("powerWatts"), WATTS)
    total = checked(prefix + "total memory", total, BYTES)
    cap = checked(prefix + "power cap", cap, WATTS)
    values = {**raw, "memoryAllocatedBytes": used, "powerWatts": power}
    if used is not None and total:
        values["memoryAllocated"] = used / total * 100.0
    if power is not None and cap:
        values["powerPercent"] = power / cap * 100.0
    return kept(prefix, values, GPU)
