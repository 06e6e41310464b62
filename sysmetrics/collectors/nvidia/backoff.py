"""What one NVML handle is asked: the fields still read, and the backoff of failing ones.

The lowest part of the NVIDIA collector: the field readers (:mod:`.fields`) and GPM
(:mod:`.gpm`) both keep one per handle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Fields:
    """What one handle is asked: the fields still read, and the backoff of failing ones."""

    names: list[str]
    fails: dict[str, int] = field(default_factory=dict)  # failures in a row, per field
    skip: dict[str, int] = field(default_factory=dict)  # tries left out before the next
    held: dict[str, Any] = field(default_factory=dict)  # latest reading of a slow field
    due: dict[str, float] = field(default_factory=dict)  # when it is read again (s)
