from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sysmetrics
from sysmetrics import findings as fd
from sysmetrics import runfile
from sysmetrics.findings import Finding, Run, findings, read_run
from tests.test_host_metrics import available_cpus


def write_run(path: Path, samples: list[dict[str, Any]]) -> Path:
    lines = []
    for n, metrics in enumerate(samples):
        record = {"time": 1000.0 + n, "monotonic": 10.0 + n, "step": n, "metrics": metrics}
        lines.append(json.dumps(record))
    path.write_text("".join(line + "\n" for line in lines))
    return path


def run(tmp_path: Path, samples: list[dict[str, Any]]) -> list[Finding]:
    return findings(read_run(write_run(tmp_path / "run.jsonl", samples)))


def rules(found: list[Finding]) -> list[str]:
    return [f.rule for f in found]


def used(gpu: float, **extra: float) -> dict[str, float]:
    """A sample where the job uses GPU 0 at ``gpu`` %."""
    return {"gpu.0.gpu": gpu, "gpu.process.0.gpu": gpu, **extra}


# reading


def test_read_run_skips_junk_and_keeps_numbers(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    good = {"time": 1.0, "monotonic": 2.0, "step": 3, "metrics": {"cpu": 5, "x": "s", "b": True}}
    path.write_bytes(
        b"not json\n"
        + b"\xff\xfe\n"
        + b"[1, 2]\n"
        + b'{"metrics": 1}\n'
        + b"[" * 100_000
        + b"\n"
        + json.dumps(good).encode()
        + b"\n"
        + b'{"metrics": {"cpu": 1e999, "n": '
        + b"9" * 5000
        + b"}}\n"
        + b'{"step": true, "metrics": {}}\n'
        + b'{"metrics": {"cpu": 1}'  # a last line cut short
    )
    records = read_run(path)
    assert len(records) == 2
    assert records.metrics(0) == {"cpu": 5.0}
    assert records.metrics(1) == {}
    assert (records.time[0], records.monotonic[0], records.step[0]) == (1.0, 2.0, 3)
    assert records.step[1] is None


def test_columns_hold_nan_where_a_sample_lacks_the_key(tmp_path: Path) -> None:
    samples = [{"a": 1}, {"b": 2}, {}, {"a": 4, "b": 5}, {"b": 6}]
    run = read_run(write_run(tmp_path / "run.jsonl", samples))
    assert [run.metrics(j) for j in range(len(run))] == samples
    assert all(len(column) == 5 for column in run.columns.values())
    assert run.present("a") == [0, 3]


def test_read_run_keeps_at_most_max_keys(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(runfile, "MAX_KEYS", 3)
    run = read_run(write_run(tmp_path / "run.jsonl", [{f"k{n}": n} for n in range(6)]))
    assert sorted(run.columns) == ["k0", "k1", "k2"]
    assert len(run) == 6


def test_read_run_skips_a_line_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    long = json.dumps({"metrics": {"cpu": 1}, "pad": "x" * (fd.MAX_LINE_BYTES + 10)})
    path.write_text(long + "\n" + json.dumps({"metrics": {"cpu": 2}}) + "\n")
    run = read_run(path)
    assert [run.metrics(j) for j in range(len(run))] == [{"cpu": 2.0}]


def test_read_run_reads_at_most_max_lines(tmp_path: Path) -> None:
    path = write_run(tmp_path / "run.jsonl", [{"cpu": n} for n in range(10)])
    assert len(read_run(path, max_lines=4)) == 4


def test_empty_file_has_no_findings(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"")
    assert len(read_run(path)) == 0
    assert findings(read_run(path)) == []


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096))
def test_read_run_never_raises_on_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)
    findings(read_run(path))


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=12), inner, max_size=4)
            ),
            max_leaves=12,
        ),
        max_size=8,
    )
)
def test_read_run_never_raises_on_json_values(tmp_path: Path, values: list[Any]) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_text(
        "".join(json.dumps({"step": v, "time": v, "metrics": v}) + "\n" for v in values)
    )
    findings(read_run(path))


# input-bound


def test_input_bound(tmp_path: Path) -> None:
    found = run(tmp_path, [used(20, cpu=95) for _ in range(10)])
    assert rules(found) == ["input-bound", "cpu-bound"]  # no step keys: the machine rule
    assert found[0].evidence["gpu_mean_percent"] == 20
    assert found[0].span == fd.Span("step", 0, 9)


def test_not_input_bound_when_gpu_busy_or_cpu_idle(tmp_path: Path) -> None:
    assert rules(run(tmp_path, [used(90, cpu=95) for _ in range(10)])) == ["cpu-bound"]
    samples = [used(20, cpu=95 if n < 2 else 10) for n in range(10)]  # 20 % < 30 %
    assert rules(run(tmp_path, samples)) == []


def test_input_bound_ignores_gpus_the_job_does_not_use(tmp_path: Path) -> None:
    samples = [{"gpu.0.gpu": 0, "gpu.process.1.gpu": 90, "gpu.1.gpu": 90, "cpu": 95}] * 10
    assert "input-bound" not in rules(run(tmp_path, samples))


