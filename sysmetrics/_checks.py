"""The checks of the options declared in :mod:`sysmetrics.options`, and record's flag parsers.

Each check returns the value to use, or raises :class:`~sysmetrics.errors.OptionError`
(:class:`~sysmetrics.errors.OptionTypeError` for a value of the wrong type) with the
option's name, the value and what is allowed. ``monitor=`` and ``run_file=`` are checked
by the callbacks' core (:mod:`sysmetrics.callback`), which knows the framework.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Callable, Iterable, Mapping

from sysmetrics.errors import OptionError, OptionTypeError

MIN_INTERVAL = 0.01  # seconds
MAX_INTERVAL = 3600.0  # seconds
LOGGING_INTERVALS = ("step", "epoch")


def positive_int(value: object) -> int | None:
    """``value`` as an int if it is a positive integer (numpy's included, bool not)."""
    if isinstance(value, bool):
        return None
    try:
        n = operator.index(value)  # type: ignore[arg-type]  # raises for non-integers
    except TypeError:
        return None
    return n if n > 0 else None


def one_or_many(value: object, one: type | tuple[type, ...]) -> list[object] | None:
    """An option that takes "an item or a list of them", as a list; None if neither.

    ``[value]`` if it is a ``one``, else the items of any iterable but bytes or a mapping.
    """
    if isinstance(value, one):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, (bytes, Mapping)):
        return list(value)
    return None


def check_any(value: object) -> object:
    return value  # checked by the code that takes it, with its own message


def check_engine(value: object) -> object:
    return value  # collectors= and clock= are checked by SystemMonitor itself


def check_bool(name: str) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        if not isinstance(value, bool):
            raise OptionTypeError(name, value, "use True or False")
        return value

    return check


def check_optional_bool(name: str, none: str) -> Callable[[object], bool | None]:
    """A check of an option that is True, False, or None (``none`` says what None means)."""

    def check(value: object) -> bool | None:
        if value is not None and not isinstance(value, bool):
            raise OptionTypeError(name, value, f"use True, False or None ({none})")
        return value

    return check


def check_interval(interval: object) -> float:
    """``interval`` as a float: any real number (numpy's included) but bool, in range."""
    # bool is an int to Python.
    allowed = f"it must be a number of seconds between {MIN_INTERVAL} and {MAX_INTERVAL:g}"
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise OptionTypeError("interval", interval, allowed)
    value = float(interval)
    if not (math.isfinite(value) and MIN_INTERVAL <= value <= MAX_INTERVAL):
        raise OptionError("interval", interval, allowed)
    return value


def check_hang_after(value: object) -> float | None:
    """``hang_after`` as a float of seconds (at least ``MIN_INTERVAL``), or None (off)."""
    if value is None:
        return None
    allowed = "it must be a number of seconds above 0, or None to tell no hang"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionTypeError("hang_after", value, allowed)
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds >= MIN_INTERVAL):
        raise OptionError("hang_after", value, allowed)
    return seconds


