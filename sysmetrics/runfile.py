"""The run file: its line format (the schema), the lines a writer makes, and the reader.

A run file is UTF-8 JSON, one object per line, appended to by
:class:`~sysmetrics.sinks.jsonl.JsonlSink` (``sysmetrics record`` and the callbacks'
``run_file=``). Each recording in it is::

    {"run": {"command": [...] or null, "host": str, "node": int, "pid": int,
             "start": s since the epoch, "interval": s, "cpus": number or null,
             "version": str}}
    {"time": s since the epoch, "monotonic": s, "step": int or null,
     "metrics": {key: value}, "steps": int, "node": int}   one line per sample
    ...
    {"end": {"seconds": s, "node": int, "samples": int, "dropped": int,
             "exit_status": int | "signal": int, "signal_name": str | "status": str}}

and, between the samples, a ``stall`` record for each stall of the training step that
the hang watch found (:mod:`sysmetrics.hang`)::

    {"stall": {"time": s since the epoch, "seconds": s, "step": int or null,
               "kind": str, "where": str, "stack": [str, ...], "said": str,
               "ranks": str, "node": int}}

- ``run`` is the first line of a recording: ``command`` is the command ``record`` ran
  (a list of arguments; null for a callback), ``host`` the machine's name, ``node`` the
  node rank (0 on one node), ``pid`` the process whose tree is watched (the command
  under ``record``, the training process under a callback), ``start`` when the
  recording started, ``interval`` the seconds between samples, ``cpus`` the CPUs
  available to the job when it started (the ``cpu`` key's 100 %: the union of its
  affinity, capped by its cgroup CPU quota; null where the job's CPU is not watched;
  absent in files written before it existed), ``version`` the sysmetrics version that
  wrote it.
- A sample line has ``steps`` only where its ``step.*`` keys closed training steps: how
  many, by the step clock (since the previous sample that closed any), what the sample's
  step keys weigh in a mean (:mod:`sysmetrics.weights`; the growth of ``step`` between
  samples, by which files written before the field are weighed, is off by one where a
  sample fell between two steps). It has ``node`` only where the run spans several
  nodes (several nodes may append to one file on a shared filesystem: their samples are
  told apart by it).
- ``end`` is the last line of a recording that ended in order: ``seconds`` from its
  start, ``node``, ``samples`` written and ``dropped`` (lost to a writer that fell
  behind); under ``record`` the command's ``exit_status``, or the ``signal`` (number)
  and ``signal_name`` that killed it; under a callback ``status``: ``"finished"`` or
  ``"failed"`` (training raised). A recording with no end line ended without one: the
  process was killed (SIGKILL, out of memory) or crashed.

A line that does not parse but holds a record start (``{"run":``, ``{"end":`` or
``{"time":``) after its first byte is half a line (a full disk, a kill) glued to the next
writer's line: it is read from the first such start that parses, so two recordings are
never merged (writers start at a line boundary, see :class:`~sysmetrics.sinks.jsonl.JsonlSink`).

Readers skip lines they do not know, so a file with markers reads in older readers, and
:func:`read_run` reads files written before the markers existed (samples only: their
recordings are then told apart by the clock, see :mod:`sysmetrics.runview`). Every reader
of run files uses :func:`read_run`; every writer uses :func:`sample_line`,
:func:`run_line` and :func:`end_line`.

:func:`read_run` reads every line as long as the run stays within ``MAX_MEMORY`` (2 GiB,
estimated at ``VALUE_BYTES`` (16) a value and ``SAMPLE_BYTES`` (120) a sample) and
``MAX_RECORDINGS`` (10,000) recordings, and says in ``Run.left_out`` what it left out
(the lines, recordings and span of time after it stopped; lines skipped; keys dropped).
It skips any line over ``MAX_LINE_BYTES`` (1 MiB) or that is none of the above, keeps at
most ``MAX_KEYS`` (10,000) distinct keys, and keeps only the marker fields of a JSON
scalar or list of strings type, strings cut at ``MAX_FIELD_CHARS`` (1,000) characters.
Keys that come and go are stored sparse (:class:`Columns`).
"""

from __future__ import annotations

import bisect
import datetime
import importlib.metadata
import json
import math
import os
from array import array
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from sysmetrics import _optional

PathLike = Union[str, "os.PathLike[str]"]

