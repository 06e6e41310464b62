"""Graphcore IPU collector. This machine has no IPU and no Poplar SDK: the tests put a
stand-in ``gcipuinfo`` module on ``sys.path`` (imported by the collector's real import
path) whose ``getDevices()`` returns real device attributes, as Graphcore's documentation
prints them with ``gc-info --device-info`` (``tests/fixtures/ipu/``; the same key-value
strings gcipuinfo returns). The one field a test changes is ``user process id``: the
captured process is not on this machine, so it is set to a process the test controls."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from sysmetrics import SystemMonitor
from sysmetrics.collectors import IPUCollector
from sysmetrics.collectors.ipu import parse_attribute
from sysmetrics.host import default_source

FIXTURES = Path(__file__).parent / "fixtures" / "ipu"

STANDIN = """
READINGS = []  # lists of devices; each getDevices() call takes the next (the last repeats)
CALLS = []


class gcipuinfo:
    def __init__(self):
        CALLS.append("init")

    def setUpdateMode(self, update):
        CALLS.append(("setUpdateMode", update))

    def getDevices(self):
        CALLS.append("getDevices")
        return READINGS.pop(0) if len(READINGS) > 1 else READINGS[0]
"""


def device(name: str, owner: int) -> dict[str, str]:
    """The captured attributes of ``name`` with ``user process id`` set to ``owner``."""
    attrs: dict[str, str] = {}
    for line in (FIXTURES / name).read_text().splitlines()[2:]:
        key, _, value = line.strip().partition(": ")
        attrs[key] = value
    attrs["user process id"] = str(owner)
    return attrs


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    (tmp_path / "gcipuinfo.py").write_text(STANDIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "gcipuinfo", raising=False)
    import gcipuinfo  # the stand-in

    yield gcipuinfo
    sys.modules.pop("gcipuinfo", None)


def test_attribute_strings_parse_to_catalogue_keys() -> None:
    c2 = device("c2_gc-info.txt", 1)
    parsed = dict(p for k, v in c2.items() if (p := parse_attribute(k, v)))
    assert parsed == {
        "average board temp (C)": 36.2, "average die temp (C)": 33.4, "clock (MHz)": 1300.0,
        "ipu utilisation (%)": 99.96, "ipu utilisation (session) (%)": 99.98,
        "link speed (GT/s)": 8.0,
    }  # fmt: skip
    c600 = device("c600_gc-info.txt", 1)
    assert parse_attribute("ipu power", c600["ipu power"]) is None  # "N/A"
    assert parse_attribute("link speed", c600["link speed"]) == ("link speed (GT/s)", 16.0)
    assert parse_attribute("total board power", c600["total board power"]) is None  # not listed


def test_only_devices_of_this_process_tree(standin: ModuleType) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        standin.READINGS[:] = [[device("c2_gc-info.txt", child.pid), device("c600_gc-info.txt", 1)]]
        c = IPUCollector.create(default_source(), os.getpid())
        assert c is not None
        assert ("setUpdateMode", True) in standin.CALLS
        with SystemMonitor(interval=3600, collectors=[c]) as m:
            snap = m.snapshot()
        assert snap["ipu.0.clock (MHz)"] == 1300.0  # the C2 run by our child, not pid 1's C600
        assert snap["ipu.0.ipu utilisation (%)"] == 99.96
        assert snap["ipu.0.average die temp (C)"] == 33.4
        assert not any("power" in k for k in snap)

        alone = IPUCollector.create(default_source(), os.getpid(), track_process_tree=False)
        assert alone is not None and alone.sample() == {}
    finally:
        child.kill()
        child.wait()


def test_a_metric_is_reported_when_it_changes(standin: ModuleType) -> None:
    """Three reads of device 0: the C2 attributes twice, then the C600's."""
    me = os.getpid()
    c2, c600 = device("c2_gc-info.txt", me), device("c600_gc-info.txt", me)
    standin.READINGS[:] = [[c2], [c2], [c2], [c600]]  # create() takes the first
    c = IPUCollector.create(default_source(), me)
    assert c is not None
    with SystemMonitor(interval=3600, collectors=[c]) as m:
        assert len(m.snapshot()) == 6  # first read: all six readable metrics
        m._sample_once()
        assert m.snapshot() == {}  # nothing changed: nothing to log
        m._sample_once()
        assert m.snapshot() == {
            "ipu.0.average board temp (C)": 17.8, "ipu.0.average die temp (C)": 20.0,
            "ipu.0.clock (MHz)": 20.0, "ipu.0.ipu utilisation (%)": 0.0,
            "ipu.0.ipu utilisation (session) (%)": 0.0, "ipu.0.link speed (GT/s)": 16.0,
        }  # fmt: skip


def test_absent_library_or_no_ipu_is_quietly_unavailable(
    standin: ModuleType, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    standin.READINGS[:] = [[]]
    assert IPUCollector.create(default_source(), os.getpid()) is None
    monkeypatch.setitem(sys.modules, "gcipuinfo", None)  # import fails, as without Poplar
    assert IPUCollector.create(default_source(), os.getpid()) is None
    assert len(recwarn) == 0
