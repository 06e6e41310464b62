"""AMD collector. This machine has no AMD GPU: the tests put a stand-in ``rocm-smi`` or
``amd-smi`` on PATH, a real executable that prints captured ``rocm-smi -a --json`` output
(``tests/fixtures/amd/``) or captured ``amd-smi metric/static --json`` output
(``tests/fixtures/amd-smi/``; sources in ``tests/fixtures/README.md``), so the real
subprocess and parsing run."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import AMDCollector
from sysmetrics.collectors.amd import parse_amd_smi, parse_amd_smi_limits, parse_rocm_smi
from tests.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures" / "amd"
AMD_SMI = Path(__file__).parent / "fixtures" / "amd-smi"
MIB = 1024**2


def fixture(name: str) -> dict[str, object]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def standin(tmp_path: Path, output: str, noise: str = "", rc: int = 0) -> Path:
    """A ``rocm-smi`` executable in ``tmp_path/bin`` that prints ``output``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # Replaced, not rewritten in place: the collector's thread may be running it.
    (tmp_path / "out.tmp").write_text(noise + output)
    os.replace(tmp_path / "out.tmp", tmp_path / "out.json")
    exe = bin_dir / "rocm-smi"
    (bin_dir / "exe.tmp").write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.json'}'\nexit {rc}\n")
    (bin_dir / "exe.tmp").chmod(0o755)
    os.replace(bin_dir / "exe.tmp", exe)
    return exe


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_rx6700xt_rocm430_found_on_path(on_path: Path) -> None:
    standin(on_path, (FIXTURES / "rx6700xt_rocm430.json").read_text())
    c = AMDCollector.create()
    assert c is not None
    snap = c.sample()
    c.close()
    assert snap == pytest.approx({
        "gpu.0.gpu": 0.0, "gpu.0.memory": 0.0, "gpu.0.temp": 45.0,
        "gpu.0.memoryAllocatedBytes": 1622728704.0,
        "gpu.0.memoryAllocated": 1622728704 / 12868124672 * 100,
        "gpu.0.powerWatts": 6.0, "gpu.0.powerPercent": 6.0 / 211.0 * 100,
    })  # fmt: skip


def test_mi100_six_cards_with_noise_before_the_json(on_path: Path) -> None:
    noise = "WARNING: AMD GPU device(s) is/are in a low-power state.\n\n"
    standin(on_path, (FIXTURES / "mi100_rocm571.json").read_text(), noise=noise)
    c = AMDCollector.create()
    assert c is not None
    snap = c.sample()
    c.close()
    assert {k.split(".")[1] for k in snap} == {"0", "1", "2", "3", "4", "5"}
    assert snap["gpu.5.temp"] == 33.0 and snap["gpu.5.powerWatts"] == 40.0
    assert snap["gpu.0.memoryAllocatedBytes"] == 6782976.0


def test_vega20_fixture_parses() -> None:
    snap = parse_rocm_smi((FIXTURES / "vega-20-WKS-GL-XE.json").read_text())
    assert snap["gpu.0.temp"] == 36.0 and snap["gpu.0.powerWatts"] == 26.0
    assert snap["gpu.0.memoryAllocatedBytes"] == 10850304.0


def test_version_differences_are_derived_not_dropped() -> None:
    """MI300 prints "Current Socket" power; ROCm 6 may give only the VRAM% allocation."""
    data = fixture("mi100_rocm571.json")
    card = data["card0"]
    assert isinstance(card, dict)
    card["Current Socket Graphics Package Power (W)"] = card.pop(
        "Average Graphics Package Power (W)"
    )
    for key in ("VRAM Total Memory (B)", "VRAM Total Used Memory (B)"):
        card.pop(key)
    card["GPU Memory Allocated (VRAM%)"] = "12"
    card["GPU use (%)"] = "N/A"
    data["card1"] = {}  # an empty card
    snap = parse_rocm_smi(json.dumps(data))
    assert snap["gpu.0.powerWatts"] == 39.0 and snap["gpu.0.powerPercent"] == pytest.approx(
        39 / 290 * 100
    )
    assert snap["gpu.0.memoryAllocated"] == 12.0
    assert "gpu.0.memoryAllocatedBytes" not in snap and "gpu.0.gpu" not in snap
    assert not any(k.startswith("gpu.1.") for k in snap)
    assert snap["gpu.2.gpu"] == 0.0


