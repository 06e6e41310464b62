from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmetrics import findings as fd
from sysmetrics import runfile
from sysmetrics.findings import Finding, findings, read_run


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
    assert rules(found) == ["input-bound"]
    assert found[0].evidence["gpu_mean_percent"] == 20
    assert found[0].span == fd.Span("step", 0, 9)


def test_not_input_bound_when_gpu_busy_or_cpu_idle(tmp_path: Path) -> None:
    assert rules(run(tmp_path, [used(90, cpu=95) for _ in range(10)])) == []
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
