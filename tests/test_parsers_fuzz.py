"""Property-based tests: the vendor-tool parsers never let junk through.

Every input is derived from the captured outputs in ``tests/fixtures/`` (truncated,
characters flipped, lines dropped or duplicated, numbers replaced by NaN, Infinity, -1,
1e400, huge integers, strings or null, JSON values swapped for other types at any path).
Whatever the input, a parser returns values or raises its one documented error (the AMD
parsers: ``ValueError``; the others never raise), and every value it returns is a finite
float in its key's range: percentages in 0..100, temperatures in -50..200 °C, everything
else (bytes, W, MHz, GT/s) non-negative.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sysmetrics import SystemMonitor
from sysmetrics.cgroup import Cgroup
from sysmetrics.collectors import AMDCollector, MemoryCollector, OpenMetricsCollector
from sysmetrics.collectors.amd import (
    _bytes,
    _number,
    _value,
    parse_amd_smi,
    parse_amd_smi_limits,
    parse_rocm_smi,
)
from sysmetrics.collectors.apple import parse_ioreg, parse_macmon
from sysmetrics.collectors.ipu import METRICS, parse_attribute
from sysmetrics.collectors.memory import SWAP_KEY
from sysmetrics.collectors.tpu import parse_tpu_info
from sysmetrics.collectors.trainium import parse_neuron_monitor
from sysmetrics.descriptions import describe
from tests.test_cgroup import swap_source

prometheus_client = pytest.importorskip("prometheus_client")

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1024.0**3
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def read(path: str) -> str:
    return (FIXTURES / path).read_text()


ROCM = [read(f"amd/{n}") for n in ("mi100_rocm571.json", "rx6700xt_rocm430.json",
                                   "vega-20-WKS-GL-XE.json")]  # fmt: skip
AMD_METRIC = [read("amd-smi/rx6600_metric.json"), read("amd-smi/r9700x2_metric.json")]
AMD_STATIC = [read("amd-smi/rx6600_static.json")]
NEURON = [read("trainium/neuron-monitor-trn1.2xlarge.json")]
TPU = [read(f"tpu/{n}") for n in ("static_v6e.txt", "streaming_v6e.txt", "metric_v6e_8chips.txt")]
IOREG = [read("apple/ioreg_m4.txt")]
MACMON = [read("apple/macmon_pipe.jsonl")]
GC_INFO = [read("ipu/c2_gc-info.txt"), read("ipu/c600_gc-info.txt")]


def _own_exposition() -> str:
    """The page prometheus_client serves for this process (its real exposition format)."""
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    prometheus_client.PlatformCollector(registry=registry)
    prometheus_client.GCCollector(registry=registry)
    counter = prometheus_client.Counter("requests", "Requests.", ["path"], registry=registry)
    counter.labels(path='/a "quoted" \\ path').inc(3)
    return prometheus_client.generate_latest(registry).decode()


OPENMETRICS = [read("openmetrics/dcgm_l40s.txt"), _own_exposition()]
_OM_KEY = re.compile(r"openmetrics\.e\.[a-zA-Z_:][a-zA-Z0-9_:]*\.[0-9]+")


# --- what every result must satisfy ------------------------------------------------------

_PERCENT = (".gpu", ".memory", ".memoryAllocated", ".memoryUsage", ".dutyCycle",
            ".neuroncore_utilization", "(%)")  # fmt: skip
_CELSIUS = (".temp", "(C)")


def check_values(values: dict[str, float]) -> None:
    """Every value a finite float; % in 0..100 (power % of a cap 0..1000), °C in -50..200,
    everything else >= 0. A key is a percentage where its description's unit is ``%``
    (``trn.0.neuroncore_memory_usage.gpu`` is bytes, though it ends as ``gpu.0.gpu``
    does); the suffixes decide only for keys no family declares."""
    assert isinstance(values, dict)
    for key, value in values.items():
        assert isinstance(key, str)
        if key.startswith(("gpu.", "tpu.")):
            assert re.fullmatch(r"(gpu|tpu)\.[0-9]+\.[A-Za-z]+(\.max)?", key), key
        assert type(value) is float, (key, value)
        assert math.isfinite(value), (key, value)
        described = describe(key)  # the key's unit where its family is declared
        if key.endswith(".powerPercent"):
            assert 0.0 <= value <= 1000.0, (key, value)
        elif described[0].unit == "%" if described else key.endswith(_PERCENT):
            assert 0.0 <= value <= 100.0, (key, value)
        elif key.endswith(_CELSIUS):
            assert -50.0 <= value <= 200.0, (key, value)
        else:
            assert value >= 0.0, (key, value)


def gc_info_attrs(text: str) -> list[tuple[str, str]]:
    """``key: value`` pairs of ``gc-info --device-info`` text, as tests/test_ipu.py reads them."""
    pairs = []
    for line in text.splitlines()[2:]:
        key, _, value = line.strip().partition(": ")
        pairs.append((key, value))
    return pairs


def run_rocm(text: str) -> None:
    try:
        values = parse_rocm_smi(text)
    except ValueError:
        return
    check_values(values)


def run_amd_smi(text: str) -> None:
    try:
        values = parse_amd_smi(text, {0: 100.0, 1: 300.0})
    except ValueError:
        return
    check_values(values)


def run_amd_limits(text: str) -> None:
    try:
        caps = parse_amd_smi_limits(text)
    except ValueError:
        return
    for gpu, cap in caps.items():
        assert type(gpu) is int and gpu >= 0
        assert type(cap) is float and math.isfinite(cap) and cap > 0.0, (gpu, cap)


def run_neuron_text(text: str) -> None:
    """As the collector does: lines that do not decode are skipped, the rest parsed."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return
    run_neuron(doc)


