"""OpenMetrics collector against real HTTP servers on 127.0.0.1: a prometheus_client server
serving a DCGM-exporter-like page, and small servers that are slow, huge or malformed."""

from __future__ import annotations

import contextlib
import gzip
import http.server
import os
import socket
import subprocess
import threading
import time
import tracemalloc
import urllib.request
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

prometheus_client = pytest.importorskip("prometheus_client", reason="needs the [openmetrics] extra")

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: E402

from sysmetrics import SystemMetricsWarning, SystemMonitor  # noqa: E402
from sysmetrics.collectors import OpenMetricsCollector  # noqa: E402
from tests import debian  # noqa: E402
from tests.polling import wait_for  # noqa: E402


class DCGMLike:
    """Exports what dcgm-exporter exports for ``gpus`` GPUs: gauges per GPU, an XID counter."""

    def __init__(self, gpus: int = 4) -> None:
        self.gpus = gpus
        self.util = 10.0

    def collect(self) -> Iterator[Any]:
        labels = ["gpu", "UUID", "device", "modelName", "Hostname"]
        util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=labels)
        fb = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
                               labels=labels)  # fmt: skip
        xid = CounterMetricFamily("DCGM_FI_DEV_XID_ERRORS", "XID errors.", labels=labels)
        for i in range(self.gpus):
            lv = [str(i), f"GPU-{i:04d}", f"nvidia{i}", "NVIDIA H100 80GB HBM3", "node-1"]
            util.add_metric(lv, self.util + i)
            fb.add_metric(lv, 1000.0 * (i + 1))
            xid.add_metric(lv, float(i))
        yield from (util, fb, xid)


