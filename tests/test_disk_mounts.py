"""Mounts that change or die around a run, and helpers killed from outside (issue 30).

A ``disk_paths`` entry is placed by ``/proc/self/mountinfo``'s text alone: one on a
non-local mount is never touched by a thread of this process (construction included),
a path that becomes a non-local mount after start moves to a helper process, and a
helper killed from outside costs its path's keys a moment, never the process.

The real-path tests use a real FUSE filesystem (``tests/fuse_statfs.py``) in a child
process with a timeout, so a regression fails instead of hanging pytest; the fakes (a
mountinfo file the test writes) run everywhere.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sysmetrics.host.statfs as statfs
from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics._checks import check_disk_paths
from sysmetrics.collectors import DiskCollector
from sysmetrics.host import DiskIO, DiskUsage, ProcfsSource, _path_type, filesystem_type
from tests.polling import wait_for
from tests.test_disk_faults import commands, fuse_missing, fuse_mount, process_state, run_lines

CHILD = """
import sys
import sysmetrics.host.statfs as statfs
from sysmetrics import SystemMonitor
from sysmetrics.sinks.jsonl import JsonlSink
statfs.PROBE_EVERY, statfs.PROBE_TIMEOUT = 0.2, 1.0
run_file, *paths = sys.argv[1:]
monitor = SystemMonitor(interval=0.1, disk_paths=paths).start()
sink = JsonlSink(monitor, run_file)
print("started", flush=True)
sys.stdin.readline()
monitor.stop()
sink.close()
print("stopped", flush=True)
"""

RECORD = """
import sys
import sysmetrics.host.statfs as statfs
from sysmetrics.cli import main
statfs.PROBE_EVERY, statfs.PROBE_TIMEOUT = 0.2, 1.0
sys.exit(main(sys.argv[1:]))
"""

needs_fuse = pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))


def readline(proc: subprocess.Popen[str], timeout: float) -> str:
    """The child's next stdout line, or "" if none comes in ``timeout`` s."""
    assert proc.stdout is not None
    if not select.select([proc.stdout], [], [], timeout)[0]:
        return ""
    return proc.stdout.readline()


def since(run_file: Path, t: float) -> list[dict[str, float]]:
    """The metrics of the run file's samples taken after ``t`` (epoch seconds)."""
    return [r["metrics"] for r in run_lines(run_file) if r["time"] > t]


def helper_of(path: Path) -> bool:
    """Whether a statfs helper process of ``path`` runs."""
    return any("statvfs" in cmd and str(path) in cmd for cmd in commands())


def finish(child: subprocess.Popen[str], hang: Path) -> None:
    """Kill a child still running (answering its mount first, so that it can go)."""
    if child.poll() is None:
        hang.unlink(missing_ok=True)
        child.kill()
        child.communicate(timeout=60)


# -- item 5: a path that becomes a non-local mount after start -------------------------


