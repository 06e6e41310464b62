"""A key's mean over a run's samples, each sample counted as the key's description says.

The one home of the rule the monitor's readers follow live (:meth:`Reader._fold
<sysmetrics.reader.Reader._fold>` with :attr:`StepCollector.weights
<sysmetrics.steptime.StepCollector.weights>`), for a run file: the report's summary
table and the findings average a key with :func:`weighted_mean`, so the page's table
and its findings say the same number.

A sample's step keys stand for the steps completed since the previous sample with step
keys, and for those steps' seconds (steps times ``step.seconds``). A run file records
how many (a sample line's ``steps``, the step clock's own count); for files written
before it did, :func:`sample_weights` derives them from the samples' ``step`` marks
(their growth), which are off by one where a sample fell between two steps: the marks
name the step being trained, the clock counts the steps ended. With a step a sample or
so, that was a slow window weighed as twice its steps, or as the median window's.
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Iterable, Sequence
from typing import Optional

from sysmetrics.descriptions import Weight, weight
from sysmetrics.runfile import Run
from sysmetrics.runview import RunView

_NAN = float("nan")
_PER_STEP = "step.seconds"  # the step key every sample that closed a step has


def sample_weights(run: Run, how: Weight) -> list[float]:
    """What each sample of ``run`` counts in a mean of a key weighted ``how``.

    ``sample``: 1 each. ``steps``: the steps a sample with ``step.seconds`` stands for:
    what its line says (``steps``), else the growth of ``step`` since the previous such
    sample of its node's recording (steps
    restart with a recording, and nodes' samples interleave), for the first such sample
    since the latest sample before it with a mark; where that is unknown (no mark before
    it, a step that went back) the median of the others (1 where there are none).
    ``step_seconds``: those steps times ``step.seconds`` (s). NaN for a sample without
    ``step.seconds`` (it closed no step), for either. A run
    with no ``step.seconds`` at all (a file another tool wrote, a gather's node without
    it) says nothing of its steps: 1 each, as the readers count a key given no weight.
    """
    per_step = run.columns.get(_PER_STEP)
    if how == "sample" or per_step is None:
        return [1.0] * len(run)
    segment = RunView(run).segment  # the recordings, as every reader tells them apart
    return row_weights(run.step, per_step, list(zip(run.node, segment)), how, run.steps)


def row_weights(
    steps: Sequence[Optional[int]],
    per_step: Sequence[float],
    parts: Optional[Sequence[Hashable]],
    how: Weight,
    closed: Optional[Sequence[Optional[float]]] = None,
) -> list[float]:
    """:func:`sample_weights` of rows: their ``steps``, ``step.seconds`` (NaN: none), parts.

    ``parts`` says which rows share a step count (a node's recording; None: all do).
    ``closed``: the steps each row stands for where known (a run file's ``steps``; None
    where not), used before the marks' growth.
    The one rule, for a run file's samples and for the live store's rows (which folds
    the ``step.*`` keys of two rows by these weights).
    """
    n = len(steps)
    if how == "sample":
        return [1.0] * n
    out = [_NAN] * n
    timed = []
    previous: dict[Hashable, int] = {}  # each node's recording's last step
    marked: dict[Hashable, int] = {}  # ... at any sample, before the first
    for j in range(n):
        here, part = steps[j], None if parts is None else parts[j]
        if per_step[j] != per_step[j]:  # NaN: no step closed here
            if here is not None and part not in previous:
                marked[part] = here
            continue
        timed.append(j)
        before = previous.get(part, marked.get(part))
        count = None if closed is None else closed[j]
        if count is not None and count > 0:
            out[j] = float(count)
        elif before is not None and here is not None and here > before:
            out[j] = float(here - before)
        if here is not None:
            previous[part] = here
    known = [out[j] for j in timed if out[j] == out[j]]
    fill = statistics.median(known) if known else 1.0
    for j in timed:
        if out[j] != out[j]:
            out[j] = fill
    if how == "steps":
        return out
    return [s * per_step[j] if s == s else _NAN for j, s in enumerate(out)]


def weighted_mean(run: Run, key: str, samples: Optional[Iterable[int]] = None) -> float:
    """The mean of ``key`` over ``samples`` of ``run`` (all where None), NaN without any.

    Each sample's value counts as the key's
    :attr:`~sysmetrics.descriptions.Description.weight` says (:func:`sample_weights`),
    as the monitor's readers count it in a window: ``step.dataWaitPercent`` by the
    seconds of the steps each sample closed, so time outside steps (a pause between
    epochs, a slow tick) weighs nothing. Samples without a value or a positive weight
    are left out.
    """
    values = run.columns.get(key)
    if values is None:
        return _NAN
    weights = sample_weights(run, weight(key))
    total = held = 0.0
    for j in range(len(values)) if samples is None else samples:
        v, w = values[j], weights[j]
        if v == v and w > 0:  # NaN compares false
            total += v * w
            held += w
    return total / held if held > 0 else _NAN
