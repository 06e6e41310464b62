"""Metric descriptions (``sysmetrics/descriptions.py``): every key a collector emits is
described, the README's Metrics tables agree with the descriptions, ``describe()`` finds
the one family of tricky keys, and the Prometheus names are valid and consistent.

The keys come from real sampling: the host collectors and a running monitor on this
machine, the accelerator collectors and parsers on the captured outputs the other tests
use (``tests/fixtures/``, the NVML stand-in of ``tests/nvml_standin.py``)."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import string
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sysmetrics.descriptions as descriptions
from sysmetrics import SystemMonitor
from sysmetrics._docs import render
from sysmetrics.collectors import (
    AMDCollector,
    AppleCollector,
    Collector,
    CPUCollector,
    DiskCollector,
    IPUCollector,
    MemoryCollector,
    NetworkCollector,
    OpenMetricsCollector,
    ProcessCollector,
    TPUCollector,
    TrainiumCollector,
)
from sysmetrics.collectors.amd import parse_amd_smi, parse_amd_smi_limits, parse_rocm_smi
from sysmetrics.collectors.apple import parse_ioreg, parse_macmon
from sysmetrics.collectors.rapl import RaplCollector
from sysmetrics.collectors.torch_memory import TorchMemoryCollector
from sysmetrics.collectors.tpu import parse_tpu_info
from sysmetrics.collectors.trainium import parse_neuron_monitor
from sysmetrics.descriptions import DESCRIPTIONS, Description, describe, markdown_table
from sysmetrics.host import default_source
from sysmetrics.steptime import StepClock, StepCollector, StepTotals
from tests.nvml_standin import GPU
from tests.test_cgroup import swap_source
from tests.test_ipu import device as ipu_device
from tests.test_nvidia import HOPPER_GPM
from tests.test_nvidia import collector as nvidia_collector
from tests.test_torch_memory import StandInCuda, stand_in_torch
from tests.test_trainium import report as neuron_report

ROOT = Path(__file__).parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1024.0**3
FAMILIES = {d.key: d for d in DESCRIPTIONS}

Samples = dict[str, list[tuple[Collector, Mapping[str, float]]]]


class _IPUInfo:
    """What ``gcipuinfo.gcipuinfo()`` answers: the captured attributes of each device."""

    def __init__(self, devices: list[dict[str, str]]) -> None:
        self.devices = devices

    def getDevices(self) -> list[dict[str, str]]:
        return self.devices


def _openmetrics_pages() -> list[str]:
    """The captured DCGM page (gauges), and prometheus_client's page of a counter."""
    import prometheus_client

    registry = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter("requests", "Requests.", ["path"], registry=registry)
    counter.labels(path="/a").inc(3)
    own = prometheus_client.generate_latest(registry).decode()
    return [(FIXTURES / "openmetrics" / "dcgm_l40s.txt").read_text(), own]


