"""Remake every picture of the README and the docs from real runs (``make screenshots``).

Each picture comes from a run made now, with this checkout's code, so none can show
what an older version said:

- ``docs/report-page.jsonl``: a real ``sysmetrics record --interval 0.25`` of
  ``examples/plain_loop.py`` (the recording the pictures below show);
- ``docs/report-page.findings.txt``: the findings the page shows, one ``rule: sentence``
  line each (or the page's "No rule matched" sentence), as ``sysmetrics report --json``
  says them; ``tests/test_docs.py`` checks that it still equals what ``report --json``
  says of the stored recording, so a rule change that changes the page fails there until
  the pictures are remade;
- ``docs/report-page.png``: the ``sysmetrics report`` page of that recording, in headless
  Chromium (800 px wide, cut at ``MAX_HEIGHT`` px);
- ``docs/report-cpu.png``: the CPU figure of the same report (``report --png``);
- ``docs/tensorboard.png``: TensorBoard's time series of ``examples/lightning_demo.py``
  (the ``make demo`` training), in headless Chromium.
- ``docs/panel.png``: the live panel in JupyterLab itself (the ``test`` extra has it),
  served on 127.0.0.1 and driven in headless Chromium (:func:`jupyterlab_run`): the
  notebook runs ``%run examples/lightning_demo.py`` and the page is captured
  while it trains; ``tests/test_panel_jupyterlab.py`` runs the same driver;
- ``docs/top.png``: ``sysmetrics top`` in a real pseudo-terminal following the run file
  of a ``sysmetrics record`` of ``examples/plain_loop.py`` being written: the screen's
  last frame before the recording ended, shown as text in headless Chromium.

Chromium is the first of ``$CHROMIUM``, ``chromium``, ``chromium-browser``,
``google-chrome`` on PATH; without one the browser pictures are skipped with the reason
(exit 0) and the recording, its findings and the CPU figure are still made. The
TensorBoard picture needs the ``tensorboard`` package (the ``test`` extra) and is skipped
likewise without it. Nothing leaves the machine: TensorBoard listens on 127.0.0.1 and
Chromium runs with its network features off.

    python scripts/screenshots.py [--docs DIR] [--only report|tensorboard|panel|top]
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORD_INTERVAL = "0.25"  # s between samples of the recording
PAGE_WIDTH = 800  # px, the report page's picture
MAX_HEIGHT = 2000  # px: the page's top (findings, summary, the first figures)
TENSORBOARD_SIZE = (1600, 1060)  # px
TENSORBOARD_TAGS = "^(train_loss|system/cpu|system/proc.memory.pssMB|system/proc.cpu.threads)$"
COMMAND_TIMEOUT = 600  # s for one run or one browser
CALL_TIMEOUT = 60.0  # s the browser gets to answer one DevTools command
READY_TIMEOUT = 120.0  # s a page that draws after loading gets to draw
SETTLE = 2.0  # s after it says it is ready
BROWSER_FLAGS = [  # no network, no first-run work, no sandbox (root under CI)
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def findings_text(report_json: str) -> str:
    """The findings a report page shows, from ``sysmetrics report --json``'s document.

    One ``rule: sentence`` line per finding, in the page's order; where none, the page's
    own sentence for that (:data:`sysmetrics.findings.NO_MATCH`).
    """
    from sysmetrics.findings import NO_MATCH

    found = json.loads(report_json)["findings"]
    lines = [f"{f['rule']}: {f['sentence']}" for f in found] or [NO_MATCH]
    return "\n".join(lines) + "\n"


def report_json(run: Path) -> str:
    """``sysmetrics report RUN --json``'s output, run as a user would."""
    return _sysmetrics("report", str(run), "--json").stdout


def _env() -> dict[str, str]:
    """The environment of a run: the checkout's code first, this interpreter as ``python``."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    bin_dir = os.path.dirname(sys.executable)
    return {**os.environ, "PYTHONPATH": path, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}


def _sysmetrics(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = _env()
    done = subprocess.run(
        [sys.executable, "-m", "sysmetrics", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"sysmetrics {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def chromium() -> str | None:
    """The browser: ``$CHROMIUM``, else the first of the usual names on PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next((path for name in names if (path := shutil.which(name))), None)