def run_neuron(doc: Any) -> None:
    check_values(parse_neuron_monitor(doc, {1337}))
    check_values(parse_neuron_monitor(doc, set()))


def run_tpu(text: str) -> None:
    check_values(parse_tpu_info(text))


def run_ioreg(text: str) -> None:
    check_values(parse_ioreg(text, 16 * GIB))


def run_macmon(text: str) -> None:
    check_values(parse_macmon(text))


def run_gc_info(text: str) -> None:
    for name, value in gc_info_attrs(text):
        parsed = parse_attribute(name, value)
        if parsed is not None:
            check_values({f"ipu.0.{parsed[0]}": parsed[1]})


def run_openmetrics(text: str) -> None:
    """Parse a clean page, then the damaged one (through the series cache) and a new one."""
    c = OpenMetricsCollector({"e": "http://127.0.0.1:1/metrics"})  # never fetches
    for page in (OPENMETRICS[1], text, text):
        try:
            values = c._parse("e", page.encode())
        except ValueError:
            continue  # the documented error: a malformed line of a wanted metric
        for key, value in values.items():
            assert _OM_KEY.fullmatch(key), key
            assert type(value) is float, (key, value)  # NaN is the engine's to drop


TEXT_PARSERS: dict[str, tuple[list[str], Callable[[str], None]]] = {
    "rocm-smi": (ROCM, run_rocm),
    "amd-smi metric": (AMD_METRIC, run_amd_smi),
    "amd-smi static": (AMD_STATIC, run_amd_limits),
    "neuron-monitor": (NEURON, run_neuron_text),
    "tpu-info": (TPU, run_tpu),
    "ioreg": (IOREG, run_ioreg),
    "macmon": (MACMON, run_macmon),
    "gc-info": (GC_INFO, run_gc_info),
    "openmetrics": (OPENMETRICS, run_openmetrics),
}
JSON_PARSERS = ["rocm-smi", "amd-smi metric", "amd-smi static", "neuron-monitor", "macmon"]


# --- strategies: the captured outputs, damaged -------------------------------------------

