"""``make demo``: the README's first command, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parent.parent / "examples" / "lightning_demo.py"


@pytest.mark.long
def test_the_demo_prints_no_repeated_point() -> None:
    """Regression (issue 22): ``make demo``'s own printout showed one window twice (a
    logging point with no new sample logged the previous window again). Each printed row
    is a sample of its own: no two rows are the same, and the summary says how many of
    the logging steps have system metrics."""
    pytest.importorskip("lightning")
    done = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    header = next(i for i, line in enumerate(out) if line.split()[:2] == ["step", "system/cpu"])
    rows = [line.split()[1:] for line in out[header + 1 :] if line.split()[0].isdigit()]
    assert rows, done.stdout
    assert all(a != b for a, b in zip(rows, rows[1:])), done.stdout
    assert "logging steps have system metrics" in out[-1], done.stdout
