"""Every rank's progress over the job's own ``torch.distributed`` store.

Every torch.distributed job has a key-value store (a ``TCPStore``, which rendezvous made
and every rank is connected to); it works while the collectives hang, since it is a
socket of its own. Each rank's hang watch (:mod:`sysmetrics.hang`) opens a client of its
own to that store (never the training thread's connection: none of its calls waits
behind ours) with a ``STORE_TIMEOUT`` s timeout (``CONNECT_TRIES`` tries to connect),
and publishes, every :func:`publish_every` s, one record under
``sysmetrics/progress/{rank}``: its step, phase, where its training thread is when the
step has not advanced since its previous record, the time, its node, host and PID (JSON,
about 120 bytes; ``MAX_RECORD`` bytes at most). Rank 0 reads them all only when its own
step is stalled (one ``check`` per rank not yet seen, one ``multi_get`` of the others),
and says the job's view in one line (:func:`job_line`): which ranks are behind and
where, which wait where, which are dead (on rank 0's host: their process is gone) and
which are silent (elsewhere, no record for :func:`dead_after` s: dead, or a process
frozen whole, which cannot publish either).

Traffic: one ``set`` per rank every :func:`publish_every` s (5 s by default), and rank 0's
reads during a stall only; ``benchmarks/progress_store.py`` measures it with 64 and 256
simulated ranks (``docs/distributed.md`` has the figures). A store that cannot be
reached, or that fails, disables this part with one
:class:`~sysmetrics.SystemMetricsWarning`; the hang watch goes on, telling this
process's own stall.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sysmetrics.errors import SystemMetricsWarning, quote
from sysmetrics.hang import LOOK_EVERY, STALL_HEAD, Where

PUBLISH_EVERY = 5.0  # s between two records of a rank, at most (see publish_every)
STORE_TIMEOUT = 5.0  # s a store call may wait
CONNECT_TRIES = 3  # tries to connect (a loaded server may not answer the first in time)
KEY = "sysmetrics/progress/{rank}"
MAX_RECORD = 1024  # bytes of one record, at most (a longer one is read as none)
MAX_GROUPS = 6  # groups of ranks named in one line; the rest are counted
MAX_LINE = 800  # characters of the line at most (cut with "...")


def publish_every(hang_after: float) -> float:
    """Seconds between two records of a rank.

    ``PUBLISH_EVERY``, or a quarter of ``hang_after`` if less (at least ``LOOK_EVERY``),
    so a stall finds every rank's record fresh.
    """
    return max(LOOK_EVERY, min(PUBLISH_EVERY, hang_after / 4.0))


def dead_after(hang_after: float) -> float:
    """Seconds without a record after which a rank is dead (or silent).

    Three records missed, and two looks' slack.
    """
    return 3.0 * publish_every(hang_after) + 2.0 * LOOK_EVERY


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host lives.

    It exists and is no zombie (a rank killed whose launcher has not reaped it yet).
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")
    except (OSError, ValueError):  # no procfs: it exists
        return True


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3``, ``ranks 3 and 5``, ``ranks 0-5, 7 and 9`` (runs of 3 or more as ranges)."""
    runs: list[str] = []
    i = 0
    ranks = sorted(ranks)
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        if j - i >= 2:
            runs.append(f"{ranks[i]}-{ranks[j]}")
        else:
            runs.extend(str(r) for r in ranks[i : j + 1])
        i = j + 1
    if len(ranks) == 1:
        return f"rank {runs[0]}"
    body = runs[0] if len(runs) == 1 else ", ".join(runs[:-1]) + " and " + runs[-1]
    return f"ranks {body}"


def _nodes_text(nodes: set[int]) -> str:
    listed = sorted(nodes)
    if len(listed) == 1:
        return f" (node {listed[0]})"
    if len(listed) <= 3:
        return f" (nodes {', '.join(map(str, listed[:-1]))} and {listed[-1]})"
    return f" ({len(listed)} nodes)"