MAX_MEMORY = 2 << 30  # bytes a read run may take (estimated as below); reading stops there
VALUE_BYTES = 16  # the estimate per value kept (a sparse key's index and value)
SAMPLE_BYTES = 120  # the estimate per sample (its time, clock, step, node, recording)
MAX_LINE_BYTES = 1 << 20  # bytes; a longer line is skipped
MAX_KEYS = 10_000  # distinct metric keys kept at most; later new keys are dropped
MAX_RECORDINGS = 10_000  # recordings (run lines) read at most; reading stops at the next
BLOCK_ROWS = 4096  # samples of the same keys read as one block before they become columns
MAX_FIELD_CHARS = 1000  # characters kept of a marker's string field
MAX_STALLS = 1000  # stall records kept (the first; the findings say the longest stalls)
MAX_FIELD_ITEMS = 1000  # items kept of a marker's list field

_NAN = math.nan


# -- writing ---------------------------------------------------------------------------


def version() -> str:
    """The installed distribution's version (``_optional.DIST``), or ``unknown``."""
    try:
        return importlib.metadata.version(_optional.DIST)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _dumps(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()


def sample_line(
    time: float,
    monotonic: float,
    step: Optional[int],
    metrics: Mapping[str, float],
    node: Optional[int] = None,
    steps: Optional[int] = None,
) -> bytes:
    """One sample as a run-file line (UTF-8 JSON and a newline); ``node``, ``steps`` where given."""
    record: dict[str, Any] = {
        "time": round(time, 6),
        "monotonic": round(monotonic, 6),
        "step": step,
        "metrics": metrics,
    }
    if steps is not None:
        record["steps"] = steps
    if node is not None:
        record["node"] = node
    return _dumps(record)


def run_line(**fields: Any) -> bytes:
    """The first line of a recording: ``{"run": fields}`` (see the module for the fields)."""
    return _dumps({"run": fields})


def end_line(**fields: Any) -> bytes:
    """The last line of a recording: ``{"end": fields}`` (see the module for the fields)."""
    return _dumps({"end": fields})


# -- reading ---------------------------------------------------------------------------


def finite(value: Any) -> Optional[float]:
    """``value`` as a finite float, or ``None`` for anything else (bools included).

    The one rule for a metric value kept from outside input: an int becomes a float
    (None past a float's range), a float is kept where finite, anything else (a bool, a
    string, inf, NaN) is dropped. :meth:`Run.add` and the live findings' store use it.
    """
    if type(value) is float:  # the usual case, first
        return value if value - value == 0 else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _integer(value: Any) -> Optional[int]:
    """``value`` where it is an int of 64 bits (not a bool), else ``None``."""
    return value if type(value) is int and -(2**63) <= value < 2**63 else None


def _fields(data: Mapping[Any, Any]) -> dict[str, Any]:
    """A marker's fields, bounded: JSON scalars and lists of strings, strings cut short."""
    out: dict[str, Any] = {}
    for key, value in list(data.items())[:MAX_FIELD_ITEMS]:
        if not isinstance(key, str):
            continue
        key = key[:MAX_FIELD_CHARS]
        if isinstance(value, str):
            out[key] = value[:MAX_FIELD_CHARS]
        elif value is None or isinstance(value, bool) or _integer(value) is not None:
            out[key] = value
        elif isinstance(value, float):
            out[key] = value if math.isfinite(value) else None
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = [v[:MAX_FIELD_CHARS] for v in value[:MAX_FIELD_ITEMS]]
    return out


@dataclass
class Recording:
    """One recording of a run file: its ``run`` line's fields and its ``end`` line's.

    ``end`` is ``None`` where the recording has no end line (the process was killed or
    crashed, or it is still running). ``first`` is its first sample's index in the
    :class:`Run` it was read into (the number of samples before its ``run`` line).
    """

    run: dict[str, Any]
    end: Optional[dict[str, Any]] = None
    first: int = 0

    @property
    def node(self) -> Optional[int]:
        """The node rank the recording says it is from, where it says."""
        return _integer(self.run.get("node"))

    @property
    def start(self) -> Optional[float]:
        """When it started, s since the epoch, where it says."""
        return finite(self.run.get("start"))

    @property
    def seconds(self) -> Optional[float]:
        """How long it ran, s, where its ``end`` line says."""
        return None if self.end is None else finite(self.end.get("seconds"))

    @property
    def cpus(self) -> Optional[float]:
        """CPUs available to the job when it started (its ``cpu`` key's 100 %), where it says."""
        cpus = finite(self.run.get("cpus"))
        return cpus if cpus is not None and cpus > 0 else None

    @property
    def command(self) -> Optional[list[str]]:
        """The command ``record`` ran, where it says."""
        command = self.run.get("command")
        return command if isinstance(command, list) else None


_NAN_BITS = array("Q", array("d", [_NAN]).tobytes())[0]  # the NaN that pads a column
_NAN_BYTES = array("d", [_NAN]).tobytes()
_DENSE_EVERY = 1024  # values appended to a sparse column between two density checks

_Stored = Union["array[float]", tuple["array[int]", "array[float]"]]


def _nans(n: int) -> array[float]:
    return array("d", [_NAN]) * n


def _present(column: array[float]) -> int:
    """The values of ``column`` that are not the padding NaN.

    A search of its bytes first: a column without one (most) is not counted value by value.
    """
    raw = column.tobytes()
    if _NAN_BYTES not in raw:
        return len(column)
    return len(column) - array("Q", raw).count(_NAN_BITS)


class Columns(MutableMapping[str, "array[float]"]):
    """Each metric key's values, one per sample: ``columns[key][j]``, NaN where ``j`` lacks it.

    Stored by density, never keys x samples x 8 bytes for keys that come and go: a key
    present in at least half the samples as an ``array('d')`` (8 bytes a sample), a
    sparser one as the indices of the samples that have it (``array('q')``) and their
    values (16 bytes a value present). Reading a key (``columns[key]``, ``get``,
    ``items()``, ``values()``) gives its full ``array('d')`` of ``length`` values: a dense
    key's own (changes to it stay), a sparse key's made anew at each read and not kept,
    so a loop over the keys holds one at a time. ``key in columns`` makes none.
    """

    def __init__(self, length: int = 0) -> None:
        self.length = length  # samples
        self._data: dict[str, _Stored] = {}
        self._settled = -1  # the length at the last finish(), -1 after a column is set since

    @classmethod
    def of(cls, columns: Mapping[str, array[float]]) -> Columns:
        """Columns holding ``columns`` (full arrays, one value per sample)."""
        if isinstance(columns, Columns):
            return columns
        out = cls(max((len(c) for c in columns.values()), default=0))
        for key, column in columns.items():
            out[key] = column
        return out

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, key: str) -> array[float]:
        stored = self._data[key]
        if isinstance(stored, tuple):
            out = _nans(self.length)
            for j, v in zip(*stored):
                out[j] = v
            return out
        if len(stored) < self.length:
            stored.extend(_nans(self.length - len(stored)))
        return stored

    def __setitem__(self, key: str, column: array[float]) -> None:
        self._settled = -1
        if not isinstance(column, array) or column.typecode != "d":
            column = array("d", column)
        if 2 * _present(column) >= self.length:
            self._data[key] = column
        else:
            index = array("q", (j for j, v in enumerate(column) if v == v))
            self._data[key] = (index, array("d", (column[j] for j in index)))

    def __delitem__(self, key: str) -> None:
        del self._data[key]

    def full(self, key: str) -> bool:
        """Whether every sample has ``key`` (False where it is unknown); makes no column."""
        stored = self._data.get(key)
        if stored is None:
            return False
        if isinstance(stored, tuple):
            return len(stored[1]) >= self.length
        if len(stored) < self.length or _present(stored) < len(stored):
            return False
        total = sum(stored)
        return total - total == 0 or all(v == v for v in stored)  # no NaN of another kind

    def samples(self, key: str) -> list[int]:
        """The samples that have ``key`` (none where it is unknown)."""
        stored = self._data.get(key)
        if stored is None:
            return []
        if isinstance(stored, tuple):
            return stored[0].tolist()
        return [j for j, v in enumerate(stored) if v == v]

    def value(self, key: str, j: int) -> float:
        """Sample ``j``'s value of ``key``: NaN where it has none."""
        stored = self._data[key]
        if isinstance(stored, tuple):
            index, values = stored
            i = bisect.bisect_left(index, j)
            return values[i] if i < len(index) and index[i] == j else _NAN
        return stored[j] if j < len(stored) else _NAN

    def nbytes(self) -> int:
        """Bytes of the values and indices held (the arrays' contents)."""
        total = 0
        for stored in self._data.values():
            if isinstance(stored, tuple):
                total += 8 * (len(stored[0]) + len(stored[1]))
            else:
                total += 8 * len(stored)
        return total

    def finish(self) -> None:
        """Store each key by its density now that every sample is in (after the last add).

        Nothing to do where no sample was added and no column set since the last (a report
        pads its run once on reading and again in the findings).
        """
        if self._settled == self.length:
            return
        for key, stored in list(self._data.items()):
            if isinstance(stored, tuple):
                if 2 * len(stored[1]) >= self.length:
                    self._data[key] = self[key]
            elif len(stored) != self.length or _NAN_BYTES in stored.tobytes():
                self[key] = self[key]  # padded, then kept dense or made sparse
        self._settled = self.length


