"""Every option of ``SystemMonitor``, the framework callbacks and ``sysmetrics record``, once.

An option is declared in two lines of this module: its field in the TypedDict of its
scope (its name and type, which mypy checks every ``**options`` against) and its entry in
:data:`OPTIONS` (default, check, help, unit, scope, CLI flag). Everything else is derived
from them: ``SystemMonitor``'s and each callback's signature (``**options:
Unpack[...]``), the validation and its "did you mean" hints (:func:`check`,
:func:`unknown`), the flags of ``sysmetrics record`` (:func:`add_flags`), and the options
tables of the documentation. Importing this module checks that the two agree (same names,
and each entry's ``type`` is its field's annotation, as written).

Why not one ``Annotated[type, Option(...)]`` field per option: the package supports
Python 3.9, where a field's annotation can be read back at run time only if it evaluates,
and ``X | None`` does not before 3.10; annotations stay strings here, the TypedDict is
mypy's, and :data:`OPTIONS` reads its ``type`` from it.

Adding an option: one field, one :data:`OPTIONS` entry, and the code that uses it (a
collector takes it in :data:`sysmetrics.collectors.defaults.DEFAULT_SET`; a callback reads
``CallbackCore``'s validated value).
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ForwardRef, Union

from typing_extensions import TypedDict

from sysmetrics._checks import one_or_many, positive_int

if TYPE_CHECKING:
    from sysmetrics.collectors.base import Collector
    from sysmetrics.collectors.nvidia import GpuId
    from sysmetrics.collectors.openmetrics import Filters
    from sysmetrics.monitor import Clock, SystemMonitor

PathLike = Union[str, "os.PathLike[str]"]

MIN_INTERVAL = 0.01  # seconds
MAX_INTERVAL = 3600.0  # seconds
LOGGING_INTERVALS = ("step", "epoch")


class CollectorOptions(TypedDict, total=False):
    """The default collectors' options: keyword arguments of ``SystemMonitor``."""

    disk_paths: PathLike | Iterable[PathLike]
    track_process_tree: bool
    pid: int | None
    gpu_ids: Sequence[GpuId] | None
    rocm_smi_path: str | None
    open_metrics: Mapping[str, str] | None
    open_metrics_filters: Filters | None
    open_metrics_headers: Mapping[str, str] | None
    open_metrics_max_series: int
    network_loopback: bool


class _EngineOptions(TypedDict, total=False):
    """``SystemMonitor``'s own keywords besides ``interval``."""

    collectors: Sequence[Collector] | None
    clock: Clock | None


class MonitorOptions(CollectorOptions, _EngineOptions, total=False):
    """Every keyword ``SystemMonitor`` takes (scope ``"monitor"``)."""

    interval: float


class CallbackOptions(CollectorOptions, _EngineOptions, total=False):
    """Every keyword a framework callback takes: its own (scope ``"callback"``) and the monitor's.

    ``interval`` may be None here: the default (1.0 s), and the only value ``monitor=``
    goes with.
    """

    interval: float | None
    logging_interval: str
    log_every_n_steps: int | None
    prefix: str
    include: str | Iterable[str] | None
    exclude: str | Iterable[str] | None
    console: bool
    monitor: SystemMonitor | None
    run_file: PathLike | bool | None


@dataclass(frozen=True)
class Flag:
    """How ``sysmetrics record`` takes an option on its command line (argparse terms)."""

    metavar: str | None  # None: a switch (store_true)
    help: str  # the flag's help, its default said in it
    parse: Callable[[str], Any] | None = None  # argparse's ``type``
    repeatable: bool = False  # argparse's ``action="append"``
    convert: Callable[[Any], object] = lambda value: value  # parsed -> the option's value


@dataclass(frozen=True)
class Option:
    """One option, declared once."""

    name: str  # "disk_paths"
    default: object  # ("/",)
    check: Callable[[Any], object]  # the value to use, or TypeError/ValueError naming it
    help: str  # one sentence, with the unit
    unit: str | None = None  # "s", "bytes", None
    scope: str = "monitor"  # "monitor" (SystemMonitor, callbacks, record) or "callback"
    flag: str | None = None  # record's flag ("--disk-path"), None where record has none
    cli: Flag | None = None  # how record takes it, with ``flag``
    aliases: tuple[str, ...] = ()  # other frameworks' names for it, for "did you mean"
    type: str = field(default="", compare=False)  # the annotation, read from the TypedDict


