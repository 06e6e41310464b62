"""``sysmetrics top RUN...``: the live panel in a terminal, following run files being written.

Each run file is followed by a :class:`Follower`: it reads what was appended since its
previous read, at most :data:`READ_BYTES` a read (a file larger than :data:`TAIL_BYTES`
when first opened is read from its last :data:`TAIL_BYTES`), keeps a last line with no
newline yet until the rest comes (at most ``runfile.MAX_LINE_BYTES``; a longer one is
skipped), and folds each sample into a :class:`~sysmetrics.panel.PanelState`. A file not
there yet is waited for.

One file: the panel (:meth:`PanelState.lines`). Several (one per node): one row per node
(:meth:`PanelState.line`), and every :data:`FINDINGS_EVERY` s the rules run over each
node's last :data:`KEEP_SAMPLES` samples; a node the ``straggler-node`` finding names is
marked ``straggler``. On a terminal the view is Rich's live display (the ``[top]`` extra);
otherwise (output piped) it prints one line per file each interval. It ends when every
file has its ``end`` line (the recording finished), or on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, TextIO

from sysmetrics import runfile
from sysmetrics._optional import install
from sysmetrics.panel import STALE_SECONDS, PanelState

READ_BYTES = 1 << 20  # bytes read from a file at most per interval
TAIL_BYTES = 4 << 20  # a file larger than this when first opened is read from its last bytes
KEEP_SAMPLES = 3600  # samples of each node kept for the findings (an hour at 1 s)
FINDINGS_EVERY = 10.0  # s between two evaluations of the findings (several files)


class Follower:
    """One run file being written, followed: its latest values in :attr:`state`."""

    def __init__(self, path: str, title: str) -> None:
        self.path = path
        self.state = PanelState(title)
        self.node: int | None = None
        # (time, monotonic, step, metrics, steps): what runfile.Run.add takes
        self.samples: deque[
            tuple[float, float | None, int | None, dict[str, float], int | None]
        ] = deque(maxlen=KEEP_SAMPLES)
        self._file: Any = None
        self._partial = b""
        self._skipping = False  # inside a line over MAX_LINE_BYTES
        self.grew = 0.0  # when the file last grew (time.time())

    def poll(self) -> None:
        """Read what was appended since the previous poll (at most :data:`READ_BYTES`)."""
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 (kept open while followed)
            except FileNotFoundError:
                return  # not written yet
            size = os.fstat(self._file.fileno()).st_size
            if size > TAIL_BYTES:
                self._line(self._file.readline(runfile.MAX_LINE_BYTES + 1))  # the run line
                self._file.seek(size - TAIL_BYTES)
                self._skipping = True  # the rest of a line cut in two
        data = self._file.read(READ_BYTES)
        if not data:
            return
        self.grew = time.time()
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # no newline yet: wait for the rest
        for raw in lines:
            if self._skipping:
                self._skipping = False
                continue
            self._line(raw)
        if len(self._partial) > runfile.MAX_LINE_BYTES:
            self._partial = b""
            self._skipping = True

    def _line(self, raw: bytes) -> None:
        if len(raw) > runfile.MAX_LINE_BYTES:
            return
        try:
            record = json.loads(raw)
        except ValueError:
            return
        if not isinstance(record, dict):
            return
        if isinstance(record.get("run"), dict):
            node = record["run"].get("node")
            self.node = node if isinstance(node, int) and not isinstance(node, bool) else None
            self.state.ended = None
        elif isinstance(record.get("end"), dict):
            end = record["end"]
            status, code = end.get("status"), end.get("exit_status")
            ended = str(status)[:20] if status else "ended"
            if isinstance(code, int) and not isinstance(code, bool):
                ended += f", exit {code}"  # sysmetrics record: the command's exit status
            self.state.ended = ended
        elif isinstance(record.get("metrics"), dict):
            when = record.get("time")
            if not isinstance(when, (int, float)) or isinstance(when, bool):
                return
            metrics = {
                k: float(v)
                for k, v in record["metrics"].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v - v == 0
            }
            step = record.get("step")
            step = step if isinstance(step, int) and not isinstance(step, bool) else None
            self.state.add(metrics, float(when), None, step)
            mono = record.get("monotonic")
            closed = record.get("steps")  # what the sample's step keys stand for
            closed = closed if isinstance(closed, int) and not isinstance(closed, bool) else None
            self.samples.append(
                (float(when), mono if isinstance(mono, (int, float)) else None, step, metrics,
                 closed)
            )  # fmt: skip

    def waiting(self, now: float) -> str | None:
        """Why the panel shows nothing new: no file yet, no sample yet, none for a while."""
        if self._file is None:
            return f"{self.path}: waiting for the file"
        if self.state.time is None:
            return f"{self.path}: waiting for a sample"
        if self.state.ended is None and now - self.state.time > STALE_SECONDS:
            return f"no new sample for {now - self.state.time:.0f} s"
        return None

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def stragglers(followers: Sequence[Follower]) -> dict[int, str]:
    """Each node the ``straggler-node`` finding names, over their latest samples: its facet."""
    from sysmetrics import findings

    run = runfile.Run()
    for k, f in enumerate(followers):
        for when, mono, step, metrics, closed in f.samples:
            run.add(metrics, when, mono, step, node=k, steps=closed)
    out: dict[int, str] = {}
    for found in findings.findings(run):
        subject = found.subject
        if found.rule == "straggler-node" and subject is not None and subject.id.isdigit():
            out[int(subject.id)] = subject.facet or "steps"
    return out


def _rich() -> Any:
    """Rich's ``console`` and ``live`` modules; ImportError naming the extra where missing."""
    try:
        return importlib.import_module("rich.live"), importlib.import_module("rich.table")
    except ImportError as exc:
        raise ImportError(f"sysmetrics top needs rich on a terminal: {install('top')}") from exc


