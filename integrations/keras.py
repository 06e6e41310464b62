"""Keras 3 (any backend): ``model.fit(..., callbacks=[SystemMetricsCallback()])``."""

from __future__ import annotations

from typing import Any

import keras
from typing_extensions import Unpack

from sysmetrics.callback import CallbackCore, RunResults, move_to_front
from sysmetrics.options import CallbackOptions
from sysmetrics.reader import Reader

from . import _keras


class SystemMetricsCallback(RunResults, keras.callbacks.Callback):  # type: ignore[misc]  # untyped keras
    """Add system metrics to the ``logs`` that ``fit`` passes along its callbacks.

    At every epoch end the metrics join the epoch ``logs``, so ``History``, ``CSVLogger``
    and the ``TensorBoard`` callback (``epoch_*``) record them. With
    ``logging_interval="step"`` they also join the batch ``logs`` every
    ``log_every_n_steps`` batches (default 1; counted in batches, also when
    ``steps_per_execution`` runs several per call), which ``TensorBoard(update_freq=...)``
    writes as ``batch_*``. Keras hands one ``logs`` dict from callback to callback, so when
    training starts this callback moves itself to the front of the list: its position in
    ``callbacks=[...]`` does not matter. The progress bar shows ``logs`` without the system
    metrics, as it would without this callback; ``console=True`` adds the console's six
    short keys (``cpu``, ``mem``, ``gpu``, ``gmem``, ``s/step``, ``wait``). The same keys are
    present from the first epoch on; ``CSVLogger`` fixes its columns then, so a key that
    appears only later (a collector added mid-run) is not in its file.

    The monitor starts in ``on_train_begin`` and stops in ``on_train_end``. ``fit`` has no
    failure hook: when it raises (a training step, the data, another callback), the
    monitor stops within about 0.2 s of ``fit`` leaving the stack, even while the
    traceback is kept (a notebook keeps the last one).

    Keys: every key of :class:`sysmetrics.SystemMonitor`, after ``prefix``, and the
    ``step.*`` keys (:mod:`sysmetrics.steptime`) from its hooks: a step from
    ``on_train_batch_begin`` to ``on_train_batch_end`` (with the optimizer's
    ``gradient_accumulation_steps``, to the batch that applies the update); ``fit``'s
    fetch of each batch (timed by wrapping its epoch iterator's, torch and JAX backends)
    is waiting for data and the rest of the time between the hooks overhead; the samples
    are the batch size ``fit`` uses, where its data adapter knows it.

    Args:
        **options: the callback's options and :class:`sysmetrics.SystemMonitor`'s, each
            declared once in :data:`sysmetrics.options.OPTIONS` (type, default, help). Here
            ``logging_interval`` is ``"epoch"`` by default, with ``"step"``
            ``log_every_n_steps`` counts batches (default 1), ``console=True`` shows the
            console's short keys in the progress bar, and ``run_file`` takes a path (Keras
            has no run log directory for ``True``).

    Raises:
        TypeError, ValueError: an invalid option, at construction.

    """

    def __init__(self, **options: Unpack[CallbackOptions]) -> None:
        super().__init__()
        self.core = CallbackCore(
            owner=type(self).__name__,
            run_dirs=False,
            defaults={"logging_interval": "epoch"},
            **options,
        )
        self._batches = 0  # batches trained in this fit, at the end of the previous call
        self._epoch_start = 0  # ... at the start of this epoch
        self._per_call = 1  # batches per on_train_batch_end call
        self._steps: int | None = None  # batches per epoch, where Keras knows
        self._epochs: Reader | None = None  # with "step": the epochs' own windows
        self._sizes: _keras.BatchSizes | None = None  # fit's batch size, where known
        self._accumulate = 1  # the optimizer's gradient_accumulation_steps
        self._micro = 0  # batches the optimizer had been applied to before this fit

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._batches = self._epoch_start = 0
        # With ``steps_per_execution=k`` there is one call per k batches.
        self._per_call = _keras.batches_per_call(self.model)
        self._steps = (self.params or {}).get("steps")
        optimizer = getattr(self.model, "optimizer", None)
        self._accumulate = int(getattr(optimizer, "gradient_accumulation_steps", None) or 1)
        self._micro = _keras.micro_batches(optimizer) if self._accumulate > 1 else 0
        self._sizes = None
        found = _keras.callback_list()
        if found is None:
            # The first batch's step, as on_train_batch_begin stamps it.
            self.core.start(step=1, say=_keras.say)
        else:
            callbacks, fit_frame = found
            self._sizes = _keras.BatchSizes(fit_frame, self._steps)
            move_to_front(callbacks.callbacks, self)
            undo = [_keras.filter_progress_bars(callbacks, self.core.console_logs)]

            def cleanup() -> None:
                for u in undo:
                    u()

            self.core.start(watch=fit_frame, cleanup=cleanup, step=1, say=_keras.say)
            # fit's fetch of each batch, timed on this run's clock: the wait for data apart
            # from the rest of the time between the batch hooks (other callbacks, ...).
            if (untime := _keras.time_fetch(fit_frame, self.core.clock)) is not None:
                undo.append(untime)
        # Batch points start a new window of the run's reader each time; the epoch values
        # come from a reader of their own, so they cover the whole epoch and keep its peak.
        step = self.core.logging_interval == "step"
        self._epochs = self.core.extra_reader() if step else None

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_start = self._batches
        self.core.clock.restart()

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        # fit's validation (and evaluate): no hang, the step waits for it; the next
        # training batch ends the phase.
        self.core.progress.announce("evaluation")

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.core.set_step(self._batches + 1)  # the batch being trained, for the run file
        self.core.clock.begin()  # the time since the previous call's end was waiting

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        start = self._epoch_start
        done = start + _keras.batches_done(batch, self._per_call, self._steps)
        before, self._batches = self._batches, done
        self._mark_steps(before, done)
        if logs is None or self.core.logging_interval != "step":
            return
        n = self.core.log_every_n_steps or 1
        if done // n > before // n:  # a multiple of n among the batches of this call
            logs.update(self.core.metrics())

    def _mark_steps(self, before: int, done: int) -> None:
        """End the call that trained this fit's batches ``before`` to ``done`` (excluded).

        One call trains ``steps_per_execution`` batches; with the optimizer's
        ``gradient_accumulation_steps=g`` the batches that bring its count to a multiple
        of g close the optimizer steps. A call that closes several marks its time as the
        first's (the others end at once): the mean over the steps is the same.
        """
        sizes, clock, g = self._sizes, self.core.clock, self._accumulate
        start = self._epoch_start
        samples = sizes.samples(before - start, done - start) if sizes is not None else 0
        steps = (self._micro + done) // g - (self._micro + before) // g  # done - before: g=1
        clock.end(samples, steps > 0)
        for _ in range(steps - 1):
            clock.end()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is not None:
            # Epoch logs keep the latest values where the epoch had no sample: CSVLogger
            # fixed its columns at the first epoch and would write "NA" in them.
            logs.update(self.core.metrics(reader=self._epochs, repeat=True))

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._epochs = None
        self.core.stop()
