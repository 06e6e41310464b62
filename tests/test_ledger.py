"""The cost ledger (:mod:`sysmetrics.ledger`): crafted run files with known energy increments.

Each run below is written with the run file's own writer (:func:`tests.rule_examples.recording`)
and read back through ``sysmetrics report --json`` (and the page), so the figures are the
ones a user gets; their values are exact (sums of the increments written).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import cli, ledger
from sysmetrics.errors import OptionError
from sysmetrics.runfile import read_run
from sysmetrics.runview import RunView
from tests.rule_examples import recording

N = 11  # samples, 1 s apart: 10 intervals
GPU_J, CPU_J, DRAM_J = 100.0, 50.0, 10.0  # J each counter grows per interval
STEPS = 2  # steps per interval
SPS, STEP_S = 64.0, 0.5  # step.samplesPerSecond, step.seconds: 32 samples a step


def samples(gpu: bool = True, cpu: bool = True, dram: bool = True, used: bool = True,
            other_gpu: bool = False) -> list[dict[str, float]]:  # fmt: skip
    out = []
    for n in range(N):
        m: dict[str, float] = {"step.samplesPerSecond": SPS, "step.seconds": STEP_S}
        if gpu:
            m["gpu.0.energyJoules"] = 1000.0 + GPU_J * n
            m["gpu.0.gpu"] = 90.0
            if used:
                m["gpu.process.0.gpu"] = 90.0
        if other_gpu:  # a GPU the job does not use
            m["gpu.1.energyJoules"] = 7.0 * n
            m["gpu.1.gpu"] = 0.0
        if cpu:
            m["cpu.energyJoules"] = 5.0 + CPU_J * n
        if dram:
            m["memory.energyJoules"] = DRAM_J * n
        out.append(m)
    return out


def write(path: Path, metrics: list[dict[str, float]], node: int = 0) -> Path:
    path.write_bytes(recording(metrics, steps=[STEPS * n for n in range(N)], node=node))
    return path


def report_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert cli.main(["report", "--json", *args]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc["ledger"]  # type: ignore[no-any-return]


def test_exact_figures_with_every_counter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write(tmp_path / "run.jsonl", samples())
    got = report_json(capsys, str(run), "--price-per-kwh", "0.36",
                      "--price-per-device-hour", "gpu=3.6", "--price-per-device-hour",
                      "node=0.72", "--carbon-intensity", "400")  # fmt: skip
    node = got["nodes"][0]
    total = 10 * (GPU_J + CPU_J + DRAM_J)  # 1,600 J
    assert node["parts_joules"] == {"gpu.0": 1000.0, "cpu": 500.0, "dram": 100.0}
    assert node["counted"] == ["GPU 0", "CPU packages (RAPL)", "DRAM (RAPL)"]
    assert node["not_counted"] == [ledger.NOT_COUNTED_REST]
    hours = 10.0 / 3600.0
    whole = got["job"]["run"]
    assert whole["joules"] == pytest.approx(total, rel=1e-12)
    assert whole["kwh"] == pytest.approx(total / 3.6e6, rel=1e-12)
    assert whole["device_hours"] == pytest.approx({"gpu": hours, "node": hours}, rel=1e-12)
    money = total / 3.6e6 * 0.36 + hours * 3.6 + hours * 0.72
    assert whole["money"] == pytest.approx(money, rel=1e-12)
    assert whole["gco2e"] == pytest.approx(total / 3.6e6 * 400.0, rel=1e-12)
    step = got["job"]["per_step"]  # 160 J per interval over 2 steps
    assert step["joules"] == pytest.approx(80.0, rel=1e-12)
    assert step["money"] == pytest.approx(money / 20, rel=1e-12)
    assert step["gco2e"] == pytest.approx(80.0 / 3.6e6 * 400.0, rel=1e-12)
    per_k = got["job"]["per_1000_samples"]  # 32 samples a step
    assert node["samples_per_step"] == pytest.approx(SPS * STEP_S, rel=1e-12)
    assert per_k["joules"] == pytest.approx(80.0 / 32 * 1000, rel=1e-12)
    assert per_k["gco2e"] == pytest.approx(80.0 / 32 * 1000 / 3.6e6 * 400.0, rel=1e-12)
    assert got["prices"] == {"price_per_kwh": 0.36,
                             "price_per_device_hour": {"gpu": 3.6, "node": 0.72},
                             "carbon_intensity": 400.0}  # fmt: skip


def test_no_prices_no_money_nor_carbon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without prices, energy alone: money and carbon are absent, never a default."""
    got = report_json(capsys, str(write(tmp_path / "run.jsonl", samples())))
    assert got["job"]["run"]["joules"] == pytest.approx(1600.0)
    for scope in ("run", "per_step", "per_1000_samples"):
        assert got["job"][scope]["money"] is None
        assert got["job"][scope]["gco2e"] is None


