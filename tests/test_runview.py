"""One view of a run (issue 31): the page, ``--json`` and the findings read the same facts.

Regression tests through the real path: a run recorded by ``sysmetrics record`` (or
written line by line with the run file's own writers), read back, reported with
``sysmetrics report --json`` and judged by :func:`sysmetrics.findings.findings`; they
must say the same stalls and the same averages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import runfile
from sysmetrics.findings import findings, read_run

pytest.importorskip("numpy", reason="the report needs the [report] extra")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sysmetrics", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def report_json(path: Path) -> dict[str, Any]:
    done = cli("report", str(path), "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def page_stalls(doc: dict[str, Any]) -> list[int]:
    """The steps of the stalls the page states and draws (``--json`` says them)."""
    return sorted(stall["step"] for node in doc["nodes"] for stall in node["stalls"])


def finding_stalls(doc: dict[str, Any]) -> list[int]:
    """The steps of the ``stall`` findings in the same document."""
    return sorted(int(f["subject"]["id"]) for f in doc["findings"] if f["rule"] == "stall")


def test_a_10_s_hold_is_a_stall_on_the_page_and_in_the_findings(tmp_path: Path) -> None:
    """Regression (issue 31): the page drew and stated a 10 s hold (from the sample where
    step 10 was first seen to the one where step 11 was) that the findings did not call a
    stall (they measured to the last sample with step 10: 9 s). One detector now."""
    path = tmp_path / "run.jsonl"
    start = 1.7e9
    with path.open("wb") as f:
        f.write(runfile.run_line(command=None, host="h", node=0, pid=1, start=start,
                                 interval=1.0, cpus=2, version="t"))  # fmt: skip
        step = 0
        for t in range(41):  # one sample a second; step 10 for 10 s (t = 10..19)
            step = t if t <= 10 else t - 9 if t >= 20 else 10
            f.write(runfile.sample_line(start + t, 100.0 + t, step, {"cpu": 50.0}))
        f.write(runfile.end_line(seconds=40.0, node=0, samples=41, dropped=0, exit_status=0))
    doc = report_json(path)
    assert page_stalls(doc) == [10]
    assert finding_stalls(doc) == page_stalls(doc)
    assert finding_stalls(doc) == [
        int(f.subject.id) for f in findings(read_run(path)) if f.subject and f.rule == "stall"
    ]


SHORT_HOLD = """
import time, sysmetrics
t, i = time.monotonic(), 0
while time.monotonic() - t < 1.5:  # steps for 1.5 s ...
    i += 1
    sysmetrics.step(i)
    time.sleep(0.02)
time.sleep(6)  # ... none for 6 s ...
for _ in range(40):  # ... then steps again for about 1 s
    i += 1
    sysmetrics.step(i)
    time.sleep(0.02)
"""


@pytest.mark.long
def test_a_6_s_stall_finding_is_on_the_page_too(tmp_path: Path) -> None:
    """Regression (issue 31): ``record`` of a loop that stops stepping for 6 s of its
    ~9 s: the findings called it a stall (over half the run), the page said nothing
    and drew nothing (it knew only the 10 s threshold)."""
    path = tmp_path / "run.jsonl"
    done = cli("record", "--output", str(path), "--interval", "0.25", "--", sys.executable,
               "-c", SHORT_HOLD)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = report_json(path)
    assert finding_stalls(doc), doc["findings"]  # the findings call it a stall ...
    assert page_stalls(doc) == finding_stalls(doc)  # ... and the page draws and says it
    (said,) = doc["nodes"][0]["stalls"]
    (found,) = [f for f in doc["findings"] if f["rule"] == "stall"]
    # The page's seconds run to the next step's first sample, the finding's to the
    # step's last sample: at most one interval apart, never the other way round.
    assert 0 <= said["seconds"] - found["evidence"]["seconds"] <= 0.25 + 0.1


def two_nodes(tmp_path: Path) -> list[Path]:
    """Two nodes' run files of one run (``sysmetrics record`` on each names node 0)."""
    paths = []
    start = 1.7e9
    for k in range(2):
        path = tmp_path / f"node{k}.jsonl"
        with path.open("wb") as f:
            f.write(runfile.run_line(command=None, host=f"h{k}", node=0, pid=1, start=start,
                                     interval=0.5, cpus=2, version="t"))  # fmt: skip
            for n in range(40):
                metrics = {"cpu": 50.0 + k, "step.seconds": 0.5, "step.dataWaitPercent": 10.0}
                f.write(runfile.sample_line(start + n * 0.5, n * 0.5, n, metrics))
        paths.append(path)
    return paths


