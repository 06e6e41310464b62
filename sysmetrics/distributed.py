"""Several ranks, several nodes: who watches which processes, and one gather per logging step.

Through the framework's own process group (``torch.distributed``, which Lightning's DDP
strategies, accelerate and DeepSpeed set up); nothing here runs where it is not
initialised or the world is one process. Every function here is a collective: every
rank must call it, at the same points, which the callers derive from the step alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sysmetrics.descriptions import NODES_MAX, NODES_MIN, node_key


def _dist() -> Any:
    """``torch.distributed`` when it is initialised with more than one rank, else None.

    torch is never imported here: where the framework has not imported it, there is no
    process group.
    """
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return dist if dist.get_world_size() > 1 else None
    except Exception:  # a half-built group: behave as one process
        return None


def env_node_rank() -> int | None:
    """The node rank from the launcher's environment, where it says.

    torchrun (and accelerate, which runs it) set ``GROUP_RANK``; Lightning and many
    launchers ``NODE_RANK``; Slurm ``SLURM_NODEID``. Else ``(RANK - LOCAL_RANK) /
    LOCAL_WORLD_SIZE`` where those are set.
    """
    for name in ("GROUP_RANK", "NODE_RANK", "SLURM_NODEID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    rank, local, size = (os.environ.get(n, "") for n in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"))
    if rank.isdigit() and local.isdigit() and size.isdigit() and int(size) > 0:
        return (int(rank) - int(local)) // int(size)
    return None


# The launchers' world sizes, and what a launcher of several nodes sets on each of them.
_WORLD_SIZES = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_NODE_SETTINGS = ("GROUP_RANK", "NODE_RANK", "MASTER_ADDR")


def launched() -> bool:
    """Whether this process is one rank of several, as far as can be known before training.

    True where a process group of several ranks is initialised, or where the launcher's
    environment says so: a world size above 1 (``WORLD_SIZE``: torchrun, accelerate,
    Lightning, DeepSpeed; ``SLURM_NTASKS``; ``OMPI_COMM_WORLD_SIZE``; ``PMI_SIZE``), or a
    node rank or rendezvous address (``GROUP_RANK``, ``NODE_RANK``, ``MASTER_ADDR``: what
    each node of a multi-node launch is given, node 0 included). Cheap; no collective.
    """
    if _dist() is not None:
        return True
    for name in _WORLD_SIZES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return True
    return any(os.environ.get(name) for name in _NODE_SETTINGS)


@dataclass(frozen=True)
class Layout:
    """Where this rank is: the same view on every rank (from one all-gather at train start).

    Attributes:
        node: this rank's node rank.
        nodes: the node ranks of the run, sorted.
        local_pids: the PIDs of the ranks on this node (this one included).

    """

    node: int
    nodes: tuple[int, ...]
    local_pids: tuple[int, ...]

    @property
    def multi_node(self) -> bool:
        """Whether the run spans several nodes: only then are nodes gathered."""
        return len(self.nodes) > 1


def layout(node: int | None = None) -> Layout:
    """Learn the run's layout: one ``all_gather_object`` of (node rank, PID) per rank.

    A collective where a process group with several ranks is initialised; elsewhere it
    returns the one-process layout without any call.

    Args:
        node: this rank's node rank as the framework knows it; from the environment
            (:func:`env_node_rank`) otherwise, 0 where it says nothing.

    """
    if node is None:
        node = env_node_rank() or 0
    dist = _dist()
    if dist is None:
        return Layout(node, (node,), (os.getpid(),))
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (node, os.getpid()))
    nodes = tuple(sorted({n for n, _ in everyone}))
    local = tuple(pid for n, pid in everyone if n == node)
    return Layout(node, nodes, local)


def gather(
    snapshot: Mapping[str, float] | None, where: Layout
) -> dict[int, dict[str, float]] | None:
    """Every node's snapshot, on every rank: one ``all_gather_object`` (multi-node only).

    Each rank sends its snapshot (the node's sampling rank) or None (the others).

    Returns:
        ``{node rank: snapshot}``, or None where the run is on one node (no call made).

    """
    dist = _dist()
    if dist is None or not where.multi_node:
        return None
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (where.node, dict(snapshot) if snapshot else None))
    out: dict[int, dict[str, float]] = {}
    for node, snap in everyone:
        if snap:
            out[node] = snap
    return out


def per_node(snapshots: Mapping[int, Mapping[str, float]]) -> dict[str, float]:
    """Keys of every node under ``node{k}/``, and each key's ``nodes_min/`` and ``nodes_max/``.

    The min and max of a key are over the nodes that report it. The names are
    :func:`sysmetrics.descriptions.node_key`'s (:func:`~sysmetrics.descriptions.split_node`
    splits them).
    """
    out: dict[str, float] = {}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for node in sorted(snapshots):
        for key, value in snapshots[node].items():
            out[node_key(node, key)] = value
            if key not in low:
                low[key] = high[key] = value
            else:
                low[key] = min(low[key], value)
                high[key] = max(high[key], value)
    out.update({node_key(NODES_MIN, k): v for k, v in low.items()})
    out.update({node_key(NODES_MAX, k): v for k, v in high.items()})
    return out
