"""``make gpu-check`` without a GPU: its parser, comparison, attribution and summary.

This machine has no NVIDIA GPU, so the check itself only exits at once here (tested as a
real subprocess). Its GPU-independent parts run over captured ``nvidia-smi`` output
(``tests/fixtures/nvidia-smi/``, sources in its README) against run files built with
sysmetrics' own ``Run`` (the reader ``read_run`` returns), in both directions: values
within the issue's tolerances pass, values just outside fail. Where a test needs
``nvidia-smi`` itself, a stand-in script on ``PATH`` prints a captured output (it models
the executable's stdout and exit status only, not the driver).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmetrics.findings import Run

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
import gpu_check_logic as logic  # noqa: E402
from gpu_check_logic import Check, SmiParseError, SmiReading  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"
RTX2080_FIELDS = [
    "power.limit",
    "power.min_limit",
    "power.max_limit",
    "memory.total",
    "vbios_version",
    "driver_version",
    "name",
    "gpu_uuid",
    "power.draw",
    "temperature.gpu",
    "temperature.memory",
    "clocks.current.graphics",
    "clocks.sm",
    "clocks.mem",
    "utilization.gpu",
    "utilization.memory",
    "fan.speed",
    "pcie.link.width.current",
    "pstate",
]
T0 = 1_795_000_000.0  # s since the epoch: the synthetic run's start


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def stand_in(tmp_path: Path, stdout: str, status: int = 0) -> Path:
    """A folder with an ``nvidia-smi`` that prints ``stdout`` and exits with ``status``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    out = bin_dir / "stdout"
    out.write_text(stdout)
    # shell builtins only: the check may run it with nothing else on PATH
    exe.write_text(
        f'#!/bin/sh\nwhile IFS= read -r l; do printf "%s\\n" "$l"; done < "{out}"\nexit {status}\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bin_dir


# -- without a GPU, the check exits at once ------------------------------------------


def run_check(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path / "o")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)


def test_without_nvidia_smi_it_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_check(tmp_path, str(empty))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "gpu-check: no NVIDIA GPU on this machine (nvidia-smi not found): nothing to check"
    ]
    assert r.stderr == ""
    assert not (tmp_path / "o").exists()  # nothing made, nothing installed


@pytest.mark.parametrize(
    ("said", "status"),
    [
        ("No devices were found\n", 6),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            9,
        ),
    ],
)
def test_nvidia_smi_without_a_gpu_is_no_gpu(tmp_path: Path, said: str, status: int) -> None:
    """nvidia-smi's own messages where the driver sees no GPU, or is not loaded."""
    r = run_check(tmp_path, str(stand_in(tmp_path, said, status)))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"gpu-check: no NVIDIA GPU on this machine (nvidia-smi -L: {said.strip()}): "
        "nothing to check"
    ]


def test_gpu_present_reads_the_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-9d0e0f5a-1c2b-4e3d-8f7a-6b5c4d3e2f1a)\n"
    monkeypatch.setenv("PATH", str(stand_in(tmp_path, listed)))
    assert gpu_check.gpu_present() == (True, listed.strip())


# -- parsing captured output ----------------------------------------------------------


def test_parse_the_rtx2080_capture() -> None:
    (row,) = logic.parse_query(fixture("rtx2080_query.csv"), RTX2080_FIELDS)
    assert row["power.draw"] == 176.98
    assert row["temperature.gpu"] == 45.0
    assert row["temperature.memory"] is None  # "N/A": a GeForce has no memory sensor
    assert (row["clocks.sm"], row["clocks.mem"], row["utilization.gpu"]) == (1965, 7199, 86)
    assert row["name"] == "GeForce RTX 2080"
    assert row["vbios_version"] == "90.04.23.00.5F"
    assert row["pstate"] == "P2"


