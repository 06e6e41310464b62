"""The transformers internals the transformers callback reads, in one place.

The Trainer calls its callbacks in list order (``CallbackHandler.callbacks``): its
reporters (``report_to``) before the user's callbacks, its console printer
(``ProgressCallback``, or ``PrinterCallback`` with ``disable_tqdm``) after them, and it
does not give a callback that list. These helpers find the list (through the calling
frame), for the callback to move itself to its front, and give the console printers the
logs without our keys (the notebook's progress table, with ``console=True``, the short
keys as columns). The
attributes read have the same meaning from transformers 4.40 to 5.x.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from transformers import Trainer
from transformers.trainer_callback import CallbackHandler, PrinterCallback, ProgressCallback
from transformers.utils import logging as hf_logging

from sysmetrics.callback import calling_frame
from sysmetrics.console_view import CONSOLE_KEYS
from sysmetrics.steptime import StepClock, TimedIterator


def callback_handler() -> tuple[Any, FrameType] | None:
    """From ``on_train_begin``: the Trainer's ``CallbackHandler`` and its training loop frame."""
    return calling_frame(CallbackHandler)


def trainer_of(loop_frame: FrameType) -> Any:
    """The ``Trainer`` whose training loop ``loop_frame`` is (its ``self``), or None."""
    trainer = loop_frame.f_locals.get("self")
    return trainer if isinstance(trainer, Trainer) else None


