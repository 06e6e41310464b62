"""``sysmetrics report --json``: the summary and the findings as one JSON document.

For scripts and CI: what the page says, as data. The document (``SCHEMA`` names its
version)::

    {"schema": "sysmetrics.report/1",
     "files": [path, ...],                 the run files, as given
     "x": "step" | "time",                 the axis stalls are placed on
     "left_out": [str, ...],               what the reader left out of the files, in
                                            sentences (Run.left_out; empty: nothing)
     "verdict": {"bound": str | null,     what bounds the run (findings.verdict's
                                            CATEGORIES: input, cpu, single-thread,
                                            gpu-compute, communication,
                                            framework-overhead, stalled, balanced);
                                            null: abstained (see could_be, missing)
        "band": "highly" | "moderately" | null, "share": number | null (%),
        "label": str, "sentence": str, "shares": {name: number (%)},
        "could_be": [str, ...], "missing": [str, ...]} | null,
                                            the run's (across nodes: a straggler's
                                            communication, else the most severe node's)
     "findings": [                          across nodes first, then each node's
        {"rule": str, "sentence": str, "advice": str,   what to change and what it would
                                            gain (findings.gains; "" where none)
         "evidence": {name: number},
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
         "verdict": {...} | null,           the node's own, as the run's above
         "stalls": [{"step": int, "next_step": int | null, "seconds": number,
                     "start": number, "ended": bool}, ...],
         "keys": [{"group": str, "key": str, "unit": str, "mean": number,
                   "p95": number, "peak": number,
                   "total": number | null, "total_unit": str}, ...]}, ...],
     "ledger": {"prices": {...}, "job": {...}, "nodes": [...]}}
                                            the cost ledger: energy, money, gCO2e per
                                            run, step, 1,000 samples; parts counted and
                                            not (sysmetrics.ledger; docs/cost.md)

A ``span`` on the ``time`` axis is in s since the epoch; a stall's ``start`` is s after
its node's first sample. Every number is finite (JSON has no NaN).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

from sysmetrics.findings import Finding
from sysmetrics.report.model import SCHEMA as SCHEMA
from sysmetrics.report.model import build
from sysmetrics.report.model import finding_json as finding_json
from sysmetrics.runfile import Run


def document(
    run: Run,
    files: Sequence[str],
    found: tuple[list[Finding], dict[Optional[int], list[Finding]]],
    x: str = "step",
) -> dict[str, Any]:
    """The JSON document (see the module) of ``run`` read from ``files``.

    ``found`` is :func:`~sysmetrics.report.page.run_findings` of ``run``; the document is
    the page's model's (:meth:`Page.to_json <sysmetrics.report.model.Page.to_json>`).
    """
    return build(run, [os.fspath(f) for f in files], x, found).to_json()
