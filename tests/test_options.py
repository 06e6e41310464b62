"""The options, declared once in ``sysmetrics.options``, and what is derived from them."""

from __future__ import annotations

import importlib
import inspect
import math
import os
from typing import Any

import pytest
from typing_extensions import Unpack, get_type_hints

import sysmetrics.monitor as sysmetrics_monitor
from sysmetrics import cli, options
from sysmetrics._docs import render
from sysmetrics.options import (
    CALLBACK_OPTIONS,
    COLLECTOR_OPTIONS,
    MONITOR_OPTIONS,
    OPTIONS,
    CallbackOptions,
    CollectorOptions,
    MonitorOptions,
)


def test_options_are_declared_once() -> None:
    """Each option has its type and its entry, and nothing else (moved from test_readers)."""
    assert set(CollectorOptions.__annotations__) == set(COLLECTOR_OPTIONS)
    assert ("interval", "collectors", "clock", *COLLECTOR_OPTIONS) == MONITOR_OPTIONS
    assert set(MonitorOptions.__annotations__) == set(MONITOR_OPTIONS)
    assert set(CallbackOptions.__annotations__) == {o.name for o in OPTIONS}
    assert len({o.name for o in OPTIONS}) == len(OPTIONS)
    with open("docs/options.md", encoding="utf-8") as f:
        page = render(f.read())  # the options reference, generated as the site builds it
    for o in OPTIONS:
        assert f"| `{o.name}` |" in page, f"the options reference does not list {o.name!r}"


def test_each_declaration_is_whole() -> None:
    """Every field the docs generator reads is there, ``type`` as the TypedDict writes it."""
    for o in OPTIONS:
        assert o.scope in ("monitor", "callback"), o
        owner = MonitorOptions if o.scope == "monitor" else CallbackOptions
        assert o.type and o.type == options._annotation(owner, o.name), o
        assert o.help and not o.help.endswith("."), o
        assert (o.flag is None) == (o.cli is None), o
        if o.flag is not None:
            assert o.flag.startswith("--"), o
        assert o.check(o.default) == o.default or o.name in ("include", "exclude"), o


def test_a_field_without_its_entry_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "OPTIONS", tuple(o for o in OPTIONS if o.name != "prefix"))
    with pytest.raises(TypeError, match=r"CallbackOptions and OPTIONS disagree: \['prefix'\]"):
        options._typed()


@pytest.mark.parametrize("framework", ["lightning", "transformers", "keras"])
def test_callbacks_take_the_declared_options(framework: str) -> None:
    """Each callback's signature is ``**options: Unpack[CallbackOptions]``, nothing else."""
    pytest.importorskip(framework if framework != "lightning" else "lightning.pytorch")
    cls: Any = importlib.import_module(f"sysmetrics.integrations.{framework}")
    init = cls.SystemMetricsCallback.__init__
    params = list(inspect.signature(init).parameters.values())[1:]
    assert [(p.name, p.kind) for p in params] == [("options", inspect.Parameter.VAR_KEYWORD)]
    assert get_type_hints(init)["options"] == Unpack[CallbackOptions]


def test_system_monitor_takes_the_declared_options() -> None:
    params = inspect.signature(sysmetrics_monitor.SystemMonitor.__init__).parameters
    named = [n for n, p in params.items() if p.kind is p.POSITIONAL_OR_KEYWORD][1:]
    assert (*named, *COLLECTOR_OPTIONS) == MONITOR_OPTIONS
    hints = get_type_hints(sysmetrics_monitor.SystemMonitor.__init__)
    assert hints["options"] == Unpack[CollectorOptions]


def test_callbacks_hint_every_option_and_each_frameworks_name() -> None:
    for o in OPTIONS:
        for alias in o.aliases:
            hint = options.unknown([alias], (), CALLBACK_OPTIONS, aliases=True)
            assert hint == f"{alias!r} (did you mean {o.name!r}?)"


def test_records_flags_are_the_declared_ones() -> None:
    """Every option declared with a flag is one of record's, parsed into the option."""
    _, subs = cli._parser()
    rec = subs["record"]
    flags = {f: a.dest for a in rec._actions for f in a.option_strings}
    declared = {o.flag: o.name for o in OPTIONS if o.flag is not None}
    assert declared == {f: d for f, d in flags.items() if f in declared}
    assert set(declared) == {"--interval", "--disk-path", "--gpu-ids", "--open-metrics",
                             "--network-loopback", "--hang-after",
                             # the cost ledger's (record: the exporter; report too)
                             "--price-per-kwh", "--price-per-device-hour",
                             "--carbon-intensity"}  # fmt: skip
    typed = ["--disk-path", ".", "--open-metrics", "a=http://h/m", "--gpu-ids", "0,GPU-1",
             "--network-loopback", "--interval", "2", "--", "true"]  # fmt: skip
    args = rec.parse_args(typed)
    assert cli._options(args) == {
        "interval": 2,
        "disk_paths": [os.path.abspath(".")],
        "open_metrics": {"a": "http://h/m"},
        "gpu_ids": [0, "GPU-1"],
        "network_loopback": True,
    }
    assert cli._options(rec.parse_args(["--", "true"])) == {"interval": 1.0}