def test_a_two_node_report_makes_each_nodes_series_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 31): a two-node ``report --json -o`` ran ``series`` 8 times (the
    whole run, each node for the page, for the figures and for the JSON, the nodes'
    speed) and the per-node rules twice. The page's model makes each once per node."""
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    from sysmetrics import findings as fd
    from sysmetrics import report
    from sysmetrics.report import data

    made: list[int] = []
    real_series = data.series

    def counted(run: runfile.Run, *args: Any) -> Any:
        made.append(len(run))
        return real_series(run, *args)

    ran: list[str] = []

    def counting(rule: Any) -> Any:
        check = rule.check

        def run_it(run: runfile.Run, t: Any) -> Any:
            ran.append(rule.code)
            return check(run, t)

        return run_it

    for module in list(sys.modules.values()):  # wherever the report reaches it by name
        name = getattr(module, "__name__", "")
        if name.startswith("sysmetrics.report") and getattr(module, "series", None) is real_series:
            monkeypatch.setattr(module, "series", counted)
    for name in ("RULES", "NODE_RULES"):  # what findings() and across_findings() run
        rules = tuple(replace(r, check=counting(r)) for r in getattr(fd, name))
        monkeypatch.setattr(fd, name, rules)
    paths = two_nodes(tmp_path)
    text, written = report.json_report(paths, tmp_path / "page.html")
    doc = json.loads(text)
    assert [n["node"] for n in doc["nodes"]] == [0, 1]
    assert written == [str(tmp_path / "page.html")]
    assert made == [40, 40]  # once per node
    for rule in fd.REGISTRY:  # each rule once per node, the cross-node ones once
        assert ran.count(rule.code) == (1 if rule.scope == "run" else 2), (rule.code, ran)


WAITING = """
import time, sysmetrics
def loader(n):
    for _ in range(n):
        time.sleep(0.06)  # the loop waits for each batch ...
        yield 0
i = 0
for epoch in range(2):
    for batch in sysmetrics.batches(loader(25)):
        time.sleep(0.02)  # ... longer than it computes
        i += 1
        sysmetrics.step(i)
    time.sleep(1.0)  # between epochs: outside any step, no waiting for data
"""


def test_the_table_and_the_finding_say_one_data_wait(tmp_path: Path) -> None:
    """Regression (issue 31): one page said ``step.dataWaitPercent`` 37.5 % in its table
    (weighted by the steps' seconds, as the readers weigh it) and 75 % in its finding
    (weighted by the sampling interval: the pause between epochs counted as waiting).
    Both read the key's declared weight now (:func:`sysmetrics.weights.weighted_mean`)."""
    path = tmp_path / "run.jsonl"
    done = cli("record", "--output", str(path), "--interval", "0.25", "--", sys.executable,
               "-c", WAITING)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = report_json(path)
    (row,) = [k for n in doc["nodes"] for k in n["keys"] if k["key"] == "step.dataWaitPercent"]
    (found,) = [f for f in doc["findings"] if f["rule"] == "input-bound"]
    assert found["evidence"]["wait_percent"] == pytest.approx(row["mean"], rel=1e-9)
    assert 50 <= row["mean"] <= 90  # 60 ms of every 80 ms, the pauses not counted