# memory


def test_memory_limit(tmp_path: Path) -> None:
    samples = [{"proc.memory.percent": p} for p in (50, 70, 93, 60)]
    found = run(tmp_path, samples)
    assert rules(found) == ["memory-limit"]
    assert found[0].evidence == {"peak_percent": 93}
    assert found[0].span == fd.Span("step", 2, 2)


def test_gpu_memory_limit(tmp_path: Path) -> None:
    found = run(tmp_path, [used(90, **{"gpu.0.memoryAllocated": p}) for p in (80, 97)])
    assert rules(found) == ["gpu-memory-limit"]
    assert found[0].evidence == {"gpu": 0, "peak_percent": 97}


def test_no_memory_finding_below_the_limits(tmp_path: Path) -> None:
    samples = [used(90, **{"proc.memory.percent": 90, "gpu.0.memoryAllocated": 95})] * 6
    assert rules(run(tmp_path, samples)) == []


# throttling


def test_gpu_throttling_says_which(tmp_path: Path) -> None:
    samples = [
        used(90, **{"gpu.0.throttle.thermal": int(n < 3), "gpu.0.throttle.powerCap": 0})
        for n in range(10)
    ]
    found = run(tmp_path, samples)
    assert rules(found) == ["gpu-throttling"]
    assert "thermal" in found[0].sentence
    assert found[0].evidence["share"] == 0.3
    assert found[0].span == fd.Span("step", 0, 2)


def test_no_throttling_at_ten_percent(tmp_path: Path) -> None:
    samples = [used(90, **{"gpu.0.throttle.hwSlowdown": int(n == 0)}) for n in range(10)]
    assert rules(run(tmp_path, samples)) == []


# disk-bound


def test_disk_bound(tmp_path: Path) -> None:
    samples = [used(10, **{"disk.in": 200.0 * n, "cpu": 10}) for n in range(10)]  # 200 MiB/s
    found = run(tmp_path, samples)
    assert rules(found) == ["disk-bound"]
    assert found[0].evidence["read_mib_s_mean"] == 200
    assert found[0].span == fd.Span("step", 1, 9)


def test_not_disk_bound_when_gpu_busy_or_reads_slow(tmp_path: Path) -> None:
    busy = [used(90, **{"disk.in": 200.0 * n}) for n in range(10)]
    slow = [used(10, **{"disk.in": 50.0 * n}) for n in range(10)]
    assert rules(run(tmp_path, busy)) == []
    assert rules(run(tmp_path, slow)) == []


def test_disk_counter_restart_is_not_a_rate(tmp_path: Path) -> None:
    samples = [used(10, **{"disk.in": 1000.0 if n == 0 else 1.0 * n}) for n in range(10)]
    assert rules(run(tmp_path, samples)) == []


# straggler node


def nodes(cpus: list[float]) -> list[dict[str, float]]:
    return [{f"node{k}/cpu": c for k, c in enumerate(cpus)} for _ in range(6)]


def test_straggler_node(tmp_path: Path) -> None:
    found = run(tmp_path, nodes([80, 82, 78, 30]))
    assert rules(found) == ["straggler-node"]
    assert found[0].evidence["node"] == 3
    assert "below" in found[0].sentence


def test_straggler_node_by_gpu(tmp_path: Path) -> None:
    sample = {f"node{k}/gpu.{i}.gpu": 90.0 for k in range(3) for i in range(2)}
    sample["node2/gpu.1.gpu"] = 0.0  # node 2 averages 45 %
    found = run(tmp_path, [sample] * 6)
    assert rules(found) == ["straggler-node"]
    assert found[0].evidence["node"] == 2


def test_no_straggler_when_nodes_agree_or_only_two(tmp_path: Path) -> None:
    assert rules(run(tmp_path, nodes([80, 82, 78, 60]))) == []
    assert rules(run(tmp_path, nodes([90, 10]))) == []


# swap


def test_swap_rise(tmp_path: Path) -> None:
    found = run(tmp_path, [{fd.SWAP_KEY: p} for p in (2, 3, 12, 8)])
    assert rules(found) == ["swap"]
    assert found[0].evidence == {"first_percent": 2, "peak_percent": 12}


def test_no_swap_finding_for_steady_swap_or_no_key(tmp_path: Path) -> None:
    assert rules(run(tmp_path, [{fd.SWAP_KEY: 40} for _ in range(5)])) == []
    assert rules(run(tmp_path, [{"memory": 50} for _ in range(5)])) == []


# unused GPU


def test_unused_gpu(tmp_path: Path) -> None:
    samples = [used(90, **{"gpu.1.gpu": 0, "gpu.1.temp": 30}) for _ in range(3)]
    found = run(tmp_path, samples)
    assert rules(found) == ["unused-gpu"]
    assert found[0].evidence == {"gpu": 1, "samples": 3}