def test_memory_use_is_busy_percent_not_allocation() -> None:
    data = fixture("rx6700xt_rocm430.json")
    card = data["card0"]
    assert isinstance(card, dict)
    card["GPU memory use (%)"] = "37"
    snap = parse_rocm_smi(json.dumps(data))
    assert snap["gpu.0.memory"] == 37.0
    assert snap["gpu.0.memoryAllocated"] == pytest.approx(1622728704 / 12868124672 * 100)


def test_absent_or_empty_rocm_smi_is_quietly_unavailable(
    on_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sysmetrics.collectors.amd.ROCM_LOCATIONS", ())
    monkeypatch.setenv("PATH", str(on_path / "empty"))
    assert AMDCollector.create() is None
    monkeypatch.setenv("PATH", str(on_path / "bin"))
    standin(on_path, '{"system": {"Driver version": "6.2.4"}}')
    assert AMDCollector.create() is None  # installed, but no card
    standin(on_path, "not json at all")
    assert AMDCollector.create() is None


def test_failing_rocm_smi_warns_once_drops_its_values_and_keeps_trying(tmp_path: Path) -> None:
    exe = standin(tmp_path, (FIXTURES / "rx6700xt_rocm430.json").read_text())
    c = AMDCollector.create(str(exe))
    assert c is not None
    c.poll_interval = 0.02
    with (
        pytest.warns(SystemMetricsWarning, match="failed, retrying .* exited with 2") as record,
        SystemMonitor(interval=3600, collectors=[c]) as m,
    ):
        assert wait_for(lambda: c.sample().get("gpu.0.temp")) == 45.0
        standin(tmp_path, "", rc=2)
        wait_for(lambda: not c.sample())  # the failed run's values: none
        wait_for(lambda: any(w.category is SystemMetricsWarning for w in record))
        standin(tmp_path, "not json at all")  # another failure: no second warning
        for _ in range(2):  # so that one whole run follows the change
            published = c._published
            wait_for(lambda: c._published > published)  # noqa: B023
        standin(tmp_path, (FIXTURES / "rx6700xt_rocm430.json").read_text())
        assert wait_for(lambda: c.sample().get("gpu.0.temp")) == 45.0
    assert m.collectors == [c]  # never disabled
    assert len([w for w in record if w.category is SystemMetricsWarning]) == 1


def test_create_runs_the_tool_once_and_the_thread_waits_out_the_interval(
    on_path: Path,
) -> None:
    """The values found at construction are the first sample's; no second run at once."""
    exe = standin(on_path, (FIXTURES / "rx6700xt_rocm430.json").read_text())
    runs = on_path / "runs"
    exe.write_text(f"#!/bin/sh\necho run >> '{runs}'\ncat '{on_path / 'out.json'}'\n")
    c = AMDCollector.create()
    assert c is not None and c.poll_interval == 5.0
    try:
        assert c.sample()["gpu.0.temp"] == 45.0
        assert runs.read_text().count("run") == 1
    finally:
        c.close()


def sleeper(tmp_path: Path, first: str | None = None) -> tuple[Path, Path]:
    """A ``rocm-smi`` that prints ``first`` on its first run (if given) and otherwise starts
    a ``sleep 30`` in the background (its pid in the returned file) and waits for it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    pid, done = tmp_path / "sleep.pid", tmp_path / "printed"
    (tmp_path / "first.json").write_text(first or "")
    exe = bin_dir / "rocm-smi"
    printed = f"[ -e '{done}' ] || {{ touch '{done}'; cat '{tmp_path / 'first.json'}'; exit 0; }}\n"
    exe.write_text(
        "#!/bin/sh\n"
        + (printed if first is not None else "")
        + f"sleep 30 &\necho $! > '{pid}.tmp'\nmv '{pid}.tmp' '{pid}'\nwait\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, pid


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def test_sample_never_runs_the_tool(tmp_path: Path) -> None:
    """While a run is in progress (a tool that hangs), sample() returns at once."""
    exe, pid_file = sleeper(tmp_path)
    c = AMDCollector(str(exe))
    try:
        started = time.monotonic()
        assert c.sample() == {}  # starts the thread, which starts the tool
        wait_for(pid_file.exists)
        for _ in range(20):
            assert c.sample() == {}
        assert time.monotonic() - started < 5.0  # not the 10 s timeout, nor the 30 s sleep
        assert c._proc is not None and c._proc.poll() is None  # the run is still going
    finally:
        c.close()


def test_values_go_stale_and_are_dropped(tmp_path: Path) -> None:
    """A reading is presented until ``stale_after``; then, with the next run hanging, none."""
    exe, pid_file = sleeper(tmp_path, first=(FIXTURES / "rx6700xt_rocm430.json").read_text())
    c = AMDCollector(str(exe), poll_interval=0.01)
    assert c.stale_after == pytest.approx(0.01 + 10.0 + 5.0)
    c.stale_after = 0.3
    try:
        assert wait_for(lambda: c.sample().get("gpu.0.temp")) == 45.0
        wait_for(pid_file.exists)  # the second run hangs
        wait_for(lambda: not c.sample())
        assert c._proc is not None and c._proc.poll() is None
    finally:
        c.close()


def test_close_kills_the_running_tool_and_its_process_group(tmp_path: Path) -> None:
    exe, pid_file = sleeper(tmp_path)
    c = AMDCollector(str(exe))
    c.sample()
    sleep_pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    proc = c._proc
    assert proc is not None and alive(sleep_pid)
    started = time.monotonic()
    c.close()
    assert proc.wait(5) != 0 and time.monotonic() - started < 2
    wait_for(lambda: not alive(sleep_pid))  # the tool's own child too
    assert c._thread is not None and not c._thread.is_alive()


def test_bad_path_is_a_clear_error_at_construction(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"rocm_smi_path='.*nope' is invalid: it is not an executable"
    ):
        SystemMonitor(rocm_smi_path=str(tmp_path / "nope"))


def amd_smi_standin(
    tmp_path: Path, metric: str, static: str | None = None, noise: str = ""
) -> Path:
    """An ``amd-smi`` in ``tmp_path/bin`` answering ``metric`` and ``static`` (exit 1 if None)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "metric.json").write_text(noise + metric)
    static_cmd = f"cat '{tmp_path / 'static.json'}'" if static is not None else "exit 1"
    if static is not None:
        (tmp_path / "static.json").write_text(static)
    exe = bin_dir / "amd-smi"
    exe.write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in metric) cat '{tmp_path / 'metric.json'}' ;; static) {static_cmd} ;;"
        " *) exit 2 ;; esac\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def amd_smi_only(on_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH: the stand-in bin folder, then the system's (for ``cat``; no ROCm there)."""
    monkeypatch.setattr("sysmetrics.collectors.amd.ROCM_LOCATIONS", ())
    monkeypatch.setattr("sysmetrics.collectors.amd.AMD_SMI_LOCATIONS", ())
    monkeypatch.setenv("PATH", os.pathsep.join([str(on_path / "bin"), "/usr/bin", "/bin"]))
    (on_path / "bin").mkdir(exist_ok=True)
    return on_path


