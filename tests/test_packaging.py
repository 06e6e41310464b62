"""The wheel ships every package of the source tree."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_in_the_wheel() -> None:
    """Regression: ``sysmetrics.host`` and ``sysmetrics.collectors.nvidia`` became packages
    but were not in pyproject's ``packages`` list, so a built wheel could not be imported
    (``ModuleNotFoundError: No module named 'sysmetrics.collectors.nvidia'``); an editable
    install hid it."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "sysmetrics").rglob("__init__.py")
    }
    found |= {"sysmetrics.integrations"} if (ROOT / "integrations/__init__.py").exists() else set()
    assert set(config["packages"]) == found
