"""The diagnosis suite's scenarios and their labels: one table, the harness's only input.

Each :class:`Scenario` is a real job (a :mod:`workloads` program under ``sysmetrics
record``, or a framework's callback writing its run file), two of them as two nodes, or
a run file shaped like a GPU job (:mod:`gpu_runs`: there is no GPU here). Its label says
what is true by construction: the rules that must fire, those that must not, the rule
whose finding is the top cause and the words (a regular expression) that finding's
sentence must hold to name the cause. ``premise`` names what the harness must measure on
the machine during the run for the label to hold (:data:`PREMISES` in ``suite.py``); a
scenario whose premise did not hold is reported void, not scored. ``fixes`` names the
scenario this one is the fixed variant of (for the predicted gain of issue 32 item 5:
the harness prints the realised speed-up of each pair).
"""

from __future__ import annotations

from dataclasses import dataclass

HEALTHY = "healthy"  # the top cause of a healthy control: no finding at all


@dataclass(frozen=True)
class Scenario:
    """One labelled scenario.

    Attributes:
        name: its name (the table's row).
        what: one line: what it is and why its label is true.
        kind: ``record`` (``sysmetrics record -- python workloads.py plain ...``),
            ``callback`` (a framework job writing its run file), ``notebook`` (the same
            job run in a real Jupyter kernel, as a notebook's cell), ``nodes`` (two
            ``record`` processes with node ranks 0 and 1; ``args`` of node 0, ``args1``
            of node 1) or ``crafted`` (``gpu_runs.RUNS[name]``).
        args: the workload's arguments.
        must: rules that must fire.
        must_not: rules that must not fire (a healthy control: every rule).
        top: the rule whose finding names the top cause, or :data:`HEALTHY`.
        cause: a regular expression the top finding's sentence must match.
        premise: what the harness must measure during the run (see ``suite.py``).
        quick: in the ``--quick`` subset.
        fixes: the scenario this one is the fixed variant of.
        issue: the misdiagnosis of issue 32 it reproduces, if any.

    """

    name: str
    what: str
    kind: str
    args: tuple[str, ...] = ()
    args1: tuple[str, ...] = ()
    must: tuple[str, ...] = ()
    must_not: tuple[str, ...] = ()
    top: str = HEALTHY
    cause: str = ""
    premise: tuple[str, ...] = ()
    quick: bool = False
    fixes: str = ""
    issue: str = ""
    interval: float = 1.0
    kill_after: float = 0.0  # s: the harness kills the workload this long after its start


CPU_RULES = ("cpu-bound", "single-core", "contention")
SECONDS = ("--seconds", "25")

