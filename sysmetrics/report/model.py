"""The report as a model: one frozen :class:`Page`, built once from the views and the findings.

:func:`build` reads each node's :class:`~sysmetrics.runview.RunView` (the one the
findings read: both are made within one :func:`~sysmetrics.findings.memo`), its findings,
its series (:func:`~sysmetrics.report.data.series`, once per node), summary rows and x
axis (with the view's stalls), and the findings across nodes (the cross-node rules
alone, once). The HTML page (:mod:`~sysmetrics.report.page`), the figures
(:mod:`~sysmetrics.report.drawing`) and ``--json`` (:meth:`Page.to_json`,
:mod:`~sysmetrics.report.document`) render it; none of them derives a series or a
finding again.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from sysmetrics import ledger as ledger_module
from sysmetrics.findings import Finding, across_findings, findings, memo, node_findings, view
from sysmetrics.findings.verdict import Verdict, across, verdict
from sysmetrics.report import data
from sysmetrics.report.data import AXES, Axis, Row, Series
from sysmetrics.runfile import Run
from sysmetrics.runview import RunView

SCHEMA = "sysmetrics.report/1"  # the JSON document's version (see document.py)

Found = tuple[list[Finding], dict[Optional[int], list[Finding]]]  # across nodes, each node's


@dataclass(frozen=True)
class NodePage:
    """What the page says about one node: its samples, view, findings, series, rows, axis."""

    node: Optional[int]
    file: Optional[str]  # the run file it came from, where several were read
    run: Run
    view: RunView
    findings: tuple[Finding, ...]
    series: tuple[Series, ...]
    rows: tuple[Row, ...]
    axis: Axis
    verdict: Optional[Verdict] = None  # what bounds it (sysmetrics.findings.verdict)

    @property
    def steps(self) -> Optional[tuple[int, int]]:
        """Its first and last step, where its samples have steps."""
        steps = [s for s in self.run.step if s is not None]
        return (min(steps), max(steps)) if steps else None

    def to_json(self) -> dict[str, Any]:
        """The node as the JSON document has it (see :mod:`~sysmetrics.report.document`)."""
        steps = self.steps
        return {
            "node": self.node,
            "file": self.file,
            "samples": len(self.run),
            "recordings": len(self.run.recordings),
            "seconds": _finite(self.view.duration),
            "interval": _finite(self.view.interval),
            "steps": None if steps is None else {"first": steps[0], "last": steps[1]},
            "verdict": None if self.verdict is None else self.verdict.to_json(),
            "stalls": [
                {
                    "step": stall.step,
                    "next_step": stall.next_step,
                    "seconds": stall.seconds,
                    "start": stall.start,
                    "ended": stall.ended,
                }
                for stall in self.axis.stalls
            ],
            "keys": [
                {
                    "group": row.group,
                    "key": row.label,
                    "unit": row.unit,
                    "mean": _finite(row.mean),
                    "p95": _finite(row.p95),
                    "peak": _finite(row.peak),
                    "total": _finite(row.total_value),
                    "total_unit": row.total_unit,
                }
                for row in self.rows
            ],
        }


@dataclass(frozen=True)
class Page:
    """The whole report: the run, its files, the axis chosen, findings across nodes, nodes."""

    run: Run
    files: tuple[str, ...]
    x: str
    across: tuple[Finding, ...]
    nodes: tuple[NodePage, ...]
    ledger: Optional[ledger_module.Ledger] = None  # the cost ledger (sysmetrics.ledger)

    @property
    def single(self) -> bool:
        """Whether the run has one node (no section per node)."""
        return len(self.nodes) == 1

    @property
    def verdict(self) -> Optional[Verdict]:
        """The run's verdict: its one node's, or across its nodes' (:func:`across`)."""
        if self.single:
            return self.nodes[0].verdict
        return across([n.verdict for n in self.nodes if n.verdict is not None], self.across)

    @property
    def found(self) -> Found:
        """The findings across nodes and each node's, as :func:`run_findings` gives them."""
        return list(self.across), {n.node: list(n.findings) for n in self.nodes}

    def to_json(self) -> dict[str, Any]:
        """The JSON document (``sysmetrics report --json``; see its module)."""
        listed = [finding_json(f, None) for f in self.across]
        for n in self.nodes:
            listed += [finding_json(f, None if self.single else n.node) for f in n.findings]
        return {
            "schema": SCHEMA,
            "files": [os.fspath(f) for f in self.files],
            "x": self.x,
            "left_out": list(self.run.left_out),
            "verdict": None if (said := self.verdict) is None else said.to_json(),
            "findings": listed,
            "nodes": [n.to_json() for n in self.nodes],
            "ledger": None if self.ledger is None else _finite_tree(self.ledger.to_json()),
        }


