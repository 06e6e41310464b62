"""OpenMetrics / Prometheus endpoints: ``openmetrics.{name}.{metric}.{index}``."""

from __future__ import annotations

import logging
import re
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Union
from urllib.parse import urlsplit

from sysmetrics import _optional
from sysmetrics.collectors.base import BackgroundCollector, SystemMetricsWarning

log = logging.getLogger("sysmetrics")

Filters = Union[Sequence[str], Mapping[str, Mapping[str, str]]]
_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_MAX_SERIES = 200_000  # series remembered per endpoint


def _split_sample(line: str) -> tuple[str, str] | None:
    """``(series, value)`` of a sample line: its text up to the value, and the value.

    None where that cannot be told apart cheaply (an exemplar after ``#``, no value).
    """
    if "#" in line:
        return None
    end = line.rfind("}")
    if end >= 0:
        series, rest = line[: end + 1], line[end + 1 :]
    else:
        parts = line.split(None, 1)
        if len(parts) != 2:
            return None
        series, rest = parts
    fields = rest.split()
    return (series, fields[0]) if fields else None


def _compile(pattern: object, what: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise TypeError(f"{what} {pattern!r} is invalid: it must be a regular expression string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what} {pattern!r} is not a valid regular expression: {exc}") from None


class OpenMetricsCollector(BackgroundCollector):
    """Gauges and counters scraped from OpenMetrics / Prometheus text endpoints.

    Keys: ``openmetrics.{name}.{metric}.{index}``: ``name`` is the endpoint's name,
    ``metric`` the sample name (counters keep ``_total``), and ``index`` numbers the
    metric's label sets in the order first seen (stable for the run; see
    :attr:`labels`). Values in the endpoint's own units; counters give their latest value.

    Endpoints are scraped on the collector's own daemon thread every ``poll_interval``
    seconds, so a slow endpoint never holds up the monitor; ``sample()`` returns the
    latest values without I/O. An endpoint that is down, slow (``timeout``), larger than
    ``max_bytes`` or malformed costs one warning and is tried again ``retry_after``
    seconds later; a warning comes again only after it has recovered.

    Args:
        endpoints: ``{name: url}``, http or https.
        filters: regexes matched (``re.fullmatch``) against ``"{name}.{metric}"``, or
            ``{metric_regex: {label: label_regex}}``; everything by default.
        headers: HTTP headers sent with each request (for instance an authorization).
        timeout: seconds per request.
        max_bytes: largest response read.
        poll_interval: seconds between scrapes of each endpoint.
        retry_after: seconds before a failed endpoint is tried again.

    Raises:
        TypeError, ValueError: a malformed URL or name, an invalid regex, a bad number.
        ImportError: prometheus-client is not installed (the ``[openmetrics]`` extra).

    """

    name = "openmetrics"
    last_keys = frozenset()  # counters are told apart by type at parse time
    thread_name = "sysmetrics-openmetrics"

    def __init__(
        self,
        endpoints: Mapping[str, str],
        filters: Filters | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 3.0,
        max_bytes: int = 16 << 20,
        poll_interval: float = 1.0,
        retry_after: float = 30.0,
    ) -> None:
        if not isinstance(endpoints, Mapping) or not endpoints:
            raise TypeError(f"open_metrics={endpoints!r} is invalid: use {{name: url}}")
        for ep_name, url in endpoints.items():
            if not isinstance(ep_name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", ep_name):
                raise ValueError(
                    f"open_metrics name {ep_name!r} is invalid: use letters, digits, _ and -"
                )
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"open_metrics[{ep_name!r}]={url!r} is invalid: use an http:// or https:// URL"
                )
        for what, value in (("timeout", timeout), ("poll_interval", poll_interval),
                            ("retry_after", retry_after), ("max_bytes", max_bytes)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{what}={value!r} is invalid: it must be a positive number")
        self.parser = _optional.prometheus_parser()
        super().__init__()
        self.endpoints = dict(endpoints)
        self.headers = dict(headers or {})
        self.timeout, self.max_bytes = float(timeout), int(max_bytes)
        self.poll_interval, self.retry_after = float(poll_interval), float(retry_after)
        self._metric_filters: list[re.Pattern[str]] = []
        self._label_filters: list[tuple[re.Pattern[str], dict[str, re.Pattern[str]]]] = []
        if filters is None:
            self._metric_filters = [re.compile(".*")]
        elif isinstance(filters, Mapping):
            for metric, labels in filters.items():
                if not isinstance(labels, Mapping):
                    raise TypeError(
                        f"open_metrics_filters[{metric!r}]={labels!r} is invalid: "
                        "use {label: label_regex}"
                    )
                self._label_filters.append((
                    _compile(metric, "open_metrics_filters key"),
                    {k: _compile(v, f"open_metrics_filters[{metric!r}][{k!r}]")
                     for k, v in labels.items()},
                ))  # fmt: skip
        elif isinstance(filters, str) or not isinstance(filters, Sequence):
            raise TypeError(
                f"open_metrics_filters={filters!r} is invalid: use a list of regexes or "
                "{metric_regex: {label: label_regex}}"
            )
        else:
            self._metric_filters = [_compile(f, "open_metrics_filters entry") for f in filters]
        self._indices: dict[tuple[str, frozenset[tuple[str, str]]], str] = {}
        self._count: dict[str, int] = {}  # label sets seen per metric
        self._labels: dict[str, dict[str, str]] = {}
        self._counters: set[str] = set()
        self._failing: dict[str, float] = {}  # endpoint -> when to try again
        self._series: dict[str, dict[str, str | None]] = {}  # endpoint -> series -> key

    @property
    def labels(self) -> dict[str, dict[str, str]]:
        """``{key: labels}``: what each ``openmetrics.{name}.{metric}.{index}`` stands for."""
        with self._lock:
            return {k: dict(v) for k, v in self._labels.items()}

    def aggregation(self, key: str) -> Any:
        """Counters give their latest value, gauges are averaged."""
        return "last" if key in self._counters else "mean"

    def _run(self) -> None:
        while True:
            for ep_name, url in self.endpoints.items():
                if self._closed.is_set():
                    return
                if time.monotonic() < self._failing.get(ep_name, 0.0):
                    continue
                self.scrape(ep_name, url)
            if self._closed.wait(self.poll_interval):
                return

    def scrape(self, ep_name: str, url: str) -> None:
        """Fetch and parse one endpoint into the latest values; failures warn once."""
        try:
            values = self._parse(ep_name, self._fetch(url))
        except Exception as exc:
            if ep_name not in self._failing and not self._closed.is_set():
                warnings.warn(
                    f"sysmetrics: OpenMetrics endpoint {ep_name!r} ({url}) failed, retrying "
                    f"every {self.retry_after:g} s: {type(exc).__name__}: {exc}",
                    SystemMetricsWarning,
                    stacklevel=2,
                )
            self._failing[ep_name] = time.monotonic() + self.retry_after
            return
        self._failing.pop(ep_name, None)
        prefix = f"openmetrics.{ep_name}."
        with self._lock:
            for key in [k for k in self._latest if k.startswith(prefix)]:
                del self._latest[key]
            self._latest.update(values)

    def _fetch(self, url: str) -> str:
        request = urllib.request.Request(url, headers=self.headers)
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            body = response.read(self.max_bytes + 1)
        if len(body) > self.max_bytes:
            raise ValueError(f"response larger than max_bytes={self.max_bytes}")
        return body.decode("utf-8", errors="replace")  # type: ignore[no-any-return]

    def _wanted(self, ep_name: str, metric: str) -> bool:
        full = f"{ep_name}.{metric}"
        return any(p.fullmatch(full) for p in self._metric_filters) or any(
            p.fullmatch(full) for p, _ in self._label_filters
        )

    def _parse(self, ep_name: str, text: str) -> dict[str, float]:
        """Values of the wanted gauges and counters on one page, by key.

        A series line seen before (same name and labels, so the same text up to its
        value) takes its key from a cache and only its value is read; new series lines
        go to prometheus_client's parser with their family's TYPE line, and what the
        parser made of them (a key, or nothing wanted) is cached. Unwanted metrics are
        dropped by name before any parsing.
        """
        cache = self._series.setdefault(ep_name, {})
        if len(cache) > _MAX_SERIES:  # label values that never repeat: start over
            cache.clear()
        out: dict[str, float] = {}
        type_line = ""
        for line in text.splitlines():
            if line.startswith("#"):
                if line.startswith("# TYPE "):
                    type_line = line
                continue
            split = _split_sample(line)
            if split is None:  # parsed every time, if its metric is wanted
                m = _SAMPLE.match(line)
                if m is not None and self._wanted(ep_name, m.group()):
                    self._parse_new(ep_name, type_line, line, out)
                continue
            series, value = split
            if series in cache:
                key = cache[series]
                if key is not None:
                    try:
                        out[key] = float(value)
                    except ValueError:  # let the parser say what is wrong with it
                        self._parse_new(ep_name, type_line, line, out)
                continue
            m = _SAMPLE.match(series)
            if m is None or not self._wanted(ep_name, m.group()):
                cache[series] = None
                continue
            cache[series] = self._parse_new(ep_name, type_line, line, out)
        return out

    def _parse_new(
        self, ep_name: str, type_line: str, line: str, out: dict[str, float]
    ) -> str | None:
        """Parse one series line with prometheus_client into ``out``; its key, or None.

        Raises on a malformed line.
        """
        key = None
        families = self.parser(f"{type_line}\n{line}\n" if type_line else f"{line}\n")
        for family in families:
            for s in family.samples:
                if family.type not in ("gauge", "counter"):
                    continue
                if family.type == "counter" and not s.name.endswith("_total"):
                    continue  # _created timestamps are not counts
                if not self._labels_wanted(ep_name, s.name, s.labels):
                    continue
                key = self._key(ep_name, s.name, s.labels)
                out[key] = float(s.value)
                if family.type == "counter":
                    self._counters.add(key)
        return key

    def _labels_wanted(self, ep_name: str, metric: str, labels: Mapping[str, str]) -> bool:
        full = f"{ep_name}.{metric}"
        if any(p.fullmatch(full) for p in self._metric_filters):
            return True
        for pattern, label_patterns in self._label_filters:
            if pattern.fullmatch(full) and all(
                lp.fullmatch(labels.get(label, "")) for label, lp in label_patterns.items()
            ):
                return True
        return False

    def _key(self, ep_name: str, metric: str, labels: Mapping[str, str]) -> str:
        ident = (f"{ep_name}.{metric}", frozenset(labels.items()))
        key = self._indices.get(ident)
        if key is None:
            n = self._count.get(ident[0], 0)
            self._count[ident[0]] = n + 1
            key = self._indices[ident] = f"openmetrics.{ep_name}.{metric}.{n}"
            with self._lock:
                self._labels[key] = dict(labels)
        return key