# -- checks: each returns the value to use, or raises naming the option --------------------


def _any(value: object) -> object:
    return value  # checked by the code that takes it, with its own message


def _engine(value: object) -> object:
    return value  # collectors= and clock= are checked by SystemMonitor itself


def _bool(name: str) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name}={value!r} is invalid: use True or False")
        return value

    return check


def check_interval(interval: object) -> float:
    """``interval`` as a float: any real number (numpy's included) but bool, in range."""
    # bool is an int to Python.
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise TypeError(
            f"interval={interval!r} is invalid: it must be a number of seconds "
            f"between {MIN_INTERVAL} and {MAX_INTERVAL:g}"
        )
    value = float(interval)
    if not (math.isfinite(value) and MIN_INTERVAL <= value <= MAX_INTERVAL):
        raise ValueError(
            f"interval={interval!r} is invalid: it must be a number of seconds "
            f"between {MIN_INTERVAL} and {MAX_INTERVAL:g}"
        )
    return value


def _pid(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"pid={value!r} is invalid: it must be a positive process id")
    import psutil

    if not psutil.pid_exists(value):
        raise ValueError(f"pid={value!r} is invalid: no such process")
    return value


def _max_series(value: object) -> int:
    n = positive_int(value)
    if n is None:
        raise ValueError(
            f"open_metrics_max_series={value!r} is invalid: it must be a positive integer "
            "(series kept per endpoint)"
        )
    return n


def _disk_paths(value: object) -> tuple[str, ...]:
    items = one_or_many(value, (str, os.PathLike))
    if items is None:
        raise TypeError(
            f"disk_paths={value!r} is invalid: use a path or a list of paths whose "
            "filesystems to watch (an empty list for none)"
        )
    paths: list[str] = []
    for item in items:
        p = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        if not isinstance(p, str):
            raise TypeError(
                f"disk_paths contains {item!r}, which is not a path: each entry must be a "
                "string or os.PathLike naming an existing path"
            )
        paths.append(p)
    for p in paths:
        if not os.path.exists(p):
            raise ValueError(
                f"disk_paths contains {p!r}, which does not exist: each entry must be an "
                "existing path whose filesystem to watch"
            )
    return tuple(paths)


def _open_metrics(value: object) -> object:
    """The endpoints' names and URLs, and the extra they need: no request is made."""
    if not value:
        return value  # none: no collector, whatever the value
    from sysmetrics import _optional
    from sysmetrics.collectors.openmetrics import check_endpoints

    check_endpoints(value)
    _optional.prometheus_parser()  # ImportError: the [openmetrics] extra is missing
    return value


def _logging_interval(value: object) -> str:
    if value not in LOGGING_INTERVALS:
        raise ValueError(f"logging_interval={value!r} is invalid: use 'step' or 'epoch'")
    return str(value)


def _every(value: object) -> int | None:
    every = None if value is None else positive_int(value)
    if value is not None and every is None:
        raise ValueError(
            f"log_every_n_steps={value!r} is invalid: use a positive integer, "
            "or None for the framework's own logging cadence"
        )
    return every


def _prefix(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"prefix={value!r} is invalid: it must be a string (may be empty)")
    return value


def _patterns(name: str) -> Callable[[object], tuple[str, ...]]:
    def check(value: object) -> tuple[str, ...]:
        if value is None:
            return ()
        items = one_or_many(value, str)
        if items is None:
            raise TypeError(
                f"{name}={value!r} is invalid: use a glob pattern or a list of glob patterns "
                "on metric keys, such as 'cpu' or ['cpu', 'proc.*']"
            )
        patterns: list[str] = []
        for p in items:
            if not isinstance(p, str) or not p:
                raise TypeError(
                    f"{name} contains {p!r}: each entry must be a non-empty glob pattern on "
                    "metric keys, such as 'cpu' or 'disk.*'"
                )
            patterns.append(p)
        return tuple(patterns)

    return check


def _monitor(value: object) -> SystemMonitor | None:
    from sysmetrics.monitor import SystemMonitor

    if value is not None and not isinstance(value, SystemMonitor):
        raise TypeError(
            f"monitor={value!r} is invalid: use a sysmetrics.SystemMonitor to share, "
            "or None for the callback's own"
        )
    return value


def _run_file(value: object) -> object:
    from sysmetrics.callback import check_run_file  # with the framework's context there

    return check_run_file(value, "SystemMetricsCallback", run_dirs=True)


