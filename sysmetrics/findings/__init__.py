"""Findings: what a run says about itself, in plain language, one small rule each.

:func:`read_run` (from :mod:`sysmetrics.runfile`, where the run file's schema is) reads a
run file into a :class:`Run`; :func:`findings` applies every rule of :data:`RULES` and
returns one :class:`Finding` per thing worth saying (``rule``, ``sentence``,
``evidence``, ``span``, ``subject``). A rule says nothing when its evidence is not in the
run (its keys are missing, or there are too few samples): where no rule fires, say
:data:`NO_MATCH`,
not that nothing held the run back. The rules are pure functions of a run and one pass
over its samples each (no quadratic work), so they also run on a partial run, during
training.

Each rule is declared as data (:class:`Rule`: code, summary, scope, live or not, its
thresholds, its check, why it matters; :data:`REGISTRY`, in
:mod:`~sysmetrics.findings.registry`), with a ``fires`` and a ``quiet`` example run in
``examples/<code>/``. The thresholds' defaults are module-level constants of the rule's
module, all importable from here; ``docs/findings.md`` has the table
generated from the registry:

- :mod:`~sysmetrics.findings.training`: ``input-bound``, ``stall``, ``slow-steps``, from
  the step keys (``step.seconds``, ``step.dataWaitPercent``) or the samples' steps;
- :mod:`~sysmetrics.findings.overhead`: ``framework-overhead``, from
  ``step.overheadPercent``;
- :mod:`~sysmetrics.findings.cpu`: ``cpu-bound``, ``single-core``, ``contention``;
- :mod:`~sysmetrics.findings.machine`: ``memory-limit``, ``gpu-memory-limit``,
  ``gpu-throttling``, ``disk-bound``, ``swap``, ``unused-gpu``;
- :mod:`~sysmetrics.findings.memory`: ``memory-creep``;
- :mod:`~sysmetrics.findings.nodes`: ``straggler-node``, across nodes.

A run of several nodes (samples of several nodes: one file they all appended to,
or several files read into one run) gets the one-node rules on each node's samples, with
``Node k:`` before the sentence and ``node`` in the evidence, and the cross-node rules
on all of them. :mod:`sysmetrics.runfile` says how much :func:`read_run` reads at most.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sysmetrics.findings._base import MIN_SAMPLES as MIN_SAMPLES
from sysmetrics.findings._base import Finding as Finding
from sysmetrics.findings._base import Rule as Rule
from sysmetrics.findings._base import Subject as Subject
from sysmetrics.findings._base import memo as memo
from sysmetrics.findings._base import view as view
from sysmetrics.findings.cpu import CONTENTION_HOST_PERCENT as CONTENTION_HOST_PERCENT
from sysmetrics.findings.cpu import CONTENTION_JOB_MEMORY_SHARE as CONTENTION_JOB_MEMORY_SHARE
from sysmetrics.findings.cpu import CONTENTION_JOB_PERCENT as CONTENTION_JOB_PERCENT
from sysmetrics.findings.cpu import CONTENTION_MEMORY_PERCENT as CONTENTION_MEMORY_PERCENT
from sysmetrics.findings.cpu import CONTENTION_MIN_CPUS as CONTENTION_MIN_CPUS
from sysmetrics.findings.cpu import CONTENTION_SHARE as CONTENTION_SHARE
from sysmetrics.findings.cpu import CPU_BOUND_PERCENT as CPU_BOUND_PERCENT
from sysmetrics.findings.cpu import CPU_BOUND_SHARE as CPU_BOUND_SHARE
from sysmetrics.findings.cpu import SINGLE_CORE_GPU_PERCENT as SINGLE_CORE_GPU_PERCENT
from sysmetrics.findings.cpu import SINGLE_CORE_HIGH as SINGLE_CORE_HIGH
from sysmetrics.findings.cpu import SINGLE_CORE_LOW as SINGLE_CORE_LOW
from sysmetrics.findings.cpu import SINGLE_CORE_SHARE as SINGLE_CORE_SHARE
from sysmetrics.findings.cpu import SINGLE_CORE_THREAD_SHARE as SINGLE_CORE_THREAD_SHARE
from sysmetrics.findings.cpu import contention as contention
from sysmetrics.findings.cpu import cpu_bound as cpu_bound
from sysmetrics.findings.cpu import single_core as single_core
from sysmetrics.findings.gains import advise as advise
from sysmetrics.findings.machine import DISK_GPU_PERCENT as DISK_GPU_PERCENT
from sysmetrics.findings.machine import DISK_READ_MIB_S as DISK_READ_MIB_S
from sysmetrics.findings.machine import DISK_SHARE as DISK_SHARE
from sysmetrics.findings.machine import GPU_MEMORY_PERCENT as GPU_MEMORY_PERCENT
from sysmetrics.findings.machine import MEMORY_PERCENT as MEMORY_PERCENT
from sysmetrics.findings.machine import SWAP_KEY as SWAP_KEY
from sysmetrics.findings.machine import SWAP_RISE_POINTS as SWAP_RISE_POINTS
from sysmetrics.findings.machine import THROTTLE_REASONS as THROTTLE_REASONS
from sysmetrics.findings.machine import THROTTLE_SHARE as THROTTLE_SHARE
from sysmetrics.findings.machine import disk_bound as disk_bound
from sysmetrics.findings.machine import gpu_memory_limit as gpu_memory_limit
from sysmetrics.findings.machine import gpu_throttling as gpu_throttling
from sysmetrics.findings.machine import memory_limit as memory_limit
from sysmetrics.findings.machine import swap as swap
from sysmetrics.findings.machine import unused_gpu as unused_gpu
from sysmetrics.findings.memory import CREEP_MIN_MIB as CREEP_MIN_MIB
from sysmetrics.findings.memory import CREEP_MIN_RISE as CREEP_MIN_RISE
from sysmetrics.findings.memory import CREEP_MIN_SAMPLES as CREEP_MIN_SAMPLES
from sysmetrics.findings.memory import CREEP_STEADY as CREEP_STEADY
from sysmetrics.findings.memory import CREEP_T as CREEP_T
from sysmetrics.findings.memory import CREEP_WARMUP_SHARE as CREEP_WARMUP_SHARE
from sysmetrics.findings.memory import memory_creep as memory_creep
from sysmetrics.findings.nodes import ARRIVAL_GAP_SHARE as ARRIVAL_GAP_SHARE
from sysmetrics.findings.nodes import ARRIVAL_NOISE_TIMES as ARRIVAL_NOISE_TIMES
from sysmetrics.findings.nodes import STRAGGLER_MIN_NODES as STRAGGLER_MIN_NODES
from sysmetrics.findings.nodes import STRAGGLER_POINTS as STRAGGLER_POINTS
from sysmetrics.findings.nodes import STRAGGLER_RATIO as STRAGGLER_RATIO
from sysmetrics.findings.nodes import STRAGGLER_WAIT_POINTS as STRAGGLER_WAIT_POINTS
from sysmetrics.findings.nodes import straggler_node as straggler_node
from sysmetrics.findings.overhead import OVERHEAD_PERCENT as OVERHEAD_PERCENT
from sysmetrics.findings.overhead import OVERHEAD_SPAN_SHARE as OVERHEAD_SPAN_SHARE
from sysmetrics.findings.overhead import framework_overhead as framework_overhead
from sysmetrics.findings.registry import CROSS_NODE_CODES as CROSS_NODE_CODES
from sysmetrics.findings.registry import LIVE_CODES as LIVE_CODES
from sysmetrics.findings.registry import REGISTRY as REGISTRY
from sysmetrics.findings.training import INPUT_CPU_PERCENT as INPUT_CPU_PERCENT
from sysmetrics.findings.training import INPUT_GPU_PERCENT as INPUT_GPU_PERCENT
from sysmetrics.findings.training import INPUT_IDLE_PERCENT as INPUT_IDLE_PERCENT
from sysmetrics.findings.training import INPUT_SHARE as INPUT_SHARE
from sysmetrics.findings.training import INPUT_SPAN_SHARE as INPUT_SPAN_SHARE
from sysmetrics.findings.training import INPUT_WAIT_PERCENT as INPUT_WAIT_PERCENT
from sysmetrics.findings.training import MAX_STALLS as MAX_STALLS
from sysmetrics.findings.training import SLOW_FACTOR as SLOW_FACTOR
from sysmetrics.findings.training import SLOW_LOST_SHARE as SLOW_LOST_SHARE
from sysmetrics.findings.training import SLOW_SHARE as SLOW_SHARE
from sysmetrics.findings.training import SPIKE_DISK_MIB_S as SPIKE_DISK_MIB_S
from sysmetrics.findings.training import SPIKE_FACTOR as SPIKE_FACTOR
from sysmetrics.findings.training import SPIKE_POINTS as SPIKE_POINTS
from sysmetrics.findings.training import STALL_IDLE_PERCENT as STALL_IDLE_PERCENT
from sysmetrics.findings.training import STALL_MIN_SECONDS as STALL_MIN_SECONDS
from sysmetrics.findings.training import STALL_SECONDS as STALL_SECONDS
from sysmetrics.findings.training import STALL_SHARE as STALL_SHARE
from sysmetrics.findings.training import STALL_STEP_TIMES as STALL_STEP_TIMES
from sysmetrics.findings.training import input_bound as input_bound
from sysmetrics.findings.training import slow_steps as slow_steps
from sysmetrics.findings.training import stall as stall

# The run file's reader lives with its schema; its names stay importable from here.
from sysmetrics.runfile import MAX_KEYS as MAX_KEYS
from sysmetrics.runfile import MAX_LINE_BYTES as MAX_LINE_BYTES
from sysmetrics.runfile import MAX_MEMORY as MAX_MEMORY
from sysmetrics.runfile import PathLike as PathLike
from sysmetrics.runfile import Recording as Recording
from sysmetrics.runfile import Run as Run
from sysmetrics.runfile import Span as Span
from sysmetrics.runfile import read_run as read_run

NO_MATCH = "No rule matched: none of the findings' rules reached its thresholds in this run."
"""What to say where :func:`findings` returns nothing (the report, the CLI)."""

RULES: tuple[Rule[Any], ...] = tuple(r for r in REGISTRY if r.scope == "node")
"""The one-node rules, in the order their findings are listed (each callable on a run)."""

NODE_RULES: tuple[Rule[Any], ...] = tuple(r for r in REGISTRY if r.scope == "run")
"""The cross-node rules: over every node's series (``node{k}/`` keys or samples' nodes)."""


def findings(run: Run) -> list[Finding]:
    """Every finding of the rules of :data:`REGISTRY`: ``RULES`` per node, then ``NODE_RULES``.

    In a run of several nodes a node's finding says ``Node k:`` first, has ``node`` in its
    evidence and ``k`` in its subject (``Subject("node", k)`` where it had none).
    Pads ``run``'s columns first (:meth:`Run.pad`: a run still being built with
    :meth:`Run.add`, as a live caller's, has columns shorter than the run where the
    latest samples lack a key; the rules index every column by sample).
    """
    with memo():  # what several rules derive from a run is made once
        return _findings(run)


def _findings(run: Run) -> list[Finding]:
    run.pad()
    nodes = run.by_node()
    out: list[Finding] = []
    for k, part in nodes:
        for rule in RULES:
            for found in rule.check(part, rule.thresholds):
                found = advise(part, found)
                if len(nodes) > 1 and k is not None:
                    subject = found.subject
                    found = replace(
                        found,
                        sentence=f"Node {k}: {found.sentence}",
                        evidence={"node": float(k), **found.evidence},
                        subject=(
                            Subject("node", str(k)) if subject is None else subject._replace(node=k)
                        ),
                    )
                out.append(found)
    out.extend(
        advise(run, finding) for rule in NODE_RULES for finding in rule.check(run, rule.thresholds)
    )
    return out


def across_findings(run: Run) -> list[Finding]:
    """The findings of the cross-node rules (``NODE_RULES``) alone, over the whole run.

    What :func:`findings` adds after each node's own: the report shows them once, above
    the nodes, and each node's findings from :func:`findings` of that node's samples, so
    no rule runs twice on the same samples.
    """
    with memo():
        run.pad()
        return [
            advise(run, finding)
            for rule in NODE_RULES
            for finding in rule.check(run, rule.thresholds)
        ]


def node_findings(run: Run) -> list[Finding]:
    """The findings of the one-node rules (``RULES``) alone, over one node's samples.

    The report's section of a node in a run of several (:func:`across_findings` says
    the rest, once); on a run of one node :func:`findings` says the same and more.
    """
    with memo():
        run.pad()
        return [
            advise(run, finding) for rule in RULES for finding in rule.check(run, rule.thresholds)
        ]
