"""A compact live panel of a run: in a notebook cell (``panel=``, ``watch()``), ``sysmetrics top``.

:class:`PanelState` keeps what the panel shows, fed one window (a monitor reader's
:class:`~sysmetrics.reader.Snapshot`) or one run-file sample at a time: each key's latest
value and when it was measured, the counters' rates between two readings, and the last
:data:`SPARK_SECONDS` of step time and data wait for the sparklines. :meth:`PanelState.lines`
draws it as a few lines of text; :meth:`PanelState.line` as one line (``sysmetrics top``
when its output is not a terminal, one row per node).

In a notebook, :class:`Panel` draws the state from a thread of its own
(``sysmetrics-panel``) reading a reader of the monitor at most once every
:data:`PANEL_EVERY` s, through IPython's ``display(..., display_id=True)`` and the
handle's ``update()``: the training thread never draws. When the run ends the same
display is replaced by a static summary (the whole run's means and peaks, and its
findings), which stays in the saved notebook. IPython is imported only inside a kernel
(:func:`in_kernel`).

The short keys the panel shows are the console's (:data:`sysmetrics.console_view.CONSOLE_KEYS`:
``cpu``, ``mem``, ``gpu``, ``gmem``, ``s/step``, ``wait``, their labels, keys and
decimals), with per GPU its memory in use out of its total and its power
(:data:`GPU_BYTES`, :data:`GPU_POWER`), the disk and network rates (:data:`RATES`), and
the cost ledger's line where an energy counter is read (:func:`sysmetrics.ledger.live_line`:
energy so far and per step, its money and gCO2e at the callback's prices, what was counted).
"""

from __future__ import annotations

import contextlib
import html
import importlib
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sysmetrics.console_view import CONSOLE_KEYS, ConsoleKey
from sysmetrics.descriptions import counter_rate, gpu_key
from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.ledger import Prices, live_line

PANEL_EVERY = 1.0  # s: the panel redraws at most this often
SPARK_SECONDS = 300.0  # s of step history the sparklines show
SPARK_WIDTH = 24  # characters of a sparkline
SPARK_CHARS = "▁▂▃▄▅▆▇█"
STALE_SECONDS = 5.0  # s: a value measured longer ago than this before the latest sample says so
MAX_FINDING = 160  # characters of the live panel's finding line
CLOSE_WAIT = 5.0  # s the end of a run waits for a redraw under way, at most
MAX_SUMMARY_FINDING = 600  # characters of a finding in the summary (wrapped)

_GiB = 2.0**30
_MiB = 2.0**20

RATES: tuple[tuple[str, str, float], ...] = (
    ("disk r", "disk.in", 1.0),  # a MiB counter
    ("w", "disk.out", 1.0),
    ("net in", "network.recv", _MiB),  # byte counters
    ("out", "network.sent", _MiB),
)
"""The counters shown as rates, in MiB/s: label, key, the key's units per MiB."""

_SHORT = {c.label: c for c in CONSOLE_KEYS}
# Per GPU ``gpu.{i}.<part>``: the console's ``gpu`` and ``gmem`` parts, and two more.
GPU_USE = _SHORT["gpu"].source  # %: of time a kernel ran
GPU_SHARE = _SHORT["gmem"].source  # %: of the GPU's memory in use
GPU_BYTES = "memoryAllocatedBytes"  # bytes in use; the total: bytes / GPU_SHARE %
GPU_POWER = "powerWatts"  # W
# The console keys whose history is drawn, and the top of their sparklines (None: the max).
_SPARKED: dict[str, float | None] = {"s/step": None, "wait": 100.0}


def _console(label: str) -> ConsoleKey:
    return _SHORT[label]


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (IPython is imported and has a kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:  # a kernel has imported it; never import it here
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def wanted(panel: bool | None, stacklevel: int = 3) -> bool:
    """Whether to show the panel: ``panel`` (None: :func:`in_kernel`).

    ``panel=True`` outside a Jupyter kernel shows nothing, with one
    :class:`~sysmetrics.SystemMetricsWarning` (a terminal has ``sysmetrics top``).
    """
    if panel is None:
        return in_kernel()
    if panel and not in_kernel():
        warnings.warn(
            "sysmetrics: panel=True, but this is not a Jupyter kernel: no live panel is shown "
            "(in a terminal, sysmetrics top shows it for a run file)",
            SystemMetricsWarning,
            stacklevel=stacklevel,
        )
        return False
    return panel


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH, top: float | None = None) -> str:
    """The last ``width`` of ``values`` as block characters, from 0 to ``top`` (None: their max).

    Bars are proportional to the values (a bar twice as high, a value about twice as
    large), so a flat line of small values stays low; negative values draw as 0.
    """
    values = list(values)[-width:]
    if not values:
        return ""
    high = max(values) if top is None else top
    last = len(SPARK_CHARS) - 1
    if high <= 0:
        return SPARK_CHARS[0] * len(values)
    return "".join(SPARK_CHARS[round(min(max(v, 0.0), high) / high * last)] for v in values)


