"""The options, declared once in ``sysmetrics.options``, and what is derived from them."""

from __future__ import annotations

import importlib
import inspect
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
    assert sysmetrics_monitor.MONITOR_OPTIONS == MONITOR_OPTIONS
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
                             "--network-loopback"}  # fmt: skip
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
