"""The shipped Grafana dashboard and Prometheus alerting rules (``sysmetrics/deploy/``).

Every query of the dashboard and every alert expression runs in a real Prometheus
(Debian's package, as in ``tests/test_prometheus_sink.py``) scraping a real exporter while
a real Lightning ``Trainer`` trains with ``SystemMetricsCallback``; each must return data.
The GPU is NVIDIA's real ``pynvml`` binding over the fake NVML library of
``tests/fake_nvml.py`` (one GPU whose clocks a hardware thermal slowdown holds down); the
rest is this machine's. The static checks (schema, names, labels) and ``promtool`` run
without the server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import deploy_files
from sysmetrics.descriptions import DESCRIPTIONS
from sysmetrics.sinks.prometheus import BEHIND_NAME, PREFIX, STEP_NAME
from tests import debian

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = deploy_files.path("grafana/sysmetrics-dashboard.json")
RULES = deploy_files.path("prometheus/sysmetrics-rules.yml")
RULES_TEST = deploy_files.path("prometheus/sysmetrics-rules.test.yml")
EXPORTED = {PREFIX + d.prometheus for d in DESCRIPTIONS if d.prometheus} | {STEP_NAME, BEHIND_NAME}
# Served only by a run of several ranks (every rank's keys; the ranks behind in a stall):
# absent from the one-process run below.
SEVERAL_RANKS = {
    PREFIX + d.prometheus for d in DESCRIPTIONS if d.prometheus and d.key.startswith("rank.")
} | {BEHIND_NAME}
METRIC = re.compile(r"\bsysmetrics_[a-z0-9_]+\b")
RATE = "10s"  # $__rate_interval in the tests: ten scrapes at the test server's 1 s


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, expr)`` of every target of every panel."""
    return [(p["title"], t["expr"]) for p in panels(board) for t in p.get("targets", [])]


def substitute(expr: str, run: str, node: str = ".*") -> str:
    """``expr`` as Grafana sends it, for ``run`` and ``node`` (a regex: All is ``.*``)."""
    for name, value in (("$__rate_interval", RATE), ("$__interval", "1s"), ("$run", run),
                        ("$node", node)):  # fmt: skip
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def rules() -> list[dict[str, Any]]:
    yaml = pytest.importorskip("yaml", reason="needs PyYAML (Lightning's dependency)")
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    found: list[dict[str, Any]] = group["rules"]
    return found


COMPARISON = re.compile(r"^(?P<inner>.+?)\s*(?:==|!=|>=|<=|>|<)\s*[0-9.]+$", re.S)


def inner(expr: str) -> str:
    """An alert expression without its final comparison: what it compares, which returns
    data whether or not the alert fires."""
    m = COMPARISON.match(expr.strip())
    assert m, expr
    return m["inner"]


