"""How each key is averaged over a window, declared once (issue 31, item 2).

``Description.weight`` says whether a key's samples count once each, by the steps they
stand for, or by those steps' seconds; the monitor's readers, the report's table and the
findings all average by it, so the page's table and its findings say one number.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sysmetrics import runfile
from sysmetrics.runfile import Run

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, locks files")

SHORT = (0.010, 0.002)  # s: a short step's fetch and work: 83 % waiting, well under a tick
LONG = (0.12, 0.18)  # s: a long step's fetch and work: 40 % waiting, three ticks
PAUSE = 0.25  # s: between loops, no step's time (a "validation")
LOOP = f"""
import time, warnings
import numpy as np
import sysmetrics
warnings.simplefilter("error")

def data(fetch):
    time.sleep(fetch)
    yield np.zeros((8, 3))

i = 0
for epoch in range(8):
    for fetch, work in ({SHORT}, {LONG}):
        for batch in sysmetrics.batches(data(fetch)):
            time.sleep(work)
            i += 1
            sysmetrics.step(i)
        time.sleep({PAUSE})
"""


def record(tmp_path: Path) -> Path:
    run = tmp_path / "run.jsonl"
    cmd = [sys.executable, "-m", "sysmetrics", "record", "-o", str(run), "--interval", "0.1"]
    done = subprocess.run(
        [*cmd, "--", sys.executable, "-c", LOOP],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return run


def test_the_table_and_the_input_bound_finding_say_one_data_wait(tmp_path: Path) -> None:
    """A real recorded loop whose short, wait-heavy steps each take a fraction of a tick
    and whose long steps take three: by sampling interval the short steps count about
    three times what their seconds do, so the interval-weighted mean is ~9 points above
    the step-time-weighted one. ``report --json``'s table and the ``input-bound``
    finding's evidence (its stretch is the whole run: every sample waits > 30 %) must
    give the same mean, the one the monitor's readers give: by the steps' seconds.

    Regression (issue 31): the table said the step-time mean, the finding the
    interval-weighted one."""
    run = record(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "sysmetrics", "report", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (node,) = doc["nodes"]
    (row,) = [r for r in node["keys"] if r["key"] == "step.dataWaitPercent"]
    (found,) = [f for f in doc["findings"] if f["rule"] == "input-bound"]
    assert found["evidence"]["share"] == pytest.approx(1.0)  # the whole run's steps
    # What the steps were: between the long steps' 40 % and the short ones' 83 %.
    r = runfile.read_run(run)
    waits = [v for v in r.columns["step.dataWaitPercent"] if not math.isnan(v)]
    assert min(waits) > 30.0
    assert found["evidence"]["wait_percent"] == pytest.approx(row["mean"], rel=1e-9)


def test_a_live_finding_says_the_readers_data_wait(tmp_path: Path) -> None:
    """A real monitor whose step clock closes one 0.3 s step (40 % waiting) at one sample
    and five 0.06 s steps (80 % waiting) at the next, eight times over: the readers'
    window weighs both samples alike (0.3 s of steps each): 60 %. Live findings over the
    same monitor must say 60 %, not 47 % (the five steps' sample weighed as one step).

    Regression (issue 31): live findings weighed a sample by the longer of the sampling
    interval and one ``step.seconds``, whatever the steps it closed."""
    from sysmetrics.live_findings import LiveFindings
    from sysmetrics.monitor import SystemMonitor
    from sysmetrics.steptime import StepClock

    t = [0.0]
    clock = StepClock(lambda: t[0])
    lines: list[str] = []
    with SystemMonitor(interval=3600, collectors=[]) as m:
        m.step_timing = clock.read
        window = m.reader()
        live = LiveFindings(m, lines.append, every=3600, first=3600)  # evaluated at close
        clock.restart()
        m.step = 0
        m._sample_once()  # the baseline
        for _ in range(8):
            for steps, seconds, wait in ((1, 0.3, 0.4), (5, 0.06, 0.8)):
                for _ in range(steps):
                    t[0] += seconds * wait
                    clock.waited(seconds * wait)
                    t[0] += seconds * (1 - wait)
                    clock.end(samples=8)
                    m.step += 1
                m._sample_once()
        got = window.snapshot()
        live.close()
    assert got["step.dataWaitPercent"] == pytest.approx(60.0)
    said = [line for line in lines if "waiting for data" in line]
    assert len(said) == 1, lines
    assert " spent 60 % of their time waiting for data" in said[0], said


def test_the_step_collector_weighs_each_key_as_its_description_says() -> None:
    """Two steps of 0.05 s closed between samples: the keys of ``steps`` weight count 2,
    those of ``step_seconds`` 0.1 s, as declared in descriptions.py (no second list)."""
    from sysmetrics.descriptions import DESCRIPTIONS, weight
    from sysmetrics.steptime import StepClock, StepCollector

    t = [0.0]
    clock = StepClock(lambda: t[0])
    steps = StepCollector(lambda: clock.read)
    clock.restart()
    steps.sample()
    for _ in range(2):
        t[0] += 0.01
        clock.waited(0.01)
        t[0] += 0.04
        clock.end(samples=8)
    out = steps.sample()
    # step.maxSeconds: the longest of the two (a clock of this process keeps it)
    assert set(out) == {
        "step.seconds",
        "step.dataWaitPercent",
        "step.samplesPerSecond",
        "step.maxSeconds",
    }
    by = {"steps": 2.0, "step_seconds": 0.1, "sample": 1.0}
    assert steps.weights == {k: pytest.approx(by[weight(k)]) for k in out}
    declared = {d.key: d.weight for d in DESCRIPTIONS if d.key.startswith("step.")}
    assert declared == {
        "step.seconds": "steps",
        "step.dataWaitPercent": "step_seconds",
        "step.samplesPerSecond": "step_seconds",
        "step.energyJoules": "steps",
        "step.maxSeconds": "sample",
        "step.slowPercent": "steps",
        "step.overheadPercent": "step_seconds",
        # the node's ranks (sysmetrics.arrival): a max or a spread over them per window
        "step.rankMaxSeconds": "sample",
        "step.maxDataWaitPercent": "sample",
        "step.arrivalSpreadSeconds": "sample",
    }
    assert {weight("cpu"), weight("step.seconds.max"), weight("no.such.key")} == {"sample"}


def crafted(steps: list[int | None], per_step: list[float], nodes: list[int | None]) -> Run:
    from array import array

    run = Run()
    for j, s in enumerate(steps):
        run.time.append(1.7e9 + j)
        run.monotonic.append(float(j))
        run.step.append(s)
        run.steps.append(None)  # as a file written before lines said their steps
        run.node.append(nodes[j])
        run.recording.append(0)
    nan = float("nan")
    run.columns = {
        "step.seconds": array("d", per_step),
        "step.dataWaitPercent": array(
            "d", [nan if v != v else 10.0 * j for j, v in enumerate(per_step)]
        ),
    }
    return run


def test_sample_weights_from_the_step_marks_of_each_node() -> None:
    """Steps since the previous sample with step keys, per node (samples interleave);
    the first from the mark before it; the median where no mark says."""
    from sysmetrics.weights import sample_weights, weighted_mean

    nan = float("nan")
    #          node 0 baseline, node 1 (no mark), node 0: +2, node 1: ?, node 0: +1, node 1: +3
    run = crafted([0, None, 2, 5, 3, 8], [nan, nan, 0.5, 1.0, 0.5, 1.0], [0, 1, 0, 1, 0, 1])
    steps = sample_weights(run, "steps")
    assert all(math.isnan(s) for s in steps[:2])  # no step closed there
    assert steps[2:] == [2.0, 2.0, 1.0, 3.0]  # node 1's first: the median of 2, 1, 3
    assert sample_weights(run, "step_seconds")[2:] == [1.0, 2.0, 0.5, 3.0]
    assert sample_weights(run, "sample") == [1.0] * 6
    # step.dataWaitPercent is 20, 30, 40, 50 at those samples, weighted by seconds:
    assert weighted_mean(run, "step.dataWaitPercent") == pytest.approx(
        (20 * 1.0 + 30 * 2.0 + 40 * 0.5 + 50 * 3.0) / 6.5
    )
    assert weighted_mean(run, "step.dataWaitPercent", [2, 4]) == pytest.approx(
        (20 * 1.0 + 40 * 0.5) / 1.5
    )
    assert math.isnan(weighted_mean(run, "cpu"))  # no such key
    del run.columns["step.seconds"]  # nothing says the steps: each sample once
    assert weighted_mean(run, "step.dataWaitPercent") == pytest.approx(35.0)


def test_a_run_file_weighs_each_sample_by_the_steps_its_clock_closed(tmp_path: Path) -> None:
    """Regression: a run file's step keys were weighed by the growth of the samples' step
    marks, which name the step being trained while the clock counts the steps ended. A
    sample taken between two slow steps had marks that did not move though a step had
    ended, and was weighed as the median window (a CI run's report said 0.0185 s a step
    for the clock's 0.0140). A real monitor, step clock and run file, sampled by hand at
    the moments that mislead the marks (the clock's time is the test's): 8 steps of
    10 ms, then 12 of 100 ms, each followed by 50 ms of waiting for data, every other
    one sampled during it and after it (one step ended in each window; the marks grew
    by 2, then by 0). The report's mean is the clock's."""
    from sysmetrics import SystemMonitor, report
    from sysmetrics.runfile import read_run
    from sysmetrics.sinks.jsonl import JsonlSink
    from sysmetrics.steptime import StepClock
    from sysmetrics.weights import sample_weights

    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    t = [0.0]
    clock = StepClock(lambda: t[0])
    monitor = SystemMonitor(interval=3600, collectors=[])
    monitor.step_timing = clock.read
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(monitor, path)
    try:
        monitor.step = 0
        clock.restart()
        monitor._sample_once()  # the baseline
        for n in range(8):
            clock.begin()
            monitor.step = n
            t[0] += 0.010
            clock.end()
        for n in range(8, 20):
            clock.begin()
            monitor.step = n
            if n % 2 == 0:
                monitor._sample_once()  # in the step: the mark is n, n steps ended
            t[0] += 0.100
            clock.end()
            if n % 2 == 0:
                monitor._sample_once()  # after it: the mark is still n, n + 1 steps ended
            t[0] += 0.050  # the next batch's fetch
        clock.begin()
        monitor.step = 20
        monitor._sample_once()
    finally:
        sink.close()
        monitor.stop()
    truth = clock.read()
    assert truth.steps == 20
    run = read_run(path)
    closed = [s for s in run.steps if s is not None]
    assert sum(closed) == 20 and closed[0] == 8, run.steps  # every line that closed steps
    weights = sample_weights(run, "steps")
    assert [w for w in weights if w == w] == closed
    rows = {r.label: r for r in report.summary(report.series(run))}
    assert rows["step.seconds"].mean == pytest.approx(truth.seconds / truth.steps)
    # A file written before the lines said their steps is still read, by the marks.
    old = tmp_path / "old.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    old.write_text("".join(json.dumps({k: v for k, v in x.items() if k != "steps"}) + "\n"
                           for x in lines))  # fmt: skip
    assert all(s is None for s in read_run(old).steps)
    assert sum(w for w in sample_weights(read_run(old), "steps") if w == w) > 0
