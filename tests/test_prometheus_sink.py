"""The Prometheus endpoint: scraped by a real Prometheus server, and by urllib with
prometheus_client's parser, behind a real SystemMonitor on 127.0.0.1."""

from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import math
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("prometheus_client", reason="needs the [prometheus] extra")

from prometheus_client.parser import text_string_to_metric_families

from sysmetrics import SystemMetricsWarning, SystemMonitor, _optional
from sysmetrics.collectors import host_collectors
from sysmetrics.sinks import PrometheusExporter, prometheus, serve
from sysmetrics.sinks.prometheus import (
    LISTEN_BACKLOG_FALLBACK,
    MAX_LISTEN_BACKLOG,
    _check_run,
    listen_backlog,
)
from sysmetrics.steptime import StepClock
from tests import debian
from tests.conftest import ScriptedCollector
from tests.polling import wait_for
from tests.prometheus_server import Prometheus

MiB = 1024.0**2
HOST = socket.gethostname()
KNOWN = {
    "gpu.0.gpu": 42.0,
    "gpu.1.gpu": 7.0,
    "gpu.0.correctedMemoryErrors": 3.0,
    "gpu.0.smClock": 1410.0,  # MHz
    "proc.memory.rssMB": 100.0,
    "disk./.usagePercent": 50.0,
    "disk./data.usageGB": 2.0,
    "disk.in": 1.5,  # MiB, a counter
    "gpu.process.0.gpu": 40.0,  # described, not exported
    "openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.0": 1.0,  # described, not exported
    "custom.thing": 1.0,  # undescribed
}


def scripted(values: Mapping[str, float] = KNOWN) -> ScriptedCollector:
    """A collector that returns ``values`` at every tick."""
    c = ScriptedCollector(dict(values))
    c.release()
    return c


@pytest.fixture
def monitor() -> Iterator[SystemMonitor]:
    with SystemMonitor(interval=0.05, collectors=[scripted()]) as m:
        yield m


def get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text: str = r.read().decode()
    return text


def scrape(url: str) -> dict[str, Any]:
    """The page at ``url`` parsed by prometheus_client: ``{family name: family}``."""
    return {f.name: f for f in text_string_to_metric_families(get(url))}


# -- the page -----------------------------------------------------------------------


def test_names_labels_types_and_scaling(monitor: SystemMonitor) -> None:
    with PrometheusExporter(monitor, port=0, run="r-1") as ex:
        families = scrape(ex.url)
    labels = {"host": HOST, "node": "0", "run": "r-1"}
    assert set(families) == {
        "sysmetrics_gpu_utilization_percent",
        "sysmetrics_gpu_corrected_memory_errors",  # the parser names counters without _total
        "sysmetrics_gpu_sm_clock_hertz",
        "sysmetrics_process_memory_rss_bytes",
        "sysmetrics_disk_usage_percent",
        "sysmetrics_disk_usage_bytes",
        "sysmetrics_disk_read_bytes",
    }
    gpu = families["sysmetrics_gpu_utilization_percent"]
    assert gpu.type == "gauge"
    assert gpu.documentation.startswith("GPU utilization")
    assert {(s.labels["gpu"], s.value) for s in gpu.samples} == {("0", 42.0), ("1", 7.0)}
    assert all(s.labels == {"gpu": s.labels["gpu"], **labels} for s in gpu.samples)
    (ecc,) = families["sysmetrics_gpu_corrected_memory_errors"].samples
    assert families["sysmetrics_gpu_corrected_memory_errors"].type == "counter"
    assert (ecc.name, ecc.labels, ecc.value) == (
        "sysmetrics_gpu_corrected_memory_errors_total",
        {"gpu": "0", **labels},
        3.0,
    )
    (disk_in,) = families["sysmetrics_disk_read_bytes"].samples
    assert (disk_in.name, disk_in.value) == ("sysmetrics_disk_read_bytes_total", 1.5 * MiB)
    assert families["sysmetrics_process_memory_rss_bytes"].samples[0].value == 100 * MiB
    assert families["sysmetrics_gpu_sm_clock_hertz"].samples[0].value == 1410e6
    usage = families["sysmetrics_disk_usage_percent"].samples
    assert [(s.labels, s.value) for s in usage] == [({"path": "/", **labels}, 50.0)]
    (used,) = families["sysmetrics_disk_usage_bytes"].samples
    assert (used.labels["path"], used.value) == ("/data", 2.0 * 1024**3)


def test_openmetrics_page_as_prometheus_asks_for_it(monitor: SystemMonitor) -> None:
    with PrometheusExporter(monitor, port=0) as ex:
        request = urllib.request.Request(ex.url, headers={"Accept": "application/openmetrics-text"})
        with urllib.request.urlopen(request, timeout=5) as r:
            page = r.read().decode()
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
    assert "# TYPE sysmetrics_gpu_corrected_memory_errors counter\n" in page
    assert 'sysmetrics_gpu_corrected_memory_errors_total{gpu="0",host=' in page
    assert "# UNIT sysmetrics_disk_read_bytes bytes\n" in page  # a counter's family
    assert "# UNIT sysmetrics_gpu_corrected_memory_errors " not in page  # a count: none
    assert page.endswith("# EOF\n")


