"""Keras 3 (any backend): ``model.fit(..., callbacks=[SystemMetricsCallback()])``."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable
from typing import Any

import keras
from keras.callbacks import CallbackList, ProgbarLogger

from sysmetrics.callback import CallbackCore, caller_self


class SystemMetricsCallback(keras.callbacks.Callback):  # type: ignore[misc]  # untyped keras
    """Add system metrics to the ``logs`` that ``fit`` passes along its callbacks.

    At every epoch end the metrics join the epoch ``logs``, so ``History``, ``CSVLogger``
    and the ``TensorBoard`` callback (``epoch_*``) record them. With
    ``logging_interval="step"`` they also join the batch ``logs`` every
    ``log_every_n_steps`` batches (default 1), which ``TensorBoard(update_freq=...)``
    writes as ``batch_*``. Keras hands one ``logs`` dict from callback to callback, so when
    training starts this callback moves itself to the front of the list (after the progress
    bar, which keeps its usual line); its position in ``callbacks=[...]`` does not matter.
    The same keys are present from the first epoch on; ``CSVLogger`` fixes its columns
    then, so a key that appears only later (a collector added mid-run) is not in its file.

    The monitor starts in ``on_train_begin`` and stops in ``on_train_end``. ``fit`` has no
    failure hook, so when a training step raises the monitor stops at once (the callback
    wraps the model's ``train_function`` for the run), and when anything else in ``fit``
    raises (data, another callback) it stops once ``fit``'s callback list is freed, that is
    when the exception has been handled.

    Keys: every key of :class:`sysmetrics.SystemMonitor`, after ``prefix``.

    Args:
        interval: seconds between samples.
        logging_interval: ``"epoch"`` (default) or ``"step"``.
        log_every_n_steps: with ``"step"``, add to every this many batches (default 1).
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
        logging_interval: str = "epoch",
        log_every_n_steps: int | None = None,
        prefix: str = "system/",
        include: str | Iterable[str] | None = None,
        exclude: str | Iterable[str] | None = None,
        **monitor_options: Any,
    ) -> None:
        super().__init__()
        self.core = CallbackCore(
            interval, logging_interval, log_every_n_steps, prefix, include, exclude,
            **monitor_options,
        )  # fmt: skip
        self._steps = 0
        self._run = 0
        self._unwrap: Any = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._run += 1
        callbacks = caller_self(CallbackList)
        if callbacks is not None:
            cbs = callbacks.callbacks
            front = sum(1 for cb in cbs[: cbs.index(self)] if isinstance(cb, ProgbarLogger))
            cbs.remove(self)
            cbs.insert(front, self)
            # fit() has no failure hook: when its callback list is freed, an exception
            # that skipped on_train_end has ended this run.
            weakref.finalize(callbacks, self._end_run, self._run)
        self._steps = 0
        self.core.start()
        self._wrap_train_function()

    def _end_run(self, run: int) -> None:
        if run == self._run:
            self._stop()

    def _wrap_train_function(self) -> None:
        model = self.model
        original = getattr(model, "train_function", None)
        if original is None:
            return

        @functools.wraps(original)
        def train_function(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException:
                self._stop()
                raise

        model.train_function = train_function
        self._unwrap = (model, original)

    def _stop(self) -> None:
        self.core.stop()
        if self._unwrap is not None:
            model, original = self._unwrap
            model.train_function = original
            self._unwrap = None

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._steps += 1
        if logs is not None and self.core.due(self._steps, True):
            logs.update(self.core.metrics())

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is not None:
            logs.update(self.core.metrics())

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._stop()