@pytest.fixture
def samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Samples]:
    """Per source, (collector, one sample of it): what every collector emits."""
    source, pid = default_source(), os.getpid()
    # The first sample waits for the first PSS reading (0.2 s by default, then leaves the
    # PSS keys out): as long as it takes on a machine busy with other tests.
    monkeypatch.setattr(ProcessCollector, "pss_first_wait_s", 30.0)
    dotted = tmp_path / "data.v2"  # a disk path with a dot in it
    dotted.mkdir()
    host: list[Collector] = [
        ProcessCollector(source, pid),
        CPUCollector(source),
        MemoryCollector(source),
        DiskCollector(source, ["/", str(dotted)]),
        NetworkCollector(source),
        # This machine may have no swap: memory.swapPercent from a captured meminfo with some.
        MemoryCollector(swap_source(tmp_path, 8 * 1024 * 1024, 6 * 1024 * 1024)),
    ]
    out: Samples = {"host": [(c, c.sample()) for c in host]}
    threads = ProcessCollector(source, pid)  # the busiest thread: from its second reading on
    threads.thread_window_s, threads.thread_cpu_share = 0.0, math.inf  # read at each sample
    threads.sample()
    out["host"].append((threads, threads.sample()))
    rapl_root = tmp_path / "powercap"
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0/intel-rapl:0:1", "dram")):
        (rapl_root / zone).mkdir(parents=True)
        (rapl_root / zone / "name").write_text(name + "\n")
        (rapl_root / zone / "energy_uj").write_text("1000\n")
        (rapl_root / zone / "max_energy_range_uj").write_text("262143328850\n")
    rapl = RaplCollector.create(str(rapl_root))
    assert rapl is not None
    out["rapl"] = [(rapl, rapl.sample())]
    totals = StepTotals(0, 0.0, 0.0, 0.0)
    steps = StepCollector(lambda: lambda: totals)
    steps.observe({"cpu.energyJoules": 0.0})
    steps.sample()
    totals = StepTotals(4, 2.0, 0.5, 64.0)
    steps.observe({"cpu.energyJoules": 10.0})
    out["steps"] = [(steps, steps.sample())]
    # A callback's clock: its longest step and slow steps too (from the 4th sample on).
    now = [0.0]
    clock = StepClock(lambda: now[0])
    clock.timed = True  # its fetch timed: step.overheadPercent too
    read = clock.read
    timed = StepCollector(lambda: read)
    clock.restart()
    for seconds in (1.0, 1.0, 1.0, 1.0, 1.0, 9.0):
        now[0] += seconds
        clock.fetched(0.5)
        clock.begin()
        clock.end()
        timed_sample = timed.sample()
    assert {"step.maxSeconds", "step.slowPercent", "step.overheadPercent"} <= timed_sample.keys()
    out["steps"].append((timed, timed_sample))
    # Several ranks: the node's ranks' keys from their slots, with the clock's own.
    from sysmetrics.arrival import RankBoard, RankSlot, RankTotals

    slots = [RankSlot(r, str(tmp_path / f"{r}.slot")) for r in (0, 1)]
    for r, slot in enumerate(slots):
        slot.write(RankTotals(r, 4, 2.0, 0.5, 4.0, 0.2 + r / 10, 0.1, 0.3))
    clock.peers = RankBoard([0, 1], lambda pid: str(tmp_path / f"{pid}.slot"))
    now[0] += 1.0
    clock.begin()
    clock.end()
    ranked = timed.sample()
    assert "step.seconds" in ranked and "rank.1.step.arrivalSeconds" in ranked
    out["steps"].append((timed, ranked))
    clock.peers.close()
    for slot in slots:
        slot.close()

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    instances = [GPU("MIG-b0", used=1 << 30, total=10 << 30, is_mig=True),
                 GPU("MIG-b1", used=3 << 30, total=10 << 30, is_mig=True)]  # fmt: skip
    gpus = [GPU("GPU-a", processes=[(pid, 1 << 30)], gpm=dict(HOPPER_GPM)),
            GPU("GPU-b", processes=[(pid, 2 << 30)], minor=1, mig=instances)]  # fmt: skip
    nvidia = nvidia_collector(gpus)
    nvidia.sample()  # GPM reports from the second sample on
    out["nvidia"] = [(nvidia, nvidia.sample())]
    nvidia.close()

    amd = AMDCollector("rocm-smi")
    limits = parse_amd_smi_limits((FIXTURES / "amd-smi" / "rx6600_static.json").read_text())
    out["amd"] = [(amd, parse_rocm_smi(p.read_text())) for p in (FIXTURES / "amd").iterdir()]
    out["amd"] += [(amd, parse_amd_smi(p.read_text(), limits))
                   for p in (FIXTURES / "amd-smi").glob("*_metric.json")]  # fmt: skip

    apple = AppleCollector(None, 16 * GIB)
    out["apple"] = [
        (apple, parse_ioreg((FIXTURES / "apple" / "ioreg_m4.txt").read_text(), 16 * GIB)),
        (apple, parse_macmon((FIXTURES / "apple" / "macmon_pipe.jsonl").read_text())),
    ]
    tpu = TPUCollector("tpu-info")
    out["tpu"] = [(tpu, parse_tpu_info(p.read_text())) for p in (FIXTURES / "tpu").glob("*.txt")]
    trainium = TrainiumCollector("neuron-monitor", source, pid)
    out["trainium"] = [(trainium, parse_neuron_monitor(neuron_report([pid]), {pid}))]
    ipu = IPUCollector(
        _IPUInfo([{**ipu_device("c2_gc-info.txt", pid), "id": "0"},
                  {**ipu_device("c600_gc-info.txt", pid), "id": "1"}]),
        source, pid,
    )  # fmt: skip
    out["ipu"] = [(ipu, ipu.sample())]
    if importlib.util.find_spec("prometheus_client") is not None:
        om = OpenMetricsCollector({"dcgm": "http://127.0.0.1:1/metrics"})  # never fetches
        out["openmetrics"] = [(om, om._parse("dcgm", p.encode())) for p in _openmetrics_pages()]
    cuda = StandInCuda(2)  # no CUDA here: the stand-in of torch's documented memory_stats
    cuda.init()
    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "torch", stand_in_torch(cuda))
        torch_memory = TorchMemoryCollector()
        out["torch"] = [(torch_memory, torch_memory.sample())]
    yield out
    for c in (apple, tpu, trainium):
        c.close()


