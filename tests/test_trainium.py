"""Trainium collector. This machine has no Neuron device: the tests put a stand-in
``neuron-monitor`` on PATH, a real executable that checks the generated config and streams
the captured trn1.2xlarge report (``tests/fixtures/trainium/``) as JSON lines, so the real
child-process handling and parsing run."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import SystemMetricsWarning
from sysmetrics.collectors import TrainiumCollector
from sysmetrics.collectors.trainium import parse_neuron_monitor
from sysmetrics.host import default_source
from tests.polling import wait_for

REPORT = Path(__file__).parent / "fixtures" / "trainium" / "neuron-monitor-trn1.2xlarge.json"

STANDIN = """#!{python}
import json, os, sys, time
assert sys.argv[1] == "-c", sys.argv
config = json.load(open(sys.argv[2]))
assert {{m["type"] for m in config["neuron_runtimes"][0]["metrics"]}} == {{
    "neuroncore_counters", "memory_used"}}
open(os.environ["STANDIN_PIDFILE"], "w").write(str(os.getpid()))
doc = open(os.environ["STANDIN_REPORT"]).read().strip()
print("neuron-monitor starting", flush=True)  # not JSON: skipped
while True:  # a tool that outlives a closed pipe: only the kernel's death signal stops it
    try:
        print(doc, flush=True)
    except OSError:
        sys.stdout = open(os.devnull, "w")
    time.sleep(0.05)
"""


def report(pids: list[int]) -> dict[str, Any]:
    """The captured report with one runtime entry per pid (the capture's own is 1337)."""
    doc = json.loads(REPORT.read_text())
    runtime = doc["neuron_runtime_data"][0]
    doc["neuron_runtime_data"] = [{**runtime, "pid": p} for p in pids]
    return doc  # type: ignore[no-any-return]


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "neuron-monitor"
    exe.write_text(STANDIN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "report.json").write_text(json.dumps(report([os.getpid(), 4_000_000])))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_REPORT", str(tmp_path / "report.json"))
    monkeypatch.setenv("STANDIN_PIDFILE", str(tmp_path / "pid"))
    return tmp_path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_parse_keeps_this_process_tree_runtimes() -> None:
    snap = parse_neuron_monitor(report([os.getpid(), 4_000_000]), {os.getpid()})
    assert snap["trn.0.neuroncore_utilization"] == pytest.approx(1.3631567613356375)
    assert snap["trn.host_total_memory_usage"] == 610705408
    assert snap["trn.neuron_device_total_memory_usage"] == 102298328
    assert snap["trn.host_total_memory_usage.application_memory"] == 609656832
    assert snap["trn.host_total_memory_usage.dma_buffers"] == 1048576
    assert snap["trn.0.neuroncore_memory_usage.model_code"] == 101125344
    assert snap["trn.1.neuroncore_memory_usage.model_code"] == 32768
    # No runtime of ours: all of them are kept (and summed), as documented.
    both = parse_neuron_monitor(report([4_000_001, 4_000_002]), {os.getpid()})
    assert both["trn.host_total_memory_usage"] == 2 * 610705408
    assert parse_neuron_monitor({"neuron_runtime_data": []}, set()) == {}


def test_streams_from_one_long_lived_child_and_stops_with_it(standin: Path) -> None:
    c = TrainiumCollector.create(default_source(), os.getpid())
    assert c is not None
    try:
        snap = wait_for(c.sample)
        pid = int((standin / "pid").read_text())
        assert snap["trn.host_total_memory_usage"] == 610705408  # our runtime only
        time.sleep(0.3)
        assert int((standin / "pid").read_text()) == pid  # still the same child
    finally:
        c.close()
    assert not alive(pid)


def test_child_is_not_orphaned_when_the_parent_is_killed(standin: Path) -> None:
    script = textwrap.dedent(
        """
        import os, time
        from sysmetrics.collectors import TrainiumCollector
        from sysmetrics.host import default_source
        c = TrainiumCollector.create(default_source(), os.getpid())
        while not c.sample():
            time.sleep(0.02)
        print("sampling", flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None and parent.stdout.readline().strip() == "sampling"
    child = int((standin / "pid").read_text())
    assert alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    wait_for(lambda: not alive(child))


def test_absent_neuron_monitor_is_quietly_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("sysmetrics.collectors.trainium.NEURON_LOCATIONS", ())
    assert TrainiumCollector.create(default_source(), os.getpid()) is None


SCRIPTED = """#!{python}
import os, sys, time
open(os.environ["STANDIN_PIDFILE"], "w").write(str(os.getpid()))
for line in open(os.environ["STANDIN_LINES"]).read().split("\\n@@\\n"):
    print(line, flush=True)
    time.sleep(0.05)
"""


def test_odd_lines_are_skipped_and_an_ended_child_is_not_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: one unexpected line killed the reader thread silently and the last
    values were served as current forever (the child then died of a broken pipe)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "neuron-monitor"
    exe.write_text(SCRIPTED.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    first, later = report([os.getpid()]), report([os.getpid()])
    later["neuron_runtime_data"][0]["report"]["memory_used"]["neuron_runtime_used_bytes"][
        "host"
    ] = 12345
    odd = ["[" * 100_000 + "]" * 100_000, "[1, 2]", '"text"', "null", '{"neuron_runtime_data": 5}']
    lines = [json.dumps(first)] * 3 + odd + [json.dumps(later)] * 10
    (tmp_path / "lines").write_text("\n@@\n".join(lines))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_LINES", str(tmp_path / "lines"))
    monkeypatch.setenv("STANDIN_PIDFILE", str(tmp_path / "pid"))
    c = TrainiumCollector.create(default_source(), os.getpid())
    assert c is not None
    c.stale_after = 1.0
    try:
        assert wait_for(c.sample)["trn.host_total_memory_usage"] == 610705408
        # Past the odd lines: the later reports are read.
        wait_for(lambda: c.sample().get("trn.host_total_memory_usage") == 12345, timeout=5.0)
        # The child ends: one warning, and its last values stop being current.
        with pytest.warns(SystemMetricsWarning, match="neuron-monitor ended"):
            wait_for(lambda: c.sample() == {}, timeout=5.0)
    finally:
        c.close()