@pytest.fixture
def dcgm() -> Iterator[tuple[str, DCGMLike]]:
    registry = prometheus_client.CollectorRegistry()
    exporter = DCGMLike()
    registry.register(exporter)
    server, thread = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=registry)
    yield f"http://127.0.0.1:{server.server_port}/metrics", exporter
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def misbehaving() -> Iterator[str]:
    """/slow sleeps 3 s, /huge sends 2 MB, /bad is not OpenMetrics text."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/slow":
                time.sleep(3)
            body = {
                "/slow": b"x 1\n",
                "/huge": b"# TYPE g gauge\n" + b"g 1\n" * 500_000,
                "/bad": b"# TYPE g gauge\ng{ not closed 1\n",
            }.get(self.path, b"")
            self.send_response(200 if body else 404)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client gave up (timeout)
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_dcgm_page_keys_values_and_stable_indices(dcgm: tuple[str, DCGMLike]) -> None:
    url, exporter = dcgm
    c = OpenMetricsCollector({"dcgm": url})
    c.scrape("dcgm", url)
    first = c.sample()
    assert first["openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.0"] == 10.0
    assert first["openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.3"] == 13.0
    assert first["openmetrics.dcgm.DCGM_FI_DEV_FB_USED.2"] == 3000.0
    assert first["openmetrics.dcgm.DCGM_FI_DEV_XID_ERRORS_total.1"] == 1.0
    assert not any("created" in k for k in first)  # counter timestamps are not counts
    assert c.labels["openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.3"]["UUID"] == "GPU-0003"
    assert c.aggregation("openmetrics.dcgm.DCGM_FI_DEV_XID_ERRORS_total.1") == "last"
    assert c.aggregation("openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.0") == "mean"
    exporter.util = 50.0
    c.scrape("dcgm", url)
    second = c.sample()
    assert second["openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.3"] == 53.0  # same index, new value
    assert set(second) == set(first)
    exporter.gpus = 5  # a new label set on a later page takes the next index
    c.scrape("dcgm", url)
    third = c.sample()
    assert third["openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.4"] == 54.0
    assert third["openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.0"] == 50.0
    assert set(third) - set(first) == {
        f"openmetrics.dcgm.{m}.4"
        for m in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS_total")
    }
    assert c.aggregation("openmetrics.dcgm.DCGM_FI_DEV_XID_ERRORS_total.4") == "last"
    assert c.labels["openmetrics.dcgm.DCGM_FI_DEV_FB_USED.4"]["gpu"] == "4"
    c.close()


def test_filters_as_regex_list_and_label_map(dcgm: tuple[str, DCGMLike]) -> None:
    url, _ = dcgm
    c = OpenMetricsCollector({"dcgm": url}, filters=["dcgm\\.DCGM_FI_DEV_GPU_UTIL"])
    c.scrape("dcgm", url)
    assert {k.rsplit(".", 1)[0] for k in c.sample()} == {"openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL"}
    c.close()
    c = OpenMetricsCollector(
        {"dcgm": url}, filters={"dcgm\\.DCGM_FI_DEV_FB_USED": {"gpu": "[02]", "Hostname": "node-1"}}
    )
    for _ in range(2):  # the second page is read through the series cache
        c.scrape("dcgm", url)
        snap = c.sample()
        assert sorted(snap.values()) == [1000.0, 3000.0]
        assert {c.labels[k]["gpu"] for k in snap} == {"0", "2"}
    c.close()


def test_through_the_monitor_with_its_own_thread(dcgm: tuple[str, DCGMLike]) -> None:
    url, _ = dcgm
    c = OpenMetricsCollector({"dcgm": url}, poll_interval=0.05)
    with SystemMonitor(interval=0.05, collectors=[c]) as m:
        wait_for(lambda: "openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.0" in m.snapshot(), timeout=5)
    assert not c._thread or not c._thread.is_alive()


def test_monitor_option_builds_the_collector(dcgm: tuple[str, DCGMLike]) -> None:
    url, _ = dcgm
    m = SystemMonitor(open_metrics={"dcgm": url}, open_metrics_filters=[".*GPU_UTIL"])
    assert any(isinstance(c, OpenMetricsCollector) for c in m.collectors)
    m.stop()


@pytest.mark.parametrize(
    ("path", "why"),
    [("/huge", "larger than max_bytes"), ("/bad", ""), ("/nothing", "404"), ("/slow", "timed out")],
)
def test_failing_endpoint_warns_once_and_does_not_stop_the_others(
    dcgm: tuple[str, DCGMLike], misbehaving: str, path: str, why: str
) -> None:
    url, _ = dcgm
    c = OpenMetricsCollector(
        {"bad": misbehaving + path, "dcgm": url}, timeout=0.5, max_bytes=1 << 20,
        poll_interval=0.05, retry_after=60,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            c.scrape("bad", misbehaving + path)
        c.scrape("dcgm", url)
    msgs = [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]
    assert len(msgs) == 1 and "'bad'" in msgs[0] and why in msgs[0], msgs
    assert "openmetrics.dcgm.DCGM_FI_DEV_GPU_UTIL.0" in c.sample()
    assert not any(k.startswith("openmetrics.bad.") for k in c.sample())
    c.close()


def test_slow_or_down_endpoint_never_stalls_the_monitor(misbehaving: str) -> None:
    c = OpenMetricsCollector({"slow": misbehaving + "/slow", "down": "http://127.0.0.1:9/m"},
                             timeout=2.0, poll_interval=0.05, retry_after=0.2)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SystemMetricsWarning)
        m = SystemMonitor(interval=0.05, collectors=[c]).start()
        t = time.monotonic()
        samples = 0
        while time.monotonic() - t < 1.0:
            m.snapshot()
            samples += 1
            time.sleep(0.05)
        t = time.monotonic()
        m.stop()
    assert time.monotonic() - t < 1.5  # does not wait out the request in flight
    assert m.collectors == [c]  # never disabled


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"open_metrics": {"x": "ftp://h/m"}}, r"open_metrics\['x'\]='ftp://h/m' is invalid"),
        ({"open_metrics": {"x": "not a url"}}, "use an http:// or https:// URL"),
        ({"open_metrics": {"a.b": "http://h/m"}}, "open_metrics name 'a.b' is invalid"),
        ({"open_metrics": {"x": "http://h/m"}, "open_metrics_filters": ["("]},
         "open_metrics_filters entry '\\(' is not a valid regular expression"),
        ({"open_metrics": {"x": "http://h/m"}, "open_metrics_filters": {"g": {"l": "["}}},
         "is not a valid regular expression"),
        ({"open_metrics_filters": [".*"]}, "need open_metrics"),
        ({"open_metrics": {"x": "http://h/m"}, "open_metrics_max_series": 0},
         r"open_metrics_max_series=0 is invalid: it must be a positive integer"),
        ({"open_metrics": {"x": "http://h/m"}, "open_metrics_max_series": 2.5},
         r"open_metrics_max_series=2.5 is invalid"),
    ],
)  # fmt: skip
def test_bad_configuration_is_a_clear_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        SystemMonitor(**kwargs)


@pytest.fixture(scope="module")
def node_exporter() -> Iterator[str]:
    binary = debian.binary("prometheus-node-exporter", "prometheus-node-exporter", "node_exporter")
    if binary is None:
        pytest.skip("prometheus-node-exporter is not installed (apt-get install it; CI does)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.skip("prometheus-node-exporter did not start")
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


def test_real_node_exporter_against_proc(node_exporter: str) -> None:
    c = OpenMetricsCollector(
        {"node": node_exporter},
        filters=["node\\.node_memory_MemTotal_bytes", "node\\.node_cpu_seconds_total"],
    )
    c.scrape("node", node_exporter)
    snap = c.sample()
    c.close()
    with open("/proc/meminfo") as f:
        mem_total = int(f.readline().split()[1]) * 1024
    assert snap["openmetrics.node.node_memory_MemTotal_bytes.0"] == mem_total
    cpu_keys = [k for k in snap if ".node_cpu_seconds_total." in k]
    modes = {c.labels[k]["mode"] for k in cpu_keys}
    assert {"user", "system", "idle"} <= modes
    assert {c.labels[k]["cpu"] for k in cpu_keys} == {str(i) for i in range(os.cpu_count() or 1)}
    assert c.aggregation(cpu_keys[0]) == "last"


# -- bounds: against small scripted servers (see LocalServer) -------------------------


class LocalServer:
    """A ThreadingHTTPServer on 127.0.0.1: ``routes[path](handler)`` answers GET ``path``
    (404 elsewhere); ``requests`` records each request's path and headers."""

    def __init__(self) -> None:
        self.routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.stop = threading.Event()  # ends dripping handlers at teardown
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append((self.path, dict(self.headers)))
                route = outer.routes.get(self.path)
                with contextlib.suppress(OSError):  # the client gave up
                    if route is None:
                        self.send_error(404)
                    else:
                        route(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,))
        self.thread.start()


