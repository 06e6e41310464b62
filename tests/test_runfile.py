"""The run file as a record of the run: markers, how each recording ended, nodes kept apart.

Real recordings (``sysmetrics record`` of real commands that exit 1, die of a signal, or
whose recorder is killed), real sinks on real files, and the report read back from them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmetrics import SystemMetricsWarning, SystemMonitor, runfile
from sysmetrics.findings import read_run as read_run_from_findings
from sysmetrics.runfile import read_run
from sysmetrics.sinks import jsonl
from sysmetrics.sinks.jsonl import JsonlSink
from tests.conftest import ScriptedCollector
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def record(path: Path, *command: str, interval: str = "0.1") -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sysmetrics", "record", "--output", str(path),
           "--interval", interval, "--", *command]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def report_page(path: Path, tmp_path: Path) -> str:
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    out = tmp_path / "page.html"
    cmd = [sys.executable, "-m", "sysmetrics", "report", str(path), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return out.read_text()


EXIT_1 = "import time; time.sleep(0.4); raise SystemExit(1)"


def test_record_marks_the_run_and_how_the_command_exited(tmp_path: Path) -> None:
    """Regression: the run file held samples only; a failed command read as a good run."""
    path = tmp_path / "run.jsonl"
    done = record(path, sys.executable, "-c", EXIT_1)
    assert done.returncode == 1, done.stderr
    got = lines(path)
    first, last = got[0], got[-1]
    run = first["run"]
    assert run["command"] == [sys.executable, "-c", EXIT_1]
    assert run["host"] == socket.gethostname() and run["node"] == 0
    assert isinstance(run["pid"], int) and run["pid"] != os.getpid()  # the command's
    assert abs(run["start"] - time.time()) < 60 and run["interval"] == 0.1
    assert isinstance(run["version"], str) and run["version"]
    assert last["end"]["exit_status"] == 1 and "signal" not in last["end"]
    assert 0.3 < last["end"]["seconds"] < 30
    samples = got[1:-1]
    assert samples and all("metrics" in x and "node" not in x for x in samples)
    assert last["end"]["samples"] == len(samples)
    assert samples[0]["time"] >= run["start"]
    page = report_page(path, tmp_path)
    assert "the command exited with status 1 after " in page
    assert "without an end marker" not in page


def test_record_marks_a_command_killed_by_a_signal(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    done = record(path, sys.executable, "-c",
                  "import os, time; time.sleep(0.3); os.kill(os.getpid(), 9)")  # fmt: skip
    assert done.returncode == 128 + 9, done.stderr
    end = lines(path)[-1]["end"]
    assert (end["signal"], end["signal_name"]) == (9, "SIGKILL")
    assert "exit_status" not in end
    page = report_page(path, tmp_path)
    assert "the command was killed by signal 9 (SIGKILL) after " in page


def test_record_takes_the_first_sample(tmp_path: Path) -> None:
    """The start-up sample is in the file: at a 2 s interval a 0.3 s command has two."""
    path = tmp_path / "run.jsonl"
    done = record(path, sys.executable, "-c", "import time; time.sleep(0.3)", interval="2")
    assert done.returncode == 0, done.stderr
    got = lines(path)
    samples = [x for x in got if "metrics" in x]
    assert len(samples) == 2  # the first (at start) and the last (at stop)
    assert samples[0]["time"] - got[0]["run"]["start"] < 1.0


KILLED = textwrap.dedent(
    """
    import sys, time
    from sysmetrics import SystemMonitor
    from sysmetrics.sinks.jsonl import JsonlSink
    m = SystemMonitor(interval=0.02)
    sink = JsonlSink(m, sys.argv[1])
    m.start()
    while True:  # killed with SIGKILL by the test
        time.sleep(0.01)
    """
)


def test_a_recording_without_an_end_line_says_so(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(path)])
    try:
        wait_for(lambda: path.exists() and path.read_text().count("\n") >= 5, timeout=60)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    got = lines(path)
    assert "run" in got[0] and not any("end" in x for x in got)
    run = read_run(path)
    (rec,) = run.recordings
    assert rec.end is None and rec.run["pid"] == child.pid
    page = report_page(path, tmp_path)
    assert "the recording ended without an end marker (the process was killed or crashed)" in page


def test_appended_recordings_are_told_apart_by_their_markers(tmp_path: Path) -> None:
    """Regression: back-to-back recordings (no clock gap) became one "run"."""
    path = tmp_path / "run.jsonl"
    assert record(path, sys.executable, "-c", EXIT_1).returncode == 1
    assert record(path, sys.executable, "-c", "import time; time.sleep(0.3)").returncode == 0
    run = read_run(path)
    assert len(run.recordings) == 2
    assert [r.end and r.end.get("exit_status") for r in run.recordings] == [1, 0]
    first = run.recordings[1].first
    assert set(run.recording[:first]) == {0} and set(run.recording[first:]) == {1}
    page = report_page(path, tmp_path)
    assert " in 2 recordings (the file was appended to)" in page
    assert page.index("exited with status 1") < page.index("exited with status 0")


def test_files_without_markers_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(
        "".join(
            json.dumps({"time": 1e9 + n, "monotonic": float(n), "step": n, "metrics": {"cpu": 1}})
            + "\n"
            for n in range(4)
        )
        + '{"something": "new"}\n'
    )
    run = read_run(path)
    assert len(run) == 4 and run.recordings == [] and set(run.recording) == {-1}
    assert read_run_from_findings is read_run  # still importable where it was


def test_readers_that_skip_unknown_lines_keep_working(tmp_path: Path) -> None:
    """A reader of samples only (``"metrics" in line``) sees the same samples as before."""
    path = tmp_path / "run.jsonl"
    m = SystemMonitor(interval=0.02)
    sink = JsonlSink(m, path)
    m.start()
    time.sleep(0.1)
    m.stop()
    sink.close(end={"status": "finished"})
    got = lines(path)
    samples = [x for x in got if isinstance(x.get("metrics"), dict)]
    assert len(samples) == len(got) - 2 == len(read_run(path))


def test_a_deleted_run_file_warns_once_and_is_no_longer_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a run file whose directory was removed took writes with no warning.

    The link count is checked every ``LINK_CHECK`` s, 0.2 here (10 by default: the test
    waited that long for nothing the shorter period does not show).
    """
    monkeypatch.setattr(jsonl, "LINK_CHECK", 0.2)
    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / "run.jsonl"
    c = ScriptedCollector({"x": 1.0})
    m = SystemMonitor(interval=0.01, collectors=[c])
    sink = JsonlSink(m, path)
    m.start()
    c.release()  # it repeats its sample from now on
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            wait_for(lambda: sink.lines >= 3)
            path.unlink()
            folder.rmdir()  # the directory removed, as rm -r does
            wait_for(lambda: any("deleted" in str(w.message) for w in caught), timeout=30)
            written = sink.lines
            time.sleep(0.3)
            assert sink.lines == written  # no longer written
            assert m.running  # the monitor goes on
        finally:
            m.stop()
            sink.close()
    deleted = [w for w in caught if issubclass(w.category, SystemMetricsWarning)]
    assert len(deleted) == 1, [str(w.message) for w in caught]
    assert str(path) in str(deleted[0].message)


