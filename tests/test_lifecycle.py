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


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports: lazy (in a function) and TYPE_CHECKING
    imports included; ``from package import name`` is an arrow to ``package.name`` where
    that is a module, else to the package."""
    files = {
        _module_of(p): p
        for root in (PACKAGE, PACKAGE.parent / "integrations")
        for p in sorted(root.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in imported(path):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_counting_lazy_and_type_checking_imports() -> None:
    """Regression (issue 31, item 7): options.py imported SystemMonitor (for a type) while
    the monitor imports the options; nvidia/fields.py and nvidia/gpm.py imported each
    other. Package faces (``__init__`` importing its own modules) are not arrows back."""
    graph = import_graph()
    for module in graph:  # a package's __init__ hands its modules on: not an arrow back
        graph[module] = {t for t in graph[module] if not t.startswith(module + ".")}
    assert circles(graph) == []


def test_the_recording_header_has_one_home_the_monitor(tmp_path: Path) -> None:
    """Regression (issue 31, item 7): the run line's pid, interval and cpus were gathered in
    sinks/jsonl.py, and announce.py (now live_findings.py) imported the run-file sink for them."""
    from sysmetrics import runfile
    from sysmetrics.sinks.jsonl import JsonlSink

    with SystemMonitor(interval=0.05) as m:
        header = m.header()
        assert set(header) == {"pid", "interval", "cpus"}
        assert header["pid"] == m.pid and header["interval"] == 0.05
        assert isinstance(header["cpus"], float) and header["cpus"] > 0
        sink = JsonlSink(m, tmp_path / "r.jsonl")
        sink.close()
    run = runfile.read_run(tmp_path / "r.jsonl").recordings[0].run
    assert {k: run[k] for k in header} == header
    assert not any(m.startswith("sysmetrics.sinks") for m in imported(PACKAGE / "live_findings.py"))


def test_the_monitor_owns_its_series_store_rather_than_inheriting_it() -> None:
    """Regression (issue 31, item 7): SystemMonitor inherited the readers' half (_Readers)
    and so carried the readers' Source methods on its public surface."""
    assert SystemMonitor.__bases__ == (object,)
    for source_only in ("read_window", "take_samples", "detach"):
        assert not hasattr(SystemMonitor, source_only), source_only
    from sysmetrics._series_store import SeriesStore

    m = SystemMonitor(collectors=[Constant()])
    assert isinstance(m._series_store, SeriesStore)
    r = m.reader()
    with m:
        assert m.snapshot() == {"x": 1.0} and r.snapshot() == {"x": 1.0}
        assert m.latest() == {"x": 1.0}
    r.close()
    assert r.snapshot() == {}


# Classes that share a name on purpose (one per framework), or left to another change.
SAME_NAME = {
    "SystemMetricsCallback": 3,  # integrations/keras.py, lightning.py, transformers.py
    "Series": 2,  # reader.Series (the monitor's) and report.data.Series (a drawn line)
}


def test_no_two_classes_share_a_name() -> None:
    """Regression (issue 31, item 7): the callbacks' run state and the run file's recording
    were both ``Run`` (callback_run.Run, runfile.Run)."""
    seen: dict[str, list[str]] = {}
    for root in (PACKAGE, PACKAGE.parent / "integrations"):
        for path in sorted(root.rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    seen.setdefault(node.name, []).append(str(path.relative_to(PACKAGE.parent)))
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert {name: len(paths) for name, paths in shared.items()} == SAME_NAME, shared


def test_module_names_say_what_they_are_with_no_shim_left() -> None:
    """Regression (issue 31, item 7): ``announce.py`` held the live findings, ``live.py``
    record's --live line, ``steps.py`` the step file; each is named for it now, and the old
    names are gone (no compatibility shim): ``sysmetrics.step``/``batches`` stay."""
    import sysmetrics

    for old, new in (
        ("announce", "live_findings"),
        ("live", "live_line"),
        ("steps", "stepfile"),
    ):
        assert not (PACKAGE / f"{old}.py").exists(), old
        assert (PACKAGE / f"{new}.py").exists(), new
    assert sysmetrics.step.__module__ == sysmetrics.batches.__module__ == "sysmetrics.stepfile"


def test_the_nvidia_collector_holds_its_parts_rather_than_inheriting_them() -> None:
    """Regression (issue 31, item 7): NvidiaCollector inherited its field reading, MIG and
    attribution halves as mixins (MigReading, Attribution, FieldReading)."""
    from sysmetrics.collectors.nvidia import NvidiaCollector

    assert NvidiaCollector.__bases__ == (BaseCollector,)
    from sysmetrics.collectors.nvidia.attribution import Attribution
    from sysmetrics.collectors.nvidia.fields import FieldReader
    from sysmetrics.collectors.nvidia.mig import MigReader

    for part in (FieldReader, MigReader, Attribution):
        assert part.__bases__ == (object,), part
