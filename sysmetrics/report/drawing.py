"""The report's figures: one PNG per group, a panel per unit, a line per series.

Long series are drawn as bins (mean and range), each recording on its own so no line
crosses a gap; everything is bounded (points, series, panels, figures, label length).
Needs matplotlib (the ``[report]`` extra).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from sysmetrics import _optional
from sysmetrics.descriptions import gpu_key
from sysmetrics.report.data import (
    _PSS,
    _RSS,
    TRAINING,
    Axis,
    Series,
    _duration,
    axis,
    longest,
    series,
)
from sysmetrics.runfile import Run, Span

if TYPE_CHECKING:
    import numpy as np

    from sysmetrics.report.model import Page

MAX_POINTS = 1500  # points drawn per series at most: longer runs are drawn as bins
MAX_SERIES = 8  # series drawn per panel at most (the rest are in the table)
MAX_PANELS = 8  # panels (one per unit) per figure at most
MAX_FIGURES = 24  # figures per report at most
MAX_LABEL_CHARS = 60  # characters of a key in a figure's legend at most
MAX_TITLE_CHARS = 100  # characters of a figure's title at most
PNG_COMPRESS_LEVEL = 3  # zlib level of the PNGs (1-9): the same pixels as 6, the default,
# in 60 % of its time, the PNGs about 9 % larger
# figures() draws a figure on its last one of as many panels, cleared (_clear): making
# matplotlib's panels and ticks anew took half its time. The PNGs are the same pixel for
# pixel (tests/test_report.py); tests that look at each figure after drawing turn it off.
_REUSE_FIGURES = True

# Panels in this order of units (utilization first), the others after; error-counter
# rates (count/s) are left to the table, with their totals.
_PANELS = ("%", "GiB", "MiB", "°C", "W", "MHz", "MiB/s", "0/1")
# The training figure leads with speed: seconds per step, then the data-wait share.
_TRAINING_PANELS = ("s", "%", "samples/s", "J")
_NOT_DRAWN = ("count/s",)
_LEFT, _RIGHT = 0.08, 0.7  # the panels' left and right edges, as shares of the width
_MARK_COLOURS = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")


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
    """:func:`_bins` of each recording, joined by NaN so that no line crosses a gap.

    Nor a stall where ``y`` has no value (the ``step.*`` keys: no step closed there).
    """
    import numpy as np

    breaks = set(ax.starts)
    for stall in ax.stalls:
        if np.isnan(y[stall.first + 1 : stall.last]).all():
            breaks.update((stall.first + 1, stall.last))
    bounds = [*sorted(b for b in breaks if 0 <= b < len(y)), len(y)]
    columns: list[list[Any]] = [[], [], [], []]
    for a, b in zip(bounds, bounds[1:]):
        points = max(1, MAX_POINTS * (b - a) // max(1, len(y)))
        for column, part in zip(columns, _bins(ax.x[a:b], y[a:b], points)):
            column += [part, np.array([np.nan])]
    x, mean, low, high = (np.concatenate(column[:-1]) for column in columns)
    return x, mean, low, high


def _panels(members: Sequence[Series]) -> list[tuple[str, list[Series]]]:
    """The series of a figure by unit, in ``_PANELS`` order, at most ``MAX_PANELS``.

    In the ``"Training"`` figure: seconds per step first, then % (data wait).
    """
    units: dict[str, list[Series]] = {}
    for s in members:
        units.setdefault(s.unit, []).append(s)
    training = bool(members) and all(s.group == TRAINING for s in members)
    order = {unit: n for n, unit in enumerate(_TRAINING_PANELS if training else _PANELS)}
    return sorted(units.items(), key=lambda item: order.get(item[0], len(order)))[:MAX_PANELS]


Mark = tuple[float, float, str]  # a span to shade on a figure: x from, x to, its label


def figure_png(
    group: str,
    members: Sequence[Series],
    ax: Axis,
    name: str = "",
    marks: Sequence[Mark] = (),
    canvases: Optional[dict[int, tuple[Any, Any]]] = None,
) -> bytes:
    """One figure for a group: a panel per unit, a line per series (binned: mean and range).

    ``name`` (the run file's) goes into the title. The axis' stalls are shaded (hatched,
    with their duration) and ``marks`` (the findings' spans, see :func:`finding_marks`)
    shaded in colour. Keys, the name and the group are plain text (no mathtext or TeX),
    each cut to a bounded length.
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
        return _figure_png(figure_class, group, members, ax, name, marks, canvases)


def _figure_png(
    figure_class: Any,
    group: str,
    members: Sequence[Series],
    ax: Axis,
    name: str,
    marks: Sequence[Mark],
    canvases: Optional[dict[int, tuple[Any, Any]]] = None,
) -> bytes:
    import numpy as np

    panels = _panels(members)
    # The same margins in every figure (not a layout fitted to each one's legend and tick
    # labels), so that the figures' x axes line up down the page: a dip in the speed
    # figure sits above the same step in the CPU figure.
    height = 0.9 + 2.0 * len(panels)
    kept = None if canvases is None else canvases.get(len(panels))
    if kept is not None:
        fig, axes = kept
        _clear(axes)
    else:
        fig = figure_class(figsize=(10, height), dpi=100)
        fig.subplots_adjust(left=_LEFT, right=_RIGHT, top=1 - 0.4 / height,
                            bottom=0.55 / height, hspace=0.12)  # fmt: skip
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        if canvases is not None:
            canvases[len(panels)] = fig, axes
    for (unit, drawn), panel in zip(panels, axes):
        for s in drawn[:MAX_SERIES]:
            x, mean, low, high = _drawn(ax, s.values)
            marker = point_marker(s.values, mean)
            label = _cut(_short(s.label, group), MAX_LABEL_CHARS)
            if not label or label.startswith("_"):  # matplotlib leaves those out of legends
                label = repr(label)
            label = _wrap(label)
            (line,) = panel.plot(x, mean, linewidth=1.2, label=label, marker=marker, markersize=3)
            if low is not mean:
                panel.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        panel.set_ylabel(unit or "value")
        panel.ticklabel_format(axis="y", useOffset=False, style="plain")
        low_y, high_y = panel.get_ylim()
        top = max(abs(low_y), abs(high_y))
        values = np.concatenate([s.values for s in drawn[:MAX_SERIES]])
        known = values[~np.isnan(values)]
        if unit == "0/1":  # throttle flags: the whole range, off to on
            panel.set_ylim(-0.05, 1.05)
        elif known.size and known.min() >= 0 and known.max() == 0:  # all zero: no axis below
            panel.set_ylim(0, 1)
        elif 0 < high_y - low_y < 0.02 * top:  # a flat line: do not blow its noise up
            middle = (low_y + high_y) / 2
            panel.set_ylim(middle - 0.01 * top, middle + 0.01 * top)
        elif known.size and known.min() >= 0 and low_y < 0:  # no negative axis for >= 0
            panel.set_ylim(bottom=0)
        _shade(panel, ax, marks, panel is axes[0])
        panel.grid(alpha=0.3)
        more = len(drawn) - MAX_SERIES
        title = "" if more <= 0 else f"{more} more in the summary table"
        panel.legend(
            loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", title=title or None
        )
    drawn_x = ax.x[~np.isnan(ax.x)]
    if drawn_x.size and np.ptp(drawn_x) > 0:  # every figure over the whole axis: they line up
        pad = 0.02 * float(np.ptp(drawn_x))
        axes[-1].set_xlim(float(drawn_x.min()) - pad, float(drawn_x.max()) + pad)
    if ax.is_step:
        _step_ticks(axes[-1], ax)
    heading = "Training speed" if group == TRAINING else group
    axes[0].set_title(_cut(f"{heading}: {name}" if name else heading, MAX_TITLE_CHARS))
    axes[-1].set_xlabel(ax.label)
    out = io.BytesIO()
    fig.savefig(out, format="png", pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    return out.getvalue()


def _clear(axes: Any) -> None:
    """Make a drawn figure's panels as they were made (see ``canvases`` in :func:`figure_png`).

    Everything drawn is removed, and what drawing set is set back: limits autoscaled
    again from no data, the colour cycle from its start, the default x ticks.
    """
    from matplotlib.ticker import AutoLocator, ScalarFormatter
    from matplotlib.transforms import Bbox

    for panel in axes:
        for artist in [*panel.lines, *panel.collections, *panel.patches, *panel.texts]:
            artist.remove()
        legend = panel.get_legend()
        if legend is not None:
            legend.remove()
        panel.set_prop_cycle(None)
        panel.dataLim.set_points(Bbox.null().get_points())
        panel.ignore_existing_data_limits = True
        panel.set_autoscale_on(True)
        panel.set_title("")
        panel.set_xlabel("")
        panel.set_ylabel("")
    axes[-1].xaxis.set_major_locator(AutoLocator())
    axes[-1].xaxis.set_major_formatter(ScalarFormatter())


def _shade(panel: Any, ax: Axis, marks: Sequence[Mark], labelled: bool) -> None:
    """Shade the axis' stalls (hatched grey) and ``marks`` (colours) on ``panel``.

    The top panel (``labelled``) also names them.
    """
    from matplotlib.transforms import blended_transform_factory

    along = blended_transform_factory(panel.transData, panel.transAxes)
    named = {id(stall) for stall in longest(ax.stalls)}
    for stall in ax.stalls:
        panel.axvspan(stall.x0, stall.x1, facecolor="#bbbbbb", alpha=0.25, hatch="//",
                      edgecolor="#888888", linewidth=0)  # fmt: skip
        if labelled and id(stall) in named:  # inside the span, from its edge inside the panel
            said = f"no new step\nfor {_duration(stall.seconds)}"
            at, side = (stall.x1, "right") if stall.ended else (stall.x0, "left")
            panel.text(at, 0.97, f" {said} ", transform=along, ha=side, va="top",
                       fontsize="small", color="#444444", clip_on=True)  # fmt: skip
    for n, (x0, x1, label) in enumerate(marks):
        colour = _MARK_COLOURS[n % len(_MARK_COLOURS)]
        if x1 > x0:
            panel.axvspan(x0, x1, facecolor=colour, alpha=0.12, linewidth=0)
        else:
            panel.axvline(x0, color=colour, alpha=0.6, linewidth=1.5)
        if labelled:
            panel.text(x0, 1.0 - 0.09 * (1 + n % 4), _cut(label, MAX_LABEL_CHARS),
                       transform=along, fontsize="x-small", color=colour, clip_on=True)  # fmt: skip


def _step_ticks(bottom: Any, ax: Axis) -> None:
    """Whole-step ticks; where stalls widen the axis, placed at their steps' x.

    None in a stall at the end (no step there).
    """
    bottom.xaxis.get_major_locator().set_params(integer=True)
    if not ax.stalls or ax.steps is None:
        return
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    known = ax.steps[~np.isnan(ax.steps)]
    ticks = MaxNLocator(nbins=8, integer=True).tick_values(known.min(), known.max())
    ticks = ticks[(ticks >= known.min()) & (ticks <= known.max())]
    labels = [f"{t:.0f}" for t in ticks]
    bottom.set_xticks([ax.at_step(t) for t in ticks], labels)


def finding_marks(found: Sequence[Any], ax: Axis) -> list[Mark]:
    """Where each finding (``rule``, ``span``) held, as spans on ``ax``.

    A finding without a span, or one the axis cannot place, is left out.
    """
    marks = []
    for finding in found:
        span: Optional[Span] = finding.span
        if span is None:
            continue
        place = ax.at_step if span.axis == "step" else ax.at_time
        x0, x1 = place(span.first), place(span.last)
        if x0 == x0 and x1 == x1:
            marks.append((min(x0, x1), max(x0, x1), str(finding.rule)))
    return marks


_LEGEND_CHARS = 34  # characters of a legend line at most: the legend fits right of _RIGHT


def _wrap(label: str) -> str:
    """``label`` on lines of at most ``_LEGEND_CHARS``, cut after a space, dot or slash."""
    lines: list[str] = []
    while len(label) > _LEGEND_CHARS:
        cut = max(label.rfind(c, 1, _LEGEND_CHARS) + 1 for c in " ./")
        cut = cut if cut > _LEGEND_CHARS // 2 else _LEGEND_CHARS
        lines.append(label[:cut].rstrip())
        label = label[cut:].lstrip()
    return "\n".join([*lines, label])


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
    run: Run,
    all_series: Optional[Sequence[Series]] = None,
    name: str = "",
    x: str = "step",
    found: Optional[Sequence[Any]] = None,
) -> dict[str, bytes]:
    """One PNG per group (at most ``MAX_FIGURES``), in reading order: training speed first.

    ``all_series`` is ``series(run)``, where the caller has it already; ``name`` (the run
    file's) goes into each title; ``x`` is the axis (:func:`~sysmetrics.report.data.axis`);
    ``found`` the run's findings, whose spans are marked on the first figure (the
    training figure where the run has step keys).
    """
    ax = axis(run, x)
    every = series(run) if all_series is None else all_series
    return _figures(ax, every, name, found)


def _figures(
    ax: Axis, every: Sequence[Series], name: str, found: Optional[Sequence[Any]]
) -> dict[str, bytes]:
    """:func:`figures` of a node's ``every`` series, on its axis ``ax``."""
    groups: dict[str, list[Series]] = {}
    pss = any(s.label.startswith(_PSS) for s in every)
    for s in every:
        if pss and s.label.startswith(_RSS):
            continue  # the job's memory is its PSS (see the package)
        if s.unit not in _NOT_DRAWN and (s.unit != "0/1" or s.group.startswith("GPU")):
            groups.setdefault(s.group, []).append(s)
    chosen = list(groups.items())[:MAX_FIGURES]
    marks = finding_marks(found or (), ax)
    canvases: Optional[dict[int, tuple[Any, Any]]] = {} if _REUSE_FIGURES else None
    return {
        g: figure_png(g, members, ax, name, marks if n == 0 else (), canvases)
        for n, (g, members) in enumerate(chosen)
    }


ALL_NODES = "all nodes"  # the name of the figure comparing the nodes' speed


def nodes_speed_png(
    run: Run,
    name: str = "",
    x: str = "step",
    found: Sequence[Any] = (),
    node_series: Optional[Sequence[Sequence[Series]]] = None,
) -> Optional[bytes]:
    """The nodes' training speed in one figure: a line per node (None without step keys).

    ``step.seconds`` and ``step.dataWaitPercent`` of every node, on the raw training step
    (``x="step"``, where every node has steps) or on elapsed time since the earliest
    node's first sample, so that a node that is slower, or waits longer for data, stands
    out; ``found`` (the findings across nodes) are marked. ``node_series`` holds each
    node's series, in the order of ``run.by_node()``, where the caller has them.
    """
    import numpy as np

    nodes = run.by_node()
    together = Run()
    for _, part in nodes:
        together.extend(part)
    begins = tuple(np.cumsum([0, *(len(part) for _, part in nodes[:-1])]).tolist())
    steps = np.array([np.nan if s is None else s for s in together.step], dtype=float)
    epoch = np.array([np.nan if t is None else t for t in together.time], dtype=float)
    by_step = x == "step" and all(any(s is not None for s in part.step) for _, part in nodes)
    if by_step:
        ax = Axis(steps, "step", 0, begins, steps=steps, epoch=epoch)
    else:
        seconds = epoch - np.nanmin(epoch) if (~np.isnan(epoch)).any() else epoch
        span = float(np.nanmax(seconds)) if (~np.isnan(seconds)).any() else 0.0
        scale, unit = (3600.0, "h") if span > 7200 else (60.0, "min") if span > 120 else (1.0, "s")
        ax = Axis(seconds / scale, f"elapsed time ({unit})", 0, begins, steps=steps, epoch=epoch)
    members = []
    made = [series(part) for _, part in nodes] if node_series is None else node_series
    for label in ("step.dataWaitPercent", "step.seconds"):  # series' order: by label
        for n, (node, _) in enumerate(nodes):
            for s in made[n]:
                if s.label == label and s.present:  # a gauge: its values as read
                    mine = np.full(len(together), np.nan)
                    mine[begins[n] : begins[n] + len(s.values)] = s.values
                    members.append(Series(TRAINING, f"{node_label(node)} {s.label}", s.unit, mine))
    if not members:
        return None
    titled = f"{name}, {ALL_NODES}" if name else ALL_NODES
    return figure_png(TRAINING, members, ax, titled, finding_marks(found, ax))


def node_label(node: Optional[int]) -> str:
    """How a node is named on the page: ``"node 3"`` (``"no node"`` where a sample says none)."""
    return "no node" if node is None else f"node {node}"


def node_figures(
    run: Run,
    name: str = "",
    x: str = "step",
    found: Optional[Mapping[Optional[int], Sequence[Any]]] = None,
    across: Sequence[Any] = (),
) -> dict[str, bytes]:
    """:func:`figures` of each node of ``run``, named by node (``"node {k}: {group}"``).

    Each figure's title names its node; a run of one node gets :func:`figures`' own.
    ``found`` holds each node's findings. Several nodes with step keys first get
    :func:`nodes_speed_png`, named ``"all nodes: Training"``, with the findings
    ``across`` nodes marked.
    """
    nodes = run.by_node()
    found = found or {}
    if len(nodes) == 1:
        return figures(run, None, name, x, found.get(nodes[0][0]))
    pngs = {}
    speed = nodes_speed_png(run, name, x, across)
    if speed is not None:
        pngs[f"{ALL_NODES}: {TRAINING}"] = speed
    for node, part in nodes:
        label = node_label(node)
        titled = f"{name}, {label}" if name else label
        drawn = figures(part, None, titled, x, found.get(node))
        pngs.update({f"{label}: {g}": png for g, png in drawn.items()})
    return pngs


def page_figures(page: Page, name: str = "") -> dict[str, bytes]:
    """The figures of the page's model: :func:`node_figures` without deriving anything again.

    Each node's figures from its series, axis and findings (the findings across nodes
    marked on every node's); several nodes with step keys first get
    :func:`nodes_speed_png` of the nodes' own series.
    """
    if page.single:
        mine = page.nodes[0]
        return _figures(mine.axis, mine.series, name, mine.findings)
    pngs = {}
    speed = nodes_speed_png(
        page.run, name, page.x, page.across, [mine.series for mine in page.nodes]
    )
    if speed is not None:
        pngs[f"{ALL_NODES}: {TRAINING}"] = speed
    for mine in page.nodes:
        label = node_label(mine.node)
        titled = f"{name}, {label}" if name else label
        drawn = _figures(mine.axis, mine.series, titled, [*page.across, *mine.findings])
        pngs.update({f"{label}: {g}": png for g, png in drawn.items()})
    return pngs
