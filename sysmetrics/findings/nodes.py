"""The cross-node rule: ``straggler-node``, over each node's series (see :func:`node_runs`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional

from sysmetrics.descriptions import family
from sysmetrics.findings._base import (
    MIN_SAMPLES,
    Finding,
    Rule,
    Subject,
    duration,
    gpu_indices,
    mean,
    node_runs,
    present,
    threshold,
    view,
)
from sysmetrics.findings.machine import THROTTLE_REASONS, THROTTLE_SHARE, swap_rise, throttled
from sysmetrics.findings.training import (
    INPUT_CPU_PERCENT,
    INPUT_SHARE,
    WAIT_KEY,
    _wait_weights,
)
from sysmetrics.runfile import Run
from sysmetrics.weights import weighted_mean

STRAGGLER_WAIT_POINTS = 15.0  # points: a node's data wait above the other nodes' median by this
STRAGGLER_RATIO = 1.5  # a node's seconds per step this many times the other nodes' median
STRAGGLER_POINTS = 25.0  # without step keys: percentage points from the median node's mean
STRAGGLER_MIN_NODES = 3  # without step keys: nodes needed to name one the odd one out


@dataclass(frozen=True)
class StragglerThresholds:
    """``straggler-node``'s thresholds (defaults: the module's constants and the ones it shares)."""

    wait_points: float = threshold(
        STRAGGLER_WAIT_POINTS,
        "STRAGGLER_WAIT_POINTS",
        "points",
        "a node's data wait above the other nodes' median by this",
    )
    ratio: float = threshold(
        STRAGGLER_RATIO,
        "STRAGGLER_RATIO",
        "times",
        "a node's seconds per step this many times the others' median",
    )
    points: float = threshold(
        STRAGGLER_POINTS,
        "STRAGGLER_POINTS",
        "points",
        "without step keys: a node's mean this far from the median's",
    )
    min_nodes: float = threshold(
        STRAGGLER_MIN_NODES,
        "STRAGGLER_MIN_NODES",
        "nodes",
        "without step keys: nodes needed to name the odd one out",
    )
    cpu_percent: float = threshold(
        INPUT_CPU_PERCENT,
        "INPUT_CPU_PERCENT",
        "%",
        "evidence: the node's cpu above this (saturated) ...",
    )
    cpu_share: float = threshold(
        INPUT_SHARE, "INPUT_SHARE", "share", "... in at least this share of its samples"
    )
    throttle_share: float = threshold(
        THROTTLE_SHARE,
        "THROTTLE_SHARE",
        "share",
        "evidence: a GPU throttled in more than this share of samples",
    )


STRAGGLER = StragglerThresholds()

_NODE_FAMILIES = {"cpu": "cpu", "gpu.{i}.gpu": "gpu"}  # per node: the job's CPU, each GPU


def _others(values: dict[int, float], node: int) -> float:
    return statistics.median(v for k, v in values.items() if k != node)


def _explain(part: Run, t: StragglerThresholds) -> tuple[list[str], dict[str, float]]:
    """What the node's own numbers say: CPU saturation, throttling, swap."""
    said: list[str] = []
    evidence: dict[str, float] = {}
    cpu = present(part.columns.get("cpu"), range(len(part)))
    if len(cpu) >= MIN_SAMPLES:
        busy = sum(1 for v in cpu if v > t.cpu_percent) / len(cpu)
        evidence["cpu_percent_mean"] = statistics.fmean(cpu)
        if busy >= t.cpu_share:
            said.append(f"its CPU was above {t.cpu_percent:.0f} % in {busy:.0%} of its samples")
            evidence["cpu_saturated_share"] = busy
    for i in gpu_indices(part.columns):
        for reason, share in throttled(part, i).items():
            if share > t.throttle_share:
                said.append(f"its GPU {i} was slowed by {THROTTLE_REASONS[reason]} in {share:.0%}")
                evidence[f"gpu{i}_throttle_{reason}_share"] = share
    first, peak, risen = swap_rise(part)
    if risen:
        said.append(f"its swap use rose from {first:.0f} % to {peak:.0f} %")
        evidence["swap_peak_percent"] = peak
    return said, evidence


def _finding(
    part: Run, node: int, what: str, evidence: dict[str, float], t: StragglerThresholds
) -> Finding:
    said, more = _explain(part, t)
    why = f"; on that node {', '.join(said)}" if said else ""
    return Finding(
        "straggler-node",
        f"Node {node} held the others back: {what}{why}.",
        {"node": float(node), **evidence, **more},
        view(part).span(range(len(part))),
        Subject("node", str(node)),
    )


def _step_seconds(part: Run, own_steps: bool) -> Optional[float]:
    """The node's median seconds per step: ``step.seconds``, else between its step changes."""
    keyed = present(part.columns.get("step.seconds"), range(len(part)))
    values = keyed or ([p.seconds for p in view(part).paces] if own_steps else [])
    return statistics.median(values) if len(values) >= MIN_SAMPLES else None