@pytest.fixture
def servers() -> Iterator[Callable[[], LocalServer]]:
    started: list[LocalServer] = []

    def start() -> LocalServer:
        started.append(LocalServer())
        return started[-1]

    yield start
    for s in started:
        s.stop.set()
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join()


def page(body: bytes | str, status: int = 200, **headers: str) -> Callable[[Any], None]:
    data = body.encode() if isinstance(body, str) else body

    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        for name, value in {"Content-Length": str(len(data)), **headers}.items():
            h.send_header(name.replace("_", "-"), value)
        h.end_headers()
        h.wfile.write(data)

    return respond


def redirect(location: str) -> Callable[[Any], None]:
    return page(b"", 302, Location=location)


def drip(where: str, stop: threading.Event) -> Callable[[Any], None]:
    """One byte every 0.1 s of the headers or of the body, for at most 6 s."""

    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.0 200 OK\r\nContent-Length: 1000000\r\n"
        h.wfile.write(head + b"\r\n" if where == "body" else head)
        for _ in range(60):
            if stop.wait(0.1):
                return
            h.wfile.write(b"X-Drip: 1\r\n"[:1] if where == "headers" else b"#")
            h.wfile.flush()

    return respond


def caught_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SystemMetricsWarning)]


def latest(c: OpenMetricsCollector) -> dict[str, float]:
    """What ``sample()`` would return, without starting the collector's own thread."""
    with c._lock:
        return dict(c._latest)