def test_parse_one_line_per_gpu() -> None:
    rows = logic.parse_query(fixture("power_draw_3gpus.csv"), ["power.draw"])
    assert [r["power.draw"] for r in rows] == [133.91, 189.84, 104.34]
    two = logic.readings(fixture("query_two_gpus.csv"))
    assert two == [
        {"utilization.gpu": 86.0, "memory.used": None, "temperature.gpu": 45.0,
         "power.draw": 176.98, "clocks.sm": 1965.0, "clocks.mem": 7199.0},
        {"utilization.gpu": 100.0, "memory.used": 9941.0, "temperature.gpu": 85.0,
         "power.draw": 208.36, "clocks.sm": 1545.0, "clocks.mem": 6800.0},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "marker",
    ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]",
     "[GPU is lost]"],
)  # fmt: skip
def test_not_available_markers_are_none(marker: str) -> None:
    line = fixture("query_two_gpus.csv").splitlines()[1].replace("208.36", marker)
    (row,) = logic.readings(line + "\n")
    assert row["power.draw"] is None and row["clocks.sm"] == 1545.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("No devices were found\n", "1 fields where 6 were asked for"),
        ("86, 9941, 45, 176.98, 1965\n", "5 fields where 6"),
        ("86, 9941, 45, 176.98 W, 1965, 7199\n", "power.draw: '176.98 W' is not a number"),
        ("86, 9941, 45, inf, 1965, 7199\n", "power.draw: 'inf' is not a number"),
        ("1, 2, 3, 4, 5, 6\n" * 65, "more than 64 lines"),
        ("x" * (1 << 20 | 1), "over 1048576"),
        ("9" * 300, "a field of 300 characters"),
    ],
)
def test_what_the_query_never_prints_is_an_error(text: str, message: str) -> None:
    fields = ["power.draw"] if text.startswith("9" * 300) else logic.QUERY_FIELDS
    with pytest.raises(SmiParseError, match=message.replace("(", r"\(")):
        if fields == logic.QUERY_FIELDS:
            logic.readings(text)
        else:
            logic.parse_query(text, fields)


def _mutations(text: str) -> st.SearchStrategy[str]:
    lines = text.splitlines()
    tokens = ["[N/A]", "[Not Supported]", "nan", "-1", "1e400", "", ",", "\x00", "é", "9" * 300]
    return st.one_of(
        st.text(max_size=400),
        st.builds(lambda n: text[:n], st.integers(0, len(text))),
        st.builds(
            lambda i, tok: text.replace(text.split(",")[i % len(text.split(","))], tok, 1),
            st.integers(0, 50), st.sampled_from(tokens),
        ),
        st.builds(lambda k: "\n".join(lines * k), st.integers(0, 80)),
        st.lists(st.sampled_from([*lines, *tokens]), max_size=70).map("\n".join),
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(_mutations(fixture("query_two_gpus.csv")), _mutations(fixture("rtx2080_query.csv")))
)
def test_parsers_never_raise_anything_else_and_stay_bounded(text: str) -> None:
    for fields in (logic.QUERY_FIELDS, RTX2080_FIELDS):
        try:
            rows = logic.parse_query(text, fields)
        except SmiParseError:
            continue
        assert len(rows) <= logic.MAX_GPUS
        for row in rows:
            assert list(row) == list(fields)
            for v in row.values():
                assert (
                    v is None
                    or (isinstance(v, float) and v == v and abs(v) != float("inf"))
                    or (isinstance(v, str) and 0 < len(v) <= logic.MAX_FIELD)
                )
    try:
        numbers = logic.readings(text)
    except SmiParseError:
        return
    assert all(v is None or isinstance(v, float) for row in numbers for v in row.values())


# -- comparing with sysmetrics' samples -----------------------------------------------

GIB = 2**30


def agreeing(row: dict[str, float | None]) -> dict[str, float]:
    """sysmetrics' gpu.{i}.* values that nvidia-smi's ``row`` should match (bytes, not MiB)."""
    out = {}
    for name, value in row.items():
        if value is not None:
            suffix, factor = logic.SMI_TO_KEY[name]
            out[suffix] = value * factor
    return out