def test_amd_smi_used_where_rocm_smi_is_absent(amd_smi_only: Path) -> None:
    """RX 6600: ``amd-smi metric --json`` (a list), and the power cap from ``static``."""
    amd_smi_standin(
        amd_smi_only,
        (AMD_SMI / "rx6600_metric.json").read_text(),
        static=(AMD_SMI / "rx6600_static.json").read_text(),
    )
    c = AMDCollector.create()
    assert c is not None and c.tool == "amd-smi"
    snap = c.sample()
    c.close()
    assert snap == pytest.approx({
        "gpu.0.gpu": 1.0, "gpu.0.memory": 0.0, "gpu.0.temp": 36.0,
        "gpu.0.memoryAllocatedBytes": 202 * MIB, "gpu.0.memoryAllocated": 202 / 8176 * 100,
        "gpu.0.powerWatts": 6.0, "gpu.0.powerPercent": 6.0,
    })  # fmt: skip


def test_amd_smi_gpu_data_form_with_warnings_before_it_and_no_static(amd_smi_only: Path) -> None:
    """Two R9700s in ROCm 7's ``{"gpu_data": [...]}``; Python warnings printed first (as
    amd-smi does on Python 3.14); ``static`` failing only costs ``powerPercent``."""
    noise = (
        "/usr/lib/python3.14/site-packages/amdsmi/amdsmi_interface.py:3569: SyntaxWarning:"
        " 'return' in a 'finally' block\n  return return_dictionary\n"
    )
    amd_smi_standin(amd_smi_only, (AMD_SMI / "r9700x2_metric.json").read_text(), noise=noise)
    c = AMDCollector.create()
    assert c is not None
    with SystemMonitor(interval=3600, collectors=[c]) as m:
        snap = m.snapshot()
    assert snap["gpu.0.gpu"] == 91.0 and snap["gpu.0.memory"] == 66.0
    assert snap["gpu.0.temp"] == 54.0 and snap["gpu.0.powerWatts"] == pytest.approx(12.3)
    assert snap["gpu.0.memoryAllocated"] == pytest.approx(20450 / 30576 * 100)
    assert snap["gpu.1.powerWatts"] == pytest.approx(23.4)
    assert snap["gpu.1.memoryAllocatedBytes"] == 57 * MIB
    assert not any(k.endswith("powerPercent") for k in snap)