def _undescribed(keys: Iterator[str] | list[str]) -> list[str]:
    return sorted(k for k in keys if describe(k) is None)


# --- 1. every key a collector emits is described ------------------------------------------


def test_every_key_the_collectors_emit_is_described(samples: Samples) -> None:
    for name, pairs in samples.items():
        keys = [k for _, sample in pairs for k in sample]
        assert keys, f"{name}: the collector emitted nothing"
        # The monitor adds a ``.max`` companion to each peak key.
        peaks = [k + ".max" for c, s in pairs for k in s if c.aggregation(k) == "peak"]
        assert _undescribed(keys + peaks) == [], f"{name} emits keys without a description"
        for key in keys:
            assert len(descriptions._families(key)) == 1, f"{key} matches several families"


def test_counters_are_the_cumulative_keys(samples: Samples) -> None:
    """A counter family is exactly a key the monitor aggregates as ``last``.

    Not the IPU's (``last`` because a metric is reported only when it changes) nor the
    OpenMetrics endpoint's (its counters are foreign and not exported).
    """
    for name, pairs in samples.items():
        if name in ("ipu", "openmetrics"):
            continue
        for c, sample in pairs:
            for key in sample:
                found = describe(key)
                assert found is not None
                assert (found[0].kind == "counter") == (c.aggregation(key) == "last"), key


def test_the_monitor_aggregates_each_key_as_its_family_says(samples: Samples) -> None:
    """Counters ``last``, the families with a ``.max`` companion ``peak``, the rest ``mean``.

    Not the IPU's nor the OpenMetrics endpoint's (their collectors decide, as above).
    """
    for name, pairs in samples.items():
        if name in ("ipu", "openmetrics"):
            continue
        for c, sample in pairs:
            for key in sample:
                found = describe(key)
                assert found is not None
                assert c.aggregation(key) == found[0].aggregation, key
                assert descriptions.aggregation(key) == found[0].aggregation, key
    # The memory gauges with a ``.max`` companion: the collectors' peak_keys before they
    # were stated here (nvidia, amd, apple, process, torch_memory, trainium, tpu).
    assert {d.key for d in DESCRIPTIONS if d.aggregation == "peak"} == {
        "proc.memory.rssMB", "proc.memory.pssMB", "gpu.{i}.memoryAllocatedBytes",
        "gpu.process.{i}.memoryAllocatedBytes", "gpu.process.{i}.processMemoryAllocatedBytes",
        "gpu.{i}.mig.{j}.memoryAllocatedBytes", "gpu.{i}.torch.allocatedBytes",
        "gpu.{i}.torch.reservedBytes", "trn.host_total_memory_usage",
        "trn.neuron_device_total_memory_usage", "tpu.{i}.memoryUsageBytes",
    }  # fmt: skip