class Run:
    """A run file as columns: entry ``j`` of each list or column is sample ``j``.

    ``time`` is s since the epoch, ``monotonic`` s on the sampler's monotonic clock,
    ``step`` the training step (``None`` where unknown or not a 64-bit integer), ``steps``
    the training steps the sample's step keys stand for (``None`` where the line does not
    say: no step closed, or a file written before the field existed), ``node``
    the node rank (the sample's, else its recording's; ``None`` where neither says),
    ``recording`` the index of the sample's :class:`Recording` in ``recordings`` (-1 for
    a sample before any ``run`` line: a file written before the markers existed).
    ``columns`` (:class:`Columns`) maps each metric key to an ``array('d')`` of its
    values, NaN where a sample lacks the key (only finite numbers are kept); keys that
    come and go are stored sparse. Columns, not a dict per sample: a day at 1 s is 86,400
    samples. ``left_out`` says, in sentences, what of the file :func:`read_run` left out
    (empty where nothing: every line read and kept).
    """

    def __init__(self) -> None:
        self.time: list[Optional[float]] = []
        self.monotonic: list[Optional[float]] = []
        self.step: list[Optional[int]] = []
        self.steps: list[Optional[int]] = []
        self.node: list[Optional[int]] = []
        self.recording: list[int] = []
        self.recordings: list[Recording] = []
        self._columns = Columns()
        self.files: dict[Optional[int], str] = {}  # node -> its run file (read_runs)
        self.left_out: list[str] = []  # what read_run left out, in sentences
        self.dropped_keys: dict[str, int] = {}  # key -> values dropped (over MAX_KEYS)
        # The stall records (bounded fields, MAX_STALLS at most): where the hang watch
        # found the training thread, and every rank (its "ranks"), when the step stalled.
        self.stalls: list[dict[str, Any]] = []

    @property
    def columns(self) -> Columns:
        """Each metric key's values, one per sample (see :class:`Columns`)."""
        return self._columns

    @columns.setter
    def columns(self, columns: Mapping[str, array[float]]) -> None:
        self._columns = Columns.of(columns)

    def __len__(self) -> int:
        return len(self.step)

    def add(
        self,
        metrics: Mapping[str, Any],
        time: Any = None,
        monotonic: Any = None,
        step: Any = None,
        node: Optional[int] = None,
        recording: int = -1,
        steps: Any = None,
    ) -> None:
        """Append one sample; values that are not finite numbers are dropped."""
        n = len(self.step)
        columns = self._columns
        data = columns._data
        for key, raw in metrics.items():
            value = finite(raw)
            if value is None:
                continue
            stored = data.get(key)
            if stored is None:
                if len(data) >= MAX_KEYS:
                    self.dropped_keys[key] = self.dropped_keys.get(key, 0) + 1
                    continue
                data[key] = (array("q", [n]), array("d", [value]))
            elif isinstance(stored, tuple):
                index, values = stored
                index.append(n)
                values.append(value)
                if len(values) % _DENSE_EVERY == 0 and 2 * len(values) > n:
                    columns.length = n + 1
                    data[key] = columns[key]  # dense enough: one value per sample
            else:
                if len(stored) < n:
                    stored.extend(_nans(n - len(stored)))
                stored.append(value)
        columns.length = n + 1
        self._sample(time, monotonic, step, node, recording, steps)

    def _sample(
        self,
        time: Any,
        monotonic: Any,
        step: Any,
        node: Optional[int],
        recording: int,
        steps: Any = None,
    ) -> None:
        self.time.append(finite(time))
        self.monotonic.append(finite(monotonic))
        self.step.append(_integer(step))
        closed = _integer(steps)
        self.steps.append(closed if closed is not None and closed > 0 else None)
        self.node.append(node)
        self.recording.append(recording)

    def pad(self) -> None:
        """Store every column by its density (see :class:`Columns`) after the last :meth:`add`."""
        self._columns.length = len(self.step)
        self._columns.finish()

    def extend(self, other: Run, node: Optional[int] = None) -> None:
        """Append ``other``'s samples and recordings; as node ``node`` where given.

        Keys beyond ``MAX_KEYS`` are dropped, as :meth:`add` does.
        """
        n, r = len(self), len(self.recordings)
        for rec in other.recordings:
            fields = rec.run if node is None else {**rec.run, "node": node}
            self.recordings.append(Recording(fields, rec.end, rec.first + n))
        self.time += other.time
        self.monotonic += other.monotonic
        self.step += other.step
        self.steps += other.steps
        self.node += other.node if node is None else [node] * len(other)
        self.recording += [i + r if i >= 0 else -1 for i in other.recording]
        columns = self._columns
        for key, column in other.columns.items():
            columns.length = n
            if key in columns:
                mine = columns[key]
            elif len(columns) >= MAX_KEYS:
                self.dropped_keys[key] = len(other.columns.samples(key))
                continue
            else:
                mine = _nans(n)
            mine.extend(column)
            columns.length = len(mine)
            columns[key] = mine
        self.left_out += other.left_out
        self.stalls += other.stalls[: MAX_STALLS - len(self.stalls)]
        for key, count in other.dropped_keys.items():
            self.dropped_keys[key] = self.dropped_keys.get(key, 0) + count
        self.pad()

    def metrics(self, j: int) -> dict[str, float]:
        """Sample ``j``'s metrics, as a dict (the keys it has)."""
        columns = self._columns
        return {k: v for k in columns if (v := columns.value(k, j)) == v}

    def present(self, key: str) -> list[int]:
        """The samples that have ``key``."""
        return self._columns.samples(key)

    @property
    def nodes(self) -> list[Optional[int]]:
        """The node ranks of the samples, in the order first seen."""
        return list(dict.fromkeys(self.node))

    def select(self, samples: Sequence[int]) -> Run:
        """A new run of ``samples`` (indices, in order), with the recordings they are in."""
        out = Run()
        firsts: dict[int, int] = {}
        for n, j in enumerate(samples):
            firsts.setdefault(self.recording[j], n)
        keep = sorted(r for r in firsts if r >= 0)
        index = {r: n for n, r in enumerate(keep)}
        for r in keep:
            rec = self.recordings[r]
            out.recordings.append(Recording(rec.run, rec.end, firsts[r]))
        out.time = [self.time[j] for j in samples]
        out.monotonic = [self.monotonic[j] for j in samples]
        out.step = [self.step[j] for j in samples]
        out.steps = [self.steps[j] for j in samples]
        out.node = [self.node[j] for j in samples]
        out.recording = [index.get(self.recording[j], -1) for j in samples]
        out.columns.length = len(samples)
        for key, column in self.columns.items():
            picked = array("d", (column[j] for j in samples))
            if any(v == v for v in picked):
                out.columns[key] = picked
        out.stalls = self.stalls
        return out

    def by_node(self) -> list[tuple[Optional[int], Run]]:
        """The run split by node, in the order first seen: one part where there is one."""
        nodes = self.nodes
        if len(nodes) <= 1:
            return [(nodes[0] if nodes else None, self)]
        return [(k, self.select([j for j, n in enumerate(self.node) if n == k])) for k in nodes]


