"""The public lifecycle: ``monitor.stopped``, the reader/monitor interface, a callback's run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from sysmetrics import SystemMonitor
from sysmetrics.callback import CallbackCore
from sysmetrics.collectors.base import BaseCollector


class Constant(BaseCollector):
    """One key, always 1.0."""

    name = "constant"

    def sample(self) -> dict[str, float]:
        return {"x": 1.0}


PACKAGE = Path(__file__).resolve().parent.parent / "sysmetrics"


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports, TYPE_CHECKING blocks included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_stopped_is_public() -> None:
    m = SystemMonitor(collectors=[Constant()])
    assert not m.stopped and not m.running
    m.start()
    assert not m.stopped and m.running
    m.stop()
    assert m.stopped and not m.running


def test_no_module_reads_the_monitors_private_state() -> None:
    """Regression: ``monitor._state`` was read in sinks/jsonl.py, sinks/prometheus.py and
    callback.py (twice)."""
    readers = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "monitor.py" and "_state" in p.read_text()
    ]
    assert readers == []


def test_reader_does_not_import_the_monitor() -> None:
    """Regression: monitor.py and reader.py imported each other (the house's only circle)
    and touched each other's private fields; reader.Source is the interface now."""
    assert not any(m.startswith("sysmetrics.monitor") for m in imported(PACKAGE / "reader.py"))
    text = (PACKAGE / "monitor.py").read_text()
    for private in ("._acc", "._buffer", "._push", "._aggregate", "._new", "._repeated"):
        assert private not in text, private
    assert "._monitor" not in (PACKAGE / "reader.py").read_text()


def test_a_run_is_one_object_made_at_start_and_closed_at_end(tmp_path: Path) -> None:
    core = CallbackCore(collectors=[Constant()], run_file=tmp_path / "r.jsonl")
    assert core.run is None and core.monitor is None
    core.start()
    run = core.run
    assert run is not None and run.monitor is core.monitor is not None
    assert run.reader is core.reader is not None and run.sink is not None
    monitor, reader = run.monitor, run.reader
    core.stop()
    assert (run.monitor, run.reader, run.sink, run.extra) == (None, None, None, [])
    assert monitor.stopped and reader.closed
    core.start()  # a second run: a new object
    assert core.run is not run and core.run is not None and core.run.monitor is not None
    core.stop()
    with pytest.raises(RuntimeError):
        monitor.start()