def test_undescribed_keys_are_skipped_with_one_debug_line_each(
    monitor: SystemMonitor, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="sysmetrics"),
        PrometheusExporter(monitor, port=0) as ex,
    ):
        for _ in range(3):
            page = get(ex.url)
    assert "custom" not in page and "openmetrics" not in page and "DCGM" not in page
    assert page.count("sysmetrics_gpu_utilization_percent{") == 2  # gpu.process.* not exported
    lines = [r.getMessage() for r in caplog.records if "no description" in r.getMessage()]
    assert lines == ["sysmetrics: 'custom.thing' has no description; not exported to Prometheus"]


def test_empty_before_the_first_sample() -> None:
    m = SystemMonitor(interval=0.05, collectors=[scripted()])
    with PrometheusExporter(m, port=0) as ex:
        assert scrape(ex.url) == {}
    m.stop()


class Junk:
    """A monitor stand-in whose latest() returns ``values`` or raises ``error``."""

    def __init__(self, values: Any = None, error: Exception | None = None) -> None:
        self.values = values
        self.error = error

    def latest(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.values


@pytest.mark.parametrize(
    ("monitor", "served"),
    [
        (Junk(error=RuntimeError("boom")), {}),
        (Junk(values=None), {}),
        (Junk(values=[1, 2]), {}),
        (
            Junk(values={
                "cpu": 5.0, "gpu.0.gpu": "x", "gpu.1.gpu": True, "gpu.2.gpu": None,
                "memory": math.nan, "disk.in": math.inf, 3: 1.0, "proc.cpu.threads": 7,
            }),
            {"sysmetrics_process_cpu_utilization_percent": 5.0, "sysmetrics_process_threads": 7.0},
        ),
    ],
)  # fmt: skip
def test_a_failing_or_junk_monitor_never_fails_the_scrape(
    monitor: Junk, served: dict[str, float], caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="sysmetrics"),
        PrometheusExporter(monitor, port=0) as ex,
    ):
        families = list(ex.registry.collect())  # collect() itself: no exception
        for _ in range(2):
            page = scrape(ex.url)  # and over HTTP: 200, a parseable page
    assert {f.name: f.samples[0].value for f in families} == served
    assert {name: f.samples[0].value for name, f in page.items()} == served
    if monitor.error is not None or served:
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1  # the first fault is a warning, later ones debug lines


# -- lifecycle and options ------------------------------------------------------------


def test_close_is_idempotent_frees_the_port_and_leaves_no_thread(monitor: SystemMonitor) -> None:
    ex = PrometheusExporter(monitor, port=0)
    port = ex.port
    assert port > 0 and ex.url == f"http://127.0.0.1:{port}/metrics"
    assert "sysmetrics_gpu_utilization_percent" in scrape(ex.url)
    ex.close()
    ex.close()
    assert ex.closed and "closed" in repr(ex)
    with pytest.raises(OSError):
        get(ex.url, timeout=1)
    with socket.socket() as s:  # the port is free again (for a server: SO_REUSEADDR, as
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the scrape's TIME_WAIT)
        s.bind(("127.0.0.1", port))
        s.listen()
    with PrometheusExporter(monitor, port=port) as again:
        assert again.port == port
        assert "sysmetrics_gpu_utilization_percent" in scrape(again.url)
    assert monitor.running  # an exporter never stops a monitor it was given


def test_port_in_use_names_the_address(monitor: SystemMonitor) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port} .*port=0"):
            PrometheusExporter(monitor, port=port)


def test_every_interface_is_an_explicit_choice(monitor: SystemMonitor) -> None:
    defaults = inspect.signature(PrometheusExporter).parameters
    assert (defaults["port"].default, defaults["addr"].default) == (9464, "127.0.0.1")
    assert inspect.signature(serve).parameters["addr"].default == "127.0.0.1"
    with contextlib.ExitStack() as stack:
        with pytest.warns(SystemMetricsWarning, match="has no authentication") as caught:
            ex = stack.enter_context(PrometheusExporter(monitor, port=0, addr="0.0.0.0"))
        assert ex.url == f"http://0.0.0.0:{ex.port}/metrics"
        assert "sysmetrics_gpu_utilization_percent" in scrape(f"http://127.0.0.1:{ex.port}/")
    assert len(caught) == 1
    assert str(caught[0].message) == (
        f"sysmetrics: the Prometheus endpoint http://0.0.0.0:{ex.port}/metrics has no "
        "authentication and is reachable from other machines: anyone who can connect to "
        f"port {ex.port} can read the metrics (host name, paths, processes); listen on "
        "127.0.0.1 (the default) unless the port is firewalled or behind a proxy that "
        "authenticates"
    )
    assert caught[0].filename == __file__  # the caller's line


def test_a_loopback_endpoint_does_not_warn(monitor: SystemMonitor) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for addr in ("127.0.0.1", "localhost"):
            PrometheusExporter(monitor, port=0, addr=addr).close()


