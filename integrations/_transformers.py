"""The transformers internals the transformers callback reads, in one place.

The Trainer calls its callbacks in list order (``CallbackHandler.callbacks``): its
reporters (``report_to``) before the user's callbacks, its console printer
(``ProgressCallback``, or ``PrinterCallback`` with ``disable_tqdm``) after them, and it
does not give a callback that list. These helpers find the list (through the calling
frame), for the callback to move itself to its front, and give the console printers the
logs without our keys. The
attributes read have the same meaning from transformers 4.40 to 5.x.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from transformers import Trainer
from transformers.trainer_callback import CallbackHandler, PrinterCallback, ProgressCallback
from transformers.utils import logging as hf_logging

from sysmetrics.callback import calling_frame
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

    return undo


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
