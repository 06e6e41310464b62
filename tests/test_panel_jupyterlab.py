"""The live panel in JupyterLab itself, in headless Chromium (issue 35).

JupyterLab is served on 127.0.0.1 (a free port, a random token, a temporary root) and a
notebook is run from its own page by JupyterLab's ``notebook:run-all-cells`` command;
the panel's text is read from the page's DOM while the cell runs, a screenshot is taken,
and the notebook JupyterLab saved afterwards is read back. The browser driving is
``scripts/screenshots.py``'s (:func:`jupyterlab_run`), the one ``make screenshots`` takes
``docs/panel.png`` with.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import debian

ROOT = Path(__file__).resolve().parent.parent

for _module in ("jupyterlab", "ipykernel", "nbformat"):
    pytest.importorskip(_module, reason=f"needs {_module} (the [test] extra)")


def _screenshots() -> Any:
    spec = importlib.util.spec_from_file_location(
        "screenshots", ROOT / "scripts" / "screenshots.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WATCHED_LOOP = (
    "import time, sysmetrics\n"
    "with sysmetrics.watch(interval=0.2) as monitor:\n"
    "    end = time.monotonic() + 8\n"
    "    step = 0\n"
    "    while time.monotonic() < end:\n"
    "        step += 1\n"
    "        monitor.step = step\n"
    "        sum(i * i for i in range(20000))\n"
    "        time.sleep(0.01)\n"
)


@pytest.mark.long
def test_the_panel_updates_in_place_in_jupyterlab(tmp_path: Path) -> None:
    chromium = debian.binary("chromium", "chromium", "chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; CI does)")
    shots = _screenshots()
    png = tmp_path / "panel.png"
    run = shots.jupyterlab_run(chromium, [WATCHED_LOOP], tmp_path, png, (900, 600), live=3)
    # In the page, while the cell ran: the panel redrawn in place (one panel, new values).
    assert len(run.live) >= 3, run.live
    assert run.most == 1  # never a second panel: each redraw replaced the one shown
    steps = [int(m.group(1)) for t in run.live if (m := re.search(r"step (\d+) ", t))]
    assert len(steps) == len(run.live) and steps == sorted(steps) and len(set(steps)) >= 3
    assert all("cpu " in t and "mem " in t and "host mem " in t for t in run.live), run.live
    # The screenshot is of the page as it showed a live panel.
    assert run.shot in run.live, run.shot
    from matplotlib.image import imread

    pixels = imread(png)[..., :3]
    assert pixels.shape[:2] == (600, 900)
    # The panel's live border (#2a7ae2, PanelView) is on the picture: the output was drawn.
    blue = (abs(pixels - (0x2A / 255, 0x7A / 255, 0xE2 / 255)) < 0.03).all(axis=-1)
    assert blue.sum() > 30
    # Once the cell ended, the summary in the panel's place, in the page and in the saved
    # notebook (what a reopened notebook shows).
    assert run.final.startswith("sysmetrics: run ended after "), run.final
    assert "cpu " in run.final and "no findings" in run.final
    outputs = run.saved["cells"][0]["outputs"]
    assert len(outputs) == 1, outputs
    kept = outputs[0]["data"]
    assert "sysmetrics-panel" in "".join(kept["text/html"])
    assert "".join(kept["text/plain"]).startswith("sysmetrics: run ended after ")
    assert not [t for t in threading.enumerate() if t.name.startswith("sysmetrics")]