def test_ipv6_loopback(monitor: SystemMonitor) -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with PrometheusExporter(monitor, port=0, addr="::1") as ex:
        assert ex.url == f"http://[::1]:{ex.port}/metrics"
        assert "sysmetrics_gpu_utilization_percent" in scrape(ex.url)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"port": -1}, ValueError, r"port=-1 is invalid: it must be an integer from 0 to 65535"),
        ({"port": 65536}, ValueError, r"port=65536 is invalid.*0 picks a free one"),
        ({"port": "9464"}, TypeError, r"port='9464' is invalid"),
        ({"port": 1.5}, TypeError, r"port=1.5 is invalid"),
        ({"port": True}, TypeError, r"port=True is invalid"),
        ({"addr": ""}, ValueError, r"addr='' is invalid: it must be an IP address or host name"),
        ({"addr": None}, TypeError, r"addr=None is invalid.*'0.0.0.0' or '::' for every"),
        ({"addr": "no-such-host.invalid"}, ValueError,
         r"addr='no-such-host.invalid' is invalid: it does not resolve"),
    ],
)  # fmt: skip
def test_bad_options_are_clear_errors(
    monitor: SystemMonitor, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PrometheusExporter(monitor, **{"port": 0, **kwargs})


def test_not_a_monitor_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"monitor=42 is invalid: it must be a SystemMonitor"):
        PrometheusExporter(42)  # type: ignore[arg-type]


def test_a_stopped_monitor_serves_nothing_and_is_refused() -> None:
    """Regression: a stopped monitor's last values were served as current forever."""
    c = scripted()
    m = SystemMonitor(interval=0.05, collectors=[c]).start()
    try:
        with PrometheusExporter(m, port=0) as ex:
            wait_for(lambda: "sysmetrics_gpu_utilization_percent{" in get(ex.url))
            m.stop()
            assert "sysmetrics_gpu_utilization_percent{" not in get(ex.url)
    finally:
        m.stop()
    with pytest.raises(ValueError, match="monitor is a stopped SystemMonitor"):
        PrometheusExporter(m, port=0)


def test_the_node_label_comes_from_the_launcher_or_the_option(
    monitor: SystemMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GROUP_RANK", "2")  # torchrun's node rank
    with PrometheusExporter(monitor, port=0) as ex:
        assert ex.node == "2"
        wait_for(lambda: 'node="2"' in get(ex.url))
    with PrometheusExporter(monitor, port=0, node="gpu-a7") as ex:
        assert ex.node == "gpu-a7"
    with pytest.raises(TypeError, match=r"node=1.5 is invalid: use the node's rank"):
        PrometheusExporter(monitor, port=0, node=1.5)  # type: ignore[arg-type]


def test_address_not_of_this_machine_names_it(monitor: SystemMonitor) -> None:
    with pytest.raises(
        OSError, match=r"cannot listen on 192.0.2.1:0 .*an address of this machine"
    ):  # TEST-NET-1
        PrometheusExporter(monitor, port=0, addr="192.0.2.1")


def test_serve_starts_and_stops_its_own_monitor() -> None:
    c = scripted()
    ex = serve(port=0, interval=0.05, collectors=[c])
    monitor = ex.monitor
    assert isinstance(monitor, SystemMonitor) and monitor.running
    wait_for(lambda: "sysmetrics_gpu_utilization_percent" in scrape(ex.url))
    ex.close()
    assert not monitor.running and c.closed
    ex.close()


def test_serve_never_stops_a_given_monitor(monitor: SystemMonitor) -> None:
    with serve(port=0, monitor=monitor) as ex:
        assert ex.monitor is monitor
        assert "sysmetrics_gpu_utilization_percent" in scrape(ex.url)
    assert monitor.running
    with pytest.raises(TypeError, match=r"serve\(\) got monitor options \(interval\)"):
        serve(port=0, monitor=monitor, interval=1.0)


def test_serve_stops_its_monitor_when_the_port_is_taken() -> None:
    c = scripted()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError, match="cannot listen on"):
            serve(port=busy.getsockname()[1], collectors=[c])
    assert c.closed  # closed, never started (no thread left: the autouse fixture)
    with pytest.raises(TypeError, match="unknown option 'intervall'"):
        serve(port=0, intervall=1)