def _rows(followers: Sequence[Follower], marked: dict[int, str], now: float) -> list[str]:
    rows = []
    for k, f in enumerate(followers):
        line = f.state.line()
        wait = f.waiting(now)
        if wait:
            line += f" | {wait}"
        if k in marked:
            line = f"STRAGGLER ({marked[k]}) " + line
        rows.append(line)
    return rows


def _screen(followers: Sequence[Follower], marked: dict[int, str], now: float, table: Any) -> Any:
    """What the terminal shows: one file's panel, or a table of one row per node."""
    if len(followers) == 1:
        f = followers[0]
        lines = f.state.lines()
        wait = f.waiting(now)
        if wait:
            lines.append(wait)
        grid = table.Table.grid()
        grid.add_column()
        for line in lines:
            grid.add_row(line)
        return grid
    t = table.Table(title="sysmetrics top", expand=True)
    t.add_column("node", no_wrap=True)
    t.add_column("latest")
    for k, f in enumerate(followers):
        node = f.state.title + (f" [bold red]straggler ({marked[k]})[/]" if k in marked else "")
        row = f.state.line()[len(f.state.title) :].strip(" |") or "-"
        t.add_row(node, row + (f" | {w}" if (w := f.waiting(now)) else ""))
    return t


def top(paths: Sequence[str], interval: float = 1.0, out: TextIO | None = None) -> int:
    """Follow ``paths`` until each has its end line (or Ctrl-C); 0."""
    stream = out if out is not None else sys.stdout
    several = len(paths) > 1
    followers = [Follower(p, f"node {k}" if several else "sysmetrics") for k, p in enumerate(paths)]
    terminal = stream.isatty()
    live_mod = table = None
    if terminal:
        live_mod, table = _rich()
    marked: dict[int, str] = {}
    next_findings = time.monotonic() + FINDINGS_EVERY
    live = None
    try:
        if live_mod is not None:
            console = importlib.import_module("rich.console").Console(file=stream)
            live = live_mod.Live(console=console, auto_refresh=False, transient=False)
            live.start()
        while True:
            for f in followers:
                f.poll()
            now = time.time()
            if several and time.monotonic() >= next_findings:
                marked = stragglers(followers)
                next_findings = time.monotonic() + FINDINGS_EVERY
            if live is not None:
                live.update(_screen(followers, marked, now, table), refresh=True)
            else:
                for row in _rows(followers, marked, now):
                    print(row, file=stream, flush=True)
            if all(f.state.ended is not None for f in followers):
                return 0
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
    finally:
        if live is not None:
            live.stop()
        for f in followers:
            f.close()


def add_parser(subs: Any) -> argparse.ArgumentParser:
    """Add ``top`` to the command line's subcommands; return its parser."""
    parser: argparse.ArgumentParser = subs.add_parser(
        "top",
        help="watch run files being written, live in the terminal",
        description="Show the live panel (GPUs, the job's CPU and memory, disk and network "
        "rates, step time) of a run file being written (by record or a callback), or of "
        "several nodes' run files, one row per node with the straggler marked. On a "
        "terminal it redraws in place (needs the [top] extra: rich); piped, it prints one "
        "line per file each interval. It ends when every file's recording has ended.",
    )
    parser.add_argument("run", nargs="+", help="the run file(s); several: one per node")
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between two redraws (default: %(default)s)",
    )
    return parser


def top_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``sysmetrics top``: check the arguments, then :func:`top`."""
    if not 0.05 <= args.interval <= 3600:
        parser.error(f"--interval must be between 0.05 and 3600 s, not {args.interval:g}")
    if len(set(args.run)) != len(args.run):
        parser.error("a run file is given twice")
    try:
        return top(args.run, args.interval)
    except ImportError as exc:
        parser.exit(2, f"sysmetrics top: {exc}\n")
