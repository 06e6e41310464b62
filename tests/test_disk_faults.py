"""Disk paths that fail: one path's error costs its own keys, nothing else (issue 23).

Real temporary directories, the real host collectors and sources, the real engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import DiskCollector, host_collectors
from sysmetrics.collectors.disk import isolated_probe
from sysmetrics.host import (
    LOCAL_FILESYSTEMS,
    DiskUsage,
    HostSource,
    ProcfsSource,
    PsutilSource,
    StatfsProbe,
    _mount_type,
    filesystem_type,
)
from tests.polling import wait_for

SOURCES = ["psutil"] + (["procfs"] if ProcfsSource.supported() else [])


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> HostSource:
    return ProcfsSource() if request.param == "procfs" else PsutilSource()


def disk_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]


def next_sample(m: SystemMonitor) -> dict[str, float]:
    """``m.latest()`` once the monitor has taken a new sample."""
    n = m._series_store.tick
    wait_for(lambda: m._series_store.tick > n)
    return m.latest()


def test_a_removed_path_costs_its_own_keys_and_comes_back(
    source: HostSource, tmp_path: Path
) -> None:
    """Regression: a ``disk_paths`` directory removed mid-run disabled the whole disk
    collector: ``disk.in``/``disk.out`` and every other path vanished for good."""
    kept, gone = tmp_path / "kept", tmp_path / "gone"
    kept.mkdir()
    gone.mkdir()
    collectors = host_collectors(source=source, disk_paths=(str(kept), str(gone)))
    gone_key, kept_key = f"disk.{gone}.usageGB", f"disk.{kept}.usagePercent"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SystemMonitor(interval=0.02, collectors=collectors) as m:
            assert gone_key in m.latest()
            gone.rmdir()
            wait_for(lambda: gone_key not in m.latest())
            for _ in range(5):  # several samples without the path: one warning
                latest = next_sample(m)
                assert gone_key not in latest and f"disk.{gone}.usagePercent" not in latest
                assert {"disk.in", "disk.out", kept_key} <= latest.keys(), latest
            m.snapshot()
            snap = m.snapshot()  # a window without the path: its keys are absent
            assert gone_key not in snap and {"disk.in", kept_key} <= snap.keys()
            gone.mkdir()
            wait_for(lambda: gone_key in m.latest())  # back when the path is
            assert {"disk.in", "disk.out", kept_key} <= m.latest().keys()
            assert any(c.name == "disk" for c in m.collectors)
    messages = disk_warnings(caught)
    assert len(messages) == 1, messages
    assert str(gone) in messages[0] and "FileNotFoundError" in messages[0], messages


def test_a_path_failing_with_eio_or_estale_costs_only_its_keys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A transient EIO/ESTALE on one path (as a network mount gives) leaves the rest."""
    import errno

    import sysmetrics.host.statfs as statfs

    bad = tmp_path / "bad"
    bad.mkdir()
    real = statfs._statvfs_usage
    fail = {"errno": 0}

    def statvfs_usage(path: str) -> DiskUsage:
        if path == str(bad) and fail["errno"]:
            raise OSError(fail["errno"], os.strerror(fail["errno"]), path)
        return real(path)

    if not ProcfsSource.supported():
        pytest.skip("needs Linux procfs (ProcfsSource reads statvfs)")
    monkeypatch.setattr(statfs, "_statvfs_usage", statvfs_usage)
    collectors = host_collectors(source=ProcfsSource(), disk_paths=("/", str(bad)))
    key = f"disk.{bad}.usagePercent"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SystemMonitor(interval=0.02, collectors=collectors) as m:
            for code in (errno.EIO, errno.ESTALE):
                fail["errno"] = code
                wait_for(lambda: key not in m.latest())
                assert {"disk.in", "disk.out", "disk./.usagePercent"} <= m.latest().keys()
                fail["errno"] = 0
                wait_for(lambda: key in m.latest())
    messages = disk_warnings(caught)
    assert len(messages) == 1 and "Input/output error" in messages[0], messages


