"""The cross-node rule: ``straggler-node``, over each node's series (see :func:`node_runs`)."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from typing import Optional

from sysmetrics.descriptions import family, split_node
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

_NAN = float("nan")

STRAGGLER_WAIT_POINTS = 15.0  # points: a node's data wait above the other nodes' median by this
STRAGGLER_RATIO = 1.5  # a node's seconds per step this many times the other nodes' median
STRAGGLER_POINTS = 25.0  # without step keys: percentage points from the median node's mean
STRAGGLER_MIN_NODES = 3  # without step keys: nodes needed to name one the odd one out
ARRIVAL_NOISE_TIMES = 3.0  # times: the last rank's lead past this many times the run's noise
ARRIVAL_GAP_SHARE = 0.1  # share: ... and past this share of the median step time


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
    arrival_noise_times: float = threshold(
        ARRIVAL_NOISE_TIMES,
        "ARRIVAL_NOISE_TIMES",
        "times",
        "by arrival: the last rank past the others' median by this many times the run's noise",
    )
    arrival_gap_share: float = threshold(
        ARRIVAL_GAP_SHARE,
        "ARRIVAL_GAP_SHARE",
        "share",
        "by arrival: ... and by at least this share of the median step time",
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

# -- every rank's arrival at the gradient all-reduce (sysmetrics.arrival) -------------------

_RANK = re.compile(r"rank\.([0-9]+)\.(step\..+)")
_CAUSES = {
    "data": "waiting for its data",
    "forward": "in its forward",
    "backward": "in its backward",
}


@dataclass(frozen=True)
class RankArrival:
    """One rank's medians over its samples (seconds per step; ``peer``: % of step time)."""

    rank: int
    node: Optional[int]
    arrival: float
    noise: float  # the spread of its samples' arrivals (s; a MAD as a sigma)
    data: float  # s per step waiting for data
    forward: float
    peer: float
    step: float

    @property
    def backward(self) -> float:
        """Seconds from its backward's start to its last gradient, per step."""
        return max(0.0, self.arrival - self.data - self.forward)


@dataclass(frozen=True)
class Arrivals:
    """What the ranks' arrivals say: the straggler and its cause, or none (and why)."""

    ranks: dict[int, RankArrival]
    straggler: Optional[int]  # the rank that held the others back; None: none
    cause: str  # "data", "forward" or "backward"; "" without a straggler
    gap: float  # s: the last rank's arrival past the others' median
    noise: float  # s: the run's noise in arrival (the ranks' median spread)
    said: str  # "no straggler: ..." or the finding's first words


def _rank_series(run: Run) -> dict[int, tuple[Optional[int], dict[str, list[float]]]]:
    """Each rank's node and its keys' present values (``rank.{r}.step.*``, any node prefix)."""
    out: dict[int, tuple[Optional[int], dict[str, list[float]]]] = {}
    for key in run.columns:  # the keys alone: a sparse key's column is made only if read
        split = split_node(key)
        plain = split.key if split is not None else key
        m = _RANK.fullmatch(plain)
        if m is None:
            continue
        rank, column = int(m.group(1)), run.columns[key]
        rows = [j for j, v in enumerate(column) if v == v]
        if not rows:
            continue
        node = split.node if split is not None else run.node[rows[0]]
        entry = out.setdefault(rank, (node, {}))
        entry[1][m.group(2)] = [column[j] for j in rows]
    return out


_MAD_SIGMA = 1.4826  # a median absolute deviation as a normal distribution's sigma


def _steady(values: list[float]) -> list[float]:
    """A rank's samples without its first (the warm-up), where there are enough."""
    return values[1:] if len(values) > MIN_SAMPLES else values


def _middle(values: list[float]) -> float:
    """The median of a rank's steady samples; NaN where there are none."""
    steady = _steady(values)
    return statistics.median(steady) if steady else _NAN