def state_size(c: OpenMetricsCollector) -> int:
    """Entries in the collector's dicts, sets and lists but the latest values (and the
    entries of dicts and sets in a dict)."""
    total = 0
    for name, value in vars(c).items():
        if name != "_latest" and isinstance(value, (dict, set, list)):
            total += len(value)
            if isinstance(value, dict):
                total += sum(len(v) for v in value.values() if isinstance(v, (dict, set)))
    return total


def test_series_no_longer_on_the_page_are_forgotten_in_every_cache(
    servers: Callable[[], LocalServer],
) -> None:
    s = servers()
    pages = iter(range(1000))

    def churn(h: http.server.BaseHTTPRequestHandler) -> None:
        i = next(pages)
        lines = ["# TYPE up gauge", "up 1", "# TYPE flap gauge"]
        if i % 3 != 1:
            lines.append('flap{x="a"} 2')  # missing from every third page
        lines += ["# TYPE req_total counter"] + [
            f'req_total{{id="{i}-{j}"}} {j}' for j in range(50)
        ]
        lines += [f"# TYPE gen_{i} gauge", f"gen_{i} 1"]  # a new metric each page too
        page("\n".join(lines) + "\n")(h)

    s.routes["/m"] = churn
    url = s.url + "/m"
    c = OpenMetricsCollector({"e": url})
    sizes = []
    for i in range(40):
        c.scrape("e", url)
        snap = latest(c)
        assert snap["openmetrics.e.up.0"] == 1.0  # stable while it keeps appearing
        assert len(snap) == 52 + (i % 3 != 1)
        sizes.append(state_size(c))
    assert c.labels["openmetrics.e.flap.0"] == {"x": "a"}
    assert "openmetrics.e.gen_0.0" not in c.labels
    assert len(c.labels) < 20 * 52
    assert len(set(sizes[20:])) == 1, sizes  # forgotten as fast as new ones come
    c.close()


def test_series_cap_keeps_the_first_of_the_page_and_warns_once(
    servers: Callable[[], LocalServer],
) -> None:
    s = servers()
    s.routes["/m"] = page("# TYPE s gauge\n" + "".join(f's{{i="{i}"}} {i}\n' for i in range(3000)))
    url = s.url + "/m"
    c = OpenMetricsCollector({"e": url}, max_series=1000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            c.scrape("e", url)
            snap = latest(c)
            assert sorted(snap.values()) == [float(i) for i in range(1000)]  # the first 1000
    msgs = caught_messages(caught)
    assert len(msgs) == 1 and "2000" in msgs[0] and "open_metrics_max_series" in msgs[0], msgs
    assert len(c.labels) == 1000 and state_size(c) < 10 * 1000  # 3 times more without the cap
    c.close()
    for bad in (0, -1, True, "10", 1.5):
        with pytest.raises(ValueError, match="max_series"):
            OpenMetricsCollector({"e": url}, max_series=bad)  # type: ignore[arg-type]


def test_a_huge_page_takes_bounded_time_and_close_interrupts_its_parse(
    servers: Callable[[], LocalServer],
) -> None:
    s = servers()
    s.routes["/m"] = page(
        "# TYPE s gauge\n" + "".join(f's{{i="{i}"}} 1\n' for i in range(200_000))
    )  # 3.6 MB
    url = s.url + "/m"
    c = OpenMetricsCollector({"e": url})
    t = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SystemMetricsWarning)
        c.scrape("e", url)
    assert time.monotonic() - t < 5.0  # 10,000 series parsed, not 200,000
    assert len(latest(c)) == 10_000
    c.close()
    c = OpenMetricsCollector({"e": url}, max_series=1_000_000, poll_interval=60)
    c.sample()  # starts the thread, which spends seconds on the new series
    wait_for(lambda: len(s.requests) == 2)
    time.sleep(0.3)
    t = time.monotonic()
    c.close()
    assert c._thread is not None and not c._thread.is_alive()
    assert time.monotonic() - t < c.join_timeout + 0.2