def test_a_run_file_that_is_renamed_is_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "LINK_CHECK", 0.05)
    path, moved = tmp_path / "run.jsonl", tmp_path / "moved.jsonl"
    c = ScriptedCollector({"x": 1.0})
    m = SystemMonitor(interval=0.01, collectors=[c])
    sink = JsonlSink(m, path)
    m.start()
    c.release()  # it repeats its sample from now on
    with warnings.catch_warnings():
        warnings.simplefilter("error", SystemMetricsWarning)
        try:
            wait_for(lambda: sink.lines >= 2)
            path.rename(moved)
            written = sink.lines
            wait_for(lambda: sink.lines > written + 5)
        finally:
            m.stop()
            sink.close()
    assert "end" in lines(moved)[-1]


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def node_lines(node: int, cpu: float, t0: float) -> list[dict[str, Any]]:
    run = {"run": {"command": None, "host": f"h{node}", "node": node, "pid": 10 + node,
                   "start": 1e9, "interval": 1.0, "version": "x"}}  # fmt: skip
    samples = [
        {
            "time": 1e9 + t0 + n,
            "monotonic": t0 + n,
            "step": n,
            "metrics": {"cpu": cpu, "disk.in": 100.0 * n * (node + 1)},
            "node": node,
        }
        for n in range(6)
    ]
    return [run, *samples, {"end": {"seconds": 6.0, "node": node, "status": "finished"}}]


