"""``sysmetrics report RUN.jsonl -o report.html``: a run file as one page to look at.

The page is one self-contained HTML file (figures embedded as PNG, no scripts, nothing
fetched) with the run's findings (:mod:`sysmetrics.findings`), a summary table (mean, p95
and peak of each key, by group) and one figure per group (CPU, memory, each GPU, disk,
network, energy, ...), on the step axis where the run has steps and on elapsed time
otherwise. Figures need matplotlib (the ``[report]`` extra).

Values are shown in the unit a reader expects: counters (``disk.in``, ``network.recv``,
``*.energyJoules``) as rates over each interval (MiB/s, W), bytes as GiB (MiB/s for rates),
MiB as GiB. ``gpu.process.{i}.*`` keys that repeat a ``gpu.{i}.*`` key are left out, and
per-core CPU keys are shown as their mean over the cores. The job's memory is its PSS
(``proc.memory.pssMB``, and ``proc.memory.percent`` made from it): where the run has it,
``proc.memory.rssMB``, which counts pages shared by forked workers once per process, is
left out of the figures and marked so in the table.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import html
import io
import math
import os
import re
import shlex
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from sysmetrics import _optional
from sysmetrics.descriptions import counter_rate, describe, gpu_key, split_node
from sysmetrics.findings import Finding, findings
from sysmetrics.runfile import PathLike, Recording, Run, Span, read_run

if TYPE_CHECKING:
    import numpy as np

MAX_POINTS = 1500  # points drawn per series at most: longer runs are drawn as bins
MAX_SERIES = 8  # series drawn per panel at most (the rest are in the table)
MAX_PANELS = 8  # panels (one per unit) per figure at most
MAX_FIGURES = 24  # figures per report at most
MAX_ROWS = 500  # summary table rows at most
MAX_LABEL_CHARS = 60  # characters of a key in a figure's legend at most
MAX_TITLE_CHARS = 100  # characters of a figure's title at most
MAX_KEY_CHARS = 300  # characters of a key in the summary table at most

# Per-core families shown as their mean over the cores.
_COLLAPSED = ("cpu.{i}.cpu_percent", "trn.{core}.neuroncore_utilization")
_NAMES = {
    "cpu": "CPU",
    "memory": "Memory",
    "disk": "Disk",
    "network": "Network",
    "tpu": "TPU",
    "trn": "Trainium",
    "ipu": "IPU",
    "openmetrics": "OpenMetrics",
}
_ORDER = ("CPU", "Memory", "GPU", "Disk", "Network", "Energy")
# Panels in this order of units (utilization first), the others after; error-counter
# rates (count/s) are left to the table, with their totals.
_PANELS = ("%", "GiB", "MiB", "°C", "W", "MHz", "MiB/s", "0/1")
_NOT_DRAWN = ("count/s",)


# The job's RSS sums its processes' (W&B's meaning): not the job's memory where PSS is there.
_RSS, _PSS = "proc.memory.rssMB", "proc.memory.pssMB"
_RSS_NOTE = " (shared pages counted once per process)"


def group_of(key: str) -> str:
    """The group a key is summarised and drawn in: ``"CPU"``, ``"GPU 0"``, ``"Disk"``, ...."""
    gpu = gpu_key(key)
    if gpu is not None:
        return f"GPU {gpu.i}"
    if key.endswith("energyJoules"):
        return "Energy"
    if split_node(key) is not None:  # node{k}/... keys gathered from several nodes
        return "Nodes"
    head = key.split(".", 1)[0]
    if head == "proc":
        head = key.split(".", 2)[1] if key.count(".") >= 2 else head
    return _NAMES.get(head, "Other")


def _group_order(group: str) -> tuple[int, int, str]:
    name, _, number = group.partition(" ")
    rank = _ORDER.index(name) if name in _ORDER else len(_ORDER)
    return rank, int(number) if number.isdigit() else 0, group


@dataclass(frozen=True)
class Series:
    """One thing to summarise and draw: ``values`` in ``unit``, one per sample (NaN: none).

    For a counter ``values`` are its rates and ``total`` its increase over the run.
    """

    group: str
    label: str
    unit: str
    values: np.ndarray[Any, Any]
    total: Optional[float] = None  # a counter's increase over the run, in ``total_unit``

    @property
    def total_unit(self) -> str:
        """The unit of ``total``: the rate's unit times seconds (W: J)."""
        return "J" if self.unit == "W" else self.unit.removesuffix("/s")