class PanelState:
    """What a panel shows, fed one reading at a time (see the module).

    Args:
        title: the panel's first word (``sysmetrics``, a node's name).

    """

    def __init__(self, title: str = "sysmetrics", prices: Prices | None = None) -> None:
        self.title = title
        self.prices = prices or Prices()  # the cost line's (sysmetrics.ledger)
        self.values: dict[str, float] = {}  # each key's latest value
        self.measured: dict[str, float] = {}  # when, s since the epoch
        self.time: float | None = None  # the latest reading's time, s since the epoch
        self.step: int | None = None
        self.rates: dict[str, tuple[float, float]] = {}  # counter -> (rate per s, when)
        self.history: dict[str, deque[tuple[float, float]]] = {label: deque() for label in _SPARKED}
        self.finding: str | None = None  # the latest finding said, one line
        self.ended: str | None = None  # how the run ended (a run file's end line), if it did

    def add(
        self,
        values: Mapping[str, float],
        when: float,
        measured: Mapping[str, float] | None = None,
        step: int | None = None,
    ) -> None:
        """Fold in one reading taken at ``when``; ``measured``: when each value was, if older."""
        measured = measured or {}
        for key, value in values.items():
            if key.endswith(".max"):
                continue
            at = measured.get(key, when)
            before = self.measured.get(key)
            if before is not None and at <= before:
                continue  # the same measurement again (a window repeating it)
            if key in RATE_KEYS and key in self.values and before is not None:
                rate = counter_rate(self.values[key], value, at - before)
                if rate is not None:
                    self.rates[key] = (rate, at)
            self.values[key] = value
            self.measured[key] = at
        for label in _SPARKED:
            c = _console(label)
            seen = self.measured.get(c.source)
            history = self.history[label]
            if seen is not None and (not history or seen > history[-1][0]):
                history.append((seen, self.values[c.source]))
            while history and history[0][0] < when - SPARK_SECONDS:
                history.popleft()
        self.time = when if self.time is None else max(self.time, when)
        if step is not None:
            self.step = step

    def _age(self, key: str) -> str:
        """`` (12 s ago)`` where ``key`` was measured :data:`STALE_SECONDS`+ before the latest."""
        at = self.measured.get(key)
        if at is None or self.time is None or self.time - at <= STALE_SECONDS:
            return ""
        return f" ({self.time - at:.0f} s ago)"

    def _short(self, label: str) -> str | None:
        c = _console(label)
        if c.source not in self.values:
            return None
        value = self.values[c.source]
        return f"{label} {value:.{c.digits}f}{'' if label == 's/step' else '%'}"

    def gpus(self) -> list[str]:
        """The GPUs' indexes, in order."""
        found = {g.i for k in self.values if (g := gpu_key(k)) and not g.process}
        return sorted(found, key=lambda i: (len(i), i))

    def gpu_text(self, i: str) -> str:
        """GPU ``i``: utilisation, memory used / total, power."""
        v = self.values
        parts = [f"gpu{i}"]
        if f"gpu.{i}.{GPU_USE}" in v:
            parts.append(f"{v[f'gpu.{i}.{GPU_USE}']:3.0f}%")
        used = v.get(f"gpu.{i}.{GPU_BYTES}")
        share = v.get(f"gpu.{i}.{GPU_SHARE}")
        if used is not None:
            total = f"/{used * 100 / share / _GiB:.1f}" if share else ""
            parts.append(f"{used / _GiB:.1f}{total} GiB")
        elif share is not None:
            parts.append(f"mem {share:.0f}%")
        if f"gpu.{i}.{GPU_POWER}" in v:
            parts.append(f"{v[f'gpu.{i}.{GPU_POWER}']:.0f} W")
        return " ".join(parts)

    def job_text(self) -> str | None:
        """The job's CPU and memory (PSS: % of what is available to it, GiB), the host's memory."""
        v = self.values
        parts = []
        cpu = self._short("cpu")
        if cpu is not None:
            parts.append(cpu)
        mem = self._short("mem")
        if mem is not None:
            pss = v.get("proc.memory.pssMB")
            gib = f" ({pss / 1024:.1f} GiB PSS)" if pss is not None else ""
            parts.append(f"{mem}{gib}{self._age(_console('mem').source)}")
        if "memory" in v:
            parts.append(f"host mem {v['memory']:.0f}%")
        return "  ".join(parts) or None

    def io_text(self) -> str | None:
        """Disk and network rates since the previous reading of each counter."""
        parts = []
        for label, key, per in RATES:
            if key in self.rates:
                parts.append(f"{label} {self.rates[key][0] / per:.1f}")
        if not parts:
            return None
        text = " ".join(parts[:2])
        if len(parts) > 2:
            text += " MiB/s  " + " ".join(parts[2:])
        return text + " MiB/s"

    def step_text(self, spark: bool = True) -> str | None:
        """Step time and data wait, each with its sparkline of the last minutes."""
        parts = []
        for label in _SPARKED:
            short = self._short(label)
            if short is None:
                continue
            c = _console(label)
            line = short + self._age(c.source)
            if spark:
                line += " " + sparkline([x for _, x in self.history[label]], top=_SPARKED[label])
            parts.append(line)
        return "  ".join(parts) or None

    def cost_text(self) -> str | None:
        """The cost ledger's line (:func:`sysmetrics.ledger.live_line`), None without a counter.

        Energy so far and per step, its money and gCO2e at the prices, the parts counted.
        """
        return live_line(self.values, self.prices)

    def header(self) -> str:
        """The title, the step, and the latest reading's time (UTC)."""
        parts = [self.title]
        if self.step is not None:
            parts.append(f"step {self.step}")
        if self.time is not None:
            parts.append(time.strftime("%H:%M:%S UTC", time.gmtime(self.time)))
        if self.ended is not None:
            parts.append(f"run {self.ended}")
        return "  ".join(parts)

    def lines(self) -> list[str]:
        """The panel, a few lines of text."""
        out = [self.header()]
        out += [self.gpu_text(i) for i in self.gpus()]
        for text in (self.job_text(), self.io_text(), self.step_text(), self.cost_text()):
            if text:
                out.append(text)
        if self.finding:
            out.append(self.finding[:MAX_FINDING])
        return out

    def line(self) -> str:
        """The panel in one line (no sparklines)."""
        parts = [self.header()]
        for text in (self.step_text(spark=False), self.job_text()):
            if text:
                parts.append(text)
        parts += [self.gpu_text(i) for i in self.gpus()]
        io = self.io_text()
        if io:
            parts.append(io)
        return " | ".join(parts)