# -- option errors: their fields, and record's flag named from the declarations -------------

BAD_ON_THE_COMMAND_LINE = {
    "interval": (["--interval", "0"], ["0 is invalid: it must be a number of seconds between"]),
    "hang_after": (["--hang-after", "0"], ["0 is invalid: it must be a number of seconds above 0"]),
    # ", which" in the path: a message rewritten by regex cut the path's own words.
    "disk_paths": (
        ["--disk-path", "/no/such, which dir"],
        ["'/no/such, which dir' does not exist: each entry must be an existing path"],
    ),
    # As typed (99,GPU-x), whether NVML is missing here or lacks the GPUs.
    "gpu_ids": (
        ["--gpu-ids", "99,GPU-x"],
        ["99,GPU-x cannot be watched: ", "99 names no GPU this process can see: "],
    ),
    "open_metrics": (
        ["--open-metrics", "gpu=ftp://h/m"],
        ["gpu='ftp://h/m' is invalid: use an http:// or https:// URL"],
    ),
    # The cost ledger's prices (tests/test_ledger.py has more).
    "price_per_kwh": (
        ["--price-per-kwh", "-1"],
        ["-1.0 is invalid: it must be a price per kWh, 0 or more"],
    ),
    "price_per_device_hour": (
        ["--price-per-device-hour", "tpu=2"],
        ["name 'tpu' is invalid: use 'gpu' or 'node'"],
    ),
    "carbon_intensity": (
        ["--carbon-intensity", "9999"],
        ["9999.0 is invalid: it must be grams of CO2e per kWh, 0 to 2,000"],
    ),
}
"""A bad value of each option record takes with a value, and the message's possible rests."""


@pytest.mark.parametrize("o", cli.FLAGGED, ids=lambda o: o.flag)
def test_a_bad_value_of_each_flag_names_the_flag(o: options.Option, tmp_path: Any) -> None:
    """Every option declared with a flag: a bad value typed on record's command line
    reads ``argument <its flag>: <the value as typed> ...``; a new flag needs a bad value
    here (a switch takes none)."""
    import subprocess
    import sys

    assert o.cli is not None
    if o.cli.metavar is None:  # a switch: nothing typed can be bad
        assert o.check(True) is True and o.check(False) is False
        return
    assert o.name in BAD_ON_THE_COMMAND_LINE, f"give a bad value of {o.flag} here"
    typed, rests = BAD_ON_THE_COMMAND_LINE[o.name]
    cmd = [sys.executable, "-m", "sysmetrics", "record", "-o", str(tmp_path / "r.jsonl")]
    proc = subprocess.run([*cmd, *typed, "--", "true"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "r.jsonl").exists()
    said = proc.stderr.splitlines()[-1]
    prefix = f"sysmetrics record: error: argument {o.flag}: "
    assert any(said.startswith(prefix + rest) for rest in rests), said


def _stopped_monitor() -> Any:
    monitor = sysmetrics_monitor.SystemMonitor(collectors=[])
    monitor.start()
    monitor.stop()
    return monitor


BAD_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("interval", {"interval": 0}),
    ("interval", {"interval": "1"}),
    ("hang_after", {"hang_after": 0}),
    ("hang_after", {"hang_after": "60"}),
    ("collectors", {"collectors": [object()]}),
    ("clock", {"clock": 5}),
    ("disk_paths", {"disk_paths": 5}),
    ("disk_paths", {"disk_paths": [5]}),
    ("disk_paths", {"disk_paths": ["/no/such/dir"]}),
    ("track_process_tree", {"track_process_tree": 1}),
    ("pid", {"pid": -1}),
    ("pid", {"pid": 2**31 - 1}),
    ("gpu_ids", {"gpu_ids": 5}),
    ("gpu_ids", {"gpu_ids": [99]}),
    ("rocm_smi_path", {"rocm_smi_path": "/no/such/rocm-smi"}),
    ("open_metrics", {"open_metrics": 5}),
    ("open_metrics", {"open_metrics": {"a b": "http://127.0.0.1:9/m"}}),
    ("open_metrics", {"open_metrics": {"a": "ftp://h/m"}}),
    (
        "open_metrics_filters",
        {"open_metrics": {"a": "http://127.0.0.1:9/m"}, "open_metrics_filters": 5},
    ),
    (
        "open_metrics_filters",
        {"open_metrics": {"a": "http://127.0.0.1:9/m"}, "open_metrics_filters": ["("]},
    ),
    (
        "open_metrics_filters",
        {"open_metrics": {"a": "http://127.0.0.1:9/m"}, "open_metrics_filters": {"m": 5}},
    ),
    ("open_metrics_max_series", {"open_metrics_max_series": 0}),
    ("network_loopback", {"network_loopback": "yes"}),
    ("logging_interval", {"logging_interval": "batch"}),
    ("log_every_n_steps", {"log_every_n_steps": 0}),
    ("prefix", {"prefix": 5}),
    ("include", {"include": 5}),
    ("include", {"include": [""]}),
    ("exclude", {"exclude": [5]}),
    ("console", {"console": 1}),
    ("live_findings", {"live_findings": "no"}),
    ("panel", {"panel": "yes"}),
    ("monitor", {"monitor": 5}),
    ("monitor", {"monitor": _stopped_monitor}),
    ("run_file", {"run_file": 5}),
    ("run_file", {"run_file": "/"}),
    ("run_file", {"run_file": "/dev/null/r.jsonl"}),  # a folder that cannot be made
    # The cost ledger's (a callback's, at construction; tests/test_ledger.py has more).
    ("price_per_kwh", {"price_per_kwh": -1}),
    ("price_per_kwh", {"price_per_kwh": "0.3"}),
    ("price_per_device_hour", {"price_per_device_hour": {"tpu": 1.0}}),
    ("price_per_device_hour", {"price_per_device_hour": {"gpu": math.nan}}),
    ("carbon_intensity", {"carbon_intensity": 5000}),
]
"""Bad values of every option (``open_metrics_headers``: checked by Python's ``dict()``)."""


