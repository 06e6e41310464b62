"""The findings' rules, declared as data, in the order their findings are listed.

Each :class:`~sysmetrics.findings._base.Rule` is declared next to its check function, in
the module of its family (:mod:`~sysmetrics.findings.training`,
:mod:`~sysmetrics.findings.cpu`, :mod:`~sysmetrics.findings.machine`,
:mod:`~sysmetrics.findings.nodes`): its code, one-line summary, scope, whether it is said
live, its thresholds (a frozen dataclass whose defaults are the module's constants), why
it matters and how it decides; its example runs are ``examples/<code>/fires.jsonl`` and
``quiet.jsonl`` (package data, written by ``tests/rule_examples.py``). From this list:
:func:`~sysmetrics.findings.findings` runs them (``node`` scope per node, then ``run``
scope across nodes), the live findings say the ``live`` ones once per ``(code,
subject)``, the report's cross-node list is :data:`CROSS_NODE_CODES`, and the docs'
findings table is generated (:func:`sysmetrics._docs.findings_table`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from sysmetrics.findings._base import EXAMPLES as EXAMPLES
from sysmetrics.findings._base import Rule as Rule
from sysmetrics.findings._base import Subject as Subject
from sysmetrics.findings.cpu import CONTENTION_RULE, CPU_BOUND_RULE, SINGLE_CORE_RULE
from sysmetrics.findings.machine import (
    DISK_BOUND_RULE,
    GPU_MEMORY_LIMIT_RULE,
    GPU_THROTTLING_RULE,
    MEMORY_LIMIT_RULE,
    SWAP_RULE,
    UNUSED_GPU_RULE,
)
from sysmetrics.findings.memory import MEMORY_CREEP_RULE
from sysmetrics.findings.nodes import STRAGGLER_RULE
from sysmetrics.findings.overhead import FRAMEWORK_OVERHEAD_RULE
from sysmetrics.findings.training import INPUT_BOUND_RULE, SLOW_STEPS_RULE, STALL_RULE

REGISTRY: tuple[Rule[Any], ...] = (
    INPUT_BOUND_RULE,
    FRAMEWORK_OVERHEAD_RULE,
    STALL_RULE,
    SLOW_STEPS_RULE,
    CPU_BOUND_RULE,
    CONTENTION_RULE,  # before single-core: the verdict's order (other processes' CPU first)
    SINGLE_CORE_RULE,
    MEMORY_LIMIT_RULE,
    GPU_MEMORY_LIMIT_RULE,
    GPU_THROTTLING_RULE,
    DISK_BOUND_RULE,
    SWAP_RULE,
    UNUSED_GPU_RULE,
    MEMORY_CREEP_RULE,
    STRAGGLER_RULE,
)
"""Every rule, in the order their findings are listed (``node`` scope first)."""

BY_CODE: dict[str, Rule[Any]] = {rule.code: rule for rule in REGISTRY}
"""Each rule by its code."""

CROSS_NODE_CODES: tuple[str, ...] = tuple(r.code for r in REGISTRY if r.scope == "run")
"""The codes of the rules over the whole run across nodes (``straggler-node``)."""

LIVE_CODES: frozenset[str] = frozenset(r.code for r in REGISTRY if r.live)
"""The codes of the rules that may be said during training."""


def example_path(code: str, kind: Literal["fires", "quiet"]) -> Path:
    """Rule ``code``'s example run file: ``fires`` (it fires there) or ``quiet``."""
    return BY_CODE[code].example(kind)


def _check() -> None:
    """Codes are unique and the ``node`` rules come before the ``run`` ones (the order)."""
    if len(BY_CODE) != len(REGISTRY):
        raise RuntimeError("two rules of the findings' registry have the same code")
    scopes = [r.scope for r in REGISTRY]
    if scopes != sorted(scopes):  # "node" < "run"
        raise RuntimeError("the findings' registry lists a run-scope rule before a node one")


_check()
