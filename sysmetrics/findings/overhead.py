"""The rule over the time between steps outside the batch fetch: ``framework-overhead``.

It reads ``step.overheadPercent`` (:mod:`sysmetrics.steptime`), which the callbacks
write where they time the training loop's fetch of each batch themselves: the rest of
the time between one batch's hooks and the next one's (other callbacks, the progress
bar, logging) is the framework's, not the loader's.
"""

from __future__ import annotations

from dataclasses import dataclass

from sysmetrics.descriptions import weight
from sysmetrics.findings._base import MIN_SAMPLES, Finding, Rule, threshold, view
from sysmetrics.findings.training import WAIT_KEY, _steps_words
from sysmetrics.runfile import Run
from sysmetrics.steptime import OVERHEAD_KEY
from sysmetrics.weights import sample_weights, weighted_mean

OVERHEAD_PERCENT = 25.0  # %: the steps' time between steps outside the fetch above this ...
OVERHEAD_SPAN_SHARE = 0.30  # ... over a stretch of at least this share of the steps' seconds


@dataclass(frozen=True)
class OverheadThresholds:
    """``framework-overhead``'s thresholds (defaults: the module's constants)."""

    overhead_percent: float = threshold(
        OVERHEAD_PERCENT,
        "OVERHEAD_PERCENT",
        "%",
        "the steps' time between steps outside the batch fetch above this ...",
    )
    span_share: float = threshold(
        OVERHEAD_SPAN_SHARE,
        "OVERHEAD_SPAN_SHARE",
        "share",
        "... over a stretch of at least this share of the steps' seconds",
    )


FRAMEWORK_OVERHEAD = OverheadThresholds()


def framework_overhead(run: Run, t: OverheadThresholds = FRAMEWORK_OVERHEAD) -> list[Finding]:
    """``framework-overhead``: much of the step time went between steps, not to the fetch."""
    over = run.columns.get(OVERHEAD_KEY)
    if over is None:
        return []
    weights = sample_weights(run, weight(OVERHEAD_KEY))
    keyed = [(j, v, w) for j, (v, w) in enumerate(zip(over, weights)) if v == v and w > 0]
    if len(keyed) < MIN_SAMPLES:
        return []
    above = [n for n, (_, v, _) in enumerate(keyed) if v > t.overhead_percent]
    if not above:
        return []
    stretch = keyed[above[0] : above[-1] + 1]
    share = sum(w for _, _, w in stretch) / sum(w for _, _, w in keyed)
    samples = [j for j, _, _ in stretch]
    overhead = weighted_mean(run, OVERHEAD_KEY, samples)
    if share < t.span_share or not overhead > t.overhead_percent:
        return []
    evidence = {"overhead_percent": overhead, "share": share, "samples": float(len(stretch))}
    fetch = ""
    if WAIT_KEY in run.columns:
        wait = weighted_mean(run, WAIT_KEY, samples)
        if wait == wait:
            evidence["wait_percent"] = wait
            fetch = f" (the batch fetch itself: {wait:.0f} %)"
    span = view(run).span(samples)
    return [
        Finding(
            "framework-overhead",
            f"{_steps_words(run, span)} spent {overhead:.0f} % of their time between steps "
            f"outside the batch fetch{fetch}: in other callbacks, the progress bar or "
            "logging, not the loader. Refresh the progress bar less often (in a notebook "
            "above all), log less often, or move slow work out of per-step callbacks.",
            evidence,
            span,
        )
    ]


FRAMEWORK_OVERHEAD_RULE = Rule(
    code="framework-overhead",
    summary="much of the step time went between steps outside the batch fetch: callbacks, "
    "the progress bar, logging",
    scope="node",
    live=True,
    thresholds=FRAMEWORK_OVERHEAD,
    check=framework_overhead,
    why="Time between steps that is not the loader's (a progress bar redrawing in a "
    "notebook, a slow callback, logging every step) idles the accelerator as a slow "
    "loader does, but more DataLoader workers will not help.",
    how="`step.overheadPercent` (written by the callbacks that time the loop's fetch "
    "themselves), each sample weighted by the seconds of the steps it closed, as "
    "`input-bound` weighs `step.dataWaitPercent`; over the stretch from the first to the "
    "last sample above `overhead_percent`, which holds at least `span_share` of the "
    "steps' seconds, the weighted mean is above `overhead_percent`. Says the fetch's own "
    "share beside it. A run without the key (a plain loop under `record`, a framework "
    "version whose fetch the callback cannot time) gets nothing from it",
)