def test_bad_options_cover_every_declared_option() -> None:
    assert {n for n, _ in BAD_OPTIONS} == {o.name for o in OPTIONS} - {"open_metrics_headers"}


@pytest.mark.parametrize(("name", "given"), BAD_OPTIONS, ids=[n for n, _ in BAD_OPTIONS])
def test_every_option_error_carries_the_declared_name(name: str, given: dict[str, Any]) -> None:
    """A bad option raises an ``OptionError`` with ``option`` (its declared name),
    ``value`` and ``allowed``, from SystemMonitor (its options) or a callback (all); its
    message is ``str()``, and it is still a ValueError or TypeError."""
    from sysmetrics import OptionError
    from sysmetrics.callback import CallbackCore

    given = {k: v() if callable(v) else v for k, v in given.items()}
    scope = options.BY_NAME[name].scope
    make: Any = sysmetrics_monitor.SystemMonitor if scope == "monitor" else CallbackCore
    with pytest.raises((TypeError, ValueError)) as raised:
        make(**given)
    error = raised.value
    assert isinstance(error, OptionError), repr(error)
    assert error.option == name
    assert error.value is not None or name in ("pid",)
    assert isinstance(error.allowed, str) and isinstance(error.problem, str)
    assert str(error).startswith(name), str(error)


def test_an_option_error_is_a_value_or_type_error_and_pickles_whole() -> None:
    """``except ValueError``/``TypeError`` still catch them; a worker's error reaches its
    parent with its fields (pickled), the message unchanged."""
    import pickle

    from sysmetrics import OptionError, OptionTypeError

    made = [
        OptionError("interval", 0, "it must be a number of seconds between 0.01 and 3600"),
        OptionTypeError(
            "disk_paths", None, "each entry ...", problem="is not a path", part="entry"
        ),
        OptionError("open_metrics", "a b", "use letters, digits, _ and -", part="name"),
        OptionError(
            "open_metrics", "ftp://h/m", "use an http:// or https:// URL", part="key", key="gpu"
        ),
    ]
    assert [str(e) for e in made] == [
        "interval=0 is invalid: it must be a number of seconds between 0.01 and 3600",
        "disk_paths contains None, which is not a path: each entry ...",
        "open_metrics name 'a b' is invalid: use letters, digits, _ and -",
        "open_metrics['gpu']='ftp://h/m' is invalid: use an http:// or https:// URL",
    ]
    assert isinstance(made[1], TypeError) and isinstance(made[1], ValueError)
    assert not isinstance(made[0], TypeError)
    for error in made:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert vars(copy) == vars(error)


@pytest.mark.parametrize("o", cli.FLAGGED, ids=lambda o: o.flag)
@pytest.mark.parametrize("part", ["value", "entry", "name", "key"])
def test_record_names_each_flag_from_the_declarations(o: options.Option, part: str) -> None:
    """Whatever an option's error says, record reads its fields, never its message:
    ``argument <the declared flag>: <the value as typed><the rest>``."""
    from sysmetrics import OptionError

    error = OptionError(o.name, "x, which y", "z", problem="is bad", part=part, key="k")
    typed = {"value": "'x, which y'", "entry": "'x, which y'", "name": "name 'x, which y'",
             "key": "k='x, which y'"}[part]  # fmt: skip
    assert cli._flag_error(error) == f"argument {o.flag}: {typed} is bad: z"
    assert cli._flag_error(ValueError("interval=0 is invalid")) == "interval=0 is invalid"


def test_every_option_error_in_the_code_names_a_declared_option() -> None:
    """Each ``OptionError(...)``/``OptionTypeError(...)`` the package raises names an
    option of :data:`OPTIONS` (where the name is written as a string there)."""
    import ast
    from pathlib import Path

    root = Path(options.__file__).parent
    named = []
    for path in [*root.rglob("*.py"), *(root.parent / "integrations").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("OptionError", "OptionTypeError")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                named.append((path.name, node.args[0].value))
    assert len(named) > 20
    assert [(f, n) for f, n in named if n not in options.BY_NAME] == []