def test_a_running_monitor_emits_only_described_keys(tmp_path: Path) -> None:
    """The engine's own output (``.max`` companions included), with what this machine has."""
    dotted = tmp_path / "mnt.v2"
    dotted.mkdir()
    with SystemMonitor(interval=0.05, disk_paths=["/", dotted]) as m:
        snap = m.snapshot()
    assert "proc.memory.rssMB.max" in snap and f"disk.{dotted}.usagePercent" in snap
    assert _undescribed(list(snap)) == []


def test_every_description_is_emitted_by_some_collector(samples: Samples) -> None:
    """No description of a key that nothing emits (a typo, a key that was renamed)."""
    emitted = {found[0].key for pairs in samples.values() for _, s in pairs
               for k in s if (found := describe(k))}  # fmt: skip
    # No capture has an IPU power reading (the C600's reads "N/A"); the C2 has none.
    not_captured = {"ipu.{device_id}.ipu power (W)"}
    if "openmetrics" not in samples:
        not_captured.add("openmetrics.{name}.{metric}.{index}")
    assert set(FAMILIES) - emitted == not_captured


# --- 2. the README agrees ----------------------------------------------------------------


def _metrics_section() -> str:
    """The Metrics page as built: its per-source tables generated from ``key_sources``."""
    return render((ROOT / "docs" / "metrics.md").read_text())


def _readme_rows() -> list[tuple[list[str], str]]:
    """(keys, unit cell) of each Metrics table row whose first cell holds backticked keys.

    In "`gpu.{i}.smClock`, `.memoryClock`", a key starting with a dot replaces the last
    part of the row's first key.
    """
    section = _metrics_section()
    rows = []
    unit_column: int | None = None
    for line in section.splitlines():
        if not line.startswith("|"):
            unit_column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "key":
            unit_column = cells.index("unit")
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        if not names or unit_column is None:
            continue
        base = names[0].rsplit(".", 1)[0]
        keys = [base + n if n.startswith(".") else n for n in names]
        rows.append((keys, cells[unit_column]))
    return rows


def _readme_family(key: str) -> list[Description]:
    """The families a README key stands for: ``x.*`` all under ``x.``; a concrete key its own."""
    if key.endswith(".*"):
        return [d for d in DESCRIPTIONS if d.key.startswith(key[:-1])]
    if "{" in key:
        return [FAMILIES[key]] if key in FAMILIES else []
    found = describe(key)
    return [] if found is None else [found[0]]


def test_readme_tables_and_descriptions_agree() -> None:
    rows = _readme_rows()
    assert len(rows) > 40
    listed: set[str] = set()
    for keys, unit_cell in rows:
        families = [_readme_family(k) for k in keys]
        assert all(families), f"the README lists keys without a description: {keys}"
        listed.update(d.key for found in families for d in found)
        if any(k.endswith(".*") for k in keys):
            continue  # "the keys above"
        units = [found[0].unit for found in families]
        # One unit for the row ("MHz"), or one per key ("%, bytes of MIG instance j").
        cells = [unit_cell] * len(units) if len(set(units)) == 1 else unit_cell.split(", ")
        assert len(cells) == len(units), (keys, unit_cell)
        for key, unit, cell in zip(keys, units, cells):
            assert re.match(re.escape(unit) + r"(?!\w)", cell), f"{key}: {unit} vs {cell!r}"
    assert set(FAMILIES) - listed == set(), "descriptions the README's tables do not list"


