"""What every rule shares: its declaration, its findings, cheap per-sample views of a run.

:class:`Rule` (a rule's declaration, gathered in
:data:`sysmetrics.findings.registry.REGISTRY`), :class:`Finding`, :class:`Subject`, and
per-sample views of a :class:`Run`.

Every view here is one pass over the samples (or over the keys and the samples): the
rules run on a partial run during training, so nothing is quadratic in the samples.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import statistics
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, NamedTuple, Optional, TypeVar

from sysmetrics.descriptions import gpu_key, split_node
from sysmetrics.runfile import Run, Span
from sysmetrics.runview import RunView, core

MIN_SAMPLES = 5  # samples (or intervals) a mean- or share-based rule needs
EXAMPLES = Path(__file__).resolve().parent / "examples"  # <code>/fires.jsonl, quiet.jsonl

DASH = "\N{EN DASH}"  # between the ends of a span, as in "steps 120-480"
_NAN = math.nan


SubjectKind = Literal["gpu", "node", "step", "resource", "rank"]


class Subject(NamedTuple):
    """What a finding is about, beyond its rule: two findings are the same where both agree.

    ``kind`` and ``id``: ``("gpu", "1")`` (GPU 1), ``("node", "2")`` (node 2, a
    straggler), ``("step", "120")`` (a stall, by its first step), ``("resource", "cpu")``
    (contention for the CPU, or ``"memory"``). ``facet``: which side of it, where a rule
    says more than one thing about it (a throttle reason, ``"thermal"``; a straggler's
    ``"cpu"`` or ``"gpu"``); ``""`` for none. ``node``: the node it is on, in a run of
    several nodes (:func:`~sysmetrics.findings.findings` sets it); None on one node.
    """

    kind: SubjectKind
    id: str
    facet: str = ""
    node: Optional[int] = None


@dataclass(frozen=True)
class Finding:
    """One thing the run says: a rule id, a sentence, the numbers behind it, where, about what.

    ``span`` is on the step axis where the samples it covers all have a step, else on the
    time axis (s since the epoch); None where neither is known. ``subject``: what it is
    about (a GPU, a node, a stall's first step); None where it is about the run as a whole
    (on one node; on one of several, ``Subject("node", k)``). The live findings say each
    ``(rule, subject)`` once; nothing reads the sentence back. ``advice``: what to change
    and what it would gain (:mod:`~sysmetrics.findings.gains`; "" where its rule has none).
    """

    rule: str
    sentence: str
    evidence: dict[str, float] = field(default_factory=dict)
    span: Optional[Span] = None
    subject: Optional[Subject] = None
    advice: str = ""


def threshold(default: float, constant: str, unit: str, help: str) -> Any:
    """A field of a rule's thresholds: its ``default``, unit and meaning.

    ``default`` is the module-level constant named ``constant`` (importable from
    :mod:`sysmetrics.findings`; ``tests/test_rules.py`` checks that they agree).
    ``unit`` is ``%``, ``s``, ``MiB/s``, ``points`` (percentage points), ``share`` (0 to
    1), ``times`` (a ratio), ``CPUs``, ``nodes`` or ``stalls``; ``help`` says what the
    value bounds, for the docs' findings table.
    """
    return field(default=default, metadata={"constant": constant, "unit": unit, "help": help})


T = TypeVar("T")


@dataclass(frozen=True)
class Rule(Generic[T]):
    """A rule, declared as data (see ``docs/writing-a-rule.md``).

    ``code``: its id (each finding's ``rule``); ``summary``: what it says, one line;
    ``scope``: ``"node"`` (run on each node's samples) or ``"run"`` (across nodes, on the
    whole run); ``live``: whether it may be said during training (False where only the
    whole run decides it); ``thresholds``: a frozen dataclass whose fields (with
    :func:`threshold`) say unit and meaning; ``check(run, thresholds)``: its findings;
    ``why``: why it matters; ``how``: what it reads and how it decides (the docs' table).
    Its example runs are ``examples/<code>/fires.jsonl`` and ``quiet.jsonl``.
    """

    code: str
    summary: str
    scope: Literal["node", "run"]
    live: bool
    thresholds: T
    check: Callable[[Run, T], list[Finding]]
    why: str
    how: str

    def __call__(self, run: Run) -> list[Finding]:
        """Its findings about ``run`` at its declared thresholds."""
        return self.check(run, self.thresholds)

    def example(self, kind: Literal["fires", "quiet"]) -> Path:
        """Its example run file: ``fires`` (it fires there) or ``quiet`` (it does not)."""
        return EXAMPLES / self.code / f"{kind}.jsonl"


def mean(values: Iterable[float]) -> float:
    """The mean of ``values``, NaN where there are none."""
    held = list(values)
    return statistics.fmean(held) if held else _NAN


_T = TypeVar("_T")
# What several rules derive from one run, made once within one findings() call (never kept
# on the run, which a live caller grows): (name, id(run)) -> (run, what was made).
_MEMO: contextvars.ContextVar[Optional[dict[tuple[str, int], tuple[Run, Any]]]] = (
    contextvars.ContextVar("sysmetrics_findings_memo", default=None)
)


@contextlib.contextmanager
def memo() -> Iterator[None]:
    """Within it, :func:`once` makes each thing of a run once (one findings() call).

    Within an outer one (the report's page, which reads the same views), the outer's.
    """
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def once(name: str, run: Run, make: Callable[[Run], _T]) -> _T:
    """``make(run)``, made once within :func:`memo` (the run is held: its id stays its own)."""
    made = _MEMO.get()
    if made is None:
        return make(run)
    key = (name, id(run))
    if key not in made:
        made[key] = (run, make(run))
    result: _T = made[key][1]
    return result


def view(run: Run) -> RunView:
    """The run's :class:`~sysmetrics.runview.RunView`, made once within :func:`memo`."""
    return once("view", run, RunView)


def parts(run: Run) -> list[list[int]]:
    """The samples of each recording of each node, in order (:attr:`RunView.parts`)."""
    return view(run).parts


def rates(run: Run, key: str) -> list[Optional[float]]:
    """For each sample, the counter ``key``'s rise per second (:meth:`RunView.rates`)."""
    return view(run).rates(key)


def host_cpu(run: Run) -> list[Optional[float]]:
    """For each sample, the host's CPU busy % (:attr:`RunView.host_cpu`)."""
    return view(run).host_cpu


def cpus(run: Run) -> tuple[Optional[float], str]:
    """The CPUs available to the job, and where that number comes from.

    The run file's ``run`` line says (``cpus``: the union of the job's affinity, capped by
    its cgroup CPU quota, when the recording started); a file without it (written before
    the field existed, or crafted) gives the number of per-core ``cpu.{i}.cpu_percent``
    keys: the host's cores, more than the job's where a quota or an affinity mask
    limits it. ``(None, "")`` where neither is known.
    """
    for rec in run.recordings:
        if rec.cpus is not None:
            return rec.cpus, "run"
    cores = {i for key in run.columns if (i := core(key)) is not None}
    return (float(len(cores)), "cores") if cores else (None, "")


def gpu_indices(keys: Iterable[str]) -> list[str]:
    """Every GPU index with a ``gpu.{i}.*`` key among ``keys``, in numeric order."""
    return sorted({g.i for key in keys if (g := gpu_key(key)) and not g.process}, key=int)


def present(column: Optional[Sequence[float]], samples: Iterable[int]) -> list[float]:
    """The values of ``column`` (NaN: absent) at ``samples`` that are present."""
    if column is None:
        return []
    return [v for j in samples if (v := column[j]) == v]


def duration(seconds: float) -> str:
    """``seconds`` for a sentence: ``2.4 s``, ``640 s``, ``12 ms``, ``3 µs``.

    Never minutes: a stall said live keeps its words (only its numbers) as it grows.
    """
    if seconds >= 1 or seconds == 0:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} \N{MICRO SIGN}s"


def where(run: Run, span: Optional[Span]) -> str:
    """``span`` in words for a sentence: ``steps 120-480`` (an en dash), or seconds in."""
    if span is None:
        return "the run"
    if span.axis == "step":
        if span.first == span.last:
            return f"step {span.first:.0f}"
        return f"steps {span.first:.0f}{DASH}{span.last:.0f}"
    start = view(run).start
    if start is None:
        return "the run"
    return f"{span.first - start:.0f}{DASH}{span.last - start:.0f} s into the run"


def node_runs(run: Run) -> tuple[dict[int, Run], bool]:
    """Each node's samples as a run of its own: from ``node{k}/`` keys, or the samples' nodes.

    A callback's gather at the logging rank writes ``node{k}/key`` keys into one series
    (the run's clock and steps are the logging rank's: the second value is True, and
    the nodes' steps are not their own); several nodes' run files (or one file they all
    appended to) give samples of several nodes (``run.node``), each with its own clock
    and steps. Empty where the run has neither, or one node only.
    """
    gathered: dict[int, dict[str, array[float]]] = {}
    for key in run.columns:  # a key's column is made only where it is used
        split = split_node(key)
        if split is not None and split.node is not None:
            gathered.setdefault(split.node, {})[split.key] = run.columns[key]
    if len(gathered) >= 2:
        out = {}
        for k, columns in sorted(gathered.items()):
            part = Run()
            part.time, part.monotonic, part.step = run.time, run.monotonic, run.step
            part.steps = run.steps
            part.node, part.recording, part.recordings = run.node, run.recording, run.recordings
            part.columns = columns
            out[k] = part
        return out, True
    nodes = [k for k in run.nodes if k is not None]
    if len(nodes) < 2:
        return {}, False
    return {k: part for k, part in run.by_node() if k is not None}, False