def arrivals(run: Run, t: StragglerThresholds = STRAGGLER) -> Optional[Arrivals]:
    """The ranks' arrivals at the all-reduce, and the straggler among them (or none).

    None where fewer than two ranks have ``MIN_SAMPLES`` samples of arrival. Each rank's
    numbers are the medians of its samples (the first, the warm-up, left out). The last
    rank (the largest ``rank.{r}.step.arrivalSeconds``) is a straggler where it came more
    than ``arrival_noise_times`` times the run's noise (the median over ranks of the
    spread of their samples' arrivals, a median absolute deviation as a sigma) and
    ``arrival_gap_share`` of the median step after the other ranks' median, and waited
    for its peers less than their median. Its cause: which of its data wait, forward and
    backward (to its last gradient) exceeds the other ranks' median by the most.
    """
    ranks: dict[int, RankArrival] = {}
    for rank, (node, series) in _rank_series(run).items():
        arrival = _steady(series.get("step.arrivalSeconds", []))
        if len(arrival) < MIN_SAMPLES:
            continue
        middle = statistics.median(arrival)
        spread = _MAD_SIGMA * statistics.median(abs(v - middle) for v in arrival)
        step = _middle(series.get("step.seconds", []))
        wait = _middle(series.get("step.dataWaitPercent", []))
        ranks[rank] = RankArrival(
            rank,
            node,
            middle,
            spread,
            wait / 100.0 * step if wait == wait and step == step else 0.0,
            _middle(series.get("step.forwardSeconds", []))
            if "step.forwardSeconds" in series
            else 0.0,
            _middle(series.get("step.peerWaitPercent", [])),
            step,
        )
    if len(ranks) < 2:
        return None
    last = max(ranks.values(), key=lambda r: r.arrival)
    others = [r for r in ranks.values() if r.rank != last.rank]
    gap = last.arrival - statistics.median(r.arrival for r in others)
    noise = statistics.median(r.noise for r in ranks.values())
    steps = [r.step for r in ranks.values() if r.step == r.step]
    step = statistics.median(steps) if steps else _NAN
    peers = [r.peer for r in others if r.peer == r.peer]
    waits_least = not peers or last.peer != last.peer or last.peer < statistics.median(peers)
    bar = max(t.arrival_noise_times * noise, t.arrival_gap_share * step if step == step else 0.0)
    if gap <= bar or not waits_least:
        said = (
            f"no straggler: the ranks reached the all-reduce within {duration(max(gap, 0.0))} "
            f"of each other, within the run's own noise ({duration(bar)})"
            if waits_least
            else f"no straggler: rank {last.rank} came last but did not wait the least"
        )
        return Arrivals(ranks, None, "", gap, noise, said)
    excess = {
        "data": last.data - statistics.median(r.data for r in others),
        "forward": last.forward - statistics.median(r.forward for r in others),
        "backward": last.backward - statistics.median(r.backward for r in others),
    }
    cause = max(excess, key=lambda k: excess[k])
    where = f" (node {last.node})" if last.node is not None else ""
    said = (
        f"Rank {last.rank}{where} reached the gradient all-reduce last, "
        f"{duration(gap)} after the other ranks' median: it was slow {_CAUSES[cause]} "
        f"({duration(max(excess[cause], 0.0))} more per step than the others)"
    )
    return Arrivals(ranks, last.rank, cause, gap, noise, said)


def _rank_finding(run: Run, found: Arrivals, t: StragglerThresholds) -> Finding:
    rank = found.ranks[found.straggler] if found.straggler is not None else None
    assert rank is not None
    others = [r.peer for r in found.ranks.values() if r.rank != rank.rank and r.peer == r.peer]
    waited = (
        f"; the others waited for it ({statistics.median(others):.0f} % of their step time "
        f"against its {rank.peer:.0f} %)"
        if others and rank.peer == rank.peer
        else ""
    )
    part = run
    if rank.node is not None:
        nodes, _ = node_runs(run)
        part = nodes.get(rank.node, run)
    said, more = _explain(part, t)
    why = f"; on its node {', '.join(said)} (contention)" if said else ""
    return Finding(
        "straggler-node",
        f"{found.said}{waited}{why}.",
        {
            "rank": float(rank.rank),
            **({"node": float(rank.node)} if rank.node is not None else {}),
            "arrival_seconds": rank.arrival,
            "gap_seconds": found.gap,
            "noise_seconds": found.noise,
            "data_seconds": rank.data,
            "forward_seconds": rank.forward,
            "backward_seconds": rank.backward,
            **({"peer_wait_percent": rank.peer} if rank.peer == rank.peer else {}),
            **more,
        },
        view(part).span(range(len(part))),
        Subject("rank", str(rank.rank), found.cause, rank.node),
    )


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
    ranked = arrivals(run, t)
    if ranked is not None:  # every rank's arrival at the all-reduce says it (DDP)
        return [] if ranked.straggler is None else [_rank_finding(run, ranked, t)]
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
    summary="the rank (by its arrival at the all-reduce) or node that held the others back, "
    "with its cause",
    scope="run",
    live=True,
    thresholds=STRAGGLER,
    check=straggler_node,
    why="In synchronous training every node waits for the slowest: one slow node sets the "
    "pace of all of them.",
    how="**By arrival** first, over every rank (a callback's DDP run of several ranks, one "
    "node or several: the `rank.{rank}.step.*` keys): the rank with the latest median "
    "`step.arrivalSeconds` at the gradient all-reduce is the straggler where it came more "
    "than `arrival_noise_times` times the run's noise (the ranks' median spread of their "
    "samples' arrivals) and `arrival_gap_share` of the median step after the other ranks' "
    "median, and waited for its peers (`step.peerWaitPercent`) less than their median; its "
    "cause is whichever of its data wait, forward and backward exceeds the others' median "
    "the most; within the noise: no straggler. Without arrival keys, "
    "per node (`node{k}/` keys of a callback's gather, or the samples of several nodes: "
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