def test_importing_sinks_imports_no_optional_dependency() -> None:
    code = (
        "import sys, sysmetrics.sinks\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
        "assert 'sysmetrics.sinks.prometheus' not in sys.modules\n"
        "from sysmetrics.sinks import serve\n"
        "assert 'sysmetrics.sinks.prometheus' in sys.modules\n"
        "assert 'prometheus_client' not in sys.modules, 'imported before use'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_missing_prometheus_client_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"pip install 'sysmetrics-train\[prometheus\]'"):
        _optional.prometheus_client()
    with pytest.raises(ImportError, match=r"sysmetrics-train\[prometheus\]"):
        PrometheusExporter(Junk({}), port=0)


# -- a stalled scrape ------------------------------------------------------------------


def test_stalled_scrapes_do_not_delay_sampling() -> None:
    """Clients that connect and say nothing, stop mid-request, or never read the page,
    beside one that scrapes back to back: the monitor keeps its schedule."""
    interval = 0.05
    many = {f"gpu.{i}.gpu": float(i) for i in range(2000)}  # a page of ~110 kB
    with SystemMonitor(interval=interval, collectors=[scripted(many)]) as m:
        reader = m.reader(buffer=10_000)
        ex = PrometheusExporter(m, port=0)
        stalled = []
        for request in (b"", b"GET /metr", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # never read
            s.connect(("127.0.0.1", ex.port))
            s.sendall(request)
            stalled.append(s)
        stop = threading.Event()
        scrapes = 0

        def scrape_back_to_back() -> None:
            nonlocal scrapes
            while not stop.is_set():
                get(ex.url)
                scrapes += 1

        hammer = threading.Thread(target=scrape_back_to_back)
        hammer.start()
        try:
            reader.samples()
            time.sleep(2.0)
            ticks = [s.monotonic for s in reader.samples()]
        finally:
            stop.set()
            hammer.join()
            ex.close()  # with the stalled connections still open: it ends them
            left = [
                t
                for t in threading.enumerate()
                if t.name.startswith("sysmetrics-prom") and t.is_alive()
            ]
            for s in stalled:
                s.close()
    assert not left
    assert scrapes > 0
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    # On schedule: ticks one interval apart (a missed tick is skipped, never squeezed
    # in), so the typical gap is the interval and no gap is anywhere near the 10 s a
    # stalled client may keep its connection.
    assert len(ticks) >= 10, ticks
    assert 0.5 * interval <= statistics.median(gaps) <= 1.5 * interval, gaps
    assert max(gaps) < 1.0, gaps


# -- a real Prometheus server ---------------------------------------------------------


@pytest.mark.long
def test_a_real_prometheus_scrapes_the_exporter(tmp_path: Path) -> None:
    binary = debian.binary("prometheus", "prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; CI does)")
    known = {"gpu.0.gpu": 42.0, "gpu.1.gpu": 17.0, "gpu.0.correctedMemoryErrors": 3.0,
             "gpu.0.memoryAllocatedBytes": 1.5e9}  # fmt: skip
    monitor = SystemMonitor(interval=0.2, collectors=[scripted(known), *host_collectors()])
    reader = monitor.reader(buffer=10_000)
    with monitor, PrometheusExporter(monitor, port=0, node=3) as ex:
        prometheus = Prometheus(binary, f"127.0.0.1:{ex.port}", tmp_path)
        try:
            deadline = time.monotonic() + 60
            query = "sysmetrics_process_memory_rss_bytes"
            while not (rss := prometheus.query(query)):
                if prometheus.proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"no {query} in Prometheus: {prometheus.log.read_text()[-3000:]}")
                time.sleep(0.2)
            gpu = prometheus.query("sysmetrics_gpu_utilization_percent")
            ecc = prometheus.query("sysmetrics_gpu_corrected_memory_errors_total")
            up = prometheus.query('up{job="sysmetrics"}')
            metadata = prometheus.api("metadata", metric="sysmetrics_gpu_corrected_memory_errors")
            cpu = prometheus.query("sysmetrics_cpu_utilization_percent")
        finally:
            prometheus.stop()
    sampled = [s.values for s in reader.samples()]
    target = {"host": HOST, "node": "3", "run": ex.run, "instance": f"127.0.0.1:{ex.port}",
              "job": "sysmetrics"}  # fmt: skip
    assert [v for _, v in up.values()] == [1.0]
    assert sorted((m["gpu"], v) for m, v in gpu.values()) == [("0", 42.0), ("1", 17.0)]
    for labels, _ in gpu.values():
        assert labels == {"__name__": "sysmetrics_gpu_utilization_percent",
                          "gpu": labels["gpu"], **target}  # fmt: skip
    ((labels, value),) = ecc.values()
    assert (labels["gpu"], value) == ("0", 3.0)
    assert metadata["sysmetrics_gpu_corrected_memory_errors"][0]["type"] == "counter"
    # The resident memory Prometheus holds is one the monitor sampled, in bytes.
    ((labels, value),) = rss.values()
    assert labels == {"__name__": "sysmetrics_process_memory_rss_bytes", **target}
    assert any(math.isclose(value, s["proc.memory.rssMB"] * MiB, rel_tol=1e-12) for s in sampled)
    assert {m["cpu"] for m, _ in cpu.values()} == {
        k.split(".")[1] for k in sampled[-1] if k.endswith(".cpu_percent")
    }


# -- the training step and the run label ------------------------------------------------


def advance(monitor: SystemMonitor, clock: StepClock, stop: threading.Event) -> None:
    """A stand-in training loop: a 20 ms wait for data, a 30 ms step, the step marked."""
    clock.restart()
    while not stop.is_set():
        time.sleep(0.02)
        clock.begin()
        time.sleep(0.03)
        clock.end(samples=8.0)
        monitor.step = (monitor.step or 0) + 1


def test_the_training_step_is_served_while_the_monitor_knows_it() -> None:
    """Regression: the exporter served no step, so no alert could see a stalled job."""
    m = SystemMonitor(interval=0.05, collectors=[scripted()]).start()
    try:
        with PrometheusExporter(m, port=0, run="r-1") as ex:
            wait_for(lambda: "sysmetrics_gpu_utilization_percent" in scrape(ex.url))
            assert "sysmetrics_training_step" not in scrape(ex.url)  # None: absent
            for step in (0, 5, 7):
                m.step = step
                (sample,) = scrape(ex.url)["sysmetrics_training_step"].samples
                assert (sample.value, sample.labels) == (
                    step,
                    {"host": HOST, "node": "0", "run": "r-1"},
                )
            family = scrape(ex.url)["sysmetrics_training_step"]
            assert family.type == "gauge" and family.documentation.startswith("Training step")
            for junk in (True, "12", math.nan, object()):
                m.step = junk  # type: ignore[assignment]
                assert "sysmetrics_training_step" not in scrape(ex.url)
            m.step = 9
            m.stop()  # nothing stale: a stopped monitor's step is not current
            assert "sysmetrics_training_step" not in get(ex.url)
    finally:
        m.stop()


def test_the_step_keys_are_served_with_help_and_unit() -> None:
    """The step.* keys of a StepClock, as Prometheus asks for them (OpenMetrics)."""
    clock = StepClock()
    stop = threading.Event()
    with SystemMonitor(interval=0.1, collectors=[scripted()]) as m:
        m.step_timing = clock.read
        loop = threading.Thread(target=advance, args=(m, clock, stop))
        loop.start()
        try:
            with PrometheusExporter(m, port=0) as ex:
                request = urllib.request.Request(
                    ex.url, headers={"Accept": "application/openmetrics-text"}
                )

                def page() -> str:
                    with urllib.request.urlopen(request, timeout=5) as r:
                        text: str = r.read().decode()
                    return text if "sysmetrics_training_samples_per_second{" in text else ""

                text = wait_for(page)
        finally:
            stop.set()
            loop.join()
    for name, unit, help in [
        ("training_step_seconds", "seconds", "Wall-clock seconds per optimizer step"),
        ("training_data_wait_percent", "percent", "% of step time spent waiting for the next"),
        ("training_samples_per_second", None, "Training samples per second"),
        ("training_step", None, "Training step the job has reached"),
    ]:
        assert f"# TYPE sysmetrics_{name} gauge\n" in text
        assert f"# HELP sysmetrics_{name} {help}" in text, text
        assert (f"# UNIT sysmetrics_{name} {unit}\n" in text) is (unit is not None)
        assert f'sysmetrics_{name}{{host="{HOST}",node="0",run="{ex.run}"}} ' in text
    assert "# UNIT sysmetrics_gpu_sm_clock_hertz hertz\n" in text  # and the others' units


RUN_ID = r"\d{8}-\d{6}-[0-9a-f]{6}"  # the UTC start time and 6 random hex digits


def test_every_series_carries_a_run_label_made_at_start(
    monitor: SystemMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID"):
        monkeypatch.delenv(name, raising=False)
    monitor.step = 3
    with PrometheusExporter(monitor, port=0) as ex, PrometheusExporter(monitor, port=0) as other:
        assert re.fullmatch(RUN_ID, ex.run) and re.fullmatch(RUN_ID, other.run)
        assert ex.run != other.run  # unique
        families = scrape(ex.url)
    assert "sysmetrics_training_step" in families
    samples = [s for f in families.values() for s in f.samples]
    assert len(samples) == 9  # 8 of the known keys and the step
    assert {s.labels["run"] for s in samples} == {ex.run}
    with serve(port=0, monitor=monitor, run="exp-7.a:b_c") as ex:
        assert ex.run == "exp-7.a:b_c"
        assert {s.labels["run"] for f in scrape(ex.url).values() for s in f.samples} == {
            "exp-7.a:b_c"
        }


@pytest.mark.parametrize(
    ("env", "run"),
    [
        ({"TORCHELASTIC_RUN_ID": "job-42", "SLURM_JOB_ID": "77"}, "job-42"),
        ({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "77"}, "77"),
        ({"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"}, "77.3"),
        ({"TORCHELASTIC_RUN_ID": "a b/c", "SLURM_JOB_ID": ""}, RUN_ID),  # not a label: made
        ({"TORCHELASTIC_RUN_ID": "x" * 65}, RUN_ID),
    ],
)
def test_the_run_is_the_launchers_job_id_the_same_on_every_node(
    monitor: SystemMonitor, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], run: str
) -> None:
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with PrometheusExporter(monitor, port=0) as ex:
        assert re.fullmatch(run, ex.run), ex.run
        assert f'run="{ex.run}"' in get(ex.url)
    with PrometheusExporter(monitor, port=0, run="mine") as ex:
        assert ex.run == "mine"  # the option wins


ALLOWED = (
    r"is invalid: use 1 to 64 letters, digits, '_', '.', ':' or '-', starting with a letter "
    r"or digit \(the run label of every series\), or None for the launcher's job id, else "
    r"one made of the start time and random hex$"
)


@pytest.mark.parametrize(
    ("run", "error", "shown"),
    [
        ("", ValueError, "''"),
        ("a b", ValueError, "'a b'"),
        ('x"}', ValueError, "'x\"}'"),
        ("-x", ValueError, "'-x'"),
        ("é", ValueError, "'é'"),
        ("x" * 65, ValueError, f"'{'x' * 65}'"),
        ("x" * 500, ValueError, rf"'{'x' * 128}'\.\.\. \(500 chars\)"),
        (7, TypeError, "7"),
        (b"r", TypeError, "b'r'"),
    ],
)
def test_a_bad_run_is_a_clear_error(
    monitor: SystemMonitor, run: object, error: type[Exception], shown: str
) -> None:
    with pytest.raises(error, match=rf"^run={shown} {ALLOWED}"):
        PrometheusExporter(monitor, port=0, run=run)  # type: ignore[arg-type]
    with pytest.raises(error, match=rf"^run={shown} "):
        serve(port=0, monitor=monitor, run=run)  # type: ignore[arg-type]


@given(
    st.one_of(
        st.text(max_size=80), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,70}", fullmatch=True)
    )
)
def test_a_run_is_taken_as_given_or_refused_with_a_bounded_message(run: str) -> None:
    """Any text: kept verbatim where it is a label value PromQL needs no escaping for,
    else a ValueError whose message stays short."""
    try:
        checked = _check_run(run)
    except ValueError as exc:
        assert not (0 < len(run) <= 64 and re.fullmatch(r"[A-Za-z0-9][\w.:-]*", run, re.ASCII))
        assert len(str(exc)) < 600
    else:
        assert checked == run and 1 <= len(run) <= 64
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", run)