# -- filesystems that hang: a helper process does their statfs ------------------------

FAKE_HELPER = """
import os, sys, time
path, hang = sys.argv[1], sys.argv[2]
while sys.stdin.buffer.readline():
    while os.path.exists(hang):
        time.sleep(3600)  # a statfs the server never answers (SIGKILL ends this one)
    st = os.statvfs(path)
    sys.stdout.write("%d %d %d %d\\n" % (st.f_blocks, st.f_bfree, st.f_bavail, st.f_frsize))
    sys.stdout.flush()
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    return process_state(pid) not in (None, "Z")


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in /proc (``R``, ``S``, ``D``, ``Z``), None once reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.skipif(not ProcfsSource.supported(), reason="needs Linux procfs")
def test_a_helper_that_hangs_costs_its_path_only_and_is_killed(tmp_path: Path) -> None:
    """Helper-level fake, always run: the helper process of one path stops answering as
    a statfs on a dead mount would (it blocks; SIGKILL still ends it, unlike the kernel's
    uninterruptible sleep, which the FUSE test below has for real)."""
    hung, local, hang = tmp_path / "hung", tmp_path / "local", tmp_path / "hang"
    hung.mkdir()
    local.mkdir()
    probes: list[StatfsProbe] = []

    def probe(path: str) -> StatfsProbe | None:
        if path != str(hung):
            return None
        command = [sys.executable, "-c", FAKE_HELPER, path, str(hang)]
        probes.append(StatfsProbe(path, command, every=0.05, timeout=0.5))
        return probes[-1]

    disk = DiskCollector(ProcfsSource(), [str(hung), str(local)], probe=probe)
    key, local_key = f"disk.{hung}.usagePercent", f"disk.{local}.usagePercent"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with SystemMonitor(interval=0.02, collectors=[disk]) as m:
            wait_for(lambda: key in m.latest())
            assert abs(m.latest()[key] - m.latest()[local_key]) < 1.0  # the same filesystem
            helper = probes[0].pid
            assert helper is not None and alive(helper)
            hang.touch()
            t = time.monotonic()
            wait_for(lambda: key not in m.latest())
            assert time.monotonic() - t < 0.05 + 0.5 + 0.05 + 1.0  # every + timeout + ...
            for _ in range(5):
                latest = next_sample(m)
                assert key not in latest and {"disk.in", "disk.out", local_key} <= latest.keys()
            wait_for(lambda: not alive(helper))  # killed, not left behind
            hang.unlink()
            wait_for(lambda: key in m.latest())  # a new helper answers: the keys are back
            assert probes[0].pid not in (None, helper)
            last = probes[0].pid
        assert last is not None
        wait_for(lambda: not alive(last))  # stop() kills the helper
    messages = disk_warnings(caught)
    assert len(messages) == 1, messages
    assert str(hung) in messages[0] and "TimeoutError" in messages[0], messages


FUSE_CHILD = """
import sys, time
import sysmetrics.host.statfs as statfs
from sysmetrics import SystemMonitor
from sysmetrics.sinks.jsonl import JsonlSink
statfs.PROBE_EVERY, statfs.PROBE_TIMEOUT = 0.2, 1.0
mountpoint, local, run_file = sys.argv[1:4]
monitor = SystemMonitor(interval=0.1, disk_paths=[mountpoint, local]).start()
sink = JsonlSink(monitor, run_file)
print("started", flush=True)
sys.stdin.readline()
monitor.stop()
sink.close()
print("stopped", flush=True)
"""


def fuse_missing() -> str | None:
    """Why a FUSE filesystem cannot be mounted here, or None."""
    if not sys.platform.startswith("linux"):
        return "FUSE tests need Linux"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK) or os.geteuid() != 0:
        return "mounting a FUSE filesystem with mount(2) needs root"
    return None


@contextlib.contextmanager
def fuse_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A real FUSE filesystem (tests/fuse_statfs.py); statfs hangs while ``hang`` exists."""
    mountpoint, hang = tmp_path / "fuse", tmp_path / "hang"
    mountpoint.mkdir(exist_ok=True)  # it may be a disk path already watched
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("fuse_statfs.py")), str(mountpoint),
         str(hang)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        if ready.strip() != "ready":
            server.kill()
            pytest.skip(f"cannot mount a FUSE filesystem here: {server.communicate()[1][-300:]}")
        yield mountpoint, hang
    finally:
        hang.unlink(missing_ok=True)  # held statfs calls are answered: nothing stays stuck
        time.sleep(0.2)
        server.terminate()
        server.wait(10)
        wait_for(lambda: not any(str(mountpoint) in cmd for cmd in commands()))


