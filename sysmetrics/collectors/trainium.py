"""AWS Trainium / Inferentia through one long-lived ``neuron-monitor``: ``trn.*``."""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from sysmetrics.collectors._values import BYTES, PERCENT, Range, checked, field, number
from sysmetrics.collectors.base import BackgroundCollector, find_tool
from sysmetrics.collectors.process import process_tree
from sysmetrics.host import HostSource, Job

log = logging.getLogger("sysmetrics")

NEURON_LOCATIONS = ("/opt/aws/neuron/bin/neuron-monitor",)
CONFIG = {
    "period": "1s",
    "neuron_runtimes": [
        {
            "tag_filter": ".*",
            "metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"}],
        }
    ],
    "system_metrics": [],
}


def parse_neuron_monitor(doc: Any, pids: set[int]) -> dict[str, float]:
    """Catalogue keys from one ``neuron-monitor`` report (a decoded JSON line).

    Runtimes whose PID is in ``pids`` are kept; when none is, all are (a runtime in another
    PID namespace, or started by another process of the job). Their numbers are summed.

    Keys: ``trn.{core}.neuroncore_utilization`` (%), ``trn.host_total_memory_usage`` and
    ``trn.neuron_device_total_memory_usage`` (bytes), ``trn.host_total_memory_usage.{kind}``
    (bytes: application_memory, constants, dma_buffers, tensors) and
    ``trn.{core}.neuroncore_memory_usage.{kind}`` (bytes: constants, model_code,
    model_shared_scratchpad, runtime_memory, tensors).

    Never raises: a document of another shape gives {}, parts of another shape are
    skipped, and values out of range are left out (one debug line each): % outside
    0..100, bytes outside 0..2**64, NaN or infinite anything; a sum out of range likewise.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("neuron_runtime_data"), list):
        return {}
    runtimes = [r for r in doc["neuron_runtime_data"] if isinstance(r, dict)]
    ours = [r for r in runtimes if type(r.get("pid")) is int and r["pid"] in pids] or runtimes
    out: dict[str, float] = {}

    def add(key: str, value: object) -> None:
        value = checked(key, number(value), _bounds(key))
        if value is not None:
            out[key] = out.get(key, 0.0) + value

    for runtime in ours:
        report = _object(runtime, "report")
        for core, counters in _object(report, "neuroncore_counters", "neuroncores_in_use").items():
            add(
                f"trn.{core}.neuroncore_utilization",
                _object(counters).get("neuroncore_utilization"),
            )
        used = _object(report, "memory_used", "neuron_runtime_used_bytes")
        add("trn.host_total_memory_usage", used.get("host"))
        add("trn.neuron_device_total_memory_usage", used.get("neuron_device"))
        for kind, value in _object(used, "usage_breakdown", "host").items():
            add(f"trn.host_total_memory_usage.{kind}", value)
        for core, kinds in _object(used, "usage_breakdown", "neuroncore_memory_usage").items():
            for kind, value in _object(kinds).items():
                add(f"trn.{core}.neuroncore_memory_usage.{kind}", value)
    # The sums over runtimes, checked again.
    return {k: v for k, v in out.items() if checked(k, v, _bounds(k)) is not None}


def _bounds(key: str) -> Range:
    """The plausible range of a ``trn.*`` key: % for utilization, else bytes."""
    return PERCENT if key.endswith("_utilization") else BYTES


def _object(obj: object, *path: str) -> dict[str, Any]:
    """``obj[path[0]][path[1]]...``, or {} where a level is missing or not an object."""
    found = field(obj, *path)
    return found if isinstance(found, dict) else {}


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

    return preexec


class TrainiumCollector(BackgroundCollector):
    """Trainium metrics from one ``neuron-monitor`` child process read as JSON lines.

    The child runs with a generated config (neuroncore counters and memory, every second),
    is started by the collector's own reader thread at the first sample, stops with the
    monitor, and on Linux is killed by the kernel if this process dies (it is never left
    orphaned). ``sample()`` returns the latest report's numbers without I/O. Keys: see
    :func:`parse_neuron_monitor`; runtimes of this process tree are kept (all when none
    matches).

    Args:
        path: the ``neuron-monitor`` executable.
        source: host readings, to find the process tree.
        pid: the root of the process tree, or the job (every local rank's tree).
        track_process_tree: match runtimes of descendants too.

    """

    name = "trainium"
    thread_name = "sysmetrics-neuron-monitor"
    join_timeout = 3.0
    stale_after = 5.0  # neuron-monitor reports every second

    def __init__(
        self, path: str, source: HostSource, pid: int | Job, track_process_tree: bool = True
    ) -> None:
        self.path, self.source = path, source
        self.job = pid if isinstance(pid, Job) else Job(pid)  # the watched roots
        self.pid = self.job.pid
        self.track_process_tree = track_process_tree
        self._config: str | None = None
        super().__init__()

    @classmethod
    def create(
        cls, source: HostSource, pid: int | Job, track_process_tree: bool = True
    ) -> TrainiumCollector | None:
        """The collector where ``neuron-monitor`` is found; None (one debug line) otherwise."""
        path = find_tool("neuron-monitor", NEURON_LOCATIONS)
        if path is None:
            log.debug("sysmetrics: Trainium collector unavailable: no neuron-monitor")
            return None
        return cls(path, source, pid, track_process_tree)

    def _run(self) -> None:
        # Started from this thread so that PR_SET_PDEATHSIG is tied to a thread that lives
        # exactly as long as the collector.
        fd, self._config = tempfile.mkstemp(prefix="sysmetrics-neuron-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(CONFIG, f)
        try:
            lines = self._tool.lines([self.path, "-c", self._config], _die_with_parent())
        except OSError as exc:
            self._warn_once("start", f"sysmetrics: cannot start {self.path}: {exc}")
            return
        for line in lines:
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):
                log.debug("sysmetrics: neuron-monitor line skipped: %.100r", line)
                continue  # a partial, non-JSON or absurdly nested line
            tree = {
                p for p, _ in process_tree(self.source, self.job.roots, self.track_process_tree)
            }
            self._set_latest(parse_neuron_monitor(doc, tree))
        if not self._closed.is_set():
            code = self.process.returncode if self.process is not None else None
            self._warn_once(
                "ended", f"sysmetrics: {self.path} ended (exit {code}): no Trainium metrics"
            )

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The ``neuron-monitor`` child (kept once it ended), or None before it started."""
        return self._tool.streamed

    def close(self) -> None:
        """Stop neuron-monitor and the reader thread; remove the generated config."""
        super().close()
        if self._config:
            with contextlib.suppress(OSError):
                os.unlink(self._config)