RATE_KEYS = frozenset(key for _, key, _ in RATES)


def summary_lines(
    whole: Mapping[str, float], found: Sequence[str], seconds: float | None
) -> list[str]:
    """The static summary left when a run ends: its means and peaks, and its findings."""
    head = "sysmetrics: run ended"
    if seconds is not None:
        head += f" after {seconds:.0f} s"
    out = [head + " (means over the run; memory: peaks)"]
    state = PanelState("whole run")
    # A memory gauge's peak (its ``.max`` companion) in place of its mean.
    peaks = {k[: -len(".max")]: v for k, v in whole.items() if k.endswith(".max")}
    state.values = {k: v for k, v in whole.items() if not k.endswith(".max")} | peaks
    out += [state.gpu_text(i) for i in state.gpus()]
    for text in (state.job_text(), state.step_text(spark=False)):
        if text:
            out.append(text)
    out += [f"finding: {s[:MAX_SUMMARY_FINDING]}" for s in found] or ["no findings"]
    return out


class PanelView:
    """What a display shows: the panel's lines, as HTML (``<pre>``) and as plain text."""

    def __init__(self, lines: Sequence[str], final: bool = False) -> None:
        self.lines = list(lines)
        self.final = final

    def __repr__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        style = (
            "font-family:monospace;line-height:1.3;margin:0;padding:4px 6px;white-space:pre-wrap;"
        )
        style += "border-left:3px solid " + ("#888" if self.final else "#2a7ae2")
        body = html.escape("\n".join(self.lines))
        return f'<pre class="sysmetrics-panel" style="{style}">{body}</pre>'


