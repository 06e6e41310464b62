"""``memory-creep`` (:mod:`sysmetrics.findings.memory`): real loops under ``sysmetrics record``.

One loop leaks a known number of bytes a step: the finding names the creep, and its
projection of the step at which the job reaches its memory limit is within 20 % of the
truth (the leak rate and the limit). One warms up (its memory rises over the first 40 %
of its steps) and then holds: quiet. Each recording is a few seconds; the assertions are
on steps, not on how fast a loaded machine ran them (the time projection is checked
against the run's own pace), so they run in the parallel pass (3 runs of 3 passed beside
it, 2026-11-28). And ``hypothesis`` over the slope fit's inputs.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmetrics import runfile
from sysmetrics.findings import findings
from sysmetrics.findings.memory import fit
from sysmetrics.runview import RunView

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc (PSS)")

MIB = 1024**2
LEAK = 2 * MIB  # bytes kept each step
STEPS = 300
PAUSE = 0.02  # s a step sleeps

LOOP = """
import sys, time
import sysmetrics

leak, steps, until = (int(a) for a in sys.argv[1:4])
pause = float(sys.argv[4])
keep = []
for i in range(1, steps + 1):
    if i <= until:
        keep.append(b"\\x01" * leak)  # written, so resident: it counts in the PSS
    time.sleep(pause)
    sysmetrics.step(i)
"""


def record(tmp_path: Path, until: int) -> runfile.Run:
    run = tmp_path / "run.jsonl"
    loop = tmp_path / "loop.py"
    loop.write_text(LOOP)
    cmd = [sys.executable, "-m", "sysmetrics", "record", "-o", str(run), "--interval", "0.1",
           "--no-findings", "--", sys.executable, str(loop), str(LEAK), str(STEPS), str(until),
           str(PAUSE)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return runfile.read_run(run)


def limit_mib() -> float:
    """The memory available to a job here: the cgroup's limit where one is set, else RAM."""
    total = float(psutil.virtual_memory().total)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < total:
            total = float(text)
        break
    return total / MIB


def test_a_leaking_loop_creeps_and_its_projection_is_within_20_percent(tmp_path: Path) -> None:
    run = record(tmp_path, until=STEPS)
    found = [f for f in findings(run) if f.rule == "memory-creep"]
    assert [f.subject for f in found] == [("resource", "memory", "", None)], found
    (creep,) = found
    e = creep.evidence
    assert e["slope_mib_per_step"] == pytest.approx(LEAK / MIB, rel=0.2)
    assert e["limit_mib"] == pytest.approx(limit_mib(), rel=0.01)
    # the truth: from the last step's PSS, the leak rate to the limit
    pss = run.columns["proc.memory.pssMB"]
    last = max(j for j, s in enumerate(run.step) if s is not None and pss[j] == pss[j])
    step = run.step[last]
    assert step is not None
    truth = step + (limit_mib() - pss[last]) / (LEAK / MIB)
    assert e["limit_step"] == pytest.approx(truth, rel=0.2)
    # in time, at the run's own pace (s per step between its first and last step)
    pace = RunView(run).median_step
    assert pace is not None and pace >= PAUSE
    assert e["limit_seconds"] == pytest.approx((truth - step) * pace, rel=0.2)
    said = creep.sentence
    assert said.startswith("The job's memory (") and " grows steadily by " in said, said
    assert " limit around step " in said and ", in about " in said, said


