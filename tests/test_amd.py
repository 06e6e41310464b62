"""AMD collector. This machine has no AMD GPU: the tests put a stand-in ``rocm-smi`` on PATH,
a real executable that prints captured ``rocm-smi -a --json`` output
(``tests/fixtures/amd/``, see the README there), so the real subprocess and parsing run."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from sysmetrics import SystemMetricsWarning, SystemMonitor
from sysmetrics.collectors import AMDCollector
from sysmetrics.collectors.amd import parse_rocm_smi

FIXTURES = Path(__file__).parent / "fixtures" / "amd"


def fixture(name: str) -> dict[str, object]:
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def standin(tmp_path: Path, output: str, noise: str = "", rc: int = 0) -> Path:
    """A ``rocm-smi`` executable in ``tmp_path/bin`` that prints ``output``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "out.json").write_text(noise + output)
    exe = bin_dir / "rocm-smi"
    exe.write_text(f"#!/bin/sh\ncat '{tmp_path / 'out.json'}'\nexit {rc}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
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


def test_failing_rocm_smi_disables_the_collector_with_one_warning(tmp_path: Path) -> None:
    exe = standin(tmp_path, (FIXTURES / "rx6700xt_rocm430.json").read_text())
    c = AMDCollector.create(str(exe))
    assert c is not None
    with pytest.warns(SystemMetricsWarning, match="'amd' failed .* exited with 2"):  # noqa: SIM117
        with SystemMonitor(interval=3600, collectors=[c]) as m:
            assert m.snapshot()["gpu.0.temp"] == 45.0
            standin(tmp_path, "", rc=2)
    assert m.collectors == []  # stop()'s last sample failed and disabled it


def test_bad_path_is_a_clear_error_at_construction(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"rocm_smi_path='.*nope' is invalid: it is not an executable"
    ):
        SystemMonitor(rocm_smi_path=str(tmp_path / "nope"))