def job_line(
    seconds: float,
    records: Mapping[int, Mapping[str, Any] | None],
    world: int,
    now: float,
    dead_after: float,
    host: str,
    alive: Callable[[int], bool] = _alive,
) -> str:
    """The job's view of a stall, in one line.

    Args:
        seconds: how long rank 0's step has not advanced.
        records: each rank's latest record (None: none was read).
        world: the ranks of the job.
        now: the time (s since the epoch) to judge the records' age by.
        dead_after: seconds without a record after which a rank is dead (or silent).
        host: rank 0's host: a silent rank there is dead when its process is gone.
        alive: whether a PID of this host is alive.

    At most ``MAX_GROUPS`` groups of ranks are named (the rest counted) and ``MAX_LINE``
    characters said. Example: ``sysmetrics: no step for 75 s: ranks 3 and 5 are at step
    1200 fetching data (node 1); the other 6 ranks wait at step 1201 in all_reduce``.

    """
    groups: dict[tuple[str, object, str, str], list[int]] = {}
    nodes: dict[tuple[str, object, str, str], set[int]] = {}
    every_node: set[int] = set()
    for rank in range(world):
        rec = records.get(rank)
        if rec is None:
            key: tuple[str, object, str, str] = ("silent", None, "", "")
            node = None
        else:
            node = rec.get("n") if isinstance(rec.get("n"), int) else None
            age = now - float(rec.get("t", 0.0))
            pid = rec.get("i")
            gone = rec.get("h") == host and isinstance(pid, int) and not alive(pid)
            if gone:  # on this host, its process is gone: dead whatever its record's age
                key = ("dead", round(age), "", "")
            elif age > dead_after:  # elsewhere: dead, or frozen whole
                key = ("silent", round(age), "", "")
            else:
                key = ("alive", rec.get("s"), str(rec.get("k") or ""), str(rec.get("w") or ""))
        groups.setdefault(key, []).append(rank)
        if node is not None:
            nodes.setdefault(key, set()).add(node)
            every_node.add(node)
    multi = len(every_node) > 1

    def said(key: tuple[str, object, str, str], ranks: list[int], who: str) -> str:
        state, value, kind, what = key
        many = len(ranks) > 1
        if state == "dead":
            text = f"{who} {'are' if many else 'is'} dead (no word for {value} s)"
        elif state == "silent" and value is None:
            text = f"{who} {'have' if many else 'has'} said nothing"
        elif state == "silent":
            text = f"{who} {'are' if many else 'is'} silent (no word for {value} s)"
        else:
            step = value if value is not None else "?"
            text = f"{who} {Where(kind, what).phrase(many).format(step=step)}"
        return text + (_nodes_text(nodes[key]) if multi and key in nodes else "")

    # The dead and silent first, then the ranks behind, then those that wait for them
    # (in a collective, or in backward's gradient all-reduce), the largest group last.
    order = sorted(
        groups,
        key=lambda k: (
            {"dead": 0, "silent": 1, "alive": 2}[k[0]],
            k[2] in ("collective", "backward"),
            len(groups[k]),
            k[1] if k[0] == "alive" and isinstance(k[1], int) else -1,
            groups[k][0],
        ),
    )
    parts = []
    shown = order if len(order) <= MAX_GROUPS else order[: MAX_GROUPS - 1]
    for i, key in enumerate(shown):
        ranks = groups[key]
        last = i == len(order) - 1 and len(order) > 1 and len(ranks) > 1 and key[0] == "alive"
        who = f"the other {len(ranks)} ranks" if last else ranks_text(ranks)
        parts.append(said(key, ranks, who))
    if len(shown) < len(order):
        rest = sum(len(groups[k]) for k in order[len(shown) :])
        parts.append(f"{rest} more ranks elsewhere")
    line = STALL_HEAD.format(seconds=seconds) + "; ".join(parts)
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


MAX_BEHIND = 64  # ranks named behind at most (the exporter's series of a stall)


def behind(
    records: Mapping[int, Mapping[str, Any] | None],
    world: int,
    now: float,
    dead_after: float,
    host: str,
    alive: Callable[[int], bool] = _alive,
) -> dict[int, str]:
    """The ranks that hold the job back during a stall, and where: ``{rank: where}``.

    A rank is behind where it is dead or silent (``"dead"``, ``"silent"``), at a step
    below the highest rank's, or, all at one step, not waiting in a collective or in
    backward while others are (``where``: its place's kind, ``"data"``, ``"elsewhere"``,
    ...). ``MAX_BEHIND`` ranks at most, the lowest. Empty where no rank is told apart
    (every rank at one step, in one kind of place). Arguments as :func:`job_line`'s.
    """
    state: dict[int, tuple[str, int | None]] = {}
    for rank in range(world):
        rec = records.get(rank)
        if rec is None:
            state[rank] = ("silent", None)
            continue
        pid = rec.get("i")
        if rec.get("h") == host and isinstance(pid, int) and not alive(pid):
            state[rank] = ("dead", None)
        elif now - float(rec.get("t", 0.0)) > dead_after:
            state[rank] = ("silent", None)
        else:
            step = rec.get("s")
            state[rank] = (str(rec.get("k") or "unknown"), step if isinstance(step, int) else None)
    steps = [s for k, s in state.values() if s is not None]
    top = max(steps) if steps else None
    waiting = {"collective", "backward"}
    someone_waits = any(k in waiting for k, _ in state.values())
    out: dict[int, str] = {}
    for rank, (kind, step) in sorted(state.items()):
        if (
            kind in ("dead", "silent")
            or (step is not None and top is not None and step < top)
            or (someone_waits and kind not in waiting)
        ):
            out[rank] = kind
            if len(out) >= MAX_BEHIND:
                break
    return (
        {} if len(out) == world and not any(k in ("dead", "silent") for k in out.values()) else out
    )


def _record(raw: bytes) -> dict[str, Any] | None:
    """A record read back, or None where it is not one (bounded: ``MAX_RECORD`` bytes)."""
    if len(raw) > MAX_RECORD:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("t"), (int, float)):
        return None
    return data


