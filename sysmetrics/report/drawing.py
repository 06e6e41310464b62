"""The report's figures: one PNG per group, a panel per unit, a line per series.

Long series are drawn as bins (mean and range), each recording on its own so no line
crosses a gap; everything is bounded (points, series, panels, figures, label length).
Needs matplotlib (the ``[report]`` extra).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from sysmetrics import _optional
from sysmetrics.descriptions import gpu_key
from sysmetrics.report.data import _PSS, _RSS, Axis, Series, axis, series
from sysmetrics.runfile import Run

if TYPE_CHECKING:
    import numpy as np

MAX_POINTS = 1500  # points drawn per series at most: longer runs are drawn as bins
MAX_SERIES = 8  # series drawn per panel at most (the rest are in the table)
MAX_PANELS = 8  # panels (one per unit) per figure at most
MAX_FIGURES = 24  # figures per report at most
MAX_LABEL_CHARS = 60  # characters of a key in a figure's legend at most
MAX_TITLE_CHARS = 100  # characters of a figure's title at most

# Panels in this order of units (utilization first), the others after; error-counter
# rates (count/s) are left to the table, with their totals.
_PANELS = ("%", "GiB", "MiB", "°C", "W", "MHz", "MiB/s", "0/1")
_NOT_DRAWN = ("count/s",)


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
            continue  # the job's memory is its PSS (see the package)
        if s.unit not in _NOT_DRAWN and (s.unit != "0/1" or s.group.startswith("GPU")):
            groups.setdefault(s.group, []).append(s)
    chosen = list(groups.items())[:MAX_FIGURES]
    return {g: figure_png(g, members, ax, name) for g, members in chosen}


def node_label(node: Optional[int]) -> str:
    """How a node is named on the page: ``"node 3"`` (``"no node"`` where a sample says none)."""
    return "no node" if node is None else f"node {node}"


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
