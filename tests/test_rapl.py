"""RAPL energy collector, against a stand-in powercap tree in ``tmp_path``.

The tree models the kernel's powercap sysfs ABI (Documentation/power/powercap/powercap.rst,
https://docs.kernel.org/power/powercap/powercap.html) as the intel_rapl driver lays it out
on a two-socket server::

    /sys/class/powercap/
        intel-rapl/                      the control type (no counter of its own)
        intel-rapl:0/                    package 0: name package-0, energy_uj,
            intel-rapl:0:0/                  max_energy_range_uj; subzone core
            intel-rapl:0:1/                  subzone dram
        intel-rapl:0:0 -> intel-rapl:0/intel-rapl:0:0   each subzone linked again
        intel-rapl:0:1 -> intel-rapl:0/intel-rapl:0:1
        intel-rapl:1/ ...                package 1, same shape

(in the kernel's tree the zones are links into ``/sys/devices/virtual/powercap``; here
the packages are directories and the subzone links point into them). Energies are in
microjoules in the files, joules in the keys. This machine has no ``/sys/class/powercap``
(a VM), so nothing here reads a real RAPL counter.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmetrics.collectors.rapl import RaplCollector, _Zone, energy_delta, read_uj

MAX = 262_143_328_850  # max_energy_range_uj of a real package (Xeon)


def zone(path: Path, name: str, energy: int, max_range: int = MAX) -> Path:
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range}\n")
    (path / "enabled").write_text("1\n")
    return path


def powercap(tmp_path: Path, packages: int = 2, dram: bool = True) -> Path:
    """A powercap class directory with ``packages`` packages, each with core (and dram)."""
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)
    (root / "intel-rapl" / "enabled").write_text("1\n")
    for p in range(packages):
        pkg = zone(root / f"intel-rapl:{p}", f"package-{p}", 1_000_000)
        subs = [("core", 500_000), ("uncore", 100_000)] + ([("dram", 2_000_000)] if dram else [])
        for s, (name, energy) in enumerate(subs):
            zone(pkg / f"intel-rapl:{p}:{s}", name, energy)
            os.symlink(pkg / f"intel-rapl:{p}:{s}", root / f"intel-rapl:{p}:{s}")
    return root


def put(root: Path, label: str, energy: int) -> None:
    """Write zone ``label``'s counter (a package, or a subzone through its link)."""
    (root / label / "energy_uj").write_text(f"{energy}\n")


def add(root: Path, label: str, uj: int) -> None:
    put(root, label, read_uj(str(root / label / "energy_uj")) + uj)


def test_first_sample_is_zero_then_joules_since_start(tmp_path: Path) -> None:
    root = powercap(tmp_path, packages=1)
    c = RaplCollector.create(str(root))
    assert c is not None
    add(root, "intel-rapl:0", 7_000_000)  # used between create and the first sample
    assert c.sample() == {"cpu.energyJoules": 0.0, "memory.energyJoules": 0.0}
    add(root, "intel-rapl:0", 2_500_000)
    add(root, "intel-rapl:0:2", 1_250_000)  # dram
    assert c.sample() == {"cpu.energyJoules": 2.5, "memory.energyJoules": 1.25}
    assert c.sample() == {"cpu.energyJoules": 2.5, "memory.energyJoules": 1.25}
    add(root, "intel-rapl:0", 500_000)
    assert c.sample()["cpu.energyJoules"] == 3.0
    assert c.aggregation("cpu.energyJoules") == "last"
    assert c.aggregation("memory.energyJoules") == "last"
    c.close()