def make_run(per_gpu: list[dict[str, float]], seconds: float = 30.0, interval: float = 0.5,
             extra: dict[str, float] | None = None) -> Run:  # fmt: skip
    """A run file of ``seconds`` at ``interval``, stepped from 1 s on, steady values."""
    run = Run()
    n = int(seconds / interval)
    for j in range(n + 1):
        t = T0 + j * interval
        metrics = {f"gpu.{i}.{k}": v for i, values in enumerate(per_gpu) for k, v in values.items()}
        metrics.update(extra or {})
        run.add(metrics, time=t, monotonic=t - T0, step=j if t >= T0 + 1 else None)
    return run


def smi_series(rows: list[dict[str, float | None]], times: list[float]) -> list[SmiReading]:
    return [SmiReading(t, rows) for t in times]


ROWS = logic.readings(fixture("query_two_gpus.csv"))
TIMES = [T0 + t for t in (8.1, 10.3, 12.6, 14.2, 20.9)]


def judge(run: Run, readings: list[SmiReading]) -> dict[str, Check]:
    pairs = logic.compare(readings, run, logic.steady_window(run))
    return {c.name.split(": ")[1]: c for c in logic.judge_pairs("t", pairs, gpus=[0, 1])}


def test_steady_window() -> None:
    run = make_run([agreeing(ROWS[0])])
    assert logic.steady_window(run) == (T0 + 1 + 5, T0 + 30 - 2)
    assert logic.steady_window(Run()) == (0.0, 0.0)


def test_values_within_tolerance_pass() -> None:
    """Inside each tolerance, at its edge: 10 points, 1 %, 10 %, equal clocks, 1 °C."""
    near = []
    for row in ROWS:
        values = agreeing(row)
        values["gpu"] -= 10.0
        values["temp"] += 1.0
        values["powerWatts"] *= 1.099
        if "memoryAllocatedBytes" in values:
            values["memoryAllocatedBytes"] *= 1.0099
        near.append(values)
    checks = judge(make_run(near), smi_series(ROWS, TIMES))
    assert [c.ok for c in checks.values()] == [True] * 6, {n: c.detail for n, c in checks.items()}
    assert checks["memory.used"].numbers["pairs"] == 5  # GPU 1 only: GPU 0's is [N/A]
    assert checks["clocks.sm"].numbers["pairs"] == 10


@pytest.mark.parametrize(
    ("suffix", "change", "failing"),
    [
        ("gpu", lambda v: v - 10.5, "utilization.gpu"),
        ("memoryAllocatedBytes", lambda v: v * 1.0102, "memory.used"),
        ("temp", lambda v: v + 2, "temperature.gpu"),
        ("powerWatts", lambda v: v * 0.89, "power.draw"),
        ("smClock", lambda v: v + 15, "clocks.sm"),
        ("memoryClock", lambda v: v - 1, "clocks.mem"),
    ],
)
def test_values_outside_tolerance_fail(suffix: str, change: object, failing: str) -> None:
    per_gpu = [agreeing(r) for r in ROWS]
    per_gpu[1][suffix] = change(per_gpu[1][suffix])  # type: ignore[operator]
    checks = judge(make_run(per_gpu), smi_series(ROWS, TIMES))
    assert {n for n, c in checks.items() if not c.ok} == {failing}
    # GPU 0's readings agree, GPU 1's do not (GPU 0 has no memory.used: nothing compared)
    assert checks[failing].numbers["agree"] == (0 if failing == "memory.used" else 5)