def record(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "sysmetrics", "record", *args]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, **kwargs)


def test_record_serves_the_step_and_the_run(tmp_path: Path) -> None:
    """``sysmetrics record --prometheus-port 0 --prometheus-run R`` serves the command's
    ``sysmetrics.step()`` as ``sysmetrics_training_step{run="R"}``."""
    done = tmp_path / "done"
    loop = (
        "import os, time, sysmetrics\n"
        "for i in range(1, 100000):\n"
        "    sysmetrics.step(i)\n"
        f"    if os.path.exists({str(done)!r}): break\n"
        "    time.sleep(0.02)\n"
    )
    proc = record(
        "--output", str(tmp_path / "r.jsonl"), "--interval", "0.1", "--prometheus-port", "0",
        "--prometheus-run", "rec-1", "--", sys.executable, "-c", loop,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.fullmatch(r"sysmetrics record: serving (\S+)\n", line)
        assert url, line
        seen = []
        for _ in range(2):
            family = wait_for(lambda: scrape(url[1]).get("sysmetrics_training_step"), timeout=30)
            ((labels, value),) = [(s.labels, s.value) for s in family.samples]
            assert labels == {"host": HOST, "node": "0", "run": "rec-1"}
            seen.append(value)
            time.sleep(0.5)
        assert 1 <= seen[0] < seen[1]  # moving
    finally:
        done.touch()
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_under_record_the_step_holds_while_the_command_stays_up(tmp_path: Path) -> None:
    """What docs/prometheus.md says of ``sysmetrics record``: the step is the command's last
    ``sysmetrics.step(n)`` for as long as the command runs, so a command that stays up
    after its loop keeps serving it unchanged (and TrainingStalled fires after 10 minutes);
    the callbacks clear it when training ends (tests/test_lightning.py)."""
    done = tmp_path / "done"
    loop = (
        "import os, time, sysmetrics\n"
        "for i in range(1, 6):\n"
        "    sysmetrics.step(i)\n"
        "    time.sleep(0.02)\n"
        f"while not os.path.exists({str(done)!r}):\n"  # after training: up, no more steps
        "    time.sleep(0.05)\n"
    )
    proc = record(
        "--output", str(tmp_path / "r.jsonl"), "--interval", "0.1", "--prometheus-port", "0",
        "--", sys.executable, "-c", loop,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        url = re.fullmatch(r"sysmetrics record: serving (\S+)\n", proc.stderr.readline())
        assert url

        def step() -> list[float]:
            family = scrape(url[1]).get("sysmetrics_training_step")
            return [s.value for s in family.samples] if family is not None else []

        wait_for(lambda: step() == [5.0], timeout=30)  # the loop is over
        time.sleep(0.5)  # five samples later
        assert step() == [5.0]
        assert proc.poll() is None  # the command is still up
    finally:
        done.touch()
        proc.communicate(timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus-port", "0", "--prometheus-run", "a b"],
         "argument --prometheus-run: 'a b' is invalid: use 1 to 64 letters, digits, '_', '.', "
         "':' or '-', starting with a letter or digit\n"),
        (["--prometheus-run", "x"], "argument --prometheus-run: needs --prometheus-port\n"),
    ],
)  # fmt: skip
def test_record_rejects_a_bad_run(tmp_path: Path, args: list[str], message: str) -> None:
    run = tmp_path / "r.jsonl"
    proc = record("--output", str(run), *args, "--", "true")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert f"sysmetrics record: error: {message}" in err
    assert not run.exists()