def test_rocm_smi_is_preferred_when_both_are_installed(amd_smi_only: Path) -> None:
    amd_smi_standin(amd_smi_only, (AMD_SMI / "rx6600_metric.json").read_text())
    standin(amd_smi_only, (FIXTURES / "rx6700xt_rocm430.json").read_text())
    c = AMDCollector.create()
    assert c is not None and c.tool == "rocm-smi"
    assert c.sample()["gpu.0.temp"] == 45.0
    c.close()


def test_amd_smi_versions_and_missing_fields() -> None:
    """ROCm 6.4+ moves the cap to ``limit.ppt0.socket_power_limit`` (APUs print "N/A"
    there); "N/A" readings are skipped and the next temperature sensor is used."""
    static = json.loads((AMD_SMI / "rx6600_static.json").read_text())
    cap = static[0]["limit"].pop("socket_power")
    static[0]["limit"]["ppt0"] = {"socket_power_limit": cap, "max_power_limit": "N/A"}
    apu = {"gpu": 1, "limit": {"ppt0": {"socket_power_limit": "N/A"}}}
    limits = parse_amd_smi_limits(json.dumps({"gpu_data": [*static, apu]}))
    assert limits == {0: 100.0}

    metric = json.loads((AMD_SMI / "rx6600_metric.json").read_text())
    metric[0]["usage"] = "N/A"
    metric[0]["temperature"]["edge"] = {"value": "N/A", "unit": "C"}
    metric.append({"gpu": 1, "power": {"socket_power": "N/A"}})  # an APU with nothing
    snap = parse_amd_smi(json.dumps(metric), limits)
    assert snap["gpu.0.temp"] == 37.0 and snap["gpu.0.powerPercent"] == 6.0
    assert "gpu.0.gpu" not in snap and "gpu.0.memory" not in snap
    assert not any(k.startswith("gpu.1.") for k in snap)
    with pytest.raises(ValueError, match="no JSON"):
        parse_amd_smi("amdsmi_cli_exceptions.AmdSmiLibraryException: init failed")


def test_absent_amd_smi_or_no_gpu_is_quietly_unavailable(amd_smi_only: Path) -> None:
    assert AMDCollector.create() is None
    amd_smi_standin(amd_smi_only, '{"gpu_data": []}')
    assert AMDCollector.create() is None