# Numbers and JSON paths are drawn from all, or from those near what the parsers read.
_READ = re.compile(r"use|Power|Temperature|VRAM|activity|power|temp|vram|limit|utiliz|pid|Duty"
                   r"|Usage|GiB|Utilization|memory|clock|speed")  # fmt: skip
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
HOSTILE_TOKENS = ["NaN", "Infinity", "-Infinity", "nan", "inf", "-inf", "-1", "-0.5", "1e400",
                  "-1e400", "1e308", "9" * 400, "1" + "0" * 400, "101", "1001", "1.2.3",
                  '"x"', '"NaN"', '"1e400"', '"-1"', "null", "[]", "{}", "true", "\u00b2",
                  "\u0663", "0" * 5000]  # fmt: skip
FLIP_CHARS = st.sampled_from(list('0123456789.-+eE{}[]",:%N|/ \n\x00\u00b2\u0663\u2502'))


@st.composite
def truncated(draw: st.DrawFn, texts: list[str]) -> str:
    text = draw(st.sampled_from(texts))
    return text[: draw(st.integers(0, len(text)))]


@st.composite
def flipped(draw: st.DrawFn, texts: list[str]) -> str:
    """Characters replaced, or one bit of their code point flipped."""
    chars = list(draw(st.sampled_from(texts)))
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(chars) - 1))
        if draw(st.booleans()):
            chars[i] = draw(FLIP_CHARS | st.characters())
        else:
            flipped_cp = ord(chars[i]) ^ (1 << draw(st.integers(0, 7)))
            if not 0xD800 <= flipped_cp <= 0xDFFF:
                chars[i] = chr(flipped_cp)
    return "".join(chars)


@st.composite
def relined(draw: st.DrawFn, texts: list[str]) -> str:
    """Lines dropped, duplicated or swapped."""
    lines = draw(st.sampled_from(texts)).splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            break
        i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


@st.composite
def renumbered(draw: st.DrawFn, texts: list[str]) -> str:
    """Numbers in the text replaced by NaN, Infinity, -1, 1e400, huge integers, text, null."""
    text = draw(st.sampled_from(texts))
    spans = [m.span() for m in _NUMBER.finditer(text)]
    read = [(a, b) for a, b in spans if _READ.search(text[max(0, a - 40) : a])]
    spans = draw(st.sampled_from([spans, read or spans]))
    chosen = draw(st.sets(st.integers(0, len(spans) - 1), min_size=1, max_size=8))
    for index in sorted(chosen, reverse=True):
        start, end = spans[index]
        text = text[:start] + draw(st.sampled_from(HOSTILE_TOKENS)) + text[end:]
    return text


