"""AMD GPUs through ``rocm-smi -a --json``, else ``amd-smi metric --json``: ``gpu.{i}.*``."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from sysmetrics.collectors._values import WATTS, checked, field, gpu_values, number
from sysmetrics.collectors.base import BackgroundCollector, ToolRunner, find_tool
from sysmetrics.errors import OptionError

log = logging.getLogger("sysmetrics")

ROCM_LOCATIONS = ("/opt/rocm/bin/rocm-smi", "/opt/rocm-*/bin/rocm-smi")
AMD_SMI_LOCATIONS = ("/opt/rocm/bin/amd-smi", "/opt/rocm-*/bin/amd-smi")
TIMEOUT_S = 10.0
POLL_S = 5.0
"""Seconds between runs: each run of the CLI takes a second or more."""
# amd-smi prints memory in "MB" that are MiB (its CLI divides bytes by 1024**2).
_UNIT_BYTES = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}

# rocm-smi's names differ across ROCm versions and cards: the first one present wins.
_POWER = ("Average Graphics Package Power (W)", "Current Socket Graphics Package Power (W)")
_TEMP = (
    "Temperature (Sensor edge) (C)",
    "Temperature (Sensor junction) (C)",
    "Temperature (Sensor memory) (C)",
)
_MAX_INDEX = 65535
"""GPU indices above this are misreads (their keys are not made)."""


def _number(card: dict[str, Any], *names: str) -> float | None:
    """The first of ``names`` that holds a number, as JSON or as text ("45.0", "12%").

    "N/A", absent, other text or other JSON types give None; the number is not checked.
    """
    for name in names:
        value = card.get(name)
        if isinstance(value, str):
            try:
                return float(value.strip().rstrip("%"))
            except ValueError:
                continue
        found = number(value)
        if found is not None:
            return found
    return None


def _decode(text: str, start: int, tool: str) -> Any:
    """The JSON value at ``text[start:]`` (text after it ignored).

    Raises:
        ValueError: it is not JSON, or nested too deeply to decode.

    """
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except RecursionError as exc:
        raise ValueError(f"{tool} printed JSON nested too deeply") from exc


def parse_rocm_smi(text: str) -> dict[str, float]:
    """Catalogue keys from ``rocm-smi -a --json`` output (noise before the JSON allowed).

    Keys per card ``i`` (``card{i}``): ``gpu.{i}.gpu`` (GPU use %), ``gpu.{i}.memory``
    (memory controller busy %, rocm-smi's "GPU memory use (%)"),
    ``gpu.{i}.memoryAllocated`` (VRAM used over total, %, or rocm-smi's "GPU Memory
    Allocated (VRAM%)" where bytes are missing), ``gpu.{i}.memoryAllocatedBytes`` (VRAM
    used, bytes), ``gpu.{i}.temp`` (°C, edge sensor, else junction, else memory),
    ``gpu.{i}.powerWatts`` (average, or MI300's current socket, graphics package power, W),
    ``gpu.{i}.powerPercent`` (of the card's max graphics package power).

    Values out of range are left out (one debug line each): % outside 0..100 (power %
    outside 0..1000), °C outside -50..200, bytes outside 0..2**64, W outside 0..10000,
    NaN or infinite anything.

    Raises:
        ValueError: the output holds no JSON object, or one that does not decode.

    """
    start = text.find("{")
    if start < 0:
        raise ValueError(f"rocm-smi printed no JSON: {text[:200]!r}")
    data = _decode(text, start, "rocm-smi")
    out: dict[str, float] = {}
    cards = [(k, v) for k, v in data.items() if re.fullmatch(r"card[0-9]{1,5}", k)]
    for name, card in sorted(cards, key=lambda kv: int(kv[0][4:])):
        if not isinstance(card, dict) or int(name[4:]) > _MAX_INDEX:
            continue
        raw = {
            "gpu": _number(card, "GPU use (%)"),
            "memory": _number(card, "GPU memory use (%)", "GPU Memory Read/Write Activity (%)"),
            "temp": _number(card, *_TEMP),
            "powerWatts": _number(card, *_POWER),
            "memoryAllocatedBytes": _number(card, "VRAM Total Used Memory (B)"),
            "memoryAllocated": _number(card, "GPU Memory Allocated (VRAM%)"),
        }
        total = _number(card, "VRAM Total Memory (B)")
        limit = _number(card, "Max Graphics Package Power (W)")
        out.update(gpu_values(f"gpu.{name[4:]}.", raw, total, limit))
    return out


def _amd_smi_gpus(text: str) -> list[dict[str, Any]]:
    """The per-GPU objects of amd-smi's JSON: a list, or ``{"gpu_data": [...]}`` (ROCm 6.4+).

    Text before the JSON (Python warnings amd-smi prints on some distributions) is skipped.
    Objects without a ``gpu`` index (an int in 0..65535) are left out.

    Raises:
        ValueError: no JSON, JSON that does not decode, or of another shape.

    """
    match = re.search(r"^\s*[\[{]", text, re.MULTILINE)
    if match is None:
        raise ValueError(f"amd-smi printed no JSON: {text[:200]!r}")
    data = _decode(text, match.end() - 1, "amd-smi")
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    if not isinstance(data, list):
        raise ValueError(f"amd-smi printed unexpected JSON: {text[:200]!r}")
    return [
        g
        for g in data
        if isinstance(g, dict) and type(g.get("gpu")) is int and 0 <= g["gpu"] <= _MAX_INDEX
    ]


def _value(obj: object) -> float | None:
    """amd-smi's ``{"value": v, "unit": u}`` (or a bare number) as a float; "N/A" gives None.

    The number is not checked (it may be NaN or infinite).
    """
    if isinstance(obj, dict):
        obj = obj.get("value")
    return number(obj)


def _bytes(obj: object) -> float | None:
    """An amd-smi memory figure in bytes (its unit read from the value; None if unknown)."""
    value = _value(obj)
    unit = field(obj, "unit") or "B"
    scale = _UNIT_BYTES.get(unit) if isinstance(unit, str) else None
    return None if value is None or scale is None else value * scale


def parse_amd_smi_limits(text: str) -> dict[int, float]:
    """Each GPU's current power cap (W) from ``amd-smi static --limit --json``.

    ``limit.socket_power`` before ROCm 6.4, ``limit.ppt0.socket_power_limit`` after;
    GPUs reporting neither ("N/A", as APUs do), or a cap outside 0..10000 W or of 0 W,
    are left out.

    Raises:
        ValueError: the output holds no JSON, JSON that does not decode, or of another shape.

    """
    out: dict[int, float] = {}
    for gpu in _amd_smi_gpus(text):
        limit = gpu.get("limit")
        cap = _value(field(limit, "socket_power"))
        if cap is None:
            cap = _value(field(limit, "ppt0", "socket_power_limit"))
        cap = checked(f"gpu.{gpu['gpu']} power cap", cap, WATTS)
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

    Values out of range are left out (one debug line each): % outside 0..100 (power %
    outside 0..1000), °C outside -50..200, bytes outside 0..2**64, W outside 0..10000,
    NaN or infinite anything.

    Raises:
        ValueError: the output holds no JSON, JSON that does not decode, or of another shape.

    """
    out: dict[str, float] = {}
    for gpu in _amd_smi_gpus(text):
        i = gpu["gpu"]
        temps = (_value(field(gpu, "temperature", s)) for s in ("edge", "hotspot", "mem"))
        raw = {
            "gpu": _value(field(gpu, "usage", "gfx_activity")),
            "memory": _value(field(gpu, "usage", "umc_activity")),
            "temp": next((t for t in temps if t is not None), None),
            "powerWatts": _value(field(gpu, "power", "socket_power")),
            "memoryAllocatedBytes": _bytes(field(gpu, "mem_usage", "used_vram")),
        }
        total = _bytes(field(gpu, "mem_usage", "total_vram"))
        out.update(gpu_values(f"gpu.{i}.", raw, total, (limits or {}).get(i)))
    return out


class AMDCollector(BackgroundCollector):
    """AMD GPU metrics from ``rocm-smi -a --json`` or ``amd-smi metric --json``.

    Keys: see :func:`parse_rocm_smi` and :func:`parse_amd_smi` (the same catalogue keys).
    The tool runs every ``poll_interval`` seconds on the collector's own thread, never on
    the monitor's: each run starts a Python program that queries every field (a second or
    more; ``amd-smi`` has been reported to take 8.6 s), too heavy for every tick.
    ``sample()`` returns the latest run's values without I/O; values older than
    ``stale_after`` (the next run is overdue) are dropped, never presented as current.

    A run that fails (cannot start, times out after 10 s, exits non-zero without JSON,
    prints no readable JSON) costs one warning and no values; the collector keeps trying.
    ``close()`` kills a run in progress (its whole process group).

    Args:
        path: the ``rocm-smi`` or ``amd-smi`` executable.
        tool: which of the two ``path`` is.
        limits: for ``amd-smi``, each GPU's power cap in W (for ``powerPercent``).
        poll_interval: seconds between the end of a run and the start of the next.

    """

    name = "amd"
    thread_name = "sysmetrics-amd"

    def __init__(
        self,
        path: str,
        tool: Literal["rocm-smi", "amd-smi"] = "rocm-smi",
        limits: Mapping[int, float] | None = None,
        poll_interval: float = POLL_S,
    ) -> None:
        super().__init__()
        self.tool = tool
        args = ("-a", "--json") if tool == "rocm-smi" else ("metric", "--json")
        self.command = [path, *args]
        self.limits = dict(limits or {})
        self.poll_interval = poll_interval
        # A reading is current until the next run is overdue (a run takes up to TIMEOUT_S).
        self.stale_after = poll_interval + TIMEOUT_S + 5.0

    @classmethod
    def create(cls, path: str | None = None) -> AMDCollector | None:
        """The collector where ``rocm-smi`` (else ``amd-smi``) is found and reports a GPU.

        ``path`` names the ``rocm-smi`` to use (not run here). Without it, ``rocm-smi`` is
        looked for on PATH and in ROCm's install locations, then ``amd-smi`` likewise, and
        run once here (its values are the first sample's); one that is absent, fails,
        prints output that does not parse or reports no GPU gives None (one debug line).

        Raises:
            ValueError: ``path`` is not an executable file.

        """
        if path is not None:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise OptionError("rocm_smi_path", path, "it is not an executable file")
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
            text = collector._output()
            values = collector._parse(text)
            if values and collector.tool == "amd-smi":  # the caps only where there is a GPU
                collector.limits = _power_caps(collector._tool, found)
                values = collector._parse(text)
            if values:
                collector._set_latest(values)
                return collector
            reason = f"{found} reports no GPU"
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
            reason = f"{found} failed: {exc}"
        log.debug("sysmetrics: AMD collector unavailable: %s", reason)
        return None

    def read(self) -> dict[str, float]:
        """Run the tool once (in its own process group) and parse its JSON.

        Raises:
            OSError: the tool cannot be started.
            subprocess.TimeoutExpired: it ran past 10 s (its process group is killed).
            RuntimeError: it exited non-zero without printing JSON, or printed over 16 MiB.
            ValueError: its output holds no readable JSON.

        """
        return self._parse(self._output())

    def _output(self) -> str:
        """The tool's standard output (one run); raises as :meth:`read`, bar ValueError."""
        result = self._tool.run(self.command, TIMEOUT_S)
        _check_exit(self.command, *result)
        return result.stdout

    def _parse(self, text: str) -> dict[str, float]:
        if self.tool == "rocm-smi":
            return parse_rocm_smi(text)
        return parse_amd_smi(text, self.limits)

    def _run(self) -> None:
        # Values published by create() are fresh: the first run waits out the interval.
        with self._lock:
            published = self._published
        if published:
            self._closed.wait(max(0.0, published + self.poll_interval - time.monotonic()))
        errors = (OSError, ValueError, RuntimeError, subprocess.SubprocessError)
        self._poll(self.read, " ".join(self.command), errors, self.poll_interval)


def _check_exit(command: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
    """Raise RuntimeError for a run that exited non-zero without printing JSON."""
    if returncode != 0 and not re.search(r"[\[{]", stdout):
        raise RuntimeError(f"{' '.join(command)} exited with {returncode}: {stderr[-300:]}")


def _power_caps(tool: ToolRunner, amd_smi: str) -> dict[int, float]:
    """Each GPU's power cap from ``amd-smi static --limit --json``; {} when that fails."""
    command = [amd_smi, "static", "--limit", "--json"]
    try:
        result = tool.run(command, TIMEOUT_S)
        _check_exit(command, *result)
        return parse_amd_smi_limits(result.stdout)
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
        log.debug("sysmetrics: no AMD power caps (no powerPercent): %s", exc)
        return {}