def commands() -> list[str]:
    """The command lines of the processes running now."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return out


def run_lines(path: Path) -> list[dict[str, Any]]:
    """The run file's complete sample lines (its ``run`` and ``end`` lines left out)."""
    text = path.read_text() if path.exists() else ""
    records = [json.loads(x) for x in text.splitlines(keepends=True) if x.endswith("\n")]
    return [r for r in records if "metrics" in r]


@pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))
def test_a_hung_fuse_mount_costs_its_keys_and_never_holds_the_process(tmp_path: Path) -> None:
    """Regression: a ``disk_paths`` entry on a FUSE filesystem whose statfs blocks put the
    sampling thread in uninterruptible sleep: no more samples at all, and the process could
    not exit (SIGKILL included) until the filesystem answered."""
    local, run_file = tmp_path / "local", tmp_path / "run.jsonl"
    local.mkdir()
    with fuse_mount(tmp_path) as (mountpoint, hang):
        key, local_key = f"disk.{mountpoint}.usagePercent", f"disk.{local}.usagePercent"
        child = subprocess.Popen(
            [sys.executable, "-c", FUSE_CHILD, str(mountpoint), str(local), str(run_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "started"

            def since(t: float) -> list[dict[str, float]]:
                return [r["metrics"] for r in run_lines(run_file) if r["time"] > t]

            wait_for(lambda: any(key in r for r in since(0)))
            # The filesystem's own numbers: 600 of 900 reachable blocks in use.
            assert next(r[key] for r in since(0) if key in r) == pytest.approx(600 / 900 * 100)
            hang.touch()
            t = time.time()
            # Within every + timeout (0.2 + 1 s) its keys go; everything else goes on.
            wait_for(lambda: len(since(t + 2.0)) >= 5, timeout=10.0)
            for r in since(t + 2.0):
                assert key not in r and {"disk.in", "disk.out", local_key} <= r.keys(), r
            hang.unlink()  # it answers again: so do its keys
            t = time.time()
            wait_for(lambda: any(key in r for r in since(t)), timeout=10.0)
            hang.touch()  # and hangs again when the process is asked to stop
            time.sleep(1.5)
            t = time.monotonic()
            child.stdin.write("stop\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=10)
            assert time.monotonic() - t < 5.0 and child.returncode == 0, err
            assert out.strip() == "stopped"
        finally:
            if child.poll() is None:
                hang.unlink(missing_ok=True)
                child.kill()
                child.communicate(timeout=60)
    assert err.count("SystemMetricsWarning") == 1, err
    assert str(mountpoint) in err and "TimeoutError" in err, err


MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 27 0:39 / /data rw,nosuid,nodev,relatime shared:5 master:2 - fuse.gcsfuse bucket rw
41 40 0:40 / /data/local\040scratch rw - tmpfs tmpfs rw
42 27 0:41 / /mnt/nfs rw - nfs4 server:/export rw,vers=4.2
43 27 0:42 / /mnt/nfs rw - ext4 /dev/vdb rw
garbage line without a separator
44 27 0:43 / relative - xfs /dev/vdc rw
"""


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/", "ext4"),
        ("/proc/self", "proc"),
        ("/data", "fuse.gcsfuse"),
        ("/data/x/y", "fuse.gcsfuse"),
        ("/data/local scratch/f", "tmpfs"),  # \040 is a space
        ("/data/local", "fuse.gcsfuse"),
        ("/datax", "ext4"),
        ("/mnt/nfs/a", "ext4"),  # mounted over the NFS mount: the last one counts
    ],
)
def test_the_filesystem_type_is_the_innermost_mount(path: str, kind: str) -> None:
    assert _mount_type(MOUNTINFO, path) == kind


def test_local_paths_are_read_here_and_others_by_a_helper(tmp_path: Path) -> None:
    assert filesystem_type("/proc/self") == "proc"
    kind = filesystem_type(str(tmp_path))
    assert kind is not None and kind in LOCAL_FILESYSTEMS, kind
    assert isolated_probe(str(tmp_path)) is None
    assert filesystem_type(str(tmp_path), mountinfo=str(tmp_path / "none")) is None


@given(st.text(max_size=2000), st.text(max_size=100))
def test_the_mountinfo_parser_takes_any_text(text: str, path: str) -> None:
    kind = _mount_type(text, "/" + path)
    assert kind is None or (isinstance(kind, str) and kind and " " not in kind)


@settings(max_examples=30, deadline=None)  # a helper process each
@given(st.binary(max_size=200))
def test_the_helper_answer_parser_takes_any_bytes(answer: bytes) -> None:
    """Whatever a helper writes, ``usage()`` returns a usage, None, or raises OSError."""
    script = "import sys; sys.stdin.readline(); sys.stdout.buffer.write(bytes.fromhex(sys.argv[1]))"
    probe = StatfsProbe("/", [sys.executable, "-c", script, answer.hex()], wait=5.0, timeout=5)
    try:
        try:
            usage = probe.usage()
        except OSError:
            return
        assert usage is None or (
            len(usage) == 3 and all(isinstance(v, (int, float)) for v in usage)
        )
    finally:
        probe.close()


RECORD = """
import sys
import sysmetrics.host.statfs as statfs
from sysmetrics.cli import main
statfs.PROBE_EVERY, statfs.PROBE_TIMEOUT = 0.2, 1.0
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(fuse_missing() is not None, reason=str(fuse_missing()))
def test_sigkill_ends_a_recorder_whose_disk_path_hangs(tmp_path: Path) -> None:
    """Regression, as seen: ``sysmetrics record --disk-path`` on a FUSE mount whose statfs
    hangs wrote no more lines, and SIGKILL left it a zombie whose sampling thread slept
    uninterruptibly until the filesystem answered (623 s under ``timeout 120``)."""
    local, run_file = tmp_path / "local", tmp_path / "run.jsonl"
    local.mkdir()
    with fuse_mount(tmp_path) as (mountpoint, hang):
        key = f"disk.{mountpoint}.usagePercent"
        recorder = subprocess.Popen(
            [sys.executable, "-c", RECORD, "record", "--output", str(run_file), "--interval",
             "0.1", "--disk-path", str(mountpoint), "--disk-path", str(local), "--",
             "sleep", "60"],
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for(
                lambda: run_file.exists() and any(key in r["metrics"] for r in run_lines(run_file))
            )
            hang.touch()
            t = time.time()
            wait_for(lambda: sum(r["time"] > t + 2.0 for r in run_lines(run_file)) >= 5)
            assert all(
                key not in r["metrics"] and "disk.in" in r["metrics"]
                for r in run_lines(run_file)
                if r["time"] > t + 2.0
            )
            os.killpg(recorder.pid, signal.SIGKILL)  # the recorder and its command
            t = time.monotonic()
            recorder.wait(timeout=5)
            wait_for(lambda: process_state(recorder.pid) is None, timeout=5.0)
            assert time.monotonic() - t < 5.0
        finally:
            if recorder.poll() is None:
                hang.unlink(missing_ok=True)
                os.killpg(recorder.pid, signal.SIGKILL)
                recorder.wait(60)
            assert recorder.stderr is not None
            recorder.stderr.close()
