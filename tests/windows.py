"""Checks that logged system points are fresh windows: no point repeats the previous one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


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
