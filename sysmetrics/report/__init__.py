"""``sysmetrics report RUN.jsonl [RUN2.jsonl ...] -o report.html``: a run as one page.

The page is one self-contained HTML file (figures embedded as PNG, no scripts, nothing
fetched) with the run's findings (:mod:`sysmetrics.findings`), a summary table (mean, p95
and peak of each key, by group) and one figure per group: training speed first (the
``step.*`` keys, with the findings' spans marked), then CPU, memory, each GPU, disk,
network, energy, ...; on the step axis where the run has steps and on elapsed time
otherwise (``--x``), stalls (stretches without a new step) shaded with their duration.
Several run files, one per node, make one page (a section per node, the findings across
nodes above them); ``--json`` prints the summary and findings as one JSON document
(:mod:`~sysmetrics.report.document`). Figures need matplotlib (the ``[report]`` extra).

Values are shown in the unit a reader expects: counters (``disk.in``, ``network.recv``,
``*.energyJoules``) as rates over each interval (MiB/s, W), bytes as GiB (MiB/s for rates),
MiB as GiB. ``gpu.process.{i}.*`` keys that repeat a ``gpu.{i}.*`` key are left out, and
per-core CPU keys are shown as their mean over the cores. The job's memory is its PSS
(``proc.memory.pssMB``, and ``proc.memory.percent`` made from it): where the run has it,
``proc.memory.rssMB``, which counts pages shared by forked workers once per process, is
left out of the figures and marked so in the table.

The package, by concern (each name below is importable from ``sysmetrics.report``):
:mod:`~sysmetrics.report.data` (a run's keys as :class:`Series`, summary rows, the x axis
and its stalls), :mod:`~sysmetrics.report.model` (the page as one frozen model, built
once from the run's views and findings: what the page, the figures and the JSON
render), :mod:`~sysmetrics.report.drawing` (the figures),
:mod:`~sysmetrics.report.page` (the HTML page, :func:`write_report`, :func:`json_report`)
and :mod:`~sysmetrics.report.document` (the JSON document); here, the command line
(:func:`add_parser`, :func:`report_command`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from sysmetrics import ledger
from sysmetrics.compare import Comparison
from sysmetrics.report import comparing, drawing
from sysmetrics.report import model as model
from sysmetrics.report.data import (
    AXES,
    GAP_INTERVALS,
    GAP_S,
    MAX_ROWS,
    MAX_STALLS_SAID,
    STALL_FACTOR,
    STALL_MAX_WIDTH,
    STALL_MIN_WIDTH,
    STALL_S,
    TRAINING,
    Axis,
    Row,
    Series,
    Stall,
    axis,
    group_of,
    segments,
    series,
    starts,
    summary,
)
from sysmetrics.report.drawing import (
    ALL_NODES,
    MAX_FIGURES,
    MAX_LABEL_CHARS,
    MAX_PANELS,
    MAX_POINTS,
    MAX_SERIES,
    MAX_TITLE_CHARS,
    PNG_COMPRESS_LEVEL,
    figure_png,
    figures,
    finding_marks,
    node_figures,
    node_label,
    nodes_speed_png,
    page_figures,
    point_marker,
)
from sysmetrics.report.model import NodePage, Page, build
from sysmetrics.report.page import (
    CROSS_NODE_RULES,
    MAX_COMMAND_CHARS,
    MAX_KEY_CHARS,
    MAX_RECORDINGS_SHOWN,
    ending,
    json_report,
    render,
    render_page,
    run_findings,
    stall_sentence,
    write_report,
)

# Not public, but tests reach them here.
_bins, _drawn, _panels = drawing._bins, drawing._drawn, drawing._panels

__all__ = [
    "ALL_NODES",
    "AXES",
    "CROSS_NODE_RULES",
    "GAP_INTERVALS",
    "GAP_S",
    "MAX_COMMAND_CHARS",
    "MAX_FIGURES",
    "MAX_KEY_CHARS",
    "MAX_LABEL_CHARS",
    "MAX_PANELS",
    "MAX_POINTS",
    "MAX_RECORDINGS_SHOWN",
    "MAX_ROWS",
    "MAX_SERIES",
    "MAX_STALLS_SAID",
    "MAX_TITLE_CHARS",
    "PNG_COMPRESS_LEVEL",
    "STALL_FACTOR",
    "STALL_MAX_WIDTH",
    "STALL_MIN_WIDTH",
    "STALL_S",
    "TRAINING",
    "Axis",
    "NodePage",
    "Page",
    "Row",
    "Series",
    "Stall",
    "add_parser",
    "axis",
    "build",
    "ending",
    "figure_png",
    "figures",
    "finding_marks",
    "group_of",
    "json_report",
    "node_figures",
    "node_label",
    "nodes_speed_png",
    "page_figures",
    "point_marker",
    "render",
    "render_page",
    "report_command",
    "run_findings",
    "segments",
    "series",
    "stall_sentence",
    "starts",
    "summary",
    "write_report",
]


def add_parser(subs: Any) -> argparse.ArgumentParser:
    """Add ``report`` to the command line's subcommands; return its parser."""
    rep: argparse.ArgumentParser = subs.add_parser(
        "report",
        help="turn run files into an HTML report",
        description="Write one self-contained HTML page (findings, summary, figures) for a "
        "run file, or for several run files of one run (one per node); or only its figures "
        "as PNG files, or its summary and findings as JSON.",
    )
    rep.add_argument(
        "run",
        nargs="+",
        help="the run file (JSON lines from record or a callback); several: one per node",
    )
    rep.add_argument("-o", "--output", help="the HTML file (default: the first RUN with .html)")
    rep.add_argument("--png", metavar="DIR", help="write each figure to DIR/<group>.png")
    rep.add_argument(
        "--json",
        action="store_true",
        help="print the summary and the findings as one JSON document on stdout (no HTML "
        "unless -o is given)",
    )
    rep.add_argument(
        "--x",
        choices=AXES,
        default="step",
        help="the figures' x axis: step (the default: the training step where the run has "
        "steps, elapsed time otherwise) or time (elapsed time)",
    )
    rep.add_argument(
        "--baseline",
        metavar="OLD",
        help="compare the run with this earlier run (FILE[,FILE...], as sysmetrics compare's "
        "A) and add the comparison's sentences to the findings (rule baseline)",
    )
    comparing.add_regression_flag(rep)
    ledger.add_flags(rep)  # the cost ledger's prices, as record takes them
    return rep


