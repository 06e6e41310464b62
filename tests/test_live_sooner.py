"""Findings told live sooner, without crying wolf (issue 32 item 6).

The first evaluation comes once the samples hold enough evidence (``LIVE_MIN_STEPS``
steps over ``LIVE_MIN_SECONDS`` s), not at a fixed 20 s; later ones at a cadence that
keeps their cost small; and nothing said live is contradicted by the final findings.
The live findings are driven here at the samples' own clock (``_tick``), as the thread
drives them at the wall clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from sysmetrics import findings, live_findings
from sysmetrics.findings import read_run
from sysmetrics.findings.registry import REGISTRY, example_path
from sysmetrics.live_findings import LiveFindings
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Sample
from sysmetrics.runfile import Run

from .test_live_findings import FedReader, Script

DOCS = Path(__file__).resolve().parents[1] / "docs"
RECORDED = Path(__file__).resolve().parent / "fixtures" / "runs"  # suite scenarios' runs


def live(lines: list[str], start: float) -> tuple[LiveFindings, FedReader]:
    """A LiveFindings at its defaults (its thread not started) over a fed reader."""
    with SystemMonitor(interval=1.0, collectors=[Script({})]) as m:
        told = LiveFindings(m, lines.append)
    reader = FedReader()
    told._reader.close()
    told._reader = reader  # type: ignore[assignment]
    told._start = start  # the run starts at its first sample
    return told, reader


def replay(samples: Sequence[Sample]) -> tuple[list[tuple[int, str]], LiveFindings]:
    """Feed ``samples`` one at a time at their own clock; ``(step, line)`` said live."""
    lines: list[str] = []
    told, reader = live(lines, samples[0].monotonic)
    said: list[tuple[int, str]] = []
    for s in samples:
        reader.feed([s])
        told._tick(s.monotonic)
        said.extend((s.step if s.step is not None else -1, line) for line in lines[len(said) :])
    return said, told


def slow_loader(n: int, steps_per_sample: int = 3) -> list[Sample]:
    """A loop waiting 97 % of each 0.3 s step for data, sampled every second."""
    metrics = {"step.seconds": 0.3, "step.dataWaitPercent": 97.0, "cpu": 10.0}
    return [Sample(1.7e9 + j, 100.0 + j, j * steps_per_sample, dict(metrics)) for j in range(n)]


def test_a_clear_finding_is_said_within_about_50_steps() -> None:
    """97 % data wait, 3 steps a second: said once 30 steps and 10 s are in (step 30).

    At a fixed 20 s it came at step 60; in the issue's 350-step run, after training.
    """
    said, told = replay(slow_loader(40))
    assert said, "nothing said live"
    step, line = said[0]
    assert "waiting for data" in line
    assert step <= 50, said
    assert told.evaluations >= 1


def test_no_evaluation_before_the_evidence_or_the_first_deadline() -> None:
    """Fewer than 30 steps (one step per 2 s): nothing until ``LIVE_FIRST`` s (20 s)."""
    samples = [
        Sample(1.7e9 + j, 100.0 + j, j // 2, {"step.seconds": 2.0, "step.dataWaitPercent": 97.0})
        for j in range(25)
    ]
    said, told = replay(samples[:20])
    assert told.evaluations == 0 and not said
    said, told = replay(samples)
    assert told.evaluations >= 1 and said and said[0][0] >= 10


def test_the_cadence_after_the_first_keeps_the_cost_small(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Then every ``LIVE_EVERY`` s (10), and never sooner than 100x the last one's CPU s."""
    _, told = replay(slow_loader(61))
    # samples 10 (the evidence), 20, 30, 40, 50, 60: six evaluations in 60 s
    assert told.evaluations == 6, told.evaluations
    assert told.cost > 0.0
    # An evaluation whose CPU time x the ratio is over LIVE_EVERY sets the next one.
    monkeypatch.setattr(live_findings, "LIVE_COST_RATIO", 1e6)
    told._next = 0.0
    told._tick(200.0)
    assert told._next is not None and told._next - 200.0 == pytest.approx(1e6 * told.cost)
    assert told._next - 200.0 > live_findings.LIVE_EVERY


def runs() -> Iterable[tuple[str, Path]]:
    """Recorded and example runs: the docs' real recording, suite scenarios' recordings
    (``tests/fixtures/runs``), every rule's two examples."""
    yield "report-page", DOCS / "report-page.jsonl"
    for path in sorted(RECORDED.glob("*.jsonl")):
        yield path.stem, path
    for rule in REGISTRY:
        for kind in ("fires", "quiet"):
            yield f"{rule.code}-{kind}", example_path(rule.code, kind)  # type: ignore[arg-type]


def samples_of(run: Run) -> list[Sample]:
    """The run's samples, in order, as the monitor's reader hands them."""
    out = []
    keys = list(run.columns)
    for j in range(len(run.time)):
        metrics = {}
        for k in keys:
            column = run.columns[k]
            if j < len(column) and column[j] == column[j]:
                metrics[k] = column[j]
        out.append(Sample(run.time[j], run.monotonic[j], run.step[j], metrics))
    return out


@pytest.mark.parametrize(("name", "path"), list(runs()), ids=[n for n, _ in runs()])
def test_nothing_said_live_is_contradicted_by_the_final_findings(name: str, path: Path) -> None:
    """Every (rule, subject) said live is among the final findings over the whole run."""
    run = read_run(path)
    if len(run.recordings) != 1 or len(set(run.node)) > 1:
        pytest.skip("one recording of one node: what one LiveFindings sees")
    samples = samples_of(run)
    said, told = replay(samples)
    during = set(told.said)
    final = {(f.rule, f.subject) for f in findings.findings(read_run(path))}
    assert during <= final, (during - final, said)
    told.close()