def test_two_packages_summed_dram_separate_core_not_counted(tmp_path: Path) -> None:
    root = powercap(tmp_path, packages=2)
    c = RaplCollector.create(str(root))
    assert c is not None
    assert sorted(z.label for z in c._zones) == [
        "intel-rapl:0", "intel-rapl:0:2", "intel-rapl:1", "intel-rapl:1:2",
    ]  # fmt: skip  # each dram once, though listed twice
    c.sample()
    add(root, "intel-rapl:0", 10_000_000)
    add(root, "intel-rapl:1", 20_000_000)
    add(root, "intel-rapl:0:0", 6_000_000)  # core and uncore: parts of the package
    add(root, "intel-rapl:1:1", 3_000_000)
    add(root, "intel-rapl:0:2", 1_000_000)  # dram
    add(root, "intel-rapl:1:2", 2_000_000)
    assert c.sample() == {"cpu.energyJoules": 30.0, "memory.energyJoules": 3.0}


def test_no_dram_zone_no_memory_key(tmp_path: Path) -> None:
    c = RaplCollector.create(str(powercap(tmp_path, packages=1, dram=False)))
    assert c is not None
    assert c.sample() == {"cpu.energyJoules": 0.0}


def test_psys_and_mmio_are_not_counted(tmp_path: Path) -> None:
    """A laptop: psys covers the whole platform, intel-rapl-mmio repeats the package."""
    root = powercap(tmp_path, packages=1, dram=False)
    zone(root / "intel-rapl:1", "psys", 0)
    (root / "intel-rapl-mmio").mkdir()
    zone(root / "intel-rapl-mmio:0", "package-0", 0)
    c = RaplCollector.create(str(root))
    assert c is not None
    c.sample()
    add(root, "intel-rapl:0", 1_000_000)
    add(root, "intel-rapl:1", 9_000_000)
    add(root, "intel-rapl-mmio:0", 1_000_000)
    assert c.sample() == {"cpu.energyJoules": 1.0}


