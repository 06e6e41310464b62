"""Every rank's steps, and when each rank reached the gradient all-reduce (its arrival).

In synchronous data-parallel training (DDP) every rank's step lasts as long as the
slowest rank's: the all-reduce of the gradients makes the others wait for it, so step
times cannot tell the straggler. Its *arrival* can: each rank's :class:`ArrivalTimer`
notes, on the training thread,

- when its backward produced its last gradient (a ``register_post_accumulate_grad_hook``
  on each parameter that trains; the latest one of a backward), as seconds since the
  step's start (the previous optimizer step's end: the moment every rank left the
  previous all-reduce together);
- how long it then waited for its peers: from that last gradient to the end of the
  backward (an autograd final callback queued behind DDP's own, which waits for the
  all-reduce's completion);
- its forward: from the batch's start (the step clock's ``begin``) to the backward's
  start (the framework's ``on_before_backward``, or a forward hook on the model).

No DDP comm hook is registered (a user's own stays as it is), and nothing waits: a few
``time.perf_counter()`` reads per backward, and one per parameter. On CUDA the CPU sees
a kernel's launch, not its end: there the timer records a CUDA event at the arrival and
at the backward's end and reads them later with ``Event.query()`` (never
``synchronize()``); the GPU's arrival is then measured from the previous backward's end
(every rank left the all-reduce then), and a measurement whose events are not done within
``CUDA_PENDING`` backwards is dropped.

Each rank writes its running totals (:class:`RankTotals`) into a slot of its own: a
small file (``SLOT.size`` bytes) in shared memory (``/dev/shm``), mapped, rewritten at
each backward's end (a memory copy; no lock, no system call). The node's sampling
process (local rank 0) maps the slots of its node's ranks (their PIDs, from the run's
layout) and turns their growth between two samples into the ``rank.{r}.step.*`` keys and
the node's aggregates (:class:`RankBoard`, called by the monitor's step collector). A
torn read (a write under way) is read again; a slot that cannot be read is left out.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import struct
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sysmetrics.descriptions import weight
from sysmetrics.errors import SystemMetricsWarning, quote

SLOT = struct.Struct("<qqq6dq")  # seq, rank, steps, 6 sums (RankTotals), seq again
SLOT_NAME = "sysmetrics-steps-{pid}.slot"
READ_TRIES = 3  # a slot read while it is rewritten is read again this many times
CUDA_PENDING = 8  # backwards whose CUDA events may wait to be read; older ones are dropped

# The keys (declared in sysmetrics.descriptions): each rank's, then the node's aggregates.
RANK_FAMILY = "rank."  # every rank's keys start so (loggers get them where include asks)
RANK_KEY = "rank.{rank}.{key}"
RANK_KEYS = (
    "step.seconds",
    "step.dataWaitPercent",
    "step.forwardSeconds",
    "step.arrivalSeconds",
    "step.peerWaitPercent",
)
NODE_KEYS = ("step.rankMaxSeconds", "step.maxDataWaitPercent", "step.arrivalSpreadSeconds")


class RankTotals(NamedTuple):
    """One rank's running totals, as its slot holds them (seconds unless said)."""

    rank: int  # the global rank
    steps: int  # optimizer steps its step clock completed
    seconds: float  # their wall-clock seconds
    wait: float  # of which waiting for data between batches
    arrived: float  # backwards whose arrival was measured (a count)
    arrival: float  # their arrivals: step start to the last gradient
    forward: float  # their forwards: batch start to the backward's start
    peer: float  # their waits for peers: last gradient to the backward's end


MAX_SWEEP = 10_000  # entries of the slots' folder looked at, at most, for stale slots


def _folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def slot_path(pid: int) -> str:
    """The slot file of the rank whose process is ``pid`` (shared memory where there is)."""
    return os.path.join(_folder(), SLOT_NAME.format(pid=pid))