def test_docs_hold_the_generated_prometheus_table() -> None:
    page = (ROOT / "docs" / "prometheus.md").read_text()
    _, _, tail = page.partition("\n## Prometheus names\n")
    assert tail, "no Prometheus names section on the Prometheus page"
    intro = tail.strip().split("\n\n")[0]
    assert "`sysmetrics/descriptions.py`" in intro and "`host`" in intro
    assert tail.rstrip().endswith("<!-- generated: prometheus -->")
    assert render(page).rstrip("\n").endswith("\n" + markdown_table().rstrip("\n"))


def test_markdown_table_lists_each_exported_family_once() -> None:
    lines = markdown_table().splitlines()
    assert lines[0] == "| Prometheus metric | type | labels | unit | sysmetrics key | help |"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    exported = [d for d in DESCRIPTIONS if d.prometheus is not None]
    assert [r[0] for r in rows] == [f"`sysmetrics_{d.prometheus}`" for d in exported]
    assert [r[4] for r in rows] == [f"`{d.key}`" for d in exported]
    by_name = {r[0]: r for r in rows}
    assert by_name["`sysmetrics_gpu_mig_memory_allocated_bytes`"][1:4] == [
        "gauge", "`gpu`, `mig`", "bytes",
    ]  # fmt: skip
    assert by_name["`sysmetrics_process_memory_rss_bytes`"][3] == "bytes"  # MiB scaled
    assert by_name["`sysmetrics_gpu_sm_clock_hertz`"][3] == "Hz"


# --- 3. describe() -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "family", "values"),
    [
        ("cpu", "cpu", {}),
        ("cpu.12.cpu_percent", "cpu.{i}.cpu_percent", {"i": "12"}),
        ("gpu.0.gpu", "gpu.{i}.gpu", {"i": "0"}),
        ("gpu.0.memory", "gpu.{i}.memory", {"i": "0"}),
        ("gpu.process.0.gpu", "gpu.process.{i}.gpu", {"i": "0"}),
        ("gpu.process.3.processMemoryAllocatedBytes",
         "gpu.process.{i}.processMemoryAllocatedBytes", {"i": "3"}),
        ("gpu.0.mig.1.memoryAllocated", "gpu.{i}.mig.{j}.memoryAllocated", {"i": "0", "j": "1"}),
        ("gpu.10.mig.6.memoryAllocatedBytes.max", "gpu.{i}.mig.{j}.memoryAllocatedBytes",
         {"i": "10", "j": "6"}),
        ("disk./.usagePercent", "disk.{path}.usagePercent", {"path": "/"}),
        ("disk./mnt/data.v2.usagePercent", "disk.{path}.usagePercent", {"path": "/mnt/data.v2"}),
        ("disk.C:\\runs.x.usageGB", "disk.{path}.usageGB", {"path": "C:\\runs.x"}),
        ("disk.in", "disk.in", {}),
        ("proc.memory.rssMB.max", "proc.memory.rssMB", {}),
        ("gpu.1.memoryAllocatedBytes.max", "gpu.{i}.memoryAllocatedBytes", {"i": "1"}),
        ("trn.host_total_memory_usage.tensors", "trn.host_total_memory_usage.{kind}",
         {"kind": "tensors"}),
        # The peak of the total, never a memory kind named "max".
        ("trn.host_total_memory_usage.max", "trn.host_total_memory_usage", {}),
        ("trn.1.neuroncore_memory_usage.model_code", "trn.{core}.neuroncore_memory_usage.{kind}",
         {"core": "1", "kind": "model_code"}),
        ("ipu.3.ipu utilisation (session) (%)", "ipu.{device_id}.ipu utilisation (session) (%)",
         {"device_id": "3"}),
        ("openmetrics.dcgm.DCGM_FI_DEV_XID_ERRORS_total.4", "openmetrics.{name}.{metric}.{index}",
         {"name": "dcgm", "metric": "DCGM_FI_DEV_XID_ERRORS_total", "index": "4"}),
    ],
)  # fmt: skip
def test_describe_finds_the_one_family(key: str, family: str, values: dict[str, str]) -> None:
    found = describe(key)
    assert found is not None
    assert (found[0].key, found[1]) == (family, values)
    found[1]["i"] = "changed"  # the caller's copy, not the cache's
    assert describe(key) == (FAMILIES[family], values)