def test_headers_are_never_sent_to_another_origin(servers: Callable[[], LocalServer]) -> None:
    a, b = servers(), servers()
    b.routes["/m"] = page("# TYPE g gauge\ng 1\n")
    a.routes["/m"] = redirect(b.url + "/m")
    a.routes["/here"] = redirect("/m2")
    a.routes["/m2"] = page("# TYPE h gauge\nh 2\n")
    c = OpenMetricsCollector({"e": a.url + "/m"}, headers={"Authorization": "Bearer s3cret"})
    c.scrape("e", a.url + "/m")
    assert latest(c) == {"openmetrics.e.g.0": 1.0}
    assert a.requests[0][1]["Authorization"] == "Bearer s3cret"
    assert b.requests and all("Authorization" not in h for _, h in b.requests), b.requests
    c.scrape("e", a.url + "/here")  # the same origin gets them
    assert latest(c) == {"openmetrics.e.h.0": 2.0}
    assert a.requests[-1] == ("/m2", a.requests[-1][1])
    assert a.requests[-1][1]["Authorization"] == "Bearer s3cret"
    c.close()


def test_redirects_only_to_http_and_at_most_three(servers: Callable[[], LocalServer]) -> None:
    s = servers()
    with socket.socket() as ftp:
        ftp.bind(("127.0.0.1", 0))
        ftp.listen()
        ftp.settimeout(0.2)
        s.routes["/ftp"] = redirect(f"ftp://127.0.0.1:{ftp.getsockname()[1]}/m")
        for i in range(4):
            s.routes[f"/r{i}"] = redirect(f"/r{i + 1}")
        s.routes["/r4"] = page("# TYPE g gauge\ng 1\n")
        c = OpenMetricsCollector({"e": s.url}, timeout=0.5)
        c.scrape("e", s.url + "/r1")  # three redirects
        assert latest(c) == {"openmetrics.e.g.0": 1.0}
        for path, why in (("/ftp", "http"), ("/r0", "redirects")):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                c.scrape("e", s.url + path)
            msgs = caught_messages(caught)
            assert len(msgs) == 1 and why in msgs[0].rsplit(":", 1)[-1], msgs
            assert latest(c) == {}
            c._endpoints["e"].retry_at = None  # so that the next failure warns again
        with pytest.raises(OSError):  # the ftp:// target was never contacted
            ftp.accept()
    c.close()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripping_server_fails_within_the_timeout(
    servers: Callable[[], LocalServer], where: str
) -> None:
    s = servers()
    s.routes["/m"] = drip(where, s.stop)
    c = OpenMetricsCollector({"e": s.url + "/m"}, timeout=1.0)
    t = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c.scrape("e", s.url + "/m")
    assert time.monotonic() - t < 1.5
    msgs = caught_messages(caught)
    assert len(msgs) == 1 and "timed out" in msgs[0], msgs
    c.close()


def test_close_is_not_held_up_by_a_request_in_flight(servers: Callable[[], LocalServer]) -> None:
    s = servers()
    s.routes["/m"] = drip("body", s.stop)
    c = OpenMetricsCollector({"e": s.url + "/m"}, timeout=1.5)
    c.sample()
    wait_for(lambda: s.requests)
    start = time.monotonic()
    c.close()
    assert time.monotonic() - start < c.join_timeout + 0.2
    assert c._thread is not None
    c._thread.join(2.0)  # it ends by the request's deadline, on its own
    assert not c._thread.is_alive()
    assert time.monotonic() - start < 1.5 + 0.5