def _display(key: str, values: np.ndarray[Any, Any]) -> tuple[str, float, bool]:
    """The unit ``key`` is shown in, the factor to it, and whether it is a counter's rate.

    Memory in bytes or MiB is shown in GiB where it reaches 1 GiB, in MiB otherwise.
    """
    import numpy as np

    found = describe(key)
    if found is None:
        return "", 1.0, False
    unit, counter = found[0].unit, found[0].kind == "counter"
    if counter:  # shown as its rate (bytes/s as MiB/s, like a gauge in bytes/s)
        unit = found[0].rate_unit
        return ("MiB/s", 2.0**-20, True) if unit == "bytes/s" else (unit, 1.0, True)
    if unit in ("bytes", "MiB"):
        to_mib = 2.0**-20 if unit == "bytes" else 1.0
        known = values[~np.isnan(values)]
        peak = float(np.abs(known).max()) * to_mib if known.size else 0.0
        return ("GiB", to_mib / 1024, False) if peak >= 1024 else ("MiB", to_mib, False)
    if unit == "bytes/s":
        return "MiB/s", 2.0**-20, False
    return unit, 1.0, False


def _clock(run: Run) -> np.ndarray[Any, Any]:
    """Seconds since the first sample, per sample (monotonic clock, else wall time)."""
    import numpy as np

    monotonic = [math.nan if v is None else v for v in run.monotonic]
    wall = [math.nan if v is None else v for v in run.time]
    clock = np.array(monotonic if not any(v != v for v in monotonic) else wall, dtype=float)
    known = clock[~np.isnan(clock)]
    return clock - known[0] if known.size else np.arange(len(run), dtype=float)


GAP_INTERVALS = 10.0  # a gap this many median intervals long (and over GAP_S) ...
GAP_S = 5.0  # ... or a clock that goes back starts a new recording


def starts(run: Run) -> list[int]:
    """The first sample of each recording in ``run`` (several were appended to its file).

    From the recordings' ``run`` lines where the file has them; in a file written before
    those markers existed, guessed from the clock (:func:`segments`).
    """
    if not run.recordings:
        return segments(_clock(run))
    rec = run.recording
    return [0, *(j for j in range(1, len(rec)) if rec[j] != rec[j - 1])] if rec else [0]


def segments(seconds: np.ndarray[Any, Any]) -> list[int]:
    """The first sample of each recording in a run file without ``run`` lines: a guess.

    A recording starts where the clock goes back (another boot) or after a gap longer
    than ``GAP_INTERVALS`` median intervals and ``GAP_S`` seconds.
    """
    import numpy as np

    dt = np.diff(seconds)
    if not dt.size:
        return [0]
    known = dt[dt > 0]
    median = float(np.median(known)) if known.size else 0.0
    with np.errstate(invalid="ignore"):
        breaks = (dt <= 0) | (dt > max(GAP_INTERVALS * median, GAP_S))
    return [0, *(int(i) + 1 for i in np.flatnonzero(breaks))]


