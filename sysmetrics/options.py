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
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ForwardRef, Union

from typing_extensions import Protocol, TypedDict

from sysmetrics._checks import (
    MAX_INTERVAL,
    MIN_INTERVAL,
    absolute_paths,
    check_any,
    check_bool,
    check_by_callback,
    check_carbon_intensity,
    check_disk_paths,
    check_engine,
    check_every,
    check_hang_after,
    check_interval,
    check_logging_interval,
    check_max_series,
    check_open_metrics,
    check_optional_bool,
    check_patterns,
    check_pid,
    check_prefix,
    check_price_per_device_hour,
    check_price_per_kwh,
    parse_device_price,
    parse_device_prices,
    parse_endpoint,
    parse_gpu_ids,
    parse_number,
    parse_seconds,
)
from sysmetrics.engine import Clock
from sysmetrics.errors import OptionError

if TYPE_CHECKING:
    from sysmetrics.collectors.base import Collector
    from sysmetrics.collectors.nvidia import GpuId
    from sysmetrics.collectors.openmetrics import Filters

PathLike = Union[str, "os.PathLike[str]"]


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


class SharedMonitor(Protocol):
    """What the type checker knows of ``monitor=``: a :class:`sysmetrics.SystemMonitor`.

    A protocol, since the options sit below the monitor (which imports them); the
    callback checks the class itself at run time (``callback.check_monitor``).
    """

    @property
    def interval(self) -> float:
        """Seconds between two samples."""

    @property
    def stopped(self) -> bool:
        """Whether it was stopped: it samples no more."""

    def header(self) -> dict[str, Any]:
        """The recording's header: pid, interval (s), cpus."""


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
    live_findings: bool
    panel: bool | None
    monitor: SharedMonitor | None
    run_file: PathLike | bool | None
    hang_after: float | None
    # The cost ledger's (sysmetrics.ledger): the panel's cost line; record's and report's flags.
    price_per_kwh: float | None
    price_per_device_hour: Mapping[str, float] | None
    carbon_intensity: float | None


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
    check: Callable[[Any], object]  # the value to use, or an OptionError naming it
    help: str  # one sentence, with the unit
    unit: str | None = None  # "s", "bytes", None
    scope: str = "monitor"  # "monitor" (SystemMonitor, callbacks, record) or "callback"
    flag: str | None = None  # record's flag ("--disk-path"), None where record has none
    cli: Flag | None = None  # how record takes it, with ``flag``
    aliases: tuple[str, ...] = ()  # other frameworks' names for it, for "did you mean"
    env: str | None = None  # an environment variable that sets it where it is not given
    type: str = field(default="", compare=False)  # the annotation, read from the TypedDict


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
        cli=Flag(
            "S", "seconds between samples, 0.01 to 3600 (default: %(default)s)", parse_seconds
        ),
        aliases=("sampling_interval",),
    ),
    Option(
        "collectors",
        None,
        check_engine,
        "use these collectors instead of the default set (then the default set's options "
        "may not be given)",
    ),
    Option(
        "clock",
        None,
        check_engine,
        "the engine's time (sysmetrics.monitor.Clock), for tests and simulations; the real "
        "clocks by default",
    ),
    Option(
        "disk_paths",
        ("/",),
        check_disk_paths,
        "paths whose filesystems to report as disk.{path}.*; each must exist",
        flag="--disk-path",
        cli=Flag(
            "PATH",
            "a path whose filesystem to report, made absolute (repeatable; default: /)",
            repeatable=True,
            convert=absolute_paths,
        ),
    ),
    Option(
        "track_process_tree",
        True,
        check_bool("track_process_tree"),
        "include the process's descendants in the process metrics",
    ),
    Option("pid", None, check_pid, "the process to watch; this one by default"),
    Option(
        "gpu_ids",
        None,
        check_any,
        "NVIDIA GPUs to watch, as CUDA numbers them under CUDA_VISIBLE_DEVICES (indices) "
        "or UUIDs; all by default",
        flag="--gpu-ids",
        cli=Flag(
            "IDS",
            "NVIDIA GPUs to watch: indices or UUIDs, comma-separated (default: all)",
            parse_gpu_ids,
        ),
    ),
    Option(
        "rocm_smi_path",
        None,
        check_any,
        "the rocm-smi executable for AMD GPUs; found on PATH or in /opt/rocm",
    ),
    Option(
        "open_metrics",
        None,
        check_open_metrics,
        "{name: url} of OpenMetrics/Prometheus endpoints to scrape into "
        "openmetrics.{name}.{metric}.{index} (needs the [openmetrics] extra)",
        flag="--open-metrics",
        cli=Flag(
            "NAME=URL",
            "an OpenMetrics endpoint to scrape (repeatable)",
            parse_endpoint,
            repeatable=True,
            convert=dict,
        ),
    ),
    Option(
        "open_metrics_filters",
        None,
        check_any,
        'regexes on "{name}.{metric}", or {metric_regex: {label: label_regex}}; all by default',
    ),
    Option(
        "open_metrics_headers",
        None,
        check_any,
        "HTTP headers for those requests (sent to the configured origin only)",
    ),
    Option(
        "open_metrics_max_series",
        10_000,
        check_max_series,
        "series kept per endpoint and page (the first ones)",
        unit="series",
    ),
    Option(
        "network_loopback",
        False,
        check_bool("network_loopback"),
        "count loopback interfaces (lo: traffic that never leaves the machine) in network.*",
        flag="--network-loopback",
        cli=Flag(None, "count loopback interfaces (lo) in network.* (default: left out)"),
    ),
    Option(
        "logging_interval",
        "step",
        check_logging_interval,
        '"step" or "epoch" (Keras\' default): log at the steps the framework logs, or once '
        "per epoch",
        scope="callback",
        aliases=("logging_strategy", "update_freq"),
    ),
    Option(
        "log_every_n_steps",
        None,
        check_every,
        "with logging_interval='step', log every this many steps; None follows the "
        "framework's own logging cadence",
        unit="steps",
        scope="callback",
        aliases=("logging_steps", "every_n_steps"),
    ),
    Option(
        "prefix",
        "system/",
        check_prefix,
        "put before every key, its trailing / replaced by the logger's group separator",
        scope="callback",
    ),
    Option(
        "include",
        None,
        check_patterns("include"),
        "glob patterns (fnmatch) on the un-prefixed keys to keep; all by default",
        scope="callback",
    ),
    Option(
        "exclude",
        None,
        check_patterns("exclude"),
        "glob patterns of keys to leave out, applied after include",
        scope="callback",
    ),
    Option(
        "console",
        False,
        check_bool("console"),
        "also show six short keys (cpu, mem, gpu, gmem, s/step, wait) where the framework "
        "prints its logs (progress bar, printed log lines); every key reaches the loggers "
        "either way",
        scope="callback",
        aliases=("prog_bar", "progress_bar", "verbose"),
    ),
    Option(
        "live_findings",
        True,
        check_bool("live_findings"),
        "say each finding (input-bound, stall, ...) once, in one line, while training "
        "(rank 0, through the framework's logging; sysmetrics record: standard error); "
        "False keeps the console as it is without sysmetrics",
        scope="callback",
        aliases=("findings", "diagnose"),
    ),
    Option(
        "panel",
        None,
        check_optional_bool("panel", "inside a Jupyter kernel only"),
        "show a live panel of the run in the notebook cell (GPUs, the job's CPU and memory, "
        "disk and network rates, step time, the latest finding), redrawn about once a second, "
        "and a summary when training ends; None: on inside a Jupyter kernel, off elsewhere "
        "(True outside a kernel: a warning, no panel)",
        scope="callback",
        aliases=("live_panel", "notebook"),
    ),
    Option(
        "monitor",
        None,
        check_by_callback,
        "a SystemMonitor to share: the callback reads it through a reader of its own, "
        "starts it if it is not running, and never stops it (excludes interval and the "
        "monitor's options)",
        scope="callback",
        aliases=("system_monitor",),
    ),
    Option(
        "run_file",
        None,
        check_by_callback,
        "also write every sample, with the training step, to this JSON-lines file (its "
        "missing folders made at train start); True for system_metrics.jsonl in the run's "
        "log directory",
        scope="callback",
        aliases=("jsonl", "log_file"),
    ),
    Option(
        "hang_after",
        60.0,
        check_hang_after,
        "tell a hang live when the step has not advanced for max(hang_after, 5 x the p99 "
        "step time so far) s (announced evaluations and checkpoints do not count), with "
        "where the training thread is (and, in a distributed job, where every rank is); "
        "None tells no hang",
        unit="s",
        scope="callback",
        flag="--hang-after",
        cli=Flag(
            "S",
            "tell a hang when the command's sysmetrics.step() has not advanced for max(S, 5 x "
            "the p99 step time) seconds, with what the kernel says of its main thread "
            "(default: 60)",
            parse_seconds,
        ),
        aliases=("stall_after", "hang_timeout"),
    ),
    # -- the cost ledger (sysmetrics.ledger): no default price; no default carbon intensity
    Option(
        "price_per_kwh",
        None,
        check_price_per_kwh,
        "the price of a kWh of electricity, in the currency the ledger's money figures are "
        "then in; None: no money from energy (there is no default price)",
        unit="money/kWh",
        scope="callback",
        flag="--price-per-kwh",
        cli=Flag("PRICE", "the price of a kWh, for the cost ledger (default: none)", parse_number),
        aliases=("energy_price", "electricity_price"),
        env="SYSMETRICS_PRICE_PER_KWH",
    ),
    Option(
        "price_per_device_hour",
        None,
        check_price_per_device_hour,
        "{kind: price per hour} of each device the job holds, kind 'gpu' (each GPU the job "
        "uses) or 'node' (each node, the whole machine); added to the money from energy; "
        "None: none (there is no default price)",
        unit="money/h",
        scope="callback",
        flag="--price-per-device-hour",
        cli=Flag(
            "KIND=PRICE",
            "the price of an hour of each GPU the job uses (gpu=PRICE) or of each node "
            "(node=PRICE), for the cost ledger (repeatable; default: none)",
            parse_device_price,
            repeatable=True,
            convert=dict,
        ),
        aliases=("device_hour_price", "hourly_price"),
        env="SYSMETRICS_PRICE_PER_DEVICE_HOUR",
    ),
    Option(
        "carbon_intensity",
        None,
        check_carbon_intensity,
        "grams of CO2e emitted per kWh of the electricity used (the grid's, 0 to 2,000); "
        "None: no carbon figures (there is no default: grids differ from about 20 to 900)",
        unit="gCO2e/kWh",
        scope="callback",
        flag="--carbon-intensity",
        cli=Flag(
            "G",
            "grams of CO2e per kWh, for the cost ledger (default: none)",
            parse_number,
        ),
        aliases=("grid_intensity", "co2_per_kwh"),
        env="SYSMETRICS_CARBON_INTENSITY",
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
    """The options ``names``, each checked.

    An option not given takes its environment variable's value, else its default
    (:func:`default`).
    """
    return {
        name: BY_NAME[name].check(options[name] if name in options else default(name))
        for name in names
    }


_ENV_PARSERS: dict[str, Callable[[str], object]] = {
    "price_per_device_hour": parse_device_prices,  # gpu=2.5,node=0.4: the flag's, comma-joined
}


def default(name: str) -> object:
    """Option ``name``'s value where it is not given: its environment variable's, else its default.

    An option declared with ``env`` takes that variable's value where it is set (not
    empty), parsed as its flag's value (a list of ``KIND=PRICE`` joined by commas for
    ``price_per_device_hour``).

    Raises:
        OptionError: the variable's value is no number (the option, the value, the
            variable).

    """
    o = BY_NAME[name]
    text = os.environ.get(o.env, "").strip() if o.env else ""
    if not text:
        return o.default
    parse = _ENV_PARSERS.get(name) or (o.cli.parse if o.cli is not None else None)
    if parse is None:
        return text
    import argparse

    try:
        return parse(text)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        allowed = str(exc).split(": ", 1)[-1]  # past "'text' is invalid: "
        raise OptionError(
            name, text, f"{allowed} (from the environment variable {o.env})"
        ) from None


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