# -- record's flags ----------------------------------------------------------------------


def _seconds(text: str) -> float:
    """An int where the text is one (so messages show the value as given), else a float.

    The range is the option's check's, with its message.
    """
    import argparse

    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is invalid: it must be a number of seconds"
        ) from None


def _gpu_ids(text: str) -> list[int | str]:
    """``0,1`` or UUIDs, comma-separated: indices as ints, the rest as given."""
    return [int(i) if i.strip().isdigit() else i.strip() for i in text.split(",") if i.strip()]


def _endpoint(text: str) -> tuple[str, str]:
    import argparse

    name, sep, url = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use name=url")
    return name, url


def _absolute(paths: list[str]) -> list[str]:
    """The paths made absolute: a disk path is part of the metric keys."""
    return [os.path.abspath(p) if p else p for p in paths]


# -- the declarations ----------------------------------------------------------------------

OPTIONS: tuple[Option, ...] = (
    Option(
        "interval",
        1.0,
        check_interval,
        f"seconds between samples, from {MIN_INTERVAL} to {MAX_INTERVAL:g} (any real number, "
        "numpy's included)",
        unit="s",
        flag="--interval",
        cli=Flag("S", "seconds between samples, 0.01 to 3600 (default: %(default)s)", _seconds),
        aliases=("sampling_interval",),
    ),
    Option(
        "collectors",
        None,
        _engine,
        "use these collectors instead of the default set (then the default set's options "
        "may not be given)",
    ),
    Option(
        "clock",
        None,
        _engine,
        "the engine's time (sysmetrics.monitor.Clock), for tests and simulations; the real "
        "clocks by default",
    ),
    Option(
        "disk_paths",
        ("/",),
        _disk_paths,
        "paths whose filesystems to report as disk.{path}.*; each must exist",
        flag="--disk-path",
        cli=Flag(
            "PATH",
            "a path whose filesystem to report, made absolute (repeatable; default: /)",
            repeatable=True,
            convert=_absolute,
        ),
    ),
    Option(
        "track_process_tree",
        True,
        _bool("track_process_tree"),
        "include the process's descendants in the process metrics",
    ),
    Option("pid", None, _pid, "the process to watch; this one by default"),
    Option(
        "gpu_ids",
        None,
        _any,
        "NVIDIA GPUs to watch, as CUDA numbers them under CUDA_VISIBLE_DEVICES (indices) "
        "or UUIDs; all by default",
        flag="--gpu-ids",
        cli=Flag(
            "IDS",
            "NVIDIA GPUs to watch: indices or UUIDs, comma-separated (default: all)",
            _gpu_ids,
        ),
    ),
    Option(
        "rocm_smi_path",
        None,
        _any,
        "the rocm-smi executable for AMD GPUs; found on PATH or in /opt/rocm",
    ),
    Option(
        "open_metrics",
        None,
        _open_metrics,
        "{name: url} of OpenMetrics/Prometheus endpoints to scrape into "
        "openmetrics.{name}.{metric}.{index} (needs the [openmetrics] extra)",
        flag="--open-metrics",
        cli=Flag(
            "NAME=URL",
            "an OpenMetrics endpoint to scrape (repeatable)",
            _endpoint,
            repeatable=True,
            convert=dict,
        ),
    ),
    Option(
        "open_metrics_filters",
        None,
        _any,
        'regexes on "{name}.{metric}", or {metric_regex: {label: label_regex}}; all by default',
    ),
    Option(
        "open_metrics_headers",
        None,
        _any,
        "HTTP headers for those requests (sent to the configured origin only)",
    ),
    Option(
        "open_metrics_max_series",
        10_000,
        _max_series,
        "series kept per endpoint and page (the first ones)",
        unit="series",
    ),
    Option(
        "network_loopback",
        False,
        _bool("network_loopback"),
        "count loopback interfaces (lo: traffic that never leaves the machine) in network.*",
        flag="--network-loopback",
        cli=Flag(None, "count loopback interfaces (lo) in network.* (default: left out)"),
    ),
    Option(
        "logging_interval",
        "step",
        _logging_interval,
        '"step" or "epoch" (Keras\' default): log at the steps the framework logs, or once '
        "per epoch",
        scope="callback",
        aliases=("logging_strategy", "update_freq"),
    ),
    Option(
        "log_every_n_steps",
        None,
        _every,
        "with logging_interval='step', log every this many steps; None follows the "
        "framework's own logging cadence",
        unit="steps",
        scope="callback",
        aliases=("logging_steps", "every_n_steps"),
    ),
    Option(
        "prefix",
        "system/",
        _prefix,
        "put before every key, its trailing / replaced by the logger's group separator",
        scope="callback",
    ),
    Option(
        "include",
        None,
        _patterns("include"),
        "glob patterns (fnmatch) on the un-prefixed keys to keep; all by default",
        scope="callback",
    ),
    Option(
        "exclude",
        None,
        _patterns("exclude"),
        "glob patterns of keys to leave out, applied after include",
        scope="callback",
    ),
    Option(
        "console",
        False,
        _bool("console"),
        "also show the metrics where the framework prints its logs (progress bar, printed "
        "log lines); by default they reach the loggers only",
        scope="callback",
        aliases=("prog_bar", "progress_bar", "verbose"),
    ),
    Option(
        "monitor",
        None,
        _monitor,
        "a SystemMonitor to share: the callback reads it through a reader of its own, "
        "starts it if it is not running, and never stops it (excludes interval and the "
        "monitor's options)",
        scope="callback",
        aliases=("system_monitor",),
    ),
    Option(
        "run_file",
        None,
        _run_file,
        "also write every sample, with the training step, to this JSON-lines file; True "
        "for system_metrics.jsonl in the run's log directory",
        scope="callback",
        aliases=("jsonl", "log_file"),
    ),
)
"""Every option, in documentation order."""