def test_nodes_appending_to_one_file_are_never_mixed(tmp_path: Path) -> None:
    """Two nodes given one path on a shared filesystem: their lines interleave."""
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    from sysmetrics import report

    a, b = node_lines(0, 10.0, 0.0), node_lines(1, 90.0, 0.3)
    mixed = [x for pair in zip(a, b) for x in pair]  # run, run, sample, sample, ...
    path = write(tmp_path / "run.jsonl", mixed)
    run = read_run(path)
    assert [r.node for r in run.recordings] == [0, 1]
    parts = dict(run.by_node())
    assert sorted(parts) == [0, 1]
    assert set(parts[0].columns["cpu"]) == {10.0} and set(parts[1].columns["cpu"]) == {90.0}
    assert [r.end and r.end["status"] for r in parts[1].recordings] == ["finished"]
    written = report.write_report(path, tmp_path / "page.html", tmp_path / "png")
    page = (tmp_path / "page.html").read_text()
    assert "<h2>Node 0</h2>" in page and "<h2>Node 1</h2>" in page
    node0 = page[page.index("<h2>Node 0</h2>") : page.index("<h2>Node 1</h2>")]
    node1 = page[page.index("<h2>Node 1</h2>") :]
    # Each node's disk.in rate (MiB) is its own (100 and 200 MiB/s), never a mix.
    assert "<td>disk.in</td><td>MiB/s</td><td>100</td><td>100</td><td>100</td>" in node0
    assert "<td>disk.in</td><td>MiB/s</td><td>200</td><td>200</td><td>200</td>" in node1
    assert "training finished after 6.0 s" in node0 and "training finished after 6.0 s" in node1
    assert any(p.endswith("node-0-cpu.png") for p in written)
    assert any(p.endswith("node-1-cpu.png") for p in written)


def test_multi_node_sink_tags_every_sample_with_its_node(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    m = SystemMonitor(interval=0.02)
    sink = JsonlSink(m, path, node=3, multi_node=True)
    m.start()
    time.sleep(0.1)
    m.stop()
    sink.close()
    got = lines(path)
    assert got[0]["run"]["node"] == 3 and got[-1]["end"]["node"] == 3
    assert all(x["node"] == 3 for x in got[1:-1]) and len(got) > 3
    assert read_run(path).node == [3] * (len(got) - 2)


def test_bad_marker_arguments_are_clear_errors(tmp_path: Path) -> None:
    m = SystemMonitor(interval=0.1)
    try:
        with pytest.raises(TypeError, match="command='ls' is invalid"):
            JsonlSink(m, tmp_path / "a", command="ls")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="node=-1 is invalid"):
            JsonlSink(m, tmp_path / "a", node=-1)
    finally:
        m.stop()