class Panel:
    """A live panel of ``monitor`` in the current Jupyter cell (see the module).

    Args:
        monitor: the monitor read (a reader of its own, closed by :meth:`close`).
        every: seconds between two redraws, at least (``max(every, monitor.interval)``).

    :meth:`start` shows the panel (on the calling thread, once) and starts the thread;
    :meth:`note` sets the finding's line (any thread); :meth:`close` stops the thread
    and replaces the panel by :func:`summary_lines`. Any error in drawing stops the panel
    with one :class:`~sysmetrics.SystemMetricsWarning`; the run goes on.

    """

    def __init__(
        self, monitor: Any, every: float = PANEL_EVERY, prices: Prices | None = None
    ) -> None:
        self.monitor = monitor
        self.every = max(every, float(monitor.interval))
        self.state = PanelState(prices=prices)
        self._reader = monitor.reader()
        self._stop = threading.Event()
        self._handle: Any = None
        self._thread = threading.Thread(target=self._loop, name="sysmetrics-panel", daemon=True)
        self._failed = False
        self._started = time.time()
        self.updates = 0  # redraws so far

    def start(self) -> Panel:
        """Show the panel and start redrawing it; returns self."""
        try:
            # Only inside a kernel, which has imported IPython: never a dependency.
            display = importlib.import_module("IPython.display").display
            self._handle = display(
                PanelView([self.state.header(), "waiting for a sample"]), display_id=True
            )
            self._thread.start()
        except Exception as exc:
            self._fail(exc)
        return self

    def note(self, line: str) -> None:
        """Show ``line`` (a finding said live) as the panel's last line."""
        self.state.finding = line.strip()[:MAX_FINDING]

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        self._reader.close()
        warnings.warn(
            f"sysmetrics: the live panel failed and is off for this run: "
            f"{type(exc).__name__}: {str(exc)[:200]}",
            SystemMetricsWarning,
            stacklevel=2,
        )

    def _read(self) -> None:
        snap = self._reader.snapshot()
        if snap:
            self.state.add(snap, snap.time, snap.measured, self.monitor.step)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self._read()
                self._handle.update(PanelView(self.state.lines()))
                self.updates += 1
            except Exception as exc:
                self._fail(exc)
                return

    def close(self, whole: Mapping[str, float] | None = None, found: Sequence[str] = ()) -> None:
        """Stop redrawing; leave the summary of ``whole`` (a whole-run window) and ``found``."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(CLOSE_WAIT)  # a display that hangs never holds up the run's end
        self._reader.close()
        if self._failed or self._handle is None or self._thread.is_alive():
            return
        try:
            lines = summary_lines(whole or {}, found, time.time() - self._started)
            self._handle.update(PanelView(lines, final=True))
        except Exception as exc:
            self._fail(exc)


@contextlib.contextmanager
def watch(
    monitor: Any = None, panel: bool | None = None, findings: bool = True, **options: Any
) -> Iterator[Any]:
    """Watch a block (any training loop): a live panel in a notebook cell while it runs.

    ``with sysmetrics.watch() as monitor: ...``: starts a
    :class:`~sysmetrics.SystemMonitor` (``options`` are its keywords), or reads
    ``monitor`` (started here if it is not running, never stopped here); inside a Jupyter
    kernel it shows the panel in the cell and redraws it about once a second; when the
    block ends it leaves a summary of the block (its means and peaks, its findings).

    Args:
        monitor: a monitor of yours to read (excludes ``options``).
        panel: show the panel: None (default) inside a Jupyter kernel only; False never;
            True: in a kernel, and outside one a warning (no panel).
        findings: tell the findings live in the panel's last line.
        **options: :class:`~sysmetrics.SystemMonitor`'s keywords, for its own monitor.

    Yields:
        the monitor (``monitor.step = n`` stamps the step; ``monitor.snapshot()``).

    """
    from sysmetrics.monitor import SystemMonitor

    if monitor is not None and options:
        raise TypeError("watch() got monitor= and SystemMonitor options; configure your monitor")
    own = monitor is None
    mon = SystemMonitor(**options) if own else monitor
    if not mon.stopped:
        mon.start()
    whole = mon.reader()
    shown: Panel | None = None
    live = None
    if wanted(panel):
        shown = Panel(mon).start()
        if findings:
            from sysmetrics.live_findings import LiveFindings

            live = LiveFindings(mon, shown.note).start()
    try:
        yield mon
    finally:
        if own:
            mon.stop()
        found: list[str] = []
        if live is not None:
            live.close()
            found = [f.sentence for f in live.found]
        summary = whole.snapshot()
        whole.close()
        if shown is not None:
            shown.close(summary, found)


def note_say(panel: Panel | None, say: Callable[[str], None]) -> Callable[[str], None]:
    """``say``, also shown on ``panel``'s finding line (where there is a panel)."""
    if panel is None:
        return say

    def both(line: str) -> None:
        panel.note(line)
        say(line)

    return both
