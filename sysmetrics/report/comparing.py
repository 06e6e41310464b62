"""``sysmetrics compare A B``: two runs side by side, as a page, as JSON, as an exit status.

Each side is one run file, or several files of one multi-node run joined by commas
(``n0.jsonl,n1.jsonl``; a path that exists as written is one file, commas and all). The
comparison is :func:`sysmetrics.compare.compare`'s; this module reads the files, renders
the page (one self-contained HTML file: the sentences, each node's rows side by side,
the findings' changes, what was not compared; no figures, no scripts) and the JSON
document, and turns ``--fail-on-regression PCT`` into the exit status
(:func:`regression_status`), for ``compare`` and for ``report --baseline``.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Optional

from sysmetrics.compare import (
    ALPHA,
    MIN_CHANGE,
    MIN_POINTS,
    MIN_WINDOWS,
    ComparedKey,
    Comparison,
    NodeComparison,
    compare,
    value,
)
from sysmetrics.runfile import read_runs

EXIT_CANNOT = 1  # the files cannot be read or compared (or, with PCT, the steps not tested)
EXIT_REGRESSION = 3  # --fail-on-regression PCT: B's steps slower by over PCT %, beyond noise


def side(text: str) -> list[str]:
    """The files of one side: ``text`` split at its commas, unless it exists as written."""
    if os.path.exists(text) or "," not in text:
        return [text]
    return [p for p in text.split(",") if p]


def compare_files(a: Sequence[str], b: Sequence[str]) -> Comparison:
    """Read the run files of each side (:func:`read_runs`) and compare them.

    Raises ``OSError`` where a file cannot be read, ``ValueError`` (:class:`CompareError`
    among them) where the files of a side are not the nodes of one run or the runs cannot
    be compared.
    """
    run_a, run_b = read_runs(list(a)), read_runs(list(b))
    return compare(run_a, run_b, [os.fspath(p) for p in a], [os.fspath(p) for p in b])


def regression_status(comparison: Comparison, percent: float) -> tuple[int, str]:
    """The exit status for ``--fail-on-regression percent`` and what to say (empty: 0).

    :data:`EXIT_REGRESSION` where some node's steps are slower in B by more than
    ``percent`` % and beyond noise; :data:`EXIT_CANNOT` where a node's step time could
    not be tested (no steps, too few windows): a slowdown cannot be ruled out; else 0.
    """
    if not comparison.tested:
        return EXIT_CANNOT, (
            "cannot tell whether B's steps are slower: the step time could not be compared"
        )
    slower = comparison.slowdown()
    if slower is not None and slower > percent:
        return EXIT_REGRESSION, (
            f"B's steps are {slower:.1f} % slower than A's, beyond noise (more than the "
            f"{percent:g} % of --fail-on-regression)"
        )
    return 0, ""


def _percent(text: str) -> float:
    """A percentage for --fail-on-regression: a finite number, 0 or more."""
    try:
        number = float(text)
    except ValueError:
        number = -1.0
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is invalid: give a percentage, 0 or more")
    return number


def add_regression_flag(parser: argparse.ArgumentParser) -> None:
    """``--fail-on-regression PCT``, shared by ``compare`` and ``report``."""
    parser.add_argument(
        "--fail-on-regression",
        type=_percent,
        metavar="PCT",
        help=f"exit with status {EXIT_REGRESSION} where B's steps (the run's, against the "
        f"baseline's) are slower by more than PCT %% and beyond noise; with status "
        f"{EXIT_CANNOT} where the step time cannot be compared",
    )


def add_parser(subs: Any) -> argparse.ArgumentParser:
    """Add ``compare`` to the command line's subcommands; return its parser."""
    cmp: argparse.ArgumentParser = subs.add_parser(
        "compare",
        help="compare two runs: what changed, beyond noise",
        description="Compare run B with run A: step time, data wait, throughput, energy per "
        "step and every machine key both have, side by side, with whether each difference "
        "is beyond the runs' own noise (Mann-Whitney U over the per-window values), the "
        "findings that appear or disappear, and a few sentences. Each run is one file, or "
        "the files of one multi-node run joined by commas (n0.jsonl,n1.jsonl).",
    )
    cmp.add_argument("a", metavar="A", help="the first run (the baseline): FILE[,FILE...]")
    cmp.add_argument("b", metavar="B", help="the second run: FILE[,FILE...]")
    cmp.add_argument("-o", "--output", metavar="PATH", help="write the HTML page to PATH")
    cmp.add_argument(
        "--json",
        action="store_true",
        help="print the comparison as one JSON document on stdout (instead of the sentences)",
    )
    add_regression_flag(cmp)
    return cmp


