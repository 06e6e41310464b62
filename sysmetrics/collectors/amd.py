"""AMD GPUs through ``rocm-smi -a --json``: ``gpu.{i}.*``."""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from sysmetrics.collectors.base import BaseCollector

log = logging.getLogger("sysmetrics")

ROCM_LOCATIONS = ("/opt/rocm/bin/rocm-smi", "/opt/rocm-*/bin/rocm-smi")
TIMEOUT_S = 10.0

# rocm-smi's names differ across ROCm versions and cards: the first one present wins.
_POWER = ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)")
_TEMP = (
    "Temperature (Sensor edge) (C)",
    "Temperature (Sensor junction) (C)",
    "Temperature (Sensor memory) (C)",
)


def _number(card: dict[str, Any], *names: str) -> float | None:
    """The first of ``names`` that holds a number ("N/A", absent or text give None)."""
    for name in names:
        value = card.get(name)
        if value is None:
            continue
        try:
            return float(str(value).strip().rstrip("%"))
        except ValueError:
            continue
    return None


def parse_rocm_smi(text: str) -> dict[str, float]:
    """Catalogue keys from ``rocm-smi -a --json`` output (noise before the JSON allowed).

    Keys per card ``i`` (``card{i}``): ``gpu.{i}.gpu`` (GPU use %), ``gpu.{i}.memory``
    (memory controller busy %, rocm-smi's "GPU memory use (%)"),
    ``gpu.{i}.memoryAllocated`` (VRAM used over total, %, or rocm-smi's "GPU Memory
    Allocated (VRAM%)" where bytes are missing), ``gpu.{i}.memoryAllocatedBytes`` (VRAM
    used, bytes), ``gpu.{i}.temp`` (°C, edge sensor, else junction, else memory),
    ``gpu.{i}.powerWatts`` (average, or MI300's current socket, graphics package power, W),
    ``gpu.{i}.powerPercent`` (of the card's max graphics package power).
    """
    start = text.find("{")
    if start < 0:
        raise ValueError(f"rocm-smi printed no JSON: {text[:200]!r}")
    data, _ = json.JSONDecoder().raw_decode(text[start:])
    out: dict[str, float] = {}
    cards = [(k, v) for k, v in data.items() if k.startswith("card") and k[4:].isdigit()]
    for name, card in sorted(cards, key=lambda kv: int(kv[0][4:])):
        if not isinstance(card, dict):
            continue
        prefix = f"gpu.{name[4:]}."
        values = {
            "gpu": _number(card, "GPU use (%)"),
            "memory": _number(card, "GPU memory use (%)", "GPU Memory Read/Write Activity (%)"),
            "temp": _number(card, *_TEMP),
            "powerWatts": _number(card, *_POWER),
        }
        used = _number(card, "VRAM Total Used Memory (B)")
        total = _number(card, "VRAM Total Memory (B)")
        if used is not None:
            values["memoryAllocatedBytes"] = used
        if used is not None and total:
            values["memoryAllocated"] = used / total * 100.0
        else:
            values["memoryAllocated"] = _number(card, "GPU Memory Allocated (VRAM%)")
        limit = _number(card, "Max Graphics Package Power (W)")
        if values["powerWatts"] is not None and limit:
            values["powerPercent"] = values["powerWatts"] / limit * 100.0
        out.update((prefix + k, v) for k, v in values.items() if v is not None)
    return out


def find_rocm_smi() -> str | None:
    """``rocm-smi`` on PATH, else in ROCm's install locations; None when absent."""
    found = shutil.which("rocm-smi")
    if found:
        return found
    for pattern in ROCM_LOCATIONS:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


class AMDCollector(BaseCollector):
    """AMD GPU metrics from ``rocm-smi -a --json`` (keys: see :func:`parse_rocm_smi`).

    Each sample runs ``rocm-smi`` once (a child process, at most 10 s). A run that fails
    or prints no JSON raises, and the monitor disables the collector with one warning.

    Args:
        path: the ``rocm-smi`` executable.
        args: its arguments.

    """

    name = "amd"
    peak_keys = frozenset({"memoryAllocatedBytes"})

    def __init__(self, path: str, args: Sequence[str] = ("-a", "--json")) -> None:
        self.command = [path, *args]

    @classmethod
    def create(cls, path: str | None = None) -> AMDCollector | None:
        """The collector where ``rocm-smi`` is found (or at ``path``) and reports a GPU.

        Without ``path``, a ``rocm-smi`` that is absent, fails or reports no card gives None
        (one debug line).

        Raises:
            ValueError: ``path`` is not an executable file.

        """
        if path is not None:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ValueError(f"rocm_smi_path={path!r} is invalid: it is not an executable file")
            return cls(path)
        found = find_rocm_smi()
        if found is None:
            log.debug("sysmetrics: AMD collector unavailable: no rocm-smi on PATH or in /opt/rocm")
            return None
        collector = cls(found)
        try:
            if collector.sample():
                return collector
            reason = "rocm-smi reports no GPU"
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
            reason = f"{found} failed: {exc}"
        log.debug("sysmetrics: AMD collector unavailable: %s", reason)
        return None

    def sample(self) -> dict[str, float]:
        """Run ``rocm-smi`` and parse its JSON."""
        proc = subprocess.run(
            self.command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
        if proc.returncode != 0 and "{" not in proc.stdout:
            raise RuntimeError(
                f"{' '.join(self.command)} exited with {proc.returncode}: {proc.stderr[-300:]}"
            )
        return parse_rocm_smi(proc.stdout)