def shoot(browser: str, url: str, size: tuple[int, int], out: Path) -> None:
    """A screenshot of ``url`` at ``size`` (px) into ``out``, once the page has loaded."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    if not out.exists():
        raise SystemExit(f"{browser} made no screenshot of {url}:\n{done.stderr[-3000:]}")


class _DevTools:
    """Chromium's DevTools protocol over ``--remote-debugging-pipe``.

    The pipe is fds 3 and 4 of the browser, with NUL-ended JSON messages, so a page that
    draws after loading (TensorBoard) can be waited for with the standard library alone.
    """

    def __init__(self, browser: str, size: tuple[int, int], profile: str) -> None:
        commands, self._to_browser = os.pipe()
        self._from_browser, replies = os.pipe()

        def fds() -> None:  # in the child, before exec: the pipe's fixed descriptors
            os.dup2(commands, 3)
            os.dup2(replies, 4)

        self.proc = subprocess.Popen(
            [
                browser,
                *BROWSER_FLAGS,
                "--enable-unsafe-swiftshader",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                f"--window-size={size[0]},{size[1]}",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands)
        os.close(replies)
        self._buffer = b""
        self._id = 0

    def call(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        """Send one command and return its result (events in between are skipped)."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                ready, _, _ = select.select([self._from_browser], [], [], CALL_TIMEOUT)
                if not ready:
                    raise SystemExit(f"the browser did not answer {method} within {CALL_TIMEOUT} s")
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise SystemExit(f"the browser ended during {method}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise SystemExit(f"{method}: {reply['error']}")
                return reply["result"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        os.close(self._to_browser)
        os.close(self._from_browser)


def shoot_when_ready(
    browser: str, url: str, size: tuple[int, int], out: Path, ready_js: str
) -> None:
    """A screenshot of ``url`` once ``ready_js`` is true in it (at most ``READY_TIMEOUT`` s)."""
    with tempfile.TemporaryDirectory() as profile:
        tools = _DevTools(browser, size, profile)
        try:
            target = tools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = tools.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            metrics = {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": False}
            tools.call("Emulation.setDeviceMetricsOverride", metrics, session)
            tools.call("Page.navigate", {"url": url}, session)
            deadline = time.monotonic() + READY_TIMEOUT
            evaluate = {"expression": ready_js, "returnByValue": True}
            while (
                tools.call("Runtime.evaluate", evaluate, session)["result"].get("value") is not True
            ):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{url} was not ready within {READY_TIMEOUT} s: {ready_js}")
                time.sleep(0.5)
            time.sleep(SETTLE)  # the last cards' drawing
            shot = tools.call("Page.captureScreenshot", {"format": "png"}, session)["data"]
            out.write_bytes(base64.b64decode(shot))
        finally:
            tools.close()


def crop(png: Path, out: Path, max_height: int) -> None:
    """``png`` without its blank bottom, at most ``max_height`` px tall, as 8-bit colour."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    width, height = image.size
    background = image.getpixel((width - 1, height - 1))
    bottom = height
    pixels = image.load()
    assert pixels is not None
    while bottom > 1 and all(pixels[x, bottom - 1] == background for x in range(0, width, 4)):
        bottom -= 1
    image = image.crop((0, 0, width, min(bottom + 16, height, max_height)))
    image.quantize(colors=256).save(out, optimize=True)


def report_pictures(docs: Path, browser: str | None, work: Path) -> None:
    """The recording, its findings text, the report page and its CPU figure."""
    run = work / "run.jsonl"
    # Run from the checkout as `python examples/plain_loop.py`: the page shows the command.
    _sysmetrics("record", "--interval", RECORD_INTERVAL, "--output", str(run), "--",
                "python", "examples/plain_loop.py")  # fmt: skip
    stored = docs / "report-page.jsonl"
    shutil.copyfile(run, stored)
    (docs / "report-page.findings.txt").write_text(findings_text(report_json(stored)))
    print(f"{stored}\n{docs / 'report-page.findings.txt'}")
    pngs = work / "figures"
    _sysmetrics("report", str(run), "-o", str(work / "report.html"), "--png", str(pngs))
    shutil.copyfile(pngs / "cpu.png", docs / "report-cpu.png")
    print(docs / "report-cpu.png")
    if browser is None:
        print("report-page.png: skipped, no Chromium (set CHROMIUM, or apt-get install chromium)")
        return
    shot = work / "page.png"
    shoot(browser, (work / "report.html").as_uri(), (PAGE_WIDTH, 4 * MAX_HEIGHT), shot)
    crop(shot, docs / "report-page.png", MAX_HEIGHT)
    print(docs / "report-page.png")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def tensorboard_picture(docs: Path, browser: str | None, work: Path) -> None:
    """TensorBoard's time series of the ``make demo`` training."""
    if browser is None:
        print("tensorboard.png: skipped, no Chromium (set CHROMIUM, or apt-get install chromium)")
        return
    if importlib.util.find_spec("tensorboard") is None:
        print("tensorboard.png: skipped, tensorboard is not installed (the test extra has it)")
        return
    out = work / "demo"
    env = _env()
    subprocess.run([sys.executable, str(ROOT / "examples" / "lightning_demo.py"), str(out)],
                   env=env, check=True, capture_output=True, timeout=COMMAND_TIMEOUT)  # fmt: skip
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(out / "tb"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/data/runs", timeout=5) as answer:
                    if json.loads(answer.read()):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("TensorBoard did not serve the demo's run within 120 s")
            time.sleep(0.5)
        url = f"{base}/?tagFilter={urllib.parse.quote(TENSORBOARD_TAGS)}#timeseries"
        shot = work / "tb.png"
        # The cards draw once their data has come: every card's table says "Smoothed".
        ready = "document.body.innerText.split('Smoothed').length > 4"
        shoot_when_ready(browser, url, TENSORBOARD_SIZE, shot, ready)
        crop(shot, docs / "tensorboard.png", TENSORBOARD_SIZE[1])
        print(docs / "tensorboard.png")
    finally:
        server.terminate()
        server.wait(timeout=10)


LAB_TIMEOUT = 300.0  # s for each wait of a JupyterLab run: the server, the page, the cell
LAB_POLL = 0.25  # s between two reads of the page while the notebook runs
# The panel's text in the page (its <pre>), in the notebook's outputs, in order.
_PANEL_TEXTS_JS = (
    "Array.from(document.querySelectorAll('.jp-OutputArea-output pre.sysmetrics-panel'))"
    ".map(e => e.innerText)"
)
# The notebook open in JupyterLab, its kernel connected and idle (window.jupyterapp:
# expose_app_in_browser).
_LAB_IDLE_JS = """(() => {
  const app = window.jupyterapp, w = app && app.shell.currentWidget;
  const ctx = w && w.sessionContext, kernel = ctx && ctx.session && ctx.session.kernel;
  return !!(kernel && kernel.connectionStatus === 'connected'
            && ctx.kernelDisplayStatus === 'idle' && w.content && w.content.widgets.length);
})()"""
# Every cell of the notebook has run (each has its execution count) and the kernel is idle.
_LAB_DONE_JS = """(() => {
  const w = window.jupyterapp.shell.currentWidget, ctx = w.sessionContext;
  return ctx.kernelDisplayStatus === 'idle' && w.content.widgets.every(
    c => c.model.type !== 'code' || c.model.executionCount !== null);
})()"""
# Where JupyterLab keeps its settings: no news, no update check, no popup on the picture.
_LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


class LabRun:
    """What a notebook run in JupyterLab in headless Chromium showed (:func:`jupyterlab_run`).

    Attributes:
        live: the panel's distinct texts seen in the page while the cells ran, in order
            (read every ``LAB_POLL`` s; the summary not among them).
        shot: the panel's text in the page when the screenshot was taken.
        final: the panel's text once every cell had run (the summary).
        saved: the notebook as JupyterLab saved it afterwards (nbformat JSON).
        most: the most panels the page showed at once (1: each redraw in place).

    """

    def __init__(self) -> None:
        self.most = 0
        self.live: list[str] = []
        self.shot = ""
        self.final = ""
        self.saved: dict[str, Any] = {}


def _lab_server(root: Path, work: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    """JupyterLab on 127.0.0.1 (a free port, ``token``), serving ``root``; its base URL."""
    port = _free_port()
    settings = work / "lab-settings"
    for name, values in _LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    env = {
        **_env(),  # the kernel, started by the server, imports this checkout's code
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(work / "lab-workspaces"),
        "JUPYTER_CONFIG_DIR": str(work / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(work / "jupyter-runtime"),
    }
    log = open(work / "jupyterlab.log", "wb")  # noqa: SIM115  # the server's, for errors
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--LabApp.news_url=None", "--LabApp.extension_manager=readonly", "--allow-root",
         "--ServerApp.terminals_enabled=False",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + LAB_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                return server, base
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            server.wait(timeout=30)
            tail = (work / "jupyterlab.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"JupyterLab did not start within {LAB_TIMEOUT} s:\n{tail}")
        time.sleep(0.5)


def jupyterlab_run(
    browser: str, cells: list[str], work: Path, out: Path, size: tuple[int, int], live: int = 2
) -> LabRun:
    """Run ``cells`` as a notebook in JupyterLab, in headless Chromium; screenshot the panel.

    JupyterLab is served on 127.0.0.1 (a free port, a random token, ``work`` as its root,
    settings and runtime folders of its own) with ``expose_app_in_browser``, so the page's
    ``window.jupyterapp`` runs JupyterLab's own ``notebook:run-all-cells`` command once
    the kernel is idle. While the cells run, the panel's text is read from the page every
    ``LAB_POLL`` s; once it has shown ``live`` distinct live texts, the page is captured
    into ``out`` (PNG, ``size`` px); then the run is waited for (its summary in the page,
    the kernel idle) and the notebook saved with ``docmanager:save``. Every wait is
    bounded by ``LAB_TIMEOUT`` s; the server and the browser are ended in every case.
    """
    import secrets

    import nbformat

    root = work / "lab"
    root.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / "panel.ipynb")
    token = secrets.token_hex(16)
    server, base = _lab_server(root, work, token)
    seen = LabRun()
    try:
        profile = tempfile.mkdtemp(prefix="lab-chromium-")
        try:
            tools = _DevTools(browser, size, profile)
            try:
                target = tools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
                attach = {"targetId": target, "flatten": True}
                session = tools.call("Target.attachToTarget", attach)["sessionId"]
                metrics = {"width": size[0], "height": size[1], "deviceScaleFactor": 1,
                           "mobile": False}  # fmt: skip
                tools.call("Emulation.setDeviceMetricsOverride", metrics, session)
                url = f"{base}/lab/tree/panel.ipynb?reset&token={token}"
                tools.call("Page.navigate", {"url": url}, session)

                def value(js: str, wait: bool = False) -> Any:
                    params = {"expression": js, "returnByValue": True, "awaitPromise": wait}
                    reply = tools.call("Runtime.evaluate", params, session)
                    if "exceptionDetails" in reply:
                        raise SystemExit(f"in JupyterLab's page: {reply['exceptionDetails']}")
                    return reply["result"].get("value")

                def until(what: str, done: Any) -> None:
                    deadline = time.monotonic() + LAB_TIMEOUT
                    while not done():
                        if time.monotonic() > deadline or server.poll() is not None:
                            raise SystemExit(f"JupyterLab: no {what} within {LAB_TIMEOUT} s")
                        time.sleep(LAB_POLL)

                until("notebook with an idle kernel", lambda: value(_LAB_IDLE_JS) is True)
                value("window.jupyterapp.shell.collapseLeft()")  # the notebook alone
                value("window.jupyterapp.commands.execute('notebook:run-all-cells')")

                def panel() -> str:
                    texts = value(_PANEL_TEXTS_JS) or []
                    seen.most = max(seen.most, len(texts))
                    text = str(texts[-1]) if texts else ""
                    drawn = " UTC" in text and "run ended" not in text  # not "waiting"
                    if drawn and text not in seen.live:
                        seen.live.append(text)
                    return text

                def redrawn() -> bool:
                    ended = "run ended" in panel() or value(_LAB_DONE_JS) is True
                    if ended and len(seen.live) < live:
                        raise SystemExit(f"the cells ran with {len(seen.live)} panel redraws")
                    return len(seen.live) >= live

                until(f"{live} panel redraws", redrawn)

                def captured() -> bool:  # a picture of one text: no redraw while taken
                    before = panel()
                    shot = tools.call("Page.captureScreenshot", {"format": "png"}, session)
                    seen.shot = panel()
                    out.write_bytes(base64.b64decode(shot["data"]))
                    return seen.shot == before

                until("screenshot between two redraws", captured)
                until("summary", lambda: "run ended" in panel())
                until("end of the cells", lambda: value(_LAB_DONE_JS) is True)
                seen.final = panel()
                value("window.jupyterapp.commands.execute('docmanager:save')", wait=True)
                seen.saved = json.loads((root / "panel.ipynb").read_text(encoding="utf-8"))
            finally:
                tools.close()
        finally:  # the browser may write into its profile as it is killed
            shutil.rmtree(profile, ignore_errors=True)
    finally:
        server.terminate()  # the server shuts its kernels down
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
    return seen


PANEL_WIDTH = 900  # px, the notebook panel's and the terminal's pictures
PANEL_SIZE = (PANEL_WIDTH, 620)  # px, JupyterLab's window for the panel's picture
PANEL_REDRAWS = 6  # live redraws before the picture: a few bars of the sparklines


def panel_picture(docs: Path, browser: str | None, work: Path) -> None:
    """The panel in JupyterLab while ``%run examples/lightning_demo.py`` trains."""
    if browser is None:
        print("panel.png: skipped, no Chromium (set CHROMIUM, or apt-get install chromium)")
        return
    if any(importlib.util.find_spec(m) is None for m in ("jupyterlab", "ipykernel", "nbformat")):
        print("panel.png: skipped, jupyterlab, ipykernel or nbformat missing (the test extra)")
        return
    # The checkout as the server's folder would show every file; the demo is run by path.
    (work / "lab").mkdir(exist_ok=True)  # jupyterlab_run's root: the notebook's folder
    demo = work / "lab" / "lightning_demo.py"
    shutil.copyfile(ROOT / "examples" / "lightning_demo.py", demo)
    # The frameworks' start-up warnings and notes off, as a notebook user would: the cell
    # shows the panel, not pages of them (both stay in the picture's cell, visible).
    cell = (
        "import logging, warnings\n"
        'warnings.filterwarnings("ignore")\n'
        "import lightning.pytorch\n"
        'logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)\n'
        f"%run {demo.name} demo-logs"
    )
    shot = work / "panel-full.png"
    run = jupyterlab_run(browser, [cell], work, shot, PANEL_SIZE, live=PANEL_REDRAWS)
    if "s/step " not in run.shot or "run ended" not in run.final:
        raise SystemExit(f"the demo's panel showed no step time or no summary: {run.shot!r}")
    crop(shot, docs / "panel.png", PANEL_SIZE[1])
    print(docs / "panel.png")


def _frames(screen: bytes) -> list[str]:
    """The frames Rich's live display drew on a terminal, as text, in order."""
    import re

    parts = re.split(rb"\r?(?:\x1b\[2K)?(?:\x1b\[1A\x1b\[2K)+", screen)
    ansi = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
    return [ansi.sub(b"", p).decode("utf-8", "replace").replace("\r", "") for p in parts]


def top_picture(docs: Path, browser: str | None, work: Path) -> None:
    """``sysmetrics top`` in a pseudo-terminal over a recording being written."""
    import html
    import pty

    if browser is None:
        print("top.png: skipped, no Chromium (set CHROMIUM, or apt-get install chromium)")
        return
    run = work / "top-run.jsonl"
    env = {**_env(), "COLUMNS": "110", "LINES": "30", "TERM": "xterm-256color"}
    record = subprocess.Popen(
        [sys.executable, "-m", "sysmetrics", "record", "--interval", RECORD_INTERVAL,
         "--output", str(run), "--", sys.executable, "examples/plain_loop.py"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    master, slave = pty.openpty()
    top = subprocess.Popen([sys.executable, "-m", "sysmetrics", "top", str(run)],
                           stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT)  # fmt: skip
    os.close(slave)
    screen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(master)
        top.wait(COMMAND_TIMEOUT)
        record.wait(COMMAND_TIMEOUT)
    frames = [f for f in _frames(screen) if "cpu " in f and "s/step" in f]
    live = [f for f in frames if "run ended" not in f]
    if not live:
        raise SystemExit(f"sysmetrics top drew no frame with step times:\n{screen[-2000:]!r}")
    page = work / "top.html"
    page.write_text(
        '<!doctype html><meta charset="utf-8"><body style="margin:0;background:#1e1e1e">'
        '<pre style="color:#ddd;font:15px/1.35 monospace;padding:14px;margin:0">$ sysmetrics top '
        f"run.jsonl\n{html.escape(live[-1].rstrip())}</pre></body>",
        encoding="utf-8",
    )
    shot = work / "top-full.png"
    shoot(browser, page.as_uri(), (PANEL_WIDTH, 400), shot)
    crop(shot, docs / "top.png", 400)
    print(docs / "top.png")


def main(argv: list[str] | None = None) -> int:
    """Make the pictures; 0 also where a browser picture was skipped (it says why)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the pictures go")
    parser.add_argument(
        "--only", choices=("report", "tensorboard", "panel", "top"), help="one picture set"
    )
    args = parser.parse_args(argv)
    browser = chromium()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.only in (None, "report"):
            report_pictures(args.docs, browser, work)
        if args.only in (None, "tensorboard"):
            tensorboard_picture(args.docs, browser, work)
        if args.only in (None, "panel"):
            panel_picture(args.docs, browser, work)
        if args.only in (None, "top"):
            top_picture(args.docs, browser, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
