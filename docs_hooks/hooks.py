"""MkDocs hook: fills each ``<!-- generated: NAME -->`` marker from the code's declarations.

The tables come from :mod:`sysmetrics._docs` at build time (nothing generated is
committed, so nothing can drift); a marker naming no table fails the build.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's sysmetrics

from sysmetrics._docs import render


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The page's Markdown with its generated tables filled in."""
    return render(markdown)