def straggler_node(run: Run, t: StragglerThresholds = STRAGGLER) -> list[Finding]:
    """``straggler-node``: the node that holds the others back, with its evidence.

    By data wait (synchronous training: every node's step lasts as long as the slowest
    node's, and the straggler is the one waiting for its data), else by seconds per step
    (nodes running apart), else, without step keys, the outlier in the machine numbers.
    """
    nodes, gathered = node_runs(run)
    if len(nodes) < 2:
        return []
    had_steps = False
    waits = {}
    for k, part in nodes.items():
        if len(_wait_weights(part)) >= MIN_SAMPLES:
            waits[k] = weighted_mean(part, WAIT_KEY)
    if len(waits) >= 2:
        had_steps = True
        node = max(waits, key=lambda k: waits[k])
        others = _others(waits, node)
        if waits[node] - others > t.wait_points:
            return [
                _finding(
                    nodes[node],
                    node,
                    f"it spent {waits[node]:.0f} % of its step time waiting for data, the "
                    f"other nodes {others:.0f} % (they wait for it in the collectives)",
                    {"wait_percent": waits[node], "others_wait_percent": others},
                    t,
                )
            ]
    seconds = {
        k: s for k, part in nodes.items() if (s := _step_seconds(part, not gathered)) is not None
    }
    if len(seconds) >= 2:
        had_steps = True
        node = max(seconds, key=lambda k: seconds[k])
        others = _others(seconds, node)
        if others > 0 and seconds[node] >= t.ratio * others:
            ratio = seconds[node] / others
            return [
                _finding(
                    nodes[node],
                    node,
                    f"its steps took {duration(seconds[node])}, {ratio:.1f} times the other "
                    f"nodes' {duration(others)}",
                    {"step_seconds": seconds[node], "others_step_seconds": others, "ratio": ratio},
                    t,
                )
            ]
    return [] if had_steps else _machine_outlier(nodes, t)


def _machine_outlier(nodes: dict[int, Run], t: StragglerThresholds) -> list[Finding]:
    """Without step keys: a node's mean CPU or GPU utilization far from the median node's."""
    values: dict[str, dict[int, list[float]]] = {"cpu": {}, "gpu": {}}
    for k, part in nodes.items():
        for key in part.columns:  # a key's column is made only where it is used
            d = family(key)
            kind = None if d is None else _NODE_FAMILIES.get(d.key)
            if kind is not None:
                values[kind].setdefault(k, []).extend(v for v in part.columns[key] if v == v)
    out = []
    for kind, by_node in values.items():
        means = {k: mean(v) for k, v in by_node.items() if len(v) >= MIN_SAMPLES}
        if len(means) < t.min_nodes:
            continue
        median = statistics.median(means.values())
        for node, value in sorted(means.items()):
            if abs(value - median) > t.points:
                what = "CPU" if kind == "cpu" else "GPU"
                side = "below" if value < median else "above"
                out.append(
                    Finding(
                        "straggler-node",
                        f"Node {node}'s {what} utilization averaged {value:.0f} %, "
                        f"{abs(value - median):.0f} points {side} the median node "
                        f"({median:.0f} %): it may hold the others back or do different work.",
                        {"node": float(node), "mean_percent": value, "median_percent": median},
                        view(nodes[node]).span(range(len(nodes[node]))),
                        Subject("node", str(node), kind),
                    )
                )
    return out


STRAGGLER_RULE = Rule(
    code="straggler-node",
    summary="the node that held the others back, with what explains it on that node",
    scope="run",
    live=True,
    thresholds=STRAGGLER,
    check=straggler_node,
    why="In synchronous training every node waits for the slowest: one slow node sets the "
    "pace of all of them.",
    how="per node (`node{k}/` keys of a callback's gather, or the samples of several nodes: "
    "one file they appended to, or several files read into one run). **Data wait**, 2 "
    "nodes suffice: a node's weighted mean `step.dataWaitPercent` more than `wait_points` "
    "above the other nodes' median (in synchronous training every node's step lasts as "
    "long as the slowest's; the straggler is the one waiting for its data). **Step time** "
    "(nodes running apart): a node's median `step.seconds` (else, for a node's own "
    "samples, between its step changes) at least `ratio` times the others' median. "
    "**Without step keys**, at least `min_nodes` nodes: a node's mean `cpu` or "
    "`gpu.{i}.gpu` more than `points` from the median node's. On that node, what explains "
    "it: its CPU above `cpu_percent` in at least `cpu_share` of its samples, a GPU "
    "throttled in more than `throttle_share`, a swap rise. A node slow in computing while "
    "the others wait in the collective shows in none of the step keys (every node's step "
    "and data wait are the same): only the machine numbers or its evidence can tell",
)
