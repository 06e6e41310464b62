"""The report's HTML page: facts, recordings, findings, summary table and figures.

:func:`render` builds the one self-contained page (figures embedded as PNG, no scripts,
nothing fetched); :func:`write_report` reads a run file and writes the page and figures.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import html
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import replace
from typing import Optional

from sysmetrics.compare import Comparison, baseline_findings, compare
from sysmetrics.findings import CROSS_NODE_CODES, NO_MATCH, Finding
from sysmetrics.findings.verdict import Verdict
from sysmetrics.ledger import Prices
from sysmetrics.report.data import (
    MAX_ROWS,
    MAX_STALLS_SAID,
    Series,
    Stall,
    _duration,
    _number,
    axis,
    longest,
)
from sysmetrics.report.document import document as document
from sysmetrics.report.drawing import ALL_NODES, _cut, node_label, page_figures
from sysmetrics.report.model import Found, NodePage, Page, build
from sysmetrics.report.model import run_findings as run_findings
from sysmetrics.runfile import PathLike, Recording, Run, Span, read_runs

MAX_KEY_CHARS = 300  # characters of a key in the summary table at most


def _where(span: Optional[Span], start: Optional[float]) -> str:
    if span is None:
        return ""
    if span.axis == "step":
        return f"steps {span.first:.0f} to {span.last:.0f}"
    if start is None:
        return ""
    return f"{_duration(span.first - start)} to {_duration(span.last - start)} after the start"


def _finding_html(finding: Finding, start: Optional[float]) -> str:
    evidence = ", ".join(f"{k} = {_number(v)}" for k, v in finding.evidence.items())
    where = _where(finding.span, start)
    detail = "; ".join(part for part in (where, evidence) if part)
    advice = f" {html.escape(finding.advice)}" if finding.advice else ""
    return (
        f'<li><span class="rule">{html.escape(finding.rule)}</span> '
        f"{html.escape(finding.sentence)}{advice}<br><small>{html.escape(detail)}</small></li>"
    )


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1040px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.2em .7em;text-align:right}
td:first-child,th:first-child,td:nth-child(2),th:nth-child(2){text-align:left}
tr:nth-child(even){background:#f4f6f8}th{background:#e8ecf0}
.rule{font-family:monospace;background:#fdecc8;padding:0 .3em}li{margin:.5em 0}
img{max-width:100%}small{color:#555}
"""


MAX_RECORDINGS_SHOWN = 50  # recordings described on the page at most (per node)
MAX_COMMAND_CHARS = 300  # characters of a recorded command shown at most


def ending(rec: Recording) -> str:
    """How a recording ended, as a sentence (no full stop), from its ``end`` line."""
    end = rec.end
    if end is None:
        return "the recording ended without an end marker (the process was killed or crashed)"
    seconds = rec.seconds
    after = "" if seconds is None else f" after {_duration(seconds)}"
    status, signum, name = end.get("exit_status"), end.get("signal"), end.get("signal_name")
    if isinstance(status, int) and not isinstance(status, bool):
        return f"the command exited with status {status}{after}"
    if isinstance(signum, int) and not isinstance(signum, bool):
        named = f" ({name})" if isinstance(name, str) and name else ""
        return f"the command was killed by signal {signum}{named}{after}"
    if end.get("status") == "finished":
        return f"training finished{after}"
    if end.get("status") == "failed":
        return f"training failed (it raised an exception){after}"
    return f"the recording ended{after}"


def _recording_text(rec: Recording) -> str:
    """What a recording's ``run`` line says about it, and how it ended."""
    said = []
    command = rec.command
    if command:
        text = shlex.join(command)
        cut = text[:MAX_COMMAND_CHARS] + ("..." if len(text) > MAX_COMMAND_CHARS else "")
        said.append(f"command {cut}")
    host = rec.run.get("host")
    if isinstance(host, str) and host:
        said.append(f"on {host}")
    if rec.node is not None:
        said.append(f"node {rec.node}")
    pid = rec.run.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        said.append(f"pid {pid}")
    if rec.start is not None:
        with contextlib.suppress(OverflowError, OSError, ValueError):
            when = datetime.datetime.fromtimestamp(rec.start, datetime.timezone.utc)
            said.append(f"started {when:%Y-%m-%d %H:%M:%S} UTC")
    version = rec.run.get("version")
    if isinstance(version, str) and version:
        said.append(f"sysmetrics {version}")
    return (", ".join(said) + ": " if said else "") + ending(rec)


CROSS_NODE_RULES = CROSS_NODE_CODES  # rules that compare nodes (the registry's run scope)