def compare_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``sysmetrics compare``; return the exit status (see docs/compare.md)."""
    try:
        comparison = compare_files(side(args.a), side(args.b))
        if args.output is not None:
            write_page(comparison, args.output)
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_CANNOT
    if args.json:
        print(json.dumps(comparison.to_json(), indent=1, allow_nan=False))
    else:
        for sentence in comparison.sentences:
            print(f"{sentence}.")
    if args.output is not None:
        print(args.output, file=sys.stderr if args.json else sys.stdout)
    if args.fail_on_regression is None:
        return 0
    status, said = regression_status(comparison, args.fail_on_regression)
    if said:
        print(f"{parser.prog}: {said}", file=sys.stderr)
    return status


# -- the page ---------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1040px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.2em .7em;text-align:right}
td:first-child,th:first-child{text-align:left}
tr:nth-child(even){background:#f4f6f8}th{background:#e8ecf0}
.beyond{font-weight:bold;color:#a40000}small{color:#555}li{margin:.4em 0}
"""


def _cells(r: ComparedKey) -> str:
    diff = r.difference
    ratio = r.ratio
    if r.beyond is None:
        verdict = f"not tested: {r.why}"
    else:
        verdict = "beyond noise" if r.beyond else "within noise"
    if diff is None:
        change = ""
    elif r.unit == "%":  # a difference of percentages is in points
        change = f"{diff:+.3g} points"
    else:
        change = ("+" if diff > 0 else "") + value(diff, r.unit)
    shown = {"bytes": "MiB", "bytes/s": "MiB/s"}.get(r.unit, r.unit)  # as value() shows them
    cells = [
        r.name,
        shown,
        value(r.a, r.unit),
        value(r.b, r.unit),
        change,
        "" if ratio is None else f"{ratio:.3g}x",
        f"{r.n_a} / {r.n_b}",
        "" if r.p is None else f"{r.p:.2g}",
        verdict,
    ]
    cls = ' class="beyond"' if r.beyond else ""
    return f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"


_HEAD = (
    "<tr><th>value</th><th>unit</th><th>A (median)</th><th>B (median)</th><th>B - A</th>"
    "<th>B / A</th><th>windows A / B</th><th>p</th><th>noise</th></tr>"
)


def _node_section(n: NodeComparison, heading: Optional[str]) -> list[str]:
    parts = [] if heading is None else [f"<h2>{html.escape(heading)}</h2>"]
    parts.append("<h3>Steps</h3>")
    if n.steps:
        parts.append("<table>" + _HEAD + "".join(_cells(r) for r in n.steps) + "</table>")
    else:
        parts.append("<p>Neither run has steps.</p>")
    parts.append("<h3>Machine keys both runs have</h3>")
    if n.keys:
        parts.append("<table>" + _HEAD + "".join(_cells(r) for r in n.keys) + "</table>")
    else:
        parts.append("<p>The runs have no machine key in common.</p>")
    for label, keys in (("Only in A", n.only_a), ("Only in B", n.only_b)):
        if keys:
            said = f"{label} (not compared): {', '.join(keys)}"
            parts.append(f"<p><small>{html.escape(said)}</small></p>")
    return parts


def render_comparison(comparison: Comparison, title: str) -> str:
    """The whole HTML page of ``comparison``."""
    test = (
        f"Beyond noise: the two-sided Mann-Whitney U test over the two runs' per-window values "
        f"gives p < {ALPHA:g} (95 % confidence) and the medians differ by at least "
        f"{100 * MIN_CHANGE:g} % of A's (for a key in %, by at least {MIN_POINTS:g} points); "
        f"a value needs {MIN_WINDOWS} windows in each run to be tested."
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>A: {html.escape(', '.join(comparison.files_a))}<br>"
        f"B: {html.escape(', '.join(comparison.files_b))}</p>",
        "<h2>What changed</h2><ul>",
        *(f"<li>{html.escape(s)}.</li>" for s in comparison.sentences),
        "</ul>",
        f"<p><small>{html.escape(test)}</small></p>",
    ]
    single = len(comparison.nodes) == 1
    for n in comparison.nodes:
        parts += _node_section(n, None if single else f"Node {n.node}")
    parts.append("<h2>Findings</h2>")
    changes = [c for c in comparison.findings if c.change != "same"]
    same = [c for c in comparison.findings if c.change == "same"]
    if not comparison.findings:
        parts.append("<p>Neither run has a finding.</p>")
    items = []
    for c in changes:
        if c.change == "new":
            items.append(f"new in B: {c.b}")
        elif c.change == "gone":
            items.append(f"gone in B (A had it): {c.a}")
        else:
            items.append(f"changed: A: {c.a} B: {c.b}")
    items += [f"in both: {c.a}" for c in same]
    if items:
        parts.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_page(comparison: Comparison, output: str) -> None:
    """Write the page of ``comparison`` to ``output`` (``OSError`` where it cannot)."""
    for p in (*comparison.files_a, *comparison.files_b):
        if os.path.realpath(p) == os.path.realpath(output):
            raise ValueError(f"{output} is a run file: give another -o")
    names = " against ".join(
        ", ".join(os.path.basename(p) for p in files)
        for files in (comparison.files_a, comparison.files_b)
    )
    with open(output, "w", encoding="utf-8") as f:
        f.write(render_comparison(comparison, f"sysmetrics compare: {names}"))
