"""The report's HTML page: facts, recordings, findings, summary table and figures.

:func:`render` builds the one self-contained page (figures embedded as PNG, no scripts,
nothing fetched); :func:`write_report` reads a run file and writes the page and figures.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import html
import os
import re
import shlex
from collections.abc import Sequence
from typing import Optional

from sysmetrics.findings import NO_MATCH, Finding, findings
from sysmetrics.report.data import Series, _clock, _number, axis, series, starts, summary
from sysmetrics.report.drawing import _cut, figures, node_figures, node_label
from sysmetrics.runfile import PathLike, Recording, Run, Span, read_run

MAX_KEY_CHARS = 300  # characters of a key in the summary table at most


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    h, rest = divmod(round(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {s:02d} s" if m else f"{seconds:.1f} s"


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
    return (
        f'<li><span class="rule">{html.escape(finding.rule)}</span> '
        f"{html.escape(finding.sentence)}<br><small>{html.escape(detail)}</small></li>"
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


def _section(
    run: Run, pngs: dict[str, bytes], all_series: Optional[Sequence[Series]], h: int
) -> list[str]:
    """One run's part of the page: facts, recordings, findings, summary table, figures.

    ``h`` is the level of its headings (2 for the page's only run, 3 under a node).
    """
    import numpy as np

    seconds = _clock(run)
    first = starts(run)
    bounds = [*first, len(seconds)]
    duration = sum(float(seconds[b - 1] - seconds[a]) for a, b in zip(bounds, bounds[1:]) if b > a)
    dt = np.diff(seconds)
    inside = np.delete(dt, [i - 1 for i in first[1:]])
    inside = inside[inside > 0]
    steps = [s for s in run.step if s is not None]
    start = next((t for t in run.time if t is not None), None)
    facts = f"{len(run)} sample{'s' if len(run) != 1 else ''}"
    if len(first) > 1:
        facts += f" in {len(first)} recordings (the file was appended to)"
    facts += f" over {_duration(duration)}"
    if inside.size:
        facts += f", one every {float(np.median(inside)):.3g} s"
    if steps:
        facts += f"; steps {min(steps)} to {max(steps)}"
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
    found = findings(run)
    if found:
        parts.append("<ul>" + "".join(_finding_html(f, start) for f in found) + "</ul>")
    else:
        parts.append(f"<p>{html.escape(NO_MATCH)}</p>")
    parts.append(f"<h{h}>Summary</h{h}><table><tr><th>group</th><th>key</th><th>unit</th>")
    parts.append("<th>mean</th><th>p95</th><th>peak</th><th>total</th></tr>")
    for row in summary(series(run) if all_series is None else all_series):
        label = _cut(row.label, MAX_KEY_CHARS)
        cells = (row.group, label, row.unit, *map(_number, (row.mean, row.p95, row.peak)))
        parts.append(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in (*cells, row.total)) + "</tr>"
        )
    parts.append(f"</table><h{h}>Figures</h{h}>")
    left_out = axis(run).left_out
    if left_out:
        parts.append(f"<p><small>The {left_out} samples before the first step are not drawn.")
        parts.append("</small></p>")
    for group, png in pngs.items():
        data = base64.b64encode(png).decode()
        parts.append(f'<p><img alt="{html.escape(group)}" src="data:image/png;base64,{data}"></p>')
    return parts


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def render(
    run: Run, title: str, pngs: dict[str, bytes], all_series: Optional[Sequence[Series]] = None
) -> str:
    """The whole HTML page for ``run``: recordings, findings, summary table, figures (``pngs``).

    ``all_series`` is ``series(run)``, where the caller has it already. A run of several
    nodes (a file they all appended to) gets one section per node, nothing mixed; its
    ``pngs`` are named ``"node {k}: {group}"`` (see :func:`node_figures`).
    """
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    nodes = run.by_node()
    if len(nodes) == 1:
        parts += _section(run, pngs, all_series, 2)
    else:
        names = ", ".join(node_label(k) for k, _ in nodes)
        said = f"Samples of {len(nodes)} nodes ({names}), each shown on its own."
        parts.append(f"<p>{html.escape(said)}</p>")
        for node, part in nodes:
            prefix = node_label(node) + ": "
            mine = {g[len(prefix) :]: p for g, p in pngs.items() if g.startswith(prefix)}
            parts.append(f"<h2>{html.escape(_capital(node_label(node)))}</h2>")
            parts += _section(part, mine, None, 3)
    parts.append("</body></html>")
    return "\n".join(parts)


def _slug(group: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-") or "group"


def write_report(
    path: PathLike, output: Optional[PathLike] = None, png_dir: Optional[PathLike] = None
) -> list[str]:
    """Read the run file at ``path``; write the page to ``output`` and the figures to ``png_dir``.

    Returns the paths written. Raises ``OSError`` where the run file cannot be read or an
    output cannot be written, ``ValueError`` where the run file has no samples or no
    metric values, or ``output`` is the run file itself, and ``ImportError`` where
    matplotlib is missing.
    """
    if output is not None:  # fail before the drawing, not after
        folder = os.path.dirname(os.fspath(output)) or "."
        if not os.path.isdir(folder):
            raise FileNotFoundError(2, "No such directory", folder)
        if os.path.realpath(output) == os.path.realpath(path):
            raise ValueError(f"{os.fspath(output)} is the run file: give another -o")
    run = read_run(path)
    if len(run) == 0:
        raise ValueError(f"{os.fspath(path)} has no samples (no line is a run-file record)")
    all_series = series(run)
    if not summary(all_series):
        raise ValueError(f"{os.fspath(path)} has no metric values (no finite number)")
    name = os.path.basename(os.fspath(path))
    pngs = figures(run, all_series, name) if len(run.nodes) <= 1 else node_figures(run, name)
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
            f.write(render(run, title, pngs, all_series))
        written.append(os.fspath(output))
    return written