def test_amd_rapl_package_zone(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    zone(root / "amd-rapl:0", "package-0", 5)
    zone(root / "amd-rapl:0" / "amd-rapl:0:0", "core", 5)
    c = RaplCollector.create(str(root))
    assert c is not None
    c.sample()
    add(root, "amd-rapl:0", 4_000_000)
    assert c.sample() == {"cpu.energyJoules": 4.0}


def test_a_wrap_adds_the_energy_across_it(tmp_path: Path) -> None:
    root = powercap(tmp_path, packages=2)
    c = RaplCollector.create(str(root))
    assert c is not None
    put(root, "intel-rapl:0", MAX - 1_000_000)
    put(root, "intel-rapl:1", 0)
    c.sample()
    put(root, "intel-rapl:0", 3_000_000)  # wrapped: 1 J to the top, 3 J after
    put(root, "intel-rapl:1", 2_000_000)
    assert c.sample()["cpu.energyJoules"] == 6.0


def test_wrap_arithmetic() -> None:
    assert energy_delta(10, 15, 100) == 5
    assert energy_delta(90, 5, 100) == 15
    assert energy_delta(90, 5, None) is None  # no range: the interval is skipped
    assert energy_delta(150, 5, 100) is None  # a reading above the range: not a wrap


def test_a_vanishing_zone_is_dropped_and_its_joules_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = powercap(tmp_path, packages=2)
    c = RaplCollector.create(str(root))
    assert c is not None
    c.sample()
    add(root, "intel-rapl:1", 4_000_000)
    assert c.sample()["cpu.energyJoules"] == 4.0
    for f in (root / "intel-rapl:1").rglob("*"):
        if f.is_file():
            f.unlink()
    with caplog.at_level(logging.DEBUG, logger="sysmetrics"):
        assert c.sample()["cpu.energyJoules"] == 4.0
        add(root, "intel-rapl:0", 1_000_000)
        assert c.sample() == {"cpu.energyJoules": 5.0, "memory.energyJoules": 0.0}
    vanished = [r for r in caplog.records if "vanished" in r.getMessage()]
    assert [r.getMessage().split()[3] for r in vanished] == ["intel-rapl:1", "intel-rapl:1:2"]
    assert sorted(z.label for z in c._zones) == ["intel-rapl:0", "intel-rapl:0:2"]


def test_a_failed_reading_adds_nothing_that_tick(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The next good reading adds what was used since the previous good one."""
    root = powercap(tmp_path, packages=1, dram=False)
    broken: set[str] = set()

    def read(path: str) -> int:
        if path in broken:
            raise OSError(5, "Input/output error")
        return read_uj(path)

    c = RaplCollector.create(str(root), read)
    assert c is not None
    energy = str(root / "intel-rapl:0" / "energy_uj")
    assert c.sample() == {"cpu.energyJoules": 0.0}
    add(root, "intel-rapl:0", 1_000_000)
    broken.add(energy)
    with caplog.at_level(logging.DEBUG, logger="sysmetrics"):
        assert c.sample() == {"cpu.energyJoules": 0.0}
        assert c.sample() == {"cpu.energyJoules": 0.0}
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1
    add(root, "intel-rapl:0", 1_000_000)
    broken.clear()
    assert c.sample() == {"cpu.energyJoules": 2.0}
    put(root, "intel-rapl:0", 0)
    (root / "intel-rapl:0" / "energy_uj").write_text("garbage\n")
    assert c.sample() == {"cpu.energyJoules": 2.0}  # not a number: skipped, not a wrap


def test_root_only_energy_uj_gives_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``chmod 000`` does not stop root, so the read raises PermissionError instead."""
    root = powercap(tmp_path)

    def read(path: str) -> int:
        if path.endswith("/energy_uj"):
            raise PermissionError(13, "Permission denied", path)
        return read_uj(path)

    with caplog.at_level(logging.DEBUG, logger="sysmetrics"):
        assert RaplCollector.create(str(root), read) is None
    assert len(caplog.records) == 1
    assert "root-only" in caplog.records[0].getMessage()
    assert "PermissionError" in caplog.records[0].getMessage()


def test_energy_uj_a_directory_gives_none(tmp_path: Path) -> None:
    root = powercap(tmp_path, packages=1)
    for label in ("intel-rapl:0", "intel-rapl:0:2"):
        (root / label / "energy_uj").unlink()
        (root / label / "energy_uj").mkdir()
    assert RaplCollector.create(str(root)) is None


def test_only_readable_zones_are_kept(tmp_path: Path) -> None:
    root = powercap(tmp_path, packages=2)
    (root / "intel-rapl:1" / "energy_uj").unlink()
    (root / "intel-rapl:1" / "energy_uj").mkdir()
    c = RaplCollector.create(str(root))
    assert c is not None
    assert "intel-rapl:1" not in {z.label for z in c._zones}


@pytest.mark.parametrize("layout", ["absent", "empty", "control-type-only", "psys-and-core-only"])
def test_no_rapl_gives_none(tmp_path: Path, caplog: pytest.LogCaptureFixture, layout: str) -> None:
    root = tmp_path / "powercap"
    if layout != "absent":
        root.mkdir()
    if layout == "control-type-only":
        (root / "intel-rapl").mkdir()
        zone(root / "dtpm:0", "package-0", 1)  # another control type: not RAPL
    if layout == "psys-and-core-only":
        zone(root / "intel-rapl:0", "psys", 1)
        zone(root / "intel-rapl:0" / "intel-rapl:0:0", "core", 1)
    with caplog.at_level(logging.DEBUG, logger="sysmetrics"):
        assert RaplCollector.create(str(root)) is None
    assert len(caplog.records) == 1
    assert "RAPL collector unavailable" in caplog.records[0].getMessage()


def test_this_machine() -> None:
    """Whatever this machine has: None, or totals that start at 0."""
    c = RaplCollector.create()
    if not os.path.isdir("/sys/class/powercap"):
        assert c is None
    if c is not None:
        assert set(c.sample().values()) == {0.0}


# --- property: wraps never lose or invent energy -----------------------------------------


@st.composite
def counter_runs(draw: st.DrawFn) -> tuple[int, int, list[int]]:
    """(range, start, increments): each increment below the range (at most one wrap)."""
    max_range = draw(st.integers(1, 10**12))
    start = draw(st.integers(0, max_range - 1))
    steps = draw(st.lists(st.integers(0, max_range - 1), max_size=30))
    return max_range, start, steps


def scripted(readings: dict[str, list[int | None]], maxes: dict[str, int]) -> RaplCollector:
    """A collector over one zone per key of ``readings`` (None: that read fails)."""

    def read(path: str) -> int:
        value = readings[path].pop(0)
        if value is None:
            raise OSError(5, "Input/output error")
        return value

    return RaplCollector([_Zone(p, "cpu", p, m) for p, m in maxes.items()], read)


def wrapped(max_range: int, start: int, steps: list[int]) -> list[int]:
    """The readings of a counter that starts at ``start`` and wraps at ``max_range``."""
    seq = [start]
    for d in steps:
        seq.append((seq[-1] + d) % max_range)
    return seq


@settings(max_examples=300, deadline=None)
@given(st.lists(counter_runs(), min_size=1, max_size=3))
def test_totals_are_the_true_sum_of_increments(runs: list[tuple[int, int, list[int]]]) -> None:
    n = max(len(steps) for _, _, steps in runs) + 1
    runs = [(m, s, steps + [0] * (n - 1 - len(steps))) for m, s, steps in runs]
    readings: dict[str, list[int | None]] = {
        f"z{z}": list(wrapped(*run)) for z, run in enumerate(runs)
    }
    c = scripted(readings, {f"z{z}": m for z, (m, _, _) in enumerate(runs)})
    totals = [c.sample()["cpu.energyJoules"] for _ in range(n)]
    true = [sum(sum(steps[:t]) for _, _, steps in runs) for t in range(n)]  # µJ
    assert totals == [t / 1e6 for t in true]
    assert all(a <= b for a, b in zip(totals, totals[1:]))


@settings(max_examples=300, deadline=None)
@given(counter_runs(), st.data())
def test_failed_readings_keep_totals_monotonic(
    run: tuple[int, int, list[int]], data: st.DataObject
) -> None:
    """Readings fail at random ticks: totals never go down, and equal the true sum at
    each good reading (the increments are small enough that no two wraps fit between
    two good readings)."""
    max_range, start, steps = run
    limit = max(1, max_range // (len(steps) + 1))
    steps = [d % limit for d in steps]
    fails = data.draw(st.lists(st.booleans(), min_size=len(steps), max_size=len(steps)))
    seq: list[int | None] = list(wrapped(max_range, start, steps))
    for t, fail in enumerate(fails, 1):
        if fail:
            seq[t] = None
    c = scripted({"z": list(seq)}, {"z": max_range})
    totals = [c.sample()["cpu.energyJoules"] for _ in seq]
    assert all(a <= b for a, b in zip(totals, totals[1:]))
    for t, (total, reading) in enumerate(zip(totals, seq)):
        if reading is not None:
            assert total == sum(steps[:t]) / 1e6


def test_a_monitor_reports_the_latest_totals(tmp_path: Path) -> None:
    from sysmetrics import SystemMonitor

    root = powercap(tmp_path, packages=1)
    c = RaplCollector.create(str(root))
    assert c is not None
    with SystemMonitor(interval=0.02, collectors=[c]) as m:
        add(root, "intel-rapl:0", 3_000_000)
        add(root, "intel-rapl:0:2", 1_000_000)
        deadline = time.monotonic() + 5.0
        snap = m.snapshot()
        while snap.get("cpu.energyJoules") != 3.0 and time.monotonic() < deadline:
            time.sleep(0.02)
            snap = m.snapshot()
    assert snap["cpu.energyJoules"] == 3.0 and snap["memory.energyJoules"] == 1.0
    assert "cpu.energyJoules.max" not in snap
