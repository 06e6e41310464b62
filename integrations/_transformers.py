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

from sysmetrics.callback import calling_frame


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