_MARKER = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.one_of(
    st.builds(lambda v: {"run": v}, _MARKER),
    st.builds(lambda v: {"end": v}, _MARKER),
    st.builds(lambda n, v: {"metrics": {"cpu": 1.0}, "node": n, "time": v},
              st.one_of(st.integers(-3, 3), _MARKER), _MARKER),
), max_size=12))  # fmt: skip
def test_markers_never_break_the_reader_or_the_page(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    from sysmetrics import report

    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    run = read_run(path)
    assert len(run) == sum("metrics" in r for r in records)
    assert all(-1 <= r < len(run.recordings) for r in run.recording)
    page = report.render(run, "t", {})
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>")


def test_field_values_are_bounded(tmp_path: Path) -> None:
    path = write(tmp_path / "run.jsonl", [
        {"run": {"command": ["x" * 10_000], "host": "<b>" * 5000, "node": 2**80,
                 "nested": {"a": 1}, "start": 1e300}},
        {"time": 1.0, "monotonic": 1.0, "step": 0, "metrics": {"cpu": 1.0}},
    ])  # fmt: skip
    (rec,) = read_run(path).recordings
    assert len(rec.run["command"][0]) == runfile.MAX_FIELD_CHARS
    assert len(rec.run["host"]) == runfile.MAX_FIELD_CHARS
    assert "nested" not in rec.run and rec.node is None  # 2**80 is no node


# -- several files, one per node (issue 26) -------------------------------------------


def test_per_node_files_of_the_callbacks_keep_their_nodes(tmp_path: Path) -> None:
    """The callbacks' ``system_metrics.node{k}.jsonl`` (their samples say their node) read
    as one run of those nodes, as if they had appended to one file."""
    a = write(tmp_path / "system_metrics.node1.jsonl", node_lines(1, 90.0, 0.0))
    b = write(tmp_path / "system_metrics.node0.jsonl", node_lines(0, 10.0, 0.3))
    run = runfile.read_runs([a, b])
    assert run.nodes == [1, 0] and run.files == {1: str(a), 0: str(b)}
    assert len(run) == 12 and [r.node for r in run.recordings] == [1, 0]
    assert [r.first for r in run.recordings] == [0, 6]
    assert run.recording == [0] * 6 + [1] * 6
    parts = dict(run.by_node())
    assert set(parts[1].columns["cpu"]) == {90.0} and set(parts[0].columns["cpu"]) == {10.0}
    assert [r.end and r.end["status"] for r in parts[0].recordings] == ["finished"]


def test_files_that_name_the_same_node_are_numbered_in_order(tmp_path: Path) -> None:
    """``sysmetrics record`` on each node names node 0 in every file: each file is a node,
    the first given node 0; a key only one file has is NaN in the other's samples."""
    first = node_lines(0, 10.0, 0.0)
    second = node_lines(0, 90.0, 0.5)
    second[0]["run"]["pid"] = 99
    for sample in second[1:-1]:
        sample["metrics"]["gpu.0.gpu"] = 50.0
    run = runfile.read_runs(
        [write(tmp_path / "b.jsonl", first), write(tmp_path / "a.jsonl", second)]
    )
    assert run.nodes == [0, 1]
    assert run.files == {0: str(tmp_path / "b.jsonl"), 1: str(tmp_path / "a.jsonl")}
    assert [r.node for r in run.recordings] == [0, 1]
    gpu = list(run.columns["gpu.0.gpu"])
    assert all(v != v for v in gpu[:6]) and gpu[6:] == [50.0] * 6
    assert runfile.read_runs([tmp_path / "b.jsonl"]).nodes == [0]  # one file: as read_run


def test_files_that_are_not_the_nodes_of_one_run_are_refused(tmp_path: Path) -> None:
    shared = write(tmp_path / "shared.jsonl", node_lines(0, 1.0, 0.0) + node_lines(1, 2.0, 0.0))
    other = node_lines(0, 3.0, 0.0)
    other[0]["run"]["pid"] = 77
    alone = write(tmp_path / "alone.jsonl", other)
    with pytest.raises(
        ValueError, match=r"shared\.jsonl holds several nodes, and the files' nodes"
    ):
        runfile.read_runs([shared, alone])
    late = node_lines(2, 3.0, 3600.0)
    later = write(tmp_path / "later.jsonl", late)
    with pytest.raises(ValueError, match="do not overlap in time: they are not the nodes of one"):
        runfile.read_runs([alone, later])
    with pytest.raises(ValueError, match=r"alone\.jsonl is given twice"):
        runfile.read_runs([alone, tmp_path / "." / "alone.jsonl"])


SPIN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"


def test_two_real_recordings_make_one_report_of_two_nodes(tmp_path: Path) -> None:
    """Two ``sysmetrics record`` runs at once (two nodes of one job, simulated): one spins
    a CPU, the other sleeps. One report, a section each, each node's own numbers."""
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    codes = ((a, SPIN.format(s=1.5)), (b, "import time; time.sleep(1.5)"))
    cmds = [[sys.executable, "-m", "sysmetrics", "record", "--output", str(path), "--interval",
             "0.1", "--", sys.executable, "-c", code] for path, code in codes]  # fmt: skip
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds]
    for proc in procs:
        assert proc.wait(timeout=60) == 0, proc.stderr and proc.stderr.read()
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()
    run = runfile.read_runs([a, b])
    assert run.nodes == [0, 1]  # both files say node 0: numbered in the order given
    cpu = {}  # each node's own tree's CPU, its mean after the command's start-up
    for k, part in run.by_node():
        held = [v for v in part.columns["cpu"] if v == v][3:]
        cpu[k] = sum(held) / len(held)
    assert cpu[0] > 3 * cpu[1] and cpu[1] < 15, cpu  # one spun (~50 % of 2 CPUs), one slept
    out = tmp_path / "page.html"
    cmd = [sys.executable, "-m", "sysmetrics", "report", str(a), str(b), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "Samples of 2 nodes (node 0 (a.jsonl), node 1 (b.jsonl))" in page
    assert page.count("the command exited with status 0") == 2


_LINE = st.one_of(
    st.builds(lambda n, t: {"run": {"node": n, "start": t, "pid": 1}},
              st.one_of(st.none(), st.integers(0, 3)), st.floats(0, 10)),
    st.builds(lambda n: {"end": {"node": n}}, st.one_of(st.none(), st.integers(0, 3))),
    st.builds(lambda n, t, s: {"metrics": {"cpu": 1.0}, "node": n, "time": t, "step": s},
              st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.floats(0, 10)),
              st.one_of(st.none(), st.integers(0, 5))),
)  # fmt: skip


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(_LINE, max_size=8), min_size=1, max_size=3))
def test_any_files_read_as_one_run_or_a_clear_refusal(
    tmp_path: Path, files: list[list[dict[str, Any]]]
) -> None:
    """Any run files: one run holding every sample of every file, each sample of one node
    and its recording's index in range, or a ValueError naming why; nothing else."""
    paths = [write(tmp_path / f"f{n}.jsonl", lines) for n, lines in enumerate(files)]
    try:
        run = runfile.read_runs(paths)
    except ValueError as exc:
        assert any(p.name in str(exc) for p in paths), exc  # names the file
        return
    assert len(run) == sum(len(read_run(p)) for p in paths)
    assert sum(len(part) for _, part in run.by_node()) == len(run)
    assert all(-1 <= r < len(run.recordings) for r in run.recording)
    assert all(len(c) == len(run) for c in run.columns.values())


