"""A real Prometheus server for the tests (Debian's package: see :mod:`tests.debian`)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from tests.launch import free_port

T = TypeVar("T")


class Prometheus:
    """A Prometheus server scraping ``targets`` every second, with its data in ``tmp``,
    returned once it is ready (pytest fails if it is not within ``ready_s`` seconds).

    ``rule_files`` are loaded and evaluated every second (``evaluation_interval``).
    Prometheus listens before its storage is open and answers every request but its
    health checks with 503 until then: ``/-/ready`` says when it is over.
    """

    def __init__(
        self,
        binary: str,
        target: str | Sequence[str],
        tmp: Path,
        rule_files: Sequence[Path] = (),
        ready_s: float = 60.0,
    ) -> None:
        targets = [target] if isinstance(target, str) else list(target)
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            + "".join(f"rule_files:\n  - '{f}'\n" if i == 0 else f"  - '{f}'\n"
                      for i, f in enumerate(rule_files))
            + "scrape_configs:\n  - job_name: sysmetrics\n"
            f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = tmp / "prometheus.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                 f"--web.listen-address={self.url[len('http://'):]}"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            self.wait(self._ready, ready_s, "Prometheus was not ready")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:  # not listening yet, or 503: its storage is not open yet
            return False

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of an API answer; AssertionError with Prometheus' error if it fails."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as exc:  # a bad query: 400 with the error in JSON
            raise AssertionError(f"{path} {params}: {exc.read().decode()[:2000]}") from None
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, promql: str) -> dict[str, tuple[dict[str, str], float]]:
        """``{series' labels as text: (labels, value)}`` of an instant query; {} if it
        timed out (a query Prometheus rejects raises AssertionError)."""
        try:
            result = self.api("query", query=promql)["result"]
        except OSError:
            return {}  # no answer within 5 s on a loaded machine: asked again
        return {json.dumps(r["metric"], sort_keys=True): (r["metric"], float(r["value"][1]))
                for r in result}  # fmt: skip

    def wait(self, what: Callable[[], T], timeout: float, why: str) -> T:
        """``what()`` once it is truthy (polled every 0.2 s); pytest fails after ``timeout`` s."""
        import pytest

        deadline = time.monotonic() + timeout
        while not (got := what()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{why}; Prometheus' log: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return got

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.stop()