def test_a_real_prometheus_sees_the_step_advance(tmp_path: Path) -> None:
    """What an alert on a stalled job needs: ``rate(sysmetrics_training_step[...])`` > 0
    while steps advance, and the step keys, in a real Prometheus."""
    binary = debian.binary("prometheus", "prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; CI does)")
    clock = StepClock()
    stop = threading.Event()
    monitor = SystemMonitor(interval=0.2, collectors=[scripted()])
    reader = monitor.reader(buffer=10_000)
    with monitor, PrometheusExporter(monitor, port=0, run="advance-1") as ex:
        monitor.step_timing = clock.read
        loop = threading.Thread(target=advance, args=(monitor, clock, stop))
        loop.start()
        try:
            with Prometheus(binary, f"127.0.0.1:{ex.port}", tmp_path) as prometheus:
                rate = prometheus.wait(
                    lambda: prometheus.query("rate(sysmetrics_training_step[5s]) > 0"),
                    timeout=60, why="no rate(sysmetrics_training_step[5s]) > 0",
                )  # fmt: skip
                seconds = prometheus.wait(
                    lambda: prometheus.query('sysmetrics_training_step_seconds{run="advance-1"}'),
                    timeout=30, why="no sysmetrics_training_step_seconds",
                )  # fmt: skip
                metadata = prometheus.api("metadata", metric="sysmetrics_training_step_seconds")
        finally:
            stop.set()
            loop.join()
    ((labels, per_second),) = rate.values()
    assert labels["run"] == "advance-1" and labels["node"] == "0"
    # One step per ~50 ms, slower under load: the rate Prometheus computes is of that order.
    assert 2.0 < per_second < 25.0, per_second
    ((labels, value),) = seconds.values()
    sampled = [s.values["step.seconds"] for s in reader.samples() if "step.seconds" in s.values]
    assert any(math.isclose(value, v, rel_tol=1e-12) for v in sampled)
    (meta,) = metadata["sysmetrics_training_step_seconds"]
    assert meta["type"] == "gauge" and meta["unit"] == "seconds"


