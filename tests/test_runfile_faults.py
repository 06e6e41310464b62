"""A full disk never corrupts the run file: a line is written whole or not at all.

Real paths: a real small tmpfs filled up while a sink writes (root; skipped with the
reason otherwise) and real ``sysmetrics record`` runs appending to a file that ends in a
half line; and a fake ``write()`` (short counts, ``ENOSPC``) that runs everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.runfile import end_line, read_run, run_line, sample_line
from sysmetrics.sinks.jsonl import JsonlSink
from tests.conftest import ScriptedCollector
from tests.polling import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux file semantics")


def parsed(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, parsed: fails on a line that is not whole JSON."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), data[-80:]
    return [json.loads(x) for x in data.splitlines()]


def ours(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]


class FullDisk:
    """``os.write`` as a disk that fills up: for the run file only, short writes, then ENOSPC.

    While ``full``, a write to the run file writes its first half for real and returns
    that count (a short write, as a filesystem with a few bytes left does), and the next
    write raises ``ENOSPC``; ``short`` caps every write to the run file at that many
    bytes. Other descriptors are written as usual.
    """

    def __init__(self, path: Path, real: Any) -> None:
        self.path, self.real = path, real
        self.full = False
        self.short = 0
        self.refused = 0
        self._half = False

    def _ours(self, fd: int) -> bool:
        try:
            st = os.fstat(fd)
            return (st.st_dev, st.st_ino) == (os.stat(self.path).st_dev, os.stat(self.path).st_ino)
        except OSError:
            return False

    def __call__(self, fd: int, data: Any) -> int:
        if not self._ours(fd):
            return int(self.real(fd, data))
        data = bytes(data)
        if self.full:
            if self._half or len(data) < 2:
                self.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._half = True
            return int(self.real(fd, data[: len(data) // 2]))
        self._half = False
        if self.short:
            data = data[: self.short]
        return int(self.real(fd, data))


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    path = tmp_path / "run.jsonl"
    path.touch()
    fake = FullDisk(path, os.write)
    monkeypatch.setattr(os, "write", fake)
    return fake


def test_a_full_disk_leaves_no_half_line_warns_once_and_resumes(disk: FullDisk) -> None:
    """Regression: ENOSPC left half a line, and stopped the sink for good."""
    c = ScriptedCollector({f"key.{i}": float(i) for i in range(20)})
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink = JsonlSink(m, disk.path, buffer=5)
        try:
            wait_for(lambda: sink.lines >= 3)
            disk.full = True
            wait_for(lambda: disk.refused >= 3 and sink.dropped > 0)  # retried, kept 5
            before = sink.lines
            disk.full = False  # space returns
            wait_for(lambda: sink.lines >= before + 5)
        finally:
            m.stop()
            sink.close()
    said = ours(caught)
    assert len(said) == 1, said
    assert "No space left on device" in said[0] and "written again" in said[0], said[0]
    records = parsed(disk.path)  # no half line anywhere
    assert "run" in records[0] and "end" in records[-1]
    assert records[-1]["end"]["dropped"] == sink.dropped > 0
    assert records[-1]["end"]["samples"] == sink.lines == len(records) - 2
    (rec,) = read_run(disk.path).recordings
    assert rec.end is not None


def test_short_writes_are_finished(disk: FullDisk) -> None:
    """Regression: a short write left the rest of the line unwritten."""
    disk.short = 7
    c = ScriptedCollector({"gauge": 1.0, "peak": 2.0})
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    sink = JsonlSink(m, disk.path)
    try:
        wait_for(lambda: sink.lines >= 5)
    finally:
        m.stop()
        sink.close()
    records = parsed(disk.path)
    assert records[-1]["end"]["samples"] == sink.lines == len(records) - 2


def test_a_write_error_other_than_a_full_disk_still_stops_the_sink(disk: FullDisk) -> None:
    """EIO is no full disk: the sink stops with its one warning, as before; the file is whole."""
    c = ScriptedCollector({"gauge": 1.0})
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    real = disk.real

    calls = [0]

    def broken(fd: int, data: Any) -> int:  # half a line written, then an I/O error
        if disk._ours(fd):
            calls[0] += 1
            if calls[0] > 1:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return int(real(fd, bytes(data)[: len(data) // 2]))
        return int(real(fd, data))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink = JsonlSink(m, disk.path)
        wait_for(lambda: sink.lines >= 2)
        disk.real = broken
        sink._thread.join(5)
        assert not sink._thread.is_alive()
        m.stop()
        sink.close()
    said = ours(caught)
    assert len(said) == 1 and "could not be written and is no longer written" in said[0], said
    parsed(disk.path)


def _mount_tmpfs(folder: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def small_tmpfs() -> Iterator[Path]:
    """A real 64 KiB tmpfs (root), unmounted after the test."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "small"
        _mount_tmpfs(folder, "64k")
        try:
            yield folder
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(path: Path) -> None:
    """Write ``path`` until its filesystem is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 512)
    finally:
        os.close(fd)


def test_a_real_full_tmpfs_keeps_every_line_whole_and_writing_resumes(small_tmpfs: Path) -> None:
    path = small_tmpfs / "run.jsonl"
    filler = small_tmpfs / "filler"
    c = ScriptedCollector({f"key.{i}": float(i) for i in range(40)})  # ~700 bytes a line
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sink = JsonlSink(m, path, buffer=10)
        try:
            wait_for(lambda: sink.lines >= 3)
            _fill(filler)  # the disk is full now
            wait_for(lambda: ours(caught) and sink.dropped > 0)
            assert path.stat().st_size > 0
            parsed(path)  # whole lines while the disk is full
            filler.unlink()  # space returns
            before = sink.lines
            wait_for(lambda: sink.lines >= before + 5)
        finally:
            m.stop()
            sink.close()
    said = ours(caught)
    assert len(said) == 1 and "No space left on device" in said[0], said
    records = parsed(path)
    assert "run" in records[0] and "end" in records[-1]
    assert records[-1]["end"]["dropped"] > 0


def test_a_sink_appending_to_a_half_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    half = sample_line(1.0, 2.0, 3, {"cpu": 50.0})[:20]
    path.write_bytes(run_line(node=0, start=1.0) + sample_line(1.0, 2.0, 3, {"cpu": 1.0}) + half)
    c = ScriptedCollector({"gauge": 1.0})
    c.release()
    m = SystemMonitor(interval=0.01, collectors=[c]).start()
    sink = JsonlSink(m, path)
    try:
        wait_for(lambda: sink.lines >= 2)
    finally:
        m.stop()
        sink.close()
    raw = path.read_bytes().splitlines()
    assert raw[2] == half  # the fragment is a junk line of its own
    assert json.loads(raw[3])["run"]["pid"] == os.getpid()
    run = read_run(path)
    assert len(run.recordings) == 2 and run.recordings[1].end is not None


def test_a_half_line_glued_to_a_run_line_never_merges_two_recordings(tmp_path: Path) -> None:
    """Regression: the reader skipped ``half{"run":...}`` whole, so the second recording's
    samples joined the first, and its end line (exit 0) told the first one's outcome."""
    path = tmp_path / "run.jsonl"
    first = run_line(node=0, pid=1, start=10.0) + sample_line(10.0, 1.0, 1, {"cpu": 1.0})
    half = sample_line(11.0, 2.0, 2, {"cpu": 2.0})[:25]
    second = (
        run_line(node=0, pid=2, start=20.0)
        + sample_line(20.0, 5.0, 1, {"cpu": 3.0})
        + end_line(node=0, exit_status=0)
    )
    path.write_bytes(first + half + second)  # what an unfixed writer left
    run = read_run(path)
    assert [r.run["pid"] for r in run.recordings] == [1, 2]
    assert run.recordings[0].end is None and run.recordings[1].end == {"node": 0, "exit_status": 0}
    assert run.recording == [0, 1] and list(run.columns["cpu"]) == [1.0, 3.0]


