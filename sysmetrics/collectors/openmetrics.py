"""OpenMetrics / Prometheus endpoints: ``openmetrics.{name}.{metric}.{index}``."""

from __future__ import annotations

import itertools
import logging
import math
import re
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union
from urllib.parse import urlsplit

from sysmetrics import _optional
from sysmetrics.collectors._http import fetch
from sysmetrics.collectors.base import BackgroundCollector
from sysmetrics.errors import OptionError, OptionTypeError, SystemMetricsWarning, quote

log = logging.getLogger("sysmetrics")

Filters = Union[Sequence[str], Mapping[str, Mapping[str, str]]]
_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
FORGET_AFTER = 5  # successful pages in a row a series is missing from when it is forgotten
MAX_LINE = 64 << 10  # characters; longer lines are skipped
_BLOCK = 1 << 20  # characters of page text split into lines at a time


def _line_blocks(text: str, closed: threading.Event) -> Iterator[list[str]]:
    """``text``'s lines, about 1 MiB of text at a time.

    A list of all of a page's lines at once would cost 5x the page.

    Raises:
        InterruptedError: ``closed`` was set.

    """
    start = 0
    while start < len(text):
        if closed.is_set():
            raise InterruptedError("the collector was closed")
        end = text.find("\n", start + _BLOCK)
        end = len(text) if end < 0 else end
        yield text[start:end].splitlines()
        start = end + 1


class _Series:
    """A series line seen before: its key (None: nothing wanted) and the last page it was on."""

    __slots__ = ("key", "seen")

    def __init__(self, key: str | None, seen: int) -> None:
        self.key, self.seen = key, seen


class _Endpoint:
    """One endpoint's state, read and written on the collector's thread only.

    ``page``: the number of its last successful page. ``series``: the series lines seen on
    its pages, with their keys and the last page each was on. ``seen``: the keys the parser
    gave lately, with the last page it did (those no remembered line holds yet, or from
    lines that are never cached). ``names``: which metric names the filters keep (a memo).
    ``retry_at``: while it is failing, when (monotonic s) to try it again.
    """

    __slots__ = ("name", "names", "page", "retry_at", "seen", "series", "url")

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.page = 0
        self.series: dict[str, _Series] = {}
        self.seen: dict[str, int] = {}
        self.names: dict[str, bool] = {}
        self.retry_at: float | None = None


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


def _metric_of(key: str) -> str:
    """``"{name}.{metric}"`` of a key ``openmetrics.{name}.{metric}.{index}``."""
    return key[len("openmetrics.") : key.rfind(".")]