_VALUE = st.one_of(
    st.booleans(), st.none(), st.floats(), st.integers(-(2**70), 2**70), st.text(max_size=3)
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.dictionaries(st.sampled_from(["cpu", "true", "false", "gpu.0.gpu"]), _VALUE,
                                max_size=4), max_size=12))  # fmt: skip
def test_the_block_reader_keeps_what_add_keeps(
    tmp_path: Path, samples: list[dict[str, Any]]
) -> None:
    """Lines of all-number values are read in blocks (``_fast_sample``): the columns are
    still :meth:`Run.add`'s, value for value (bools, which ``array`` would take as numbers,
    strings, None, inf, NaN and integers past a float dropped; keys named ``true`` kept)."""
    path = tmp_path / "run.jsonl"
    with path.open("w") as f:
        for n, m in enumerate(samples):
            f.write(json.dumps({"time": 1e9 + n, "step": n, "metrics": m}) + "\n")
    run = read_run(path)
    model = runfile.Run()
    for n, m in enumerate(samples):
        model.add(m, 1e9 + n, None, n)
    model.pad()
    assert len(run) == len(model) and sorted(run.columns) == sorted(model.columns)
    for key in model.columns:
        got, want = run.columns[key].tolist(), model.columns[key].tolist()
        assert [v if v == v else None for v in got] == [v if v == v else None for v in want]


def test_columns_full_says_whether_every_sample_has_the_key() -> None:
    """``Columns.full`` (used by the findings to skip value-by-value loops): True only where
    every sample has a value; a NaN of any bit pattern, padding or a short column is not."""
    from array import array

    nan = float("nan")
    other_nan = array("d", array("Q", [0xFFF8000000000001]).tobytes())[0]
    assert other_nan != other_nan
    columns = runfile.Columns(4)
    columns["full"] = array("d", [1.0, 2.0, 3.0, 4.0])
    columns["hole"] = array("d", [1.0, nan, 3.0, 4.0])
    columns["odd"] = array("d", [1.0, other_nan, 3.0, 4.0])
    columns["inf"] = array("d", [1.0, float("inf"), 3.0, 4.0])
    columns["sparse"] = array("d", [nan, nan, nan, 4.0])
    assert columns.full("full") and columns.full("inf")
    assert not any(columns.full(k) for k in ("hole", "odd", "sparse", "unknown"))
    columns.length = 5  # a sample more, which no key has yet
    assert not columns.full("full")


def test_a_second_pad_with_nothing_added_changes_nothing_and_a_set_column_is_stored_again() -> None:
    """``Columns.finish`` (``Run.pad``) skips its pass where no sample was added and no
    column set since the last (the report pads on reading and in the findings); a column
    set since, or a sample added, is stored by its density again."""
    from array import array

    nan = float("nan")
    run = runfile.Run()
    for n in range(10):
        run.add({"cpu": float(n)} if n < 8 else {"cpu": float(n), "late": 1.0})
    run.pad()
    assert isinstance(run.columns._data["late"], tuple)  # 2 of 10: sparse
    run.pad()
    assert run.columns["cpu"].tolist() == [float(n) for n in range(10)]
    run.columns["late"] = array("d", [1.0] * 9 + [nan])  # set since: dense now
    assert not isinstance(run.columns._data["late"], tuple)
    run.add({"cpu": 10.0})  # a sample added: padded at the next pad
    run.pad()
    assert len(run.columns["late"]) == 11 and run.columns.full("cpu")
    assert not run.columns.full("late")
