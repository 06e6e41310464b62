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
    from sysmetrics.announce import LiveFindings
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