def sweep(folder: str | None = None) -> int:
    """Remove the slots of processes that are gone (a rank killed cannot remove its own).

    Called where a slot is made (train start); looks at ``MAX_SWEEP`` entries at most.
    Returns how many it removed.
    """
    head, tail = SLOT_NAME.split("{pid}")
    removed = 0
    try:
        with os.scandir(folder or _folder()) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_SWEEP:
                    break
                name = entry.name
                pid = name[len(head) : -len(tail)]
                if not (name.startswith(head) and name.endswith(tail) and pid.isdigit()):
                    continue
                try:
                    os.kill(int(pid), 0)
                except ProcessLookupError:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                        removed += 1
                except OSError:  # EPERM: it lives (another user's)
                    pass
    except OSError:
        pass
    return removed


class RankSlot:
    """A rank's slot: made at train start, rewritten at each backward's end, removed at close."""

    def __init__(self, rank: int, path: str | None = None) -> None:
        self.rank = rank
        if path is None:
            sweep()
        self.path = path or slot_path(os.getpid())
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, SLOT.size)
            self._map: mmap.mmap | None = mmap.mmap(fd, SLOT.size)
        finally:
            os.close(fd)
        self._seq = 0

    def write(self, t: RankTotals) -> None:
        """Rewrite the slot (a memory copy; the sequence number brackets it)."""
        m = self._map
        if m is None:
            return
        self._seq += 1
        SLOT.pack_into(m, 0, self._seq, t.rank, t.steps, t.seconds, t.wait, t.arrived,
                       t.arrival, t.forward, t.peer, self._seq)  # fmt: skip

    def close(self) -> None:
        """Unmap and remove the slot."""
        m, self._map = self._map, None
        if m is not None:
            m.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def read_slot(buffer: Any) -> RankTotals | None:
    """The totals in a slot's bytes, or None while it is rewritten (or never written)."""
    for _ in range(READ_TRIES):
        seq, rank, steps, *sums, again = SLOT.unpack_from(buffer, 0)
        if seq == again and seq > 0:
            values = [float(v) for v in sums]
            if all(math.isfinite(v) and v >= 0.0 for v in values) and steps >= 0:
                return RankTotals(int(rank), int(steps), *values)
            return None
    return None


