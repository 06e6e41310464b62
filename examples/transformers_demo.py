"""Train a tiny GPT-2 (built from a config, nothing downloaded) with the HF Trainer.

Run: ``python examples/transformers_demo.py [output folder]``. System metrics join the
Trainer's training logs, so every ``report_to`` reporter (TensorBoard here) and
``trainer.state.log_history`` get them at the logging steps.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from sysmetrics.integrations.transformers import SystemMetricsCallback


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[misc]
    def __init__(self, n: int = 512, length: int = 32) -> None:
        self.ids = torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sysmetrics-"))
    config = GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=16, num_train_epochs=2,
        logging_steps=8, report_to=["tensorboard"], save_strategy="no", use_cpu=True,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=RandomTokens(),
                      callbacks=[SystemMetricsCallback(interval=0.5)])  # fmt: skip
    trainer.train()
    print(f"\nTensorBoard event files under {out} (tags train/system/...)")
    for h in trainer.state.log_history:
        if "system/cpu" in h:
            print(f"step {h['step']:>4}  loss {h['loss']:.3f}  cpu {h['system/cpu']:.1f}%  "
                  f"rss {h['system/proc.memory.rssMB']:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