def test_no_unused_gpu_when_used_once(tmp_path: Path) -> None:
    samples = [{"gpu.0.gpu": 0}, {"gpu.0.gpu": 50, "gpu.process.0.gpu": 50}]
    assert rules(run(tmp_path, samples)) == []


def test_no_gpu_no_findings(tmp_path: Path) -> None:
    samples = [{"cpu": 50, "memory": 40, "proc.memory.percent": 10} for _ in range(10)]
    assert run(tmp_path, samples) == []


def same(a: fd.Run, b: fd.Run) -> bool:
    """Equal runs, NaN equal to NaN."""
    columns = {k: [None if v != v else v for v in c] for k, c in a.columns.items()}
    other = {k: [None if v != v else v for v in c] for k, c in b.columns.items()}
    return (a.time, a.monotonic, a.step, columns) == (b.time, b.monotonic, b.step, other)


_VALUES = st.one_of(
    st.floats(),  # NaN and infinities, which orjson rejects and json.dumps writes
    st.integers(min_value=-(2**70), max_value=2**70),  # beyond orjson's 64 bits
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "step": _VALUES,
                "time": _VALUES,
                "metrics": st.dictionaries(st.text(max_size=6), _VALUES, max_size=5),
            }
        ),
        max_size=8,
    ),
    st.binary(max_size=64),
)
def test_orjson_and_the_stdlib_read_the_same(
    tmp_path: Path, monkeypatch: Any, records: list[dict[str, Any]], junk: bytes
) -> None:
    pytest.importorskip("orjson", reason="orjson comes with the [report] extra")
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + junk)
    fast = read_run(path)
    with monkeypatch.context() as m:
        m.setattr(runfile._optional, "fast_json_loads", lambda: None)
        slow = read_run(path)
    assert same(fast, slow)


# -- issue 26: findings for every run ---------------------------------------------------
# Crafted run files are written with the run file's own writer (sysmetrics.runfile).


def write(
    path: Path,
    samples: list[dict[str, float]],
    *,
    dt: float = 1.0,
    steps: list[int | None] | None = None,
    cpus: float | None = None,
    node: int | None = None,
    end: bool = True,
    t0: float = 1000.0,
    **ending: Any,
) -> Path:
    """A recording of ``samples`` ``dt`` s apart, with a ``run`` line (``cpus``) and ``end``."""
    out = [runfile.run_line(command=None, host="h", node=node or 0, pid=1, start=t0,
                            interval=dt, cpus=cpus, version="test")]  # fmt: skip
    for n, metrics in enumerate(samples):
        step = n if steps is None else steps[n]
        out.append(runfile.sample_line(t0 + n * dt, 10.0 + n * dt, step, metrics, node))
    if end:
        out.append(
            runfile.end_line(
                seconds=len(samples) * dt, node=node or 0, samples=len(samples), **ending
            )
        )
    with open(path, "ab") as file:
        file.write(b"".join(out))
    return path


def found_in(tmp_path: Path, samples: list[dict[str, float]], **kwargs: Any) -> list[Finding]:
    return findings(read_run(write(tmp_path / "crafted.jsonl", samples, **kwargs)))


def only(found: list[Finding], rule: str) -> Finding:
    matched = [f for f in found if f.rule == rule]
    assert len(matched) == 1, rules(found)
    return matched[0]


# input-bound, from step.dataWaitPercent


def waiting(wait: float, **extra: float) -> dict[str, float]:
    return {"step.seconds": 0.5, "step.dataWaitPercent": wait, **extra}


def test_input_bound_from_data_wait_names_a_saturated_cpu(tmp_path: Path) -> None:
    samples = [waiting(5, cpu=30)] * 4 + [waiting(45, cpu=97)] * 12 + [waiting(5, cpu=30)] * 4
    finding = only(found_in(tmp_path, samples, cpus=2), "input-bound")
    assert finding.sentence == (
        "Steps 4\N{EN DASH}15 spent 45 % of their time waiting for data while the job's "
        "2 CPUs were saturated (97 %); more DataLoader workers will not help."
    )
    assert finding.span == fd.Span("step", 4, 15)
    assert finding.evidence["wait_percent"] == pytest.approx(45)
    # Each sample closed one step (its mark grows by one; the first counts as the median)
    # of 0.5 s: weighed by those seconds, as the table and the readers weigh it, not by
    # the 1 s sampling interval (issue 31).
    assert finding.evidence["share"] == pytest.approx(12 / 20)


def test_input_bound_names_io_or_disk_when_the_cpu_is_not_saturated(tmp_path: Path) -> None:
    idle = only(found_in(tmp_path / "", [waiting(60, cpu=10)] * 10), "input-bound")
    assert "too few workers" in idle.sentence and "saturated" not in idle.sentence
    (tmp_path / "crafted.jsonl").unlink()
    disk = [waiting(60, cpu=60, **{"disk.in": 300.0 * n}) for n in range(10)]
    reading = only(found_in(tmp_path, disk), "input-bound")
    assert "disk at 300 MiB/s" in reading.sentence


