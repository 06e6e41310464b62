"""What timing the loop's batch fetch adds per step (issue 32 item 3), side by side.

Run: ``python benchmarks/fetch_cost.py``. The callbacks time each batch's fetch by
wrapping the framework's iterator over the train dataloader: a
:class:`~sysmetrics.steptime.TimedIterator` (transformers, Keras) or a
:class:`~sysmetrics.steptime.FetchTimer`'s two calls around the fetch (Lightning's data
fetcher hooks). Each row times the same iterator per batch, bare and through the
wrapping, in alternating rounds (median of the rounds): the batches of a real
``torch.utils.data.DataLoader`` held in a list (so that the fetch itself costs nothing
and the wrapping's own cost shows), then the ``DataLoader`` itself (an in-memory
dataset, batches of 16, ``num_workers=0``: the cheapest real fetch, for scale); and
the clock's begin/end pair with the fetch timed and not. ``added`` is the
difference: the per-step cost of the wrapping. Figures only; nothing here passes or
fails.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from sysmetrics.steptime import FetchTimer, StepClock, TimedIterator

BATCHES = 2_000
ROUNDS = 9


def loader() -> DataLoader[Any]:
    data = TensorDataset(torch.randn(BATCHES * 16, 8), torch.randn(BATCHES * 16, 1))
    return DataLoader(data, batch_size=16)


def per_batch(make: Callable[[], Iterator[Any]], n: int = BATCHES) -> float:
    """µs per ``next()`` over one pass of the loader."""
    it = make()
    t = time.perf_counter()
    for _ in it:
        pass
    return (time.perf_counter() - t) / n * 1e6


def hooked(dl: Iterable[Any], timer: FetchTimer) -> Iterator[Any]:
    """Lightning's shape: the fetcher calls two hooks around ``next()`` on the iterator."""
    it = iter(dl)
    while True:
        timer.before()
        try:
            batch = next(it)
        except StopIteration:
            return
        finally:
            timer.after()
        yield batch


def bare_hooks(dl: Iterable[Any]) -> Iterator[Any]:
    """The same loop with the fetcher's hooks as Lightning has them (doing nothing)."""
    nothing = type(None)
    it = iter(dl)
    while True:
        nothing()
        try:
            batch = next(it)
        except StopIteration:
            return
        finally:
            nothing()
        yield batch


def clock_pair(timed: bool, n: int = 100_000) -> float:
    """µs per ``begin()`` + ``end()`` (and the fetch's ``fetched()`` where timed)."""
    clock = StepClock()
    clock.timed = timed
    clock.restart()
    t = time.perf_counter()
    for _ in range(n):
        if timed:
            clock.fetched(1e-5)
        clock.begin()
        clock.end(16.0)
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    torch.set_num_threads(1)
    dl = loader()
    clock = StepClock()
    clock.timed = True
    clock.restart()
    held = list(dl) * 50  # 100000 batches: the fetch costs nothing
    n = len(held)
    rows: list[tuple[str, Callable[[], float], Callable[[], float]]] = [
        (
            "iterator, held (hf, keras)",
            lambda: per_batch(lambda: iter(held), n),
            lambda: per_batch(lambda: TimedIterator(iter(held), clock), n),
        ),
        (
            "hooks, held (lightning)",
            lambda: per_batch(lambda: bare_hooks(held), n),
            lambda: per_batch(lambda: hooked(held, FetchTimer(clock)), n),
        ),
        (
            "iterator, DataLoader",
            lambda: per_batch(lambda: iter(dl)),
            lambda: per_batch(lambda: TimedIterator(iter(dl), clock)),
        ),
        (
            "hooks, DataLoader",
            lambda: per_batch(lambda: bare_hooks(dl)),
            lambda: per_batch(lambda: hooked(dl, FetchTimer(clock))),
        ),
        ("clock begin+end", lambda: clock_pair(False), lambda: clock_pair(True)),
    ]
    print(f"{'per step':<26}{'bare µs':>10}{'wrapped µs':>12}{'added µs':>10}")
    for name, bare, wrapped in rows:
        off, on = [], []
        for _ in range(ROUNDS):
            off.append(bare())
            on.append(wrapped())
        a, b = statistics.median(off), statistics.median(on)
        print(f"{name:<26}{a:10.2f}{b:12.2f}{b - a:10.2f}")
    print(f"median of {ROUNDS} alternating rounds (held: {n} batches; DataLoader: {BATCHES};")
    print("the clock: 100000 steps); added: the wrapping's cost per step (one batch)")


if __name__ == "__main__":
    main()