def series(run: Run) -> list[Series]:
    """The run's keys as :class:`Series`, grouped, in reading order (see the module)."""
    import numpy as np

    seconds = _clock(run)
    dt = np.diff(seconds)
    dt[[i - 1 for i in starts(run)[1:]]] = np.nan  # no rate across recordings
    out: list[Series] = []
    collapsed: dict[str, list[np.ndarray[Any, Any]]] = {}
    for key in sorted(run.columns):
        gpu = gpu_key(key)
        if gpu is not None and gpu.process and gpu.device_key in run.columns:
            continue  # gpu.process.{i}.x repeats gpu.{i}.x
        values = np.frombuffer(run.columns[key], dtype=float)
        found = describe(key)
        if found is not None and found[0].key in _COLLAPSED:
            collapsed.setdefault(found[0].key, []).append(values)
            continue
        unit, factor, rate = _display(key, values)
        total = None
        if rate:  # a counter: its increase over each interval, per second
            values, total = _rates(values, dt)
            total *= factor
        scaled = values if factor == 1 else values * factor
        label = key + _RSS_NOTE if key.startswith(_RSS) else key
        out.append(Series(group_of(key), label, unit, scaled, total))
    for family, columns in collapsed.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a sample with no core
            mean = np.nanmean(np.vstack(columns), axis=0)
        label = f"{family} (mean of {len(columns)})"  # both families are in %
        out.append(Series(group_of(family), label, "%", mean))
    out.sort(key=lambda s: (_group_order(s.group), s.label))
    return out


def _rates(
    values: np.ndarray[Any, Any], dt: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], float]:
    """A counter's rate over each interval, and its increase over the run.

    A rate is NaN where :func:`counter_rate` gives none, and for the first sample; the
    increase is the sum of the increases that have a rate.
    """
    import numpy as np

    found = [
        counter_rate(*interval)
        for interval in zip(values.tolist(), values[1:].tolist(), dt.tolist())
    ]
    ok = np.array([r is not None for r in found], dtype=bool)
    per_s = np.array([np.nan, *(np.nan if r is None else r for r in found)], dtype=float)
    return per_s, float(np.diff(values)[ok].sum())


@dataclass(frozen=True)
class Row:
    """One line of the summary table: mean, 95th percentile and peak, in ``unit``.

    ``total`` is a counter's increase over the run (the rates' integral), with its unit.
    """

    group: str
    label: str
    unit: str
    mean: float
    p95: float
    peak: float
    total: str = ""  # a counter's increase over the run, with its unit: "200 MiB"


def summary(all_series: Sequence[Series]) -> list[Row]:
    """Mean, p95 and peak of each series with a value (at most ``MAX_ROWS`` rows)."""
    import numpy as np

    rows = []
    for s in all_series:
        known = s.values[~np.isnan(s.values)]
        if known.size:
            p95 = float(np.percentile(known, 95))
            total = "" if s.total is None else f"{_number(s.total)} {s.total_unit}"
            mean, peak = float(known.mean()), float(known.max())
            rows.append(Row(s.group, s.label, s.unit, mean, p95, peak, total))
    return rows[:MAX_ROWS]


@dataclass(frozen=True)
class Axis:
    """The figures' x axis: one ``x`` per sample (NaN: not drawn) and its label."""

    x: np.ndarray[Any, Any]
    label: str
    left_out: int  # samples not drawn (before the first step)
    starts: tuple[int, ...] = (0,)  # the first sample of each recording (see starts())


def axis(run: Run) -> Axis:
    """The step axis where the run has steps that never go back; elapsed time otherwise.

    On the step axis a sample is placed by its time between the samples where a step was
    first seen, so slow steps spread their samples out instead of stacking them.
    """
    import numpy as np

    seconds = _clock(run)
    steps = np.array([math.nan if s is None else s for s in run.step], dtype=float)
    known = ~np.isnan(steps)
    if known.sum() >= 2 and np.all(np.diff(steps[known]) >= 0) and np.ptp(steps[known]) > 0:
        first = np.flatnonzero(known & np.concatenate(([True], steps[1:] != steps[:-1])))
        first = first[~np.isnan(seconds[first])]
        if first.size >= 2 and np.all(np.diff(seconds[first]) > 0):
            x = np.interp(seconds, seconds[first], steps[first])
            x[: first[0]] = np.nan
            return Axis(x, "step", int(first[0]), tuple(starts(run)))
    span = float(np.nanmax(seconds)) if len(seconds) else 0.0
    scale, unit = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
    return Axis(seconds / scale, f"elapsed time ({unit})", 0, tuple(starts(run)))