@needs_fuse
def test_a_path_mounted_after_start_moves_to_a_helper(tmp_path: Path) -> None:
    """Regression: a ``disk_paths`` directory on which a FUSE filesystem is mounted after
    the monitor started was still read in-process: when the mount hung, so did sampling
    (no sample for good) and the process could not be killed."""
    mountpoint, local, run_file = tmp_path / "fuse", tmp_path / "local", tmp_path / "run.jsonl"
    mountpoint.mkdir()
    local.mkdir()
    key, local_key = f"disk.{mountpoint}.usagePercent", f"disk.{local}.usagePercent"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(run_file), str(mountpoint), str(local)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    hang = tmp_path / "hang"
    try:
        assert readline(child, 60).strip() == "started"
        wait_for(lambda: any(key in r for r in since(run_file, 0)))  # read here: local
        assert not helper_of(mountpoint)
        with fuse_mount(tmp_path) as (_, hang):
            fuse = pytest.approx(600 / 900 * 100)  # the FUSE filesystem's own numbers
            wait_for(lambda: any(r.get(key) == fuse for r in since(run_file, 0)))
            deadline = time.monotonic() + 5.0  # its helper takes it over
            while not (with_helper := helper_of(mountpoint)) and time.monotonic() < deadline:
                time.sleep(0.02)
            hang.touch()
            t = time.time()
            # Its keys go within every + timeout (0.2 + 1 s); everything else goes on.
            wait_for(lambda: len(since(run_file, t + 2.0)) >= 5, timeout=10.0)
            for r in since(run_file, t + 2.0):
                assert key not in r and {"disk.in", "disk.out", local_key} <= r.keys(), r
            assert with_helper
            time.sleep(0.5)
            t = time.monotonic()
            assert child.stdin is not None
            child.stdin.write("stop\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=10)  # the mount still hangs
            assert time.monotonic() - t < 5.0 and child.returncode == 0, err
            assert out.strip() == "stopped"
    finally:
        finish(child, hang)
    assert err.count("SystemMetricsWarning") == 1, err
    assert str(mountpoint) in err and "TimeoutError" in err, err


class CountingSource(ProcfsSource):
    """The real procfs source, counting which paths it was asked to ``statvfs``."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def disk_usage(self, path: str) -> DiskUsage:
        self.asked.append(path)
        return super().disk_usage(path)

    def disk_io(self) -> DiskIO:
        return DiskIO(0, 0)


def fake_mountinfo(file: Path, remote: Path | None) -> None:
    """Write a mount table whose root is ext4 and, if given, ``remote`` a gcsfuse mount."""
    text = "27 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    if remote is not None:
        text += f"40 27 0:39 / {remote} rw,nosuid - fuse.gcsfuse bucket rw\n"
    with open(file, "w") as f:  # in place, as the kernel's table changes
        f.write(text)


@pytest.mark.skipif(not ProcfsSource.supported(), reason="needs Linux procfs")
def test_a_path_moves_to_a_helper_and_back_as_the_mount_table_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake mount table, runs everywhere: a path the table shows mounted as gcsfuse after
    the start is no longer read here (its helper reads it), and is read here again once
    the table shows it local; the table is re-read only when it changed."""
    monkeypatch.setattr(statfs, "MOUNTS_EVERY", 0.0)
    table, path = tmp_path / "mountinfo", tmp_path / "data"
    path.mkdir()
    fake_mountinfo(table, None)
    source = CountingSource()
    disk = DiskCollector(source, [str(path)], mountinfo=str(table))
    key = f"disk.{path}.usagePercent"
    try:
        assert key in disk.sample() and source.asked == [str(path)]
        fake_mountinfo(table, path)  # mounted after the start
        source.asked.clear()
        wait_for(lambda: key in disk.sample())  # its helper answers
        assert source.asked == []  # never read here since
        helper = disk._probes[str(path)]
        fake_mountinfo(table, None)  # unmounted
        assert key in disk.sample() and source.asked == [str(path)]  # read here again
        assert str(path) not in disk._probes and helper.pid is None  # its helper killed
        fake_mountinfo(table, path)  # mounted again: the same probe (one helper at most)
        disk.sample()
        assert disk._probes[str(path)] is helper
        fake_mountinfo(table, None)
        disk.sample()
        reads = []
        real = statfs.MountWatch.read
        monkeypatch.setattr(statfs.MountWatch, "read", lambda w: reads.append(1) or real(w))
        for _ in range(5):
            disk.sample()
        assert reads == []  # unchanged: not read again
    finally:
        disk.close()


def test_a_busy_mount_table_is_read_at_most_every_mounts_every_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table that changed is read again only ``MOUNTS_EVERY`` s after its last read; a
    change seen meanwhile is kept for then, not lost."""
    table = tmp_path / "mountinfo"
    fake_mountinfo(table, None)
    watch = statfs.MountWatch(str(table))
    try:
        assert watch.read() is not None and not watch.changed()
        fake_mountinfo(table, tmp_path)
        monkeypatch.setattr(statfs, "MOUNTS_EVERY", 3600.0)
        assert not watch.changed()  # read less than MOUNTS_EVERY ago: later
        monkeypatch.setattr(statfs, "MOUNTS_EVERY", 0.0)
        assert watch.changed()  # the change seen before
        assert watch.read() == table.read_text() and not watch.changed()
    finally:
        watch.close()


# -- item 6: a mount already dead at start -----------------------------------------------


def refuse(remote: Path) -> Callable[..., Any]:
    """A stand-in for an ``os`` call that fails the test when asked about ``remote``."""

    def check(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith(str(remote)):
                raise AssertionError(f"{real.__name__}({path!r}) touched a non-local mount")
            return real(path, *args, **kwargs)

        return call

    return check


@pytest.fixture
def remote_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory the (fake) mount table shows as gcsfuse, which no call here may touch."""
    remote, table = tmp_path / "remote", tmp_path / "mountinfo"
    remote.mkdir()
    fake_mountinfo(table, remote)
    monkeypatch.setattr(statfs, "MOUNTINFO", str(table))
    wrap = refuse(remote)
    for name in ("stat", "lstat", "readlink", "statvfs", "open", "listdir", "scandir"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    yield remote


@pytest.mark.skipif(not ProcfsSource.supported(), reason="needs Linux procfs")
def test_a_path_on_a_non_local_mount_is_never_touched_here(
    remote_mount: Path, tmp_path: Path
) -> None:
    """Fake mount table, runs everywhere: the construction's existence check and the
    sampling thread leave a path on a non-local mount to its helper; a missing one there
    costs its keys with one warning instead of a construction error."""
    missing, there = remote_mount / "missing", remote_mount
    local = tmp_path / "local"
    local.mkdir()
    paths = [str(missing), str(there), str(local)]
    assert check_disk_paths(paths) == tuple(paths)
    with pytest.raises(ValueError, match="does not exist"):
        check_disk_paths([str(tmp_path / "nope")])  # local: still checked here
    keys = {f"disk.{p}.usagePercent" for p in paths}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SystemMonitor(interval=0.02, disk_paths=paths) as m:
            wait_for(lambda: {f"disk.{there}.usagePercent", "disk.in"} <= m.latest().keys())
            wait_for(lambda: any(issubclass(w.category, SystemMetricsWarning) for w in caught))
            for _ in range(3):
                wait_for(lambda n=m._series_store.tick: m._series_store.tick > n)  # type: ignore[misc]
                got = m.latest().keys() & keys
                assert got == {f"disk.{there}.usagePercent", f"disk.{local}.usagePercent"}, got
    messages = [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]
    assert len(messages) == 1, messages
    assert str(missing) in messages[0] and "FileNotFoundError" in messages[0], messages


def test_the_type_is_decided_from_the_mount_table_and_local_links_only(tmp_path: Path) -> None:
    """Symbolic links are followed while they lie on a local filesystem (a link into a
    non-local mount is its type); nothing on a non-local mount is asked."""
    remote = tmp_path / "remote"
    remote.mkdir()
    (tmp_path / "to-remote").symlink_to(remote / "a")
    (tmp_path / "relative").symlink_to("to-remote/b")
    (tmp_path / "loop").symlink_to("loop")
    table = tmp_path / "mountinfo"
    fake_mountinfo(table, remote)
    mounts = statfs._mounts(table.read_text())
    assert _path_type(str(tmp_path / "to-remote"), mounts) == "fuse.gcsfuse"
    assert _path_type(str(tmp_path / "relative" / "c"), mounts) == "fuse.gcsfuse"
    assert _path_type(str(remote / "x" / ".." / ".." / "y"), mounts) == "fuse.gcsfuse"
    assert _path_type(str(tmp_path / "loop"), mounts) == "ext4"  # ELOOP: as written
    assert _path_type(str(tmp_path / "missing" / "x"), mounts) == "ext4"
    assert filesystem_type(str(tmp_path / "to-remote"), str(table)) == "fuse.gcsfuse"
    assert not statfs.local_path(str(tmp_path / "relative"), str(table))
    assert statfs.local_path(str(tmp_path), str(table))


@contextlib.contextmanager
def dead_fuse(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A FUSE mount that answers nothing at all (stat and lookups included)."""
    with fuse_mount(tmp_path) as (mountpoint, hang):
        hang.write_text("all")
        time.sleep(1.2)  # the kernel's cached attributes of its root expire
        yield mountpoint, hang


@needs_fuse
def test_a_mount_dead_at_start_costs_its_keys_not_the_construction(tmp_path: Path) -> None:
    """Regression: ``SystemMonitor(disk_paths=[...])`` with a path on a mount that is
    already dead slept in the kernel in the calling thread (its existence check and path
    resolution), for good."""
    local, run_file = tmp_path / "local", tmp_path / "run.jsonl"
    local.mkdir()
    with dead_fuse(tmp_path) as (mountpoint, hang):
        missing = mountpoint / "missing"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(run_file), str(mountpoint), str(missing),
             str(local)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert readline(child, 60).strip() == "started", "construction hung"
            keys = {f"disk.{mountpoint}.usagePercent", f"disk.{missing}.usagePercent"}
            t = time.time()
            wait_for(lambda: len(since(run_file, t + 2.0)) >= 5, timeout=10.0)
            for r in since(run_file, 0):
                assert not keys & r.keys() and f"disk.{local}.usagePercent" in r, r
            assert child.stdin is not None
            child.stdin.write("stop\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=10)
            assert child.returncode == 0 and out.strip() == "stopped", err
        finally:
            finish(child, hang)
    assert err.count("SystemMetricsWarning") == 2, err  # one per path
    assert f"{mountpoint}'" in err and f"{missing}'" in err and "TimeoutError" in err, err


@needs_fuse
def test_record_with_a_disk_path_on_a_dead_mount_records(tmp_path: Path) -> None:
    """Regression: ``sysmetrics record --disk-path`` on a dead mount hung before starting
    its command (the flag's existence check) and could not be killed."""
    local, run_file = tmp_path / "local", tmp_path / "run.jsonl"
    local.mkdir()
    with dead_fuse(tmp_path) as (mountpoint, hang):
        recorder = subprocess.Popen(
            [sys.executable, "-c", RECORD, "record", "--output", str(run_file), "--interval",
             "0.1", "--disk-path", str(mountpoint), "--disk-path", str(local), "--",
             "sleep", "60"],
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            local_key = f"disk.{local}.usagePercent"
            wait_for(lambda: sum(local_key in r for r in since(run_file, 0)) >= 5, timeout=20)
            assert all(f"disk.{mountpoint}.usagePercent" not in r for r in since(run_file, 0))
            os.killpg(recorder.pid, signal.SIGKILL)
            recorder.wait(timeout=5)
            wait_for(lambda: process_state(recorder.pid) is None, timeout=5.0)
        finally:
            if recorder.poll() is None:
                hang.unlink(missing_ok=True)
                os.killpg(recorder.pid, signal.SIGKILL)
                recorder.wait(60)
            assert recorder.stderr is not None
            recorder.stderr.close()


# -- item 9: a helper killed from outside ------------------------------------------------

KILLED_HELPER = """
import signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as a C program (or a launcher) has it
from sysmetrics import SystemMonitor
from sysmetrics.collectors import DiskCollector
from sysmetrics.host import StatfsProbe, default_source
path = sys.argv[1]
probes = []
def probe(p):
    probes.append(StatfsProbe(p, every=0.2))  # a helper even for a local path
    return probes[-1]
disk = DiskCollector(default_source(), [path], probe=probe)
key = f"disk.{path}.usagePercent"
def wait(fn):
    deadline = time.monotonic() + 10
    while not fn():
        if time.monotonic() > deadline:
            sys.exit("timed out")
        time.sleep(0.01)
with SystemMonitor(interval=0.02, collectors=[disk]) as m:
    wait(lambda: key in m.latest())
    pid = probes[0].pid
    print(pid, flush=True)
    sys.stdin.readline()  # the helper was killed meanwhile
    wait(lambda: probes[0].pid not in (None, pid) and key in m.latest())
    n = m._series_store.tick
    wait(lambda: m._series_store.tick > n + 5)
print("alive", flush=True)
"""


@pytest.mark.skipif(not ProcfsSource.supported(), reason="needs Linux procfs")
def test_a_helper_killed_from_outside_does_not_kill_the_process(tmp_path: Path) -> None:
    """Regression: with SIGPIPE at its default action (as a C launcher leaves it), the
    next request to a statfs helper that was killed from outside killed the training
    process (rc -13)."""
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_HELPER, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = readline(child, 60)
        assert line.strip().isdigit(), child.communicate(timeout=10)
        os.kill(int(line), signal.SIGKILL)  # between two requests, most likely
        assert child.stdin is not None
        child.stdin.write("go on\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate(timeout=10)
    assert child.returncode == 0 and out.strip() == "alive", (child.returncode, err)
    assert err.count("SystemMetricsWarning") <= 1, err
