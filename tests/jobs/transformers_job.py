"""A transformers Trainer run under torchrun (gloo, CPU) for tests/test_distributed.py.

Usage: ``torchrun ... transformers_job.py OUT MODE``. MODE ``nodes``: one rank per node
(``--nnodes 2 --node_rank k``); node 1 keeps a busy child process. MODE ``ranks``: one
node, two ranks (``--nproc-per-node 2``), each step spinning a CPU. The world's rank 0
writes ``state.log_history`` to OUT/log_history.json; every rank writes the steps of its
all-gathers to OUT/calls{rank}.json, and its CPU time in training to OUT/out/cpu{rank}.json.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import common  # before torch.distributed is used: counts the collectives
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from sysmetrics.integrations.transformers import SystemMetricsCallback


class Tokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 8), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Marks(TrainerCallback):  # type: ignore[misc]
    """Records the step for the collective counter, spins, and runs node 1's busy child."""

    def __init__(self, spin: float, busy: bool) -> None:
        self.spin, self.busy = spin, busy
        self.child: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        common.cpu_start()
        if self.busy and os.environ.get("GROUP_RANK") == "1":
            self.child = common.busy_child()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        common.STEP[0] = state.global_step + 1
        common.spin(self.spin)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        common.write_cpu(args.output_dir, args.process_index)  # OUT/out/cpu{rank}.json
        if self.child is not None:
            self.child.kill()
            self.child.wait()


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    nodes = mode == "nodes"
    config = GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=os.path.join(out, "out"), per_device_train_batch_size=4,
        num_train_epochs=1, logging_steps=4, report_to=[], save_strategy="no",
        use_cpu=True, disable_tqdm=True, ddp_backend="gloo",
    )  # fmt: skip
    trainer = Trainer(
        model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(192),
        # include "*": every rank's series too (rank.{r}.step.*, left out by default)
        callbacks=[SystemMetricsCallback(interval=0.05, include=["*"]),
                   Marks(0.03 if nodes else 0.1, nodes)],
    )  # fmt: skip
    trainer.train()
    rank = int(os.environ["RANK"])
    common.write_calls(out, rank)
    if rank == 0:
        with open(os.path.join(out, "log_history.json"), "w") as f:
            json.dump(trainer.state.log_history, f)
    common.leave()


if __name__ == "__main__":
    main()
