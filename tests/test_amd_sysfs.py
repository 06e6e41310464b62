"""AMD sysfs collector. This machine has no AMD GPU: each test builds the kernel's layout
(``class/drm/cardN -> devices/pci0000:00/<bus>/drm/cardN``, ``cardN/device -> <bus>``,
``device/driver -> bus/pci/drivers/<driver>``) in a temporary folder around real files
captured from amdgpu cards (``tests/fixtures/amd_sysfs/``, sources and the keys each
capture exercises in its ``SOURCE.md``). The expected values are worked out by hand from
those files: µW / 1e6 = W, m°C / 1000 = °C."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmetrics import SystemMonitor
from sysmetrics.collectors._values import GPU
from sysmetrics.collectors.amd import parse_rocm_smi
from sysmetrics.collectors.amd_sysfs import AMDSysfsCollector, find_cards, parse_int

CAPTURES = Path(__file__).parent / "fixtures" / "amd_sysfs"
ROCM_SMI = Path(__file__).parent / "fixtures" / "amd" / "rx6700xt_rocm430.json"


def driver_of(capture: str) -> str:
    """DRIVER= of the capture's uevent; amdgpu for the captures without one (LACT lists
    them as amdgpu cards)."""
    uevent = CAPTURES / capture / "device" / "uevent"
    if uevent.exists():
        for line in uevent.read_text().splitlines():
            if line.startswith("DRIVER="):
                return line[7:]
    return "amdgpu"


def build(tmp: Path, cards: dict[str, tuple[str | None, str]], driver_links: bool = True) -> Path:
    """A sysfs tree in ``tmp`` with ``{cardN: (capture or None for empty, bus id)}``;
    returns its ``class/drm`` folder. Each card also gets a DP connector entry."""
    drm = tmp / "class" / "drm"
    drm.mkdir(parents=True)
    (drm / "version").write_text("drm 1.1.0 20060810\n")
    for card, (capture, bus) in cards.items():
        dev = tmp / "devices" / "pci0000:00" / bus
        if capture is None:
            dev.mkdir(parents=True)
        else:
            shutil.copytree(CAPTURES / capture / "device", dev)
        if driver_links:
            driver = tmp / "bus" / "pci" / "drivers" / driver_of(capture or "")
            driver.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(Path("../../../bus/pci/drivers") / driver.name)
        (dev / "drm" / card).mkdir(parents=True)
        (dev / "drm" / card / "device").symlink_to(Path("../../..") / bus)
        (drm / card).symlink_to(Path("../../devices/pci0000:00") / bus / "drm" / card)
        connector = dev / "drm" / card / f"{card}-DP-1"
        connector.mkdir()
        (connector / "device").symlink_to("..")
        (drm / f"{card}-DP-1").symlink_to((drm / card).readlink() / connector.name)
    return drm


def device(drm: Path, card: str) -> Path:
    return (drm / card / "device").resolve()


@pytest.fixture(autouse=True)
def _all_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize(
    ("capture", "bus", "expected"),
    [
        # mem_info_vram_used 16613376 B; power1_cap 260000000 µW but no power reading
        ("vega56", "0000:01:00.0", {"gpu.0.memoryAllocatedBytes": 16613376.0}),
        ("rx580", "0000:01:00.0", {"gpu.0.temp": 44.0}),  # temp1_input 44000 m°C
        ("rx7900xt", "0000:03:00.0", {"gpu.0.powerWatts": 68.0}),  # 68000000 µW
        ("rx7800xt-2", "0000:0a:00.0", {"gpu.0.powerWatts": 31.0}),  # 31000000 µW
        # power1_average 3103000 µW is preferred over power1_input 3142000 µW
        ("phoenix", "0000:64:00.0", {"gpu.0.powerWatts": 3.103}),
        ("rx9070", "0000:03:00.0", {"gpu.0.temp": 72.0}),  # temp3_input 72000 m°C
    ],
)
def test_each_capture(tmp_path: Path, capture: str, bus: str, expected: dict[str, float]) -> None:
    c = AMDSysfsCollector.create(str(build(tmp_path, {"card1": (capture, bus)})))
    assert c is not None and [card.bus_id for card in c.cards] == [bus]
    assert c.sample() == pytest.approx(expected)


def test_a_radeon_card_is_skipped(tmp_path: Path) -> None:
    drm = build(tmp_path, {"card0": ("hd7870", "0000:01:00.0")})
    assert AMDSysfsCollector.create(str(drm)) is None
    assert AMDSysfsCollector.create(str(tmp_path / "nowhere")) is None


def test_uevent_names_the_driver_where_there_is_no_driver_link(tmp_path: Path) -> None:
    drm = build(
        tmp_path,
        {"card0": ("rx7900xt", "0000:03:00.0"), "card1": ("hd7870", "0000:01:00.0"),
         "card2": ("vega56", "0000:05:00.0")},  # no uevent captured: unknown driver
        driver_links=False,
    )  # fmt: skip
    c = AMDSysfsCollector.create(str(drm))
    assert c is not None and [card.bus_id for card in c.cards] == ["0000:03:00.0"]
    assert c.sample() == {"gpu.0.powerWatts": 68.0}


def four_cards(tmp: Path) -> Path:
    """Card names in another order than bus ids (as after a hot-plug or an iGPU)."""
    return build(tmp, {
        "card0": ("phoenix", "0000:64:00.0"), "card1": ("rx7800xt-2", "0000:0a:00.0"),
        "card2": ("hd7870", "0000:01:00.0"), "card3": ("rx7900xt", "0000:03:00.0"),
    })  # fmt: skip


def test_numbered_by_pci_bus_id_not_card_name(tmp_path: Path) -> None:
    c = AMDSysfsCollector.create(str(four_cards(tmp_path)))
    assert c is not None
    assert [card.bus_id for card in c.cards] == ["0000:03:00.0", "0000:0a:00.0", "0000:64:00.0"]
    assert c.sample() == pytest.approx(
        {"gpu.0.powerWatts": 68.0, "gpu.1.powerWatts": 31.0, "gpu.2.powerWatts": 3.103}
    )


@pytest.mark.parametrize(
    ("rocr", "hip", "expected"),
    [
        (None, "2,0", {"gpu.0.powerWatts": 3.103, "gpu.1.powerWatts": 68.0}),
        ("1,2", "1", {"gpu.0.powerWatts": 3.103}),  # HIP indexes what ROCR left
        ("2", None, {"gpu.0.powerWatts": 3.103}),
        (None, " 1 ,0", {"gpu.0.powerWatts": 31.0, "gpu.1.powerWatts": 68.0}),
        # The list ends at a UUID, an index out of range or repeated, or junk.
        (None, "1,GPU-4b8f2e0c1d2a3b4c,0", {"gpu.0.powerWatts": 31.0}),
        (None, "0,3,1", {"gpu.0.powerWatts": 68.0}),
        (None, "0,0,1", {"gpu.0.powerWatts": 68.0}),
        (None, "1,²", {"gpu.0.powerWatts": 31.0}),
    ],
)
def test_visible_devices_select_and_renumber(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rocr: str | None,
    hip: str | None,
    expected: dict[str, float],
) -> None:
    for name, value in (("ROCR_VISIBLE_DEVICES", rocr), ("HIP_VISIBLE_DEVICES", hip)):
        if value is not None:
            monkeypatch.setenv(name, value)
    c = AMDSysfsCollector.create(str(four_cards(tmp_path)))
    assert c is not None
    assert c.sample() == pytest.approx(expected)


@pytest.mark.parametrize("hip", ["", "GPU-4b8f2e0c1d2a3b4c", "7"])
def test_no_visible_gpu_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hip: str
) -> None:
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", hip)
    assert AMDSysfsCollector.create(str(four_cards(tmp_path))) is None


def full_card(tmp: Path) -> Path:
    """The RX 7900 XT capture plus the files no capture holds (written here, not captured)."""
    drm = build(tmp, {"card0": ("rx7900xt", "0000:03:00.0")})
    dev = device(drm, "card0")
    files = {
        "gpu_busy_percent": "37\n", "mem_busy_percent": "5\n",
        "mem_info_vram_total": "21458059264\n", "mem_info_vram_used": "1073741824\n",
        "hwmon/hwmon8/power1_cap": "272000000\n", "hwmon/hwmon8/power1_input": "70000000\n",
        "hwmon/hwmon8/temp1_input": "51000\n", "hwmon/hwmon8/temp1_label": "edge\n",
        "hwmon/hwmon8/temp2_input": "63000\n", "hwmon/hwmon8/temp2_label": "junction\n",
        "hwmon/hwmon8/temp3_input": "58000\n", "hwmon/hwmon8/temp3_label": "mem\n",
    }  # fmt: skip
    for name, text in files.items():
        (dev / name).write_text(text)
    return drm


def test_every_key_of_a_full_card(tmp_path: Path) -> None:
    c = AMDSysfsCollector.create(str(full_card(tmp_path)))
    assert c is not None
    assert c.sample() == pytest.approx({
        "gpu.0.gpu": 37.0, "gpu.0.memory": 5.0, "gpu.0.temp": 51.0,
        "gpu.0.memoryAllocatedBytes": 1073741824.0,
        "gpu.0.memoryAllocated": 1073741824 / 21458059264 * 100,
        "gpu.0.powerWatts": 68.0,  # power1_average, not power1_input
        "gpu.0.powerPercent": 68 / 272 * 100,
    })  # fmt: skip
    assert c.aggregation("gpu.0.memoryAllocatedBytes") == "peak"
    with SystemMonitor(interval=3600, collectors=[c]) as m:
        snap = m.snapshot()
    assert snap["gpu.0.gpu"] == 37.0 and snap["gpu.0.memoryAllocatedBytes.max"] == 1073741824.0


def test_temperature_by_label_else_channel_number(tmp_path: Path) -> None:
    hwmon = device(full_card(tmp_path), "card0") / "hwmon" / "hwmon8"
    (hwmon / "temp1_input").unlink()
    c = AMDSysfsCollector.create(str(tmp_path / "class" / "drm"))
    assert c is not None and c.sample()["gpu.0.temp"] == 63.0  # junction
    (hwmon / "temp2_label").write_text("mem\n")  # labels win over channel numbers
    (hwmon / "temp3_label").write_text("junction\n")
    c = AMDSysfsCollector.create(str(tmp_path / "class" / "drm"))
    assert c is not None and c.sample()["gpu.0.temp"] == 58.0
    (hwmon / "temp3_label").write_text("hotspot\n")  # unknown labels are not used
    (hwmon / "temp2_label").unlink()  # temp2 without a label is amdgpu's junction
    c = AMDSysfsCollector.create(str(tmp_path / "class" / "drm"))
    assert c is not None and c.sample()["gpu.0.temp"] == 63.0


def test_files_are_found_once_and_a_vanished_one_drops_its_key(tmp_path: Path) -> None:
    drm = build(tmp_path, {"card0": ("phoenix", "0000:64:00.0")})
    c = AMDSysfsCollector.create(str(drm))
    assert c is not None
    hwmon = device(drm, "card0") / "hwmon" / "hwmon6"
    (device(drm, "card0") / "gpu_busy_percent").write_text("12\n")  # appeared: not read
    assert c.sample() == {"gpu.0.powerWatts": 3.103}
    (hwmon / "power1_average").unlink()  # no fallback to power1_input once chosen
    assert c.sample() == {}


@pytest.mark.parametrize(
    "text",
    ["N/A\n", "", "\n", "101\n", "-1\n", "12.5\n", "1e3\n", "0x10\n", "\uff11\uff12\n",
     "99999999999999999999999\n", "42" + " " * 300],
)  # fmt: skip
def test_junk_or_out_of_range_drops_the_key(tmp_path: Path, text: str) -> None:
    drm = full_card(tmp_path)
    (device(drm, "card0") / "gpu_busy_percent").write_text(text)
    (device(drm, "card0") / "hwmon" / "hwmon8" / "temp1_input").write_text("-273150\n")
    c = AMDSysfsCollector.create(str(drm))
    assert c is not None
    snap = c.sample()
    assert "gpu.0.gpu" not in snap and "gpu.0.temp" not in snap
    assert snap["gpu.0.memory"] == 5.0  # the card's other keys stay


def test_same_values_as_rocm_smi_for_the_same_readings(tmp_path: Path) -> None:
    """Cross-check of units and keys. No captured sysfs tree comes from a card with a
    captured rocm-smi output, so this tree is written with the RX 6700 XT's rocm-smi
    readings (tests/fixtures/amd/rx6700xt_rocm430.json) in the kernel's units."""
    card = json.loads(ROCM_SMI.read_text())["card0"]
    drm = build(tmp_path, {"card0": (None, card["PCI Bus"])})
    dev = device(drm, "card0")
    (dev / "hwmon" / "hwmon2").mkdir(parents=True)
    files = {
        "gpu_busy_percent": card["GPU use (%)"],
        "mem_busy_percent": card["GPU memory use (%)"],
        "mem_info_vram_total": card["VRAM Total Memory (B)"],
        "mem_info_vram_used": card["VRAM Total Used Memory (B)"],
        "hwmon/hwmon2/power1_average": "6000000",  # 6.0 W
        "hwmon/hwmon2/power1_cap": "211000000",  # 211.0 W
        "hwmon/hwmon2/temp1_input": "45000",  # edge 45.0 °C
        "hwmon/hwmon2/temp2_input": "47000",  # junction 47.0 °C
        "hwmon/hwmon2/temp3_input": "46000",  # memory 46.0 °C
    }
    for name, text in files.items():
        (dev / name).write_text(text + "\n")
    c = AMDSysfsCollector.create(str(drm))
    assert c is not None
    assert c.sample() == pytest.approx(parse_rocm_smi(ROCM_SMI.read_text()))