def _bins(
    x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], points: int = MAX_POINTS
) -> tuple[Any, Any, Any, Any]:
    """``x``, mean, min and max of ``y`` in at most ``points`` bins of equal count."""
    import numpy as np

    keep = ~np.isnan(x) & ~np.isnan(y)
    x, y = x[keep], y[keep]
    if x.size <= points:
        return x, y, y, y
    edges = np.linspace(0, x.size, points + 1).astype(int)[:-1]
    count = np.diff(np.append(edges, x.size))
    mean_x = np.add.reduceat(x, edges) / count
    return (
        mean_x,
        np.add.reduceat(y, edges) / count,
        np.minimum.reduceat(y, edges),
        np.maximum.reduceat(y, edges),
    )


def point_marker(values: np.ndarray[Any, Any], drawn: np.ndarray[Any, Any]) -> str | None:
    """``"o"`` where a series' points are to be marked, else None.

    Marked: fewer than 3 points drawn, or a key measured in under half the samples
    (``proc.memory.pssMB``: a reading every few seconds), whose lines join readings
    seconds apart; the dots show which values were measured.
    """
    import numpy as np

    measured = int((~np.isnan(values)).sum())
    few = int((~np.isnan(drawn)).sum()) < 3
    return "o" if few or measured < 0.5 * len(values) else None


def _drawn(ax: Axis, y: np.ndarray[Any, Any]) -> tuple[Any, Any, Any, Any]:
    """:func:`_bins` of each recording, joined by NaN so that no line crosses a gap."""
    import numpy as np

    bounds = [*ax.starts, len(y)]
    columns: list[list[Any]] = [[], [], [], []]
    for a, b in zip(bounds, bounds[1:]):
        points = max(1, MAX_POINTS * (b - a) // max(1, len(y)))
        for column, part in zip(columns, _bins(ax.x[a:b], y[a:b], points)):
            column += [part, np.array([np.nan])]
    x, mean, low, high = (np.concatenate(column[:-1]) for column in columns)
    return x, mean, low, high


def _panels(members: Sequence[Series]) -> list[tuple[str, list[Series]]]:
    """The series of a figure by unit, in ``_PANELS`` order, at most ``MAX_PANELS``."""
    units: dict[str, list[Series]] = {}
    for s in members:
        units.setdefault(s.unit, []).append(s)
    order = {unit: n for n, unit in enumerate(_PANELS)}
    return sorted(units.items(), key=lambda item: order.get(item[0], len(order)))[:MAX_PANELS]


def figure_png(group: str, members: Sequence[Series], ax: Axis, name: str = "") -> bytes:
    """One figure for a group: a panel per unit, a line per series (binned: mean and range).

    ``name`` (the run file's) goes into the title. Keys, the name and the group are
    plain text (no mathtext or TeX), each cut to a bounded length.
    """
    figure_class = _optional.matplotlib_figure()
    import matplotlib

    # Keys are text from the run file, never markup: a "$" in a disk path is no mathtext.
    # A glyph a key has that the font lacks is drawn as a box, not a console warning.
    with (
        matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}),
        warnings.catch_warnings(),
    ):
        warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
        return _figure_png(figure_class, group, members, ax, name)