@dataclass(frozen=True)
class Span:
    """Where something held: ``axis`` is ``"step"`` or ``"time"`` (s since the epoch)."""

    axis: str
    first: float
    last: float


@dataclass
class _Reading:
    """What :func:`read_run` keeps between lines: the recording open on each node."""

    run: Run
    open: dict[Optional[int], int] = field(default_factory=dict)  # node -> recording
    last: int = -1  # the latest recording
    nodes: dict[int, list[int]] = field(default_factory=dict)  # node -> its recordings
    cost: int = 0  # the estimated bytes of the run so far
    junk: int = 0  # lines that are no run-file record
    long: int = 0  # lines over MAX_LINE_BYTES
    full: bool = False  # the next line would pass MAX_MEMORY or MAX_RECORDINGS: stop
    keys: tuple[str, ...] = ()  # the block's keys, in its lines' order
    block: array[float] = field(default_factory=lambda: array("d"))  # its rows, row-major
    first: int = 0  # the block's first sample

    def flush(self) -> None:
        """Make the block's rows columns (one slice per key)."""
        k, rows = len(self.keys), len(self.block) // max(len(self.keys), 1)
        if not rows:
            self.keys, self.block = (), array("d")
            return
        run, first = self.run, self.first
        columns = run.columns
        data = columns._data
        columns.length = first + rows
        for i, key in enumerate(self.keys):
            values = self.block[i::k]
            stored = data.get(key)
            if stored is None:
                if len(data) >= MAX_KEYS:
                    run.dropped_keys[key] = run.dropped_keys.get(key, 0) + rows
                    continue
                if 2 * rows >= first + rows:
                    data[key] = _nans(first) + values
                else:
                    data[key] = (array("q", range(first, first + rows)), values)
            elif isinstance(stored, tuple):
                stored[0].extend(range(first, first + rows))
                stored[1].extend(values)
                if 2 * len(stored[1]) > first + rows:
                    data[key] = columns[key]
            else:
                if len(stored) < first:
                    stored.extend(_nans(first - len(stored)))
                stored.extend(values)
        self.keys, self.block = (), array("d")


