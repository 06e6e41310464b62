"""The Lightning internals the Lightning callback reads, in one place.

Lightning has no public API for "the step the trainer logs at" or "is the trainer
logging its training-step metrics now"; these read private attributes that have the same
meaning from Lightning 2.2 to 2.6 (the versions the test matrix runs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl

from sysmetrics.steptime import FetchTimer, StepClock


def logged_step(trainer: pl.Trainer) -> int:
    """The step the trainer's loggers get for training metrics logged now.

    ``_batches_that_stepped`` (not ``global_step``, which counts optimizer steps and is
    one ahead in ``on_train_batch_end``) is what ``_LoggerConnector.log_metrics`` uses.
    """
    return int(trainer.fit_loop.epoch_loop._batches_that_stepped)


def closes_optimizer_step(trainer: pl.Trainer) -> bool:
    """From ``on_train_batch_end``: whether this batch closes an optimizer step.

    Lightning's own rule (``_TrainingEpochLoop._should_accumulate``, evaluated after the
    batch is counted ready): with ``accumulate_grad_batches=k`` the k-th batch of each
    group, or the epoch's last batch (unless the strategy accumulates itself, as
    DeepSpeed does); with manual optimization every batch is one step.
    """
    if not trainer.lightning_module.automatic_optimization:
        return True
    return not trainer.fit_loop._should_accumulate()


def log_every_n_steps(trainer: pl.Trainer) -> int:
    """``Trainer(log_every_n_steps=...)``: the trainer keeps it as an untyped attribute."""
    return int(getattr(trainer, "log_every_n_steps", 50))


def on_train_step_log(trainer: pl.Trainer, hook: Callable[[int, bool], None]) -> Callable[[], None]:
    """Call ``hook(step, trainer_logs)`` where the trainer decides to log its step metrics.

    The trainer decides in ``_LoggerConnector.update_train_step_metrics``, after every
    callback's ``on_train_batch_end`` and the module's: a later callback (``Timer`` for
    ``max_time``) or the module may set ``trainer.should_stop`` in between, which makes the
    trainer log that step. So the gate is evaluated there, exactly as the trainer does, by
    wrapping that method on this trainer's connector. The hook is not called on batches
    that only accumulate gradients.

    Returns:
        A function that removes the wrapper.

    """
    connector: Any = trainer._logger_connector
    original = connector.update_train_step_metrics

    def update_train_step_metrics() -> None:
        accumulating = not closes_optimizer_step(trainer)
        step = logged_step(trainer)
        trainer_logs = bool(connector.should_update_logs or getattr(trainer, "fast_dev_run", 0))
        original()
        if not accumulating:
            hook(step, trainer_logs)

    connector.update_train_step_metrics = update_train_step_metrics
    return lambda: connector.__dict__.pop("update_train_step_metrics", None)


def show_in_progress_bar(
    trainer: pl.Trainer, metrics: Callable[[], dict[str, float]]
) -> Callable[[], None]:
    """Add ``metrics()`` to what the trainer's progress bar shows (its ``get_metrics``).

    ``ProgressBar.get_metrics`` is public and documented as the place to change the
    items shown; it is wrapped on this trainer's progress bar instance.

    Returns:
        A function that removes the wrapper.

    """
    bar: Any = trainer.progress_bar_callback
    if bar is None:
        return lambda: None
    original = bar.get_metrics

    def get_metrics(*args: Any, **kwargs: Any) -> Any:
        return {**original(*args, **kwargs), **metrics()}

    bar.get_metrics = get_metrics
    return lambda: bar.__dict__.pop("get_metrics", None)


def say(line: str) -> None:
    """A line where Lightning prints its own (its ``lightning.pytorch`` logger, INFO).

    Lightning gives that logger a console handler at import unless the application
    configured logging; the callers call this on global rank 0 only.
    """
    logging.getLogger("lightning.pytorch").info(line)


def time_fetch(trainer: pl.Trainer, clock: StepClock) -> Callable[[], None] | None:
    """Time the fit loop's fetch of each training batch on ``clock`` (``clock.fetched``).

    Lightning's data fetcher (``_DataFetcher.__next__``, also its prefetch and the
    ``dataloader_iter`` one) calls ``_start_profiler()`` and ``_stop_profiler()`` right
    around ``next()`` on the train dataloader's iterator; ``_TrainingEpochLoop.on_run_start``
    sets them to the epoch loop's ``_on_before_fetch`` and ``_on_after_fetch`` at each
    epoch's start. Wrapping those two on this trainer's epoch loop instance (Lightning 2.0
    to 2.6) times exactly the fetch, whichever fetcher the loop uses.

    Returns:
        A function that removes the wrappers; None where the attributes are missing (the
        callback then measures the time between the batch hooks, as the docs say).

    """
    loop: Any = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    before, after = (getattr(loop, name, None) for name in ("_on_before_fetch", "_on_after_fetch"))
    if not callable(before) or not callable(after) or "_on_before_fetch" in vars(loop):
        return None
    timer = FetchTimer(clock)

    def on_before_fetch() -> None:
        before()
        timer.before()

    def on_after_fetch() -> None:
        timer.after()
        after()

    loop._on_before_fetch, loop._on_after_fetch = on_before_fetch, on_after_fetch
    clock.timed = True

    def undo() -> None:
        vars(loop).pop("_on_before_fetch", None)
        vars(loop).pop("_on_after_fetch", None)

    return undo
