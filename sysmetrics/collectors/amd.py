"""AMD GPUs through ``rocm-smi -a --json``, else ``amd-smi metric --json``: ``gpu.{i}.*``."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sysmetrics.collectors.base import BaseCollector, find_tool

log = logging.getLogger("sysmetrics")

ROCM_LOCATIONS = ("/opt/rocm/bin/rocm-smi", "/opt/rocm-*/bin/rocm-smi")
AMD_SMI_LOCATIONS = ("/opt/rocm/bin/amd-smi", "/opt/rocm-*/bin/amd-smi")
TIMEOUT_S = 10.0
# amd-smi prints memory in "MB" that are MiB (its CLI divides bytes by 1024**2).
_UNIT_BYTES = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}

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


def _amd_smi_gpus(text: str) -> list[dict[str, Any]]:
    """The per-GPU objects of amd-smi's JSON: a list, or ``{"gpu_data": [...]}`` (ROCm 6.4+).

    Text before the JSON (Python warnings amd-smi prints on some distributions) is skipped.
    """
    match = re.search(r"^\s*[\[{]", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"amd-smi printed no JSON: {text[:200]!r}")
    data, _ = json.JSONDecoder().raw_decode(text[match.end() - 1 :])
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    if not isinstance(data, list):
        raise ValueError(f"amd-smi printed unexpected JSON: {text[:200]!r}")
    return [g for g in data if isinstance(g, dict) and isinstance(g.get("gpu"), int)]


def _field(obj: object, *path: str) -> Any:
    """``obj[path[0]][path[1]]...``, or None where a level is missing or not an object."""
    for name in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(name)
    return obj


def _value(obj: object) -> float | None:
    """amd-smi's ``{"value": v, "unit": u}`` (or a bare number) as a float; "N/A" gives None."""
    if isinstance(obj, dict):
        obj = obj.get("value")
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        return None
    return float(obj)


def _bytes(obj: object) -> float | None:
    """An amd-smi memory figure in bytes (its unit read from the value; None if unknown)."""
    value = _value(obj)
    scale = _UNIT_BYTES.get(str(_field(obj, "unit") or "B"))
    return None if value is None or scale is None else value * scale


def parse_amd_smi_limits(text: str) -> dict[int, float]:
    """Each GPU's current power cap (W) from ``amd-smi static --limit --json``.

    ``limit.socket_power`` before ROCm 6.4, ``limit.ppt0.socket_power_limit`` after;
    GPUs reporting neither ("N/A", as APUs do) are left out.
    """
    out: dict[int, float] = {}
    for gpu in _amd_smi_gpus(text):
        limit = gpu.get("limit")
        cap = _value(_field(limit, "socket_power"))
        if cap is None:
            cap = _value(_field(limit, "ppt0", "socket_power_limit"))
        if cap:
            out[gpu["gpu"]] = cap
    return out


def parse_amd_smi(text: str, limits: Mapping[int, float] | None = None) -> dict[str, float]:
    """Catalogue keys from ``amd-smi metric --json`` output (noise before the JSON allowed).

    Keys per GPU ``i`` (amd-smi's ``gpu`` index): ``gpu.{i}.gpu`` (``usage.gfx_activity``,
    %), ``gpu.{i}.memory`` (``usage.umc_activity``: memory controller busy, %),
    ``gpu.{i}.memoryAllocated`` (``mem_usage.used_vram`` over ``total_vram``, %),
    ``gpu.{i}.memoryAllocatedBytes`` (``used_vram``, bytes), ``gpu.{i}.temp`` (°C, edge
    sensor, else hotspot, else memory), ``gpu.{i}.powerWatts`` (``power.socket_power``, W),
    ``gpu.{i}.powerPercent`` (of the GPU's power cap in ``limits``, %).
    """
    out: dict[str, float] = {}
    for gpu in _amd_smi_gpus(text):
        i = gpu["gpu"]
        temps = (_value(_field(gpu, "temperature", s)) for s in ("edge", "hotspot", "mem"))
        values = {
            "gpu": _value(_field(gpu, "usage", "gfx_activity")),
            "memory": _value(_field(gpu, "usage", "umc_activity")),
            "temp": next((t for t in temps if t is not None), None),
            "powerWatts": _value(_field(gpu, "power", "socket_power")),
        }
        used = _bytes(_field(gpu, "mem_usage", "used_vram"))
        total = _bytes(_field(gpu, "mem_usage", "total_vram"))
        values["memoryAllocatedBytes"] = used
        if used is not None and total:
            values["memoryAllocated"] = used / total * 100.0
        cap = (limits or {}).get(i)
        if values["powerWatts"] is not None and cap:
            values["powerPercent"] = values["powerWatts"] / cap * 100.0
        out.update((f"gpu.{i}.{k}", v) for k, v in values.items() if v is not None)
    return out