@pytest.mark.parametrize(
    "glued",
    [b'{"end":{"node":0,"exit_status":3}}', sample_line(12.0, 3.0, 3, {"cpu": 9.0})],
    ids=["end", "sample"],
)
def test_a_half_line_glued_to_an_end_or_sample_line_keeps_that_line(
    tmp_path: Path, glued: bytes
) -> None:
    path = tmp_path / "run.jsonl"
    half = sample_line(11.0, 2.0, 2, {"cpu": 2.0})[:30]
    path.write_bytes(run_line(node=0, pid=1) + half + glued.rstrip(b"\n") + b"\n")
    run = read_run(path)
    if b"end" in glued:
        assert run.recordings[0].end == {"node": 0, "exit_status": 3}
    else:
        assert list(run.columns["cpu"]) == [9.0]


def record(path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sysmetrics", "record", "--output", str(path),
           "--interval", "0.1", "--", *command]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_a_record_after_a_half_line_is_a_recording_of_its_own(tmp_path: Path) -> None:
    """The issue's case: the first ``record`` left half a line (a full disk, a kill), the
    next appends; the report must tell each command's outcome with its own status."""
    path = tmp_path / "run.jsonl"
    assert record(path, sys.executable, "-c", "raise SystemExit(1)").returncode == 1
    data = path.read_bytes()
    cut = data.rindex(b'"end"') - 2  # the end line lost, the last sample cut in half
    path.write_bytes(data[: cut - 10])
    assert record(path, sys.executable, "-c", "import time; time.sleep(0.3)").returncode == 0
    run = read_run(path)
    assert len(run.recordings) == 2
    assert [r.end and r.end.get("exit_status") for r in run.recordings] == [None, 0]
    first = run.recordings[1].first
    assert set(run.recording[:first]) == {0} and set(run.recording[first:]) == {1}
