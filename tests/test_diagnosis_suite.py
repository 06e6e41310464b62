"""The diagnosis suite (benchmarks/diagnosis, issue 32): its labels name real rules and
runs, and its judge scores what it is given. The real scenarios are not run here: on a
loaded 2-core machine their premises rarely hold (``make diagnosis`` says which were void).
The GPU-shaped ones, crafted run files whose premises hold anywhere, are run and judged."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "diagnosis"))

import gpu_runs
import suite as harness
from labels import HEALTHY, SCENARIOS, Scenario

from sysmetrics.findings import findings, read_run
from sysmetrics.findings.registry import BY_CODE

RULES = set(BY_CODE)


def test_every_label_names_real_rules_runs_and_premises() -> None:
    assert len(SCENARIOS) >= 20
    for s in SCENARIOS:
        assert set(s.must) <= RULES and set(s.must_not) <= RULES, s.name
        assert not set(s.must) & set(s.must_not), s.name
        assert s.top == HEALTHY or s.top in s.must, s.name
        assert set(s.premise) <= set(harness.PREMISES), s.name
        assert s.kind in ("record", "callback", "notebook", "nodes", "crafted"), s.name
        assert s.kind != "crafted" or s.name in gpu_runs.RUNS, s.name
        assert not s.fixes or s.fixes in {x.name for x in SCENARIOS}, s.name


def outcome(s: Scenario, fired: list[tuple[str, str]], others: float = 0.0) -> harness.Outcome:
    return harness.Outcome(s, fired=fired, state={"others_cpus": others})


def test_judge_scores_a_top_cause_by_the_first_finding_and_its_words() -> None:
    s = Scenario("x", "", "record", must=("input-bound",), must_not=("single-core",),
                 top="input-bound", cause=r"waits on I/O")  # fmt: skip
    right = harness.judge(outcome(s, [("input-bound", "the loader waits on I/O")]), RULES)
    assert right.passed and right.top_right
    words = harness.judge(outcome(s, [("input-bound", "saturated")]), RULES)
    assert not words.top_right and not words.missing
    first = harness.judge(
        outcome(s, [("single-core", "..."), ("input-bound", "waits on I/O")]), RULES
    )
    assert not first.top_right and first.wrong == {"single-core"}
    silent = harness.judge(outcome(s, []), RULES)
    assert silent.abstained and silent.missing == {"input-bound"}


def test_measured_contention_is_neither_required_nor_a_false_warning() -> None:
    healthy = Scenario("h", "", "record")
    assert harness.judge(outcome(healthy, [("contention", "...")], others=1.5), RULES).passed
    assert not harness.judge(outcome(healthy, [("contention", "...")], others=0.1), RULES).passed


def test_a_premise_that_did_not_hold_makes_the_scenario_void() -> None:
    s = Scenario("c", "", "record", must=("contention",), top="contention",
                 premise=("others_busy",))  # fmt: skip
    assert harness._void(s, {"others_cpus": 0.2, "job_cpus": 1.0, "host_free_share": 1.0})
    assert not harness._void(s, {"others_cpus": 1.2, "job_cpus": 1.0, "host_free_share": 1.0})


@pytest.mark.parametrize("name", sorted(gpu_runs.RUNS))
def test_the_gpu_shaped_runs_read_back(tmp_path: Path, name: str) -> None:
    """Each crafted run is a run file the findings read (what they say is the suite's)."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(gpu_runs.RUNS[name]())
    run = read_run(path)
    assert len(run) == gpu_runs.N
    findings(run)


def test_gains_compare_the_predicted_with_the_realised_speed_up() -> None:
    """Issue 32 item 5: the broken run's top finding predicts ``gain_times``; the fixed
    variant realises the ratio of the mean seconds per step; within +-25 % or not."""
    broken = Scenario("b", "", "record", must=("input-bound",), top="input-bound")
    fixed = Scenario("f", "", "record", fixes="b")
    far = Scenario("g", "", "record", fixes="c")
    c = Scenario("c", "", "record", must=("stall",), top="stall")
    outcomes = [
        harness.Outcome(broken, mean_step=0.05, predicted=5.0),
        harness.Outcome(fixed, mean_step=0.0125),  # 4x realised: -> +25 %: within
        harness.Outcome(c, mean_step=0.5, predicted=2.0),
        harness.Outcome(far, mean_step=0.1),  # 5x realised, 2x predicted: -60 %
    ]
    text = harness.gains(outcomes)
    assert "| b -> f | 0.050 -> 0.013 | - | 4.00x | 5.00x | +25% | yes |" in text
    assert "| c -> g | 0.500 -> 0.100 | - | 5.00x | 2.00x | -60% | no |" in text
    assert "within +-25 % of the realised: 1 of 2 (50%; target >= 80%)" in text


CRAFTED = [s for s in SCENARIOS if s.kind == "crafted"]


@pytest.mark.parametrize("s", CRAFTED, ids=[s.name for s in CRAFTED])
def test_the_gpu_shaped_scenarios_pass_their_labels(tmp_path: Path, s: Scenario) -> None:
    """The suite's subset that holds on any machine, run in CI (issue 32 item 1): each
    GPU-shaped run through ``sysmetrics report --json``, judged by its label as
    ``make diagnosis`` judges it (a GPU-bound job is not told it is CPU-limited...)."""
    o = harness.run(s, tmp_path)
    assert not o.void, o.void
    verdict = harness.judge(o, RULES)
    assert verdict.passed and verdict.top_right, (o.fired, verdict)