def test_a_value_that_moved_between_samples_agrees_within_their_span() -> None:
    """nvidia-smi's clock read between a sample at 1965 and the next at 1980 MHz."""
    run = Run()
    for j in range(61):
        t = T0 + j * 0.5
        sm = 1965.0 if t < T0 + 10.2 else 1980.0
        run.add({"gpu.0.smClock": sm}, time=t, step=j)
    row = {"clocks.sm": 1980.0}
    pairs = logic.compare([SmiReading(T0 + 10.1, [row])], run, (T0, T0 + 30))
    assert pairs[0].sysmetrics == 1965.0 and pairs[0].ok  # nearest is 1965, the next 1980
    row = {"clocks.sm": 1995.0}
    pairs = logic.compare([SmiReading(T0 + 10.1, [row])], run, (T0, T0 + 30))
    assert not pairs[0].ok


def test_power_read_while_it_ramped_agrees_if_between_the_samples() -> None:
    """100 W at one sample, 200 W at the next: nvidia-smi's 150 W in between agrees."""
    run = Run()
    for j in range(61):
        t = T0 + j * 0.5
        run.add({"gpu.0.powerWatts": 100.0 if t < T0 + 10.2 else 200.0}, time=t, step=j)
    ok, high = (
        logic.compare([SmiReading(T0 + 10.05, [{"power.draw": w}])], run, (T0, T0 + 30))[0]
        for w in (150.0, 240.0)
    )
    assert (ok.sysmetrics, ok.low, ok.high, ok.ok) == (100.0, 100.0, 200.0, True)
    assert not high.ok  # above both samples by more than 10 %


def test_no_sample_near_a_reading_fails() -> None:
    run = make_run([agreeing(ROWS[1])], interval=5.0)
    pairs = logic.compare([SmiReading(T0 + 12.5, [ROWS[1]])], run, (T0, T0 + 30), max_gap=2.0)
    assert all(p.sysmetrics is None and not p.ok for p in pairs)
    (check, *_) = logic.judge_pairs("t", pairs)
    assert not check.ok
    assert (
        check.detail.startswith("0/1 readings agree") and "1 without a sysmetrics" in check.detail
    )


def test_a_key_sysmetrics_lacks_fails_and_readings_outside_the_window_are_not_compared() -> None:
    values = agreeing(ROWS[1])
    del values["powerWatts"]
    run = make_run([values])
    checks = judge(run, smi_series([ROWS[1]], TIMES))
    assert (
        not checks["power.draw"].ok and "without a sysmetrics sample" in checks["power.draw"].detail
    )
    assert checks["clocks.sm"].ok
    early = judge(run, smi_series([ROWS[1]], [T0 + 2.0, T0 + 29.5]))  # before settle, after tail
    assert all(not c.ok and c.detail == "no nvidia-smi reading to compare" for c in early.values())


def test_pairs_table_shows_both_numbers_side_by_side() -> None:
    per_gpu = [agreeing(r) for r in ROWS]
    per_gpu[1]["smClock"] += 15
    pairs = logic.compare(smi_series(ROWS, TIMES[:1]), make_run(per_gpu), (T0, T0 + 30))
    lines = logic.pairs_table(pairs).splitlines()
    assert lines[0].split() == ["time", "gpu", "field", "nvidia-smi", "sysmetrics", "dt", "s", "ok"]
    sm1 = next(line for line in lines if line.split()[1:3] == ["1", "clocks.sm"])
    assert sm1.split()[3:] == ["1545", "1560", "-0.10", "NO"]
    assert len(lines) == 1 + 5 + 6


# -- attribution ------------------------------------------------------------------------


def attributed(gpus_with: list[int], stray: tuple[int, int] | None = None,
               gap: int | None = None) -> Run:  # fmt: skip
    """61 samples 0.5 s apart; ``stray``: (GPU, sample) with a process key; ``gap``: a
    sample without the job's keys."""
    run = Run()
    for j in range(61):
        t = T0 + j * 0.5
        m = {f"gpu.{i}.gpu": 50.0 for i in range(2)}
        for i in gpus_with:
            if j != gap:
                m[f"gpu.process.{i}.gpu"] = 50.0
        if stray and j == stray[1]:
            m[f"gpu.process.{stray[0]}.gpu"] = 1.0
        run.add(m, time=t, step=j)
    return run


