"""Issue 32 items 4 and 5, and the misdiagnoses the diagnosis suite measured: the rules
judged through run files read back (the suite's GPU-shaped runs, crafted with the run
file's own writer, and real framework runs on CPU), one verdict per run, and the gain of
each fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "diagnosis"))

import gpu_runs

from sysmetrics.findings import findings, read_run
from tests.polling import Stamps


def gpu_run(tmp_path: Path, name: str) -> list[str]:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(gpu_runs.RUNS[name]())
    return [f.rule for f in findings(read_run(path))]


@pytest.mark.parametrize(
    "name", ["gpu-bound", "gpu-throttled", "gpu-unused", "gpu-memory-near-limit"]
)
def test_a_gpu_saturated_run_is_not_told_it_is_single_core(tmp_path: Path, name: str) -> None:
    """Issue 32: an ordinary single-GPU job (its GPU 95-99 % busy, the job at one CPU of
    8) got `single-core`: "one thread does the work"; the GPU sets its pace."""
    assert "single-core" not in gpu_run(tmp_path, name)


def test_contention_is_said_where_the_job_is_starved(tmp_path: Path) -> None:
    """Issue 32 (the suite's contention scenarios): a single-threaded job on 2 CPUs, a
    process outside it spinning and the machine's other users busy: the job got 0.22
    CPUs (measured by the suite's harness) and `contention` went unsaid (its floor, 0.25
    CPUs, took the starved job for one that sleeps)."""
    from tests.test_findings import found_in, host, rules

    starved = [{**host(100, 11), "step.seconds": 0.25, "step.dataWaitPercent": 1.0}] * 20
    assert "contention" in rules(found_in(tmp_path, starved, cpus=2))


def keras_fit(run_file: Path, steps: int, sleep: float, slow: dict[int, float]) -> Stamps:
    """Keras (torch backend): ``steps`` steps whose forward sleeps ``sleep`` s (the
    accelerator), step ``n`` of ``slow`` ``slow[n]`` s more. Returns the clock read at
    each forward's start: what the steps really took."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    import time

    import numpy as np

    from sysmetrics.integrations.keras import SystemMetricsCallback

    stamps = Stamps()

    def compute(x: object) -> object:
        stamps.mark()
        time.sleep(sleep + slow.get(len(stamps.times), 0.0))  # the n-th call: step n
        return x

    model = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(compute),
                              keras.layers.Dense(1)])  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.rand(steps * 4, 4).astype("float32")
    cb = SystemMetricsCallback(interval=0.25, run_file=str(run_file))
    model.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0, callbacks=[cb])
    return stamps


def lost_share(stamps: Stamps) -> float:
    """What the rule weighs, from the steps as they were timed: the time the steps over
    ``SLOW_FACTOR`` times the median took beyond the median, of all the steps' time (the
    first two steps left out: the model's build and the warm-up)."""
    import statistics

    from sysmetrics.findings.training import SLOW_FACTOR

    seconds = stamps.steps(skip=2)
    median = statistics.median(seconds)
    return sum(d - median for d in seconds if d > SLOW_FACTOR * median) / sum(seconds)


@pytest.mark.serial
def test_two_slow_steps_of_an_overloaded_machine_are_not_slow_steps(tmp_path: Path) -> None:
    """Issue 32 (the suite's healthy-keras control): two steps of 0.22 and 0.27 s among
    60 ms ones, the machine overloaded, got `slow-steps` (2 of 30 samples slow). What
    matters is the share of the time they lost (here about 2.6 %), not that they exist.

    The load of the machine it runs on can make more steps slow: in a fresh clone's CI,
    beside the parallel workers, this run got ``slow-steps``, and timed, its steps lost
    10.2 % of their time there (3.5-3.7 % beside 8 spinning processes): serial. What is
    checked is that the steps' own timing agrees: under ``SLOW_LOST_SHARE`` less a margin
    for the samples' windows (1 point), no finding; more, and the test is skipped."""
    from sysmetrics.findings.training import SLOW_LOST_SHARE

    run_file = tmp_path / "run.jsonl"
    stamps = keras_fit(run_file, 200, 0.03, {80: 0.09, 150: 0.09})
    run = read_run(run_file)
    assert run.columns.get("step.maxSeconds") is not None
    lost = lost_share(stamps)
    if lost >= SLOW_LOST_SHARE - 0.01:
        pytest.skip(f"the machine's load made the steps lose {lost:.1%} of their time")
    assert "slow-steps" not in [f.rule for f in findings(run)], f"{lost:.1%} lost"