def _figure_png(
    figure_class: Any, group: str, members: Sequence[Series], ax: Axis, name: str
) -> bytes:
    panels = _panels(members)
    fig = figure_class(figsize=(10, 0.6 + 2.0 * len(panels)), layout="constrained", dpi=100)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for (unit, drawn), panel in zip(panels, axes):
        for s in drawn[:MAX_SERIES]:
            x, mean, low, high = _drawn(ax, s.values)
            marker = point_marker(s.values, mean)
            label = _cut(_short(s.label, group), MAX_LABEL_CHARS)
            if not label or label.startswith("_"):  # matplotlib leaves those out of legends
                label = repr(label)
            (line,) = panel.plot(x, mean, linewidth=1.2, label=label, marker=marker, markersize=3)
            if low is not mean:
                panel.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        panel.set_ylabel(unit or "value")
        panel.ticklabel_format(axis="y", useOffset=False, style="plain")
        low_y, high_y = panel.get_ylim()
        top = max(abs(low_y), abs(high_y))
        if unit == "0/1":  # throttle flags: the whole range, off to on
            panel.set_ylim(-0.05, 1.05)
        elif 0 < high_y - low_y < 0.02 * top:  # a flat line: do not blow its noise up
            middle = (low_y + high_y) / 2
            panel.set_ylim(middle - 0.01 * top, middle + 0.01 * top)
        panel.grid(alpha=0.3)
        more = len(drawn) - MAX_SERIES
        title = "" if more <= 0 else f"{more} more in the summary table"
        panel.legend(
            loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title=title or None
        )
    if ax.label == "step":
        axes[-1].xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_title(_cut(f"{group}: {name}" if name else group, MAX_TITLE_CHARS))
    axes[-1].set_xlabel(ax.label)
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def _cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (cut with an ellipsis)."""
    text = "".join(c if c.isprintable() else "\ufffd" for c in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _short(label: str, group: str) -> str:
    """A legend label without what the title says (``gpu.0.temp`` under GPU 0: ``temp``)."""
    gpu = gpu_key(label)
    if gpu is not None and group.startswith("GPU"):
        return ("process " if gpu.process else "") + gpu.rest
    return label


def figures(
    run: Run, all_series: Optional[Sequence[Series]] = None, name: str = ""
) -> dict[str, bytes]:
    """One PNG per group (at most ``MAX_FIGURES``), in reading order.

    ``all_series`` is ``series(run)``, where the caller has it already; ``name`` (the run
    file's) goes into each title.
    """
    ax = axis(run)
    groups: dict[str, list[Series]] = {}
    every = series(run) if all_series is None else all_series
    pss = any(s.label.startswith(_PSS) for s in every)
    for s in every:
        if pss and s.label.startswith(_RSS):
            continue  # the job's memory is its PSS (see the module)
        if s.unit not in _NOT_DRAWN and (s.unit != "0/1" or s.group.startswith("GPU")):
            groups.setdefault(s.group, []).append(s)
    chosen = list(groups.items())[:MAX_FIGURES]
    return {g: figure_png(g, members, ax, name) for g, members in chosen}


def _number(value: float) -> str:
    if value != value:
        return ""
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


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
        parts.append("<p>Nothing held the run back by the rules' thresholds.</p>")
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


def node_label(node: Optional[int]) -> str:
    """How a node is named on the page: ``"node 3"`` (``"no node"`` where a sample says none)."""
    return "no node" if node is None else f"node {node}"


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


def node_figures(run: Run, name: str = "") -> dict[str, bytes]:
    """:func:`figures` of each node of ``run``, named by node (``"node {k}: {group}"``).

    Each figure's title names its node; a run of one node gets :func:`figures`' own.
    """
    nodes = run.by_node()
    if len(nodes) == 1:
        return figures(run, None, name)
    pngs = {}
    for node, part in nodes:
        label = node_label(node)
        titled = f"{name}, {label}" if name else label
        pngs.update({f"{label}: {g}": png for g, png in figures(part, None, titled).items()})
    return pngs


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


def add_parser(subs: Any) -> argparse.ArgumentParser:
    """Add ``report`` to the command line's subcommands; return its parser."""
    rep: argparse.ArgumentParser = subs.add_parser(
        "report",
        help="turn a run file into an HTML report",
        description="Write one self-contained HTML page (findings, summary, figures) for a "
        "run file, or only its figures as PNG files.",
    )
    rep.add_argument("run", help="the run file (JSON lines from record or a callback)")
    rep.add_argument("-o", "--output", help="the HTML file (default: RUN with .html)")
    rep.add_argument("--png", metavar="DIR", help="write each figure to DIR/<group>.png")
    return rep


def report_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``sysmetrics report``; return the exit status."""
    output = args.output
    if output is None and args.png is None:
        output = os.path.splitext(args.run)[0] + ".html"
    try:
        written = write_report(args.run, output, args.png)
    except (OSError, ValueError, ImportError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
