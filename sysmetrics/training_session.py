"""The state of one training run of a framework callback (see :class:`TrainingSession`).

Not the run file's :class:`sysmetrics.runfile.Run`, which is a recording read back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sysmetrics import distributed
from sysmetrics.arrival import ArrivalTimer, RankBoard
from sysmetrics.hang import HangWatch
from sysmetrics.live_findings import LiveFindings
from sysmetrics.monitor import SystemMonitor
from sysmetrics.reader import Reader, Snapshot
from sysmetrics.sinks.jsonl import JsonlSink
from sysmetrics.steptime import TotalsSource


class TrainingSession:
    """One training run's state: made at train start, closed at train end.

    The callback's configuration lives on :class:`CallbackCore` for its whole life; what
    belongs to one ``fit``/``train`` call (the monitor sampling it, the readers, the run
    file, the watch on the training call, the cleanup) lives here, and :meth:`close`
    releases all of it at once. A closed run keeps its ``layout``: a rank whose monitor
    could not start still joins every gather of the run (sending nothing).
    """

    def __init__(self, layout: distributed.Layout, shared: SystemMonitor | None) -> None:
        self.layout = layout  # the run's ranks and nodes
        self.shared = shared  # a monitor the user owns: never stopped here
        self.monitor: SystemMonitor | None = None  # None where this process does not sample
        self.reader: Reader | None = None  # this run's reader of it
        self.extra: list[Reader] = []  # more readers of this run (Keras: the epochs')
        self.sink: JsonlSink | None = None  # the run file
        self.findings: LiveFindings | None = None  # told live, on the logging process
        self.step_timing: TotalsSource | None = None  # what this run set on the monitor
        self.hang: HangWatch | None = None  # the hang watch, on every rank
        self.arrival: ArrivalTimer | None = None  # this rank's arrival timing (DDP)
        self.board: RankBoard | None = None  # the node's ranks' slots, on its sampling rank
        self.cancel_watch: Callable[[], None] | None = None
        self.cleanup: Callable[[], None] | None = None
        self.whole: Reader | None = None  # a reader of the whole run, read at its end
        self.summary: Snapshot | None = None  # its window once the run ended
        self.found: list[Any] = []  # the findings of the last evaluation, at the end

    def end(self, failed: bool = False) -> None:
        """The watch, the cleanup, then :meth:`close`; idempotent.

        ``failed``: training raised (the run file's ``end`` line says ``"failed"``).
        """
        cancel, self.cancel_watch = self.cancel_watch, None
        cleanup, self.cleanup = self.cleanup, None
        if cancel is not None:
            cancel()
        try:
            if cleanup is not None:
                cleanup()
        finally:
            self.close(end={"status": "failed" if failed else "finished"})

    def close(self, end: Mapping[str, Any] | None = None) -> None:
        """Close the readers and run file, and stop the monitor the run started.

        ``end``: more fields for the run file's end line (``status``).
        """
        hang, self.hang = self.hang, None
        if hang is not None:
            hang.close()  # before the run file closes: its record is written
        arrival, self.arrival = self.arrival, None
        if arrival is not None:
            arrival.close()
        monitor, self.monitor = self.monitor, None
        readers = [self.reader, *self.extra]
        self.reader, self.extra = None, []
        sink, self.sink = self.sink, None
        timing, self.step_timing = self.step_timing, None
        if monitor is not None and monitor is self.shared:
            monitor.step = None  # its samples after training belong to no step
            if monitor.step_timing is timing:  # not set anew by someone else since
                monitor.step_timing = None
        elif monitor is not None:
            monitor.stop()  # its last sample, with the last step, reaches the run file
        findings, self.findings = self.findings, None
        if findings is not None:
            findings.close()  # the rules once more, over the whole run
            self.found = list(findings.found)
        whole, self.whole = self.whole, None
        if whole is not None:  # after the monitor's last sample
            self.summary = whole.snapshot()
            whole.close()
        for reader in readers:
            if reader is not None:
                reader.close()
        board, self.board = self.board, None
        if board is not None:  # after the monitor's last sample
            board.close()
        if sink is not None:
            sink.close(end=end)
