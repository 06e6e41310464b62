"""Notice that a training call has ended without telling its callbacks.

transformers' ``Trainer.train()`` and Keras' ``fit()`` have no failure hook: when they
raise, ``on_train_end`` never comes. The frame of the training loop that called the
callbacks is then no longer on its thread's stack (even while a traceback, a notebook's
``sys.last_traceback`` say, keeps the frame object alive). One daemon thread polls the
stacks of the watched threads every :data:`POLL` seconds and calls ``on_end`` for each
watched frame that has left its stack; it ends when nothing is watched.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("sysmetrics")

POLL = 0.2  # seconds between two looks at the watched stacks

_lock = threading.Lock()
_watches: dict[int, tuple[FrameType, int, Callable[[], None]]] = {}
_thread: threading.Thread | None = None
_next_id = 0


def watch(frame: FrameType, on_end: Callable[[], None]) -> Callable[[], None]:
    """Call ``on_end`` (on the watcher thread) once ``frame`` has left the current thread.

    Returns:
        A function that cancels the watch; after it returns ``on_end`` is not called.

    """
    global _thread, _next_id
    with _lock:
        _next_id += 1
        key = _next_id
        _watches[key] = (frame, threading.get_ident(), on_end)
        if _thread is None:
            thread = threading.Thread(target=_run, name="sysmetrics-watch", daemon=True)
            try:
                thread.start()
            except BaseException:  # can't start new thread: no watch, and none left half-made
                del _watches[key]
                raise
            _thread = thread

    def cancel() -> None:
        with _lock:
            _watches.pop(key, None)

    return cancel


def _on_stack(top: FrameType | None, frame: FrameType) -> bool:
    while top is not None:
        if top is frame:
            return True
        top = top.f_back
    return False


def _run() -> None:
    global _thread
    stop = threading.Event()  # never set: a wait that does not hold up interpreter exit
    while True:
        with _lock:
            if not _watches:
                _thread = None
                return
            items = list(_watches.items())
        tops = sys._current_frames()
        ended = [
            (key, on_end)
            for key, (frame, ident, on_end) in items
            if not _on_stack(tops.get(ident), frame)
        ]
        del tops, items
        for key, on_end in ended:
            with _lock:
                live = _watches.pop(key, None) is not None
            if live:
                try:
                    on_end()
                except Exception:
                    log.debug(
                        "sysmetrics: ending a run after its training call failed", exc_info=True
                    )
        del ended
        stop.wait(POLL)


def _after_fork_in_child() -> None:
    global _lock, _thread
    _lock = threading.Lock()
    _thread = None
    _watches.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
