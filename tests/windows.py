"""Checks that logged system points are fresh windows: no point repeats the previous one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sysmetrics.collectors.process import ProcessCollector


def run_file_steps(path: Path) -> list[int | None]:
    """The training step of each sample a run file holds (one line per sample)."""
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [x["step"] for x in lines if "metrics" in x]


def assert_fresh_points(
    points: Sequence[tuple[int, Mapping[str, Any]]], samples: Sequence[int | None]
) -> None:
    """Each logged point ``(step, {system key: value})`` had a sample of its own.

    ``samples`` are the steps the run file stamped on every sample the monitor took. At
    most one point per sample; two consecutive points at steps ``p < q`` have a sample
    stamped between them (``p <= step <= q``: a sample taken after point ``p`` is stamped
    ``p`` or later), and never the same values.
    """
    assert points, "no system point was logged"
    assert len(points) <= len(samples), (len(points), len(samples))
    stamped = [s for s in samples if s is not None]
    for (p, before), (q, after) in zip(points, points[1:]):
        assert any(p <= s <= q for s in stamped), f"no sample between the points at {p} and {q}"
        assert dict(before) != dict(after), f"the point at {q} repeats the one at {p}"


HALF_TICK = ProcessCollector.min_cpu_window_s  # s: a shorter window has no cpu


def assert_cpu_where_measurable(samples: Sequence[Mapping[str, Any]]) -> None:
    """Every run-file sample has ``cpu`` but those whose window is under half a clock tick.

    ``cpu`` is left out of a window shorter than half a tick, where it would read 0 or
    far over the truth: the last sample, taken as the monitor stops, and, on a loaded
    machine, a sample whose tick came late (the next one, on time, then follows within a
    few ms). The collector times its window between its own counter reads, which a
    busy training thread (the GIL) can hold several ms from the sample's stamp, hence
    the 10 ms allowance. Any other sample without ``cpu`` fails.
    """
    assert samples, "no sample in the run file"
    for before, x in zip(samples, samples[1:]):
        window = x["monotonic"] - before["monotonic"]
        assert "cpu" in x["metrics"] or window < HALF_TICK + 0.010, (window, x)
    assert "cpu" in samples[0]["metrics"] or len(samples) == 1, samples[0]