def test_find_cards_takes_the_environment(tmp_path: Path) -> None:
    drm = four_cards(tmp_path)
    cards = find_cards(str(drm), {"HIP_VISIBLE_DEVICES": "1"})
    assert [c.bus_id for c in cards] == ["0000:0a:00.0"]
    assert set(cards[0].files) == {"power"}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_parse_int_never_raises(data: bytes) -> None:
    value = parse_int(data)
    if value is not None:
        assert int(data.decode("ascii")) == value


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**25), 10**25))
def test_parse_int_reads_the_kernels_integers(n: int) -> None:
    assert parse_int(f"{n}\n".encode()) == (n if len(str(abs(n))) <= 20 else None)


FIELDS = ["gpu_busy_percent", "mem_busy_percent", "mem_info_vram_total", "mem_info_vram_used",
          "hwmon/hwmon8/power1_average", "hwmon/hwmon8/power1_cap",
          "hwmon/hwmon8/temp1_input"]  # fmt: skip
JUNK = st.one_of(
    st.binary(max_size=30),
    st.integers(-(10**22), 10**22).map(lambda n: f"{n}\n".encode()),
    st.sampled_from([b"N/A\n", b"nan\n", b"inf\n", b"-273150\n", b"0\n", b"\n"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(JUNK, min_size=len(FIELDS), max_size=len(FIELDS)))
def test_any_file_content_gives_only_values_in_range(contents: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        drm = full_card(Path(tmp))
        dev = device(drm, "card0")
        for name, data in zip(FIELDS, contents):
            (dev / name).write_bytes(data)
        c = AMDSysfsCollector.create(str(drm))
        assert c is not None
        for key, value in c.sample().items():
            low, high = GPU[key.split(".")[2]]
            assert math.isfinite(value) and low <= value <= high, (key, value)