def test_not_input_bound_with_little_data_wait_or_a_short_burst(tmp_path: Path) -> None:
    assert "input-bound" not in rules(found_in(tmp_path, [waiting(20, cpu=97)] * 20))
    (tmp_path / "crafted.jsonl").unlink()
    burst = [waiting(5)] * 8 + [waiting(90)] * 2 + [waiting(5)] * 10  # 10 % of the steps
    assert "input-bound" not in rules(found_in(tmp_path, burst))


def test_step_keys_replace_the_machine_rule(tmp_path: Path) -> None:
    """GPUs idle and CPU saturated, but the steps hardly wait: not input-bound."""
    samples = [used(20, cpu=95, **{"step.seconds": 1.0, "step.dataWaitPercent": 2.0})] * 10
    assert "input-bound" not in rules(found_in(tmp_path, samples))


# cpu-bound, single-core, contention


def test_cpu_bound(tmp_path: Path) -> None:
    samples = [{"cpu": 96.0}] * 8 + [{"cpu": 40.0}] * 2
    finding = only(found_in(tmp_path, samples, cpus=4), "cpu-bound")
    assert finding.evidence["share"] == 0.8 and "its 4 CPUs 96 % busy" in finding.sentence


def test_not_cpu_bound_below_the_share_or_the_level(tmp_path: Path) -> None:
    assert rules(found_in(tmp_path, [{"cpu": 96.0}] * 4 + [{"cpu": 40.0}] * 6)) == []
    (tmp_path / "crafted.jsonl").unlink()
    assert rules(found_in(tmp_path, [{"cpu": 85.0}] * 10)) == []


def test_single_core_from_the_run_lines_cpus(tmp_path: Path) -> None:
    finding = only(found_in(tmp_path, [{"cpu": 25.0}] * 10, cpus=4), "single-core")
    assert finding.evidence["cpus"] == 4 and "1.00 CPUs" in finding.sentence
    assert "available to the job" in finding.sentence


def test_single_core_from_the_per_core_keys(tmp_path: Path) -> None:
    cores = {f"cpu.{i}.cpu_percent": 30.0 for i in range(8)}
    finding = only(found_in(tmp_path, [{"cpu": 12.5, **cores}] * 10), "single-core")
    assert finding.evidence["cpus"] == 8 and "on the host" in finding.sentence


def test_a_saturated_host_is_contention_not_single_core(tmp_path: Path) -> None:
    """Regression: a job spinning every CPU on a host others saturate got one CPU's worth
    (a real recording on the shared test machine read as single-core)."""
    found = rules(found_in(tmp_path, [host(100, 25)] * 10, cpus=4))
    assert "contention" in found and "single-core" not in found


def test_not_single_core_with_one_cpu_or_more_than_one_used(tmp_path: Path) -> None:
    assert "single-core" not in rules(found_in(tmp_path, [{"cpu": 97.0}] * 10, cpus=1))
    (tmp_path / "crafted.jsonl").unlink()
    assert "single-core" not in rules(found_in(tmp_path, [{"cpu": 50.0}] * 10, cpus=4))
    (tmp_path / "crafted.jsonl").unlink()
    assert "single-core" not in rules(found_in(tmp_path, [{"cpu": 25.0}] * 10))  # no count


def host(busy: float, job: float) -> dict[str, float]:
    return {"cpu": job, **{f"cpu.{i}.cpu_percent": busy for i in range(4)}}


def test_contention_on_cpu(tmp_path: Path) -> None:
    finding = only(found_in(tmp_path, [host(100, 40)] * 10, cpus=4), "contention")
    assert finding.evidence["host_cpu_percent_mean"] == 100
    assert finding.evidence["job_cpu_percent_mean"] == 40
    assert "other processes" in finding.sentence


def test_contention_on_memory(tmp_path: Path) -> None:
    samples = [{"memory": 95.0, "proc.memory.percent": 10.0}] * 5
    finding = only(found_in(tmp_path, samples), "contention")
    assert finding.evidence == {"host_memory_percent_peak": 95, "job_memory_percent_mean": 10}


def test_no_contention_when_the_job_has_the_machine(tmp_path: Path) -> None:
    assert "contention" not in rules(found_in(tmp_path, [host(100, 97)] * 10, cpus=4))
    (tmp_path / "crafted.jsonl").unlink()
    assert "contention" not in rules(found_in(tmp_path, [host(50, 40)] * 10, cpus=4))
    (tmp_path / "crafted.jsonl").unlink()
    sleeping = [host(100, 3)] * 10  # 0.12 of 4 CPUs: the job did not ask for more
    assert "contention" not in rules(found_in(tmp_path, sleeping, cpus=4))
    (tmp_path / "crafted.jsonl").unlink()
    memory = [{"memory": 95.0, "proc.memory.percent": 80.0}] * 5  # the job holds it
    assert "contention" not in rules(found_in(tmp_path, memory))


# stall


def stalled(before: int, stuck: int, after: int, **machine: float) -> dict[str, Any]:
    """Steps advancing every sample, then ``stuck`` samples at one step, then advancing."""
    steps = [*range(before), *[before] * stuck, *range(before + 1, before + 1 + after)]
    return {"samples": [dict(machine)] * len(steps), "steps": steps}