_NUMBERS = frozenset({float, int})


def _fast_sample(
    state: _Reading, metrics: dict[str, Any], data: dict[str, Any], r: int, node: Optional[int]
) -> bool:
    """Add a sample whose values are all finite numbers to the block; False: it is not such."""
    values = list(metrics.values())  # array() from a list: twice as fast as from a view
    if not set(map(type, values)) <= _NUMBERS:  # a bool, which array() takes as a number
        return False
    try:
        row = array("d", values)
    except OverflowError:  # an integer over a float's range
        return False
    total = sum(row)
    if total - total != 0:  # an inf or NaN (or a sum that overflows: checked one by one)
        return False
    keys = tuple(metrics)
    run = state.run
    if keys != state.keys or len(state.block) >= BLOCK_ROWS * len(keys):
        state.flush()
        state.keys, state.first = keys, len(run)
    state.block.extend(row)
    run._sample(
        data.get("time"), data.get("monotonic"), data.get("step"), node, r, data.get("steps")
    )
    return True


_STARTS = (b'{"run":', b'{"end":', b'{"time":', b'{"stall":')  # how a writer's lines begin


def _parse(raw: bytes, fast: Optional[Callable[[bytes], Any]]) -> Any:
    """``raw`` as JSON, or ``None``; ``fast`` (orjson's ``loads``) first where given."""
    if fast is not None:
        try:
            return fast(raw)
        except ValueError:  # orjson.JSONDecodeError is one
            pass
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None


