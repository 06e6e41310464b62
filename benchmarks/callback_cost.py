"""What the callbacks cost the training thread per step, measured inside real training.

Run: ``python benchmarks/callback_cost.py``. Each framework trains a tiny model on CPU
with a ``SystemMetricsCallback`` subclass that times its own per-step hook
(``perf_counter`` around the real hook; for Lightning, around the wrapper the callback
puts on the trainer's step logging, less the trainer's own part) and splits the calls
into steps that logged and steps that did not, and times the hook that stamps the step
on the monitor at the start of each step (for run files). Prints the median µs of each,
per framework. A second table: what the step timing (``step.*`` keys) adds to the hooks
that begin and end each step, the same training timed with it and without it. A third,
for plain loops under ``sysmetrics record``: what ``sysmetrics.batches`` adds per item
and ``sysmetrics.step`` costs, without the recorder, marking steps only, and timing them
(:func:`plain_loop`), beside the bare writes a step can take: a store into a mapping of
the step file (the design before issue 30: a truncated file kills it with SIGBUS), one
``pwrite`` of the step, and one ``pwritev`` of the step and the timing block (what
``step()`` does now). ``python benchmarks/callback_cost.py plain`` prints that table alone.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "torch")


def timed(cls: type, hook: str, stamp: str | None = None) -> type:
    """A subclass of ``cls`` whose ``hook`` records (µs, logged) for each call.

    ``stamp`` names the per-step hook that stamps the step on the monitor (for run
    files); its calls are timed into ``stamps``.
    """

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        reader = self.core.reader
        before = reader.snapshot if reader is not None else None
        logged = [False]
        if before is not None:

            def snap(*args: Any) -> dict[str, float]:
                logged[0] = True
                return before(*args)  # type: ignore[no-any-return]

            reader.snapshot = snap
        t = time.perf_counter()
        try:
            return getattr(cls, hook)(self, *args, **kwargs)
        finally:
            self.samples.append(((time.perf_counter() - t) * 1e6, logged[0]))
            if before is not None:
                del reader.snapshot

    def stamped(self: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return getattr(cls, stamp)(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            self.stamps.append((time.perf_counter() - t) * 1e6)

    members: dict[str, Any] = {hook: wrapper, "samples": [], "stamps": []}
    if stamp is not None:
        members[stamp] = stamped
    return type(cls.__name__, (cls,), members)


Samples = tuple[list[tuple[float, bool]], list[float]]


def report(name: str, result: Samples) -> None:
    samples, stamps = result
    quiet = [us for us, logged in samples if not logged]
    loud = [us for us, logged in samples if logged]
    q = f"{statistics.median(quiet):10.1f}" if quiet else f"{'-':>10}"
    lo = f"{statistics.median(loud):10.1f}" if loud else f"{'-':>10}"
    st = f"{statistics.median(stamps):10.1f}" if stamps else f"{'-':>10}"
    print(f"{name:<14}{q}{lo}{st}{len(quiet):>10}{len(loud):>8}")


def lightning() -> Samples:
    from sysmetrics.integrations.lightning import SystemMetricsCallback

    class Timed(SystemMetricsCallback):
        """Times what the callback adds per step where the trainer decides to log.

        The callback wraps the trainer's ``update_train_step_metrics``; a timer inside
        the wrapper (around the trainer's own method) and one outside it give, by
        difference, the time of the gate and the logging the callback adds.
        """

        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.samples: list[tuple[float, bool]] = []
            self.stamps: list[float] = []

        def on_train_batch_start(self, *args: Any) -> None:
            t = time.perf_counter()
            super().on_train_batch_start(*args)
            self.stamps.append((time.perf_counter() - t) * 1e6)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            connector = trainer._logger_connector
            own = connector.update_train_step_metrics
            inner = [0.0]

            def trainer_part() -> None:
                t = time.perf_counter()
                own()
                inner[0] = time.perf_counter() - t

            connector.update_train_step_metrics = trainer_part
            super().on_train_start(trainer, pl_module)
            ours = connector.update_train_step_metrics
            reader = self.core.reader
            before = reader.snapshot

            def both() -> None:
                logged = [False]

                def snap(*args: Any) -> dict[str, float]:
                    logged[0] = True
                    return before(*args)

                reader.snapshot = snap  # type: ignore[method-assign]
                t = time.perf_counter()
                ours()
                self.samples.append(((time.perf_counter() - t - inner[0]) * 1e6, logged[0]))
                del reader.snapshot

            connector.update_train_step_metrics = both

    cb = Timed(interval=1.0)
    lightning_fit(cb)
    return cb.samples, cb.stamps


def lightning_fit(cb: Any) -> None:
    """Two epochs of a tiny regressor, 256 batches each, with the callback ``cb``."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(32, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    x = torch.randn(4096, 32)
    trainer = pl.Trainer(
        max_epochs=2, log_every_n_steps=50, logger=CSVLogger(tempfile.mkdtemp()),
        callbacks=[cb], enable_progress_bar=False, enable_checkpointing=False,
        enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(Model(), DataLoader(TensorDataset(x, x[:, :1]), batch_size=16))


def transformers() -> Samples:
    from sysmetrics.integrations.transformers import SystemMetricsCallback

    cbs = []
    for hook in ("on_step_end", "on_log"):
        cb = timed(SystemMetricsCallback, hook, "on_step_begin" if not cbs else None)(interval=1.0)
        cbs.append(cb)
    # Two callbacks, each timing one hook; the second one's on_log does the logging.
    transformers_train(cbs)
    logged = [s for s in cbs[1].samples if s[1]]
    return cbs[0].samples + logged, cbs[0].stamps  # type: ignore[attr-defined]


def transformers_train(cbs: list[Any]) -> None:
    """One epoch of a tiny GPT-2, 128 steps of 8 sequences, with the callbacks ``cbs``."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    ids = torch.randint(0, 64, (1024, 8))
    data = [{"input_ids": i, "labels": i} for i in ids]
    config = GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=8, num_train_epochs=1,
        logging_steps=50, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data, callbacks=cbs).train()


def keras_() -> Samples:
    from sysmetrics.integrations.keras import SystemMetricsCallback

    cb = timed(SystemMetricsCallback, "on_train_batch_end", "on_train_batch_begin")(
        interval=1.0, logging_interval="step", log_every_n_steps=50
    )
    keras_fit(cb)
    return cb.samples, cb.stamps  # type: ignore[attr-defined]


def keras_fit(cb: Any) -> None:
    """Two epochs of a tiny regressor, 256 batches each, with the callback ``cb``."""
    import keras
    import numpy as np

    x = np.random.default_rng(0).normal(size=(4096, 32)).astype("float32")
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, x[:, :1], batch_size=16, epochs=2, verbose=0, callbacks=[cb])


class NullClock:
    """A step clock that marks nothing: a callback's hooks without the step timing."""

    def restart(self) -> None:
        """Nothing: the epoch starts."""

    def begin(self) -> None:
        """Nothing: a batch's hooks start."""

    def end(self, samples: float = 0.0, optimizer_step: bool = True) -> None:
        """Nothing: a batch's hooks end."""


def per_step(cls: type, begin: str, end: str, module: Any = None) -> type:
    """A subclass of ``cls`` that records the µs its ``begin`` and ``end`` hooks take per step.

    Steps alternate between the step timing on and off, so both are measured side by
    side in the same training: off, the run's clock is a :class:`NullClock`, Keras' step
    arithmetic (``_mark_steps``) does nothing and ``module.batch_size`` (Lightning's batch
    size read) returns None, so what is left is the hooks as they were without step
    timing. The switch happens before the begin hook's timer starts. ``timed`` and
    ``untimed`` get the µs of each step.
    """
    read_batch = getattr(module, "batch_size", None)

    def hook(name: str, closes: bool) -> Any:
        def timed_hook(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not closes:
                self.on = not self.on
                clock = self.core.clock
                if self.on and isinstance(clock, NullClock):
                    self.core.clock = self.real
                elif not self.on and not isinstance(clock, NullClock):
                    self.real, self.core.clock = clock, NullClock()
                if self.on:
                    vars(self).pop("_mark_steps", None)
                else:
                    self._mark_steps = lambda before, done: None
                if module is not None:
                    module.batch_size = read_batch if self.on else lambda batch: None
            t = time.perf_counter()
            try:
                return getattr(cls, name)(self, *args, **kwargs)
            finally:
                self.spent += time.perf_counter() - t
                if closes:
                    (self.timed if self.on else self.untimed).append(self.spent * 1e6)
                    self.spent = 0.0

        return timed_hook

    members: dict[str, Any] = {
        begin: hook(begin, False), end: hook(end, True), "spent": 0.0, "on": False,
        "real": None, "timed": [], "untimed": [],
    }  # fmt: skip
    return type(cls.__name__, (cls,), members)


def step_timing() -> list[tuple[str, list[float], list[float]]]:
    """Per framework: µs per step of the hooks that mark steps, with and without timing.

    One training per framework, its steps alternately timed and not (:func:`per_step`),
    timed around the same two hooks (the step's begin and end), which also stamp the
    step on the monitor and decide the logging cadence as they always did. Nothing logs
    in them: transformers and Keras log in other hooks, Lightning in the trainer's own.
    """
    import sysmetrics.integrations.lightning as lightning_cb
    from sysmetrics.integrations.keras import SystemMetricsCallback as KerasCallback
    from sysmetrics.integrations.transformers import SystemMetricsCallback as HFCallback

    rows = []
    read_batch = lightning_cb.batch_size
    cb: Any = per_step(
        lightning_cb.SystemMetricsCallback, "on_train_batch_start", "on_train_batch_end",
        lightning_cb,
    )(interval=1.0)  # fmt: skip
    try:
        lightning_fit(cb)
    finally:
        lightning_cb.batch_size = read_batch
    rows.append(("lightning", cb.timed, cb.untimed))
    cb = per_step(HFCallback, "on_step_begin", "on_step_end")(interval=1.0)
    transformers_train([cb])
    rows.append(("transformers", cb.timed, cb.untimed))
    cb = per_step(KerasCallback, "on_train_batch_begin", "on_train_batch_end")(interval=1.0)
    keras_fit(cb)
    rows.append(("keras", cb.timed, cb.untimed))
    return rows


def report_step_timing(rows: list[tuple[str, list[float], list[float]]]) -> None:
    print(f"\n{'framework':<14}{'timed µs':>10}{'untimed µs':>12}{'added µs':>10}{'steps':>8}")
    for name, on, off in rows:
        a, b = statistics.median(on), statistics.median(off)
        print(f"{name:<14}{a:10.2f}{b:12.2f}{a - b:10.2f}{len(on) + len(off):>8}")
    print("timed/untimed: a step's begin and end hooks together, with the step timing on")
    print("and off (alternate steps of one training; median); added: the difference")
    print(f"for scale, warm: a StepClock begin() + end() pair {warm_clock():.2f} µs")


def warm_clock(n: int = 100_000) -> float:
    """µs per ``begin()`` + ``end()`` of a step clock in a tight loop (warm caches)."""
    from sysmetrics.steptime import StepClock

    clock = StepClock()
    clock.restart()
    t = time.perf_counter()
    for _ in range(n):
        clock.begin()
        clock.end(16.0)
    return (time.perf_counter() - t) / n * 1e6


def plain_loop(items: int = 20_000, rounds: int = 9) -> dict[str, tuple[float, float]]:
    """What ``sysmetrics.batches`` adds per item and ``sysmetrics.step`` costs per call.

    In this process, in rounds: a loop over ``items`` batches (arrays of 16 samples) bare,
    through ``sysmetrics.batches`` without the recorder (``SYSMETRICS_STEP_FILE`` unset)
    and with a step file as the recorder makes it (timing on); ``sysmetrics.step`` with no
    step file, marking the step only (a loop without ``batches``: the cost before step
    timing) and closing a timed step. Returns {what: (median µs, min µs)} per item or call.
    """
    import numpy as np

    import sysmetrics
    from sysmetrics import stepfile

    data = [np.zeros((16, 32), dtype=np.float32)] * items

    def fresh(path: str | None) -> None:  # as in a new process, SYSMETRICS_STEP_FILE=path
        if stepfile._fd is not None:
            os.close(stepfile._fd)
        stepfile._fd = stepfile._timing = None
        stepfile._tried = stepfile._timing_tried = False
        if path is None:
            os.environ.pop(stepfile.ENV, None)
        else:
            os.environ[stepfile.ENV] = path

    def per_item(loop: Any) -> float:
        t = time.perf_counter()
        for _ in loop:
            pass
        return (time.perf_counter() - t) / items * 1e6

    def per_step(calls: int = 20_000) -> float:
        step = sysmetrics.step
        t = time.perf_counter()
        for i in range(calls):
            step(i)
        return (time.perf_counter() - t) / calls * 1e6

    saved = os.environ.get(stepfile.ENV)
    times: dict[str, list[float]] = {}
    tmp = stepfile.private_directory()  # where record makes it: memory where it can, 0700
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, tmp, True)
        disk = tempfile.mkdtemp()
        cleanup.callback(shutil.rmtree, disk, True)
        on_disk = stepfile.create(disk)
        for r in range(rounds):
            path = stepfile.create(tmp) if r == 0 else os.path.join(tmp, "step")
            bare = per_item(data)
            fresh(None)
            times.setdefault("batches, no recorder", []).append(
                per_item(sysmetrics.batches(data)) - bare
            )
            times.setdefault("step, no recorder", []).append(per_step())
            fresh(path)
            times.setdefault("step, marking only", []).append(per_step())
            fresh(path)
            times.setdefault("batches, recorder", []).append(
                per_item(sysmetrics.batches(data)) - bare
            )
            times.setdefault("batches, recorder, batch_size", []).append(
                per_item(sysmetrics.batches(data, batch_size=16)) - bare
            )
            times.setdefault("step, timed", []).append(per_step())
            for name, cost in bare_writes(path).items():
                times.setdefault(name, []).append(cost)
            for name, cost in bare_writes(on_disk).items():  # the temporary directory's
                if "pwritev" in name:
                    times.setdefault(f"{name}, {tempfile.gettempdir()}", []).append(cost)
        fresh(saved)
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def bare_writes(path: str, calls: int = 20_000) -> dict[str, float]:
    """µs per call of the writes a step can take into the step file at ``path``."""
    from sysmetrics import stepfile

    step = b"1".ljust(stepfile.WIDTH)
    mark = stepfile._SEQ.pack(1)
    block = [step, stepfile._GAP, mark, stepfile._TOTALS.pack(1, 1, 1.0, 0.5, 8.0), mark]
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, stepfile.SIZE)
    at, end = stepfile.STEP_AT, stepfile.STEP_AT + stepfile.WIDTH
    out = {}
    try:
        t = time.perf_counter()
        for _ in range(calls):
            m[at:end] = step
        out["write: mmap store (before)"] = (time.perf_counter() - t) / calls * 1e6
        t = time.perf_counter()
        for _ in range(calls):
            os.pwrite(fd, step, at)
        out["write: pwrite, step only"] = (time.perf_counter() - t) / calls * 1e6
        t = time.perf_counter()
        for _ in range(calls):
            os.pwritev(fd, block, at)
        out["write: pwritev, step + totals"] = (time.perf_counter() - t) / calls * 1e6
    finally:
        m.close()
        os.close(fd)
    return out


def report_plain_loop(result: dict[str, tuple[float, float]]) -> None:
    print(f"\n{'plain loop':<40}{'median µs':>10}{'min µs':>10}")
    for name, (median, least) in result.items():
        print(f"{name:<40}{median:10.2f}{least:10.2f}")
    print("batches: added per item over the bare loop; step: per call; marking only: under")
    print("the recorder without batches (the cost before step timing); timed: with batches;")
    print("write: the bare write alone, per call")


def main() -> None:
    results = [("lightning", lightning()), ("transformers", transformers()), ("keras", keras_())]
    print(
        f"\n{'framework':<14}{'quiet µs':>10}{'log µs':>10}{'stamp µs':>10}"
        f"{'quiet n':>10}{'log n':>8}"
    )
    for name, samples in results:
        report(name, samples)
    print("quiet: per-step hook on a step that does not log; log: one that logs (median);")
    print("stamp: the hook that stamps the step on the monitor at each step's start (median)")
    report_step_timing(step_timing())
    report_plain_loop(plain_loop())


if __name__ == "__main__":
    if sys.argv[1:] == ["plain"]:
        report_plain_loop(plain_loop())
    else:
        main()