def _float(value: float) -> float:
    """``float(value)``; an int too large for a float is infinite (the engine drops it)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _compile(pattern: object, what: str) -> re.Pattern[str]:
    """``pattern`` compiled; ``what`` names it in ``open_metrics_filters``."""
    subject = f"{what} {pattern!r}"
    if not isinstance(pattern, str):
        raise OptionTypeError(
            FILTERS, pattern, "it must be a regular expression string", subject=subject
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise OptionError(
            FILTERS, pattern, str(exc), problem="is not a valid regular expression", subject=subject
        ) from None


FILTERS = "open_metrics_filters"  # the option the filters come from, named in its errors


def check_endpoints(endpoints: object) -> None:
    """Check ``open_metrics`` (``{name: url}``) without fetching anything.

    Raises:
        TypeError, ValueError: not a non-empty mapping, a malformed name or URL.

    """
    if not isinstance(endpoints, Mapping) or not endpoints:
        raise OptionTypeError("open_metrics", endpoints, "use {name: url}")
    for ep_name, url in endpoints.items():
        if not isinstance(ep_name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", ep_name):
            raise OptionError("open_metrics", ep_name, "use letters, digits, _ and -", part="name")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise OptionError(
                "open_metrics", url, "use an http:// or https:// URL", part="key", key=ep_name
            )


class OpenMetricsCollector(BackgroundCollector):
    """Gauges and counters scraped from OpenMetrics / Prometheus text endpoints.

    Keys: ``openmetrics.{name}.{metric}.{index}``: ``name`` is the endpoint's name,
    ``metric`` the sample name (counters keep ``_total``), and ``index`` numbers the
    metric's label sets in the order first seen (see :attr:`labels`). Values in the
    endpoint's own units; counters give their latest value.

    An index stays the same while its label set keeps appearing. A series missing from
    ``FORGET_AFTER`` (5) consecutive successful pages of its endpoint is forgotten, with
    its key and labels, so label values that change on every page do not pile up (failed
    scrapes do not count). A label set that comes back after that may get a new index,
    and once all of a metric's label sets are forgotten its indices start again at 0.

    Endpoints are scraped on the collector's own daemon thread every ``poll_interval``
    seconds, so a slow endpoint never holds up the monitor; ``sample()`` returns the
    latest values without I/O. An endpoint that is down, slow (``timeout``), larger than
    ``max_bytes``, malformed, or whose page holds nothing parseable costs one warning, its
    values are dropped (never presented stale) and it is tried again ``retry_after``
    seconds later; a warning comes again only after it has recovered.

    Bounds: one deadline of ``timeout`` seconds for the whole request (connecting,
    redirects, headers and body); at most ``_http.MAX_REDIRECTS`` (3) redirects, to http(s)
    only, and ``headers`` go only to the configured URL's scheme, host and port; a gzip
    page is decompressed up to ``max_bytes``; lines longer than ``MAX_LINE`` (65,536)
    characters are skipped; the first ``max_series`` series of a page (of the metrics the
    filters keep) are kept. Skipped lines and dropped series cost one warning per
    endpoint, and warnings quote at most 300 characters of what the endpoint sent.

    Args:
        endpoints: ``{name: url}``, http or https.
        filters: regexes matched (``re.fullmatch``) against ``"{name}.{metric}"``, or
            ``{metric_regex: {label: label_regex}}``; everything by default.
        headers: HTTP headers sent with each request (for instance an authorization),
            never to another origin a redirect points at.
        timeout: seconds for a whole request, from connecting to the body's last byte.
        max_bytes: largest response read, in bytes (after decompression for gzip).
        poll_interval: seconds between scrapes of each endpoint.
        retry_after: seconds before a failed endpoint is tried again.
        max_series: series kept per endpoint: the first ones of each page.

    Raises:
        TypeError, ValueError: a malformed URL or name, an invalid regex, a bad number.
        ImportError: prometheus-client is not installed (the ``[openmetrics]`` extra).

    """

    name = "openmetrics"
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
        max_series: int = 10_000,
    ) -> None:
        check_endpoints(endpoints)
        for what, value in (("timeout", timeout), ("poll_interval", poll_interval),
                            ("retry_after", retry_after), ("max_bytes", max_bytes)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{what}={value!r} is invalid: it must be a positive number")
        if isinstance(max_series, bool) or not isinstance(max_series, int) or max_series <= 0:
            raise ValueError(f"max_series={max_series!r} is invalid: it must be a positive integer")
        self.parser = _optional.prometheus_parser()
        super().__init__()
        self.endpoints = dict(endpoints)
        self.headers = dict(headers or {})
        self.timeout, self.max_bytes = float(timeout), int(max_bytes)
        self.poll_interval, self.retry_after = float(poll_interval), float(retry_after)
        self.max_series = max_series
        self._metric_filters: list[re.Pattern[str]] = []
        self._label_filters: list[tuple[re.Pattern[str], dict[str, re.Pattern[str]]]] = []
        if filters is None:
            self._metric_filters = [re.compile(".*")]
        elif isinstance(filters, Mapping):
            for metric, labels in filters.items():
                if not isinstance(labels, Mapping):
                    raise OptionTypeError(
                        FILTERS, labels, "use {label: label_regex}", part="key", key=metric
                    )
                self._label_filters.append((
                    _compile(metric, "open_metrics_filters key"),
                    {k: _compile(v, f"open_metrics_filters[{metric!r}][{k!r}]")
                     for k, v in labels.items()},
                ))  # fmt: skip
        elif isinstance(filters, str) or not isinstance(filters, Sequence):
            raise OptionTypeError(
                FILTERS, filters, "use a list of regexes or {metric_regex: {label: label_regex}}"
            )
        else:
            self._metric_filters = [_compile(f, "open_metrics_filters entry") for f in filters]
        self._endpoints = {n: _Endpoint(n, u) for n, u in self.endpoints.items()}
        # Per key: its labels and whether it is a counter; per "{name}.{metric}": the next
        # index and each label set's key.
        self._labels: dict[str, dict[str, str]] = {}
        self._counters: set[str] = set()
        self._count: dict[str, int] = {}
        self._indices: dict[tuple[str, frozenset[tuple[str, str]]], str] = {}

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
                retry_at = self._endpoints[ep_name].retry_at
                if retry_at is not None and time.monotonic() < retry_at:
                    continue
                self.scrape(ep_name, url)
            if self._closed.wait(self.poll_interval):
                return

    def scrape(self, ep_name: str, url: str) -> None:
        """Fetch and parse one endpoint into the latest values; failures warn once.

        A failed scrape drops the endpoint's values: the monitor never reports them stale.
        """
        endpoint = self._endpoints[ep_name]
        try:
            values = self._parse(ep_name, fetch(url, self.headers, self.timeout, self.max_bytes))
        except Exception as exc:
            self._publish(ep_name, {})
            if endpoint.retry_at is None and not self._closed.is_set():
                warnings.warn(
                    f"sysmetrics: OpenMetrics endpoint {ep_name!r} ({quote(url)}) failed, "
                    f"retrying every {self.retry_after:g} s: "
                    f"{type(exc).__name__}: {quote(str(exc))}",
                    SystemMetricsWarning,
                    stacklevel=2,
                )
            endpoint.retry_at = time.monotonic() + self.retry_after
            return
        endpoint.retry_at = None
        self._publish(ep_name, values)

    def _publish(self, ep_name: str, values: dict[str, float]) -> None:
        """Make ``values`` the endpoint's latest values, in place of all its previous ones."""
        prefix = f"openmetrics.{ep_name}."
        with self._lock:
            for key in [k for k in self._latest if k.startswith(prefix)]:
                del self._latest[key]
            self._latest.update(values)

    def _name_wanted(self, ep_name: str, name: str, names: dict[str, bool]) -> bool:
        """Whether the filters keep some series of the metric ``name`` starts with.

        ``name`` is a sample line's text before its labels; the answer goes into
        ``names``, the endpoint's memo.
        """
        m = _SAMPLE.match(name)
        full = f"{ep_name}.{m.group()}" if m else ""
        wanted = bool(m) and (
            any(p.fullmatch(full) for p in self._metric_filters)
            or any(p.fullmatch(full) for p, _ in self._label_filters)
        )
        if len(names) >= self.max_series:  # names that never repeat: start over
            names.clear()
        names[name] = wanted
        return wanted

    def _parse(self, ep_name: str, body: bytes) -> dict[str, float]:
        """Values of the wanted gauges and counters on one page, by key.

        A series line seen before (same name and labels, so the same text up to its
        value) takes its key from a cache and only its value is read; new series lines
        go to prometheus_client's parser with their family's TYPE line, and what the
        parser made of them (a key, or nothing wanted) is cached. Unwanted metrics are
        dropped by name before any parsing. Of the rest, the first ``max_series`` series
        of the page are kept. Lines longer than ``MAX_LINE`` are skipped.

        Raises:
            ValueError: a malformed line of a wanted metric, or a page with nothing
                parseable in it.
            InterruptedError: the collector was closed meanwhile.

        """
        text = body.decode("utf-8", errors="replace")
        endpoint = self._endpoints[ep_name]
        cache, names = endpoint.series, endpoint.names
        page = endpoint.page + 1
        out: dict[str, float] = {}
        type_line = ""
        kept = dropped = too_long = 0
        max_series = self.max_series
        parseable = False  # a TYPE/HELP/EOF line or a sample of an unwanted metric seen
        over_warned = f"{ep_name} max_series" in self._warned
        for line in itertools.chain.from_iterable(_line_blocks(text, self._closed)):
            if len(line) > MAX_LINE:
                too_long += 1
                continue
            if line.startswith("#"):
                if line.startswith("# TYPE "):
                    type_line = line
                parseable = parseable or line.startswith(("# TYPE ", "# HELP ", "# EOF"))
                continue
            split = _split_sample(line)
            series, value = split or (line, "")  # no split: parsed every time, if wanted
            entry = cache.get(series) if split else None
            if entry is None:
                brace = series.find("{")
                name = series if brace < 0 else series[:brace]
                wanted = names.get(name)
                if wanted is None:
                    wanted = self._name_wanted(ep_name, name, names)
                if not wanted:
                    parseable = parseable or (bool(_SAMPLE.match(name)) and _is_number(value))
                    continue
            if kept == max_series:
                dropped += 1
                if over_warned:
                    break  # the rest of the page is dropped: no need to count it again
                continue
            kept += 1
            if entry is None:
                key = self._parse_new(ep_name, type_line, line, out, page)
                if split:
                    cache[series] = _Series(key, page)
                continue
            entry.seen = page
            key = entry.key
            if key is not None:
                try:
                    out[key] = float(value)
                except ValueError:  # let the parser say what is wrong with it
                    self._parse_new(ep_name, type_line, line, out, page)
        if not (parseable or kept or too_long) and text and not text.isspace():
            raise ValueError(
                f"nothing parseable (no OpenMetrics sample or TYPE line) in a page of "
                f"{len(body)} bytes, which starts {text[:100]!r}"
            )
        if too_long:
            self._warn_once(
                f"{ep_name} long lines",
                f"sysmetrics: OpenMetrics endpoint {ep_name!r} sent {too_long} lines longer "
                f"than {MAX_LINE} characters; they are skipped",
            )
        if dropped and not over_warned:
            self._warn_once(
                f"{ep_name} max_series",
                f"sysmetrics: OpenMetrics endpoint {ep_name!r} has {kept + dropped} series, "
                f"more than max_series={self.max_series}: the first {kept} of its page are "
                f"kept and {dropped} dropped; raise open_metrics_max_series to keep more",
            )
        endpoint.page = page
        self._forget(endpoint)
        return out

    def _forget(self, endpoint: _Endpoint) -> None:
        """Forget what the endpoint's last 5 pages lacked.

        That is its series lines on none of them, and the keys that no remembered line
        holds and that the parser gave on none of them.
        """
        old = endpoint.page - FORGET_AFTER
        cache, seen = endpoint.series, endpoint.seen
        stale = [cache.pop(s).key for s in [s for s, e in cache.items() if e.seen <= old]]
        maybe = {k for k in stale if k is not None}
        maybe.update(k for k, p in seen.items() if p <= old)
        if not maybe:
            return
        live = {e.key for e in cache.values()}
        for key in maybe & live:
            seen.pop(key, None)  # a remembered line holds it: looked at again when that goes
        gone = [k for k in maybe - live if seen.get(k, old) <= old]
        if not gone:
            return
        endpoint.names.clear()  # a memo: it starts over with the next page's names
        with self._lock:
            for key in gone:
                seen.pop(key, None)
                labels = self._labels.pop(key)
                self._counters.discard(key)
                del self._indices[_metric_of(key), frozenset(labels.items())]
            prefix = f"openmetrics.{endpoint.name}."
            left = {_metric_of(k) for k in self._labels if k.startswith(prefix)}
        for metric in {_metric_of(k) for k in gone} - left:
            del self._count[metric]  # none of its label sets left: indices start again

    def _parse_new(
        self, ep_name: str, type_line: str, line: str, out: dict[str, float], page: int
    ) -> str | None:
        """Parse one series line with prometheus_client into ``out``; its key, or None.

        Raises:
            ValueError: a malformed line.
            InterruptedError: the collector was closed (new series are slow to parse).

        """
        if self._closed.is_set():
            raise InterruptedError("the collector was closed")
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
                key = self._key(ep_name, s.name, s.labels, page)
                out[key] = _float(s.value)
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

    def _key(self, ep_name: str, metric: str, labels: Mapping[str, str], page: int) -> str:
        """The key of ``metric``'s series with ``labels``, new or remembered; seen on ``page``."""
        ident = (f"{ep_name}.{metric}", frozenset(labels.items()))
        key = self._indices.get(ident)
        if key is None:
            n = self._count.get(ident[0], 0)
            self._count[ident[0]] = n + 1
            key = self._indices[ident] = f"openmetrics.{ep_name}.{metric}.{n}"
            with self._lock:
                self._labels[key] = dict(labels)
        self._endpoints[ep_name].seen[key] = page
        return key