def _finite_tree(value: Any) -> Any:
    """``value`` with every float that is not finite made None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _finite_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_tree(v) for v in value]
    return _finite(value) if isinstance(value, float) else value


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def finding_json(finding: Finding, node: Optional[int]) -> dict[str, Any]:
    """One finding as the document has it."""
    span = finding.span
    return {
        "rule": finding.rule,
        "sentence": finding.sentence,
        "advice": finding.advice,
        "evidence": {k: _finite(float(v)) for k, v in finding.evidence.items()},
        "span": None
        if span is None
        else {"axis": span.axis, "first": _finite(span.first), "last": _finite(span.last)},
        "node": node,
        "subject": None if finding.subject is None else finding.subject._asdict(),
    }


def run_findings(run: Run, nodes: Optional[Sequence[tuple[Optional[int], Run]]] = None) -> Found:
    """The findings across nodes, and each node's own.

    Across nodes: the cross-node rules over the whole run (none on one node); each
    node's: every rule over that node's samples, once. ``nodes`` is ``run.by_node()``
    where the caller has it.
    """
    nodes = run.by_node() if nodes is None else nodes
    with memo():
        if len(nodes) == 1:
            return [], {nodes[0][0]: findings(run)}
        return across_findings(run), {node: node_findings(part) for node, part in nodes}


def build(
    run: Run,
    files: Sequence[str] = (),
    x: str = "step",
    found: Optional[Found] = None,
    all_series: Optional[Sequence[Series]] = None,
    prices: Optional[ledger_module.Prices] = None,
) -> Page:
    """The page of ``run`` read from ``files``, its figures on axis ``x``.

    ``found`` is :func:`run_findings` of ``run``, and ``all_series`` (one node only)
    ``series(run)``, where the caller has them; made here otherwise. Each node's series
    are made once, from the view its findings read. Raises ``ValueError`` for an ``x``
    not in ``AXES``. The cost ledger is made at ``prices`` (none given: energy only).
    """
    if x not in AXES:
        raise ValueError(f"x={x!r} is invalid: use one of {', '.join(AXES)}")
    nodes = run.by_node()
    with memo():  # the findings and the page read one view per node
        seen = {id(part): view(part) for _, part in nodes}
        across, own = run_findings(run, nodes) if found is None else found
        pages = []
        for node, part in nodes:
            mine = seen[id(part)]
            given = all_series if len(nodes) == 1 else None
            made = tuple(data.series(part, mine) if given is None else given)
            pages.append(
                NodePage(
                    node,
                    run.files.get(node),
                    part,
                    mine,
                    tuple(own.get(node, ())),
                    made,
                    tuple(data.summary(made)),
                    data.axis(part, x, mine),
                    verdict(part, own.get(node, ())),
                )
            )
        costs = ledger_module.ledger(
            [(n.node if len(nodes) > 1 else None, n.view) for n in pages],
            prices or ledger_module.Prices(),
        )
    return Page(run, tuple(files), x, tuple(across), tuple(pages), costs)