def _add_line(state: _Reading, raw: bytes, fast: Optional[Callable[[bytes], Any]]) -> None:
    """Add one line to the run where it is a run-file record; skip it otherwise.

    ``fast`` (orjson's ``loads``) parses first where given; a line it rejects (``NaN``, an
    integer over 64 bits, ...) is parsed again by the stdlib, so both read the same.
    """
    data = _parse(raw, fast)
    if not isinstance(data, dict):
        # A fragment (a line a full disk or a kill cut short) glued to the next writer's
        # whole line: that line is read, the fragment is junk; never one merged record.
        at = [i for mark in _STARTS if (i := raw.find(mark, 1)) > 0]
        for i in sorted(at):
            data = _parse(raw[i:], fast)
            if isinstance(data, dict):
                break
        else:
            state.junk += 1
            return
    run = state.run
    if isinstance(data.get("metrics"), dict):
        node = _integer(data.get("node"))
        if node is None:
            r = state.last
        else:
            r = state.open.get(node, -1)
            if r < 0:  # its recording ended, or its run line is missing: the latest of its node
                r = state.nodes[node][-1] if node in state.nodes else -1
        if node is None and r >= 0:
            node = run.recordings[r].node
        metrics = data["metrics"]
        cost = SAMPLE_BYTES + VALUE_BYTES * len(metrics)
        if state.cost + cost > MAX_MEMORY:
            state.full = True
            return
        state.cost += cost
        if not _fast_sample(state, metrics, data, r, node):
            state.flush()
            run.add(
                metrics, data.get("time"), data.get("monotonic"), data.get("step"), node, r,
                data.get("steps"),
            )  # fmt: skip
    elif isinstance(data.get("run"), dict):
        if len(run.recordings) >= MAX_RECORDINGS:
            state.full = True
            return
        state.flush()
        rec = Recording(_fields(data["run"]), None, len(run))
        run.recordings.append(rec)
        state.last = len(run.recordings) - 1
        state.open[rec.node] = state.last
        if rec.node is not None:
            state.nodes.setdefault(rec.node, []).append(state.last)
    elif isinstance(data.get("stall"), dict):  # a stall found live (sysmetrics.hang)
        if len(run.stalls) < MAX_STALLS:
            run.stalls.append(_fields(data["stall"]))
    elif isinstance(data.get("end"), dict):
        end = _fields(data["end"])
        node = _integer(end.get("node"))
        r = state.open.pop(node, -1) if node is not None else state.last
        if r < 0 and node is not None:  # its run line named no node
            r = state.open.pop(None, -1)
        if r >= 0 and run.recordings[r].end is None:
            run.recordings[r].end = end
    else:
        state.junk += 1