def store_address() -> tuple[str, int] | None:
    """The host and port of the job's ``TCPStore``; None where there is none (or no job)."""
    from sysmetrics.distributed import _dist

    dist = _dist()
    if dist is None:
        return None
    store: Any = dist.distributed_c10d._get_default_store()
    for _ in range(8):  # PrefixStores around it
        inner = getattr(store, "underlying_store", None)
        if inner is None:
            break
        store = inner
    if not isinstance(store, dist.TCPStore):
        return None
    return str(store.host), int(store.port)


class Channel:
    """One rank's end of the progress records (see the module).

    Args:
        rank, world: this rank and the job's ranks.
        node: this rank's node rank.
        hang_after: the option ``hang_after`` (s), from which the cadence is derived.
        address: the store's ``(host, port)``; the job's (:func:`store_address`) by default.

    """

    def __init__(
        self,
        rank: int,
        world: int,
        node: int,
        hang_after: float,
        address: tuple[str, int] | None = None,
    ) -> None:
        self.rank, self.world, self.node = rank, world, node
        self.every = publish_every(hang_after)
        self.dead_after = dead_after(hang_after)
        self.address = address
        self.host = socket.gethostname()
        self._store: Any = None
        self._last: float | None = None  # when this rank last published (monotonic)
        self._seen: set[int] = set()  # ranks whose key exists
        self.failed = False
        self.behind: dict[int, str] = {}  # rank 0, during a stall: the ranks behind (see behind)
        self.ops = 0  # store calls made
        self.bytes = 0  # bytes of keys and values sent and received (payload only)

    def open(self) -> None:
        """Connect a client of our own to the store (on the watch's thread)."""
        try:
            address = self.address or store_address()
            if address is None:
                self.failed = True
                return
            import torch.distributed

            dist: Any = torch.distributed
            for attempt in range(CONNECT_TRIES):
                try:
                    self._store = dist.TCPStore(
                        address[0],
                        address[1],
                        is_master=False,
                        timeout=datetime.timedelta(seconds=STORE_TIMEOUT),
                        wait_for_workers=False,
                    )
                    break
                except Exception:
                    if attempt == CONNECT_TRIES - 1:
                        raise
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.failed = True
        self._store = None
        warnings.warn(
            "sysmetrics: the job's torch.distributed store failed; every rank's progress is "
            "no longer published nor read here, and each process tells its own stalls: "
            f"{type(exc).__name__}: {quote(str(exc))}",
            SystemMetricsWarning,
            stacklevel=1,
        )

    def due(self, now: float) -> bool:
        """Whether a record is due at ``now`` (monotonic s): :attr:`every` s since the last."""
        return self._store is not None and (self._last is None or now - self._last >= self.every)

    def publish(
        self, step: int | None, phase: str, where: Where | None, now: float, force: bool = False
    ) -> None:
        """Publish this rank's record, every :attr:`every` s (or now, ``force``)."""
        if self._store is None or (
            not force and self._last is not None and now - self._last < self.every
        ):
            return
        self._last = now
        value = json.dumps(
            {
                "s": step,
                "p": phase,
                "k": where.kind if where else "",
                "w": where.what[:200] if where else "",
                "t": round(time.time(), 3),
                "n": self.node,
                "h": self.host[:100],
                "i": os.getpid(),
            },
            separators=(",", ":"),
        )
        key = KEY.format(rank=self.rank)
        try:
            self._store.set(key, value)
        except Exception as exc:
            self._fail(exc)
            return
        self.ops += 1
        self.bytes += len(key) + len(value)

    def read(self) -> dict[int, dict[str, Any] | None]:
        """Every rank's latest record (None: none yet); rank 0, during a stall."""
        store = self._store
        out: dict[int, dict[str, Any] | None] = dict.fromkeys(range(self.world))
        if store is None:
            return out
        try:
            for rank in range(self.world):
                if rank not in self._seen:
                    self.ops += 1
                    if store.check([KEY.format(rank=rank)]):
                        self._seen.add(rank)
            ranks = sorted(self._seen)
            if ranks:
                keys = [KEY.format(rank=r) for r in ranks]
                values = store.multi_get(keys)
                self.ops += 1
                for rank, key, raw in zip(ranks, keys, values):
                    self.bytes += len(key) + len(raw)
                    out[rank] = _record(bytes(raw))
        except Exception as exc:
            self._fail(exc)
        return out

    def job_line(self, seconds: float) -> str | None:
        """Rank 0's line for a stall of ``seconds`` (None elsewhere, or without the store)."""
        if self.rank != 0 or self._store is None:
            return None
        records = self.read()
        if self._store is None:
            return None
        now = time.time()
        self.behind = behind(records, self.world, now, self.dead_after, self.host)
        return job_line(seconds, records, self.world, now, self.dead_after, self.host)

    def close(self) -> None:
        """Drop the client (its socket closes with it)."""
        self._store = None
