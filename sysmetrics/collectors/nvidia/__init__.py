"""NVIDIA GPUs through NVML (``nvidia-ml-py``): ``gpu.{i}.*`` and ``gpu.process.{i}.*``.

One concern a module: :mod:`.devices` (which GPUs, in CUDA's numbering), :mod:`.fields`
(what is read, per-field backoff, slow-field cadence), :mod:`.gpm` (Hopper's performance
counters), :mod:`.mig` (MIG devices), :mod:`.proclists` (NVML's process lists through
ctypes), :mod:`.attribution` (which GPUs the job uses) and :mod:`.collector`
(:class:`NvidiaCollector`, which puts them together).
"""

from __future__ import annotations

from sysmetrics.collectors.nvidia.collector import NvidiaCollector
from sysmetrics.collectors.nvidia.devices import GpuId, select, visible_devices
from sysmetrics.collectors.nvidia.fields import _HW_SLOWDOWN, _POWER_CAP, _THERMAL, PERIODS
from sysmetrics.collectors.nvidia.proclists import list_processes, process_layout

__all__ = [
    "PERIODS",
    "_HW_SLOWDOWN",
    "_POWER_CAP",
    "_THERMAL",
    "GpuId",
    "NvidiaCollector",
    "list_processes",
    "process_layout",
    "select",
    "visible_devices",
]
