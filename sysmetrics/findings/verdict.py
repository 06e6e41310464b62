"""One verdict per run (and per node): what bounds it, the shares that say so, a band.

Issue 32 item 4. Where the findings list each thing worth saying, the verdict says one
thing first: what sets the run's pace. Its categories (:data:`CATEGORIES`) and their
severity bands (``highly`` / ``moderately``, as XProf's input-bound analysis says
"highly" at 20 % of the step time and "moderately" at 5 %) are declared here once; the
report's page, ``report --json`` and ``record --live``'s line read them from here.

How it decides (:func:`decide`, from :class:`Shares`):

1. the time lost: ``stalled`` (the share of the run's time in the ``stall`` rule's
   stalls), ``input`` (the steps' ``step.dataWaitPercent``, weighted by their seconds),
   ``framework-overhead`` (``step.overheadPercent``, the time between steps outside the
   batch fetch, where the run has the key), ``communication`` (across nodes: the share of
   the others' step time spent waiting for a straggler node). The largest, where it is
   ``highly`` (at least its ``highly`` share), is the verdict;
2. else what the steps' compute was bound by: ``gpu-compute`` where the job's GPUs were
   busy at least the ``single-core`` rule's ``gpu_percent`` (a GPU-saturated run says so,
   and is never told it is CPU-limited), else ``cpu`` (the ``cpu-bound`` or
   ``contention`` rule's finding: its CPUs saturated, or taken by other processes), else
   ``single-thread`` (the ``single-core`` rule's finding);
3. else the largest time lost that is ``moderately``;
4. else ``balanced`` where the run had the signals to tell (step keys and GPU metrics):
   nothing took more than the ``moderately`` share. Where it lacked one it abstains
   (``bound`` None) and says what it could be and which signal was missing
   ("could be GPU compute; no GPU metrics were recorded").

Every share is a percentage (0 to 100) of the time it names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from sysmetrics.descriptions import gpu_key
from sysmetrics.findings._base import Finding, view
from sysmetrics.findings.cpu import CPU_BOUND, SINGLE_CORE
from sysmetrics.findings.training import STALL, WAIT_KEY
from sysmetrics.runfile import Run
from sysmetrics.weights import sample_weights

OVERHEAD_KEY = "step.overheadPercent"  # the time between steps outside the batch fetch (%)

Band = Literal["highly", "moderately"]


@dataclass(frozen=True)
class Category:
    """One thing that may bound a run: its code, its words, what its share is, its bands.

    ``highly`` and ``moderately``: the share (%) at or above which the verdict says so
    (``None``: the category has no band of its own, it is said from a rule's finding).
    """

    code: str
    words: str  # the verdict's adjective: "input-bound"
    share: str  # what its share (%) measures, for the docs and the JSON
    highly: Optional[float]
    moderately: Optional[float]


CATEGORIES: tuple[Category, ...] = (
    Category("stalled", "stalled", "% of the run's time in stalls (the `stall` rule's)", 20.0, 5.0),
    Category(
        "input",
        "input-bound",
        "% of the steps' time waiting for the next batch (`step.dataWaitPercent`)",
        20.0,
        5.0,
    ),
    Category(
        "framework-overhead",
        "framework-overhead-bound",
        "% of the steps' time between steps outside the batch fetch (`step.overheadPercent`)",
        20.0,
        5.0,
    ),
    Category(
        "communication",
        "communication-bound",
        "% of the other nodes' step time spent waiting for the slowest node",
        20.0,
        5.0,
    ),
    Category(
        "gpu-compute",
        "GPU-bound",
        "% busy, the job's GPUs (`gpu.{i}.gpu` of the GPUs it uses)",
        95.0,
        SINGLE_CORE.gpu_percent,
    ),
    Category(
        "cpu",
        "CPU-bound",
        "% of the samples with the job's CPUs saturated (`cpu-bound`) or taken by other "
        "processes (`contention`)",
        None,
        None,
    ),
    Category(
        "single-thread",
        "single-thread-bound",
        "% of the samples with the job at about one CPU's worth (`single-core`)",
        None,
        None,
    ),
    Category("balanced", "balanced", "none: nothing took the moderately share", None, None),
)
"""Every category of the verdict, in the order its time-lost kinds are compared."""

BY_CODE: dict[str, Category] = {c.code: c for c in CATEGORIES}
LOST = ("stalled", "input", "framework-overhead", "communication")  # shares of time lost
_MODERATELY = min(m for c in CATEGORIES if c.code in LOST and (m := c.moderately) is not None)
HIGHLY_SHARE = 80.0  # %: a rule-decided category (cpu, single-thread) in this share: highly


def band(code: str, share: Optional[float]) -> Optional[Band]:
    """The band of ``share`` (%) in category ``code``: ``highly``, ``moderately`` or None."""
    c = BY_CODE[code]
    if share is None or share != share:
        return None
    if c.highly is not None and share >= c.highly:
        return "highly"
    if c.moderately is not None and share >= c.moderately:
        return "moderately"
    return None


@dataclass(frozen=True)
class Shares:
    """What the verdict reads, each a % (None: the run lacks the signal).

    ``cpu`` and ``single``: the share of the samples where the ``cpu-bound`` (or
    ``contention``) and ``single-core`` rules found it (None: they did not).
    """

    stalled: Optional[float] = None
    input: Optional[float] = None
    overhead: Optional[float] = None
    communication: Optional[float] = None
    gpu: Optional[float] = None
    cpu: Optional[float] = None
    single: Optional[float] = None
    contended: bool = False  # ``cpu`` is other processes' doing (``contention``)
    steps: bool = False  # the run has step keys (its data wait is known)
    gpus: bool = False  # the run has GPU metrics
    job_cpu: Optional[float] = None  # the job's mean CPU, % of its CPUs (for the words)


@dataclass(frozen=True)
class Verdict:
    """What bounds a run: ``bound`` (a category's code; None: abstained), ``band``, ``share``.

    ``shares``: every share read (%, by name); ``sentence``: the verdict in words;
    ``could_be`` and ``missing``: where it abstains (or may be wrong), what it could be and
    which signals the run lacked.
    """

    bound: Optional[str]
    band: Optional[Band]
    share: Optional[float]
    sentence: str
    shares: dict[str, float] = field(default_factory=dict)
    could_be: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    @property
    def words(self) -> str:
        """The bound in words: ``input-bound``, ``GPU-bound``; ``undetermined`` where none."""
        return "undetermined" if self.bound is None else BY_CODE[self.bound].words

    @property
    def label(self) -> str:
        """Short: ``highly input-bound (44 %)``, ``GPU-bound``, ``undetermined``."""
        if self.bound is None:
            return "undetermined"
        words = BY_CODE[self.bound].words
        head = f"{self.band} {words}" if self.band else words
        return head if self.share is None else f"{head} ({self.share:.0f} %)"

    def to_json(self) -> dict[str, Any]:
        """As ``report --json`` has it."""
        return {
            "bound": self.bound,
            "band": self.band,
            "share": _finite(self.share),
            "label": self.label,
            "sentence": self.sentence,
            "shares": {k: _finite(v) for k, v in self.shares.items()},
            "could_be": list(self.could_be),
            "missing": list(self.missing),
        }


def _finite(value: Optional[float]) -> Optional[float]:
    return value if value is not None and math.isfinite(value) else None


_SAID = {
    "stalled": "of the run's time the step did not advance",
    "input": "of the steps' time went to waiting for data",
    "framework-overhead": "of the steps' time went to the framework between steps "
    "(callbacks, progress bar, logging)",
    "communication": "of the other nodes' step time went to waiting for the slowest node",
}
_MISSING_GPU = "no GPU metrics were recorded"
_MISSING_STEPS = "no step timing was recorded (step.dataWaitPercent)"


def decide(s: Shares) -> Verdict:
    """The verdict of ``s`` (see the module for how)."""
    shares = {
        name: v
        for name, v in (
            ("stalled_percent", s.stalled),
            ("data_wait_percent", s.input),
            ("overhead_percent", s.overhead),
            ("communication_percent", s.communication),
            ("gpu_percent", s.gpu),
            ("cpu_bound_percent", s.cpu),
            ("single_core_percent", s.single),
            ("job_cpu_percent", s.job_cpu),
        )
        if v is not None and v == v
    }
    lost = [
        (share, code)
        for code, share in zip(LOST, (s.stalled, s.input, s.overhead, s.communication))
        if share is not None and share == share
    ]
    lost.sort(reverse=True)
    top = lost[0] if lost else None
    context = _context(s)
    if top is not None and band(top[1], top[0]) == "highly":
        return _lost(top, s, shares, context)
    if s.gpus and band("gpu-compute", s.gpu) is not None:
        assert s.gpu is not None
        gb = band("gpu-compute", s.gpu)
        assert gb is not None
        return Verdict(
            "gpu-compute",
            gb,
            s.gpu,
            f"{gb.capitalize()} GPU-bound: the job's GPUs were {s.gpu:.0f} % busy"
            f"{_context(s, 'gpu-compute')}: the GPU sets the pace (a faster GPU, mixed "
            "precision or a leaner model would speed it up).",
            shares,
        )
    for code, share, what in (
        (
            "cpu",
            s.cpu,
            "other processes took the CPUs the job could use"
            if s.contended
            else "the job kept its CPUs saturated",
        ),
        ("single-thread", s.single, "the job used about one CPU's worth while more were free"),
    ):
        if share is not None:
            b: Band = "highly" if share >= HIGHLY_SHARE else "moderately"
            return Verdict(
                code,
                b,
                share,
                f"{b.capitalize()} {BY_CODE[code].words}: {what}, in {share:.0f} % of the "
                f"samples{context}.",
                shares,
                missing=() if s.gpus else (_MISSING_GPU,),
            )
    if top is not None and band(top[1], top[0]) == "moderately":
        return _lost(top, s, shares, context)
    missing = tuple(m for m, ok in ((_MISSING_STEPS, s.steps), (_MISSING_GPU, s.gpus)) if not ok)
    if not missing:
        return Verdict(
            "balanced",
            None,
            None,
            f"Balanced: nothing took {_MODERATELY:g} % or more of the time{context}.",
            shares,
        )
    could_be = ("gpu-compute",) if not s.gpus else ("input", "framework-overhead")
    words = " or ".join(BY_CODE[c].words for c in could_be)
    return Verdict(
        None,
        None,
        None,
        f"Undetermined{context}: could be {words}; {' and '.join(missing)}.",
        shares,
        could_be,
        missing,
    )


def _context(s: Shares, said_already: str = "") -> str:
    """The shares said beside a verdict: `` (data wait 2 %, GPUs 40 % busy)``."""
    said = []
    if s.input is not None and said_already != "input":
        said.append(f"data wait {s.input:.0f} % of the steps' time")
    if s.gpu is not None and said_already != "gpu-compute":
        said.append(f"GPUs {s.gpu:.0f} % busy")
    if s.job_cpu is not None:
        said.append(f"the job's CPU {s.job_cpu:.0f} %")
    return f" ({', '.join(said)})" if said else ""


def _lost(top: tuple[float, str], s: Shares, shares: dict[str, float], context: str) -> Verdict:
    share, code = top
    b = band(code, share)
    assert b is not None
    context = _context(s, code)
    return Verdict(
        code,
        b,
        share,
        f"{b.capitalize()} {BY_CODE[code].words}: {share:.0f} % {_SAID[code]}{context}.",
        shares,
        missing=() if s.gpus or code == "stalled" else (_MISSING_GPU,),
    )


def _weighted(run: Run, key: str, weights: Sequence[float]) -> Optional[float]:
    """``key``'s mean over the samples, each weighted by ``weights`` (None: no sample)."""
    column = run.columns.get(key)
    if column is None:
        return None
    total = held = 0.0
    for v, w in zip(column, weights):
        if v == v and w == w and w > 0:
            total += v * w
            held += w
    return total / held if held > 0 else None


def _finding_share(found: Sequence[Finding], codes: tuple[str, ...]) -> Optional[float]:
    """The largest ``share`` (as %) of the findings of rules ``codes`` (None: none)."""
    held = [100.0 * f.evidence.get("share", 0.0) for f in found if f.rule in codes]
    return max(held) if held else None


def shares(run: Run, found: Sequence[Finding]) -> Shares:
    """What the verdict reads from one node's ``run`` and its findings ``found``."""
    seen = view(run)
    weights = sample_weights(run, "step_seconds")
    wait = _weighted(run, WAIT_KEY, weights)
    overhead = _weighted(run, OVERHEAD_KEY, weights)
    duration = seen.duration
    stalled = None
    if seen.stretches and duration > 0:
        stalled = 100.0 * min(1.0, sum(st.held for st in seen.stalls(STALL)) / duration)
    gpus = [g for g in seen.job_gpu_percent if g is not None]
    any_gpu = any(gpu_key(key) is not None for key in run.columns)
    cpu = run.columns.get("cpu")
    job_cpu = None
    if cpu is not None:
        held = [v for v in cpu if v == v]
        job_cpu = sum(held) / len(held) if held else None
    return Shares(
        stalled=stalled,
        input=wait,
        overhead=overhead,
        gpu=sum(gpus) / len(gpus) if gpus else None,
        cpu=_finding_share(found, ("cpu-bound", "contention")),
        single=_finding_share(found, ("single-core",)),
        contended=_finding_share(found, ("cpu-bound",)) is None
        and _finding_share(found, ("contention",)) is not None,
        steps=wait is not None,
        gpus=any_gpu,
        job_cpu=job_cpu,
    )


def verdict(run: Run, found: Sequence[Finding]) -> Verdict:
    """One node's verdict: ``run`` (its samples) and ``found`` (its findings)."""
    return decide(shares(run, found))


def across(nodes: Sequence[Verdict], found: Sequence[Finding]) -> Optional[Verdict]:
    """The verdict of a run of several nodes, from its nodes' and the cross-node findings.

    ``nodes``: each node's verdict; ``found``: the cross-node findings. A straggler
    node makes the others communication-bound (they wait for it at each collective):
    its ``ratio`` (its steps' time over the others') says how much; else the most
    severe node's verdict (highly before moderately, time lost before a busy device,
    then the larger share). None: no nodes.
    """
    for f in found:
        if f.rule == "straggler-node" and f.evidence.get("ratio", 0.0) > 1.0:
            share = 100.0 * (1.0 - 1.0 / f.evidence["ratio"])
            b = band("communication", share) or "moderately"
            k = f.evidence.get("node")
            slow = "" if k is None else f" node {k:.0f}"
            return Verdict(
                "communication",
                b,
                share,
                f"{b.capitalize()} communication-bound: the other nodes waited for the "
                f"slowest{slow}, {share:.0f} % of their step time.",
                {"communication_percent": share},
            )
    ranked = [v for v in nodes if v.bound is not None]
    if not ranked:
        return nodes[0] if nodes else None
    # Highly first; then time lost (a node that waits holds every node back at the next
    # collective) before a busy device; then the larger share of its kind.
    return max(ranked, key=lambda v: (v.band == "highly", v.bound in LOST, v.share or 0.0))


def sample_verdict(
    values: Mapping[str, float], n_cpus: Optional[float] = None
) -> Optional[Verdict]:
    """A verdict from one sample's ``values`` (``record --live``'s line).

    None without step keys. ``n_cpus``: the CPUs available to the job (for
    ``single-thread``).
    """
    wait = values.get(WAIT_KEY)
    if wait is None:
        return None
    used = [g.i for k in values if (g := gpu_key(k)) and g.process]
    busy = [values[f"gpu.{i}.gpu"] for i in set(used) if f"gpu.{i}.gpu" in values]
    cpu = values.get("cpu")
    saturated = single = None
    if cpu is not None and cpu > CPU_BOUND.percent:
        saturated = 100.0
    elif (
        cpu is not None
        and n_cpus is not None
        and n_cpus >= 2
        and SINGLE_CORE.low <= cpu * n_cpus / 100 <= SINGLE_CORE.high
    ):
        single = 100.0
    return decide(
        Shares(
            input=wait,
            overhead=values.get(OVERHEAD_KEY),
            gpu=sum(busy) / len(busy) if busy else None,
            cpu=saturated,
            single=single,
            steps=True,
            gpus=any(gpu_key(k) is not None for k in values),
            job_cpu=cpu,
        )
    )


def table() -> str:
    """The categories and their bands as a Markdown table (the docs' ``verdict`` table)."""
    lines = [
        "| bound | said as | its share (%) | highly at | moderately at |",
        "|---|---|---|---|---|",
    ]
    for c in CATEGORIES:
        highly = "-" if c.highly is None else f"{c.highly:g} %"
        moderately = "-" if c.moderately is None else f"{c.moderately:g} %"
        if c.code in ("cpu", "single-thread"):
            highly, moderately = f"{HIGHLY_SHARE:g} % of the samples", "its rule fired"
        lines.append(f"| `{c.code}` | {c.words} | {c.share} | {highly} | {moderately} |")
    return "\n".join(lines) + "\n"
