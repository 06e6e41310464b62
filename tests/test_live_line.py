"""``sysmetrics record --live``: the line format, and a real recording's stderr."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from sysmetrics import SystemMonitor
from sysmetrics.live_line import LiveView, live_line


def test_live_line_with_rates() -> None:
    before = {"disk.in": 100.0, "disk.out": 10.0, "network.recv": 0.0, "network.sent": 0.0}
    now = {
        "cpu": 97.4,
        "proc.memory.pssMB": 1228.8,
        "gpu.0.gpu": 88.0,
        "gpu.0.memoryAllocatedBytes": 31.2 * 2**30,
        "gpu.0.powerWatts": 245.0,
        "gpu.1.gpu": 3.0,
        "disk.in": 124.0,  # MiB: +24 in 2 s
        "disk.out": 16.2,
        "network.recv": 2.0 * 2**20,  # bytes: +2 MiB in 2 s
        "network.sent": 0.4 * 2**20,
    }
    assert live_line(now, before, 2.0, 120) == (
        "step 120 | cpu 97% | pss 1.2 GiB | gpu0 88% 31.2 GiB 245 W | gpu1 3% | "
        "disk r 12.0 w 3.1 MiB/s | net in 1.0 out 0.2 MiB/s"
    )


def test_live_line_shows_the_jobs_memory_counted_once() -> None:
    """Regression (issue 22): the line showed the RSS summed over the job (8 forked workers
    sharing a 2.5 GiB dataset: 22.5 GiB) as its memory; it shows the PSS, where the sample
    has a PSS reading, and no memory where it has none (not an older reading again)."""
    shared = {"proc.memory.rssMB": 23_000.0, "proc.memory.pssMB": 2_600.0}
    assert live_line(shared, {}, 1.0, None) == "pss 2.5 GiB"
    assert live_line({"cpu": 5.0, "proc.memory.rssMB": 23_000.0}, {}, 1.0, None) == "cpu 5%"


def test_live_line_leaves_out_what_it_cannot_know() -> None:
    assert live_line({"cpu": 5.0, "disk.in": 1.0, "disk.out": 1.0}, {}, 1.0, None) == "cpu 5%"
    restarted = {"disk.in": 1.0, "disk.out": 1.0}  # the counters went down: no rate
    assert live_line(restarted, {"disk.in": 9.0, "disk.out": 9.0}, 1.0, None) == ""
    assert live_line({}, {}, 0.0, None) == ""


def test_a_failing_live_view_stops_with_one_line() -> None:
    monitor = SystemMonitor(0.05)
    stream = io.StringIO()
    view = LiveView(monitor, stream)

    def broken() -> dict[str, float]:
        raise RuntimeError("boom")

    monitor.latest = broken  # type: ignore[method-assign]
    view.start()
    view.join(timeout=5)
    assert not view.is_alive()
    assert stream.getvalue() == "sysmetrics: live view stopped: RuntimeError('boom')\n"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_record_live_prints_a_line_per_interval() -> None:
    sleep = [sys.executable, "-c", "import time; time.sleep(2.5)"]
    cmd = [sys.executable, "-m", "sysmetrics", "record", "--live", "--interval", "0.2",
           "--output", "/dev/null", "--", *sleep]  # fmt: skip
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("sysmetrics: cpu ")]
    assert len(lines) >= 3, done.stderr
    assert len(lines) <= (time.monotonic() - start) / 0.2 + 1
    assert "disk r" in lines[-1]
    assert any("pss" in x for x in lines)  # on the lines whose sample has a PSS reading


def test_live_line_shows_the_step_time_where_a_step_closed() -> None:
    timed = {"step.seconds": 0.0502, "step.dataWaitPercent": 39.6, "cpu": 50.0}
    assert live_line(timed, {}, 1.0, 7) == (
        "step 7 | 0.0502 s/step wait 40% | highly input-bound | cpu 50%"  # its verdict
    )
    assert live_line({"cpu": 50.0}, {}, 1.0, 7) == "step 7 | cpu 50%"  # none closed


def test_live_line_says_the_samples_verdict() -> None:
    """Issue 32 item 4: the verdict in the live line, with its band; a GPU-saturated
    sample says so (one CPU of 8 is not single-thread-bound there)."""
    gpu = {"step.seconds": 0.1, "step.dataWaitPercent": 1.0, "cpu": 12.5,
           "gpu.0.gpu": 99.0, "gpu.process.0.gpu": 99.0}  # fmt: skip
    assert live_line(gpu, {}, 1.0, 3, cpus=8).split(" | ")[2] == "highly GPU-bound"
    single = {"step.seconds": 0.1, "step.dataWaitPercent": 1.0, "cpu": 50.0}
    assert live_line(single, {}, 1.0, 3, cpus=2).split(" | ")[2] == "highly single-thread-bound"
    slight = {"step.seconds": 0.1, "step.dataWaitPercent": 8.0, "cpu": 3.0}
    assert live_line(slight, {}, 1.0, 3, cpus=2).split(" | ")[2] == "moderately input-bound"
    assert live_line({"step.seconds": 0.1, "step.dataWaitPercent": 1.0}, {}, 1.0, 3) == (
        "step 3 | 0.1 s/step wait 1%"  # no GPU metrics, no CPU: it abstains, says nothing
    )
