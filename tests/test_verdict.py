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
