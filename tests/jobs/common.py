"""What the distributed job scripts share: collective counting, CPU spinning, a busy child.

Imported by the scripts in this folder, which ``tests/test_distributed.py`` launches as
real ranks (gloo on CPU). Every ``torch.distributed.all_gather_object`` call is recorded
with the training step it happened at, so the test can check that ranks agree and that
no collective runs on a step that does not log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import torch.distributed as dist

STEP = [-1]  # the step being trained, set by the scripts' callbacks
CALLS: list[int] = []  # the step of each all_gather_object call
_original = dist.all_gather_object


def _counting(*args: Any, **kwargs: Any) -> Any:
    CALLS.append(STEP[0])
    return _original(*args, **kwargs)


dist.all_gather_object = _counting


def spin(seconds: float) -> None:
    """Keep one CPU busy for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


_LEAVES = [0]  # leave() calls in this process: each meets the others under a key of its own
LEAVE_TIMEOUT_S = 120.0  # s a rank waits for the others to leave


def leave() -> None:
    """The ranks leave gloo together, before the interpreter's exit: each meets the others
    through the job's store, then destroys its process group, rank 0 last.

    Why together: Lightning destroys the group at exit with no barrier; under ddp_spawn
    a rank that got there first aborted now and then in gloo's teardown ("terminate
    called without an active exception", SIGABRT) after Trainer.fit had finished: 1 run
    in 8 with the callback (whose last sample makes rank 0 leave later), 0 in 10 without.
    transformers (4.40, accelerate 0.26) leaves the group to the interpreter's exit, where
    a torchrun rank aborted the same way (once, in make versions beside the other envs).

    Why through the store and not ``dist.barrier()``: gloo's barrier holds the work in
    flight when it began (the Trainer's last all-gather); it let go of it on gloo's own
    thread, which then waits for the GIL to free that work's tensors, while the main
    thread, holding the GIL, freed the DDP model and with it the group, whose destructor
    waits for that thread: a deadlock (1 torchrun run in 25 beside 4 spinners hung so,
    gdb: ~ProcessGroupGloo joining pt_gloo_runloop, in ~AsyncBarrierWork,
    ~AsyncAllgatherWork, take_gil; 0 in 50 with the store). The store is a socket of its
    own: no gloo work.
    The job's store is hosted by the launcher (torchrun) or by rank 0 (Lightning), so
    rank 0 destroys its group only once every other rank has said it is leaving.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    import datetime

    world, rank = dist.get_world_size(), dist.get_rank()
    _LEAVES[0] += 1
    met, gone = f"tests/leave/{_LEAVES[0]}/met", f"tests/leave/{_LEAVES[0]}/gone"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
        timeout=datetime.timedelta(seconds=LEAVE_TIMEOUT_S), wait_for_workers=False,
    )  # fmt: skip
    store.add(met, 1)
    _wait_count(store, met, world)
    if rank != 0:
        store.add(gone, 1)
    else:
        _wait_count(store, gone, world - 1)
    dist.destroy_process_group()


def _wait_count(store: Any, key: str, count: int) -> None:
    """Wait until the counter ``key`` reaches ``count``; RuntimeError after
    ``LEAVE_TIMEOUT_S`` s."""
    deadline = time.monotonic() + LEAVE_TIMEOUT_S
    while store.add(key, 0) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{key}: {store.add(key, 0)} of {count} ranks after "
                               f"{LEAVE_TIMEOUT_S:.0f} s")  # fmt: skip
        time.sleep(0.02)


def busy_child() -> subprocess.Popen[bytes]:
    """A child process spinning one CPU: part of this rank's tree. Returned once it spins:
    on a loaded machine its interpreter can take longer to start than the short run
    trains, leaving node 1's numbers nothing of it to show (a CI run read node 1 at 26.7 %
    beside node 0's 26.6 % in test_transformers_logs_every_node_at_the_loss_steps)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys\nsys.stdout.write('x')\nsys.stdout.flush()\n"
         "while True: pass"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None and child.stdout.read(1) == b"x"
    return child


_CPU_START: list[float] = []  # this process's CPU time and the clock at train start


def cpu_start() -> None:
    """Mark the start of training for :func:`write_cpu`."""
    _CPU_START[:] = [time.process_time(), time.monotonic()]


def write_cpu(out: str, rank: int) -> None:
    """OUT/cpu{rank}.json: this rank's CPU seconds and wall seconds since :func:`cpu_start`
    and the CPUs it may use: the ground truth of its share of the job's CPUs."""
    cpu, wall = time.process_time() - _CPU_START[0], time.monotonic() - _CPU_START[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"cpu{rank}.json"), "w") as f:
        json.dump({"cpu": cpu, "wall": wall, "cpus": len(os.sched_getaffinity(0))}, f)


def write_calls(out: str, rank: int) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"calls{rank}.json"), "w") as f:
        json.dump(CALLS, f)


def limit_tasks(cgroup: str) -> None:
    """Move this process into the pids cgroup ``cgroup`` and cap it at its tasks now.

    From then on ``pthread_create`` and ``fork`` fail with EAGAIN (a real ``pids.max``
    limit, as a container's): a new thread is ``RuntimeError: can't start new thread``.
    """
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    with open(os.path.join(cgroup, "pids.current")) as f:
        current = f.read().strip()
    with open(os.path.join(cgroup, "pids.max"), "w") as f:
        f.write(current)
