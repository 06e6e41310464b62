"""The run file: every sample as a JSON line, SIGKILL-safe, never holding up sampling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.sinks.jsonl import JsonlSink
from tests.conftest import ScriptedCollector
from tests.polling import Wakeups, wait_for


def read_lines(path: Path) -> list[dict[str, object]]:
    """The run file's samples (its ``run`` and ``end`` lines left out)."""
    records = [json.loads(x) for x in path.read_text().splitlines()]
    return [x for x in records if "metrics" in x]


def test_every_sample_is_one_line_with_its_step(tmp_path: Path) -> None:
    c = ScriptedCollector({"gauge": 0.0, "peak": 0.0})
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(m, path)
    try:
        m.step = 3
        c.feed({"gauge": 1.0, "peak": 5.0}, {"gauge": 2.0, "peak": 6.0})
        c.wait_entered(4)
        m.step = 4
        c.feed({"gauge": 3.0, "peak": 7.0})
        c.wait_entered(5)
        wait_for(lambda: sink.lines == 3)
    finally:
        c.release()
        m.stop()
        sink.close()
    lines = read_lines(path)
    # The last sample (taken by stop) is written too; the first one predates the sink
    # (made after start()).
    assert [x["step"] for x in lines][:3] == [3, 3, 4]
    assert [x["metrics"] for x in lines][:3] == [
        {"gauge": 1.0, "peak": 5.0},
        {"gauge": 2.0, "peak": 6.0},
        {"gauge": 3.0, "peak": 7.0},
    ]
    # Released, the collector repeats its last sample until stop's last one.
    assert all(x["metrics"] == {"gauge": 3.0, "peak": 7.0} for x in lines[3:]) and lines[3:]
    times = [x["time"] for x in lines]
    assert times == sorted(times) and abs(times[0] - time.time()) < 60  # type: ignore[operator]
    assert sink.dropped == 0
    sink.close()  # idempotent


CHILD = textwrap.dedent(
    """
    import sys, time
    from sysmetrics import SystemMonitor
    from sysmetrics.sinks.jsonl import JsonlSink
    m = SystemMonitor(interval=0.01).start()
    sink = JsonlSink(m, sys.argv[1])
    step = 0
    while True:  # a training loop, killed with SIGKILL by the test
        step += 1
        m.step = step
        time.sleep(0.001)
    """
)


@pytest.mark.serial  # timing-bound: beside parallel workers it missed its window
def test_a_process_killed_with_sigkill_loses_at_most_the_line_in_progress(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)])
    try:
        wait_for(lambda: path.exists() and path.read_bytes().count(b"\n") >= 50, timeout=60)
        seen = path.read_bytes().count(b"\n")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    raw = path.read_text()
    lines = raw.split("\n")
    complete, last = lines[:-1], lines[-1]  # ``last`` is "" unless a line was cut
    assert len(complete) >= seen
    records = [json.loads(x) for x in complete]  # every complete line parses
    assert "run" in records[0] and not any("end" in r for r in records)  # killed: no end
    records = records[1:]
    if last:
        with pytest.raises(json.JSONDecodeError):
            json.loads(last)
    # A tick between the sink's start and the loop's first step has no step.
    steps = [r["step"] for r in records if r["step"] is not None or r is not records[0]]
    assert steps == sorted(steps) and steps[-1] > 1  # type: ignore[type-var, operator]
    # Every sample has metrics; cpu is left out of one whose window was under 5 ms.
    assert all(r["metrics"] for r in records)  # type: ignore[operator]
    assert sum("cpu" in r["metrics"] for r in records) >= 0.9 * len(records)  # type: ignore[operator]


def test_a_stalled_file_never_delays_sampling(tmp_path: Path) -> None:
    """The run file is a FIFO nobody reads: writes block once the pipe is full."""
    fifo = tmp_path / "stalled"
    os.mkfifo(fifo)
    hold = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
    c = ScriptedCollector({f"key.{i}": float(i) for i in range(200)})  # ~3 KiB a line
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    sink = JsonlSink(m, fifo, buffer=10)
    try:
        wait_for(lambda: sink.dropped > 20, timeout=30)  # the pipe is full, the writer stuck
        # A window of 40 of this process's own 10 ms wakeups (0.45 s on an idle machine,
        # longer where it gets less of the CPUs): the sampler ticks about as often.
        with Wakeups(0.01) as control:
            before = m._series_store.tick
            control.window(40)
            ticks = m._series_store.tick - before
        assert ticks >= 20, ticks  # ~45 on an idle machine; sampling goes on
        started = time.monotonic()
        sink.close(timeout=0.2)  # the writer is stuck in write(): left behind
        assert time.monotonic() - started < 1.0
    finally:
        m.stop()
        with pytest.warns(SystemMetricsWarning, match="BrokenPipeError"):
            os.close(hold)  # the blocked write fails (EPIPE): the writer thread ends
            sink._thread.join(5)
    assert not sink._thread.is_alive()


def test_a_failing_write_stops_the_sink_with_one_warning(tmp_path: Path) -> None:
    """A write error (here EPIPE: the FIFO's reader went away) disables only the sink."""
    fifo = tmp_path / "broken"
    os.mkfifo(fifo)
    hold = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    c = ScriptedCollector({"gauge": 1.0})
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink = JsonlSink(m, fifo)
        wait_for(lambda: sink.lines > 0)
        os.close(hold)
        sink._thread.join(5)
        assert not sink._thread.is_alive()
        ticks = m._series_store.tick
        wait_for(lambda: m._series_store.tick > ticks + 5)  # the monitor goes on
        m.stop()
        sink.close()
    ours = [w for w in caught if issubclass(w.category, SystemMetricsWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "could not be written" in str(ours[0].message) and "BrokenPipeError" in str(
        ours[0].message
    )


def test_missing_folders_are_made_as_the_loggers_make_theirs(tmp_path: Path) -> None:
    """Regression (issue 33): a run file in a folder that did not exist yet was a
    FileNotFoundError, while the frameworks' loggers make their folders."""
    path = tmp_path / "no-such-dir" / "deeper" / "run.jsonl"
    c = ScriptedCollector({"x": 1.0})
    m = SystemMonitor(interval=0.02, collectors=[c]).start()
    try:
        sink = JsonlSink(m, path)
    finally:
        c.release()
        m.stop()
    sink.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert "run" in records[0] and "end" in records[-1]


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    m = SystemMonitor(collectors=[ScriptedCollector({"x": 1.0})])
    with pytest.raises(TypeError, match="monitor=None is invalid"):
        JsonlSink(None, tmp_path / "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path=3 is invalid"):
        JsonlSink(m, 3)  # type: ignore[arg-type]
    (tmp_path / "afile").write_text("")  # a folder that cannot be made (issue 33)
    with pytest.raises(NotADirectoryError, match="afile"):
        JsonlSink(m, tmp_path / "afile" / "no-such-dir" / "run.jsonl")
    stopped = SystemMonitor(collectors=[ScriptedCollector({"x": 1.0})])
    stopped.stop()
    with pytest.raises(ValueError, match="monitor is a stopped SystemMonitor"):
        JsonlSink(stopped, tmp_path / "x")
    for bad in (-1, 0, 1.5):
        with pytest.raises(ValueError, match=f"buffer={bad} is invalid: use a positive number"):
            JsonlSink(m, tmp_path / "x", buffer=bad)  # type: ignore[arg-type]
    m.stop()
