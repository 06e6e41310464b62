"""``sysmetrics report`` never drops data silently, and its memory follows the file's size.

Real run files (a file over a million lines, keys that come and go) read by the real
reader and the real ``sysmetrics report`` command.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import runfile
from sysmetrics.runfile import read_run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux file semantics")


def sparse_file(path: Path, samples: int, keys: int, window: int = 5) -> Path:
    """``samples`` lines; key ``k`` in the ``window`` samples from ``k * samples // keys``."""
    with open(path, "w") as f:
        for n in range(samples):
            first, last = (n - window + 1) * keys // samples, n * keys // samples
            m = {f"proc.child.{k}.cpu": float(k) for k in range(max(first, 0), last + 1)}
            m["cpu"] = 50.0
            record = {"time": 1e9 + n, "monotonic": float(n), "step": n, "metrics": m}
            f.write(json.dumps(record) + "\n")
    return path


def test_keys_that_come_and_go_are_not_stored_keys_x_samples(tmp_path: Path) -> None:
    """Regression: 2,000 keys in 5 of 5,000 samples each took 80 MB (keys x samples x 8)."""
    path = sparse_file(tmp_path / "sparse.jsonl", 5000, 2000)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        run = read_run(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(run.columns) == 2001
    assert peak < 3 * size, (peak, size)  # dense: 2,001 x 5,000 x 8 = 80 MB
    column = run.columns["proc.child.7.cpu"]  # still reads as a full column
    assert len(column) == 5000 and run.present("proc.child.7.cpu") == [
        j for j, v in enumerate(column) if v == v
    ]


def test_the_report_of_keys_that_come_and_go_holds_no_dense_series(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    from sysmetrics import report

    path = sparse_file(tmp_path / "sparse.jsonl", 5000, 2000)
    run = read_run(path)
    tracemalloc.start()
    try:
        all_series = report.series(run)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(all_series) == 2001
    assert held < 3 * path.stat().st_size, held  # dense: 80 MB


def test_a_file_over_a_million_lines_is_read_whole(tmp_path: Path) -> None:
    """Regression: the reader stopped at line 1,000,000 without a word."""
    path = tmp_path / "long.jsonl"
    line = b'{"time":1,"metrics":{"cpu":1}}\n'
    with open(path, "wb") as f:
        f.write(line * 1_000_000)
        f.write(b'{"run":{"node":0,"pid":2}}\n{"time":2,"metrics":{"cpu":2}}\n')
    run = read_run(path)
    assert len(run) == 1_000_001 and run.columns["cpu"][-1] == 2.0
    assert [r.run["pid"] for r in run.recordings] == [2] and run.left_out == []


def test_what_is_left_out_is_said_on_stderr_and_on_the_page(tmp_path: Path) -> None:
    """Over the memory budget (made small here) the reader stops, and says what it left."""
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    path = tmp_path / "run.jsonl"
    lines = []
    for r, start in enumerate((1_800_000_000, 1_800_001_000, 1_800_002_000)):
        lines.append(runfile.run_line(node=0, pid=r, start=float(start)))
        lines += [runfile.sample_line(start + n, n, n, {"cpu": 1.0}) for n in range(100)]
        lines.append(runfile.end_line(node=0, exit_status=r))
    path.write_bytes(b"".join(lines))
    budget = 150 * (runfile.SAMPLE_BYTES + runfile.VALUE_BYTES)  # 150 samples of one key
    code = (
        "import sys; from sysmetrics import runfile; "
        f"runfile.MAX_MEMORY = {budget}; "
        "from sysmetrics.cli import main; sys.exit(main())"
    )
    out = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-c", code, "report", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = "left out: lines 154 to 306 (the end)"  # the 51st sample of the 2nd recording on
    assert said in done.stderr, done.stderr
    assert "the rest of recording 2 and 1 more recording" in done.stderr, done.stderr
    assert "samples from 2027-01-15 08:17:30 to 2027-01-15 08:34:59 UTC" in done.stderr
    page = out.read_text()
    assert said in page and "the rest of recording 2 and 1 more recording" in page


def test_past_max_recordings_the_reader_stops_and_never_merges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: run lines past MAX_RECORDINGS were ignored, so their samples joined the last."""
    monkeypatch.setattr(runfile, "MAX_RECORDINGS", 2)
    path = tmp_path / "run.jsonl"
    lines = []
    for r in range(3):
        lines.append(runfile.run_line(node=0, pid=r, start=1e9 + 100 * r))
        lines += [runfile.sample_line(1e9 + 100 * r + n, n, n, {"cpu": float(r)}) for n in range(3)]
    path.write_bytes(b"".join(lines))
    run = read_run(path)
    assert [r.run["pid"] for r in run.recordings] == [0, 1]
    assert list(run.columns["cpu"]) == [0.0] * 3 + [1.0] * 3  # nothing of the third
    (said,) = run.left_out
    assert "left out: lines 9 to 12 (the end), not read after 2 recordings (MAX_RECORDINGS)" in said
    assert "1 more recording: samples from 2001-09-09 01:50:00 to 2001-09-09 01:50:02 UTC" in said


def test_keys_past_the_summary_tables_rows_are_said(tmp_path: Path) -> None:
    """Regression: the table stopped at MAX_ROWS rows without a word."""
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    from sysmetrics import report
    from sysmetrics.report.data import MAX_ROWS

    path = tmp_path / "run.jsonl"
    keys = {f"custom.k{i:04d}": float(i) for i in range(MAX_ROWS + 10)}
    path.write_bytes(b"".join(runfile.sample_line(1e9 + n, n, n, keys) for n in range(5)))
    out = tmp_path / "page.html"
    report.write_report(path, out)
    page = out.read_text()
    assert f"10 more keys are not in the table (at most {MAX_ROWS} rows, MAX_ROWS)" in page
    assert "custom.k0500 to custom.k0509." in page


def test_json_says_what_the_reader_left_out(tmp_path: Path) -> None:
    """``--json`` carries ``left_out`` (the reader's sentences, as on stderr): a script
    reading only the document learns of the lines skipped and keys dropped too."""
    path = tmp_path / "run.jsonl"
    lines = [runfile.run_line(node=0, pid=1, start=1_800_000_000.0)]
    lines += [runfile.sample_line(1_800_000_000 + n, n, n, {"cpu": 1.0}) for n in range(20)]
    lines.insert(5, b"not json at all\n")
    path.write_bytes(b"".join(lines))
    done = subprocess.run(
        [sys.executable, "-m", "sysmetrics", "report", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    said = f"{path}: 1 lines that are no run-file record (cut short, or not JSON) were skipped"
    assert doc["left_out"] == [said]
    assert said in done.stderr
    clean = tmp_path / "clean.jsonl"
    clean.write_bytes(b"".join(lines[:5] + lines[6:]))
    done = subprocess.run(
        [sys.executable, "-m", "sysmetrics", "report", str(clean), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["left_out"] == []


def test_the_findings_make_no_full_column_of_each_sparse_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30, item 4 (b): the findings looped over ``run.columns.items()``, which makes
    each sparse key's full column (samples x 8 bytes, one Python loop over its values) for
    rules that look at a few families only: a day of 10,000 keys that come and go spent
    1.8 s there. Now a key's column is made only where a rule uses it."""
    from sysmetrics.findings import findings

    run = read_run(sparse_file(tmp_path / "run.jsonl", 4000, 2000))
    made: list[str] = []
    real = runfile.Columns.__getitem__

    def counted(self: runfile.Columns, key: str) -> Any:
        if isinstance(self._data.get(key), tuple):
            made.append(key)
        return real(self, key)

    monkeypatch.setattr(runfile.Columns, "__getitem__", counted)
    findings(run)
    assert sum(isinstance(v, tuple) for v in run.columns._data.values()) == 2000
    assert len(made) <= 10, f"{len(made)} sparse columns made, e.g. {made[:3]}"
