"""Hugging Face transformers: ``Trainer(..., callbacks=[SystemMetricsCallback()])``."""

from __future__ import annotations

import math
import warnings
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from typing_extensions import Unpack

from sysmetrics import SystemMetricsWarning
from sysmetrics.callback import CallbackCore, RunResults, move_to_front
from sysmetrics.options import CallbackOptions

from . import _transformers

_NOT_TRAINING_LOGS = ("eval_", "test_", "predict_")


class SystemMetricsCallback(RunResults, TrainerCallback):
    """Add system metrics to the Trainer's training logs, for every ``report_to`` reporter.

    The Trainer calls its reporters (TensorBoard, W&B, MLflow, ...) before user callbacks,
    so keys added in a late ``on_log`` would reach none of them. When training starts this
    callback therefore moves itself to the front of the Trainer's callback list; its
    ``on_log`` then adds the metrics to the training logs before any reporter sees them,
    and to the matching ``state.log_history`` entry. Reporters that rename keys do so as
    for the loss (TensorBoard shows ``train/system/cpu``). The console (progress bar or
    printed log lines) shows the logs without them unless ``console=True``, and then only
    six short keys (:data:`sysmetrics.console_view.CONSOLE_KEYS`).

    With ``logging_interval="step"`` the metrics join the training log at the steps of
    the loss cadence (``logging_steps`` / ``logging_strategy`` / ``logging_first_step``),
    or every ``log_every_n_steps`` steps (the callback then asks the Trainer to log at
    those steps), whatever else is logged in between. With ``"epoch"`` they join the log
    at the end of each epoch, the last, partial one included (``max_steps``, early
    stopping); one is requested if the strategy has none. Evaluation results and the final
    training summary never get system metrics, and no step gets two points.

    The local main process of each node samples the whole job on its node (every local
    rank's process tree, learned with one all-gather at train start); the world main
    process logs. On several nodes each point gathers every node's numbers (one
    all-gather at that step, on every rank) and logs ``node{k}/<key>`` with
    ``nodes_min/<key>`` and ``nodes_max/<key>``. The monitor
    starts in ``on_train_begin`` and stops in ``on_train_end``; when ``train()`` raises
    instead, it stops within about 0.2 s of the training loop leaving the stack.

    Keys: every key of :class:`sysmetrics.SystemMonitor`, after ``prefix``, and the
    ``step.*`` keys (:mod:`sysmetrics.steptime`) from its hooks: an optimizer step from
    ``on_step_begin`` to ``on_step_end``; of the time in between, the Trainer's fetch of
    the step's micro-batches (timed by wrapping its ``get_batch_samples``) is waiting for
    data and the rest (other callbacks, logging, saving) overhead; the samples are the
    Trainer's total train batch size.

    Args:
        **options: the callback's options and :class:`sysmetrics.SystemMonitor`'s, each
            declared once in :data:`sysmetrics.options.OPTIONS` (type, default, help). Here
            ``log_every_n_steps`` counts optimizer steps (None follows the Trainer),
            ``console=True`` prints the console's short keys (``cpu``, ``mem``, ``gpu``,
            ``gmem``, ``s/step``, ``wait``) with the Trainer's console logs, and
            ``run_file=True`` writes ``system_metrics.jsonl`` in ``args.logging_dir``, else
            ``args.output_dir``.

    Raises:
        TypeError, ValueError: an invalid option, at construction.

    """

    def __init__(self, **options: Unpack[CallbackOptions]) -> None:
        self.core = CallbackCore(owner=type(self).__name__, **options)
        self._last_step = -1  # the step of the latest point
        self._last_log = -1  # the step of the Trainer's latest training log
        self._epoch_due = False  # an epoch ended (or training will) and has no point yet
        self._trainer: Any = None  # the Trainer of this run, to log a late epoch point
        self._samples = 0.0  # samples per optimizer step, whole job

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._last_step = self._last_log = -1
        self._epoch_due = False
        self._samples = _transformers.samples_per_step(None, args, state)
        sample = state.is_local_process_zero
        found = _transformers.callback_handler()
        if found is None:
            warnings.warn(
                "SystemMetricsCallback could not find the Trainer's callback list, so the "
                "report_to reporters may not see system metrics (state.log_history will)",
                SystemMetricsWarning,
                stacklevel=2,
            )
            self.core.start(
                sample=sample,
                run_dir=_run_dir(args),
                step=state.global_step + 1,
                say=_transformers.say if state.is_world_process_zero else None,
            )
            self.core.watch_arrival(kw.get("model"), forward=True)  # DDP: every rank's arrival
            return
        handler, loop_frame = found
        move_to_front(handler.callbacks, self)
        self._trainer = _transformers.trainer_of(loop_frame)
        self._samples = _transformers.samples_per_step(self._trainer, args, state)
        undo = [_transformers.filter_console(handler, self.core.console_logs)]

        def cleanup() -> None:
            self._trainer = None
            for u in undo:
                u()

        self.core.start(
            sample=sample,
            watch=loop_frame,
            cleanup=cleanup,
            run_dir=_run_dir(args),
            step=state.global_step + 1,  # the first step's, as on_step_begin stamps it
            say=_transformers.say if state.is_world_process_zero else None,
        )
        # The loop's fetch of each batch, timed on this run's clock: the wait for data
        # apart from the rest of the time between the step hooks (callbacks, logging, ...).
        trainer, clock = self._trainer, self.core.clock
        untime = _transformers.time_fetch(trainer, clock) if trainer is not None else None
        if untime is not None:
            undo.append(untime)
        # Every rank's steps and arrival at the gradient all-reduce (DDP, accelerate): the
        # model's forward hook ends the forward (the Trainer has no hook before backward).
        self.core.watch_arrival(kw.get("model"), forward=True)

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        # The step this step's loss is logged at, for the run file's samples.
        self.core.set_step(state.global_step + 1)
        # Since the previous step's end: its logging, saving, other callbacks, and the
        # fetch of every micro-batch of this step (the Trainer fetches them all before
        # this hook; timed apart where time_fetch wrapped it).
        self.core.clock.begin()

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self._epoch_due = False
        self.core.clock.restart()

    def on_prediction_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        # Each evaluation batch: the trainer has no hook before an evaluation starts.
        self.core.progress.announce("evaluation")  # no hang: the step waits for it

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.core.clock.restart()  # the evaluation since the previous step is no step's

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.core.clock.end(self._samples)  # one optimizer step (its micro-batches)
        # This callback runs first, before the Trainer decides to log at this step.
        step = state.global_step
        n = self.core.log_every_n_steps
        if self.core.logging_interval == "step":
            if n is not None and step % n == 0:
                control.should_log = True
        elif step >= state.max_steps or _whole(state.epoch):
            # The epoch's last step, or the last step of all: if the Trainer logs here
            # (its own cadence, or ours below), on_epoch_end would come too late.
            self._epoch_due = True
            control.should_log = True

    def on_epoch_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self._last_step == state.global_step:
            return  # this step already has its point
        self._epoch_due = True
        if self.core.logging_interval != "epoch":
            return
        if self._last_log != state.global_step:
            control.should_log = True  # the Trainer logs at the end of the epoch
        elif self._trainer is not None:
            # Training stopped mid-epoch (early stopping) at a step the Trainer had
            # already logged; it will not log that step again, so the point is logged now.
            self._trainer.log({})

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kw: Any,
    ) -> None:
        # Every rank runs this at the same steps (the Trainer logs on every rank), and
        # decides alike from the step: with several nodes, the point is a collective.
        if logs is None:
            return
        if "train_runtime" in logs or any(k.startswith(_NOT_TRAINING_LOGS) for k in logs):
            return  # the end-of-training summary, or evaluation results
        step = self._last_log = state.global_step
        if step < 1 or step == self._last_step or not self._due(args, state):
            return  # before the first step nothing is due
        point = self.core.point()
        self._last_step = step
        self._epoch_due = False
        if not state.is_world_process_zero or not point:
            return
        metrics = self.core.named(point)
        logs.update(metrics)
        history = state.log_history
        if history and history[-1].get("step") == step:
            history[-1].update(metrics)

    def _due(self, args: TrainingArguments, state: TrainerState) -> bool:
        """Whether the loss cadence (or ours) has a point at this step."""
        step = state.global_step
        if self.core.logging_interval == "epoch":
            return self._epoch_due
        if self.core.log_every_n_steps is not None:
            return step % self.core.log_every_n_steps == 0
        if step == 1 and args.logging_first_step:
            return True
        strategy = args.logging_strategy
        if strategy == "steps":
            return bool(state.logging_steps) and step % state.logging_steps == 0
        return strategy == "epoch" and self._epoch_due

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.core.stop()


def _run_dir(args: TrainingArguments) -> str | None:
    """Where the Trainer writes its logs (``logging_dir``, gone in transformers 5)."""
    return getattr(args, "logging_dir", None) or args.output_dir


def _whole(epoch: float | None) -> bool:
    """Whether ``state.epoch`` is a whole number: exact at an epoch's last step."""
    return epoch is not None and epoch > 0 and math.isclose(epoch, round(epoch), abs_tol=1e-9)