# ---- one verdict per run (issue 32 item 4) ----------------------------------------------


def report_json(tmp_path: Path, name: str) -> dict[str, object]:
    import json

    from sysmetrics.report import json_report

    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(gpu_runs.RUNS[name]())
    document: dict[str, object] = json.loads(json_report(path)[0])
    return document


@pytest.mark.parametrize(
    ("name", "bound", "band"),
    [
        ("gpu-bound", "gpu-compute", "highly"),
        ("gpu-throttled", "gpu-compute", "highly"),
        ("gpu-input-bound", "input", "highly"),
    ],
)
def test_the_verdict_comes_first_in_report_json(
    tmp_path: Path, name: str, bound: str, band: str
) -> None:
    """A GPU-saturated run says so (and is not told it is CPU-limited); an input-bound
    one says how much of the steps' time went to waiting, and how severe that is."""
    document = report_json(tmp_path, name)
    assert list(document).index("verdict") < list(document).index("findings")
    said = document["verdict"]
    assert isinstance(said, dict)
    assert (said["bound"], said["band"]) == (bound, band), said
    assert said["sentence"].startswith(f"{band.capitalize()} "), said
    assert 0 < said["share"] <= 100


def test_a_run_without_gpu_metrics_abstains_and_says_what_is_missing(tmp_path: Path) -> None:
    """Steps that neither wait for data nor keep the CPU busy: their time is elsewhere
    (an accelerator, a sleep); without GPU metrics the verdict says what it could be and
    which signal was missing, rather than guess."""
    from sysmetrics.findings.verdict import verdict
    from tests.test_findings import found_in

    samples = [{"cpu": 3.0, "step.seconds": 0.05, "step.dataWaitPercent": 1.0}] * 20
    path = tmp_path / "crafted.jsonl"
    found = found_in(tmp_path, samples, cpus=2)
    said = verdict(read_run(path), found)
    assert said.bound is None and said.could_be == ("gpu-compute",)
    assert "could be GPU-bound; no GPU metrics were recorded" in said.sentence
    assert said.to_json()["missing"] == ["no GPU metrics were recorded"]


def test_the_page_says_the_verdict_ahead_of_the_findings(tmp_path: Path) -> None:
    from sysmetrics import report

    path = tmp_path / "run.jsonl"
    path.write_bytes(gpu_runs.RUNS["gpu-input-bound"]())
    page = report.render(read_run(path), "t", {})
    assert page.index("Highly input-bound: 70 %") < page.index('<span class="rule">input-bound')


# ---- what each finding says to change, and what it would gain (issue 32 item 5) ----------


def test_input_bound_says_the_fix_and_its_gain(tmp_path: Path) -> None:
    """The GPU-shaped input-bound run: 70 % of 0.3 s steps waiting, the CPUs idle: more
    workers, and removing the wait makes steps up to 3.3x faster (0.3 -> 0.09 s)."""
    document = report_json(tmp_path, "gpu-input-bound")
    (found,) = [f for f in document["findings"] if f["rule"] == "input-bound"]  # type: ignore[union-attr,index]
    assert found["advice"].startswith(
        "Removing the 70 % data wait would make steps up to 3.3x faster (0.3 -> 0.09 s per "
        "step): raise the DataLoader's num_workers"
    ), found["advice"]
    assert "pin_memory=True" in found["advice"]  # a GPU trains
    assert found["evidence"]["gain_times"] == pytest.approx(1 / 0.3, rel=0.02)


