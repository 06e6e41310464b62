"""transformers: a real Trainer on a tiny config-built model, read back from TensorBoard files
and ``state.log_history``. Nothing is downloaded."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="needs the [transformers] extra")
torch = pytest.importorskip("torch")
tqdm = pytest.importorskip("tqdm")
event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="needs tensorboard"
)

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from sysmetrics.integrations.transformers import SystemMetricsCallback  # noqa: E402
from tests.polling import wait_for  # noqa: E402
from tests.windows import (  # noqa: E402
    assert_cpu_where_measurable,
    assert_fresh_points,
    run_file_steps,
)

# transformers 4.41 renamed evaluation_strategy to eval_strategy (the old name went in 4.51).
EVAL_STRATEGY = (
    "eval_strategy"
    if "eval_strategy" in TrainingArguments.__dataclass_fields__
    else "evaluation_strategy"
)


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int = 32) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 8), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Sleeps(TrainerCallback):  # type: ignore[misc]
    """Steps at least ``seconds`` long, so logging points have samples of their own at the
    tests' 0.02 s interval (a point with no new sample logs no system keys)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, *args: Any, **kw: Any) -> None:
        time.sleep(self.seconds)


def train(
    tmp_path: Path, callback: SystemMetricsCallback, trainer_class: type[Trainer] = Trainer,
    extra_callbacks: tuple[Any, ...] = (), step_sleep: float = 0.02, **args: Any,
) -> Trainer:  # fmt: skip
    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(0)
    defaults: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 4,
        "num_train_epochs": 2, "report_to": ["tensorboard"],
        "save_strategy": "no", "use_cpu": True, "disable_tqdm": True, "logging_steps": 3,
    }  # fmt: skip
    defaults.update(args)
    trainer = trainer_class(
        model=GPT2LMHeadModel(config), args=TrainingArguments(**defaults),
        train_dataset=Tokens(), eval_dataset=Tokens(8),
        callbacks=[callback, Sleeps(step_sleep), *extra_callbacks],
    )  # fmt: skip
    trainer.train()
    return trainer