def test_attribution_passes_for_the_jobs_gpu_only() -> None:
    checks = logic.attribution(attributed([0]), [0], 2, (T0 + 6, T0 + 28))
    assert [c.ok for c in checks] == [True, True], [c.detail for c in checks]
    (one,) = [
        c for c in logic.attribution(attributed([0]), [0], 1, (T0 + 6, T0 + 28)) if c.ok is None
    ]
    assert "one GPU only" in one.detail


def test_attribution_fails_for_another_gpu_or_a_gap() -> None:
    stray = logic.attribution(attributed([0], stray=(1, 3)), [0], 2, (T0 + 6, T0 + 28))
    assert [c.ok for c in stray] == [True, False] and stray[1].detail == "in 1/61 samples"
    gap = logic.attribution(attributed([0], gap=30), [0], 2, (T0 + 6, T0 + 28))
    assert [c.ok for c in gap] == [False, True] and gap[0].detail.startswith("in 44/45 samples")
    outside = logic.attribution(attributed([0], gap=5), [0], 2, (T0 + 6, T0 + 28))
    assert [c.ok for c in outside] == [True, True]  # before the steady window: not judged
    none = logic.attribution(attributed([]), [0], 2, (T0 + 6, T0 + 28))
    assert [c.ok for c in none] == [False, True]
    assert logic.attribution(Run(), [0], 2, (T0, T0))[0].ok is False


def intruded(job: float, total: float) -> Run:
    run = Run()
    for j in range(61):
        t = T0 + j * 0.5
        run.add({"gpu.process.0.processMemoryAllocatedBytes": job,
                 "gpu.0.memoryAllocatedBytes": total}, time=t, step=j)  # fmt: skip
    return run


def test_another_process_not_counted_passes_and_counted_fails() -> None:
    window = (T0 + 10, T0 + 25)
    ok = logic.intruder(intruded(4 * GIB, 6.6 * GIB), 0, 2 * GIB, window)
    assert ok.ok and ok.numbers == {"samples": 31, "bad": 0}
    counted = logic.intruder(intruded(6.5 * GIB, 6.6 * GIB), 0, 2 * GIB, window)
    assert counted.ok is False and counted.numbers["bad"] == 31
    assert "job 6.50 GiB, GPU in use 6.60 GiB, other process 2.00 GiB" in counted.detail
    assert logic.intruder(intruded(0, 6.6 * GIB), 0, 2 * GIB, window).ok is False
    assert logic.intruder(Run(), 0, 2 * GIB, window).ok is False
    assert logic.intruder(intruded(4 * GIB, 6.6 * GIB), 0, 2 * GIB, (0, 1)).ok is False


# -- summary and exit status ----------------------------------------------------------


def test_summary_and_exit_status() -> None:
    passed, skipped = Check("a", True, "fine"), Check("keras: training", None, "skip: no keras")
    failed = Check("t: clocks.sm", False, "4/5 readings agree")
    assert logic.exit_code([passed, skipped]) == 0
    assert logic.exit_code([passed, failed, skipped]) == 1
    assert logic.exit_code([]) == 1
    table = logic.summary_table([passed, failed, skipped]).splitlines()
    assert table[2].split()[:4] == ["t:", "clocks.sm", "FAIL", "4/5"]
    assert table[-1] == "1 passed, 1 failed, 1 skipped"
    assert failed.as_json() == {"name": "t: clocks.sm", "status": "fail",
                                "detail": "4/5 readings agree"}  # fmt: skip