def stall_line(fields: Mapping[str, Any]) -> bytes:
    """A stall found live: ``{"stall": fields}`` (see the module; readers skip it for now)."""
    return _dumps({"stall": fields})


def _utc(t: Optional[float]) -> str:
    if t is None:
        return "an unknown time"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _rest(
    file: Any, raw: bytes, fast: Optional[Callable[[bytes], Any]]
) -> tuple[int, int, Optional[float], Optional[float]]:
    """What is left of ``file`` from line ``raw`` (read) on: lines, run lines, first and last time.

    Reads the rest line by line (bytes, not kept): time, no memory.
    """
    lines, runs, first, last = 0, 0, None, None
    while raw:
        lines += 1
        if raw.startswith(b'{"run":'):
            runs += 1
        elif raw.startswith(b'{"time":'):
            if first is None:
                data = _parse(raw, fast)
                first = finite(data.get("time")) if isinstance(data, dict) else None
            last_line = raw
        if len(raw) > MAX_LINE_BYTES:  # too long: skip to the end of the line
            while raw and not raw.endswith(b"\n"):
                raw = file.readline(MAX_LINE_BYTES)
        raw = file.readline(MAX_LINE_BYTES + 1)
    if lines and first is not None:
        data = _parse(last_line, fast)
        last = finite(data.get("time")) if isinstance(data, dict) else None
    return lines, runs, first, last


def read_run(path: PathLike, max_lines: Optional[int] = None) -> Run:
    """The run file at ``path`` as a :class:`Run`, samples in file order.

    Reads every line, or the first ``max_lines``, as long as the run stays within
    ``MAX_MEMORY`` bytes (estimated: ``SAMPLE_BYTES`` a sample and ``VALUE_BYTES`` a value;
    the memory it takes is at most that, about twice the file's size for a file of
    short keys) and ``MAX_RECORDINGS`` recordings; where it stops before the end it says
    in :attr:`Run.left_out` which lines, recordings and span of time it left out. A line
    over ``MAX_LINE_BYTES`` bytes, or one that is neither a JSON object with a ``metrics``
    object nor a ``run`` or ``end`` marker, is skipped and counted there too, as are the
    values of keys past ``MAX_KEYS``. Junk never raises; a file that cannot be opened
    does (``OSError``).
    """
    state = _Reading(Run())
    run = state.run
    fast = _optional.fast_json_loads()
    name = os.fspath(path)
    number = 0
    with open(path, "rb") as file:
        while max_lines is None or number < max_lines:
            raw = file.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            number += 1
            if len(raw) > MAX_LINE_BYTES:  # too long: skip to the end of the line
                state.long += 1
                while raw and not raw.endswith(b"\n"):
                    raw = file.readline(MAX_LINE_BYTES)
                continue
            _add_line(state, raw, fast)
            if state.full:
                break
        else:
            raw = file.readline(MAX_LINE_BYTES + 1)
            if raw:
                number += 1
        state.flush()
        if raw and (state.full or max_lines is not None):
            why = (
                f"after {MAX_RECORDINGS:,} recordings (MAX_RECORDINGS)"
                if len(run.recordings) >= MAX_RECORDINGS
                else f"at max_lines={max_lines:,}"
                if not state.full
                else f"at its memory budget (MAX_MEMORY, {MAX_MEMORY / 2**30:.3g} GiB)"
            )
            lines, runs, first, last = _rest(file, raw, fast)
            cut = len(run.recordings) if run.recordings and not raw.startswith(b'{"run":') else 0
            what = []
            if cut:
                what.append(f"the rest of recording {cut}")
            if runs:
                what.append(f"{runs:,} more recording{'s' if runs != 1 else ''}")
            said = " and ".join(what) + ": " if what else ""
            span = (
                f"samples from {_utc(first)} to {_utc(last)} UTC"
                if first is not None
                else "no samples"
            )
            run.left_out.append(
                f"{name}: left out: lines {number:,} to {number + lines - 1:,} (the end), "
                f"not read {why}: {said}{span}"
            )
    if state.long:
        run.left_out.append(
            f"{name}: {state.long:,} lines over {MAX_LINE_BYTES // 2**20} MiB "
            "(MAX_LINE_BYTES) were skipped"
        )
    if state.junk:
        run.left_out.append(
            f"{name}: {state.junk:,} lines that are no run-file record (cut short, or not "
            "JSON) were skipped"
        )
    if run.dropped_keys:
        keys = sorted(run.dropped_keys)
        shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
        run.left_out.append(
            f"{name}: {len(keys):,} keys past {MAX_KEYS:,} distinct keys (MAX_KEYS) were left out "
            f"({sum(run.dropped_keys.values()):,} values): {shown}"
        )
    run.pad()
    return run


