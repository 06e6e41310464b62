"""``sysmetrics top``: the panel in a real pseudo-terminal and piped, over run files written."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sysmetrics import runfile, top
from sysmetrics.cli import main

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160", "LINES": "40", "TERM": "xterm"}


def sample(step: int, cpu: float, t: float) -> bytes:
    metrics = {"cpu": cpu, "proc.memory.percent": 12.5, "disk.in": step * 2.0, "disk.out": 0.0}
    metrics.update({"step.seconds": 0.25 + step / 100, "step.dataWaitPercent": 40.0})
    return runfile.sample_line(t, t - 1e9, step, metrics)


def write_slowly(path: Path, steps: int, pause: float, done: threading.Event) -> None:
    """A run file being written: a run line, a sample every ``pause`` s (the last cut in two)."""
    with open(path, "ab", buffering=0) as f:
        f.write(runfile.run_line(host="test", pid=1, start=time.time(), interval=pause, node=0))
        for step in range(1, steps + 1):
            line = sample(step, 10.0 * step, time.time())
            if step == steps:  # a truncated last line: the reader must wait for its rest
                f.write(line[:20])
                time.sleep(2 * pause)
                f.write(line[20:])
            else:
                f.write(line)
            time.sleep(pause)
        f.write(runfile.end_line(status="finished"))
    done.set()


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_top_in_a_terminal_shows_values_that_change(tmp_path: Path) -> None:
    pytest.importorskip("rich", reason="needs the [top] extra")
    path = tmp_path / "run.jsonl"
    done = threading.Event()
    writer = threading.Thread(target=write_slowly, args=(path, 8, 0.4, done))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sysmetrics", "top", str(path), "--interval", "0.2"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env(),
        close_fds=True,
    )
    os.close(slave)
    screen = b""
    try:
        # The file is written once top shows its first screen: started beside parallel
        # workers on 2 CPUs, top took longer to start than the writer to finish, and saw
        # the last sample only (CI, 2026-11-27).
        if select.select([master], [], [], 120)[0]:
            screen += os.read(master, 65536)
        writer.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        if writer.ident is not None:
            writer.join()
    text = ANSI.sub(b"", screen).decode()
    assert b"\x1b[" in screen  # Rich redrew the screen in place (cursor moves)
    cpus = re.findall(r"cpu (\d+\.\d)%", text)
    assert len(set(cpus)) >= 3, cpus  # the values change while the file is written
    assert "cpu 80.0%" in text  # the last sample, written in two parts, read whole
    assert "s/step 0.330" in text and "wait 40.0%" in text
    assert "run finished" in text
    assert "Traceback" not in text


def test_top_piped_prints_one_line_per_interval(tmp_path: Path) -> None:
    # A real recording being written by sysmetrics record; top's output is a pipe.
    path = tmp_path / "run.jsonl"
    rec = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sysmetrics",
            "record",
            "-o",
            str(path),
            "--interval",
            "0.2",
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(3)",
        ],
        env=env(),
    )
    try:
        out = subprocess.run(
            [sys.executable, "-m", "sysmetrics", "top", str(path), "--interval", "0.5"],
            env=env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        rec.wait(60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) >= 3, lines  # one per interval while the recording ran
    assert all(line.startswith("sysmetrics ") for line in lines), lines
    # A recording's first sample has no CPU yet (a rate needs two readings): on a loaded
    # machine top's first read can find only that one. Every later line has it.
    shown = [line for line in lines if "waiting" not in line]
    assert all("cpu " in line for line in shown[1:]), lines
    assert "\x1b" not in out.stdout  # no escape codes in a pipe
    assert "run ended, exit 0" in lines[-1]
    times = re.findall(r"(\d\d:\d\d:\d\d) UTC", out.stdout)
    assert len(set(times)) >= 2  # later samples as they come


def test_top_marks_the_straggler_among_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three nodes' run files; node 2 takes 1.6 s a step where the others take 1.0.
    paths = []
    for node, seconds in enumerate((1.0, 1.0, 1.6)):
        path = tmp_path / f"node{node}.jsonl"
        with open(path, "wb") as f:
            f.write(runfile.run_line(host=f"h{node}", pid=1, start=1.8e9, interval=1.0, node=node))
            for i in range(60):
                metrics = {"step.seconds": seconds, "cpu": 50.0}
                f.write(runfile.sample_line(1.8e9 + i, 100.0 + i, i, metrics, node=node))
            f.write(runfile.end_line(status="finished"))
        paths.append(str(path))
    monkeypatch.setattr(top, "FINDINGS_EVERY", 0.0)
    out = io.StringIO()
    assert top.top(paths, 0.05, out) == 0
    rows = out.getvalue().splitlines()
    assert len(rows) == 3, rows  # one row per node
    assert [re.search(r"node \d", r).group() for r in rows] == ["node 0", "node 1", "node 2"]
    assert rows[2].startswith("STRAGGLER"), rows
    assert not rows[0].startswith("STRAGGLER") and not rows[1].startswith("STRAGGLER")


def test_top_follows_a_long_line_and_junk_without_error(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open(path, "wb") as f:
        f.write(b"not json\n" + b"x" * (runfile.MAX_LINE_BYTES + 10) + b"\n")
        f.write(sample(3, 33.0, time.time()))
        f.write(b"[1, 2]\n")
        f.write(runfile.end_line(status="finished"))
    out = io.StringIO()
    assert top.top([str(path)], 0.05, out) == 0
    assert "cpu 33.0%" in out.getvalue()


def test_top_without_rich_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = top.importlib.import_module

    def no_rich(name: str, *args: object) -> object:
        if name.startswith("rich"):
            raise ImportError(f"No module named {name!r}")
        return real(name)

    monkeypatch.setattr(top.importlib, "import_module", no_rich)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with pytest.raises(SystemExit) as exc:
        main(["top", str(tmp_path / "run.jsonl")])
    assert exc.value.code == 2
    assert "pip install 'sysmetrics-train[top]'" in capsys.readouterr().err


def test_top_rejects_a_bad_interval(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["top", "run.jsonl", "--interval", "0"])
    assert "--interval must be between" in capsys.readouterr().err