def json_paths(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``doc`` (the root included)."""
    out = [path]
    if isinstance(doc, list):
        doc = dict(enumerate(doc))
    items = doc.items() if isinstance(doc, dict) else ()
    for key, value in items:
        out.extend(json_paths(value, (*path, key)))
    return out


SCALARS = st.sampled_from([math.nan, math.inf, -math.inf, -1, -1.0, -0.5, 1e308, 10**400,
                           -(10**400), 2**64, 0, 101, 1001, 1e-320, "N/A", "NaN", "1e400",
                           "-5", "", "abc", "%", None, True, False])  # fmt: skip
KEYS = st.sampled_from(["value", "unit", "gpu", "pid", "0"]) | st.text(max_size=3)
JSON_VALUES = st.recursive(
    SCALARS | st.floats() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


def type_swapped(value: Any) -> list[Any]:
    """The same value as other JSON types."""
    swaps: list[Any] = [None, [value], {"value": value}, str(value), json.dumps(value)]
    if isinstance(value, dict):
        swaps += [list(value.values()), list(value)]
    if isinstance(value, list):
        swaps.append({str(i): v for i, v in enumerate(value)})
    return swaps


@st.composite
def json_swapped(draw: st.DrawFn, texts: list[str]) -> Any:
    """The decoded fixture with values at 1 to 4 paths swapped for other types or junk."""
    index = draw(st.integers(0, len(texts) - 1))
    doc = json.loads(texts[index])
    pools = _PATHS[texts[index]]
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(draw(st.sampled_from(pools))))
        if not path:
            doc = draw(st.sampled_from(type_swapped(doc)) | JSON_VALUES)
            continue
        try:  # an earlier swap may have removed or replaced the path
            parent = doc
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, (dict, list)):
                old = parent[path[-1]]
                parent[path[-1]] = draw(st.sampled_from(type_swapped(old)) | JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue
    return doc


# Paths are drawn from all of them, or from those that name what the parsers read.


def path_pools(text: str) -> list[list[tuple[Any, ...]]]:
    paths = json_paths(json.loads(text))
    read = [p for p in paths if any(_READ.search(str(k)) for k in p)]
    return [paths, read or paths]


_PATHS = {t: path_pools(t) for t in ROCM + AMD_METRIC + AMD_STATIC + NEURON + MACMON}
MUTATIONS = {"truncated": truncated, "flipped": flipped, "relined": relined,
             "renumbered": renumbered}  # fmt: skip


# --- the properties ---------------------------------------------------------------------


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@pytest.mark.parametrize("parser", sorted(TEXT_PARSERS))
def test_damaged_text(parser: str, mutation: str) -> None:
    texts, run = TEXT_PARSERS[parser]

    @SETTINGS
    @given(MUTATIONS[mutation](texts))
    def prop(text: str) -> None:
        run(text)

    prop()


@pytest.mark.parametrize("parser", JSON_PARSERS)
def test_json_types_swapped(parser: str) -> None:
    texts, run = TEXT_PARSERS[parser]

    @SETTINGS
    @given(json_swapped(texts))
    def prop(doc: Any) -> None:
        if parser == "neuron-monitor":
            run_neuron(doc)
        else:
            run(json.dumps(doc))

    prop()


@pytest.mark.parametrize("parser", sorted(TEXT_PARSERS))
def test_every_fiftieth_truncation(parser: str) -> None:
    texts, run = TEXT_PARSERS[parser]
    for text in texts:
        for i in range(51):
            run(text[: len(text) * i // 50])


@pytest.mark.parametrize("parser", JSON_PARSERS)
def test_deeply_nested_json(parser: str) -> None:
    for text in ("[" * 100_000, '{"a": ' * 100_000, '{"card0": ' * 100_000):
        TEXT_PARSERS[parser][1](text)


def test_odd_indices_are_not_keys() -> None:
    run_amd_smi('[{"gpu": true, "usage": {"gfx_activity": 5}}]')
    run_amd_smi('[{"gpu": -1, "usage": {"gfx_activity": 5}}]')
    run_amd_limits('[{"gpu": true, "limit": {"socket_power": 5}}]')
    run_rocm('{"card\u00b2": {"GPU use (%)": "5"}, "card-1": {"GPU use (%)": "5"}}')
    run_tpu("TPU Duty Cycle\n| \u00b2 | 5% |\n| \u0663 | 5% |\n| " + "9" * 5000 + " | 5% |")


@SETTINGS
@given(JSON_VALUES)
def test_neuron_monitor_any_json_document(doc: Any) -> None:
    run_neuron(doc)
    run_neuron({"neuron_runtime_data": doc})
    run_neuron({"neuron_runtime_data": [{"pid": doc, "report": doc}]})


@SETTINGS
@given(JSON_VALUES)
def test_amd_smi_field_helpers_give_a_float_or_none(obj: Any) -> None:
    """They read, not check (the parsers check each key's range): no error, float or None."""
    for value in (_value(obj), _bytes(obj), _number({"x": obj}, "x")):
        assert value is None or type(value) is float, value


@SETTINGS
@given(
    st.sampled_from(AMD_METRIC),
    st.dictionaries(st.integers(-2, 3), st.floats() | st.sampled_from([0.0, -1.0, 1e-300])),
)
def test_amd_smi_with_any_power_caps(text: str, limits: dict[int, float]) -> None:
    check_values(parse_amd_smi(text, limits))


@SETTINGS
@given(
    st.sampled_from(IOREG),
    st.sampled_from([16 * GIB, 1.0, 0.0, -1.0, math.nan, math.inf]),
    st.sampled_from(["Device Utilization %", "In use system memory"]),
    st.sampled_from(HOSTILE_TOKENS),
)
def test_ioreg_hostile_statistics(text: str, total: float, name: str, token: str) -> None:
    text = re.sub(rf'"{re.escape(name)}"=\d+', f'"{name}"={token}', text)
    check_values(parse_ioreg(text, total))


@SETTINGS
@given(
    st.sampled_from(sorted(METRICS)),
    st.sampled_from(HOSTILE_TOKENS) | st.text(max_size=8),
    st.sampled_from(["", " "]),
    st.booleans(),
)
def test_gc_info_hostile_attribute(name: str, number: str, space: str, unit: bool) -> None:
    value = number + space + (METRICS[name] if unit else "")
    parsed = parse_attribute(name, value)
    if parsed is not None:
        check_values({f"ipu.0.{parsed[0]}": parsed[1]})


# The kernel's swap numbers: meminfo's SwapTotal and SwapFree, and the cgroup v2 swap files.
_CGROUP_TEXT = (
    st.none()  # the file is missing
    | st.sampled_from(["max", "0", "", "max\n", str(1 << 62), *HOSTILE_TOKENS])
    | st.integers().map(str)
    | st.text()
)
_KB = st.integers(min_value=-(10**30), max_value=10**400) | st.sampled_from([0, 1, 2**63])


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(_KB, _KB, _CGROUP_TEXT, _CGROUP_TEXT, _CGROUP_TEXT)
def test_swap_percent_with_hostile_swap_numbers(
    tmp_path: Path,
    total_kb: int,
    free_kb: int,
    ctr_max: str | None,
    ctr_current: str | None,
    pod_max: str | None,
) -> None:
    """Whatever meminfo's swap lines and the cgroup's swap files hold, ``memory.swapPercent``
    is in 0..100, and absent without swap or where the cgroup's swap limit is 0."""
    source = swap_source(tmp_path, total_kb, free_kb)
    ctr, pod = tmp_path / "cg/pod/ctr", tmp_path / "cg/pod"
    ctr.mkdir(parents=True, exist_ok=True)
    for path, text in (
        (ctr / "memory.swap.max", ctr_max),
        (ctr / "memory.swap.current", ctr_current),
        (pod / "memory.swap.max", pod_max),
    ):
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
    cg = Cgroup(2, memory_dirs=[str(ctr), str(pod)])
    limit, used = cg.swap_limit(), cg.swap_used()
    assert (limit is None or limit >= 0) and (used is None or used >= 0)
    values = MemoryCollector(source, cg).sample()
    check_values(values)
    swap = values.get(SWAP_KEY)
    assert swap is None or 0.0 <= swap <= 100.0
    if total_kb <= 0 or limit == 0:
        assert swap is None


def _rocm_gpu_use(value: str) -> str:
    doc = json.loads(ROCM[1])
    doc["card0"]["GPU use (%)"] = value
    return json.dumps(doc)


DROPPED = {
    "rocm-smi": (lambda: parse_rocm_smi(_rocm_gpu_use("101")), "gpu.0.gpu"),
    "amd-smi": (
        lambda: parse_amd_smi(
            AMD_METRIC[0].replace('"edge": {"value": 36', '"edge": {"value": 999')
        ),
        "gpu.0.temp",
    ),
    "neuron-monitor": (
        lambda: parse_neuron_monitor(
            json.loads(NEURON[0].replace('"host": 610705408', '"host": -1')), {1337}
        ),
        "trn.host_total_memory_usage",
    ),
    "tpu-info": (
        lambda: parse_tpu_info(TPU[0].replace("18.45 GiB / 31", "45.45 GiB / 31")),
        "tpu.0.memoryUsage",
    ),
    "ioreg": (
        lambda: parse_ioreg(
            IOREG[0].replace('"Device Utilization %"=17', '"Device Utilization %"=-3'), GIB
        ),
        "gpu.0.gpu",
    ),
    "macmon": (lambda: parse_macmon(MACMON[0].replace("36.95167", "NaN")), "gpu.0.temp"),
    "gc-info": (
        lambda: dict(p for p in [parse_attribute("ipu utilisation", "100.5%")] if p),
        "ipu utilisation (%)",
    ),
}


@pytest.mark.parametrize("parser", sorted(DROPPED))
def test_an_implausible_value_is_dropped_with_one_debug_line(
    parser: str, caplog: pytest.LogCaptureFixture
) -> None:
    parse, key = DROPPED[parser]
    caplog.set_level(logging.DEBUG, logger="sysmetrics")
    values = parse()
    assert not any(k.endswith(key) for k in values), values
    lines = [r for r in caplog.records if key in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG, caplog.text


# --- end to end: SystemMonitor() with a hostile stand-in tool on PATH --------------------


def _rocm_hostile() -> str:
    doc = json.loads(ROCM[1])
    card = doc["card0"]
    card["GPU use (%)"] = "1e400"
    card["GPU memory use (%)"] = "NaN"
    card["Temperature (Sensor edge) (C)"] = "-inf"
    card["Average Graphics Package Power (W)"] = "-5"
    card["VRAM Total Memory (B)"] = "1"
    card["Max Graphics Package Power (W)"] = "1e-320"
    return json.dumps(doc)


def _amd_smi_hostile() -> str:
    doc = json.loads(AMD_METRIC[0])
    doc[0]["usage"]["gfx_activity"]["value"] = 10**400
    doc[0]["usage"]["umc_activity"]["value"] = math.nan
    doc[0]["temperature"]["edge"]["value"] = 1e400
    doc[0]["power"]["socket_power"]["value"] = -6
    return json.dumps(doc)


def _amd_smi_nan_cap() -> str:
    doc = json.loads(AMD_STATIC[0])
    doc[0]["limit"]["socket_power"]["value"] = math.nan
    return json.dumps(doc)


HOSTILE_TOOLS = {
    "rocm-smi bad numbers": ("rocm-smi", _rocm_hostile(), None),
    "rocm-smi truncated": ("rocm-smi", ROCM[1][: len(ROCM[1]) // 2], None),
    "rocm-smi bare 1e400": ("rocm-smi", '{"card0": {"GPU use (%)": 1e400}}', None),
    "amd-smi huge int, NaN, 1e400, negative": ("amd-smi", _amd_smi_hostile(), AMD_STATIC[0]),
    "amd-smi NaN power cap": ("amd-smi", AMD_METRIC[0], _amd_smi_nan_cap()),
    "amd-smi truncated": ("amd-smi", AMD_METRIC[0][:999], AMD_STATIC[0][:99]),
    "amd-smi gpu_data not a list": ("amd-smi", '{"gpu_data": {"gpu": 0}}', "[]"),
    "amd-smi deeply nested": ("amd-smi", "[" * 100_000, "{" * 100_000),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TOOLS))
def test_system_monitor_survives_a_hostile_amd_tool(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool, metric, static = HOSTILE_TOOLS[case]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "metric.json").write_text(metric)
    (tmp_path / "static.json").write_text(static or "")
    exe = bin_dir / tool
    exe.write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in static) cat '{tmp_path / 'static.json'}' ;;"
        f" *) cat '{tmp_path / 'metric.json'}' ;; esac\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr("sysmetrics.collectors.amd.ROCM_LOCATIONS", ())
    monkeypatch.setattr("sysmetrics.collectors.amd.AMD_SMI_LOCATIONS", ())
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]))

    with SystemMonitor(interval=3600) as m:
        amd = [c for c in m.collectors if isinstance(c, AMDCollector)]
        snap = m.snapshot()
        for c in amd:
            check_values(c.sample())
    check_values({k: v for k, v in snap.items() if k.startswith("gpu.")})
