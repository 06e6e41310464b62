"""What ``console=True`` shows: at most six short keys, made from a window of metrics.

The full set of keys goes to the loggers; the console (Lightning's progress bar, Keras'
progress bar, transformers' printed log lines) shows only these, so a progress bar stays
on one line. Each is declared once here, in the order shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_GPU = re.compile(r"gpu\.(\d+)\.(.+)")  # a device's key (not gpu.process.*)


@dataclass(frozen=True)
class ConsoleKey:
    """One short key of the console: its label, the key it shows, and how.

    ``source`` is a key (``"cpu"``) or, with ``per_gpu``, the part after ``gpu.{i}.``
    of a per-GPU key, whose values over the GPUs of the window are ``reduce``d.
    ``digits`` is how many decimals the value keeps.
    """

    label: str
    source: str
    unit: str
    digits: int = 1
    per_gpu: bool = False
    reduce: Callable[[list[float]], float] = max


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


CONSOLE_KEYS: tuple[ConsoleKey, ...] = (
    ConsoleKey("cpu", "cpu", "% of the CPUs available to the job"),
    ConsoleKey("mem", "proc.memory.percent", "% of the memory available to the job (PSS)"),
    ConsoleKey("gpu", "gpu", "% of time a kernel ran, mean over the GPUs", 1, True, _mean),
    ConsoleKey("gmem", "memoryAllocated", "% of a GPU's memory in use, the fullest", 1, True),
    ConsoleKey("s/step", "step.seconds", "s per optimizer step", digits=3),
    ConsoleKey("wait", "step.dataWaitPercent", "% of the step time waiting for data"),
)
"""The keys ``console=True`` shows, in order (the docs' table is made from this)."""


def console_view(
    window: Mapping[str, float], shown: Callable[[str], bool] = lambda key: True
) -> dict[str, float]:
    """The console's short keys of ``window`` (one logging point's keys, un-prefixed).

    A short key is left out where its key is not in the window (not measured since the
    previous point), or where ``shown(key)`` says the callback's include/exclude leave
    it out.
    """
    gpus: dict[str, list[float]] = {}
    for key, value in window.items():
        m = _GPU.fullmatch(key)
        if m is not None and shown(key):
            gpus.setdefault(m.group(2), []).append(value)
    out: dict[str, float] = {}
    for c in CONSOLE_KEYS:
        if c.per_gpu:
            values = gpus.get(c.source)
            if not values:
                continue
            value = c.reduce(values)
        else:
            if c.source not in window or not shown(c.source):
                continue
            value = window[c.source]
        out[c.label] = round(value, c.digits)
    return out
