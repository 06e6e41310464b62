"""GPM (GPU Performance Monitoring, Hopper and newer): activity between two samples.

SM, tensor pipe and DRAM activity, PCIe and NVLink traffic.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sysmetrics.collectors.nvidia.backoff import _Fields

log = logging.getLogger("sysmetrics")

# GPM (GPU Performance Monitoring, Hopper and newer): key -> (NVML_GPM_METRIC_* name, factor
# from NVML's unit to the key's). W&B's names (its DCGM keys); NVML gives % and MiB/s.
_MIB = float(1 << 20)
_GPM_METRICS: dict[str, tuple[str, float]] = {
    "smActive": ("NVML_GPM_METRIC_SM_UTIL", 1.0),  # % of SMs busy
    "smOccupancy": ("NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),  # % of warps active vs the max
    "pipeTensorActive": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),  # % of time, any tensor op
    "dramActive": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),  # % of the DRAM bandwidth
    "pcieTxBytes": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", _MIB),  # bytes/s from the GPU
    "pcieRxBytes": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", _MIB),  # bytes/s to the GPU
    "nvlinkTxBytes": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", _MIB),  # bytes/s, all links
    "nvlinkRxBytes": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", _MIB),
}
_GPM_DROPPED = ("NOT_SUPPORTED", "FUNCTION_NOT_FOUND", "NO_PERMISSION")  # in a metric's nvmlReturn


class _Gpm:
    """The GPM metrics of one GPU: two sample buffers, allocated once, taken in turn.

    Each read takes a sample into the older buffer and computes the metrics between the
    previous sample and it (``nvmlGpmMetricsGet``): nothing at the first read. A metric
    whose ``nvmlReturn`` is NOT_SUPPORTED, FUNCTION_NOT_FOUND or NO_PERMISSION is not asked
    again; one with another error is absent from that read only.
    """

    def __init__(self, nvml: Any, samples: tuple[Any, Any]) -> None:
        self.samples = samples  # (previous, next to take)
        self.taken = False  # whether samples[0] holds a sample
        self.fields = _Fields(["gpm"])  # one field, under the collector's fault rules
        self.metrics = {
            key: (getattr(nvml, name), factor)
            for key, (name, factor) in _GPM_METRICS.items()
            if hasattr(nvml, name)
        }
        self.dropped = {getattr(nvml, f"NVML_ERROR_{e}") for e in _GPM_DROPPED}

    @classmethod
    def open(cls, nvml: Any, handle: Any) -> _Gpm | None:
        """GPM of a GPU that supports it (``nvmlGpmQueryDeviceSupport``); else None.

        None too where the driver or binding has no GPM, or the buffers cannot be had.
        """
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
        except (nvml.NVMLError, AttributeError) as exc:
            log.debug("sysmetrics: no GPM: %s", exc)
            return None
        samples: list[Any] = []
        try:
            for _ in range(2):
                samples.append(nvml.nvmlGpmSampleAlloc())
        except nvml.NVMLError as exc:
            log.debug("sysmetrics: no GPM, its samples cannot be allocated: %s", exc)
            cls.free(nvml, samples)
            return None
        return cls(nvml, (samples[0], samples[1]))

    def read(self, nvml: Any, handle: Any) -> dict[str, float]:
        """Key -> value, in the key's unit, over the interval since the previous read."""
        before, sample = self.samples
        nvml.nvmlGpmSampleGet(handle, sample)
        self.samples, self.taken, first = (sample, before), True, not self.taken
        if first or not self.metrics:
            return {}
        asked = list(self.metrics.items())
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version, get.numMetrics = nvml.NVML_GPM_METRICS_GET_VERSION, len(asked)
        get.sample1, get.sample2 = before, sample
        for m, (_, (metric_id, _)) in zip(get.metrics, asked):
            m.metricId = metric_id
        nvml.nvmlGpmMetricsGet(get)
        values: dict[str, float] = {}
        for m, (key, (_, factor)) in zip(get.metrics, asked):
            if m.nvmlReturn == nvml.NVML_SUCCESS:
                values[key] = float(m.value) * factor
            elif m.nvmlReturn in self.dropped:
                del self.metrics[key]
                log.debug("sysmetrics: GPM %s unavailable, not asked again", key)
        return values

    @staticmethod
    def free(nvml: Any, samples: Sequence[Any]) -> None:
        """``nvmlGpmSampleFree`` each of ``samples`` (a failure: one debug line)."""
        for sample in samples:
            try:
                nvml.nvmlGpmSampleFree(sample)
            except nvml.NVMLError as exc:
                log.debug("sysmetrics: a GPM sample cannot be freed: %s", exc)