def stall_sentence(stall: Stall) -> str:
    """A stall (:class:`~sysmetrics.report.data.Stall`) in words, as the page says it."""
    when = f"{_duration(stall.start)} after the start"
    if stall.ended:
        return (
            f"no new step after step {stall.step} for the last {_duration(stall.seconds)} "
            f"({when}): the run ended stalled"
        )
    if stall.next_step is not None and stall.next_step > stall.step + 1:
        return f"steps {stall.step} to {stall.next_step} took {_duration(stall.seconds)} ({when})"
    return f"no new step after step {stall.step} for {_duration(stall.seconds)} ({when})"


def _verdict_html(said: Optional[Verdict]) -> str:
    """The verdict, ahead of the findings: its label, then its sentence."""
    if said is None:
        return ""
    return (
        f'<p class="verdict"><span class="rule">{html.escape(said.label)}</span> '
        f"{html.escape(said.sentence)}</p>"
    )


def _findings_html(found: Sequence[Finding], start: Optional[float]) -> str:
    if not found:
        return f"<p>{html.escape(NO_MATCH)}</p>"
    return "<ul>" + "".join(_finding_html(f, start) for f in found) + "</ul>"


def _section(mine: NodePage, pngs: dict[str, bytes], h: int) -> list[str]:
    """One node's part of the page: facts, recordings, findings, summary table, figures.

    ``h`` is the level of its headings (2 for the page's only run, 3 under a node).
    """
    run, seen, ax = mine.run, mine.view, mine.axis
    first = seen.starts
    facts = f"{len(run)} sample{'s' if len(run) != 1 else ''}"
    if len(first) > 1:
        facts += f" in {len(first)} recordings (the file was appended to)"
    facts += f" over {_duration(seen.duration)}"
    if seen.interval is not None:
        facts += f", one every {seen.interval:.3g} s"
    if mine.steps is not None:
        facts += f"; steps {mine.steps[0]} to {mine.steps[1]}"
    if ax.stalls:
        facts += "; " + "; ".join(stall_sentence(stall) for stall in longest(ax.stalls))
        more = len(ax.stalls) - MAX_STALLS_SAID
        if more > 0:
            rest = sum(s.seconds for s in ax.stalls) - sum(s.seconds for s in longest(ax.stalls))
            facts += f"; {more} shorter stalls, {_duration(rest)} in all"
    parts = [f"<p>{html.escape(facts)}.</p>"]
    recordings = run.recordings
    if len(recordings) == 1:
        parts.append(f"<p>{html.escape(_capital(_recording_text(recordings[0])))}.</p>")
    elif recordings:
        items = [
            f"<li>{html.escape(_capital(_recording_text(rec)))}.</li>"
            for rec in recordings[:MAX_RECORDINGS_SHOWN]
        ]
        more = len(recordings) - MAX_RECORDINGS_SHOWN
        if more > 0:
            items.append(f"<li>{more} more recordings</li>")
        parts.append('<ol class="recordings">' + "".join(items) + "</ol>")
    parts.append(f"<h{h}>Findings</h{h}>")
    parts.append(_verdict_html(mine.verdict))
    parts.append(_findings_html(mine.findings, seen.start))
    parts.append(f"<h{h}>Summary</h{h}><table><tr><th>group</th><th>key</th><th>unit</th>")
    parts.append("<th>mean</th><th>p95</th><th>peak</th><th>total</th></tr>")
    rows = mine.rows
    for row in rows:
        label = _cut(row.label, MAX_KEY_CHARS)
        cells = (row.group, label, row.unit, *map(_number, (row.mean, row.p95, row.peak)))
        parts.append(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in (*cells, row.total)) + "</tr>"
        )
    parts.append("</table>")
    unlisted = [s.label for s in mine.series if s.present][len(rows) :]
    if unlisted:  # the table's bound, said
        low, high = _cut(unlisted[0], MAX_KEY_CHARS), _cut(unlisted[-1], MAX_KEY_CHARS)
        note = (
            f"{len(unlisted)} more keys are not in the table (at most {MAX_ROWS} rows, "
            f"MAX_ROWS): {low} to {high}."
        )
        parts.append(f"<p><small>{html.escape(note)}</small></p>")
    parts.append(f"<h{h}>Figures</h{h}>")
    said = []
    if ax.left_out:
        said.append(f"The {ax.left_out} samples before the first step are not drawn.")
    if ax.after:
        said.append(
            f"The {ax.after} samples after the last step (the run winding down) are not drawn "
            "on the step axis."
        )
    if ax.stalls:
        said.append("Hatched: no new step (a stall), drawn by time.")
    if said:
        parts.append(f"<p><small>{html.escape(' '.join(said))}</small></p>")
    for group, png in pngs.items():
        parts.append(_img(group, png))
    return parts