SCENARIOS: tuple[Scenario, ...] = (
    # ---- input-bound, and its sub-cause ------------------------------------------------
    Scenario(
        "input-slow-io",
        "each item takes 40 ms of waiting (I/O) in the loop's own process; "
        "the step 10 ms: 80 % of the time is the fetch, the CPU idle",
        "record",
        ("plain", "--fetch", "0.04", "--step", "0.01", *SECONDS),
        must=("input-bound",),
        must_not=CPU_RULES,
        top="input-bound",
        cause=r"waits on I/O|too few workers",
        quick=True,
    ),
    Scenario(
        "input-slow-io-fixed",
        "the same with 8 workers prefetching: the fetch overlaps the steps",
        "record",
        ("plain", "--fetch", "0.04", "--step", "0.01", "--workers", "8", *SECONDS),
        must_not=("input-bound", *CPU_RULES),
        fixes="input-slow-io",
    ),
    Scenario(
        "input-cpu-transforms",
        "each item takes 120 ms of CPU-heavy transforms in 2 workers (as many as CPUs), "
        "the step 30 ms: the CPUs saturated, more workers cannot help",
        "record",
        ("plain", "--fetch-cpu", "0.12", "--workers", "2", "--step", "0.03", *SECONDS),
        must=("input-bound",),
        must_not=("single-core",),
        top="input-bound",
        cause=r"saturated",
        premise=("job_saturated",),
    ),
    Scenario(
        "input-cpu-transforms-fixed",
        "the transforms' cost cut to 2 ms (moved off the loader), the same 30 ms step: the "
        "loop no longer waits (only the fix differs: the realised gain is the fix's)",
        "record",
        ("plain", "--fetch-cpu", "0.002", "--workers", "2", "--step", "0.03", *SECONDS),
        must_not=("input-bound",),
        fixes="input-cpu-transforms",
    ),
    # ---- the CPU -----------------------------------------------------------------------
    Scenario(
        "single-core",
        "one Python thread computes (the GIL): about one CPU of 2",
        "record",
        ("plain", "--step-cpu", "0.05", *SECONDS),
        must=("single-core",),
        must_not=("input-bound", "cpu-bound"),
        top="single-core",
        cause=r"one thread|one CPU",
        premise=("host_free",),
        quick=True,
    ),
    Scenario(
        "cpu-bound",
        "torch matrix products on every CPU, nothing else",
        "record",
        ("plain", "--matmul", "4", *SECONDS),
        must=("cpu-bound",),
        must_not=("input-bound", "single-core"),
        top="cpu-bound",
        cause=r"CPU-bound",
        premise=("job_saturated",),
    ),
    Scenario(
        "contention",
        "a single-threaded job while a process outside the job spins on one "
        "CPU (the harness starts it)",
        "record",
        ("plain", "--step-cpu", "0.05", *SECONDS),
        must=("contention",),
        top="contention",
        cause=r"other",
        premise=("others_busy",),
    ),
    Scenario(
        "contention-hides-single-core",
        "the same: single-core is also true (issue 32: only contention was said), "
        "where the job gets about one CPU's worth (its one thread, the busiest, does the "
        "work; under more load than the harness's spinner the job gets less, and "
        "nothing tells a starved thread from one that asks for that little)",
        "record",
        ("plain", "--step-cpu", "0.05", *SECONDS),
        must=("contention", "single-core"),
        top="contention",
        cause=r"other",
        premise=("others_busy", "job_one_cpu"),
        issue="one cause hides another",
    ),
    # ---- stalls --------------------------------------------------------------------------
    Scenario(
        "stall-idle",
        "100 ms steps, then 15 s asleep at step 40 (a hang), then steps again",
        "record",
        (
            "plain",
            "--step",
            "0.1",
            "--pause",
            "15",
            "--pause-at",
            "40",
            "--seconds",
            "12",
        ),
        must=("stall",),
        must_not=("input-bound", "slow-steps"),
        top="stall",
        cause=r"hang or a deadlock",
        quick=True,
    ),
    Scenario(
        "stall-idle-fixed",
        "the same steps without the hang: the stall's gain, realised",
        "record",
        ("plain", "--step", "0.1", "--seconds", "12"),
        must_not=("stall", "input-bound", "slow-steps"),
        fixes="stall-idle",
        quick=True,
    ),
    Scenario(
        "stall-busy",
        "100 ms steps, then a 15 s CPU-busy evaluation at step 40",
        "record",
        (
            "plain",
            "--step",
            "0.1",
            "--pause",
            "15",
            "--pause-at",
            "40",
            "--busy-pause",
            "--seconds",
            "12",
        ),
        must=("stall",),
        must_not=("input-bound", "slow-steps"),
        top="stall",
        cause=r"work outside the steps",
    ),
    Scenario(
        "ends-stalled",
        "100 ms steps, then it hangs at step 40 until the harness kills it at 25 s (at "
        "step 80 the loaded machine reached the hang 2 s before the kill: no stall to see)",
        "record",
        ("plain", "--step", "0.1", "--hang-at", "40", "--seconds", "60"),
        must=("stall",),
        must_not=("input-bound",),
        top="stall",
        cause=r"ended stalled",
        kill_after=25.0,
    ),
    # ---- slow steps, warm-up -------------------------------------------------------------
    Scenario(
        "checkpoint-1s",
        "Lightning, 100 ms steps, every 20th writes and fsyncs 200 MiB or more, for 1 s "
        "(issue 32: a ~1 s step, averaged away at the default 1 s interval; on a quiet VM "
        "200 MiB alone took 0.2 s, under 3 times the step)",
        "callback",
        (
            "lightning",
            "--step",
            "0.1",
            "--every",
            "20",
            "--checkpoint-mib",
            "200",
            "--checkpoint-seconds",
            "1",
            "--seconds",
            "30",
        ),
        must=("slow-steps",),
        must_not=("input-bound", "stall"),
        top="slow-steps",
        cause=r"disk writes",
        issue="slow steps averaged away",
        quick=True,
    ),
    Scenario(
        "checkpoint-1s-fixed",
        "the same steps without the checkpoint writes: the slow steps' gain, realised",
        "callback",
        ("lightning", "--step", "0.1", "--seconds", "30"),
        must_not=("slow-steps", "input-bound", "stall"),
        fixes="checkpoint-1s",
    ),
    Scenario(
        "checkpoint-0.25s",
        "the same at a 0.25 s interval (issue 32: not seen either)",
        "callback",
        (
            "lightning",
            "--step",
            "0.1",
            "--every",
            "20",
            "--checkpoint-mib",
            "200",
            "--checkpoint-seconds",
            "1",
            "--seconds",
            "30",
        ),
        must=("slow-steps",),
        must_not=("input-bound", "stall"),
        top="slow-steps",
        cause=r"disk writes",
        issue="slow steps averaged away",
        interval=0.25,
    ),
    Scenario(
        "warm-up",
        "Lightning, a 6 s first step then 100 ms steps, 10 s in all (issue 32: "
        "told slow steps live)",
        "callback",
        ("lightning", "--step", "0.1", "--warmup", "6", "--seconds", "10"),
        must_not=("slow-steps", "stall", "input-bound"),
        issue="warm-up told slow steps",
        interval=0.25,
    ),
    # ---- memory --------------------------------------------------------------------------
    Scenario(
        "memory-near-limit",
        "the job's PSS fills 92 % of its cgroup's (v1) 2 GiB memory limit (the recorder "
        "shares the cgroup: a little over 2 % is left)",
        "record",
        ("plain", "--step", "0.1", "--fill-cgroup", "0.92", *SECONDS),
        must=("memory-limit",),
        top="memory-limit",
        cause=r"memory available to it",
        premise=("cgroup_2048",),
    ),
    Scenario(
        "memory-far-from-limit",
        "the job holds 100 MiB in a cgroup (v1) limited to 2 GiB",
        "record",
        ("plain", "--step", "0.1", "--memory-mib", "100", *SECONDS),
        must_not=("memory-limit",),
        premise=("cgroup_2048",),
    ),
    # ---- nodes ---------------------------------------------------------------------------
    Scenario(
        "straggler-node",
        "two nodes; node 1's steps take 250 ms, node 0's 100 ms",
        "nodes",
        ("plain", "--step", "0.1", *SECONDS),
        ("plain", "--step", "0.25", *SECONDS),
        must=("straggler-node",),
        top="straggler-node",
        cause=r"Node 1",
    ),
    Scenario(
        "equal-nodes",
        "two nodes, both 100 ms steps",
        "nodes",
        ("plain", "--step", "0.1", *SECONDS),
        ("plain", "--step", "0.1", *SECONDS),
        must_not=("straggler-node",),
        quick=True,
    ),
    # ---- healthy controls: no finding at all -----------------------------------------------
    Scenario(
        "healthy-plain",
        "a plain loop, 50 ms steps (the accelerator: asleep), data ready",
        "record",
        ("plain", "--step", "0.05", *SECONDS),
        quick=True,
    ),
    Scenario(
        "healthy-lightning-bar",
        "Lightning with the progress bar on, 50 ms steps",
        "callback",
        ("lightning", "--step", "0.05", "--bar", *SECONDS),
        issue="the framework blamed on the loader",
    ),
    Scenario(
        "healthy-notebook",
        "Lightning in a real Jupyter kernel (ipykernel, its cell run through jupyter_client "
        "as a notebook's frontend runs it), the progress bar on, 50 ms steps",
        "notebook",
        ("lightning", "--step", "0.05", "--bar", *SECONDS),
        issue="the framework blamed on the loader",
    ),
    Scenario(
        "healthy-transformers",
        "transformers' Trainer, 50 ms steps",
        "callback",
        ("transformers", "--step", "0.05", *SECONDS),
    ),
    Scenario(
        "transformers-slow-callback",
        "transformers' Trainer, 50 ms steps, then 50 ms in a callback after sysmetrics' "
        "(as logging or a progress bar between steps): not the loader",
        "callback",
        ("transformers", "--step", "0.05", "--sleep-after", *SECONDS),
        must=("framework-overhead",),
        must_not=("input-bound",),
        top="framework-overhead",
        cause=r"outside the batch fetch",
        issue="the framework blamed on the loader",
    ),
    Scenario(
        "lightning-slow-bar",
        "Lightning, 50 ms steps, its progress bar taking 50 ms to redraw each step (as in "
        "a notebook) between the step hooks: not the loader",
        "callback",
        ("lightning", "--step", "0.05", "--bar", "--bar-redraw", "0.05", *SECONDS),
        must=("framework-overhead",),
        must_not=("input-bound",),
        top="framework-overhead",
        cause=r"progress bar",
        issue="the framework blamed on the loader",
    ),
    Scenario(
        "healthy-keras",
        "Keras (torch backend), 50 ms steps",
        "callback",
        ("keras", "--step", "0.05", *SECONDS),
    ),
    # ---- run files shaped like GPU jobs (crafted: no GPU here) ------------------------------
    Scenario(
        "gpu-bound",
        "GPU 99 % busy, data wait 1 %, the job at one CPU of 8 (issue 32: told single-core)",
        "crafted",
        must_not=("single-core", "input-bound", "cpu-bound"),
        issue="a GPU-bound job told it is CPU-limited",
        quick=True,
    ),
    Scenario(
        "gpu-input-bound",
        "data wait 70 %, GPU 25 % busy, the job's CPU 20 %",
        "crafted",
        must=("input-bound",),
        must_not=("single-core", "cpu-bound"),
        top="input-bound",
        cause=r"waits on I/O|too few workers",
        quick=True,
    ),
    Scenario(
        "gpu-throttled",
        "GPU 95 % busy and thermally throttled in half the samples",
        "crafted",
        must=("gpu-throttling",),
        must_not=("single-core",),
        top="gpu-throttling",
        cause=r"GPU 0",
        quick=True,
    ),
    Scenario(
        "gpu-unused",
        "two GPUs; the job's processes are on GPU 0 only",
        "crafted",
        must=("unused-gpu",),
        must_not=("single-core",),
        top="unused-gpu",
        cause=r"GPU 1",
        quick=True,
    ),
    Scenario(
        "gpu-memory-near-limit",
        "GPU 0's memory 97 % allocated",
        "crafted",
        must=("gpu-memory-limit",),
        must_not=("single-core",),
        top="gpu-memory-limit",
        cause=r"GPU 0",
        quick=True,
    ),
)
"""Every scenario, in the order the harness runs them."""

BY_NAME = {s.name: s for s in SCENARIOS}
if len(BY_NAME) != len(SCENARIOS):  # pragma: no cover - a table error
    raise RuntimeError("two diagnosis scenarios have the same name")