def test_stall_while_idle_is_a_hang(tmp_path: Path) -> None:
    crafted = stalled(5, 16, 5, cpu=1.0)
    finding = only(found_in(tmp_path, crafted["samples"], steps=crafted["steps"]), "stall")
    assert finding.evidence["seconds"] == 15 and finding.evidence["ended_stalled"] == 0
    assert finding.span == fd.Span("step", 5, 5)
    assert "hang or a deadlock" in finding.sentence
    assert finding.sentence.startswith("The step stayed at 5 for 15 s (60% of the run")


def test_stall_while_busy_and_at_the_end(tmp_path: Path) -> None:
    """A 15 s stall in a 20 s run that ends stalled, the job busy meanwhile."""
    crafted = stalled(5, 16, 0, cpu=95.0)
    finding = only(found_in(tmp_path, crafted["samples"], steps=crafted["steps"]), "stall")
    assert finding.evidence["ended_stalled"] == 1 and finding.evidence["share"] == 0.75
    assert "until the run ended stalled" in finding.sentence and "evaluation" in finding.sentence


def test_a_run_that_finished_after_a_long_last_step_did_not_end_stalled(tmp_path: Path) -> None:
    """A final evaluation or save after the last step, then a normal exit: said as such."""
    crafted = stalled(5, 16, 0, cpu=95.0)
    found = found_in(tmp_path, crafted["samples"], steps=crafted["steps"], exit_status=0)
    finding = only(found, "stall")
    assert finding.evidence["ended_stalled"] == 0 and "until the run finished" in finding.sentence


def test_rules_over_a_run_built_live_with_add() -> None:
    """Regression: a live caller builds its run with ``Run.add`` and never pads it; the
    rules indexed short columns (``IndexError: array index out of range``)."""
    run = Run()
    run.recordings.append(runfile.Recording({"cpus": 2}))
    for n in range(30):
        extra = {"cpu.0.cpu_percent": 5.0} if n < 3 else {}  # a key the later samples lack
        run.add({"cpu": 1.0, **extra}, 1000.0 + n, 10.0 + n, min(n, 5), recording=0)
    assert rules(findings(run)) == ["stall"]
    run.add({"cpu": 1.0, "cpu.0.cpu_percent": 7.0}, 1030.0, 40.0, 6, recording=0)  # grows on
    assert run.metrics(30) == {"cpu": 1.0, "cpu.0.cpu_percent": 7.0}  # in its place
    assert rules(findings(run)) == ["stall"]


def test_a_stall_under_way_in_a_partial_run(tmp_path: Path) -> None:
    """Live, on what has been sampled so far (no end line yet): still stalled, not ended."""
    crafted = stalled(5, 16, 0, cpu=1.0)
    path = write(tmp_path / "live.jsonl", crafted["samples"], steps=crafted["steps"], end=False)
    finding = only(findings(read_run(path)), "stall")
    assert finding.evidence["ended_stalled"] == 1 and finding.evidence["seconds"] == 15
    assert "still at the last sample" in finding.sentence and "ended" not in finding.sentence
    partial = read_run(path).select(range(12))  # 6 s into the stall: not yet one
    assert "stall" not in rules(findings(partial))


def test_a_short_stall_in_a_short_run_is_one(tmp_path: Path) -> None:
    crafted = stalled(20, 41, 10)  # 4 s at 0.1 s per sample, in a 7 s run
    found = found_in(tmp_path, crafted["samples"], steps=crafted["steps"], dt=0.1)
    assert only(found, "stall").evidence["seconds"] == pytest.approx(4.0)


def test_no_stall_for_steady_slow_steps_or_a_short_pause(tmp_path: Path) -> None:
    slow = [s for s in range(10) for _ in range(20)]  # one step every 20 s, steadily
    assert "stall" not in rules(found_in(tmp_path, [{}] * len(slow), steps=slow))
    (tmp_path / "crafted.jsonl").unlink()
    crafted = stalled(50, 6, 50)  # 5 s in a 105 s run
    assert "stall" not in rules(found_in(tmp_path, crafted["samples"], steps=crafted["steps"]))


# slow-steps


def test_slow_steps_with_a_disk_burst(tmp_path: Path) -> None:
    seconds = [0.1] * 20
    seconds[7] = seconds[13] = 0.5
    read = 0.0
    samples = []
    for s in seconds:
        read += 400.0 if s > 0.1 else 1.0  # MiB since the previous sample, 1 s apart
        samples.append({"step.seconds": s, "disk.in": read})
    finding = only(found_in(tmp_path, samples), "slow-steps")
    assert finding.evidence["slow_samples"] == 2 and finding.evidence["median_seconds"] == 0.1
    assert finding.evidence["disk_read_mib_s"] == 400
    assert finding.span == fd.Span("step", 7, 13)
    assert "disk reads at 400 MiB/s" in finding.sentence