def filter_console(
    handler: Any, view: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> Callable[[], None]:
    """Give the console printers' ``on_log`` ``view(logs)`` instead of ``logs``.

    Returns:
        A function that removes the wrappers.

    """
    wrapped: list[Any] = []
    for cb in handler.callbacks:
        if _notebook_table(cb) and "on_log" not in vars(cb):
            _show_in_table(cb, view)
            wrapped.append(cb)
            continue
        if not isinstance(cb, (ProgressCallback, PrinterCallback)) or "on_log" in vars(cb):
            continue

        def on_log(
            args: Any, state: Any, control: Any, logs: Any = None, _hook: Any = cb.on_log, **kw: Any
        ) -> Any:
            if logs is None:
                return _hook(args, state, control, logs=logs, **kw)
            shown = view(logs)
            if len(shown) < len(logs) and set(shown) <= {"epoch", "num_input_tokens_seen"}:
                return None  # a log of system metrics alone: nothing to print
            return _hook(args, state, control, logs=shown, **kw)

        cb.on_log = on_log  # type: ignore[method-assign]  # on this instance only
        wrapped.append(cb)

    def undo() -> None:
        for cb in wrapped:
            vars(cb).pop("on_log", None)
            vars(cb).pop("on_evaluate", None)

    return undo


def _notebook_table(cb: Any) -> bool:
    """Whether ``cb`` is transformers' notebook printer (``NotebookProgressCallback``).

    Its module imports IPython, so it is looked up only where the Trainer imported it.
    """
    notebook = sys.modules.get("transformers.utils.notebook")
    table = getattr(notebook, "NotebookProgressCallback", None)
    return table is not None and isinstance(cb, table)


def _show_in_table(cb: Any, view: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
    """Give the notebook's progress table the console's short keys, as columns of its rows.

    ``NotebookProgressCallback`` writes a row of ``Step | Training Loss`` per training
    log (with evaluation: per evaluation, ``Validation Loss`` too) and ignores any other
    key, so with ``console=True`` the short keys ``view(logs)`` adds are written into the
    row of the same step, after the printer wrote it (its ``write_line`` merges them into
    that row, a column each); a row of a step they were not measured at gets none.
    """
    labels = {c.label for c in CONSOLE_KEYS}
    latest: dict[str, Any] = {}  # the short keys of the latest log, and its step

    def merge(state: Any) -> None:
        tracker = getattr(cb, "training_tracker", None)
        table = getattr(tracker, "inner_table", None)
        step = state.global_step
        if tracker is None or not table or len(table) < 2 or latest.get("Step") != step:
            return
        if table[0][0] != "Step" or table[-1][0] != step:
            return  # no row of this step (the table's rows are epochs, or not written yet)
        tracker.write_line(dict(latest))

    def on_log(
        args: Any, state: Any, control: Any, logs: Any = None, _hook: Any = cb.on_log, **kw: Any
    ) -> Any:
        if logs is None:
            return _hook(args, state, control, logs=logs, **kw)
        shown = view(logs)
        keys = {k: v for k, v in shown.items() if k in labels and k not in logs}
        if keys:
            latest.clear()
            latest.update(keys, Step=state.global_step)
        done = _hook(args, state, control, logs=shown, **kw)
        if keys:
            merge(state)
        return done

    def on_evaluate(
        args: Any, state: Any, control: Any, _hook: Any = cb.on_evaluate, **kw: Any
    ) -> Any:
        done = _hook(args, state, control, **kw)
        merge(state)  # the evaluation's row, at the step of the latest log
        return done

    cb.on_log = on_log  # on this instance only
    cb.on_evaluate = on_evaluate


def samples_per_step(trainer: Any, args: Any, state: Any) -> float:
    """Samples one optimizer step trains on over the whole job (0.0 where unknown).

    The Trainer's own ``get_total_train_batch_size(args)`` (transformers 5: micro-batch x
    ``gradient_accumulation_steps`` x the data-parallel world size, without tensor,
    context and sequence parallel ranks) where there is one; else ``state.train_batch_size``
    (the micro-batch ``auto_find_batch_size`` settled on) or
    ``per_device_train_batch_size``, x ``gradient_accumulation_steps`` x ``world_size``.
    Nominal: a short last batch of an epoch counts as a whole one.
    """
    total = getattr(trainer, "get_total_train_batch_size", None)
    if callable(total):
        try:
            return float(total(args))
        except Exception:  # a Trainer subclass's override failed: the formula below
            pass
    micro = getattr(state, "train_batch_size", None) or args.per_device_train_batch_size
    return float(micro * args.gradient_accumulation_steps * max(args.world_size, 1))


def say(line: str) -> None:
    """A line through transformers' logging, at WARNING.

    WARNING is the level its console shows by default (INFO is hidden unless the user
    raised the verbosity).
    """
    hf_logging.get_logger("transformers.trainer").warning(line)


def time_fetch(trainer: Any, clock: StepClock) -> Callable[[], None] | None:
    """Time the training loop's fetch of each batch on ``clock`` (``clock.fetched``).

    The Trainer's loop fetches each optimizer step's micro-batches with
    ``self.get_batch_samples(epoch_iterator, num_batches, ...)`` (transformers 4.46 to
    5.x), ``epoch_iterator`` being ``iter()`` of the train dataloader for the epoch.
    Wrapping that method on this Trainer instance hands it a
    :class:`~sysmetrics.steptime.TimedIterator` over the same iterator (one per epoch),
    so each ``next()`` is timed and nothing else of the method (counting the items of
    the batches) is.

    Returns:
        A function that removes the wrapper; None where the Trainer has no such method
        (the callback then measures the time between the step hooks, as the docs say).

    """
    original = getattr(trainer, "get_batch_samples", None)
    if not callable(original) or "get_batch_samples" in vars(trainer):
        return None
    timed: list[Any] = [None, None]  # the epoch's iterator, its timed wrapper

    def get_batch_samples(epoch_iterator: Any, *args: Any, **kwargs: Any) -> Any:
        if epoch_iterator is not timed[0]:
            timed[:] = epoch_iterator, TimedIterator(epoch_iterator, clock)
        return original(timed[1], *args, **kwargs)

    trainer.get_batch_samples = get_batch_samples
    clock.timed = True

    def undo() -> None:
        vars(trainer).pop("get_batch_samples", None)
        timed[:] = None, None

    return undo