def test_a_periodic_checkpoint_says_what_its_slow_steps_cost(tmp_path: Path) -> None:
    """A real Keras run whose every 10th step takes 0.3 s more (the checkpoint, standing
    for a write): the slow steps' share of the time and the gain of writing less often."""
    run_file = tmp_path / "run.jsonl"
    keras_fit(run_file, 80, 0.03, {n: 0.3 for n in range(10, 81, 10)})
    (slow,) = [f for f in findings(read_run(run_file)) if f.rule == "slow-steps"]
    lost = slow.evidence["lost_share"]
    assert 0.2 < lost < 0.7, slow.evidence
    assert slow.evidence["gain_times"] == pytest.approx(1 / (1 - lost))
    assert slow.advice.startswith(f"Removing the slow steps' {lost:.0%} of the steps' time")


def test_a_stall_says_what_it_cost_per_step(tmp_path: Path) -> None:
    """A 15 s hang among 1 s steps: its share of the run's wall-clock time per step, and
    the change to make (the job idle: what it waited for, a timeout on collectives)."""
    from tests.test_findings import found_in, stalled

    crafted = stalled(10, 16, 10, cpu=1.0)
    (stall,) = [
        f
        for f in found_in(tmp_path, crafted["samples"], steps=crafted["steps"])
        if f.rule == "stall"
    ]
    # 35 s from step 0 to step 20: 15 s of it the stall -> 1.75 s per step, 0.5 without.
    assert stall.evidence["step_seconds_before"] == pytest.approx(35 / 20)
    assert stall.evidence["gain_times"] == pytest.approx(35 / 20)
    assert "timeout" in stall.advice and stall.advice.startswith("Removing the 15 s stall")


def test_a_stall_on_a_saturated_host_is_not_called_a_hang_alone(tmp_path: Path) -> None:
    """The suite's stall-busy on the loaded machine: a 15 s CPU-busy evaluation, starved
    to 0.16 CPUs by other processes (the host 100 % busy), took 94 s and was called "a
    hang or a deadlock". Its low CPU does not tell a hang from starved work: both said."""
    from tests.test_findings import found_in, host, stalled

    crafted = stalled(10, 16, 10)
    samples = [host(100, 8) for _ in crafted["samples"]]
    (stall,) = [
        f for f in found_in(tmp_path, samples, steps=crafted["steps"], cpus=2) if f.rule == "stall"
    ]
    assert "starved of CPU" in stall.sentence and "work outside the steps" in stall.sentence
    assert stall.evidence["host_cpu_percent_mean"] == 100
    (tmp_path / "crafted.jsonl").unlink()
    free = [host(30, 8) for _ in crafted["samples"]]  # the host had room: idle is a hang
    (stall,) = [
        f for f in found_in(tmp_path, free, steps=crafted["steps"], cpus=2) if f.rule == "stall"
    ]
    assert "hang or a deadlock" in stall.sentence and "starved" not in stall.sentence


def test_each_node_has_its_verdict_and_the_run_the_most_severe(tmp_path: Path) -> None:
    """A run of two nodes (one file both appended to): node 0 GPU-bound, node 1 waiting
    for data; each node's verdict in --json, and the run's the most severe one's."""
    import json

    from sysmetrics.report import json_report
    from tests.test_findings import write

    gpu = {"gpu.0.gpu": 97.0, "gpu.process.0.gpu": 97.0, "cpu": 12.5}
    path = tmp_path / "nodes.jsonl"
    write(path, [{**gpu, "step.seconds": 0.1, "step.dataWaitPercent": 1.0}] * 20, node=0, cpus=8)
    write(path, [{**gpu, "gpu.0.gpu": 30.0, "gpu.process.0.gpu": 30.0, "step.seconds": 0.3,
                  "step.dataWaitPercent": 60.0}] * 20, node=1, cpus=8)  # fmt: skip
    document = json.loads(json_report(path)[0])
    bounds = [n["verdict"]["bound"] for n in document["nodes"]]
    assert bounds == ["gpu-compute", "input"], bounds
    assert document["verdict"]["bound"] == "input"  # highly input-bound (60 %) beats 97 % GPU