@pytest.mark.parametrize(
    "key",
    [
        "", ".", "gpu", "gpu.x.gpu", "gpu.0.gpus", "gpu.0", "gpu.-1.gpu", "gpu.process.gpu",
        "gpu.0.mig.x.memoryAllocated", "disk..usagePercent", "disk.in.max.max", "memory.max.max",
        "cpu.max.max", "foo.max", "gpu.0.gpu.max.max", "trn.0.neuroncore_memory_usage.max",
        "tpu.0.memoryUsageBytesX", "ipu.0.clock", "openmetrics.dcgm.x", "openmetrics.dcgm.x.y",
        "network", "network.sent.total", "gpu.0.gpu\n", "\ngpu.0.gpu",
    ],
)  # fmt: skip
def test_unknown_keys_are_undescribed(key: str) -> None:
    assert describe(key) is None


def test_labels_are_the_placeholders_in_order() -> None:
    assert FAMILIES["cpu"].labels == ()
    assert FAMILIES["gpu.{i}.gpu"].labels == ("i",)
    assert FAMILIES["disk.{path}.usagePercent"].labels == ("path",)
    assert FAMILIES["gpu.{i}.mig.{j}.memoryAllocated"].labels == ("i", "j")
    assert FAMILIES["openmetrics.{name}.{metric}.{index}"].labels == ("name", "metric", "index")
    assert FAMILIES["ipu.{device_id}.link speed (GT/s)"].labels == ("device_id",)


def test_the_cache_stays_bounded() -> None:
    for n in range(25_000):
        describe(f"gpu.{n}.gpu")
    assert len(descriptions._cache) <= 10_000
    assert describe("gpu.7.gpu") == (FAMILIES["gpu.{i}.gpu"], {"i": "7"})


@settings(max_examples=500, deadline=None)
@given(st.text() | st.text(alphabet="gpu.{}0123456789xmaxdisk/ ()%", max_size=40))
def test_describe_never_raises(key: str) -> None:
    for k in (key, key + ".max", f"gpu.{key}.gpu", f"disk.{key}.usagePercent"):
        found = describe(k)
        assert found is None or set(found[1]) == set(found[0].labels)


_DIGITS = st.integers(min_value=0, max_value=10**6).map(str)
_NO_DOT = st.text(alphabet=string.ascii_letters + string.digits + "_-:", min_size=1)
_VALUES = {"i": _DIGITS, "j": _DIGITS, "core": _DIGITS, "device_id": _DIGITS, "index": _DIGITS,
           "rank": _DIGITS, "path": st.text(min_size=1), "name": _NO_DOT, "metric": _NO_DOT,
           "kind": _NO_DOT.filter(lambda s: s != "max")}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(DESCRIPTIONS), st.data())
def test_a_key_made_from_a_family_is_described_as_it(d: Description, data: Any) -> None:
    values = {name: data.draw(_VALUES[name], label=name) for name in d.labels}
    key = d.key.format(**values)
    assert describe(key) == (d, values)
    assert len(descriptions._families(key)) == 1


# --- 4. Prometheus names -----------------------------------------------------------------

_SUFFIX = {"%": "_percent", "bytes": "_bytes", "MiB": "_bytes", "GiB": "_bytes",
           "°C": "_celsius", "W": "_watts", "MHz": "_hertz",
           "GT/s": "_transfers_per_second"}  # fmt: skip
_SCALE = {"MiB": 1024.0**2, "GiB": 1024.0**3, "MHz": 1e6, "GT/s": 1e9}