def test_finish_writes_the_results_and_returns_the_status(tmp_path: Path) -> None:
    checks = [Check("a", True, "fine"), Check("b", False, "bad", {"pairs": 3})]
    assert gpu_check.finish(tmp_path, checks, time.time(), "GPU 0: test") == 1
    import json

    assert json.loads((tmp_path / "checks.json").read_text())[1] == {
        "name": "b", "status": "fail", "detail": "bad", "pairs": 3}  # fmt: skip
    assert (tmp_path / "summary.txt").read_text().endswith("1 passed, 1 failed, 0 skipped\n")


# -- the bounded phases and the nvidia-smi poller (real processes) -------------------


def test_a_phase_that_overruns_is_killed_and_fails_with_its_reason(tmp_path: Path) -> None:
    runner = gpu_check.Runner(tmp_path, time.time() + 600, dict(os.environ))
    start = time.monotonic()
    ph = runner.run("sleeper", ["sh", "-c", "sleep 30 & sleep 30"], 1.0, tmp_path / "s.log")
    assert time.monotonic() - start < 10
    assert ph.rc is None and ph.reason == "overran its 1 s bound: killed"
    done = runner.run("quick", ["sh", "-c", "echo hi; exit 4"], 30, tmp_path / "q.log")
    assert (done.rc, done.reason, done.tail()) == (
        4,
        "exit status 4",
        "$ sh -c echo hi; exit 4 | hi",
    )
    late = gpu_check.Runner(tmp_path, time.time() + 2, dict(os.environ))
    assert late.run("x", ["true"], 30, tmp_path / "x.log").reason.startswith("not run")