def test_slow_steps_from_the_samples_steps_name_another_key(tmp_path: Path) -> None:
    """Under record without step keys: the steps' pace from the samples' steps."""
    steps, samples = [], []
    for s in range(20):
        samples += [{"proc.cpu.threads": 10.0}] * (5 if s == 9 else 1)
        steps += [s] * (5 if s == 9 else 1)
    samples[11] = {"proc.cpu.threads": 60.0}  # while step 9 (samples 9 to 13) ran
    finding = only(found_in(tmp_path, samples, steps=steps), "slow-steps")
    assert finding.evidence["slowest_seconds"] == 4  # at least: from sample 9 to 13
    assert finding.evidence["median_seconds"] == 1
    assert "proc.cpu.threads peaked at 60 count (elsewhere 10)" in finding.sentence


def test_no_slow_step_from_the_samples_resolution(tmp_path: Path) -> None:
    """Regression: steps faster than the samples, one step change between two samples
    0.1 s apart read as a 100 ms step against a 20 ms median (a real recording)."""
    steps = [5 * n for n in range(30)]
    steps[10:12] = [48, 49]  # one step between samples 10 and 11: its time is unknown
    steps[20:22] = [98, 99]
    assert rules(found_in(tmp_path, [{}] * 30, steps=steps, dt=0.1)) == []


def test_no_slow_steps_within_the_factor_or_for_one_blip(tmp_path: Path) -> None:
    samples = [{"step.seconds": 0.1 if n % 2 else 0.25} for n in range(20)]
    assert rules(found_in(tmp_path, samples)) == []
    (tmp_path / "crafted.jsonl").unlink()
    blip = [{"step.seconds": 0.5 if n == 20 else 0.1} for n in range(40)]  # 1 in 40 < 5 %
    assert rules(found_in(tmp_path, blip)) == []


# straggler-node, two nodes with step keys


def gathered(key: str, values: list[float], **extra: float) -> list[dict[str, float]]:
    return [{**{f"node{k}/{key}": v for k, v in enumerate(values)}, **extra}] * 10


def test_straggler_by_data_wait_with_two_nodes(tmp_path: Path) -> None:
    samples = [
        {**s, "node1/cpu": 99.0}
        for s in gathered("step.dataWaitPercent", [3.0, 48.0], **{"step.seconds": 1.0})
    ]
    finding = only(found_in(tmp_path, samples), "straggler-node")
    assert finding.evidence["node"] == 1 and finding.evidence["wait_percent"] == 48
    assert "its CPU was above 80 %" in finding.sentence


def test_straggler_by_step_time_with_two_nodes(tmp_path: Path) -> None:
    finding = only(found_in(tmp_path, gathered("step.seconds", [1.0, 1.6])), "straggler-node")
    assert finding.evidence["node"] == 1 and finding.evidence["ratio"] == pytest.approx(1.6)


def test_no_straggler_when_two_nodes_agree(tmp_path: Path) -> None:
    assert rules(found_in(tmp_path, gathered("step.seconds", [1.0, 1.3]))) == []
    (tmp_path / "crafted.jsonl").unlink()
    waits = gathered("step.dataWaitPercent", [10.0, 20.0])
    assert rules(found_in(tmp_path, waits)) == []