def _img(group: str, png: bytes) -> str:
    data = base64.b64encode(png).decode()
    return f'<p><img alt="{html.escape(group)}" src="data:image/png;base64,{data}"></p>'


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def render(
    run: Run,
    title: str,
    pngs: dict[str, bytes],
    all_series: Optional[Sequence[Series]] = None,
    x: str = "step",
    found: Optional[Found] = None,
) -> str:
    """The whole HTML page for ``run``: recordings, findings, summary table, figures (``pngs``).

    The page's model (:func:`~sysmetrics.report.model.build`) rendered by
    :func:`render_page`; ``all_series`` is ``series(run)``, ``found`` :func:`run_findings`
    of ``run``, where the caller has them; ``x`` the figures' axis.
    """
    return render_page(build(run, (), x, found, all_series), title, pngs)


def render_page(page: Page, title: str, pngs: dict[str, bytes]) -> str:
    """The whole HTML page of the model ``page``, its figures ``pngs``.

    A run of several nodes (a file they all appended to, or one file per node) gets the
    findings across nodes, then one section per node, nothing mixed; its ``pngs`` are
    named ``"node {k}: {group}"`` (see :func:`node_figures`).
    """
    run = page.run
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if run.left_out:  # what the reader left out, said first
        items = "".join(f"<li>{html.escape(_capital(said))}.</li>" for said in run.left_out)
        parts.append(f'<ul class="left-out">{items}</ul>')
    if page.single:
        parts += _section(page.nodes[0], pngs, 2)
    else:
        names = ", ".join(
            node_label(n.node) + (f" ({os.path.basename(n.file)})" if n.file else "")
            for n in page.nodes
        )
        said = f"Samples of {len(page.nodes)} nodes ({names}), each shown on its own."
        parts.append(f"<p>{html.escape(said)}</p>")
        start = next((t for t in run.time if t is not None), None)
        parts.append("<h2>Findings across nodes</h2>")
        parts.append(_verdict_html(page.verdict))
        parts.append(_findings_html(page.across, start))
        for group, png in pngs.items():  # the nodes' speed side by side
            if group.startswith(ALL_NODES + ": "):
                parts.append(_img(group, png))
        for mine in page.nodes:
            prefix = node_label(mine.node) + ": "
            drawn = {g[len(prefix) :]: p for g, p in pngs.items() if g.startswith(prefix)}
            parts.append(f"<h2>{html.escape(_capital(node_label(mine.node)))}</h2>")
            parts += _section(mine, drawn, 3)
    parts += _ledger_html(page)
    parts.append("</body></html>")
    return "\n".join(parts)


def _ledger_html(page: Page) -> list[str]:
    """The cost ledger's section: where the run has an energy counter or prices were given.

    With prices and no counter, the section says what was not counted (no figure).
    """
    costs = page.ledger
    if costs is None or not (
        costs.counted or costs.prices.priced or costs.prices.carbon_intensity is not None
    ):
        return []
    items = "".join(f"<li>{html.escape(line)}</li>" for line in costs.lines())
    return ["<h2>Cost ledger</h2>", f'<ul class="ledger">{items}</ul>']