# -- forked children (DataLoader workers) -----------------------------------------------


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@contextlib.contextmanager
def forked(then: Callable[[], object] = lambda: None, live: bool = True) -> Iterator[int]:
    """A child forked now (as a DataLoader worker is) that runs ``then()``, then lives
    until the block ends (at most 30 s) if ``live``, else exits at once. Exits 0 if
    ``then()`` returned, 1 if it raised; the block's end checks which."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            os.close(write)
            try:
                then()
            except BaseException:
                traceback.print_exc()  # into the test's captured output
                raise
            code = 0
            if live:
                select.select([read], [], [], 30.0)  # until the parent closes its end
        finally:
            os._exit(code)
    os.close(read)
    try:
        yield pid
    finally:
        os.close(write)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's then() raised"


@needs_fork
def test_close_frees_the_port_while_a_forked_child_lives(monitor: SystemMonitor) -> None:
    """The child inherits the listening socket; the parent's close() frees the port all
    the same: a new exporter listens there and answers, the child still alive."""
    ex = PrometheusExporter(monitor, port=0)
    port = ex.port
    with forked():
        ex.close()
        with PrometheusExporter(monitor, port=port) as again:
            assert "sysmetrics_gpu_utilization_percent" in scrape(again.url)


@needs_fork
def test_a_forked_child_never_touches_the_parents_scrapes(monitor: SystemMonitor) -> None:
    """A scrape in flight when the child is forked is answered by the parent, even when
    the child closes its copy of the exporter; the parent serves on meanwhile."""
    with PrometheusExporter(monitor, port=0) as ex:
        client = socket.create_connection(("127.0.0.1", ex.port), timeout=10)
        with client:
            client.sendall(b"GET /metr")  # accepted, its request half sent
            wait_for(lambda: ex._server._requests)
            fds = [s.fileno() for s, _ in ex._server._requests.values()]
            fds.append(ex._server.socket.fileno())

            def in_the_child() -> None:
                for fd in fds:  # the child's copies are closed
                    with pytest.raises(OSError, match="Bad file descriptor"):
                        os.fstat(fd)
                ex.close()

            with forked(then=in_the_child, live=False):
                pass  # the child closed its copy and exited
            assert not ex.closed
            client.sendall(b"ics HTTP/1.0\r\n\r\n")
            page = b""
            while chunk := client.recv(65536):
                page += chunk
        assert page.startswith(b"HTTP/1.0 200 OK"), page[:200]
        assert b"sysmetrics_gpu_utilization_percent" in page
        with forked():
            assert "sysmetrics_gpu_utilization_percent" in scrape(ex.url)


@needs_fork
def test_close_frees_the_port_while_a_dataloader_worker_lives(monitor: SystemMonitor) -> None:
    """The same through a real ``torch.utils.data.DataLoader`` whose worker is forked
    while the exporter serves."""
    torch = pytest.importorskip("torch", reason="needs torch")
    ex = PrometheusExporter(monitor, port=0)
    port = ex.port
    loader = torch.utils.data.DataLoader(
        range(4), num_workers=1, multiprocessing_context="fork", persistent_workers=False
    )
    batches = iter(loader)
    try:
        next(batches)  # the worker is up
        ex.close()
        with PrometheusExporter(monitor, port=port) as again:
            assert "sysmetrics_gpu_utilization_percent" in scrape(again.url)
        assert len(list(batches)) == 3
    finally:
        ex.close()
        del batches


# -- many scrapers, slow clients ---------------------------------------------------------


def test_the_listen_queue_holds_a_cluster_of_scrapers(monitor: SystemMonitor) -> None:
    """64 scrapers connect while the exporter accepts nothing (its accept loop held at
    its first connection): the kernel's queue takes every one (it took 6 with the old
    backlog of 5, and dropped the others' SYNs), and each is answered once released."""
    n = 64
    if listen_backlog() < n:
        pytest.skip(f"the system's listen queue holds {listen_backlog()} (net.core.somaxconn)")
    with PrometheusExporter(monitor, port=0) as ex:
        clients = []
        try:
            with ex._server._lock:  # process_request() waits here: no accept meanwhile
                for _ in range(n):
                    c = socket.socket()
                    c.setblocking(False)
                    assert c.connect_ex(("127.0.0.1", ex.port)) in (0, errno.EINPROGRESS)
                    clients.append(c)
                deadline = time.monotonic() + 10.0
                pending = list(clients)
                while pending and time.monotonic() < deadline:
                    _, ready, _ = select.select([], pending, [], 0.1)
                    pending = [c for c in pending if c not in ready]
                connected = sum(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                                for c in clients if c not in pending)  # fmt: skip
            assert (connected, len(pending)) == (n, 0)
            for c in clients:
                c.setblocking(True)
                c.settimeout(10)
                c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            for c in clients:
                assert c.recv(64).startswith(b"HTTP/1.0 200 OK")
        finally:
            for c in clients:
                c.close()