def test_straggler_from_two_nodes_samples_in_one_run(tmp_path: Path) -> None:
    """Two nodes' recordings in one file (their samples carry ``node``): each its own steps."""
    path = tmp_path / "two.jsonl"
    write(path, [{"cpu": 50.0}] * 20, node=0, steps=list(range(20)))
    slow = [{"cpu": 50.0, "gpu.0.throttle.thermal": 1.0, "gpu.0.gpu": 90.0}] * 20
    write(path, slow, node=1, steps=[s // 2 for s in range(20)])  # a step every 2 s
    found = findings(read_run(path))
    finding = only(found, "straggler-node")
    assert finding.evidence["node"] == 1 and finding.evidence["ratio"] == 2
    assert "thermal slowdown" in finding.sentence
    assert "Node 1: GPU 0 was slowed down" in " ".join(f.sentence for f in found)


def test_no_rule_matched_is_said_honestly() -> None:
    assert fd.NO_MATCH.startswith("No rule matched")


# -- real recorded runs: sysmetrics record over real workloads ---------------------------


def record(path: Path, code: str, *args: str) -> Run:
    """``sysmetrics record --interval 0.1 -- python -c CODE ARGS``, read back."""
    cmd = [sys.executable, "-m", "sysmetrics", "record", "--output", str(path)]
    cmd += ["--interval", "0.1", "--", sys.executable, "-c", code, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return read_run(path)


SPIN_EVERY_CPU = """
import multiprocessing, os, time
def spin():
    t = time.monotonic()
    while time.monotonic() - t < 3.0:
        pass
if __name__ == "__main__":
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = [multiprocessing.Process(target=spin) for _ in range(n)]
    for w in workers: w.start()
    for w in workers: w.join()
"""


@pytest.mark.serial
@pytest.mark.kernel
def test_a_recorded_run_spinning_every_cpu_is_cpu_bound(tmp_path: Path) -> None:
    """Every available CPU spun for 3 s: ``cpu-bound``; on a machine shared with other
    jobs (this one runs several test sessions at once) the job may get less than it asks
    for, and then the host's saturation is the finding (``contention``) instead."""
    recorded = record(tmp_path / "spin.jsonl", SPIN_EVERY_CPU)
    assert recorded.recordings[0].run["cpus"] == available_cpus()  # the run line says
    found = rules(findings(recorded))
    cpu = [round(v) for v in recorded.columns.get("cpu", []) if v == v]  # for a failure
    assert "cpu-bound" in found or "contention" in found, (found, cpu)
    assert "single-core" not in found and "stall" not in found


STALLS = """
import time, sysmetrics
t, i = time.monotonic(), 0
while time.monotonic() - t < 2.5:  # a step every 20 ms
    i += 1
    sysmetrics.step(i)
    time.sleep(0.02)
time.sleep(15)  # the step stops advancing: idle, as a deadlock is
for _ in range(50):
    i += 1
    sysmetrics.step(i)
    time.sleep(0.02)
"""


@pytest.mark.long
def test_a_recorded_run_that_stops_stepping_for_15_s_is_a_stall(tmp_path: Path) -> None:
    """A ~19 s run whose step stays put for 15 s while the process sleeps (idle)."""
    finding = only(findings(record(tmp_path / "stall.jsonl", STALLS)), "stall")
    assert 14.5 <= finding.evidence["seconds"] <= 15.5, finding
    assert finding.evidence["share"] > 0.7 and finding.evidence["ended_stalled"] == 0
    assert finding.evidence["cpu_percent_mean"] < fd.STALL_IDLE_PERCENT
    assert "a hang or a deadlock" in finding.sentence
    assert finding.span is not None and finding.span.axis == "step"


PACED = """
import sys, time, sysmetrics
pause = float(sys.argv[1])
for i in range(1, 2000):
    sysmetrics.step(i)
    time.sleep(pause)
    if i * pause >= 2.5:
        break
"""


def merged(runs: list[Run]) -> Run:
    """Several nodes' run files as one run, node ``k`` the ``k``-th file's samples.

    The form the multi-file report reads them into (``sysmetrics report A.jsonl B.jsonl``;
    ``read_run`` reads one file): each node's samples with their own clock and steps.
    """
    out = Run()
    for k, part in enumerate(runs):
        first = len(out.recordings)
        for rec in part.recordings:
            rec_run = {**rec.run, "node": k}
            out.recordings.append(runfile.Recording(rec_run, rec.end, len(out)))
        for j in range(len(part)):
            out.add(part.metrics(j), part.time[j], part.monotonic[j], part.step[j], k,
                    first + max(part.recording[j], 0))  # fmt: skip
    out.pad()
    return out


def test_two_recorded_nodes_one_slowed_name_the_straggler(tmp_path: Path) -> None:
    """Two simulated nodes (two recordings), node 1 stepping half as fast as node 0."""
    fast = record(tmp_path / "node0.jsonl", PACED, "0.04")
    slow = record(tmp_path / "node1.jsonl", PACED, "0.08")
    finding = only(findings(merged([fast, slow])), "straggler-node")
    assert finding.evidence["node"] == 1
    assert finding.evidence["ratio"] >= fd.STRAGGLER_RATIO, finding
    also_fast = record(tmp_path / "node2.jsonl", PACED, "0.04")  # two nodes at one pace
    assert "straggler-node" not in rules(findings(merged([fast, also_fast])))


def test_input_bound_on_the_time_axis_without_steps(tmp_path: Path) -> None:
    found = found_in(tmp_path, [waiting(50, cpu=97)] * 10, steps=[None] * 10)
    assert only(found, "input-bound").sentence.startswith(
        "The steps 0\N{EN DASH}9 s into the run spent 50 % of their time waiting for data"
    )


_KEYS = st.sampled_from(
    ["cpu", "memory", "proc.memory.percent", "disk.in", "step.seconds", "step.dataWaitPercent",
     "cpu.0.cpu_percent", "cpu.1.cpu_percent", "gpu.0.gpu", "gpu.process.0.gpu",
     "gpu.0.throttle.thermal", fd.SWAP_KEY, "node0/step.seconds", "node1/step.seconds",
     "node1/step.dataWaitPercent", "node0/cpu", "proc.cpu.threads"]
)  # fmt: skip
_NUMBERS = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False) | st.sampled_from([0.0])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(_KEYS, _NUMBERS, max_size=8),
            st.none() | st.floats(min_value=0, max_value=1e4, allow_nan=False),  # time
            st.none() | st.integers(min_value=-3, max_value=30),  # step
            st.none() | st.integers(min_value=0, max_value=2),  # node
        ),
        max_size=40,
    ),
    st.none() | st.floats(min_value=-2, max_value=64),  # the run line's cpus
)
def test_every_rule_takes_any_numbers(samples: list[Any], cpus: float | None) -> None:
    """Rules over arbitrary finite numbers, clocks that go back, steps that repeat or fall,
    interleaved nodes: findings or none, never an exception, evidence finite numbers."""
    run = Run()
    run.recordings.append(runfile.Recording({"cpus": cpus}, None, 0))
    for metrics, t, step, node in samples:
        run.add(metrics, t, t, step, node, 0)
    # Not padded: a live caller's run, built with add(), has columns shorter than the run
    # where the latest samples lack a key (regression: IndexError in the live findings).
    for finding in findings(run):
        assert finding.rule and finding.sentence
        assert all(isinstance(v, float) and v == v for v in finding.evidence.values()), finding