def tb_scalars(tmp_path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for events in tmp_path.glob("out/**/events.out.tfevents.*"):
        acc = event_accumulator.EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend(e.step for e in acc.Scalars(tag))
    return {k: sorted(v) for k, v in out.items()}


def history_steps(trainer: Trainer, key: str) -> list[int]:
    return [h["step"] for h in trainer.state.log_history if key in h]


def test_the_runs_numbers_are_at_hand_after_train(tmp_path: Path) -> None:
    """Issue 35: after train(), the last window and the whole run as Python objects."""
    cb = SystemMetricsCallback(interval=0.02)
    assert cb.summary() is None
    trainer = train(tmp_path, cb)
    summary = cb.summary()
    assert summary is not None
    logged = [h for h in trainer.state.log_history if "system/cpu" in h]
    assert summary.last["cpu"] == pytest.approx(logged[-1]["system/cpu"])
    assert summary.whole["proc.memory.rssMB.max"] >= summary.whole["proc.memory.rssMB"] > 0
    assert all(f.rule and f.sentence for f in cb.findings())


def test_step_metrics_reach_tensorboard_and_log_history(tmp_path: Path) -> None:
    trainer = train(tmp_path, SystemMetricsCallback(interval=0.02), eval_steps=6,
                    **{EVAL_STRATEGY: "steps"})  # fmt: skip
    loss_steps = history_steps(trainer, "loss")
    assert loss_steps == [3, 6, 9, 12, 15]  # 16 steps, logging_steps=3
    assert history_steps(trainer, "system/cpu") == loss_steps
    assert history_steps(trainer, "system/proc.memory.rssMB.max") == loss_steps
    # No system keys on evaluation logs or the final summary.
    for h in trainer.state.log_history:
        if "eval_loss" in h or "train_runtime" in h:
            assert not any(k.startswith("system/") for k in h), h
    tags = tb_scalars(tmp_path)
    assert tags["train/system/cpu"] == tags["train/loss"] == loss_steps
    assert tags["train/system/memory"] == loss_steps
    rss = [h["system/proc.memory.rssMB"] for h in trainer.state.log_history if "loss" in h]
    assert all(50 < v < 10000 for v in rss)


def test_run_file_in_the_logging_dir_on_the_logged_step_axis(tmp_path: Path) -> None:
    trainer = train(tmp_path, SystemMetricsCallback(interval=0.02, run_file=True))
    (path,) = tmp_path.glob("out/**/system_metrics.jsonl")
    assert str(path.parent) == (getattr(trainer.args, "logging_dir", None) or str(tmp_path / "out"))
    records = [json.loads(x) for x in path.read_text().splitlines()]
    assert "run" in records[0] and records[-1]["end"]["status"] == "finished"
    lines = [x for x in records if "metrics" in x]
    assert lines[0]["step"] == 1  # the start-up sample, at the first step
    steps = [x["step"] for x in lines if x["step"] is not None]
    assert lines
    assert_cpu_where_measurable(lines)  # all but windows under half a tick (the last)
    assert steps == sorted(steps) and set(steps) <= set(range(1, trainer.state.global_step + 1))


def test_epoch_strategy(tmp_path: Path) -> None:
    trainer = train(tmp_path, SystemMetricsCallback(interval=0.02), logging_strategy="epoch",
                    num_train_epochs=3)  # fmt: skip
    assert history_steps(trainer, "loss") == [8, 16, 24]
    assert history_steps(trainer, "system/cpu") == [8, 16, 24]
    assert tb_scalars(tmp_path)["train/system/cpu"] == [8, 16, 24]


def test_epoch_granularity_with_step_logging(tmp_path: Path) -> None:
    cb = SystemMetricsCallback(interval=0.02, logging_interval="epoch")
    trainer = train(tmp_path, cb, logging_steps=5)
    assert history_steps(trainer, "loss") == [5, 8, 10, 15, 16]  # the callback asks for 8, 16
    assert history_steps(trainer, "system/cpu") == [8, 16]


def test_own_cadence_and_fast_steps(tmp_path: Path) -> None:
    """log_every_n_steps=2 with a 30 s interval: every 2nd step logs the loss; only the
    first point has a sample (the start-up one), the others log no system keys."""
    cb = SystemMetricsCallback(interval=30.0, log_every_n_steps=2, include=["cpu", "memory"])
    trainer = train(tmp_path, cb, logging_steps=100)
    assert history_steps(trainer, "loss") == list(range(2, 17, 2))
    assert history_steps(trainer, "system/cpu") == [2]
    assert history_steps(trainer, "system/memory") == [2]
    keys = {k for h in trainer.state.log_history for k in h if k.startswith("system/")}
    assert keys == {"system/cpu", "system/memory"}
    assert cb.core.monitor is None  # stopped at the end of training


def test_no_point_repeats_the_previous_window(tmp_path: Path) -> None:
    """Regression (issue 22): at interval=1.0 with ~15 ms steps, 11 of 40 points were the
    previous window again. Read back from TensorBoard and log_history: at most one point
    per sample taken (the run file has every sample), each with a sample of its own."""
    cb = SystemMetricsCallback(interval=1.0, run_file=True)
    trainer = train(tmp_path, cb, step_sleep=0.015, logging_steps=4, max_steps=120)
    assert history_steps(trainer, "loss") == list(range(4, 121, 4))
    points = [(h["step"], {k: v for k, v in h.items() if k.startswith("system/")})
              for h in trainer.state.log_history if "system/cpu" in h]  # fmt: skip
    (path,) = tmp_path.glob("out/**/system_metrics.jsonl")
    assert_fresh_points(points, run_file_steps(path))
    assert tb_scalars(tmp_path)["train/system/cpu"] == [step for step, _ in points]


@pytest.mark.parametrize(
    ("args", "loss_steps"),
    [
        ({"logging_steps": 3}, [3, 5]),  # the last step is logged because we ask for it
        ({"logging_steps": 5}, [5]),  # the Trainer logs the last step itself
        ({"logging_strategy": "epoch"}, [5]),  # logged at the (partial) epoch's end
    ],
)
def test_epoch_granularity_with_max_steps_inside_the_first_epoch(
    tmp_path: Path, args: dict[str, Any], loss_steps: list[int]
) -> None:
    """Regression: max_steps shorter than an epoch logged no system point at all."""
    cb = SystemMetricsCallback(interval=0.02, logging_interval="epoch")
    trainer = train(tmp_path, cb, max_steps=5, **args)  # 8 steps an epoch
    assert history_steps(trainer, "loss") == loss_steps
    assert history_steps(trainer, "system/cpu") == [5]
    assert tb_scalars(tmp_path)["train/system/cpu"] == [5]


class LogsEveryStep(Trainer):  # type: ignore[misc]
    """A Trainer subclass that logs its own value at every step (as many recipes do)."""

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        loss = super().training_step(*args, **kwargs)
        self.log({"custom": 1.0})
        return loss


def test_points_follow_the_loss_cadence_whatever_else_is_logged(tmp_path: Path) -> None:
    """Regression: a Trainer subclass logging at every step got system points every step."""
    trainer = train(tmp_path, SystemMetricsCallback(interval=0.02), trainer_class=LogsEveryStep)
    assert len(history_steps(trainer, "custom")) == 16
    loss_steps = history_steps(trainer, "loss")
    assert loss_steps == [3, 6, 9, 12, 15]
    assert history_steps(trainer, "system/cpu") == loss_steps
    assert tb_scalars(tmp_path)["train/system/cpu"] == loss_steps


@pytest.mark.parametrize("console", [False, True])
@pytest.mark.parametrize("disable_tqdm", [True, False])
def test_console_looks_as_without_sysmetrics_unless_asked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    console: bool, disable_tqdm: bool,
) -> None:  # fmt: skip
    """Regression: the Trainer's printer printed every system key on every log line."""
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)  # no tqdm thread left behind
    cb = SystemMetricsCallback(interval=0.02, console=console)
    trainer = train(tmp_path, cb, disable_tqdm=disable_tqdm)
    captured = capfd.readouterr()
    text = captured.out + captured.err
    assert "'loss'" in text  # the Trainer printed its log lines
    assert "system/" not in text, text[-2000:]  # never every key: the loggers have them
    assert ("'cpu':" in text) == console and ("'s/step':" in text) == console, text[-2000:]
    assert "proc." not in text
    assert history_steps(trainer, "system/cpu") == [3, 6, 9, 12, 15]
    assert tb_scalars(tmp_path)["train/system/cpu"] == [3, 6, 9, 12, 15]