@pytest.mark.parametrize(
    ("given", "parts", "missing"),
    [
        ({"dram": False}, {"gpu.0": 1000.0, "cpu": 500.0}, [ledger.NO_DRAM]),
        ({"cpu": False, "dram": False}, {"gpu.0": 1000.0}, [ledger.NO_CPU, ledger.NO_DRAM]),
        ({"gpu": False}, {"cpu": 500.0, "dram": 100.0}, [ledger.NO_GPU]),
        ({"other_gpu": True}, {"gpu.0": 1000.0, "cpu": 500.0, "dram": 100.0},
         ["GPU 1: not used by the job (left out)"]),
    ],
)  # fmt: skip
def test_missing_counters_named(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    given: dict[str, bool],
    parts: dict[str, float],
    missing: list[str],
) -> None:
    got = report_json(capsys, str(write(tmp_path / "run.jsonl", samples(**given))))
    node = got["nodes"][0]
    assert node["parts_joules"] == parts
    assert node["not_counted"] == [*missing, ledger.NOT_COUNTED_REST]
    assert got["job"]["run"]["joules"] == pytest.approx(sum(parts.values()))


def test_counter_missing_in_part_of_the_run_is_said(tmp_path: Path) -> None:
    metrics = samples()
    for m in metrics[6:]:
        del m["memory.energyJoules"]
    view = RunView(read_run(write(tmp_path / "run.jsonl", metrics)))
    node = ledger.node_ledger(view, ledger.Prices())
    assert node.parts["dram"] == 5 * DRAM_J
    assert "DRAM (RAPL): counted over 50% of the run's time" in " ".join(node.not_counted)
    # per step only over the intervals with every counter: 5 intervals, 10 steps
    assert node.per_step is not None
    assert node.per_step.joules == pytest.approx((GPU_J + CPU_J + DRAM_J) / STEPS)


def test_two_nodes_sum_for_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path / "a.jsonl", samples(), node=0)
    b = write(tmp_path / "b.jsonl", samples(dram=False), node=1)
    got = report_json(capsys, str(a), str(b), "--carbon-intensity", "100")
    assert [n["node"] for n in got["nodes"]] == [0, 1]
    assert got["nodes"][1]["not_counted"] == [ledger.NO_DRAM, ledger.NOT_COUNTED_REST]
    assert got["job"]["run"]["joules"] == pytest.approx(1600.0 + 1500.0)
    assert got["job"]["per_step"]["joules"] == pytest.approx(80.0 + 75.0)
    assert got["job"]["per_1000_samples"]["joules"] == pytest.approx(155.0 / 32 * 1000)
    assert got["job"]["run"]["gco2e"] == pytest.approx(3100.0 / 3.6e6 * 100.0)
    view = ledger.run_ledger(read_run(a), ledger.Prices())  # one node alone: no "Node 0:"
    heads = [line.split(":")[0] for line in view.lines()]
    assert heads[:3] == ["The run", "Per step", "Per 1,000 samples"]
    assert heads[3].startswith("counted GPU 0") and len(heads) == 4


def test_energy_per_step_for_compare(tmp_path: Path) -> None:
    view = RunView(read_run(write(tmp_path / "run.jsonl", samples())))
    assert ledger.energy_per_step(view) == pytest.approx(80.0)
    none = RunView(read_run(write(tmp_path / "none.jsonl", samples(False, False, False))))
    assert ledger.energy_per_step(none) is None