SLOW_DATASET = """
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset
from sysmetrics import SystemMonitor
from sysmetrics.sinks.jsonl import JsonlSink
from sysmetrics.steptime import StepClock

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.03)  # reading a sample: I/O, the CPU idle
        return torch.ones(4)

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
clock = StepClock()
monitor = SystemMonitor(interval=0.1)
monitor.step_timing = clock.read
sink = JsonlSink(monitor, sys.argv[1])
monitor.start()
step = 0
for _ in range(2):
    clock.restart()
    for batch in DataLoader(Slow(), batch_size=4, num_workers=0):
        clock.begin()
        loss = model(batch).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.01)  # the step's own work
        step += 1
        monitor.step = step
        clock.end(samples=len(batch))
monitor.stop()
sink.close()
"""


def test_a_real_loop_over_a_slow_dataset_is_input_bound(tmp_path: Path) -> None:
    """A real PyTorch loop whose dataset sleeps 30 ms a sample (4 a batch: ~120 ms) for
    10 ms of step: the real StepClock and monitor write step.dataWaitPercent (~90 %) into a
    real run file. (``record`` has no step keys until ``sysmetrics.batches`` lands; this
    uses the library as a callback does.)"""
    pytest.importorskip("torch")
    path = tmp_path / "slow.jsonl"
    done = subprocess.run([sys.executable, "-c", SLOW_DATASET, str(path)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    finding = only(findings(read_run(path)), "input-bound")
    assert finding.evidence["wait_percent"] > 60, finding
    assert finding.span is not None and finding.span.axis == "step"
    assert "waiting for data" in finding.sentence


SLOW_BATCHES = """
import time
import sysmetrics

def slow_loader():
    for i in range(40):
        time.sleep(0.06)  # the next batch: I/O, the CPU idle
        yield [i] * 4

step = 0
for batch in sysmetrics.batches(slow_loader()):
    time.sleep(0.01)  # the step's own work
    step += 1
    sysmetrics.step(step)
"""


@pytest.mark.skipif(
    not hasattr(sysmetrics, "batches"),
    reason="needs sysmetrics.batches (step keys under record), merged on main after this test",
)
def test_a_recorded_plain_loop_over_a_slow_loader_is_input_bound(tmp_path: Path) -> None:
    """``sysmetrics record`` of a plain loop over a loader that takes 60 ms a batch for a
    10 ms step: the step keys say ~85 % waiting for data, with the CPU idle."""
    finding = only(findings(record(tmp_path / "slow.jsonl", SLOW_BATCHES)), "input-bound")
    assert finding.evidence["wait_percent"] > 60, finding
    assert "too few workers" in finding.sentence, finding


def test_the_first_steps_warm_up_is_not_slow_steps(tmp_path: Path) -> None:
    """Regression: a real 16-step Keras run said "Steps took over 3 times the run's median
    7.71 ms per step in 1 of 16 samples ... step 5": the first sample's warm-up."""
    seconds = [0.036] + [0.0077] * 15
    assert not [f for f in found_in(tmp_path, [{"step.seconds": s} for s in seconds])
                if f.rule == "slow-steps"]  # fmt: skip


def test_what_rules_derive_from_a_run_is_made_once_per_findings_call_and_not_kept() -> None:
    """``_base.once`` inside ``memo()`` (one ``findings()`` call): ``_steps``, ``parts`` and
    ``host_cpu`` are made once however many rules use them; outside it, or in the next
    call (a live caller's run has grown), they are made again: nothing kept on the run."""
    from sysmetrics.findings import _base

    run = fd.Run()
    for n in range(5):
        run.add({"cpu": 1.0}, 1e9 + n, float(n), n)
    made: list[int] = []

    def make(r: fd.Run) -> int:
        made.append(len(r))
        return len(r)

    with _base.memo():
        assert _base.once("x", run, make) == 5 and _base.once("x", run, make) == 5
        other = fd.Run()
        assert _base.once("x", other, make) == 0  # another run: its own
    assert made == [5, 0]
    run.add({"cpu": 1.0}, 1e9 + 5, 5.0, 5)
    assert _base.once("x", run, make) == 6 and _base.once("x", run, make) == 6
    assert made == [5, 0, 6, 6]  # outside memo(): made at each call
    assert _base._MEMO.get() is None
    assert fd.findings(run) == fd.findings(run)
