"""Disk paths that fail: one path's error costs its own keys, nothing else (issue 23).

Real temporary directories, the real host collectors and sources, the real engine.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import host_collectors
from sysmetrics.host import HostSource, ProcfsSource, PsutilSource
from tests.polling import wait_for

SOURCES = ["psutil"] + (["procfs"] if ProcfsSource.supported() else [])


@pytest.fixture(params=SOURCES)
def source(request: pytest.FixtureRequest) -> HostSource:
    return ProcfsSource() if request.param == "procfs" else PsutilSource()


def disk_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]


def next_sample(m: SystemMonitor) -> dict[str, float]:
    """``m.latest()`` once the monitor has taken a new sample."""
    n = m._tick
    wait_for(lambda: m._tick > n)
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

    import sysmetrics.host as host

    bad = tmp_path / "bad"
    bad.mkdir()
    real = host._statvfs_usage
    fail = {"errno": 0}

    def statvfs_usage(path: str) -> tuple[int, int, float]:
        if path == str(bad) and fail["errno"]:
            raise OSError(fail["errno"], os.strerror(fail["errno"]), path)
        return real(path)

    if not ProcfsSource.supported():
        pytest.skip("needs Linux procfs (ProcfsSource reads statvfs)")
    monkeypatch.setattr(host, "_statvfs_usage", statvfs_usage)
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