def test_long_lines_are_skipped_and_warnings_quote_little(
    servers: Callable[[], LocalServer],
) -> None:
    s = servers()
    s.routes["/long"] = page(
        '# TYPE g gauge\ng{l="' + "x" * (1 << 20) + '"} 1\n# TYPE ok gauge\nok 2\n'
    )
    s.routes["/bad"] = page('# TYPE g gauge\ng{l="' + "x" * 50_000 + "\n")
    c = OpenMetricsCollector({"e": s.url})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tracemalloc.start()
        try:
            c.scrape("e", s.url + "/long")
            before = tracemalloc.get_traced_memory()[0]
            c.scrape("e", s.url + "/long")
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert latest(c) == {"openmetrics.e.ok.0": 2.0}
        assert kept < 256 << 10, kept  # the long line is not remembered
        msgs = caught_messages(caught)
        assert len(msgs) == 1 and "longer than" in msgs[0] and len(msgs[0]) < 1000, msgs
        c.scrape("e", s.url + "/bad")
        msgs = caught_messages(caught)[1:]
        assert len(msgs) == 1 and "'e'" in msgs[0] and len(msgs[0]) < 1000, msgs
    c.close()


def test_gzip_page_is_read_and_identity_asked_for(servers: Callable[[], LocalServer]) -> None:
    s = servers()
    s.routes["/m"] = page(gzip.compress(b"# TYPE g gauge\ng 1\n"), Content_Encoding="gzip")
    c = OpenMetricsCollector({"e": s.url + "/m"})
    c.scrape("e", s.url + "/m")
    assert latest(c) == {"openmetrics.e.g.0": 1.0}
    assert s.requests[0][1]["Accept-Encoding"] == "identity"
    c.close()


def gzip_bomb(size: int) -> bytes:
    z = zlib.compressobj(9, wbits=16 + zlib.MAX_WBITS)
    zeros = b"0" * (1 << 20)
    return b"".join([*(z.compress(zeros) for _ in range(size >> 20)), z.flush()])


def test_gzip_bomb_and_unparseable_pages_fail_the_scrape(
    servers: Callable[[], LocalServer],
) -> None:
    s = servers()
    s.routes["/bomb"] = page(gzip_bomb(64 << 20), Content_Encoding="gzip")  # 64 KB -> 64 MB
    s.routes["/html"] = page("<html>\n<body>metrics moved</body>\n</html>\n")
    c = OpenMetricsCollector({"e": s.url}, max_bytes=1 << 20)
    for path, why in (("/bomb", "max_bytes"), ("/html", "nothing parseable")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tracemalloc.start()
            try:
                c.scrape("e", s.url + path)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        msgs = caught_messages(caught)
        assert len(msgs) == 1 and why in msgs[0], msgs
        assert peak < 8 << 20, peak
        c._endpoints["e"].retry_at = None
    c.close()


FAILURES = {
    "404": lambda s: None,
    "malformed": lambda s: page("# TYPE g gauge\ng{ 1\n"),
    "too large": lambda s: page("g 1\n" * 300_000),
    "slow": lambda s: drip("body", s.stop),
    "redirect to ftp": lambda s: redirect("ftp://127.0.0.1:9/m"),
    "too many redirects": lambda s: redirect("/m"),
    "nothing parseable": lambda s: page("<html></html>\n"),
    "gzip bomb": lambda s: page(gzip_bomb(4 << 20), Content_Encoding="gzip"),
}


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failing_endpoint_reports_no_stale_values(
    servers: Callable[[], LocalServer], failure: str
) -> None:
    s = servers()
    s.routes["/m"] = page("# TYPE g gauge\ng 1\n")
    s.routes["/other"] = page("# TYPE h gauge\nh 2\n")
    c = OpenMetricsCollector(
        {"e": s.url + "/m", "other": s.url + "/other"}, timeout=0.5, max_bytes=1 << 20
    )
    c.scrape("e", s.url + "/m")
    c.scrape("other", s.url + "/other")
    assert latest(c) == {"openmetrics.e.g.0": 1.0, "openmetrics.other.h.0": 2.0}
    route = FAILURES[failure](s)
    if route is None:
        del s.routes["/m"]
    else:
        s.routes["/m"] = route
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c.scrape("e", s.url + "/m")
    assert len(caught_messages(caught)) == 1
    assert latest(c) == {"openmetrics.other.h.0": 2.0}  # none of e's, stale or not
    retry_at = c._endpoints["e"].retry_at
    assert retry_at is not None and retry_at > time.monotonic() + 20  # retried after retry_after
    c.close()
