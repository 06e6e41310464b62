"""A Prometheus ``/metrics`` endpoint serving a monitor's latest values.

Needs the ``[prometheus]`` extra (``prometheus-client``). Each scrape reads
``monitor.latest()`` (a cheap copy under the monitor's lock) and turns every key that
:func:`sysmetrics.descriptions.describe` knows into a Prometheus series: the name is
``sysmetrics_`` + the description's Prometheus name, the value is in the base unit (bytes,
hertz), the key's placeholders become labels (``gpu="0"``, ``path="/"``), and every
series carries ``host``, ``node`` and ``run`` labels. The monitor's training step
(``monitor.step``, which callbacks and the recorder set) is served as the gauge
``sysmetrics_training_step`` while it is known, and, while the hang watch finds the step
stalled (``monitor.stall``, :mod:`sysmetrics.hang`), the seconds since it last advanced as
``sysmetrics_training_stalled_seconds``. Scrapes run on the server's own
threads, one per connection: a slow or stalled client never delays the monitor's sampling
or another client's scrape.

The page is made by prometheus_client's WSGI app (content negotiation, OpenMetrics, gzip,
``name[]`` filters) on the standard library's ``wsgiref`` server, as prometheus_client's
``start_http_server`` does; the threads are ours so that :meth:`PrometheusExporter.close`
can end requests in flight and free the port (``start_http_server`` returns nothing to
shut down before prometheus-client 0.20).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import math
import numbers
import operator
import os
import re
import secrets
import socket
import socketserver
import threading
import time
import warnings
import weakref
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from sysmetrics import _optional
from sysmetrics.descriptions import describe
from sysmetrics.distributed import env_node_rank
from sysmetrics.errors import SystemMetricsWarning

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

    from sysmetrics.ledger import Prices
    from sysmetrics.monitor import SystemMonitor

log = logging.getLogger("sysmetrics")

DEFAULT_PORT = 9464  # the port OpenTelemetry's Prometheus exporters use
DEFAULT_ADDR = "127.0.0.1"
PREFIX = "sysmetrics_"
REQUEST_TIMEOUT = 10.0  # s a scrape connection may stay silent before it is dropped
REQUEST_DEADLINE = 30.0  # s a scrape connection may last in all (a client dribbling bytes)
MAX_REQUESTS = 256  # connections served at once (a thread each); more wait to be accepted
SOMAXCONN = "/proc/sys/net/core/somaxconn"  # the system's cap on a listen queue (Linux)
LISTEN_BACKLOG_FALLBACK = 4096  # connections queued to be accepted where SOMAXCONN is unread
MAX_LISTEN_BACKLOG = 65535  # connections queued to be accepted, at most
CLOSE_WAIT = 1.0  # s close() waits for the requests in flight, once their sockets are shut
MAX_CACHED_KEYS = 10_000  # keys whose series are remembered between scrapes
MAX_LOGGED_KEYS = 100  # undescribed keys logged (one debug line each)
STEP_NAME = PREFIX + "training_step"
STEP_HELP = (
    "Training step the job has reached (monitor.step: the callbacks' global step, "
    "sysmetrics.step() under sysmetrics record)"
)
STALL_NAME = PREFIX + "training_stalled_seconds"
STALL_HELP = (
    "Seconds since the training step last advanced, while the hang watch finds it stalled "
    "(monitor.stall; absent otherwise)"
)
BEHIND_NAME = PREFIX + "training_rank_behind_seconds"
BEHIND_HELP = (
    "Seconds the training step has been stalled, for each rank that holds the job back "
    "(behind the others, or dead), where it is: rank 0's hang watch, from every rank's "
    "progress (monitor.stall.behind; absent otherwise)"
)
LABELS = ("host", "node", "run")  # on every series, after the key's own labels
MAX_RUN = 64  # characters of a run id
_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*\Z")
RUN_ALLOWED = (
    f"use 1 to {MAX_RUN} letters, digits, '_', '.', ':' or '-', starting with a letter or digit"
)
# The launchers' job ids, the same on every node of one job: a run's nodes share its id.
# torchrun's rendezvous id is "none" unless given (--rdzv-id; --standalone makes one).
_RUN_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
# OpenMetrics units (the name's last word) announced on the families that end in one.
_UNITS = frozenset({"seconds", "bytes", "hertz", "joules", "percent", "celsius", "watts"})


class _Latest(Protocol):
    def latest(self) -> Mapping[str, float]: ...


class _Series(NamedTuple):
    """What one key becomes: a sample of the family ``name``."""

    name: str
    kind: str  # "gauge" or "counter"
    help: str
    unit: str  # OpenMetrics UNIT, the name's last word ("seconds"); "" for none
    scale: float
    label_names: tuple[str, ...]
    label_values: tuple[str, ...]
    ident: tuple[str, tuple[str, ...]]  # (name, label_values): one sample per scrape
    shape: tuple[str, tuple[str, ...]]  # (kind, label_names): the same for a whole family


class _MonitorCollector:
    """prometheus_client custom collector: ``monitor.latest()`` as metric families."""

    def __init__(
        self, monitor: _Latest, host: str, node: str, run: str, prices: Prices | None = None
    ) -> None:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        self._monitor = monitor
        self._prices = prices
        self._labels = (host, node, run)
        self._families = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}
        self._series: dict[str, _Series | None] = {}  # None: not exported
        self._logged = 0  # undescribed keys logged so far
        self._warned = False  # a fault was logged as a warning; later ones are debug lines

    def collect(self) -> Iterator[Metric]:
        """The monitor's latest values as gauge and counter families; never raises.

        A key that cannot be exported (undescribed, not a number, a clash with another
        key's series) is left out; the others are served.
        """
        try:
            items = list(self._monitor.latest().items())
        except Exception:
            self._fault("monitor.latest() failed; serving nothing this scrape")
            return
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        if items:  # the monitor is running and has sampled: its step is current
            step = self._step()
            if step is not None:
                family = families[STEP_NAME] = self._families["gauge"](
                    STEP_NAME, STEP_HELP, labels=LABELS
                )
                family.add_metric(self._labels, step)
            stalled = self._stalled()
            if stalled is not None:
                family = families[STALL_NAME] = self._families["gauge"](
                    STALL_NAME, STALL_HELP, labels=LABELS, unit="seconds"
                )
                family.add_metric(self._labels, stalled)
                behind = self._behind()
                if behind:
                    family = families[BEHIND_NAME] = self._families["gauge"](
                        BEHIND_NAME, BEHIND_HELP, labels=("rank", "where", *LABELS), unit="seconds"
                    )
                    for rank, where in behind:
                        family.add_metric([str(rank), where, *self._labels], stalled)
        shapes: dict[str, tuple[str, tuple[str, ...]]] = {}
        seen: set[tuple[str, tuple[str, ...]]] = set()
        cache = self._series
        for key, value in items:
            try:
                series = cache[key] if key in cache else self._learn(key)
                if series is None:
                    continue
                if type(value) is not float and (
                    isinstance(value, bool) or not isinstance(value, numbers.Real)
                ):
                    raise TypeError(f"its value {value!r} is not a number")
                v = float(value) * series.scale
                if not math.isfinite(v) or series.ident in seen:
                    continue
                family = families.get(series.name)
                if family is None:
                    family = families[series.name] = self._families[series.kind](
                        series.name, series.help, labels=series.label_names, unit=series.unit
                    )
                    shapes[series.name] = series.shape
                elif shapes[series.name] != series.shape:
                    raise ValueError(f"{series.name} has another type or labels for other keys")
                family.add_metric(series.label_values, v)
                seen.add(series.ident)
            except Exception:
                self._fault(f"key {key!r} left out of the scrape")
        if items:
            self._ledger(
                {k: float(v) for k, v in items if isinstance(k, str) and type(v) is float
                 and math.isfinite(v)},
                families,
            )  # fmt: skip
        yield from families.values()

    def _ledger(self, latest: dict[str, float], families: dict[str, Any]) -> None:
        """The cost ledger's series (:func:`sysmetrics.ledger.live_series`) into ``families``."""
        from sysmetrics import ledger

        try:
            made, labels = ledger.live_series(latest, self._prices or ledger.Prices())
            for series in made:
                family = families[series.name] = self._families[series.kind](
                    series.name, series.help, labels=(*ledger.LIVE_LABELS, *LABELS),
                    unit=series.unit,
                )  # fmt: skip
                family.add_metric((*labels, *self._labels), series.value)
        except Exception:
            self._fault("the cost ledger's series left out of the scrape")

    def _step(self) -> float | None:
        """``monitor.step`` as a number; None where it is unknown (or not a number)."""
        try:
            step: object = getattr(self._monitor, "step", None)
            if step is None or isinstance(step, bool) or not isinstance(step, numbers.Real):
                return None
            value = float(step)
        except Exception:
            self._fault("monitor.step could not be read; the step is left out")
            return None
        return value if math.isfinite(value) else None

    def _stalled(self) -> float | None:
        """Seconds the step has been stalled (``monitor.stall``); None where it is not."""
        try:
            stall: object = getattr(self._monitor, "stall", None)
            since = getattr(stall, "since", None) if stall is not None else None
            if since is None or not isinstance(since, float):
                return None
            return max(0.0, time.time() - since)
        except Exception:
            self._fault("monitor.stall could not be read; the stall is left out")
            return None

    def _behind(self) -> list[tuple[int, str]]:
        """The ranks behind during the stall, and where (``monitor.stall.behind``)."""
        try:
            behind: object = getattr(getattr(self._monitor, "stall", None), "behind", None)
            if not isinstance(behind, dict):
                return []
            return [(r, w[:40]) for r, w in sorted(behind.items())
                    if isinstance(r, int) and isinstance(w, str)]  # fmt: skip
        except Exception:
            self._fault("monitor.stall's ranks could not be read; they are left out")
            return []

    def _learn(self, key: str) -> _Series | None:
        """``key``'s series from its description (None: not exported), remembered."""
        try:
            series = self._describe(key)
        except Exception:
            self._fault(f"key {key!r} not exported: its description does not fit")
            series = None
        if len(self._series) >= MAX_CACHED_KEYS:
            self._series.clear()
        self._series[key] = series
        return series

    def _describe(self, key: str) -> _Series | None:
        found = describe(key)
        if found is None:
            if self._logged < MAX_LOGGED_KEYS:
                self._logged += 1
                log.debug("sysmetrics: %r has no description; not exported to Prometheus", key)
            return None
        desc, values = found
        if desc.prometheus is None:
            return None
        names = desc.prometheus_labels
        if len(names) != len(desc.labels) or set(LABELS) & set(names):
            raise ValueError(f"the labels {names} do not fit the placeholders {desc.labels}")
        name, label_names = PREFIX + desc.prometheus, (*names, *LABELS)
        label_values = (*(values[p] for p in desc.labels), *self._labels)
        unit = name.removesuffix("_total").rsplit("_", 1)[-1]  # the family's last word
        return _Series(
            name=name,
            kind=desc.kind,
            help=desc.help,
            unit=unit if unit in _UNITS else "",
            scale=desc.scale,
            label_names=label_names,
            label_values=label_values,
            ident=(name, label_values),
            shape=(desc.kind, label_names),
        )

    def _fault(self, what: str) -> None:
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        log.log(level, "sysmetrics: Prometheus endpoint: %s", what, exc_info=True)


class _Handler(WSGIRequestHandler):
    """wsgiref's handler, silent, dropping a client silent for ``REQUEST_TIMEOUT`` s."""

    timeout = REQUEST_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing: a scrape every few seconds is not news."""


def listen_backlog(path: str | os.PathLike[str] = SOMAXCONN) -> int:
    """The exporter's listen backlog: connections the kernel queues until they are accepted.

    The system's cap on it, ``net.core.somaxconn`` (read from ``path``; 4096 by default
    since Linux 5.4), at most ``MAX_LISTEN_BACKLOG`` (65535); ``LISTEN_BACKLOG_FALLBACK``
    (4096) where it cannot be read or is not a positive integer (not Linux, say: the
    kernel caps the backlog at its own limit there).
    """
    try:
        with open(path, "rb") as f:
            value = int(f.read(32))
    except (OSError, ValueError):
        return LISTEN_BACKLOG_FALLBACK
    return min(value, MAX_LISTEN_BACKLOG) if value > 0 else LISTEN_BACKLOG_FALLBACK


class _Server(WSGIServer):
    """wsgiref's server with a daemon thread per request; ``end_requests`` ends them.

    Its listen queue holds :func:`listen_backlog` connections (``socketserver``'s 5
    dropped the connections of a cluster's scrapers arriving together). A connection
    older than ``REQUEST_DEADLINE`` s is shut, whatever its client sends. At most
    ``MAX_REQUESTS`` are served at once; more wait in the listen queue. In a child
    forked from this process (a DataLoader worker) its sockets are closed at once (see
    :func:`_after_fork_in_child`): the child never holds the port or a scrape open.
    """

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily) -> None:
        self.address_family = family
        self.request_queue_size = listen_backlog()
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # notified when a request ends
        # the requests in flight: their socket and time.monotonic() at their accept
        self._requests: dict[threading.Thread, tuple[socket.socket, float]] = {}
        self._next_check = 0.0  # time.monotonic() at which to look for overdue requests
        self._closing = False  # close() began: accept no more
        super().__init__(address, _Handler)
        _live_servers.add(self)

    def server_bind(self) -> None:
        """Bind without ``HTTPServer``'s reverse DNS look-up of the address (it can hang)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])
        self.setup_environ()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve ``request`` on a daemon thread of its own, once fewer than ``MAX_REQUESTS`` are.

        Meanwhile the accept loop waits here and later connections in the listen queue.
        """
        thread = threading.Thread(
            target=self._serve,
            args=(request, client_address),
            name="sysmetrics-prometheus-request",
            daemon=True,
        )
        with self._lock:
            while len(self._requests) >= MAX_REQUESTS and not self._closing:
                self._ended.wait(0.1)
                self._lock.release()
                try:
                    self.service_actions()  # the overdue ones still go
                finally:
                    self._lock.acquire()
            if not self._closing:
                self._requests[thread] = (request, time.monotonic())
        if self._closing:
            self.shutdown_request(request)
            return
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._requests.pop(thread, None)
            self.shutdown_request(request)
            raise

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._lock:
                self._requests.pop(threading.current_thread(), None)
                self._ended.notify()
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request that failed (the client went away): a debug line, not a traceback."""
        log.debug("sysmetrics: Prometheus request from %s failed", client_address, exc_info=True)

    def service_actions(self) -> None:
        """Shut the requests older than ``REQUEST_DEADLINE`` s (a look every second at most).

        Called by ``serve_forever`` after each accept and each 0.1 s poll; their threads
        then end on their own.
        """
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + min(1.0, REQUEST_DEADLINE / 4)
        with self._lock:
            overdue = [s for s, start in self._requests.values() if now - start > REQUEST_DEADLINE]
        for sock in overdue:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def stop_accepting(self) -> None:
        """Accept no more connections: an accept waiting for a free slot gives up."""
        with self._lock:
            self._closing = True
            self._ended.notify_all()

    def end_requests(self, timeout: float) -> None:
        """Shut the sockets of the requests in flight and wait ``timeout`` s for their threads."""
        with self._lock:
            requests = list(self._requests.items())
        for _, (sock, _) in requests:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for thread, _ in requests:
            thread.join(max(0.0, deadline - time.monotonic()))

    def forked_off(self) -> None:
        """In a forked child: close this process's copies of the sockets, nothing more.

        Only close(): the child's copies share the parent's open sockets, which
        ``shutdown()`` would end for the parent too. The lock may have been held by a
        thread that the child does not have; the child has only the thread that forked.
        """
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        requests, self._requests = self._requests, {}
        for sock in (*(s for s, _ in requests.values()), self.socket):
            # detach(): close() leaves the descriptor open while the handler's files
            # (makefile) hold the socket
            with contextlib.suppress(OSError):
                fd = sock.detach()
                if fd >= 0:
                    os.close(fd)


_live_servers: weakref.WeakSet[_Server] = weakref.WeakSet()  # to close in forked children


def _after_fork_in_child() -> None:
    """Close every exporter's sockets in a forked child, so the parent's close() frees the port.

    A child forked by ``os.fork`` (a DataLoader worker, ``multiprocessing``'s fork
    context) gets copies of the listening socket and of the scrapes' sockets; while it
    lived, the parent's ``close()`` left the port bound and a new exporter failed with
    ``EADDRINUSE``. Sockets are not inherited across ``exec`` (PEP 446).
    """
    for server in list(_live_servers):
        with contextlib.suppress(Exception):  # never fail the fork
            server.forked_off()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_port(port: object) -> int:
    try:
        value = None if isinstance(port, bool) else operator.index(port)  # type: ignore[arg-type]
    except TypeError:
        value = None
    if value is None or not 0 <= value <= 65535:
        error = TypeError if value is None else ValueError
        raise error(
            f"port={port!r} is invalid: it must be an integer from 0 to 65535 "
            f"(TCP port to listen on; {DEFAULT_PORT} by default, 0 picks a free one)"
        )
    return value


def _resolve(addr: object, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family and the numeric address to bind ``addr`` to."""
    allowed = (
        f"an IP address or host name of this machine to listen on ({DEFAULT_ADDR!r}, this "
        "machine only, by default; '0.0.0.0' or '::' for every interface)"
    )
    if not isinstance(addr, str) or not addr:
        raise (ValueError if addr == "" else TypeError)(
            f"addr={addr!r} is invalid: it must be {allowed}"
        )
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise ValueError(
            f"addr={addr!r} is invalid: it does not resolve ({exc}); it must be {allowed}"
        ) from None
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


def _check_node(node: object) -> str:
    if node is None:
        return str(env_node_rank() or 0)
    if isinstance(node, bool) or not isinstance(node, (int, str)) or str(node) == "":
        raise TypeError(
            f"node={node!r} is invalid: use the node's rank (an int or a non-empty string), "
            "or None to read it from the launcher's environment"
        )
    return str(node)


def make_run_id() -> str:
    """A run id for the ``run`` label: the launcher's job id, else the time and random hex.

    The launcher's id (torchrun's rendezvous id ``TORCHELASTIC_RUN_ID`` where one was
    given, else Slurm's ``SLURM_JOB_ID``, with ``.SLURM_STEP_ID`` where set) is the same on
    every node of the job, so the nodes' series group into one run. Elsewhere the id is
    made here, unique: the UTC time of the call and 6 random hex digits
    (``20261125-172642-3f9a1c``).
    """
    for name in _RUN_IDS:
        value = os.environ.get(name, "")
        if name == "SLURM_JOB_ID" and value and os.environ.get("SLURM_STEP_ID", "").isdigit():
            value += "." + os.environ["SLURM_STEP_ID"]
        if value and value != "none" and len(value) <= MAX_RUN and _RUN.match(value):
            return value
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _check_run(run: object) -> str:
    if run is None:
        return make_run_id()
    allowed = (
        f"{RUN_ALLOWED} (the run label of every series), or None for the launcher's job id, "
        "else one made of the start time and random hex"
    )
    if not isinstance(run, str):
        raise TypeError(f"run={run!r} is invalid: {allowed}")
    if len(run) > MAX_RUN or not _RUN.match(run):
        shown = (
            repr(run)
            if len(run) <= 2 * MAX_RUN
            else f"{run[: 2 * MAX_RUN]!r}... ({len(run)} chars)"
        )
        raise ValueError(f"run={shown} is invalid: {allowed}")
    return run


class PrometheusExporter:
    """Serves ``monitor.latest()`` on ``http://{addr}:{port}/metrics`` for Prometheus.

    The server starts at once, on daemon threads; each scrape reads the monitor's latest
    sample (see the module's docstring for the names and labels). A scrape never raises
    into the monitor and never delays its sampling or another scrape; a client silent for
    ``REQUEST_TIMEOUT`` (10) s is dropped, any connection ``REQUEST_DEADLINE`` (30) s old
    is shut, at most ``MAX_REQUESTS`` (256) are served at once and the listen queue holds
    :func:`listen_backlog` more. ``close()`` (idempotent; also the end of a ``with``
    block) stops the server, ends the requests in flight and frees the port, even while a
    child forked from this process lives (the child closes its copies of the sockets as
    it starts). It does not stop the monitor; :func:`serve` makes exporters that stop the
    monitor they started.

    Args:
        monitor: the :class:`~sysmetrics.SystemMonitor` whose values to serve (anything
            with a ``latest()`` method returning ``{key: value}``).
        port: TCP port to listen on, 0 to 65535; 0 picks a free one (see :attr:`port`).
        addr: IP address or host name to listen on; ``"127.0.0.1"`` (this machine only)
            by default. ``"0.0.0.0"`` (or ``"::"``) serves every interface: the metrics are
            then readable by anyone who can reach the port.
        node: the ``node`` label of every series: the node's rank in a multi-node run;
            from the launcher's environment by default (``GROUP_RANK``, ``NODE_RANK``,
            ``SLURM_NODEID``, ...; see :func:`sysmetrics.distributed.env_node_rank`),
            ``"0"`` where it says nothing.
        run: the ``run`` label of every series, telling this run's series from those of
            other runs on the same nodes: up to 64 letters, digits, ``_ . : -``. By
            default the launcher's job id (the same on every node; see
            :func:`make_run_id`), else one made at start from the time and random hex.
        prices: the cost ledger's prices (:class:`sysmetrics.ledger.Prices`): with them,
            the energy's money and gCO2e are served beside its joules
            (``sysmetrics_energy_*``; see ``docs/cost.md``); the joules alone without.

    Attributes:
        port: the port listened on (the one picked, for ``port=0``).
        addr: the address listened on, as given.
        node: the ``node`` label.
        run: the ``run`` label (the one made, by default).
        monitor: the monitor served.
        registry: the ``prometheus_client.CollectorRegistry`` the page is made from.

    Raises:
        ImportError: prometheus-client is not installed (the ``[prometheus]`` extra).
        TypeError, ValueError: ``monitor``, ``port``, ``addr``, ``node`` or ``run`` is
            invalid; the message names the option, the value and what is allowed.
        OSError: the address cannot be listened on (the port is in use, the address is
            not this machine's); the message names the address.

    """

    def __init__(
        self,
        monitor: SystemMonitor | _Latest,
        port: int = DEFAULT_PORT,
        addr: str = DEFAULT_ADDR,
        node: int | str | None = None,
        run: str | None = None,
        prices: Prices | None = None,
    ) -> None:
        if not callable(getattr(monitor, "latest", None)):
            raise TypeError(
                f"monitor={monitor!r} is invalid: it must be a SystemMonitor "
                "(anything with a latest() method returning {key: value})"
            )
        if getattr(monitor, "stopped", False) is True:
            raise ValueError(
                "monitor is a stopped SystemMonitor, which samples no more: pass a new or "
                "running one (the endpoint serves nothing while it is not running)"
            )
        self.node = _check_node(node)
        self.run = _check_run(run)
        self.port = _check_port(port)
        family, host = _resolve(addr, self.port)
        self.addr = addr
        _optional.prometheus_client()  # ImportError with how to install it
        from prometheus_client import CollectorRegistry, make_wsgi_app

        self.monitor = monitor
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            _MonitorCollector(monitor, socket.gethostname(), self.node, self.run, prices)
        )
        try:
            self._server = _Server((host, self.port), family)
        except OSError as exc:
            hint = (
                "use another port, or port=0 for a free one"
                if exc.errno == errno.EADDRINUSE
                else "addr must be an address of this machine"
            )
            raise OSError(
                exc.errno,
                f"cannot listen on {_netloc(addr, self.port)} for the Prometheus endpoint: "
                f"{exc.strerror or exc} ({hint})",
            ) from exc
        self._server.set_app(make_wsgi_app(self.registry))
        self.port = self._server.server_port
        self._owned: SystemMonitor | None = None  # stopped on close() (see serve())
        self._closed = False
        self._close_lock = threading.Lock()
        self._pid = os.getpid()  # the process that serves (not a forked child)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(0.1,),  # s between two looks at the shutdown flag
            name="sysmetrics-prometheus",
            daemon=True,
        )
        self._thread.start()
        if not _is_loopback(host):
            warnings.warn(
                f"sysmetrics: the Prometheus endpoint {self.url} has no authentication and "
                f"is reachable from other machines: anyone who can connect to port "
                f"{self.port} can read the metrics (host name, paths, processes); listen on "
                "127.0.0.1 (the default) unless the port is firewalled or behind a proxy "
                "that authenticates",
                SystemMetricsWarning,
                stacklevel=2,
            )

    @property
    def url(self) -> str:
        """``http://{addr}:{port}/metrics``, the URL to scrape."""
        return f"http://{_netloc(self.addr, self.port)}/metrics"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop serving, end the requests in flight and free the port. Idempotent.

        Waits at most ``CLOSE_WAIT`` (1) s for the requests in flight, then stops the
        monitor if :func:`serve` started it. In a forked child, whose copies of the
        sockets were closed at the fork, it touches no socket the parent serves.
        """
        if os.getpid() != self._pid:  # a forked child: the lock may be held by a thread
            if self._closed:  # that it does not have
                return
            self._closed = True
        else:
            with self._close_lock:
                if self._closed:
                    return
                self._closed = True
        try:
            self._server.stop_accepting()
            if self._thread.is_alive():  # not in a forked child: shutdown() would wait forever
                self._server.shutdown()
            self._server.end_requests(CLOSE_WAIT)
            self._server.server_close()
            self._thread.join(CLOSE_WAIT)
        finally:
            if self._owned is not None:
                self._owned.stop()

    def __enter__(self) -> PrometheusExporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if getattr(self, "_closed", True) else "serving"  # (or half made)
        return f"<PrometheusExporter {self.url} {state}>"


def serve(
    port: int = DEFAULT_PORT,
    addr: str = DEFAULT_ADDR,
    monitor: SystemMonitor | _Latest | None = None,
    node: int | str | None = None,
    run: str | None = None,
    **monitor_options: Any,
) -> PrometheusExporter:
    """Serve a monitor's values for Prometheus on ``http://{addr}:{port}/metrics``.

    With no ``monitor``, creates ``SystemMonitor(**monitor_options)``, starts it, and
    stops it when the exporter is closed. A given ``monitor`` is served as it is and never
    stopped here.

    Args:
        port: TCP port to listen on (9464 by default; 0 picks a free one).
        addr: address to listen on (``"127.0.0.1"``, this machine only, by default).
        monitor: the monitor to serve; a new one by default.
        node: the ``node`` label (see :class:`PrometheusExporter`).
        run: the ``run`` label (see :class:`PrometheusExporter`).
        **monitor_options: options of the new :class:`~sysmetrics.SystemMonitor`
            (``interval`` in seconds, ``disk_paths``, ...).

    Returns:
        The running :class:`PrometheusExporter`; ``close()`` it (or use ``with``).

    Raises:
        ImportError, TypeError, ValueError, OSError: as :class:`PrometheusExporter` and
            :class:`~sysmetrics.SystemMonitor` do; TypeError also for monitor options
            given with a ``monitor``.

    """
    if monitor is not None:
        if monitor_options:
            raise TypeError(
                f"serve() got monitor options ({', '.join(sorted(monitor_options))}) and a "
                "monitor: the options apply only to the monitor serve() creates"
            )
        return PrometheusExporter(monitor, port, addr, node, run)
    from sysmetrics.monitor import SystemMonitor

    own = SystemMonitor(**monitor_options)
    try:
        exporter = PrometheusExporter(own, port, addr, node, run)
    except BaseException:
        own.stop()
        raise
    exporter._owned = own
    own.start()
    return exporter


def _netloc(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False