_ZERO = RankTotals(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


class RankBoard:
    """The node's sampling process's view of its ranks' slots (see the module).

    Args:
        pids: the PIDs of the node's ranks (the run's layout), this process's included.
        path: where a PID's slot is (:func:`slot_path`).

    """

    def __init__(self, pids: Sequence[int], path: Callable[[int], str] = slot_path) -> None:
        self._pids = tuple(pids)
        self._path = path
        self._maps: dict[int, mmap.mmap] = {}
        self._prev: dict[int, RankTotals] = {}  # by rank: the totals at the previous sample
        self.weights: dict[str, float] = {}  # each key's weight in the latest sample

    def _totals(self) -> list[RankTotals]:
        out = []
        for pid in self._pids:
            m = self._maps.get(pid)
            if m is None:
                try:
                    with open(self._path(pid), "rb") as f:
                        if os.fstat(f.fileno()).st_size < SLOT.size:
                            continue
                        m = self._maps[pid] = mmap.mmap(
                            f.fileno(), SLOT.size, access=mmap.ACCESS_READ
                        )
                except (OSError, ValueError):  # not made yet, or gone
                    continue
            totals = read_slot(m)
            if totals is not None:
                out.append(totals)
        return out

    def sample(self) -> dict[str, float]:
        """Each rank's keys from its growth since the previous sample, and the node's.

        A rank whose steps did not grow has no step keys in this sample, and one with no
        arrival measured no arrival keys (nothing stale at a new point).
        """
        out: dict[str, float] = {}
        weights: dict[str, float] = {}
        seconds: dict[int, float] = {}
        waits: dict[int, float] = {}
        arrivals: dict[int, float] = {}
        for t in self._totals():
            p = self._prev.get(t.rank, _ZERO)
            if t.steps < p.steps or t.arrived < p.arrived:  # a new run of that rank
                p = _ZERO
            self._prev[t.rank] = t
            steps, secs = t.steps - p.steps, t.seconds - p.seconds
            by = {"steps": float(steps), "step_seconds": secs, "sample": 1.0}
            keys: dict[str, float] = {}
            if steps > 0 and secs > 0.0:
                keys["step.seconds"] = seconds[t.rank] = secs / steps
                keys["step.dataWaitPercent"] = waits[t.rank] = 100.0 * (t.wait - p.wait) / secs
            arrived = t.arrived - p.arrived
            if arrived > 0.0:
                keys["step.forwardSeconds"] = (t.forward - p.forward) / arrived
                keys["step.arrivalSeconds"] = arrivals[t.rank] = (t.arrival - p.arrival) / arrived
                if secs > 0.0:
                    keys["step.peerWaitPercent"] = 100.0 * (t.peer - p.peer) / secs
                by["steps"] = arrived if steps <= 0 else by["steps"]
            for key, value in keys.items():
                name = RANK_KEY.format(rank=t.rank, key=key)
                out[name] = value
                if key == "step.forwardSeconds" or key == "step.arrivalSeconds":
                    weights[name] = arrived
                else:
                    weights[name] = by[weight(key)]
        if seconds:
            out["step.rankMaxSeconds"] = max(seconds.values())
            out["step.maxDataWaitPercent"] = max(waits.values())
        if len(arrivals) >= 2:
            out["step.arrivalSpreadSeconds"] = max(arrivals.values()) - min(arrivals.values())
        for key in NODE_KEYS:
            if key in out:
                weights[key] = 1.0
        self.weights = weights
        return out

    def close(self) -> None:
        """Unmap every slot."""
        maps, self._maps = self._maps, {}
        for m in maps.values():
            m.close()


class ArrivalTimer:
    """One rank's arrival at the gradient all-reduce, and its totals in its slot.

    Args:
        clock: the rank's step clock (:class:`sysmetrics.steptime.StepClock`): the step's
            start (``origin``), the batch's start (``begun``) and its totals.
        slot: where the totals are written (None: kept here only).
        now: the clock (``time.perf_counter``); for tests.

    :meth:`attach` hooks a model; :meth:`forward_end` is called where the backward is
    about to start (or by the forward hook :meth:`attach` adds with ``forward=True``).
    Any error of a hook detaches every hook with one :class:`SystemMetricsWarning`.

    """

    def __init__(
        self, clock: Any, slot: RankSlot | None, now: Callable[[], float] = time.perf_counter
    ) -> None:
        self.clock = clock
        self.slot = slot
        self._now = now
        self._handles: list[Any] = []
        self._last_grad: float | None = None  # this backward's latest gradient
        self._queued = False  # this backward's final callback is queued
        self._forward_end: float | None = None
        self._arrived = 0.0
        self._arrival = 0.0
        self._forward = 0.0
        self._peer = 0.0
        self._engine: Any = None
        self._cuda: _CudaArrival | None = None
        self.failed = False

    def attach(self, module: Any, forward: bool = False) -> None:
        """Hook ``module``'s parameters that train (and its forward, ``forward=True``)."""
        import torch

        self._engine = torch.autograd.Variable._execution_engine
        params = [p for p in module.parameters() if p.requires_grad]
        try:
            for p in params:
                self._handles.append(p.register_post_accumulate_grad_hook(self._grad))
            if forward:
                self._handles.append(module.register_forward_hook(self._forward_hook))
            if any(p.is_cuda for p in params) and torch.cuda.is_available():
                self._cuda = _CudaArrival(torch.cuda)
        except Exception as exc:
            self._fail(exc)

    def forward_end(self) -> None:
        """The backward is about to start: the forward (and the loss) ended now."""
        self._forward_end = self._now()

    def _forward_hook(self, module: Any, args: Any, output: Any) -> None:
        if module.training:
            self._forward_end = self._now()

    def _grad(self, param: Any) -> None:
        """A parameter's gradient is accumulated (the autograd engine's thread)."""
        self._last_grad = self._now()
        if not self._queued:
            self._queued = True
            try:
                # Queued now, it runs at the backward's end; it queues the next one, which
                # runs after every callback queued before it (DDP's, which waits for the
                # all-reduce).
                self._engine.queue_callback(self._backward_ending)
            except Exception as exc:
                self._fail(exc)

    def _backward_ending(self) -> None:
        try:
            if self._cuda is not None:
                self._cuda.arrived()
            self._engine.queue_callback(self._backward_end)
        except Exception as exc:
            self._fail(exc)

    def _backward_end(self) -> None:
        """The backward ended: its all-reduce is complete (after DDP's final callback)."""
        try:
            end = self._now()
            last, self._last_grad = self._last_grad, None
            forward_end, self._forward_end = self._forward_end, None
            self._queued = False
            clock = self.clock
            origin, begun = clock.origin, clock.begun
            if last is None or origin is None or last < origin:
                return
            cuda = self._cuda.ended() if self._cuda is not None else None
            if cuda is not None:  # the GPU's (arrival, wait), of a backward read now
                arrival, peer = cuda
            elif self._cuda is None:
                arrival, peer = last - origin, end - last
            else:  # no CUDA measurement done yet
                return
            self._arrived += 1.0
            self._arrival += arrival
            self._peer += peer
            # The forward on the CPU (on CUDA: its launches), this backward's.
            if forward_end is not None and begun is not None and forward_end >= begun:
                self._forward += min(forward_end - begun, arrival)
            self.publish()
        except Exception as exc:
            self._fail(exc)

    def totals(self) -> RankTotals:
        """The rank's totals now: its step clock's and the arrivals'."""
        t = self.clock.read()
        slot = self.slot
        return RankTotals(
            slot.rank if slot is not None else 0, t.steps, t.seconds, t.wait,
            self._arrived, self._arrival, self._forward, self._peer,
        )  # fmt: skip

    def publish(self) -> None:
        """Write the totals to the slot (also called at a step's end by the callbacks)."""
        if self.slot is not None and not self.failed:
            self.slot.write(self.totals())

    def _fail(self, exc: BaseException) -> None:
        if self.failed:
            return
        self.failed = True
        self.detach()
        warnings.warn(
            "sysmetrics: the arrival timing stopped (no rank.{r}.step.arrivalSeconds from "
            f"this rank), training goes on: {type(exc).__name__}: {quote(str(exc))}",
            SystemMetricsWarning,
            stacklevel=2,
        )

    def detach(self) -> None:
        """Remove every hook."""
        handles, self._handles = self._handles, []
        for h in handles:
            with contextlib.suppress(Exception):
                h.remove()

    def close(self) -> None:
        """Detach, and remove the slot."""
        self.detach()
        slot, self.slot = self.slot, None
        if slot is not None:
            slot.close()


class _CudaArrival:
    """The GPU's arrival and wait, from CUDA events read with ``query()`` (never waited on).

    Per backward: an event where the last gradient's kernels were queued (the first final
    callback) and one at the backward's end (after DDP's, whose wait makes the stream wait
    for the all-reduce). The GPU's arrival is measured from the previous backward's end
    event.
    """

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda
        self._previous: Any = None  # the previous backward's end event
        self._arrival: Any = None  # this backward's arrival event
        self._pending: deque[tuple[Any, Any, Any]] = deque()  # (previous end, arrival, end)
        self.dropped = 0

    def arrived(self) -> None:
        event = self._cuda.Event(enable_timing=True)
        event.record()
        self._arrival = event

    def ended(self) -> tuple[float, float] | None:
        """Record this backward's end; the (arrival, wait) in s of one done backward, if any."""
        end = self._cuda.Event(enable_timing=True)
        end.record()
        if self._previous is not None and self._arrival is not None:
            self._pending.append((self._previous, self._arrival, end))
            if len(self._pending) > CUDA_PENDING:
                self._pending.popleft()
                self.dropped += 1
        self._previous, self._arrival = end, None
        if self._pending and self._pending[0][2].query():  # done: both before it are too
            start, arrival, done = self._pending.popleft()
            return start.elapsed_time(arrival) / 1000.0, arrival.elapsed_time(done) / 1000.0
        return None