def test_a_loop_that_warms_up_then_plateaus_is_quiet(tmp_path: Path) -> None:
    run = record(tmp_path, until=STEPS * 2 // 5)  # rises over 40 % of the steps, then holds
    rss = [v for j, v in enumerate(run.columns["proc.memory.rssMB"]) if run.step[j] and v == v]
    assert max(rss) - min(rss) >= 0.8 * (STEPS * 2 // 5) * LEAK / MIB  # it did rise
    assert [f for f in findings(run) if f.rule == "memory-creep"] == []


# -- the fit -------------------------------------------------------------------------------

steps = st.lists(st.integers(0, 10**7), min_size=3, max_size=60, unique=True)
numbers = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(steps, numbers, numbers)
def test_a_line_is_fitted_exactly(xs: list[int], slope: float, intercept: float) -> None:
    ys = [intercept + slope * x for x in xs]
    line = fit(xs, ys)
    scale = max(abs(y) for y in ys) + 1.0
    assert line.n == len(xs)
    assert line.slope == pytest.approx(slope, abs=1e-9 * scale / (max(xs) - min(xs)))
    assert 0.0 <= line.stderr <= 1e-9 * scale
    assert line.at(xs[0]) == pytest.approx(ys[0], abs=1e-7 * scale)


@settings(max_examples=200, deadline=None)
@given(steps, st.lists(numbers, min_size=60, max_size=60), numbers, st.floats(0.001, 1e3))
def test_the_fit_moves_with_its_inputs(
    xs: list[int], noise: list[float], shift: float, factor: float
) -> None:
    """Shifting the values leaves the slope and its error; scaling them scales both;
    shifting the steps leaves both; the error is never negative, and finite."""
    ys = noise[: len(xs)]
    line = fit(xs, ys)
    assert line.stderr >= 0 and math.isfinite(line.stderr) and math.isfinite(line.slope)
    spread = max(abs(y) for y in ys) + 1.0
    tol = 1e-9 * spread / (max(xs) - min(xs)) * (1 + abs(shift) / spread)
    moved = fit(xs, [y + shift for y in ys])
    assert moved.slope == pytest.approx(line.slope, abs=tol)
    assert moved.stderr == pytest.approx(line.stderr, rel=1e-6, abs=tol)
    scaled = fit(xs, [y * factor for y in ys])
    assert scaled.slope == pytest.approx(line.slope * factor, rel=1e-6, abs=tol * factor)
    assert scaled.stderr == pytest.approx(line.stderr * factor, rel=1e-6, abs=tol * factor)
    later = fit([x + 1000 for x in xs], ys)
    assert later.slope == pytest.approx(line.slope, rel=1e-6, abs=tol)


@given(st.integers(1, 1000), numbers)
def test_degenerate_inputs(x: int, y: float) -> None:
    """One step only: no slope to speak of (0, an infinite error); two points: no error."""
    same = fit([x, x, x], [y, y + 1, y + 2])
    assert (same.slope, same.stderr) == (0.0, math.inf)
    two = fit([x, x + 1], [y, y + 3])
    assert two.slope == pytest.approx(3.0) and two.stderr == math.inf


def test_a_gpu_whose_pytorch_memory_creeps_is_named_with_its_projection(tmp_path: Path) -> None:
    """GPU 0's ``torch.allocatedBytes`` grows 4 MiB a step (a tensor kept each step) while
    its ``reservedBytes`` holds after the allocator's warm-up: one finding, GPU 0's
    allocated memory, projected to the GPU's 80 GiB (its bytes in use at its % in use)."""
    from tests.rule_examples import recording

    gib = 1024**3
    samples = []
    for n in range(40):
        allocated = 2 * gib + 4 * MIB * 10 * n  # 10 steps a sample
        samples.append({
            "gpu.0.torch.allocatedBytes": float(allocated),
            "gpu.0.torch.reservedBytes": float(min(n, 8) * gib + 20 * gib),
            "gpu.0.memoryAllocatedBytes": float(allocated + 20 * gib),
            "gpu.0.memoryAllocated": 100.0 * (allocated + 20 * gib) / (80 * gib),
            "step.seconds": 0.5,
        })  # fmt: skip
    path = tmp_path / "gpu.jsonl"
    path.write_bytes(recording(samples, steps=[10 * n for n in range(40)]))
    (creep,) = [f for f in findings(runfile.read_run(path)) if f.rule == "memory-creep"]
    assert creep.subject == ("gpu", "0", "allocated", None)
    assert creep.evidence["slope_mib_per_step"] == pytest.approx(4.0)
    assert creep.evidence["limit_mib"] == pytest.approx(80 * 1024)
    # at step 380 (the samples at the last step, 390, may be the job ending: left out):
    # 2,048 + 1,520 MiB allocated, 20 GiB more in use on the device: the 80 GiB are
    # reached in (81,920 - 24,048) MiB / 4 MiB = 14,468 steps more, 0.5 s each
    assert creep.evidence["limit_step"] == pytest.approx(380 + 14468)
    assert creep.evidence["limit_seconds"] == pytest.approx(14468 * 0.5)
    assert creep.sentence == (
        "GPU 0's memory in PyTorch tensors (allocated) grows steadily by 4 MiB per step "
        "(\N{PLUS-MINUS SIGN} 0, 95 %; steps 100\N{EN DASH}380, past the warm-up): at this "
        "rate GPU 0 reaches its 80 GiB limit around step 15,000, in about 2 h."
    )


def test_a_last_sample_taken_as_the_job_exits_is_no_step_of_it() -> None:
    """Regression (CI): the leaking loop's recording above, whose first sample at its last
    step came as the job exited (RSS 73 MiB after 628 MiB): that sample was fitted, the
    later half's slope halved, and the creep went unsaid. The samples at the last step
    are left out."""
    run = runfile.read_run(Path(__file__).parent / "fixtures" / "runs" / "memory-creep-exit.jsonl")
    (creep,) = [f for f in findings(run) if f.rule == "memory-creep"]
    assert creep.evidence["slope_mib_per_step"] == pytest.approx(LEAK / MIB, rel=0.05)
