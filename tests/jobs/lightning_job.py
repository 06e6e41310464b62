"""A Lightning DDP run (gloo, CPU) for tests/test_distributed.py.

Usage: ``python lightning_job.py OUT MODE [OPTIONS]``; OPTIONS: the callback's options as
JSON (default ``{"interval": 0.05}``), or a list of them: one ``Trainer.fit`` after the
other for each, in the same processes and (MODE ``nodes``) process group, run ``i``
written under OUT/{i} (the launch, the imports and the rendezvous, most of a run's time
on 2 CPUs, paid once). With ``JOB_PIDS_CGROUP=DIR`` (a pids cgroup v1 directory) in
its environment, a rank caps its tasks there at setup (a real ``pids.max`` limit: no new
thread or process from then on); with ``JOB_NO_THREADS=1``, no sysmetrics thread can
start (``RuntimeError: can't start new thread``, injected by patching
``threading.Thread.start``); with ``JOB_FETCH_SLEEP=SECONDS``, each batch's fetch
(its collate function) sleeps that long on this node (a comma-separated list: each
run's, empty for none). MODE ``nodes``: one rank per node,
``num_nodes=2`` (the launcher sets ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); node
1 keeps a busy child process, so its numbers differ from node 0's. MODE ``spawn``: one
node, two ranks under ``ddp_spawn``, each training step spinning a CPU. Rank 0 writes a
CSVLogger under OUT; every rank writes the steps of its all-gathers to OUT/calls{rank}.json
and its CPU time in training to OUT/cpu{rank}.json.
With ``run_file`` the callback also writes ``run_file=True`` (in rank 0's log directory).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import common  # before torch.distributed is used: counts the collectives
import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from sysmetrics.integrations.lightning import SystemMetricsCallback


class Spinning(pl.LightningModule):
    def __init__(self, spin: float) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.spin = spin

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        common.spin(self.spin)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Marks(pl.Callback):
    """Records the step for the collective counter; node 1 runs a busy child. ``leave``:
    the ranks leave the process group at teardown (``ddp_spawn``'s ranks, whose process
    group ends with the fit; several runs of ``nodes`` keep theirs until the last)."""

    def __init__(self, out: str, busy: bool, leave: bool) -> None:
        self.out, self.busy, self.leave = out, busy, leave
        self.child: Any = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        cgroup = os.environ.get("JOB_PIDS_CGROUP")
        if cgroup:  # the busy child first: no process can start under the limit
            if self.busy and trainer.node_rank == 1:
                self.child = common.busy_child()
            common.limit_tasks(cgroup)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        common.cpu_start()
        if self.busy and trainer.node_rank == 1 and self.child is None:
            self.child = common.busy_child()

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        common.STEP[0] = trainer.global_step

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.child is not None:
            self.child.kill()
            self.child.wait()
        common.write_calls(self.out, trainer.global_rank)
        common.write_cpu(self.out, trainer.global_rank)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.leave:
            common.leave()


class SlowCollate:
    """The default collate, after sleeping ``seconds``: a slow loader."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, items: list[Any]) -> Any:
        time.sleep(self.seconds)
        return torch.utils.data.default_collate(items)


def no_sysmetrics_threads() -> None:
    """Every thread sysmetrics starts fails as ``pthread_create`` does at a process limit."""
    start = threading.Thread.start

    def failing_start(self: threading.Thread) -> None:
        if self.name.startswith("sysmetrics"):
            raise RuntimeError("can't start new thread")
        start(self)

    threading.Thread.start = failing_start  # type: ignore[method-assign]


def fit(out: str, nodes: bool, options: dict[str, Any], fetch_sleep: float) -> None:
    """One run: its own model, callbacks, logger and collective count under ``out``."""
    # The tests read this job's console for warnings: the findings told live (a loaded
    # machine is contention) have their own test (tests/test_live_findings.py).
    options.setdefault("live_findings", False)
    common.CALLS.clear()
    common.STEP[0] = -1
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(192, 8, generator=g), torch.randn(192, 1, generator=g))
    trainer = pl.Trainer(
        max_epochs=1, log_every_n_steps=4, accelerator="cpu",
        num_nodes=2 if nodes else 1, devices=1 if nodes else 2,
        strategy="ddp" if nodes else "ddp_spawn",
        logger=CSVLogger(out, name="csv"),
        callbacks=[SystemMetricsCallback(**options), Marks(out, busy=nodes, leave=not nodes)],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    collate = SlowCollate(fetch_sleep) if fetch_sleep > 0 else None
    loader = DataLoader(data, batch_size=4, collate_fn=collate)
    trainer.fit(Spinning(0.03 if nodes else 0.1), loader)


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    given = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {"interval": 0.05}
    runs = given if isinstance(given, list) else [given]
    sleeps = os.environ.get("JOB_FETCH_SLEEP", "").split(",")
    if os.environ.get("JOB_NO_THREADS") == "1":
        no_sysmetrics_threads()
    nodes = mode == "nodes"
    for i, options in enumerate(runs):
        where = os.path.join(out, str(i)) if isinstance(given, list) else out
        sleep = sleeps[i] if len(sleeps) > 1 else sleeps[0]
        fit(where, nodes, options, float(sleep or 0))
    if nodes:
        common.leave()


if __name__ == "__main__":
    main()