def test_a_skipped_framework_is_a_skip_with_its_reason(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("$ python ...\nskip: keras is not installed (No module named 'keras')\n")
    ph = gpu_check.Phase("keras", 3, 1.0, log)
    poller = gpu_check.SmiPoller(tmp_path / "smi.txt")
    (check,) = gpu_check.judge_training("keras", ph, tmp_path, poller, None)
    assert (
        check.ok is None
        and check.detail == "skip: keras is not installed (No module named 'keras')"
    )


def test_poller_reads_nvidia_smi_while_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{stand_in(tmp_path, fixture('query_two_gpus.csv'))}:/usr/bin:/bin")
    with gpu_check.SmiPoller(tmp_path / "smi.txt", period=0.05) as smi:
        deadline = time.monotonic() + 10
        while len(smi.readings) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(smi.readings) >= 3 and not smi.errors
    assert smi.readings[0].gpus == ROWS
    lines = (tmp_path / "smi.txt").read_text().splitlines()
    assert lines[0].startswith("# time") and lines[1].endswith(
        ", 86, [N/A], 45, 176.98, 1965, 7199"
    )


def test_the_gpu_marked_tests_are_found() -> None:
    assert "tests/test_nvidia.py" in gpu_check.gpu_marked_tests()


def _h100(workload: str) -> tuple[list[SmiReading], Run]:
    """A real H100 capture (gpu-check, 2026-11-27, driver 580.159.04): nvidia-smi's readings
    every 2 s during one of the check's trainings, and sysmetrics' gpu.0.gpu, powerWatts
    and temp samples of the same run (0.5 s apart), as the check's files had them.
    """
    smi = []
    for line in fixture(f"h100_{workload}_smi.txt").splitlines():
        if line and not line.startswith("#"):
            t, rest = line.split(", ", 1)
            smi.append(SmiReading(float(t), logic.readings(rest)))
    run = Run()
    for line in fixture(f"h100_{workload}_sysmetrics.csv").splitlines():
        if line and not line.startswith("#"):
            t, step, gpu, watts, temp = line.split(", ")
            values = {"gpu.0.gpu": gpu, "gpu.0.powerWatts": watts, "gpu.0.temp": temp}
            run.add({k: float(v) for k, v in values.items()}, time=float(t),
                    monotonic=float(t), step=None if step == "None" else int(step))  # fmt: skip
    return smi, run


FIELDS = ["utilization.gpu", "power.draw", "temperature.gpu"]


def test_an_isolated_nvidia_smi_utilization_glitch_is_left_out_and_said() -> None:
    smi, run = _h100("transformers")
    pairs = logic.compare(smi, run, logic.steady_window(run), max_gap=1.5)
    util = [p for p in pairs if p.field == "utilization.gpu"]
    assert [p.smi for p in util if not p.ok] == [0.0]  # nvidia-smi's 0 amid 37-53 %
    util_check, power, temp = logic.judge_pairs("t", pairs, fields=FIELDS, smi=smi)
    assert util_check.ok and power.ok and temp.ok
    assert "left out: nvidia-smi's 0 at" in util_check.detail
    assert util_check.numbers["agree"] == len(util) - 1


def test_an_isolated_temperature_dip_is_left_out() -> None:
    smi, run = _h100("record")
    pairs = logic.compare(smi, run, logic.steady_window(run), max_gap=1.5)
    bad = [(p.field, p.smi, p.sysmetrics) for p in pairs if not p.ok and p.field in FIELDS]
    assert bad == [("temperature.gpu", 64.0, 67.0)]  # nvidia-smi read 66, 64, 67
    (temp,) = logic.judge_pairs("t", pairs, fields=["temperature.gpu"], smi=smi)
    assert temp.ok and "left out: nvidia-smi's 64" in temp.detail


def test_utilization_of_a_bursty_load_is_judged_within_its_own_variation() -> None:
    smi, run = _h100("lightning")  # Lightning's short steps: sysmetrics read 0 to 56 %
    window = logic.steady_window(run)
    steady = logic.compare(smi, run, window, max_gap=1.5)
    bad = [(p.field, p.smi, p.sysmetrics) for p in steady if not p.ok and p.field in FIELDS]
    assert bad == [("utilization.gpu", 54.0, 30.0)]
    pairs = logic.compare(smi, run, window, max_gap=1.5, varying=logic.VARYING)
    (util,) = logic.judge_pairs("t", pairs, fields=["utilization.gpu"], smi=smi)
    assert util.ok and "the load varied: widened to" in util.detail
    widened = next(p.tolerance for p in pairs if p.tolerance is not None)
    assert 10.0 < widened.absolute < 40.0
    # the pairs, widened tolerance included, are written as JSON (compare.json)
    written = json.loads(logic.pairs_json(pairs))
    assert len(written) == len(pairs)
    assert {"absolute": widened.absolute, "relative": widened.relative} in [
        row["tolerance"] for row in written
    ]
    # a steady load keeps the steady tolerance
    tol = logic.TOLERANCES["utilization.gpu"]
    steady_values = [50.0, 53.0, 49.0, 51.0, 55.0, 50.0]
    assert logic.widened(tol, list(range(6)), steady_values, (0.0, 5.0)) is tol


def test_a_utilization_disagreement_that_is_no_isolated_glitch_still_fails() -> None:
    smi, run = _h100("transformers")
    window = logic.steady_window(run)
    inside = [r for r in smi if window[0] <= r.time <= window[1]]
    glitch = next(
        j for j, r in enumerate(smi) if r.gpus[0]["utilization.gpu"] == 0.0 and r in inside
    )

    def reading(j: int, util: float) -> SmiReading:
        return SmiReading(smi[j].time, [{**smi[j].gpus[0], "utilization.gpu": util}])

    twice = list(smi)  # the reading after the glitch reads 0 too: two in a row
    twice[glitch + 1] = reading(glitch + 1, 0.0)
    moved = list(smi)  # the load moved: the reading after the 0 is 20, unlike the one before
    moved[glitch + 1] = reading(glitch + 1, 20.0)
    for readings in (twice, moved):
        pairs = logic.compare(readings, run, window, max_gap=1.5)
        (check,) = logic.judge_pairs("t", pairs, fields=["utilization.gpu"], smi=readings)
        assert not check.ok and "left out" not in check.detail
