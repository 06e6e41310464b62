"""Configuration errors of the three framework callbacks, raised at construction.

Each message names the option, the value and what is allowed; a mistyped option is
matched against the callback's own options, the monitor's, and each framework's own
name for them.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

FRAMEWORKS = ["lightning", "transformers", "keras"]


def callback_class(framework: str) -> Any:
    pytest.importorskip(framework if framework != "lightning" else "lightning.pytorch")
    return importlib.import_module(f"sysmetrics.integrations.{framework}").SystemMetricsCallback


@pytest.fixture(params=FRAMEWORKS)
def callback_cls(request: pytest.FixtureRequest) -> Any:
    return callback_class(request.param)


LAUNCHER_ENV = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "GROUP_RANK",
                "NODE_RANK", "MASTER_ADDR")  # fmt: skip


@pytest.fixture(autouse=True)
def one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside any distributed launch (a ddp_spawn test earlier may leave MASTER_ADDR)."""
    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("log_every_n_step", "log_every_n_steps"),
        ("logging_intervals", "logging_interval"),
        ("logging_steps", "log_every_n_steps"),  # transformers' name for it
        ("logging_strategy", "logging_interval"),
        ("prog_bar", "console"),
        ("disk_path", "disk_paths"),  # a monitor option
        ("intervall", "interval"),
        ("run_flie", "run_file"),
        ("system_monitor", "monitor"),
    ],
)
def test_a_mistyped_option_gets_a_hint_from_every_option(
    callback_cls: Any, option: str, hint: str
) -> None:
    """Regression: only the monitor's options were searched (log_every_n_step suggested
    nothing, logging_intervals suggested interval)."""
    with pytest.raises(TypeError) as failure:
        callback_cls(**{option: 5})
    message = str(failure.value)
    assert f"SystemMetricsCallback got an unknown option {option!r} (did you mean {hint!r}?)" in (
        message
    )
    assert "log_every_n_steps" in message and "disk_paths" in message  # lists the options


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"include": 5}, TypeError, r"include=5 is invalid: use a glob pattern or a list"),
        ({"exclude": [None]}, TypeError, r"exclude contains None"),
        ({"disk_paths": None}, TypeError, r"disk_paths=None is invalid"),
        ({"disk_paths": [None]}, TypeError, r"disk_paths contains None, which is not a path"),
        ({"console": "yes"}, TypeError, r"console='yes' is invalid: use True or False"),
        ({"log_every_n_steps": 2.5}, ValueError, r"log_every_n_steps=2.5 is invalid"),
        ({"logging_interval": "batch"}, ValueError, r"logging_interval='batch' is invalid"),
        ({"monitor": 5}, TypeError, r"monitor=5 is invalid: use a sysmetrics.SystemMonitor"),
        ({"run_file": 3}, TypeError, r"run_file=3 is invalid: use a path for the JSON-lines"),
        ({"run_file": "/"}, ValueError, r"run_file='/' is invalid: it is a directory"),
        (
            {"run_file": "/dev/null/r.jsonl"},
            ValueError,
            r"its directory '/dev/null' cannot be made: '/dev/null' is not a directory",
        ),
    ],
)
def test_bad_values_name_the_option_and_what_is_allowed(
    callback_cls: Any,
    kwargs: dict[str, Any],
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        callback_cls(**kwargs)


def test_a_shared_monitor_excludes_the_options_of_an_own_one(callback_cls: Any) -> None:
    from sysmetrics import SystemMonitor
    from tests.conftest import ScriptedCollector

    monitor = SystemMonitor(collectors=[ScriptedCollector({"x": 1.0})])
    with pytest.raises(TypeError, match=r"got disk_paths, interval with monitor=: those"):
        callback_cls(monitor=monitor, interval=2, disk_paths="/")
    monitor.stop()
    with pytest.raises(ValueError, match=r"monitor= is a stopped SystemMonitor"):
        callback_cls(monitor=monitor)


def test_run_file_paths(callback_cls: Any, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert callback_cls(run_file="~/run.jsonl").core.run_file == str(tmp_path / "run.jsonl")
    assert callback_cls(run_file=False).core.run_file is None
    if callback_cls.__module__.endswith("keras"):
        with pytest.raises(ValueError, match=r"run_file=True is invalid for Sys.*no run log"):
            callback_cls(run_file=True)


def test_numpy_numbers_are_accepted(callback_cls: Any) -> None:
    np = pytest.importorskip("numpy")
    cb = callback_cls(interval=np.float32(0.5), log_every_n_steps=np.int64(4))
    assert cb.core.log_every_n_steps == 4 and type(cb.core.log_every_n_steps) is int
    assert cb.core.monitor_options["interval"] == np.float32(0.5)


@pytest.mark.parametrize(
    ("env", "value"),
    [("WORLD_SIZE", "2"), ("NODE_RANK", "0"), ("MASTER_ADDR", "10.0.0.1"), ("SLURM_NTASKS", "8")],
)
def test_a_machine_setting_that_does_not_hold_here_is_a_warning_in_a_distributed_run(
    callback_cls: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str, value: str
) -> None:
    """Regression (issue 23): a disk_paths entry, run_file directory or gpu_ids present on
    some nodes only raised on the others, which left the rest of the job waiting for them.
    Inside a distributed launch each is left out here with one warning."""
    from sysmetrics import SystemMetricsWarning

    monkeypatch.setenv(env, value)
    here, gone = str(tmp_path), str(tmp_path / "gone")
    with pytest.warns(SystemMetricsWarning) as caught:
        (tmp_path / "afile").write_text("")  # a run file folder that cannot be made
        cb = callback_cls(disk_paths=[here, gone], run_file=tmp_path / "afile" / "run.jsonl",
                          gpu_ids=[0])  # fmt: skip  # no NVIDIA GPU on this machine
    texts = sorted(str(w.message) for w in caught if w.category is SystemMetricsWarning)
    assert len(texts) == 3, texts
    assert texts[0].startswith(f"sysmetrics: disk_paths contains {gone!r}, which does not exist")
    assert texts[1].startswith("sysmetrics: gpu_ids=[0] cannot be watched")
    afile = str(tmp_path / "afile")
    assert f"its directory {afile!r} cannot be made: {afile!r} is not a directory here" in texts[2]
    assert all("this machine leaves it out (the other ranks keep it)" in t for t in texts)
    assert caught[0].filename == __file__  # the warning points at the user's line
    assert cb.core.monitor_options["disk_paths"] == [here]
    assert cb.core.monitor_options["gpu_ids"] == []
    assert cb.core.run_file is None
    # Types and impossible values still raise at construction, on every rank alike.
    with pytest.raises(TypeError, match=r"disk_paths contains None, which is not a path"):
        callback_cls(disk_paths=[gone, None])
    with pytest.raises(TypeError, match=r"run_file=3 is invalid"):
        callback_cls(run_file=3)
    with pytest.raises(ValueError, match=r"interval=0 is invalid"):
        callback_cls(interval=0, disk_paths=[gone])


def test_outside_a_distributed_run_a_missing_path_still_raises(callback_cls: Any) -> None:
    with pytest.raises(ValueError, match=r"disk_paths contains '/nope', which does not exist"):
        callback_cls(disk_paths=["/", "/nope"])
    with pytest.raises(ValueError, match=r"gpu_ids=\[0\] cannot be watched"):
        callback_cls(gpu_ids=[0])