def test_the_listen_backlog_is_the_systems_bounded_with_a_fallback(tmp_path: Path) -> None:
    somaxconn = tmp_path / "somaxconn"
    for text, backlog in (("4096\n", 4096), ("128\n", 128), ("1000000\n", 65535),
                          ("0\n", 4096), ("-1\n", 4096), ("x" * 100, 4096)):  # fmt: skip
        somaxconn.write_text(text)
        assert listen_backlog(somaxconn) == backlog, text
    assert listen_backlog(tmp_path / "absent") == LISTEN_BACKLOG_FALLBACK == 4096
    assert listen_backlog(tmp_path) == 4096  # a directory: unreadable
    if Path("/proc/sys/net/core/somaxconn").exists():
        system = int(Path("/proc/sys/net/core/somaxconn").read_text())
        assert listen_backlog() == min(system, MAX_LISTEN_BACKLOG)


def test_a_silent_or_dribbling_client_delays_no_other_scrape(monitor: SystemMonitor) -> None:
    """Clients that connect and say nothing, or dribble a request, are each on a thread
    of their own: a scrape beside them is answered (well within its 10 s timeout)."""
    with PrometheusExporter(monitor, port=0) as ex:
        silent = socket.create_connection(("127.0.0.1", ex.port), timeout=10)
        dribbling = socket.create_connection(("127.0.0.1", ex.port), timeout=10)
        with silent, dribbling:
            dribbling.sendall(b"GET /met")
            wait_for(lambda: len(ex._server._requests) == 2)
            for _ in range(3):
                assert "sysmetrics_gpu_utilization_percent" in scrape(ex.url)
                dribbling.sendall(b"r")


def test_a_dribbling_client_is_dropped_at_the_request_deadline(
    monitor: SystemMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends a byte now and then, never silent for the 10 s timeout, is
    cut off once its connection is REQUEST_DEADLINE old (here 0.5 s, not 30 s)."""
    monkeypatch.setattr(prometheus, "REQUEST_DEADLINE", 0.5)
    ex = PrometheusExporter(monitor, port=0)
    with ex, socket.create_connection(("127.0.0.1", ex.port), timeout=10) as dribbling:
        wait_for(lambda: ex._server._requests)
        cut = False
        for _ in range(200):  # 20 s at most
            try:
                dribbling.sendall(b"G")
            except OSError:
                cut = True
                break
            if not ex._server._requests:
                cut = True
                break
            time.sleep(0.1)
        assert cut, "the dribbling client was never dropped"
        wait_for(lambda: not ex._server._requests)
        assert "sysmetrics_gpu_utilization_percent" in scrape(ex.url)


def test_connections_beyond_the_cap_wait_in_the_listen_queue(
    monitor: SystemMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With MAX_REQUESTS (here 2, not 256) connections open, a third waits unaccepted (no
    third thread) and is served once one of them ends; close() ends a waiting accept."""
    monkeypatch.setattr(prometheus, "MAX_REQUESTS", 2)
    with PrometheusExporter(monitor, port=0) as ex:
        silent = [socket.create_connection(("127.0.0.1", ex.port), timeout=10) for _ in range(2)]
        try:
            wait_for(lambda: len(ex._server._requests) == 2)
            pages: list[str] = []
            third = threading.Thread(target=lambda: pages.append(get(ex.url, timeout=10)))
            third.start()
            time.sleep(0.5)  # long enough for a served scrape to end; a capped one waits
            assert (pages, len(ex._server._requests)) == ([], 2)
            silent.pop().close()
            third.join(10)
            assert "sysmetrics_gpu_utilization_percent" in pages[0]
            # the cap reached again, with a connection waiting: close() ends it all
            silent.append(socket.create_connection(("127.0.0.1", ex.port), timeout=10))
            waiting = socket.create_connection(("127.0.0.1", ex.port), timeout=10)
            silent.append(waiting)
            wait_for(lambda: len(ex._server._requests) == 2)
            waiting.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            ex.close()
            try:
                answer = waiting.recv(64)
            except ConnectionResetError:  # closed with its request unread
                answer = b""
            assert answer == b""  # closed unanswered, never served
        finally:
            ex.close()
            for s in silent:
                s.close()