def test_family_keys_are_unique_and_well_formed() -> None:
    assert len(FAMILIES) == len(DESCRIPTIONS)
    for d in DESCRIPTIONS:
        assert d.kind in ("gauge", "counter")
        assert d.help and "\n" not in d.help and "|" not in d.help, d.key
        assert d.unit and "|" not in d.unit, d.key
        assert len(set(d.labels)) == len(d.labels), d.key


@pytest.mark.parametrize("d", DESCRIPTIONS, ids=lambda d: d.key)
def test_prometheus_name_is_valid_and_in_base_units(d: Description) -> None:
    if d.prometheus is None:
        assert d.prometheus_labels == () and d.scale == 1.0
        return
    assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", d.prometheus), d.prometheus
    assert re.fullmatch(r"[a-z][a-z0-9_]*", d.prometheus), "snake_case"
    assert not d.prometheus.startswith("sysmetrics_"), "the exporter adds the prefix"
    assert d.prometheus.endswith("_total") == (d.kind == "counter")
    base = d.prometheus.removesuffix("_total")
    if d.unit in _SUFFIX:
        assert base.endswith(_SUFFIX[d.unit]), (d.prometheus, d.unit)
    assert d.scale == _SCALE.get(d.unit, 1.0)
    assert len(d.prometheus_labels) == len(d.labels)
    for label in d.prometheus_labels:
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label) and not label.startswith("__")
        assert label not in ("host", "node"), "the exporter adds host and node itself"


def test_one_prometheus_name_means_one_shape() -> None:
    """Families sharing a Prometheus name agree on labels, kind, unit and scale."""
    shapes: dict[str, set[tuple[object, ...]]] = {}
    for d in DESCRIPTIONS:
        if d.prometheus is not None:
            shapes.setdefault(d.prometheus, set()).add(
                (d.prometheus_labels, d.kind, d.unit, d.scale)
            )
    assert {name: s for name, s in shapes.items() if len(s) > 1} == {}


def test_gpu_process_copies_are_not_exported_again() -> None:
    copies = [d for d in DESCRIPTIONS if d.key.startswith("gpu.process.")]
    exported = {d.key: d.prometheus for d in copies if d.prometheus is not None}
    assert exported == {"gpu.process.{i}.processMemoryAllocatedBytes": "gpu_process_memory_bytes"}
    for d in copies:
        twin = FAMILIES.get(d.key.replace("gpu.process.", "gpu.", 1))
        if twin is not None:
            assert (d.unit, d.kind) == (twin.unit, twin.kind)


# --- 5. the grammar beyond one family: GPU keys, gathered node keys; counter rates -------


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        ("gpu.0.gpu", ("0", False, "gpu")),
        ("gpu.12.mig.3.memoryAllocated", ("12", False, "mig.3.memoryAllocated")),
        ("gpu.process.1.temp", ("1", True, "temp")),
        ("gpu.0.somethingNew", ("0", False, "somethingNew")),  # undescribed: still GPU 0's
        ("gpu.0.memoryAllocatedBytes.max", ("0", False, "memoryAllocatedBytes.max")),
        ("gpu.x.gpu", None), ("gpu.0.", None), ("gpu.0", None), ("gpu.process.gpu", None),
        ("node1/gpu.0.gpu", None), ("cpu", None), ("gpus.0.gpu", None), ("gpu.\u0663.gpu", None),
    ],
)  # fmt: skip
def test_gpu_key_splits_the_keys_of_one_gpu(key: str, parts: tuple[str, bool, str] | None) -> None:
    found = descriptions.gpu_key(key)
    assert (None if found is None else tuple(found)) == parts


def test_a_process_key_names_its_device_twin() -> None:
    found = descriptions.gpu_key("gpu.process.2.mig.1.memoryAllocatedBytes")
    assert found is not None and found.device_key == "gpu.2.mig.1.memoryAllocatedBytes"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([d for d in DESCRIPTIONS if d.key.startswith("gpu.")]), st.data())
