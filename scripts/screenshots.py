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
- ``docs/panel.png``: the live panel and the summary it leaves, as a real Jupyter kernel
  (nbclient + ipykernel: the test extra) sent them to the notebook while it ran
  ``%run examples/lightning_demo.py``: the kernel's HTML outputs, shown under the cell's
  code in a page of their own in headless Chromium (not JupyterLab's own window: the
  test extra has no notebook server);
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


PANEL_WIDTH = 900  # px, the notebook panel's and the terminal's pictures
_CELL_PAGE = """<!doctype html><meta charset="utf-8"><body style="margin:16px;font:14px sans-serif">
<pre style="background:#f5f5f5;border:1px solid #ddd;padding:8px;margin:0 0 8px">{code}</pre>
<div style="color:#666;margin:4px 0">while training:</div>{live}
<div style="color:#666;margin:12px 0 4px">when it has ended (what the notebook keeps):</div>
{final}</body>"""


def panel_picture(docs: Path, browser: str | None, work: Path) -> None:
    """The panel a real kernel drew while ``%run examples/lightning_demo.py`` trained."""
    if browser is None:
        print("panel.png: skipped, no Chromium (set CHROMIUM, or apt-get install chromium)")
        return
    if any(importlib.util.find_spec(m) is None for m in ("nbclient", "ipykernel", "nbformat")):
        print("panel.png: skipped, nbclient, ipykernel or nbformat missing (the test extra)")
        return
    import html

    import nbclient
    import nbformat

    code = f"%run {ROOT / 'examples' / 'lightning_demo.py'} {work / 'panel-demo'}"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    shown: list[str] = []

    class Client(nbclient.NotebookClient):  # type: ignore[misc]
        def process_message(self, msg: dict[str, Any], cell: Any, index: int) -> Any:
            html_out = msg.get("content", {}).get("data", {}).get("text/html", "")
            if "sysmetrics-panel" in html_out:
                shown.append(html_out)
            return super().process_message(msg, cell, index)

    saved = dict(os.environ)
    os.environ.update(_env())
    try:
        Client(nb, timeout=COMMAND_TIMEOUT, kernel_name="python3").execute(cwd=str(work))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    live = [h for h in shown if "run ended" not in h]
    if len(live) < 2 or "run ended" not in shown[-1]:
        raise SystemExit(f"the demo's panel was not drawn and updated: {shown[-3:]}")
    page = work / "panel.html"
    page.write_text(
        _CELL_PAGE.format(code=html.escape("%run examples/lightning_demo.py"), live=live[-1],
                          final=shown[-1]), encoding="utf-8")  # fmt: skip
    shot = work / "panel-full.png"
    shoot(browser, page.as_uri(), (PANEL_WIDTH, 700), shot)
    crop(shot, docs / "panel.png", 700)
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