class AMDCollector(BaseCollector):
    """AMD GPU metrics from ``rocm-smi -a --json`` or ``amd-smi metric --json``.

    Keys: see :func:`parse_rocm_smi` and :func:`parse_amd_smi` (the same catalogue keys).
    Each sample runs the tool once (a child process, at most 10 s). A run that fails or
    prints no JSON raises, and the monitor disables the collector with one warning.

    Args:
        path: the ``rocm-smi`` or ``amd-smi`` executable.
        tool: which of the two ``path`` is.
        limits: for ``amd-smi``, each GPU's power cap in W (for ``powerPercent``).

    """

    name = "amd"
    peak_keys = frozenset({"memoryAllocatedBytes"})

    def __init__(
        self,
        path: str,
        tool: Literal["rocm-smi", "amd-smi"] = "rocm-smi",
        limits: Mapping[int, float] | None = None,
    ) -> None:
        self.tool = tool
        args = ("-a", "--json") if tool == "rocm-smi" else ("metric", "--json")
        self.command = [path, *args]
        self.limits = dict(limits or {})

    @classmethod
    def create(cls, path: str | None = None) -> AMDCollector | None:
        """The collector where ``rocm-smi`` (else ``amd-smi``) is found and reports a GPU.

        ``path`` names the ``rocm-smi`` to use. Without it, ``rocm-smi`` is looked for on
        PATH and in ROCm's install locations, then ``amd-smi`` likewise; one that is absent,
        fails or reports no GPU gives None (one debug line).

        Raises:
            ValueError: ``path`` is not an executable file.

        """
        if path is not None:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ValueError(f"rocm_smi_path={path!r} is invalid: it is not an executable file")
            return cls(path)
        found = find_tool("rocm-smi", ROCM_LOCATIONS)
        if found is not None:
            collector = cls(found)
        else:
            found = find_tool("amd-smi", AMD_SMI_LOCATIONS)
            if found is None:
                log.debug("sysmetrics: AMD collector unavailable: no rocm-smi or amd-smi found")
                return None
            collector = cls(found, "amd-smi")
        try:
            if collector.sample():
                if collector.tool == "amd-smi":  # the caps only where there is a GPU
                    collector.limits = _power_caps(found)
                return collector
            reason = f"{found} reports no GPU"
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
            reason = f"{found} failed: {exc}"
        log.debug("sysmetrics: AMD collector unavailable: %s", reason)
        return None

    def sample(self) -> dict[str, float]:
        """Run the tool and parse its JSON."""
        text = _run(self.command)
        if self.tool == "rocm-smi":
            return parse_rocm_smi(text)
        return parse_amd_smi(text, self.limits)


def _run(command: Sequence[str]) -> str:
    """The tool's standard output; a failure without JSON raises RuntimeError."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if proc.returncode != 0 and not re.search(r"[\[{]", proc.stdout):
        raise RuntimeError(
            f"{' '.join(command)} exited with {proc.returncode}: {proc.stderr[-300:]}"
        )
    return proc.stdout


def _power_caps(amd_smi: str) -> dict[int, float]:
    """Each GPU's power cap from ``amd-smi static --limit --json``; {} when that fails."""
    try:
        return parse_amd_smi_limits(_run([amd_smi, "static", "--limit", "--json"]))
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
        log.debug("sysmetrics: no AMD power caps (no powerPercent): %s", exc)
        return {}