def _annotation(owner: type, name: str) -> str:
    """The annotation of ``owner``'s field ``name``, as written."""
    hint: object = owner.__annotations__[name]
    return hint.__forward_arg__ if isinstance(hint, ForwardRef) else str(hint)


def _typed() -> tuple[Option, ...]:
    """:data:`OPTIONS` with each ``type`` read from the TypedDict of its scope.

    Raises:
        TypeError: the declarations disagree (an option without its field, or a field
            without its option); at import, so no test run gets past it.

    """
    scopes = {"monitor": MonitorOptions, "callback": CallbackOptions}
    for scope, typed_dict in scopes.items():
        names = {o.name for o in OPTIONS if o.scope == scope or scope == "callback"}
        if names != set(typed_dict.__annotations__):
            raise TypeError(
                f"sysmetrics.options: {typed_dict.__name__} and OPTIONS disagree: "
                f"{sorted(names ^ set(typed_dict.__annotations__))}"
            )
    return tuple(
        Option(**{**o.__dict__, "type": _annotation(scopes[o.scope], o.name)}) for o in OPTIONS
    )


OPTIONS = _typed()
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}

MONITOR_OPTIONS = tuple(o.name for o in OPTIONS if o.scope == "monitor")
"""Every keyword ``SystemMonitor`` takes."""
COLLECTOR_OPTIONS = tuple(n for n in MONITOR_OPTIONS if n in CollectorOptions.__annotations__)
"""The default collectors' options (``SystemMonitor``'s ``**options``)."""
CALLBACK_OPTIONS = ("interval", *(o.name for o in OPTIONS if o.scope == "callback"))
"""A callback's own options (with ``interval``, which sets its own monitor's)."""
ALIASES = {alias: o.name for o in OPTIONS for alias in o.aliases}
"""What users of the frameworks type for our options: each framework's own name for it."""


def check(names: Iterable[str], options: Mapping[str, object]) -> dict[str, Any]:
    """The options ``names``, each checked (its default where not given)."""
    return {
        name: BY_NAME[name].check(options[name] if name in options else BY_NAME[name].default)
        for name in names
    }


def unknown(
    options: Iterable[str], known: Sequence[str], candidates: Sequence[str], aliases: bool
) -> str | None:
    """The first of ``options`` (sorted) not in ``known``, quoted, with a hint; None if none.

    Returns ``"'name' (did you mean 'other'?)"``: the hint is the option a framework calls
    ``name`` (with ``aliases``), else the closest of ``candidates``.
    """
    names = sorted(k for k in options if k not in known)
    if not names:
        return None
    name = names[0]
    close = (ALIASES.get(name) if aliases else None) or next(
        iter(difflib.get_close_matches(name, candidates, n=1)), None
    )
    return f"{name!r}" + (f" (did you mean {close!r}?)" if close else "")
