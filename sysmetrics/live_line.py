"""``sysmetrics record --live``: one compact line per interval on stderr while recording.

:func:`live_line` formats a sample; :class:`LiveView` prints one line per interval from
``monitor.latest()`` on its own thread, and stops at its first error, with one warning
line, so the command never sees it. Without a standard error (``sys.stderr`` None: fd 2
closed) it prints nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Optional, TextIO

from sysmetrics.descriptions import counter_rate, gpu_key
from sysmetrics.findings.verdict import sample_verdict
from sysmetrics.monitor import SystemMonitor

_MiB = 2.0**20
_GiB = 2.0**30


def _rate(
    key: str, values: Mapping[str, float], previous: Mapping[str, float], seconds: float
) -> Optional[float]:
    """The counter ``key``'s increase per second since ``previous``, or None."""
    if key not in values or key not in previous:
        return None
    return counter_rate(previous[key], values[key], seconds)


def live_line(
    values: Mapping[str, float],
    previous: Mapping[str, float],
    seconds: float,
    step: object,
    cpus: Optional[float] = None,
) -> str:
    """One line for a sample: the parts whose keys are present, rates since ``previous``.

    ``values`` and ``previous`` are two samples ``seconds`` apart; ``step`` is the training
    step (None where not marked); ``cpus``: the CPUs available to the job (None:
    unknown). Where the sample closed a step, the sample's verdict follows its step time
    (:func:`~sysmetrics.findings.verdict.sample_verdict`: what bounds it, with its band;
    nothing where it abstains). Example: ``step 120 | 0.05 s/step wait 40% | highly
    input-bound | cpu 97% | pss 1.2 GiB | gpu0 88% 31.2 GiB 245 W | disk r 12.0 w 3.1
    MiB/s | net in 1.0 out 0.2 MiB/s``.
    """
    parts = []
    if step is not None:
        parts.append(f"step {step}")
    if "step.seconds" in values:  # only on the lines whose sample closed a step
        speed = f"{values['step.seconds']:.3g} s/step"
        if "step.dataWaitPercent" in values:
            speed += f" wait {values['step.dataWaitPercent']:.0f}%"
        parts.append(speed)
        said = sample_verdict(values, cpus)
        if said is not None and said.bound is not None:
            parts.append(f"{said.band} {said.words}" if said.band else said.words)
    if "cpu" in values:
        parts.append(f"cpu {values['cpu']:.0f}%")
    if "proc.memory.pssMB" in values:  # the job's memory, shared pages counted once
        parts.append(f"pss {values['proc.memory.pssMB'] / 1024:.1f} GiB")
    gpus = [g.i for k in values if (g := gpu_key(k)) and not g.process and g.rest == "gpu"]
    for i in sorted(gpus, key=int):
        gpu = [f"gpu{i} {values[f'gpu.{i}.gpu']:.0f}%"]
        if f"gpu.{i}.memoryAllocatedBytes" in values:
            gpu.append(f"{values[f'gpu.{i}.memoryAllocatedBytes'] / _GiB:.1f} GiB")
        if f"gpu.{i}.powerWatts" in values:
            gpu.append(f"{values[f'gpu.{i}.powerWatts']:.0f} W")
        parts.append(" ".join(gpu))
    read, write = (_rate(k, values, previous, seconds) for k in ("disk.in", "disk.out"))
    if read is not None and write is not None:  # MiB counters
        parts.append(f"disk r {read:.1f} w {write:.1f} MiB/s")
    recv, sent = (_rate(k, values, previous, seconds) for k in ("network.recv", "network.sent"))
    if recv is not None and sent is not None:  # byte counters
        parts.append(f"net in {recv / _MiB:.1f} out {sent / _MiB:.1f} MiB/s")
    return " | ".join(parts)


class LiveView(threading.Thread):
    """Prints :func:`live_line` of ``monitor.latest()`` to ``stream`` every interval.

    ``stream``: ``sys.stderr`` (as it is at construction) by default; where that is None
    (fd 2 closed), nothing is printed: ``print(file=None)`` would write to stdout.
    """

    def __init__(self, monitor: SystemMonitor, stream: Optional[TextIO] = None) -> None:
        super().__init__(name="sysmetrics-live", daemon=True)
        self.monitor = monitor
        self.stream = stream if stream is not None else sys.stderr
        self.done = threading.Event()

    def run(self) -> None:
        """Print a line every interval until :meth:`close`, or the first error."""
        if self.stream is None:  # no standard error: nothing to print to
            return
        previous: Mapping[str, float] = {}
        last = time.monotonic()
        cpus = self.monitor.header().get("cpus")  # the CPUs available to the job
        while not self.done.wait(self.monitor.interval):
            try:
                values = self.monitor.latest()
                now = time.monotonic()
                line = live_line(values, previous, now - last, self.monitor.step, cpus)
                if line:
                    print(f"sysmetrics: {line}", file=self.stream, flush=True)
                previous, last = values, now
            except Exception as exc:  # the live view must never reach the command
                print(f"sysmetrics: live view stopped: {exc!r}"[:300], file=self.stream)
                return

    def close(self) -> None:
        """Stop printing (at once) and wait for the thread."""
        self.done.set()
        if self.ident is not None:
            self.join()