def test_the_page_shows_the_ledger(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    run = write(tmp_path / "run.jsonl", samples(dram=False))
    out = tmp_path / "page.html"
    assert cli.main(["report", str(run), "-o", str(out), "--price-per-kwh", "0.36"]) == 0
    page = out.read_text()
    assert "<h2>Cost ledger</h2>" in page
    assert "Per step: 75 J (2.08e-05 kWh), 7.5e-06 in money." in page
    assert "DRAM: no RAPL DRAM counter" in page


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--price-per-kwh", "-1", "price_per_kwh=-1.0 is invalid: it must be a price per kWh"),
        ("--price-per-kwh", "nan", "price_per_kwh=nan is invalid"),
        ("--carbon-intensity", "5000", "carbon_intensity=5000.0 is invalid: it must be grams"),
        ("--price-per-device-hour", "tpu=3", "price_per_device_hour name 'tpu' is invalid: use"),
    ],
)
def test_bad_prices_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, said: str
) -> None:
    run = write(tmp_path / "run.jsonl", samples())
    assert cli.main(["report", "--json", str(run), flag, value]) == 1
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"price_per_kwh": -0.5}, "price_per_kwh=-0.5 is invalid: it must be a price per kWh, "
         "0 or more, or None for none"),
        ({"price_per_kwh": "0.3"}, "price_per_kwh='0.3' is invalid"),
        ({"carbon_intensity": math.inf}, "carbon_intensity=inf is invalid"),
        ({"price_per_device_hour": {"gpu": -1}}, "price_per_device_hour=-1 is invalid"),
        ({"price_per_device_hour": 3}, "price_per_device_hour=3 is invalid: it must be a mapping"),
    ],
)  # fmt: skip
def test_bad_prices_raise_at_construction(options: dict[str, Any], said: str) -> None:
    with pytest.raises(OptionError) as raised:
        ledger.Prices.of(**options)
    assert str(raised.value).startswith(said)
    assert raised.value.option == next(iter(options))


def test_prices_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYSMETRICS_PRICE_PER_KWH", "0.25")
    monkeypatch.setenv("SYSMETRICS_PRICE_PER_DEVICE_HOUR", "gpu=2.5,node=0.4")
    monkeypatch.setenv("SYSMETRICS_CARBON_INTENSITY", "350")
    assert ledger.Prices.of() == ledger.Prices(0.25, {"gpu": 2.5, "node": 0.4}, 350.0)
    assert ledger.Prices.of(price_per_kwh=0.1).per_kwh == 0.1  # given beats the environment
    monkeypatch.setenv("SYSMETRICS_CARBON_INTENSITY", "lots")
    with pytest.raises(OptionError) as raised:
        ledger.Prices.of()
    assert str(raised.value) == (
        "carbon_intensity='lots' is invalid: it must be a number (from the environment "
        "variable SYSMETRICS_CARBON_INTENSITY)"
    )


def test_live_line() -> None:
    latest = {"gpu.0.energyJoules": 3000.0, "gpu.process.0.gpu": 50.0, "gpu.1.energyJoules": 9.0,
              "cpu.energyJoules": 600.0, "step.energyJoules": 36.0}  # fmt: skip
    line = ledger.live_line(latest, ledger.Prices(per_kwh=1.0, carbon_intensity=1000.0))
    assert line == (
        "energy  3.6 kJ (0.001 kWh) so far, 36 J/step \N{MIDDLE DOT} 0.001 money "
        "\N{MIDDLE DOT} 1 gCO2e (counted: CPU packages, GPU 0; not: DRAM)"
    )
    assert ledger.live_line({"cpu": 5.0}, ledger.Prices()) is None


class Latest:
    """A monitor's latest values (the exporter reads ``latest()``): the counters of one GPU
    the job uses, another it does not, RAPL packages (no DRAM), and a step's energy."""

    def latest(self) -> dict[str, float]:
        return {"gpu.0.energyJoules": 3000.0, "gpu.process.0.gpu": 50.0, "gpu.1.energyJoules": 9.0,
                "cpu.energyJoules": 600.0, "step.energyJoules": 36.0}  # fmt: skip


