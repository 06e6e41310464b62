"""``sysmetrics report --json``: the summary and the findings as one JSON document.

For scripts and CI: what the page says, as data. The document (``SCHEMA`` names its
version)::

    {"schema": "sysmetrics.report/1",
     "files": [path, ...],                 the run files, as given
     "x": "step" | "time",                 the axis stalls are placed on
     "left_out": [str, ...],               what the reader left out of the files, in
                                            sentences (Run.left_out; empty: nothing)
     "findings": [                          across nodes first, then each node's
        {"rule": str, "sentence": str, "evidence": {name: number},
         "span": {"axis": "step" | "time", "first": number, "last": number} | null,
         "node": int | null,                the node whose samples it is about; null:
                                            the whole run (one node, or across nodes)
         "subject": {"kind": str, "id": str, "facet": str, "node": int | null} | null},
                                            ...], what it is about (findings.Subject):
                                            a gpu, a node, a step, a resource
     "nodes": [
        {"node": int | null, "file": path | null, "samples": int, "recordings": int,
         "seconds": number,                 duration, recordings' gaps left out
         "interval": number | null,         median s between samples
         "steps": {"first": int, "last": int} | null,
         "stalls": [{"step": int, "next_step": int | null, "seconds": number,
                     "start": number, "ended": bool}, ...],
         "keys": [{"group": str, "key": str, "unit": str, "mean": number,
                   "p95": number, "peak": number,
                   "total": number | null, "total_unit": str}, ...]}, ...]}

A ``span`` on the ``time`` axis is in s since the epoch; a stall's ``start`` is s after
its node's first sample. Every number is finite (JSON has no NaN).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Optional

from sysmetrics.findings import Finding
from sysmetrics.report.data import axis, series, summary, timing
from sysmetrics.runfile import Run

SCHEMA = "sysmetrics.report/1"


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


def finding_json(finding: Finding, node: Optional[int]) -> dict[str, Any]:
    """One finding as the document has it."""
    span = finding.span
    return {
        "rule": finding.rule,
        "sentence": finding.sentence,
        "evidence": {k: _finite(float(v)) for k, v in finding.evidence.items()},
        "span": None
        if span is None
        else {"axis": span.axis, "first": _finite(span.first), "last": _finite(span.last)},
        "node": node,
        "subject": None if finding.subject is None else finding.subject._asdict(),
    }


def _node_json(node: Optional[int], run: Run, path: Optional[str], x: str) -> dict[str, Any]:
    seconds, interval = timing(run)
    steps = [s for s in run.step if s is not None]
    keys = [
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
        for row in summary(series(run))
    ]
    stalls = [
        {
            "step": stall.step,
            "next_step": stall.next_step,
            "seconds": stall.seconds,
            "start": stall.start,
            "ended": stall.ended,
        }
        for stall in axis(run, x).stalls
    ]
    return {
        "node": node,
        "file": path,
        "samples": len(run),
        "recordings": len(run.recordings),
        "seconds": _finite(seconds),
        "interval": _finite(interval),
        "steps": {"first": min(steps), "last": max(steps)} if steps else None,
        "stalls": stalls,
        "keys": keys,
    }


def document(
    run: Run,
    files: Sequence[str],
    found: tuple[list[Finding], dict[Optional[int], list[Finding]]],
    x: str = "step",
) -> dict[str, Any]:
    """The JSON document (see the module) of ``run`` read from ``files``.

    ``found`` is :func:`~sysmetrics.report.page.run_findings` of ``run``.
    """
    across, own = found
    nodes = run.by_node()
    single = len(nodes) == 1
    listed = [finding_json(f, None) for f in across]
    for node, _ in nodes:
        listed += [finding_json(f, None if single else node) for f in own.get(node, ())]
    return {
        "schema": SCHEMA,
        "files": [os.fspath(f) for f in files],
        "x": x,
        "left_out": list(run.left_out),
        "findings": listed,
        "nodes": [_node_json(node, part, run.files.get(node), x) for node, part in nodes],
    }
