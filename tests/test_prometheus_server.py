"""The tests' Prometheus helper (:mod:`tests.prometheus_server`) against a stand-in binary
that starts as Prometheus does: it listens at once and answers every request but its
health check with ``503 Service Unavailable`` until its storage is open (``/-/ready``
says when), then answers queries. Under a loaded CI machine Prometheus took long enough
to open its storage that a test's first query got the 503 and failed."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.prometheus_server import Prometheus

# Serves on --web.listen-address; 503 for everything (as Prometheus' readiness gate
# does) during its first second, then 200 on /-/ready and, for any query, one series.
STANDIN = r"""
import http.server, json, sys, time
address = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--web.listen-address="))
host, port = address.rsplit(":", 1)
start = time.monotonic()

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if time.monotonic() - start < 1.0:
            body, code = b"Service Unavailable", 503
        elif self.path.startswith("/-/ready"):
            body, code = b"Prometheus Server is Ready.\n", 200
        else:
            body, code = json.dumps({"status": "success",
                "data": {"resultType": "vector", "result": [
                    {"metric": {"job": "standin"}, "value": [time.time(), "1"]}]}}).encode(), 200
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.HTTPServer((host, int(port)), Handler).serve_forever()
"""


def test_queries_wait_until_prometheus_is_ready(tmp_path: Path) -> None:
    """Regression: a query made before the server was ready raised AssertionError
    ('Service Unavailable'); the helper now waits for ``/-/ready`` before it returns."""
    binary = tmp_path / "prometheus"
    binary.write_text(f"#!{sys.executable}\n{STANDIN}")
    binary.chmod(0o755)
    with Prometheus(str(binary), "127.0.0.1:1", tmp_path) as prometheus:
        got = prometheus.wait(lambda: prometheus.query("up"), 30, "no answer")
    assert [labels for labels, _ in got.values()] == [{"job": "standin"}]