def check_pid(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise OptionError("pid", value, "it must be a positive process id")
    import psutil

    if not psutil.pid_exists(value):
        raise OptionError("pid", value, problem="is invalid: no such process")
    return value


def check_max_series(value: object) -> int:
    n = positive_int(value)
    if n is None:
        raise OptionError(
            "open_metrics_max_series",
            value,
            "it must be a positive integer (series kept per endpoint)",
        )
    return n


def check_disk_paths(value: object) -> tuple[str, ...]:
    items = one_or_many(value, (str, os.PathLike))
    if items is None:
        raise OptionTypeError(
            "disk_paths",
            value,
            "use a path or a list of paths whose filesystems to watch (an empty list for none)",
        )
    paths: list[str] = []
    for item in items:
        p = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        if not isinstance(p, str):
            raise OptionTypeError(
                "disk_paths",
                item,
                "each entry must be a string or os.PathLike naming an existing path",
                problem="is not a path",
                part="entry",
            )
        paths.append(p)
    for p in paths:
        if missing_here(p):
            raise OptionError(
                "disk_paths",
                p,
                "each entry must be an existing path whose filesystem to watch",
                problem="does not exist",
                part="entry",
            )
    return tuple(paths)


def missing_here(path: str) -> bool:
    """Whether the ``disk_paths`` entry ``path`` is known not to exist.

    Asked only of a path on a local filesystem, by the mount table's text alone
    (:func:`sysmetrics.host.local_path`): one on a network or FUSE mount is never touched
    by the calling thread (a dead mount would hold it in the kernel for good); its helper
    process tells, and a missing one costs its keys with one warning instead.
    """
    from sysmetrics.host.statfs import local_path

    return local_path(path) and not os.path.exists(path)


def check_open_metrics(value: object) -> object:
    """The endpoints' names and URLs, and the extra they need: no request is made."""
    if not value:
        return value  # none: no collector, whatever the value
    from sysmetrics import _optional
    from sysmetrics.collectors.openmetrics import check_endpoints

    check_endpoints(value)
    _optional.prometheus_parser()  # ImportError: the [openmetrics] extra is missing
    return value


def check_logging_interval(value: object) -> str:
    if value not in LOGGING_INTERVALS:
        raise OptionError("logging_interval", value, "use 'step' or 'epoch'")
    return str(value)


def check_every(value: object) -> int | None:
    every = None if value is None else positive_int(value)
    if value is not None and every is None:
        raise OptionError(
            "log_every_n_steps",
            value,
            "use a positive integer, or None for the framework's own logging cadence",
        )
    return every


def check_prefix(value: object) -> str:
    if not isinstance(value, str):
        raise OptionTypeError("prefix", value, "it must be a string (may be empty)")
    return value


def check_patterns(name: str) -> Callable[[object], tuple[str, ...]]:
    def check(value: object) -> tuple[str, ...]:
        if value is None:
            return ()
        items = one_or_many(value, str)
        if items is None:
            raise OptionTypeError(
                name,
                value,
                "use a glob pattern or a list of glob patterns on metric keys, such as 'cpu' "
                "or ['cpu', 'proc.*']",
            )
        patterns: list[str] = []
        for p in items:
            if not isinstance(p, str) or not p:
                raise OptionTypeError(
                    name,
                    p,
                    "each entry must be a non-empty glob pattern on metric keys, such as "
                    "'cpu' or 'disk.*'",
                    problem="",
                    part="entry",
                )
            patterns.append(p)
        return tuple(patterns)

    return check


def check_by_callback(value: object) -> object:
    return value  # monitor= and run_file= are checked by the callbacks' core, which knows
    # the framework (sysmetrics.callback.check_monitor, check_run_file)


# -- record's flag parsers ----------------------------------------------------------------


def parse_seconds(text: str) -> float:
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


def parse_gpu_ids(text: str) -> list[int | str]:
    """``0,1`` or UUIDs, comma-separated: indices as ints, the rest as given."""
    return [int(i) if i.strip().isdigit() else i.strip() for i in text.split(",") if i.strip()]


def parse_endpoint(text: str) -> tuple[str, str]:
    import argparse

    name, sep, url = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use name=url")
    return name, url


def absolute_paths(paths: list[str]) -> list[str]:
    """The paths made absolute: a disk path is part of the metric keys."""
    return [os.path.abspath(p) if p else p for p in paths]


# -- the cost ledger's options (sysmetrics.ledger): prices and carbon intensity ------------

DEVICE_KINDS = ("gpu", "node")
"""What ``price_per_device_hour`` prices: each GPU the job uses, each node of the job."""
MAX_CARBON_INTENSITY = 2000.0  # gCO2e/kWh: above any grid's (coal is about 1,000)


def _non_negative(option: str, value: object, allowed: str, top: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionTypeError(option, value, allowed)
    number = float(value)
    if not (math.isfinite(number) and 0.0 <= number <= top):
        raise OptionError(option, value, allowed)
    return number


def check_price_per_kwh(value: object) -> float | None:
    """``price_per_kwh`` as a float (money per kWh, 0 or more), or None (no energy price)."""
    if value is None:
        return None
    return _non_negative(
        "price_per_kwh", value, "it must be a price per kWh, 0 or more, or None for none"
    )


def check_price_per_device_hour(value: object) -> dict[str, float] | None:
    """``price_per_device_hour`` as ``{kind: money per hour}`` (kinds: :data:`DEVICE_KINDS`)."""
    if value is None:
        return None
    kinds = " or ".join(repr(k) for k in DEVICE_KINDS)
    if not isinstance(value, Mapping):
        raise OptionTypeError(
            "price_per_device_hour", value, f"it must be a mapping {{kind: price per hour}}, "
            f"kind {kinds}, or None"
        )  # fmt: skip
    out = {}
    for kind, price in value.items():
        if kind not in DEVICE_KINDS:
            raise OptionError("price_per_device_hour", kind, f"use {kinds}", part="name")
        out[kind] = _non_negative(
            "price_per_device_hour", price, "it must be a price per hour, 0 or more"
        )
    return out


def check_carbon_intensity(value: object) -> float | None:
    """``carbon_intensity`` as a float of gCO2e/kWh (0 to 2,000), or None (no carbon figure)."""
    if value is None:
        return None
    return _non_negative(
        "carbon_intensity",
        value,
        f"it must be grams of CO2e per kWh, 0 to {MAX_CARBON_INTENSITY:,.0f}, or None for none",
        MAX_CARBON_INTENSITY,
    )


def parse_number(text: str) -> float:
    """A flag's (or environment variable's) number; its range is the option's check's."""
    import argparse

    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: it must be a number") from None


def parse_device_price(text: str) -> tuple[str, float]:
    """``KIND=PRICE`` (``gpu=2.5``) as ``(kind, price)``; the check says which kinds."""
    import argparse

    kind, sep, price = text.partition("=")
    if not sep or not kind:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: use KIND=PRICE (gpu=2.5)")
    return kind.strip(), parse_number(price.strip())


def parse_device_prices(text: str) -> dict[str, float]:
    """``gpu=2.5,node=0.4`` (an environment variable's value) as ``{kind: price}``."""
    return dict(parse_device_price(part) for part in text.split(",") if part.strip())