# -- static checks --------------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard_over_a_datasource_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] == 39
    assert board["uid"] == "sysmetrics-training" and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "run", "node"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("run", "node"):
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"] and v["allValue"] == ".*"
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert v["query"]["query"] == v["definition"]
        assert re.fullmatch(rf"label_values\(sysmetrics_\w+(\{{.*\}})?, {name}\)", v["definition"])
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    titles = [p["title"] for p in panels(board) if p["type"] == "row"]
    assert titles == ["Speed and step", "CPU", "Memory", "GPU", "Disk", "Network"]
    for p in panels(board):
        grid = p["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["type"] == "timeseries" and p["targets"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        assert all(t["datasource"] == p["datasource"] for t in p["targets"])


def test_every_query_names_exported_series_of_the_chosen_runs() -> None:
    board = dashboard()
    exprs = [e for _, e in queries(board)]
    exprs += [v["definition"] for v in board["templating"]["list"][1:]]
    for expr in exprs:
        names = METRIC.findall(expr)
        assert names and set(names) <= EXPORTED, expr
        selectors = re.findall(r"\bsysmetrics_\w+(\{[^}]*\})?", expr)
        if expr.startswith("label_values(") and "node)" not in expr:
            continue  # the run variable lists every run
        # Every series selected is the chosen runs' (the straggler panels span all nodes).
        assert all('run=~"$run"' in s for s in selectors), expr
    straggler = [e for t, e in queries(board) if t.startswith("Straggler")]
    assert straggler and all(e.count("max by (run)") == e.count("min by (run)") == 1
                             for e in straggler)  # fmt: skip


def test_the_rules_are_alerts_on_exported_series() -> None:
    found = rules()
    assert {r["alert"] for r in found} == {
        "TrainingStalled", "TrainingMemoryNearLimit", "GpuThermalThrottling",
        "GpuHardwareSlowdown", "TrainingInputBound", "TrainingRankStuck",
    }  # fmt: skip
    stalled = next(r for r in found if r["alert"] == "TrainingStalled")
    assert stalled["expr"] == "rate(sysmetrics_training_step[5m]) == 0"
    for r in found:
        assert set(METRIC.findall(r["expr"])) <= EXPORTED, r
        assert re.fullmatch(r"\d+m", r["for"]) and r["labels"]["severity"], r
        assert "{{ $labels.run }}" in r["annotations"]["summary"] + r["annotations"]["description"]


def test_promtool_checks_and_unit_tests_the_rules() -> None:
    promtool = shutil.which("promtool") or (
        debian.binary("prometheus", "prometheus") and shutil.which("promtool")
    )
    if not promtool:
        pytest.skip("promtool is not installed (Debian's prometheus package has it; CI does)")
    for args in (["check", "rules", RULES.name], ["test", "rules", RULES_TEST.name]):
        proc = subprocess.run([promtool, *args], cwd=RULES.parent, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "SUCCESS" in proc.stdout


# -- against a real Prometheus during real training --------------------------------------

RUN = "dash-test-1"
THERMAL = 0x40  # nvmlClocksEventReasonHwThermalSlowdown


# In the parallel pass: it once missed its window there, but the cause was the exporter
# serving the PSS at one tick in four (monitor.latest(), fixed); since, 3 runs of 3 beside
# the parallel pass passed (2026-11-28). Each query waits for data, up to 30 s.
@pytest.mark.long
def test_every_query_and_alert_returns_data_during_real_training(tmp_path: Path) -> None:
    """The dashboard's queries and the alerts' expressions, in a real Prometheus, while a
    real Lightning run trains; then the run stalls (the loop held in a callback) and the
    stall alert, with its window shortened to 10 s in a test copy, fires."""
    binary = debian.binary("prometheus", "prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; CI does)")
    pl = pytest.importorskip("lightning.pytorch", reason="needs the [lightning] extra")
    torch = pytest.importorskip("torch")
    yaml = pytest.importorskip("yaml", reason="needs PyYAML (Lightning's dependency)")
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader, Dataset

    from sysmetrics import SystemMonitor
    from sysmetrics.collectors import host_collectors
    from sysmetrics.collectors.nvidia import NvidiaCollector
    from sysmetrics.host import default_source
    from sysmetrics.integrations.lightning import SystemMetricsCallback
    from sysmetrics.sinks import PrometheusExporter
    from tests.fake_nvml import FakeGpu, FakeNvmlLib, binding
    from tests.prometheus_server import Prometheus

    class Slow(Dataset[Any]):
        """Items that take 10 ms each to fetch: a loader 4 times slower than the step."""

        def __len__(self) -> int:
            return 16

        def __getitem__(self, i: int) -> Any:
            time.sleep(0.01)
            return torch.full((8,), float(i)), torch.ones(1)

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            time.sleep(0.01)
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    hold, done = threading.Event(), threading.Event()

    class Control(pl.Callback):
        """Holds the loop while ``hold`` is set (a stall), and stops training once
        ``done`` is set. The step.* keys are the callback's own step timing."""

        def on_train_batch_end(self, trainer: Any, module: Any, out: Any, batch: Any,
                               i: int) -> None:  # fmt: skip
            while hold.is_set() and not done.is_set():
                time.sleep(0.05)
            if done.is_set():
                trainer.should_stop = True

    gpus = [FakeGpu("GPU-dash", clocks_event_reasons=THERMAL, energy_mj=1_000_000)]
    nvidia = NvidiaCollector.create(default_source(), os.getpid(), nvml=binding(FakeNvmlLib(gpus)))
    assert nvidia is not None
    monitor = SystemMonitor(interval=0.25, collectors=[*host_collectors(), nvidia])
    reader = monitor.reader(buffer=100_000)
    trainer = pl.Trainer(
        max_epochs=100_000, logger=CSVLogger(tmp_path, name="csv"), log_every_n_steps=2,
        callbacks=[SystemMetricsCallback(monitor=monitor), Control()],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu", devices=1,
    )  # fmt: skip
    failed: list[BaseException] = []

    def train() -> None:
        try:
            trainer.fit(Model(), DataLoader(Slow(), batch_size=4))
        except BaseException as exc:
            failed.append(exc)

    # The shipped rules, and a copy of the stall rule that fires 10 s into a stall.
    shipped = rules()
    stall = next(r for r in shipped if r["alert"] == "TrainingStalled")
    short = {**stall, "alert": "TrainingStalledShort", "for": "2s",
             "expr": stall["expr"].replace("[5m]", f"[{RATE}]")}  # fmt: skip
    assert short["expr"] != stall["expr"]
    copy = tmp_path / "stall-short.yml"
    copy.write_text(yaml.safe_dump({"groups": [{"name": "test", "rules": [short]}]}))

    loop = threading.Thread(target=train, name="training")
    with monitor, PrometheusExporter(monitor, port=0, node=0, run=RUN) as exporter:
        loop.start()
        try:
            with Prometheus(binary, f"127.0.0.1:{exporter.port}", tmp_path,
                            rule_files=[RULES, copy]) as prometheus:  # fmt: skip
                q = prometheus.query

                def data(expr: str, timeout: float = 30.0) -> dict[str, Any]:
                    return prometheus.wait(lambda: q(expr), timeout, f"no data for {expr}")

                advancing = data(f'rate(sysmetrics_training_step{{run="{RUN}"}}[{RATE}]) > 0', 90)
                time.sleep(3)  # the rate windows fill
                sampled = {k for s in reader.samples() for k in s.values}
                # Every dashboard query: data wherever the monitor measures its series
                # (this machine may lack one, e.g. swap: it is then absent, never zero).
                never = {
                    PREFIX + d.prometheus
                    for d in DESCRIPTIONS
                    if d.prometheus and not any(_matches(d.key, k) for k in sampled)
                }
                answered, absent = {}, []
                for title, expr in queries(dashboard()):
                    promql = substitute(expr, RUN)
                    if set(METRIC.findall(promql)) & never:
                        absent.append(promql)
                        assert not q(promql), promql
                        continue
                    answered[promql] = data(promql)
                    # A node's own series only ($node is that node).
                    assert data(substitute(expr, RUN, node="0")).keys() == answered[promql].keys()
                    assert not q(substitute(expr, "other-run")), title
                variables = [
                    sorted({m[v["name"]] for m, _ in data(substitute(_values(v), RUN)).values()})
                    for v in dashboard()["templating"]["list"][1:]
                ]
                # Every alert: what it compares returns data; the healthy run fires no
                # stall, while the fake GPU's thermal slowdown and the slow loader do fire.
                alerts = {
                    r["alert"]: (data(inner(r["expr"])), q(r["expr"]))
                    for r in shipped
                    if not set(METRIC.findall(r["expr"])) <= SEVERAL_RANKS
                }
                for r in shipped:  # one process: no rank of several, no data (absent)
                    if set(METRIC.findall(r["expr"])) <= SEVERAL_RANKS:
                        assert not q(inner(r["expr"])), r["alert"]
                evaluated = prometheus.wait(lambda: _rule_health(prometheus), 30, "rules")
                step_before = data(f'sysmetrics_training_step{{run="{RUN}"}}')
                hold.set()  # the loop stalls
                stalled = data(f'rate(sysmetrics_training_step{{run="{RUN}"}}[{RATE}]) == 0', 60)
                firing = prometheus.wait(lambda: _firing(prometheus, "TrainingStalledShort"),
                                         30, "TrainingStalledShort never fired")  # fmt: skip
                still = q(stall["expr"])  # the shipped 5-minute window: not yet
                step_held = data(f'sysmetrics_training_step{{run="{RUN}"}}')
        finally:
            done.set()
            loop.join(120)
    assert not loop.is_alive() and not failed, failed
    # Only the series this machine never measured are absent: swap where it has none.
    # (And the series of a run of several ranks: this one is one process.)
    assert {m for e in absent for m in METRIC.findall(e)} <= {
        "sysmetrics_memory_swap_percent"
    } | SEVERAL_RANKS
    assert len(answered) >= 30, len(answered)
    for promql, result in answered.items():
        for labels, _ in result.values():
            assert labels.get("run", RUN) == RUN, (promql, labels)
    ((labels, per_second),) = advancing.values()
    assert labels["run"] == RUN and labels["node"] == "0" and per_second > 1.0
    assert variables == [[RUN], ["0"]]
    assert set(evaluated) == {r["alert"] for r in shipped} | {"TrainingStalledShort"}
    fired = {name for name, (_, full) in alerts.items() if full}
    assert fired == {"GpuThermalThrottling", "TrainingInputBound"}, alerts
    ((_, wait),) = alerts["TrainingInputBound"][1].values()
    assert 50 < wait <= 100  # 40 ms of fetch to 10 ms of step
    assert len(stalled) == 1 and not still
    assert firing["labels"]["run"] == RUN and firing["labels"]["severity"] == "warning"
    ((_, before),) = step_before.values()
    ((_, held),) = step_held.values()
    assert 0 < before <= held  # the step stopped, and is still served


def _matches(pattern: str, key: str) -> bool:
    """Whether ``key`` is one of a description's keys (``gpu.{i}.gpu``: ``gpu.0.gpu``)."""
    parts = re.split(r"\{[^{}]+\}", pattern)
    return re.fullmatch(".+".join(re.escape(part) for part in parts), key) is not None


def _values(variable: dict[str, Any]) -> str:
    """A ``label_values(SELECTOR, LABEL)`` variable's PromQL: ``count by (LABEL) (SELECTOR)``."""
    m = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
    assert m and m[2] == variable["name"], variable
    return f"count by ({m[2]}) ({m[1]})"


def _rule_health(prometheus: Any) -> dict[str, str]:
    """``{alert: health}`` once every rule was evaluated without error; {} before."""
    groups = prometheus.api("rules", type="alert")["groups"]
    found = {r["name"]: r for g in groups for r in g["rules"]}
    if not found or any(r["health"] != "ok" for r in found.values()):
        bad = {n: r.get("lastError") for n, r in found.items() if r["health"] == "err"}
        assert not bad, bad
        return {}
    return {n: r["health"] for n, r in found.items()}


def _firing(prometheus: Any, name: str) -> dict[str, Any] | None:
    return next((a for a in prometheus.api("alerts")["alerts"]
                 if a["labels"]["alertname"] == name and a["state"] == "firing"), None)  # fmt: skip