def _slug(group: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-") or "group"


def _read(
    path: PathLike | Sequence[PathLike],
    output: Optional[PathLike],
    x: str,
    left_out: Optional[list[str]] = None,
    baseline: Optional[Sequence[PathLike]] = None,
    compared: Optional[list[Comparison]] = None,
    prices: Optional[Prices] = None,
) -> Page:
    """The run files' page (:func:`~sysmetrics.report.model.build`); errors as :func:`write_report`.

    ``left_out`` gets what the reader left out, in sentences (``Run.left_out``).
    ``baseline``: the run files of a baseline run, compared with this one (see
    :func:`_with_baseline`; ``compared`` gets the comparison).
    """
    given = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    paths = [str(os.fspath(p)) for p in given]
    named = ", ".join(paths)
    if output is not None:  # fail before the drawing, not after
        folder = os.path.dirname(os.fspath(output)) or "."
        if not os.path.isdir(folder):
            raise FileNotFoundError(2, "No such directory", folder)
        for p in paths:
            if os.path.realpath(output) == os.path.realpath(p):
                raise ValueError(f"{os.fspath(output)} is the run file: give another -o")
    run = read_runs(paths)
    if left_out is not None:
        left_out += run.left_out
    if len(run) == 0:
        raise ValueError(f"{named} has no samples (no line is a run-file record)")
    page = build(run, paths, x, prices=prices)
    if not any(s.present for mine in page.nodes for s in mine.series):
        raise ValueError(f"{named} has no metric values (no finite number)")
    if baseline is not None:  # report --baseline: the comparison's sentences as findings
        page = _with_baseline(page, baseline, compared)
    return page


def _with_baseline(
    page: Page, baseline: Sequence[PathLike], compared: Optional[list[Comparison]]
) -> Page:
    """``page`` with the comparison of the ``baseline`` run against its run in its findings.

    The sentences (rule ``baseline``) go after the findings of the page's only node, or
    after the findings across nodes; the comparison is appended to ``compared``. Raises
    as :func:`~sysmetrics.compare.compare` does (``ValueError``: the runs' nodes differ).
    """
    old = read_runs([os.fspath(p) for p in baseline])
    comparison = compare(old, page.run, [os.fspath(p) for p in baseline], page.files)
    if compared is not None:
        compared.append(comparison)
    added = tuple(baseline_findings(comparison))
    if page.single:
        mine = page.nodes[0]
        return replace(page, nodes=(replace(mine, findings=mine.findings + added),))
    return replace(page, across=page.across + added)


def _write(page: Page, output: Optional[PathLike], png_dir: Optional[PathLike]) -> list[str]:
    if output is None and png_dir is None:
        return []
    name = ", ".join(os.path.basename(p) for p in page.files)
    pngs = page_figures(page, name)
    written = []
    if png_dir is not None:
        os.makedirs(png_dir, exist_ok=True)
        for group, png in pngs.items():
            target = os.path.join(png_dir, f"{_slug(group)}.png")
            with open(target, "wb") as f:
                f.write(png)
            written.append(target)
    if output is not None:
        title = f"sysmetrics report: {name}"
        with open(output, "w", encoding="utf-8") as f:
            f.write(render_page(page, title, pngs))
        written.append(os.fspath(output))
    return written


def write_report(
    path: PathLike | Sequence[PathLike],
    output: Optional[PathLike] = None,
    png_dir: Optional[PathLike] = None,
    x: str = "step",
    left_out: Optional[list[str]] = None,
    baseline: Optional[Sequence[PathLike]] = None,
    compared: Optional[list[Comparison]] = None,
    prices: Optional[Prices] = None,
) -> list[str]:
    """Read the run file(s) at ``path``; write the page to ``output``, figures to ``png_dir``.

    What the reader left out of the files (``Run.left_out``: past its memory budget,
    lines skipped, keys dropped) is said at the top of the page and appended to
    ``left_out`` where given (``sysmetrics report`` prints it on stderr). ``baseline``:
    the run file(s) of an earlier run, compared with this one; the comparison's sentences
    are added to the findings (rule ``baseline``) and the comparison to ``compared``.

    ``path`` is one run file, or several: one per node of one run (see
    :func:`~sysmetrics.runfile.read_runs`). ``x`` is the figures' axis (``"step"``: the
    step axis where a node has steps; ``"time"``). Returns the paths written. Raises
    ``OSError`` where a run file cannot be read or an output cannot be written,
    ``ValueError`` where the run files have no samples or no metric values, are not the
    nodes of one run, or ``output`` is one of them, and ``ImportError`` where matplotlib
    is missing.
    """
    axis(Run(), x)  # a bad x fails first
    return _write(_read(path, output, x, left_out, baseline, compared, prices), output, png_dir)


def json_report(
    path: PathLike | Sequence[PathLike],
    output: Optional[PathLike] = None,
    png_dir: Optional[PathLike] = None,
    x: str = "step",
    left_out: Optional[list[str]] = None,
    baseline: Optional[Sequence[PathLike]] = None,
    compared: Optional[list[Comparison]] = None,
    prices: Optional[Prices] = None,
) -> tuple[str, list[str]]:
    """The JSON document (:mod:`sysmetrics.report.document`) of the run file(s) at ``path``.

    Also returns the paths written: the page and figures, only where ``output`` or
    ``png_dir`` is given. Raises as :func:`write_report` does (``ImportError`` only where
    it draws).
    """
    axis(Run(), x)
    page = _read(path, output, x, left_out, baseline, compared, prices)
    text = json.dumps(page.to_json(), indent=1, allow_nan=False)
    return text, _write(page, output, png_dir)
