"""Findings told live (:mod:`sysmetrics.announce`), over a real monitor's samples."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import pytest

from sysmetrics import findings
from sysmetrics.announce import LiveFindings, identity
from sysmetrics.collectors.base import BaseCollector
from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.monitor import SystemMonitor


class Script(BaseCollector):
    """Reports ``values`` (the test changes them between samples)."""

    name = "script"

    def __init__(self, values: Mapping[str, float]) -> None:
        self.values = dict(values)

    def sample(self) -> dict[str, float]:
        return dict(self.values)


def wait_for(check: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_finding_is_said_once_while_the_run_goes_on() -> None:
    script = Script({"proc.memory.percent": 40.0, "gpu.0.memoryAllocated": 10.0,
                     "gpu.process.0.gpu": 5.0})  # fmt: skip
    lines: list[str] = []
    with SystemMonitor(interval=0.02, collectors=[script]) as m:
        live = LiveFindings(m, lines.append, every=0.05, first=0.0).start()
        time.sleep(0.3)
        assert lines == []  # nothing to say yet
        script.values["proc.memory.percent"] = 96.0
        wait_for(lambda: lines)
        script.values["proc.memory.percent"] = 98.0  # the same finding, a higher peak
        script.values["gpu.0.memoryAllocated"] = 99.0  # another one
        wait_for(lambda: len(lines) == 2)
        time.sleep(0.3)
        live.close()
    assert len(lines) == 2, lines
    assert lines[0].startswith("sysmetrics: The job's memory peaked at 96 %")
    assert lines[1].startswith("sysmetrics: GPU 0's memory peaked at 99 %")


def test_close_says_what_the_whole_run_showed() -> None:
    script = Script({"proc.memory.percent": 97.0})
    lines: list[str] = []
    with SystemMonitor(interval=0.02, collectors=[script]) as m:
        live = LiveFindings(m, lines.append).start()  # the first evaluation is 20 s away
        time.sleep(0.1)
        live.close()
        live.close()  # idempotent
    assert len(lines) == 1 and "memory peaked at 97 %" in lines[0]


def test_identity_keeps_names_and_drops_measures() -> None:
    a = identity("gpu-throttling", "GPU 1 was held down in 12 % of samples, steps 10-40")
    b = identity("gpu-throttling", "GPU 1 was held down in 31 % of samples, steps 10-400")
    c = identity("gpu-throttling", "GPU 0 was held down in 12 % of samples, steps 10-40")
    assert a == b != c
    assert identity("straggler-node", "node 1 waited 40 %") != identity(
        "straggler-node", "node 2 waited 40 %"
    )


def test_failing_rules_stop_the_announcing_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def broken(run: object) -> list[findings.Finding]:
        calls.append(threading.current_thread().name)
        raise ZeroDivisionError("a rule divided by zero")

    monkeypatch.setattr(findings, "findings", broken)
    lines: list[str] = []
    with SystemMonitor(interval=0.02, collectors=[Script({"cpu": 1.0})]) as m:
        live = LiveFindings(m, lines.append, every=0.02, first=0.0).start()
        with pytest.warns(SystemMetricsWarning, match="live findings failed.*ZeroDivisionError"):
            wait_for(lambda: calls)
            time.sleep(0.2)
            live.close()
    assert len(calls) == 1 and lines == []