class FailsAtStep(TrainerCallback):  # type: ignore[misc]
    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == 3:
            raise RuntimeError("boom")


def test_exception_out_of_train_stops_the_sampler_while_the_traceback_lives(
    tmp_path: Path,
) -> None:
    """Regression: after train() raised, the sampler ran until the interpreter exited."""
    cb = SystemMetricsCallback(interval=0.02)
    kept: list[BaseException] = []
    try:
        train(tmp_path, cb, extra_callbacks=(FailsAtStep(),), report_to=[])
    except RuntimeError as exc:
        kept.append(exc)  # keeps the traceback, the Trainer's frames and its callbacks
    assert kept and kept[0].__traceback__ is not None
    wait_for(
        lambda: (
            cb.core.monitor is None
            and "sysmetrics-monitor" not in [t.name for t in threading.enumerate()]
        ),
        timeout=2.0,
    )


class StopsAt(TrainerCallback):  # type: ignore[misc]
    """Stops training at ``step``, as EarlyStoppingCallback does after an evaluation."""

    def __init__(self, step: int, when: str = "on_step_end") -> None:
        self.step = step
        setattr(self, when, self._stop)

    def _stop(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == self.step:
            control.should_training_stop = True


@pytest.mark.parametrize("when", ["on_step_end", "on_evaluate"])
@pytest.mark.parametrize(
    ("logging_steps", "loss_steps"), [(2, [2, 4, 6]), (3, [3, 6]), (5, [5, 6])]
)
def test_epoch_granularity_when_training_stops_inside_an_epoch(
    tmp_path: Path, logging_steps: int, loss_steps: list[int], when: str
) -> None:
    """Regression: stopped mid-epoch at a step the Trainer logged anyway, the partial
    epoch got no point (the Trainer does not log a step twice)."""
    cb = SystemMetricsCallback(interval=0.02, logging_interval="epoch")
    trainer = train(
        tmp_path, cb, extra_callbacks=(StopsAt(6, when),), logging_steps=logging_steps,
        **{EVAL_STRATEGY: "steps"}, eval_steps=3,
    )  # fmt: skip
    assert history_steps(trainer, "loss") == loss_steps  # 8 steps an epoch, stopped at 6
    assert history_steps(trainer, "system/cpu") == [6]
    assert tb_scalars(tmp_path)["train/system/cpu"] == [6]
