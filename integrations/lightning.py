"""PyTorch Lightning: ``Trainer(callbacks=[SystemMetricsCallback()])``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback
from typing_extensions import Unpack, override

from sysmetrics.callback import CallbackCore, RunResults
from sysmetrics.options import CallbackOptions
from sysmetrics.steptime import BatchSizer

from . import _lightning


class SystemMetricsCallback(RunResults, Callback):
    """Log system metrics to every logger in ``trainer.loggers``, on the trainer's step axis.

    The monitor starts in ``on_train_start`` and stops at the end of training or on an
    exception. With ``logging_interval="step"`` the metrics are logged at the steps the
    trainer logs its own metrics (``Trainer(log_every_n_steps=...)``, or this callback's
    ``log_every_n_steps``) with the trainer's step, so ``system/cpu`` at step N sits beside
    ``train_loss`` at step N, including the last step when training stops early
    (``EarlyStopping``, ``max_time``, ``trainer.should_stop``). With ``"epoch"`` they are
    logged once per training epoch, at the step of the epoch-level metrics. Each point is
    the aggregate since the previous one (see :meth:`sysmetrics.SystemMonitor.snapshot`).
    The progress bar does not show them unless ``console=True``, and then only six short
    keys (:data:`sysmetrics.console_view.CONSOLE_KEYS`).

    Keys: every key of :class:`sysmetrics.SystemMonitor` (``cpu``, ``proc.memory.rssMB``,
    ``disk./.usagePercent``, ...; see the README's table), after ``prefix`` joined with
    each logger's ``group_separator``, and the ``step.*`` keys (:mod:`sysmetrics.steptime`)
    from its hooks: a step from ``on_train_batch_start`` to ``on_train_batch_end`` (with
    ``accumulate_grad_batches``, to the batch that closes the optimizer step); of the time
    in between, the fit loop's fetch of the batch (timed by wrapping its data fetcher's
    hooks) is waiting for data and the rest (the progress bar, other callbacks, logging)
    overhead; the samples are each batch's size x ``trainer.world_size``.

    In distributed training the local rank 0 of each node samples the whole job on its
    node (every local rank's process tree, learned with one all-gather at train start),
    and global rank 0 logs. On one node there is one point per logging step and no other
    collective call. On several nodes each logging step gathers every node's numbers (one
    all-gather) and logs them as ``node{k}/<key>`` with ``nodes_min/<key>`` and
    ``nodes_max/<key>``; the decision to log is then taken from the step alone
    (``log_every_n_steps``), so the stopping step gets no extra point.

    Args:
        **options: the callback's options and :class:`sysmetrics.SystemMonitor`'s, each
            declared once in :data:`sysmetrics.options.OPTIONS` (type, default, help). Here
            ``log_every_n_steps`` counts optimizer steps (None follows the trainer),
            ``console=True`` shows the console's short keys of the latest logged metrics
            (``cpu``, ``mem``, ``gpu``, ``gmem``, ``s/step``, ``wait``) in the progress bar, and
            ``run_file=True`` writes ``system_metrics.jsonl`` in ``trainer.log_dir``.

    Raises:
        TypeError, ValueError: an invalid option, at construction.
        MisconfigurationException: at setup, when the trainer has no logger.

    """

    def __init__(self, **options: Unpack[CallbackOptions]) -> None:
        self.core = CallbackCore(owner=type(self).__name__, **options)
        self._world = 1  # trainer.world_size: a batch's samples over the whole job
        self._sizer = BatchSizer(  # never raises into the loop
            "sysmetrics: the Lightning callback cannot find the size of a batch"
        )
        self._accumulates = False  # accumulate_grad_batches > 1

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and not trainer.loggers:
            raise MisconfigurationException(
                "SystemMetricsCallback has nothing to log to: the Trainer has no logger "
                "(logger=False). Give it a logger, or remove the callback."
            )

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Every rank decides at every step: with several nodes, each logging point gathers
        # the nodes' numbers, a collective every rank must join.
        hook = functools.partial(self._on_step_log, trainer)
        undo: list[Callable[[], None]] = [_lightning.on_train_step_log(trainer, hook)]
        if trainer.is_global_zero and self.core.console:
            undo.append(_lightning.show_in_progress_bar(trainer, self.core.shown.copy))
        self.core.shown.clear()
        self._world = max(int(trainer.world_size), 1)
        self._accumulates = int(getattr(trainer, "accumulate_grad_batches", 1) or 1) > 1

        def cleanup() -> None:
            for u in undo:
                u()

        # trainer.log_dir is a broadcast: every rank asks for it, or none does.
        run_dir = trainer.log_dir if self.core.run_file is True else None
        self.core.start(
            sample=trainer.local_rank == 0,
            cleanup=cleanup,
            run_dir=run_dir,
            node=trainer.node_rank,
            step=_lightning.logged_step(trainer),
            say=_lightning.say if trainer.is_global_zero else None,
        )
        # The loop's fetch of each batch, timed on this run's clock: the wait for data
        # apart from the rest of the time between the batch hooks (the progress bar, ...).
        if (untime := _lightning.time_fetch(trainer, self.core.clock)) is not None:
            undo.append(untime)
        # Every rank's steps and arrival at the gradient all-reduce (DDP strategies):
        # the parameters of the module the strategy wraps are the pl_module's.
        self.core.watch_arrival(pl_module)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # The step this batch's metrics are logged at, for the run file's samples.
        self.core.set_step(_lightning.logged_step(trainer))
        self.core.clock.begin()  # the time since the previous batch's end was waiting

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        n = self._sizer(batch)
        step = not self._accumulates or _lightning.closes_optimizer_step(trainer)
        self.core.clock.end(n * self._world if n else 0.0, step)

    @override
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any
    ) -> None:
        self.core.forward_end()  # the arrival timing's forward ends here

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.core.clock.restart()  # the time before the epoch (validation) is no step's

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.core.progress.announce("evaluation")  # no hang: the step waits for it

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.core.clock.restart()  # a validation inside the epoch is no step's either

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Called before the checkpoint is written; the next batch's start ends the phase.
        self.core.progress.announce("checkpoint")

    def _on_step_log(self, trainer: pl.Trainer, step: int, trainer_logs: bool) -> None:
        """Where the trainer decides whether it logs its metrics for ``step`` (every rank)."""
        core = self.core
        if core.logging_interval != "step":
            return
        if core.multi_node:
            # Every rank must take the same decision, from the step alone: the trainer's
            # cadence without its stopping step (``should_stop`` may be one rank's).
            every = _lightning.log_every_n_steps(trainer)
            due = core.due(step + 1, every > 0 and (step + 1) % every == 0)
        else:
            # The trainer's own gate; with our own cadence, the trainer's stopping step.
            due = core.due(step + 1, trainer_logs) or trainer.should_stop
        if due:
            self._log(trainer, step)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.core.logging_interval == "epoch":
            # Epoch-level metrics are logged at the last step of the epoch.
            self._log(trainer, _lightning.logged_step(trainer) - 1)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.core.stop()

    @override
    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.core.stop(failed=True)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.core.stop()

    def _log(self, trainer: pl.Trainer, step: int) -> None:
        snapshot = self.core.point()  # one window, shared by every logger; every rank calls
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            metrics = self.core.named(snapshot, getattr(logger, "group_separator", "/"))
            if metrics:
                logger.log_metrics(metrics, step=step)
