"""Hugging Face transformers: ``Trainer(..., callbacks=[SystemMetricsCallback()])``."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import CallbackHandler

from sysmetrics import SystemMetricsWarning
from sysmetrics.callback import CallbackCore, caller_self

_NOT_TRAINING_LOGS = ("eval_", "test_", "predict_")


class SystemMetricsCallback(TrainerCallback):
    """Add system metrics to the Trainer's training logs, for every ``report_to`` reporter.

    The Trainer calls its reporters (TensorBoard, W&B, MLflow, ...) before user callbacks,
    so keys added in a late ``on_log`` would reach none of them. When training starts this
    callback therefore moves itself to the front of the Trainer's callback list; its
    ``on_log`` then adds the metrics to the training logs before any reporter sees them,
    and to the matching ``state.log_history`` entry. Reporters that rename keys do so as
    for the loss (TensorBoard shows ``train/system/cpu``).

    With ``logging_interval="step"`` the metrics join the Trainer's training logs at its
    ``logging_steps`` / ``logging_strategy`` cadence, or every ``log_every_n_steps`` steps
    (the callback then asks the Trainer to log at those steps). With ``"epoch"`` they join
    the log at the end of each epoch (one is requested if the strategy has none).
    Evaluation results and the final training summary never get system metrics, and no
    step gets two points.

    The local main process of each node samples; the world main process logs. The monitor
    starts in ``on_train_begin`` and stops in ``on_train_end``; as the Trainer has no
    failure hook, after an exception the sampler is a daemon thread that stops at exit.

    Keys: every key of :class:`sysmetrics.SystemMonitor`, after ``prefix``.

    Args:
        interval: seconds between samples.
        logging_interval: ``"step"`` or ``"epoch"``.
        log_every_n_steps: log every this many optimizer steps; None follows the Trainer.
        prefix: put before every key (default ``system/``).
        include: glob patterns of keys to keep (default all).
        exclude: glob patterns of keys to leave out.
        **monitor_options: passed to :class:`sysmetrics.SystemMonitor`.

    Raises:
        TypeError, ValueError: an invalid option, at construction.

    """

    def __init__(
        self,
        interval: float = 1.0,
        logging_interval: str = "step",
        log_every_n_steps: int | None = None,
        prefix: str = "system/",
        include: str | Iterable[str] | None = None,
        exclude: str | Iterable[str] | None = None,
        **monitor_options: Any,
    ) -> None:
        self.core = CallbackCore(
            interval, logging_interval, log_every_n_steps, prefix, include, exclude,
            **monitor_options,
        )  # fmt: skip
        self._last_step = -1

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        handler = caller_self(CallbackHandler)
        if handler is None:
            warnings.warn(
                "SystemMetricsCallback could not find the Trainer's callback list, so the "
                "report_to reporters may not see system metrics (state.log_history will)",
                SystemMetricsWarning,
                stacklevel=2,
            )
        elif handler.callbacks[0] is not self:
            handler.callbacks.remove(self)
            handler.callbacks.insert(0, self)
        self._last_step = -1
        self.core.start(sample=state.is_local_process_zero)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        n = self.core.log_every_n_steps
        if self.core.logging_interval == "step" and n is not None and state.global_step % n == 0:
            control.should_log = True

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.core.logging_interval == "epoch":
            control.should_log = True

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        if logs is None or self.core.monitor is None or not state.is_world_process_zero:
            return
        if "train_runtime" in logs or any(k.startswith(_NOT_TRAINING_LOGS) for k in logs):
            return  # the end-of-training summary, or evaluation results
        step = state.global_step
        if step == self._last_step:
            return
        if self.core.logging_interval == "epoch":
            epoch = state.epoch or 0.0
            if abs(epoch - round(epoch)) > 1e-6 or epoch == 0:
                return  # not the log of an epoch's last step
        elif not self.core.due(step, True):
            return
        metrics = self.core.metrics()
        logs.update(metrics)
        history = state.log_history
        if history and history[-1].get("step") == step:
            history[-1].update(metrics)
        self._last_step = step

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.core.stop()
