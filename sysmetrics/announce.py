"""Findings told live: the rules of :mod:`sysmetrics.findings` run during training.

:class:`LiveFindings` keeps a buffering reader of a monitor, folds its samples into a
:class:`~sysmetrics.runfile.Run` on a daemon thread of its own, runs
:func:`sysmetrics.findings.findings` over it every ``LIVE_EVERY`` s (no sooner than
``LIVE_FIRST`` s after it started, and never more often than ``LIVE_COST_RATIO`` times
the previous evaluation's cost, so it takes at most about 2 % of one core on the longest
runs) and once more when closed, and says each finding once per run, in one line
(``sysmetrics: `` and the finding's sentence), through the ``say`` it is given: the
framework's own logging in the callbacks, standard error under ``sysmetrics record``.

A finding is said once: a later finding of the same rule whose sentence differs only in
its numbers (a longer span, a higher share) is the same finding. The run kept is the
latest ``LIVE_MAX_SAMPLES`` samples at most (older ones are dropped half at a time), so a
day-long run costs a few megabytes. Any error in the rules or in ``say`` stops the
announcing with one :class:`~sysmetrics.SystemMetricsWarning`; training never sees it.
"""

from __future__ import annotations

import re
import threading
import time
import warnings
from collections.abc import Callable
from typing import Optional

from sysmetrics.errors import SystemMetricsWarning
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Sample
from sysmetrics.runfile import Recording, Run
from sysmetrics.sinks.jsonl import available_cpus

LIVE_EVERY = 30.0  # s between two evaluations of the rules
LIVE_FIRST = 20.0  # s after the start before the first one
LIVE_COST_RATIO = 50.0  # the next evaluation waits at least this many times the last's cost
LIVE_MAX_SAMPLES = 20_000  # samples kept (the latest); beyond it the oldest half goes
LIVE_BUFFER = 4096  # samples the reader buffers between two drains
CLOSE_WAIT = 2.0  # s close() waits for the last evaluation
MAX_LINE = 400  # characters of one announced line at most

PREFIX = "sysmetrics: "
EVENTS = ("stall",)  # rules whose findings are events: each start is another finding
# A number that is not a name's (GPU 1, node 2, gpu.3, node0): what changes as a run goes on.
_NUMBERS = re.compile(r"(?<![0-9.,:])(?<!gpu )(?<!node )(?<!gpu\.)(?<!node)[0-9][0-9.,:]*")
_UNIT = re.compile(r"#\s*(?:ms|s|min|h|%)(?![a-z])")
_RANGE = re.compile(r"#\s*[\u2013-]\s*#")  # an en dash or a hyphen
_PLURAL = re.compile(r"\b([a-z]+?)s\b")


def identity(rule: str, sentence: str, at: Optional[float] = None) -> str:
    """What makes a finding the same finding later in the run: its rule, its words.

    Its numbers (a span, a share) may change; the names of what it is about may not:
    ``GPU 1`` and ``node 2`` are other findings than ``GPU 0`` and ``node 1``; nor
    where an event began (``at``: a stall's first step), so a second stall is told too.
    """
    words = _NUMBERS.sub("#", sentence.lower())
    words = _UNIT.sub("#", words)  # 800 ms, later 1.2 s: one measure
    words = _RANGE.sub("#", words)  # step 5, later steps 5-9
    where = "" if at is None else f"@{at:g}"
    return rule + where + "|" + _PLURAL.sub(r"\1", words)


class LiveFindings:
    """Says each finding once during a run (see the module).

    Args:
        monitor: the monitor whose samples the rules read (a reader of its own).
        say: called with each line, on this object's thread (or in :meth:`close`).
        every: seconds between two evaluations (None: ``LIVE_EVERY``, read then).
        first: seconds before the first evaluation (None: ``LIVE_FIRST``, read then).

    """

    def __init__(
        self,
        monitor: SystemMonitor,
        say: Callable[[str], None],
        every: Optional[float] = None,
        first: Optional[float] = None,
    ) -> None:
        self._say = say
        self._every = LIVE_EVERY if every is None else every
        # The run line's fields the rules read, as the monitor's run file would have them.
        self._header = {
            "pid": monitor.pid,
            "interval": monitor.interval,
            "cpus": available_cpus(monitor),
        }
        self._reader = monitor.reader(buffer=LIVE_BUFFER)
        self._run = self._new_run([])
        self._kept: list[Sample] = []
        self._said: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one evaluation at a time (the thread, close())
        self._failed = False
        self._next = time.monotonic() + (LIVE_FIRST if first is None else first)
        self._thread = threading.Thread(target=self._loop, name="sysmetrics-findings", daemon=True)

    @property
    def said(self) -> list[str]:
        """The findings said so far (their identities); for tests."""
        return sorted(self._said)

    def start(self) -> LiveFindings:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Evaluate a last time (what the whole run showed) and stop; idempotent, bounded."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._reader.close()  # wakes the thread; what it buffered stays to be taken
        if self._thread.ident is not None:
            self._thread.join(CLOSE_WAIT)
        if not self._thread.is_alive():
            self._take()
            self._evaluate()

    # -- the thread ------------------------------------------------------------------

    def _new_run(self, samples: list[Sample]) -> Run:
        run = Run()
        run.recordings.append(Recording(dict(self._header)))
        for s in samples:
            run.add(s.values, s.time, s.monotonic, s.step, recording=0)
        return run

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._reader.wait(1.0)
            self._take()
            if time.monotonic() >= self._next:
                began = time.monotonic()
                self._evaluate()
                cost = time.monotonic() - began
                self._next = time.monotonic() + max(self._every, LIVE_COST_RATIO * cost)

    def _take(self) -> None:
        samples = self._reader.samples()
        if not samples:
            return
        with self._lock:
            kept = self._kept
            kept.extend(samples)
            if len(kept) > LIVE_MAX_SAMPLES:
                del kept[: len(kept) - LIVE_MAX_SAMPLES // 2]
                self._run = self._new_run(kept)
            else:
                for s in samples:
                    self._run.add(s.values, s.time, s.monotonic, s.step, recording=0)

    def _evaluate(self) -> None:
        """Run the rules and say what is new; stop announcing at the first error."""
        from sysmetrics import findings  # the answers layer; the engine never imports it

        if self._failed:
            return
        with self._lock:
            try:
                found = findings.findings(self._run)
                for f in found:
                    at = f.span.first if f.rule in EVENTS and f.span is not None else None
                    key = identity(f.rule, f.sentence, at)
                    if key in self._said:
                        continue
                    self._said.add(key)
                    self._say(PREFIX + f.sentence[: MAX_LINE - len(PREFIX)])
            except Exception as exc:
                self._failed = True
                warnings.warn(
                    "sysmetrics: the live findings failed and are off for this run: "
                    f"{type(exc).__name__}: {str(exc)[:200]}",
                    SystemMetricsWarning,
                    stacklevel=1,
                )
