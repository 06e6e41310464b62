"""Per-tick cost of the AMD collectors: sysfs files vs the ``rocm-smi`` CLI, side by side.

Runs anywhere (no AMD GPU needed): ``python benchmarks/amd_tick.py``. It builds, in a
temporary folder,

- sysfs: the kernel's ``class/drm/card0 -> devices/.../drm/card0`` layout for one card
  whose files hold the RX 6700 XT's readings of ``tests/fixtures/amd/rx6700xt_rocm430.json``
  (every key's file; 7 of its 9 files are read per tick), and the captured multi-card tree of
  ``tests/fixtures/amd_sysfs/`` (the RX 7900 XT, RX 7800 XT and Phoenix captures);
- CLI: the tests' stand-in ``rocm-smi`` (a shell script that prints that captured
  ``rocm-smi -a --json`` output), so the real subprocess and JSON parsing run.

and prints µs per ``sample()`` for each (median of 7 runs), and for the CLI also µs per run
of the tool (``read()``, what the AMD collector's own thread does every 5 s; its ``sample()``
only copies the latest values). The stand-in is a lower bound for the CLI: the real
``rocm-smi`` is a Python program that also loads ROCm's library and queries the driver (a
second or more per run, up to 8.6 s reported for ``amd-smi``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sysmetrics.collectors.amd import AMDCollector
from sysmetrics.collectors.amd_sysfs import AMDSysfsCollector

ROOT = Path(__file__).resolve().parent.parent
ROCM_SMI = ROOT / "tests" / "fixtures" / "amd" / "rx6700xt_rocm430.json"
CAPTURES = ROOT / "tests" / "fixtures" / "amd_sysfs"


def card(tmp: Path, name: str, bus: str, files: dict[str, str], capture: str | None) -> None:
    """``class/drm/{name}`` for a card at PCI ``bus``: a capture's files, then ``files``."""
    dev = tmp / "devices" / "pci0000:00" / bus
    if capture is not None:
        shutil.copytree(CAPTURES / capture / "device", dev)
    (dev / "hwmon" / "hwmon2").mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (dev / rel).write_text(text + "\n")
    drivers = tmp / "bus" / "pci" / "drivers" / "amdgpu"
    drivers.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to("../../../bus/pci/drivers/amdgpu")
    (dev / "drm" / name).mkdir(parents=True)
    (dev / "drm" / name / "device").symlink_to(f"../../../{bus}")
    drm = tmp / "class" / "drm"
    drm.mkdir(parents=True, exist_ok=True)
    (drm / name).symlink_to(f"../../devices/pci0000:00/{bus}/drm/{name}")


def rx6700xt_tree(tmp: Path) -> str:
    c = json.loads(ROCM_SMI.read_text())["card0"]
    card(tmp, "card0", c["PCI Bus"], {
        "gpu_busy_percent": c["GPU use (%)"], "mem_busy_percent": c["GPU memory use (%)"],
        "mem_info_vram_total": c["VRAM Total Memory (B)"],
        "mem_info_vram_used": c["VRAM Total Used Memory (B)"],
        "hwmon/hwmon2/power1_average": "6000000", "hwmon/hwmon2/power1_cap": "211000000",
        "hwmon/hwmon2/temp1_input": "45000", "hwmon/hwmon2/temp2_input": "47000",
        "hwmon/hwmon2/temp3_input": "46000",
    }, None)  # fmt: skip
    return str(tmp / "class" / "drm")


def captured_tree(tmp: Path) -> str:
    for i, (capture, bus) in enumerate(
        [("rx7900xt", "0000:03:00.0"), ("rx7800xt-2", "0000:0a:00.0"), ("phoenix", "0000:64:00.0")]
    ):
        card(tmp, f"card{i}", bus, {}, capture)
    return str(tmp / "class" / "drm")


def standin(tmp: Path) -> str:
    (tmp / "out.json").write_text(ROCM_SMI.read_text())
    exe = tmp / "rocm-smi"
    exe.write_text(f"#!/bin/sh\ncat '{tmp / 'out.json'}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def per_tick_us(sample: Callable[[], object], n: int) -> float:
    sample()
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            sample()
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one, many, cli = (Path(tmp) / d for d in ("one", "many", "cli"))
        for d in (one, many, cli):
            d.mkdir()
        sysfs = AMDSysfsCollector.create(rx6700xt_tree(one))
        captured = AMDSysfsCollector.create(captured_tree(many))
        rocm = AMDCollector.create(standin(cli))
        assert sysfs is not None and captured is not None and rocm is not None
        same = sysfs.sample() == rocm.read()
        deadline = time.monotonic() + 10
        while not rocm.sample() and time.monotonic() < deadline:  # its thread's first run
            time.sleep(0.01)
        rows = [
            ("sysfs, RX 6700 XT readings, 1 card, 7 files read", sysfs.sample, 2000, "tick"),
            ("sysfs, captured tree, 3 cards, 3 files read", captured.sample, 2000, "tick"),
            ("rocm-smi stand-in (sh + cat), same RX 6700 XT", rocm.read, 100, "run"),
            ("rocm-smi collector sample(): latest values", rocm.sample, 2000, "tick"),
        ]
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        for label, sample, n, per in rows:
            print(f"{label:48s} {per_tick_us(sample, n):10.1f} µs per {per}")
        rocm.close()
        print(f"sysfs and rocm-smi give the same values for the RX 6700 XT: {same}")


if __name__ == "__main__":
    main()