def report_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``sysmetrics report``; return the exit status."""
    output = args.output
    if output is None and args.png is None and not args.json:
        output = os.path.splitext(args.run[0])[0] + ".html"
    left_out: list[str] = []
    if args.fail_on_regression is not None and args.baseline is None:
        parser.error("argument --fail-on-regression: needs --baseline")
    baseline = None if args.baseline is None else comparing.side(args.baseline)
    compared: list[Comparison] = []
    try:
        prices = ledger.prices_of(args)
        if args.json:
            text, written = json_report(
                args.run, output, args.png, args.x, left_out, baseline, compared, prices
            )
        else:
            written = write_report(
                args.run, output, args.png, args.x, left_out, baseline, compared, prices
            )
    except (OSError, ValueError, ImportError) as exc:
        for said in left_out:
            print(f"{parser.prog}: {said}", file=sys.stderr)
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    for said in left_out:  # before the paths: nothing is left out without a word
        print(f"{parser.prog}: {said}", file=sys.stderr)
    if args.json:
        print(text)
    for path in written:  # with --json, stdout is the document alone
        print(path, file=sys.stderr if args.json else sys.stdout)
    if args.fail_on_regression is None or not compared:
        return 0
    status, said = comparing.regression_status(compared[0], args.fail_on_regression)
    if said:
        print(f"{parser.prog}: {said}", file=sys.stderr)
    return status