def read_runs(paths: Sequence[PathLike], max_lines: Optional[int] = None) -> Run:
    """Several run files, one per node of one run, as one :class:`Run` of several nodes.

    Each file is read with :func:`read_run` (``max_lines`` each) and its samples keep the
    node they name (their ``node``, else their recording's), as in a file that several
    nodes appended to, so :meth:`Run.by_node` and the findings see every node. Where
    files name the same node (``sysmetrics record`` on each node names node 0), each
    file is a node of its own, numbered in the order given: the first is node 0. The
    samples are in file order; ``Run.files`` maps each node to the file it came from.

    Raises ``OSError`` where a file cannot be read, and ``ValueError`` where the files are
    not the nodes of one run: a path given twice, two files holding the same recording
    (the same host, pid and start), files whose nodes are not distinct where one of them
    holds several nodes, or two files whose samples' times do not overlap (different runs: report
    each on its own).
    """
    if len(paths) == 1:
        run = read_run(paths[0], max_lines)
        run.files = {node: os.fspath(paths[0]) for node in run.nodes}
        return run
    names = [os.fspath(p) for p in paths]
    real = [os.path.realpath(p) for p in names]
    for n, path in enumerate(real):
        if path in real[:n]:
            raise ValueError(f"{names[n]} is given twice")
    runs = [read_run(p, max_lines) for p in names]
    seen: dict[tuple[Any, ...], str] = {}
    for name, run in zip(names, runs):
        for rec in run.recordings:
            mark = (rec.run.get("host"), rec.run.get("pid"), rec.start, rec.node)
            if rec.start is not None and mark in seen:
                raise ValueError(
                    f"{seen[mark]} and {name} hold the same recording (host, pid and start): "
                    "give each node's run file once"
                )
            seen[mark] = name
    _check_overlap(names, runs)
    own = [set(run.nodes) for run in runs]
    distinct = all(None not in nodes for nodes in own) and sum(map(len, own)) == len(
        set().union(*own)
    )
    several = [name for name, nodes in zip(names, own) if len(nodes) > 1]
    if not distinct and several:
        raise ValueError(
            f"{several[0]} holds several nodes, and the files' nodes are not distinct: give "
            "one file per node, or files whose nodes differ"
        )
    merged = Run()
    for k, (name, run) in enumerate(zip(names, runs)):
        renumber = None if distinct else k
        merged.extend(run, renumber)
        for node in [renumber] if renumber is not None else run.nodes:
            merged.files[node] = name
    return merged


def _check_overlap(names: Sequence[str], runs: Sequence[Run]) -> None:
    """Raise ``ValueError`` where two files' sample times do not overlap (different runs)."""
    spans = []
    for name, run in zip(names, runs):
        times = [t for t in run.time if t is not None]
        if times:
            spans.append((min(times), max(times), name))
    for a, (first_a, last_a, name_a) in enumerate(spans):
        for first_b, last_b, name_b in spans[a + 1 :]:
            if first_a > last_b or first_b > last_a:
                raise ValueError(
                    f"{name_a} and {name_b} do not overlap in time: they are not the nodes "
                    "of one run (report each on its own)"
                )