def test_every_gpu_family_key_is_a_gpu_key(d: Description, data: Any) -> None:
    values = {name: data.draw(_VALUES[name], label=name) for name in d.labels}
    key = d.key.format(**values)
    found = descriptions.gpu_key(key)
    assert found is not None and found.i == values["i"]
    assert found.process == d.key.startswith("gpu.process.")
    assert found.device_key == key.replace("gpu.process.", "gpu.", 1)


@settings(max_examples=500, deadline=None)
@given(st.text() | st.text(alphabet="gpu.process0123456789/node_minax", max_size=40))
def test_key_splitting_never_raises_and_round_trips(key: str) -> None:
    gpu = descriptions.gpu_key(key)
    if gpu is not None:
        prefix = "gpu.process." if gpu.process else "gpu."
        assert key == f"{prefix}{gpu.i}.{gpu.rest}" and gpu.i.isascii() and gpu.i.isdigit()
    node = descriptions.split_node(key)
    if node is not None:
        assert key == descriptions.node_key(node.node if node.node is not None else node.segment,
                                            node.key)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.integers(min_value=0, max_value=10**6),
              st.sampled_from([descriptions.NODES_MIN, descriptions.NODES_MAX])),
    st.text(),
)  # fmt: skip
def test_a_gathered_key_splits_into_its_node_and_key(node: int | str, key: str) -> None:
    gathered = descriptions.node_key(node, key)
    assert descriptions.split_node(gathered) == (
        f"node{node}" if isinstance(node, int) else node,
        node if isinstance(node, int) else None,
        key,
    )
    assert descriptions.split_node(key if "/" not in key else "cpu") is None


@pytest.mark.parametrize(
    ("before", "after", "seconds", "rate"),
    [
        (10.0, 30.0, 2.0, 10.0),
        (5.0, 5.0, 1.0, 0.0),  # no increase: a rate of 0
        (30.0, 10.0, 2.0, None),  # a decrease: the counter restarted
        (10.0, 30.0, 0.0, None),  # no time passed
        (10.0, 30.0, -1.0, None),  # the clock went back
        (math.nan, 30.0, 2.0, None),
        (10.0, math.nan, 2.0, None),
        (10.0, 30.0, math.nan, None),  # across two recordings
    ],
)
def test_counter_rate(before: float, after: float, seconds: float, rate: float | None) -> None:
    assert descriptions.counter_rate(before, after, seconds) == rate


def test_rate_units() -> None:
    units = {d.key: d.rate_unit for d in DESCRIPTIONS if d.kind == "counter"}
    assert units["disk.in"] == "MiB/s" and units["network.sent"] == "bytes/s"
    assert units["cpu.energyJoules"] == "W" and units["gpu.{i}.correctedMemoryErrors"] == "count/s"


def test_a_custom_collectors_lists_come_before_the_descriptions() -> None:
    """``BaseCollector``: a subclass's ``last_keys``/``peak_keys`` first (its own keys), then
    the key's family, then ``mean``."""
    from sysmetrics import BaseCollector

    class Plain(BaseCollector):
        pass

    class Listed(BaseCollector):
        last_keys = frozenset({"ticks", "in"})
        peak_keys = frozenset({"heap"})

    plain, listed = Plain(), Listed()
    assert [plain.aggregation(k) for k in ("disk.in", "proc.memory.pssMB", "cpu")] == [
        "last", "peak", "mean",
    ]  # fmt: skip
    assert [plain.aggregation(k) for k in ("my.ticks", "my.heap", "gpu.0.new")] == ["mean"] * 3
    assert [listed.aggregation(k) for k in ("my.ticks", "my.heap", "x.in")] == [
        "last", "peak", "last",
    ]  # fmt: skip
    assert listed.aggregation("gpu.0.memoryAllocatedBytes") == "peak"  # not listed: described