def test_prometheus_series() -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from sysmetrics.sinks.prometheus import PrometheusExporter
    from tests.test_prometheus_sink import get

    prices = ledger.Prices(per_kwh=1.0, carbon_intensity=1000.0)
    with PrometheusExporter(Latest(), port=0, run="r", prices=prices) as ex:
        page = get(ex.url)
    with PrometheusExporter(Latest(), port=0, run="r") as ex:
        unpriced = get(ex.url)
    got = {
        s.name: (s.value, s.labels["counted"], s.labels["missing"])
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if "counted" in s.labels
    }
    assert got == {
        "sysmetrics_energy_joules_total": (3600.0, "cpu,gpu.0", "dram"),
        "sysmetrics_energy_cost_total": (pytest.approx(0.001), "cpu,gpu.0", "dram"),
        "sysmetrics_energy_carbon_grams_total": (pytest.approx(1.0), "cpu,gpu.0", "dram"),
        "sysmetrics_training_step_cost": (pytest.approx(1e-5), "cpu,gpu.0", "dram"),
        "sysmetrics_training_step_carbon_grams": (pytest.approx(0.01), "cpu,gpu.0", "dram"),
    }
    assert "sysmetrics_energy_joules_total{" in unpriced
    assert "cost" not in unpriced and "carbon" not in unpriced  # no price: no money, no carbon


def test_the_panel_has_a_cost_line_from_a_real_rapl_collector(tmp_path: Path) -> None:
    """A real monitor with a real :class:`RaplCollector` over a powercap tree (the kernel's
    sysfs ABI; tests/test_rapl.py) whose package counter the test raises by 1.8 kJ, DRAM by
    0.9 kJ: the panel's cost line says 2.7 kJ, its money and gCO2e, and what it counted."""
    from sysmetrics.collectors.rapl import RaplCollector
    from sysmetrics.monitor import SystemMonitor
    from sysmetrics.panel import Panel
    from tests.test_rapl import add, powercap

    root = powercap(tmp_path, packages=1)
    rapl = RaplCollector.create(str(root))
    assert rapl is not None
    monitor = SystemMonitor(interval=3600, collectors=[rapl])
    panel = Panel(monitor, prices=ledger.Prices(per_kwh=0.4, carbon_intensity=200.0))
    try:
        monitor._sample_once()
        add(root, "intel-rapl:0", 1_800_000_000)
        add(root, "intel-rapl:0:2", 900_000_000)  # dram
        monitor._sample_once()
        panel._read()
        kwh = 2700.0 / 3.6e6
        assert panel.state.lines()[-1] == (
            f"energy  2.7 kJ ({kwh:.3g} kWh) so far \N{MIDDLE DOT} {kwh * 0.4:.3g} money "
            f"\N{MIDDLE DOT} {kwh * 200:.3g} gCO2e (counted: CPU packages, DRAM; not: GPU)"
        )
    finally:
        panel._reader.close()
        monitor.stop()


def test_prices_on_a_run_without_counters_say_why_there_is_no_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the [report] extra")
    run = write(tmp_path / "run.jsonl", samples(gpu=False, cpu=False, dram=False))
    out = tmp_path / "page.html"
    assert cli.main(["report", str(run), "-o", str(out), "--carbon-intensity", "300"]) == 0
    page = out.read_text()
    assert "<h2>Cost ledger</h2>" in page
    assert "counted nothing (no energy counter); not counted: " + ledger.NO_GPU in page
    bare = tmp_path / "bare.html"
    assert cli.main(["report", str(run), "-o", str(bare)]) == 0
    assert "Cost ledger" not in bare.read_text()  # no counter, no price: nothing to say


def test_a_node_without_counters_has_no_figure_not_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No counter: no energy figure at all (null), never 0 J, nor money from device-hours
    presented beside a 0 J energy."""
    run = write(tmp_path / "run.jsonl", samples(gpu=False, cpu=False, dram=False))
    got = report_json(capsys, str(run), "--price-per-device-hour", "node=1")
    assert got["nodes"][0]["run"] is None and got["nodes"][0]["counted"] == []
    assert got["job"] == {"run": None, "per_step": None, "per_1000_samples": None}


def test_callbacks_take_the_prices_and_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A framework callback's core takes the prices as keywords (for its panel's line),
    else from the environment, and refuses a bad one at construction."""
    from sysmetrics.callback import CallbackCore

    monkeypatch.setenv("SYSMETRICS_CARBON_INTENSITY", "120")
    core = CallbackCore(price_per_kwh=0.25, price_per_device_hour={"gpu": 1.5})
    assert core.prices == ledger.Prices(0.25, {"gpu": 1.5}, 120.0)
    with pytest.raises(OptionError) as raised:
        CallbackCore(price_per_device_hour={"gpu": -1.0})
    assert raised.value.option == "price_per_device_hour"
