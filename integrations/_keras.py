"""The Keras internals the Keras callback reads, in one place.

Keras hands every callback one ``logs`` dict in list order and does not give a callback
the list it is in; it appends its ``ProgbarLogger`` after the user's callbacks. These
helpers find that list (through the calling frame), for the callback to move itself to
its front, and keep the progress bar's view of ``logs`` as it would be without
sysmetrics. ``CallbackList.callbacks`` and ``ProgbarLogger``'s two hooks have the same
meaning from Keras 3.0 to 3.15.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

import keras
from keras.callbacks import CallbackList, ProgbarLogger

from sysmetrics.callback import calling_frame
from sysmetrics.steptime import StepClock, TimedIterator

# With ``steps_per_execution=k`` (JAX, TensorFlow) ``fit`` calls ``on_train_batch_end``
# once per k batches, passing the index of the first batch of the k before Keras 3.11 and
# of the last one (which overshoots on a short last chunk) from 3.11 on.
_VERSION = re.match(r"(\d+)\.(\d+)", keras.__version__)
_PASSES_LAST_BATCH = _VERSION is None or (int(_VERSION[1]), int(_VERSION[2])) >= (3, 11)


def batches_per_call(model: Any) -> int:
    """How many batches one ``on_train_batch_end`` call stands for (``steps_per_execution``)."""
    return int(getattr(model, "steps_per_execution", 1) or 1)


def batches_done(batch: int, per_call: int, steps: int | None) -> int:
    """Batches of the epoch trained when ``on_train_batch_end(batch)`` is called.

    Args:
        batch: the index Keras passes.
        per_call: :func:`batches_per_call` of the model.
        steps: batches in an epoch (``params["steps"]``), None when unknown.

    """
    done = batch + 1 if _PASSES_LAST_BATCH else batch + per_call
    return min(done, steps) if steps else done


class BatchSizes:
    """The samples in ``fit``'s batches, from its data adapter.

    ``fit`` keeps its data in a local ``epoch_iterator`` (every backend's ``fit``, Keras
    3.0 to 3.15) whose ``data_adapter`` knows the batch size: the ``batch_size`` given to
    ``fit`` for arrays, a ``DataLoader``'s or a batched ``tf.data.Dataset``'s own, and
    None for generators and ``PyDataset`` (whose batches are the user's). The last batch
    of the data may be short (``partial_batch_size``).

    Args:
        fit_frame: the frame of ``fit`` (from :func:`callback_list`).
        steps: batches per epoch (``params["steps"]``).

    """

    __slots__ = ("batch", "last", "partial")

    def __init__(self, fit_frame: FrameType, steps: int | None) -> None:
        adapter = getattr(fit_frame.f_locals.get("epoch_iterator"), "data_adapter", None)
        size = getattr(adapter, "batch_size", None)
        self.batch = int(size) if isinstance(size, int) and size > 0 else 0  # 0: unknown
        partial = getattr(adapter, "partial_batch_size", None) if self.batch else None
        # The short batch ends each epoch only where an epoch is one pass over the data.
        whole_passes = steps is not None and steps == getattr(adapter, "num_batches", None)
        short = isinstance(partial, int) and 0 < partial < self.batch and whole_passes
        self.last: int | None = steps if short else None  # the epoch's batches, if short
        self.partial = int(partial) if short and partial is not None else 0

    def samples(self, first: int, done: int) -> int:
        """Samples in the epoch's batches ``first`` (0-based) up to ``done`` (excluded)."""
        n = (done - first) * self.batch
        if self.last is not None and done == self.last and done > first:
            n -= self.batch - self.partial
        return n


def micro_batches(optimizer: Any) -> int:
    """Batches the optimizer has been applied to (``optimizer._iterations``), read once.

    With ``gradient_accumulation_steps=g`` Keras updates the weights at the batch that
    brings this count to a multiple of g (``BaseOptimizer.apply``); the public
    ``iterations`` counts updates only. 0 where it cannot be read.
    """
    try:
        return int(keras.ops.convert_to_numpy(optimizer._iterations))
    except Exception:  # an optimizer without the counter: count from this fit
        return 0


def callback_list() -> tuple[Any, FrameType] | None:
    """From a callback's ``on_train_begin``: ``fit``'s ``CallbackList`` and ``fit``'s frame."""
    return calling_frame(CallbackList)


def filter_progress_bars(
    callbacks: Any, view: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> Callable[[], None]:
    """Give each ``ProgbarLogger`` in ``callbacks`` ``view(logs)`` instead of ``logs``.

    Wraps the two hooks that print training logs (``on_train_batch_end``,
    ``on_epoch_end``) on the progress bar instances of this run.

    Returns:
        A function that removes the wrappers.

    """
    wrapped: list[Any] = []
    for cb in callbacks.callbacks:
        if not isinstance(cb, ProgbarLogger) or "on_epoch_end" in vars(cb):
            continue
        on_batch, on_epoch = cb.on_train_batch_end, cb.on_epoch_end

        def on_train_batch_end(batch: int, logs: Any = None, _hook: Any = on_batch) -> None:
            _hook(batch, view(logs) if logs is not None else logs)

        def on_epoch_end(epoch: int, logs: Any = None, _hook: Any = on_epoch) -> None:
            _hook(epoch, view(logs) if logs is not None else logs)

        cb.on_train_batch_end, cb.on_epoch_end = on_train_batch_end, on_epoch_end
        wrapped.append(cb)

    def undo() -> None:
        for cb in wrapped:
            vars(cb).pop("on_train_batch_end", None)
            vars(cb).pop("on_epoch_end", None)

    return undo


def say(line: str) -> None:
    """A line where Keras prints its own.

    That is stdout, or absl logging where the user turned interactive logging off
    (private ``keras.src.utils.io_utils.print_msg``; ``print`` where it has moved).
    """
    try:
        from keras.src.utils.io_utils import print_msg
    except ImportError:  # moved in another Keras version
        print(line, flush=True)
        return
    print_msg(line)


def time_fetch(fit_frame: FrameType, clock: StepClock) -> Callable[[], None] | None:
    """Time ``fit``'s fetch of each batch on ``clock`` (``clock.fetched``).

    ``fit``'s local ``epoch_iterator`` (an ``EpochIterator``, Keras 3.0 to 3.15) makes
    each epoch's iterator over the data with its ``_get_iterator()`` and calls ``next()``
    on it: between the batch hooks with the torch backend, inside the train function
    with JAX (both are waiting for data to the clock). Wrapping that method on this
    instance makes it a :class:`~sysmetrics.steptime.TimedIterator`. Not with
    TensorFlow, whose train function consumes a ``tf.data`` iterator in a graph.

    Returns:
        A function that removes the wrapper; None where it cannot be installed (the
        callback then measures the time between the batch hooks, as the docs say).

    """
    if keras.backend.backend() not in ("torch", "jax"):
        return None
    epochs: Any = fit_frame.f_locals.get("epoch_iterator")
    original = getattr(epochs, "_get_iterator", None)
    if not callable(original) or "_get_iterator" in vars(epochs):
        return None

    def _get_iterator(*args: Any, **kwargs: Any) -> Any:  # Keras 3.0 passes return_type
        made = original(*args, **kwargs)
        try:
            return TimedIterator(iter(made), clock)
        except TypeError:  # not an iterator we can wrap: fit's own, untimed
            return made

    epochs._get_iterator = _get_iterator
    clock.timed = True
    return lambda: vars(epochs).pop("_get_iterator", None)
