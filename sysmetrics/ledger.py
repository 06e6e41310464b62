"""The cost ledger: what a run used in energy (J, kWh), money and gCO2e, and what was counted.

Pure functions of a run's view (:class:`~sysmetrics.runview.RunView`) and the prices
(:class:`Prices`, from the options ``price_per_kwh``, ``price_per_device_hour`` and
``carbon_intensity``: :mod:`sysmetrics.options`, where their environment variables are
declared too). Nothing is looked up on a network: a price or an intensity the user did
not give is absent, never guessed (there is no default price and no default carbon
intensity).

The energy is the growth of the counters the run has (:data:`COUNTERS`): each NVIDIA GPU
the job uses (``gpu.{i}.energyJoules``: NVML's counter, else its power integrated), the
CPU packages (``cpu.energyJoules``, RAPL) and DRAM (``memory.energyJoules``, RAPL). Each
counter is summed over the intervals of a recording where it has a value at both ends
and did not go back (a new monitor counts from zero again). What was not counted is
named (:attr:`NodeLedger.not_counted`): a part without a counter ("CPU packages: no RAPL
counter"), a GPU the job did not use, a counter missing in part of the run, and always
the rest of the machine (fans, disks, network cards, the power supply's losses), which
no counter measures: every figure is a lower bound of the machine's draw.

For each node (a node's samples) and for the job (the nodes' sum):

- **the run**: the energy over the recordings, and the money: kWh x ``price_per_kwh``
  plus each device's hours (the recordings' duration, per GPU the job used and per node)
  x its ``price_per_device_hour``;
- **per step**: over the intervals whose two samples have a step (and every counted
  counter), their energy (and seconds, for the device-hours) over the steps they
  advanced (:func:`energy_per_step`): a step's share of the time between steps
  (evaluations, checkpoints at a known step) included;
- **per 1,000 samples**: per step over the samples per step (``step.samplesPerSecond``
  x ``step.seconds``, averaged over the same intervals by the steps; the samples are the
  whole job's, all ranks): approximate, as the samples per second are (a mean over step
  time, where the batch size is known).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from sysmetrics import options as options_module
from sysmetrics.descriptions import gpu_key
from sysmetrics.runfile import Run
from sysmetrics.runview import RunView

JOULES_PER_KWH = 3.6e6
SAMPLES_PER = 1000  # the ledger's "per 1,000 samples"
COVERED_SHARE = 0.99  # a counter with values over less of the run's time is said to miss part

OPTIONS = ("price_per_kwh", "price_per_device_hour", "carbon_intensity")
"""The ledger's options, declared in :data:`sysmetrics.options.OPTIONS`."""

CPU_KEY = "cpu.energyJoules"
DRAM_KEY = "memory.energyJoules"
COUNTERS = {"cpu": CPU_KEY, "dram": DRAM_KEY}
"""The host's energy counters by part (the GPUs' are ``gpu.{i}.energyJoules``, part ``gpu.{i}``)."""

PART_NAMES = {"cpu": "CPU packages (RAPL)", "dram": "DRAM (RAPL)"}
NOT_COUNTED_REST = "the rest of the machine (fans, disks, network, power supply losses): no counter"
NO_CPU = "CPU packages: no RAPL counter (not readable here, or not an x86 Linux host)"
NO_DRAM = "DRAM: no RAPL DRAM counter"
NO_GPU = "GPUs: none seen with an energy counter"


@dataclass(frozen=True)
class Prices:
    """The prices and the carbon intensity the ledger applies; None (or empty) where not given.

    ``per_kwh``: money per kWh; ``per_device_hour``: ``{"gpu" | "node": money per
    hour}``; ``carbon_intensity``: gCO2e per kWh. Money is in the prices' currency.
    """

    per_kwh: Optional[float] = None
    per_device_hour: Mapping[str, float] = field(default_factory=dict)
    carbon_intensity: Optional[float] = None

    @classmethod
    def of(cls, **given: Any) -> Prices:
        """The prices from the options ``given`` (checked), their environment variables else.

        Raises:
            OptionError: a value is invalid (which option, the value, what is allowed).

        """
        checked = options_module.check(OPTIONS, given)
        return cls(
            checked["price_per_kwh"],
            dict(checked["price_per_device_hour"] or {}),
            checked["carbon_intensity"],
        )

    @property
    def priced(self) -> bool:
        """Whether any price is given (else the ledger has no money figures)."""
        return self.per_kwh is not None or bool(self.per_device_hour)

    def to_json(self) -> dict[str, Any]:
        """The prices as ``--json`` has them."""
        return {
            "price_per_kwh": self.per_kwh,
            "price_per_device_hour": dict(self.per_device_hour),
            "carbon_intensity": self.carbon_intensity,
        }


@dataclass(frozen=True)
class Figures:
    """Energy (J) and what it cost over one scope (a run, a step, 1,000 samples).

    ``money`` (the prices' currency) is None where no price is given, ``gco2e`` where no
    carbon intensity is; ``device_hours``: the devices' hours priced per hour.
    """

    joules: float
    device_hours: Mapping[str, float]
    money: Optional[float]
    gco2e: Optional[float]

    @property
    def kwh(self) -> float:
        """The energy in kWh."""
        return self.joules / JOULES_PER_KWH

    def scaled(self, factor: float) -> Figures:
        """These figures times ``factor`` (per step to per 1,000 samples)."""
        return Figures(
            self.joules * factor,
            {k: v * factor for k, v in self.device_hours.items()},
            None if self.money is None else self.money * factor,
            None if self.gco2e is None else self.gco2e * factor,
        )

    def to_json(self) -> dict[str, Any]:
        """The figures as ``--json`` has them."""
        return {
            "joules": self.joules,
            "kwh": self.kwh,
            "device_hours": dict(self.device_hours),
            "money": self.money,
            "gco2e": self.gco2e,
        }


def figures(joules: float, device_hours: Mapping[str, float], prices: Prices) -> Figures:
    """The money and carbon of ``joules`` and ``device_hours`` ({kind: hours}) at ``prices``."""
    kwh = joules / JOULES_PER_KWH
    money: Optional[float] = None
    if prices.priced:
        money = (kwh * prices.per_kwh if prices.per_kwh is not None else 0.0) + sum(
            hours * prices.per_device_hour[kind]
            for kind, hours in device_hours.items()
            if kind in prices.per_device_hour
        )
    gco2e = None if prices.carbon_intensity is None else kwh * prices.carbon_intensity
    return Figures(joules, dict(device_hours), money, gco2e)


@dataclass(frozen=True)
class NodeLedger:
    """One node's ledger: the parts counted (J each over the run), what was not, the figures.

    ``node`` is None on a run of one node. ``steps``: the steps the per-step figures are
    over (None: the run has no steps with every counter); ``samples_per_step``: the job's
    samples per step there (None where unknown). ``run`` is None where no counter was
    counted (no figure, rather than 0 J); ``per_step`` and ``per_1000_samples`` are None
    where those are.
    """

    node: Optional[int]
    parts: Mapping[str, float]
    not_counted: tuple[str, ...]
    seconds: float
    gpus: int
    steps: Optional[int]
    samples_per_step: Optional[float]
    run: Optional[Figures]
    per_step: Optional[Figures]
    per_1000_samples: Optional[Figures]

    @property
    def counted(self) -> tuple[str, ...]:
        """The parts counted, in words (``GPU 0``, ``CPU packages (RAPL)``, ``DRAM (RAPL)``)."""
        return tuple(part_name(p) for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        """The node's ledger as ``--json`` has it."""
        return {
            "node": self.node,
            "counted": list(self.counted),
            "not_counted": list(self.not_counted),
            "parts_joules": dict(self.parts),
            "seconds": self.seconds,
            "gpus": self.gpus,
            "steps": self.steps,
            "samples_per_step": self.samples_per_step,
            "run": None if self.run is None else self.run.to_json(),
            "per_step": None if self.per_step is None else self.per_step.to_json(),
            "per_1000_samples": (
                None if self.per_1000_samples is None else self.per_1000_samples.to_json()
            ),
        }


@dataclass(frozen=True)
class Ledger:
    """The job's ledger: each node's (:class:`NodeLedger`) and their sums, at ``prices``."""

    prices: Prices
    nodes: tuple[NodeLedger, ...]
    run: Optional[Figures]
    per_step: Optional[Figures]
    per_1000_samples: Optional[Figures]

    @property
    def counted(self) -> bool:
        """Whether any energy counter was counted (else the ledger says only what is missing)."""
        return any(n.parts for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        """The ledger as ``report --json`` has it (key ``ledger``)."""
        return {
            "prices": self.prices.to_json(),
            "job": {
                "run": None if self.run is None else self.run.to_json(),
                "per_step": None if self.per_step is None else self.per_step.to_json(),
                "per_1000_samples": (
                    None if self.per_1000_samples is None else self.per_1000_samples.to_json()
                ),
            },
            "nodes": [n.to_json() for n in self.nodes],
        }

    def lines(self) -> list[str]:
        """The ledger in sentences, for the report page: the job's, then what was counted."""
        out = []
        for scope, f in (
            ("The run", self.run),
            ("Per step", self.per_step),
            (f"Per {SAMPLES_PER:,} samples", self.per_1000_samples),
        ):
            if f is not None:
                out.append(f"{scope}: {said(f)}.")
        for n in self.nodes:
            who = "" if n.node is None else f"Node {n.node}: "
            if n.node is not None and n.run is not None:  # several nodes: each one's too
                figures = [f"the run {said(n.run)}"]
                if n.per_step is not None:
                    figures.append(f"per step {said(n.per_step)}")
                out.append(f"{who}{'; '.join(figures)}.")
            counted = ", ".join(n.counted) or "nothing (no energy counter)"
            out.append(f"{who}counted {counted}; not counted: {'; '.join(n.not_counted)}.")
        return out


def part_name(part: str) -> str:
    """A part's name in words: ``gpu.0`` is ``GPU 0``, ``cpu`` ``CPU packages (RAPL)``."""
    if part.startswith("gpu."):
        return f"GPU {part[4:]}"
    return PART_NAMES.get(part, part)


def energy(joules: float) -> str:
    """Joules for a sentence: ``12.3 J``, ``4.56 kJ``, ``7.89 MJ``."""
    for unit, size in (("GJ", 1e9), ("MJ", 1e6), ("kJ", 1e3)):
        if abs(joules) >= size:
            return f"{joules / size:.3g} {unit}"
    return f"{joules:.3g} J"


def said(f: Figures) -> str:
    """Figures in words: ``4.56 kJ (0.00127 kWh), 0.000381 in money, 0.51 gCO2e``."""
    out = f"{energy(f.joules)} ({f.kwh:.3g} kWh)"
    if f.money is not None:
        out += f", {f.money:.3g} in money"
    if f.gco2e is not None:
        out += f", {f.gco2e:.3g} gCO2e"
    return out


# -- the counting -------------------------------------------------------------------------


def _job_gpus(view: RunView) -> tuple[list[str], list[str]]:
    """The GPU indices whose energy is counted, and those left out (not the job's).

    The job's GPUs (:attr:`RunView.used_gpus`) where the run has ``gpu.process.*`` keys;
    every GPU with a counter where it has none (which the job used is then unknown).
    """
    with_counter = sorted(
        {g.i for key in view.run.columns if (g := gpu_key(key)) and not g.process
         and g.rest == "energyJoules"},
        key=int,
    )  # fmt: skip
    used = view.used_gpus
    if not used:
        return with_counter, []
    return [i for i in with_counter if i in used], [i for i in with_counter if i not in used]


def _parts(view: RunView) -> tuple[dict[str, str], list[str]]:
    """``{part: key}`` of the counters counted, and what was not counted (in words)."""
    columns = view.run.columns
    gpus, others = _job_gpus(view)
    parts = {f"gpu.{i}": f"gpu.{i}.energyJoules" for i in gpus}
    missing = [f"GPU {i}: not used by the job (left out)" for i in others]
    job_gpus = sorted(view.used_gpus, key=int)
    missing += [f"GPU {i}: no energy counter" for i in job_gpus if i not in gpus]
    if not parts and not job_gpus and not others:
        missing.append(NO_GPU)
    for part, key in COUNTERS.items():
        if key in columns and any(v == v for v in columns[key]):
            parts[part] = key
        else:
            missing.append(NO_CPU if part == "cpu" else NO_DRAM)
    return parts, missing


def _rise(column: Sequence[float], a: int, b: int) -> Optional[float]:
    """The counter's rise from sample ``a`` to ``b``; None where unknown or it went back."""
    rise = column[b] - column[a]
    return rise if rise >= 0 else None  # NaN compares false


@dataclass
class _Sums:
    joules: dict[str, float] = field(default_factory=dict)  # part -> J over its intervals
    covered: dict[str, float] = field(default_factory=dict)  # part -> s of its intervals
    seconds: float = 0.0  # s of every interval
    step_joules: float = 0.0  # J over the stepped intervals with every counter
    step_seconds: float = 0.0  # s of those
    steps: int = 0  # the steps they advanced
    samples: float = 0.0  # the job's samples over the stepped intervals where known
    sampled_steps: int = 0  # the steps of those


class _Interval(NamedTuple):
    """From one sample to the next, ``b``, of one recording (``recording``: its number)."""

    recording: int
    b: int
    seconds: float
    rises: dict[str, float]  # part -> J: the counters that rose (or stayed) from a to b
    steps: Optional[int]  # steps advanced; None where a sample has no step or it went back


def _intervals(view: RunView, parts: Mapping[str, str]) -> Iterator[_Interval]:
    """Each interval between two consecutive samples of a recording with both times."""
    run, clock = view.run, view.clock
    columns = {part: run.columns[key] for part, key in parts.items()}
    for k, part_samples in enumerate(view.parts):
        for a, b in zip(part_samples, part_samples[1:]):
            t0, t1 = clock[a], clock[b]
            if t0 is None or t1 is None or t1 <= t0:
                continue
            rises = {}
            for part, column in columns.items():
                rise = _rise(column, a, b)
                if rise is not None:
                    rises[part] = rise
            s0, s1 = run.step[a], run.step[b]
            steps = s1 - s0 if s0 is not None and s1 is not None and s1 >= s0 else None
            yield _Interval(k, b, t1 - t0, rises, steps)


def stepped_energy(view: RunView) -> Iterator[tuple[int, float, int]]:
    """``(recording, joules, steps)`` of each interval where the steps advanced.

    The intervals between two consecutive samples with a step at both ends, a higher one
    at the second, and a rise of every counter the ledger counts (:func:`energy_per_step`
    adds them up; :func:`sysmetrics.compare.energy_per_step` compares them window by
    window). Nothing where the run has no counter.
    """
    parts, _ = _parts(view)
    if not parts:
        return
    for i in _intervals(view, parts):
        if i.steps and len(i.rises) == len(parts):
            yield i.recording, sum(i.rises.values()), i.steps


def _sum(view: RunView, parts: Mapping[str, str]) -> _Sums:
    run = view.run
    sps = run.columns.get("step.samplesPerSecond")
    secs = run.columns.get("step.seconds")
    out = _Sums({p: 0.0 for p in parts}, {p: 0.0 for p in parts})
    for i in _intervals(view, parts):
        out.seconds += i.seconds
        for part, rise in i.rises.items():
            out.joules[part] += rise
            out.covered[part] += i.seconds
        if not parts or len(i.rises) < len(parts) or i.steps is None:
            continue
        out.step_joules += sum(i.rises.values())
        out.step_seconds += i.seconds
        out.steps += i.steps
        if sps is not None and secs is not None and i.steps > 0:
            rate, each = sps[i.b], secs[i.b]
            if rate == rate and each == each:
                out.samples += rate * each * i.steps
                out.sampled_steps += i.steps
    return out


def _hours(seconds: float, gpus: int) -> dict[str, float]:
    return {"gpu": gpus * seconds / 3600.0, "node": seconds / 3600.0}


def node_ledger(view: RunView, prices: Prices, node: Optional[int] = None) -> NodeLedger:
    """One node's ledger from its view (``node``: its rank, in a run of several)."""
    parts, missing = _parts(view)
    sums = _sum(view, parts)
    for part, seconds in sums.covered.items():
        if sums.seconds > 0 and seconds < COVERED_SHARE * sums.seconds:
            missing.append(
                f"{part_name(part)}: counted over {seconds / sums.seconds:.0%} of the run's time "
                "(its counter is missing, or went back, in the rest)"
            )
    missing.append(NOT_COUNTED_REST)
    gpus = sum(1 for p in parts if p.startswith("gpu."))
    total = (
        figures(math.fsum(sums.joules.values()), _hours(sums.seconds, gpus), prices)
        if parts
        else None
    )
    per_step = per_1000 = None
    samples_per_step = None
    if sums.steps > 0:
        per_step = figures(
            sums.step_joules / sums.steps, _hours(sums.step_seconds / sums.steps, gpus), prices
        )
        if sums.sampled_steps > 0 and sums.samples > 0:
            samples_per_step = sums.samples / sums.sampled_steps
            per_1000 = per_step.scaled(SAMPLES_PER / samples_per_step)
    return NodeLedger(
        node,
        {p: sums.joules[p] for p in parts},
        tuple(missing),
        sums.seconds,
        gpus,
        sums.steps if sums.steps > 0 else None,
        samples_per_step,
        total,
        per_step,
        per_1000,
    )


def energy_per_step(view: RunView) -> Optional[float]:
    """Joules per step of one node's run: every counter counted, over the stepped intervals.

    The energy of the intervals whose two samples have a step and a value of every
    counter the ledger counts (the job's GPUs, RAPL packages, DRAM), over the steps they
    advanced; None where there are no such steps or no counter.
    """
    parts, _ = _parts(view)
    if not parts:
        return None
    sums = _sum(view, parts)
    return sums.step_joules / sums.steps if sums.steps > 0 else None


def _add(items: Sequence[Figures]) -> Figures:
    def total(values: Sequence[Optional[float]]) -> Optional[float]:
        return None if any(v is None for v in values) else math.fsum(v for v in values if v)

    hours: dict[str, float] = {}
    for f in items:
        for kind, h in f.device_hours.items():
            hours[kind] = hours.get(kind, 0.0) + h
    return Figures(
        math.fsum(f.joules for f in items),
        hours,
        total([f.money for f in items]),
        total([f.gco2e for f in items]),
    )


def ledger(nodes: Sequence[tuple[Optional[int], RunView]], prices: Prices) -> Ledger:
    """The job's ledger from each node's view (``(rank or None, view)``) at ``prices``.

    The job's figures are the nodes' sums (per step too: each node does every step);
    per 1,000 samples, the job's energy per step over the samples per step (the median
    of the nodes': each node's ``step.samplesPerSecond`` is the whole job's). None where
    a node lacks the figure (the sum would be less than the job's).
    """
    each = tuple(node_ledger(v, prices, k) for k, v in nodes)
    counted = [n for n in each if n.parts]
    totals = [n.run for n in counted if n.run is not None]
    run = _add(totals) if totals else None
    steps = [n.per_step for n in counted]
    per_step = _add([s for s in steps if s is not None]) if counted and None not in steps else None
    per_1000 = None
    rates = sorted(n.samples_per_step for n in counted if n.samples_per_step is not None)
    if per_step is not None and rates and len(rates) == len(counted):
        per_1000 = per_step.scaled(SAMPLES_PER / rates[len(rates) // 2])
    return Ledger(prices, each, run, per_step, per_1000)


def run_ledger(run: Run, prices: Prices) -> Ledger:
    """:func:`ledger` of a run read from its files: each node's samples, a view each."""
    nodes = run.by_node()
    several = len(nodes) > 1
    return ledger([(k if several else None, RunView(part)) for k, part in nodes], prices)


# -- live: the panel's line and the exporter's gauges, from a monitor's latest values ------


def live_parts(latest: Mapping[str, float]) -> tuple[dict[str, float], list[str]]:
    """``{part: J since the monitor started}`` of the counters in ``latest``, and the missing.

    The job's GPUs are those with a ``gpu.process.{i}.*`` key where any GPU has one, else
    every GPU with a counter (as :func:`node_ledger`).
    """
    used = {g.i for key in latest if (g := gpu_key(key)) and g.process}
    parts: dict[str, float] = {}
    for key, value in latest.items():
        g = gpu_key(key)
        if g is not None and not g.process and g.rest == "energyJoules" and (
            not used or g.i in used
        ):  # fmt: skip
            parts[f"gpu.{g.i}"] = value
    missing = [] if parts else ["gpu"]
    for part, key in COUNTERS.items():
        if key in latest:
            parts[part] = latest[key]
        else:
            missing.append(part)
    return dict(sorted(parts.items())), missing


def live_line(latest: Mapping[str, float], prices: Prices) -> Optional[str]:
    """The panel's cost line: energy so far (and per step), money and gCO2e at ``prices``.

    ``energy  41.2 kJ (0.0114 kWh) so far, 3.2 kJ/step · 0.0034 money · 4.6 gCO2e
    (counted: GPU 0, CPU packages; not: DRAM)``; None where no counter is read. Money here
    is the energy's alone (device-hours need the run's duration: the report has them).
    """
    parts, missing = live_parts(latest)
    if not parts:
        return None
    joules = math.fsum(parts.values())
    kwh = joules / JOULES_PER_KWH
    out = f"energy  {energy(joules)} ({kwh:.3g} kWh) so far"
    per_step = latest.get("step.energyJoules")
    if per_step is not None:
        out += f", {energy(per_step)}/step"
    if prices.per_kwh is not None:
        out += f" \N{MIDDLE DOT} {kwh * prices.per_kwh:.3g} money"
    if prices.carbon_intensity is not None:
        out += f" \N{MIDDLE DOT} {kwh * prices.carbon_intensity:.3g} gCO2e"
    names = {"gpu": "GPU", "cpu": "CPU packages", "dram": "DRAM"}
    out += f" (counted: {', '.join(part_name(p).replace(' (RAPL)', '') for p in parts)}"
    out += f"; not: {', '.join(names[m] for m in missing)})" if missing else ")"
    return out


# -- the command line: record's and report's flags for the prices ---------------------------


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the ledger's options' flags to ``parser`` (``report``; ``record`` has them already).

    From their declarations in :data:`sysmetrics.options.OPTIONS`, as ``record``'s
    (:func:`sysmetrics.cli.add_flags`).
    """
    for name in OPTIONS:
        o = options_module.BY_NAME[name]
        assert o.flag is not None and o.cli is not None and o.cli.metavar is not None
        parser.add_argument(
            o.flag,
            dest=o.name,
            type=o.cli.parse or str,
            action="append" if o.cli.repeatable else "store",
            default=None,
            metavar=o.cli.metavar,
            help=o.cli.help,
        )


def prices_of(args: argparse.Namespace) -> Prices:
    """The prices record's or report's flags give (their environment variables else).

    Raises:
        OptionError: a value is invalid (the option, the value, what is allowed).

    """
    given = {}
    for name in OPTIONS:
        o = options_module.BY_NAME[name]
        value = getattr(args, name, None)
        if value is not None and o.cli is not None:
            given[name] = o.cli.convert(value)
    return Prices.of(**given)


# -- the Prometheus exporter's ledger series (sysmetrics.sinks.prometheus) ------------------


class LiveSeries(NamedTuple):
    """One ledger series of the exporter: name (prefix included), kind, help, unit, value.

    Its labels are :data:`LIVE_LABELS` and the exporter's ``host``, ``node``, ``run``.
    """

    name: str
    kind: str  # "counter" or "gauge"
    help: str
    unit: str
    value: float


LIVE_LABELS = ("counted", "missing")
"""The ledger series' own labels: the parts counted and those missing, comma-separated
(``counted="cpu,gpu.0"``, ``missing="dram"``): one series per set of parts, so bounded."""

ENERGY_SERIES = "sysmetrics_energy_joules_total"
COST_SERIES = "sysmetrics_energy_cost_total"
CARBON_SERIES = "sysmetrics_energy_carbon_grams_total"
STEP_COST_SERIES = "sysmetrics_training_step_cost"
STEP_CARBON_SERIES = "sysmetrics_training_step_carbon_grams"


def live_series(
    latest: Mapping[str, float], prices: Prices
) -> tuple[list[LiveSeries], tuple[str, str]]:
    """The exporter's ledger series from a monitor's latest values, and their two labels.

    The energy of every counter read since the monitor started (J), where one is; its
    money at ``price_per_kwh`` and its gCO2e at ``carbon_intensity`` where given; per
    step (``step.energyJoules``) the same two as gauges. Device-hours are the report's
    alone (the exporter does not know the run's duration).
    """
    parts, missing = live_parts(latest)
    labels = (",".join(parts), ",".join(missing))
    if not parts:
        return [], labels
    kwh = math.fsum(parts.values()) / JOULES_PER_KWH
    out = [LiveSeries(ENERGY_SERIES, "counter", "Energy of the counters read since the monitor "
                      "started (the job's GPUs, RAPL packages, DRAM: label counted)",
                      "joules", kwh * JOULES_PER_KWH)]  # fmt: skip
    step = latest.get("step.energyJoules")
    step_kwh = None if step is None else step / JOULES_PER_KWH
    if prices.per_kwh is not None:
        out.append(LiveSeries(COST_SERIES, "counter", "Money of that energy at price_per_kwh "
                              "(the price's currency)", "", kwh * prices.per_kwh))  # fmt: skip
        if step_kwh is not None:
            out.append(LiveSeries(STEP_COST_SERIES, "gauge", "Money of a step's energy "
                                  "(step.energyJoules) at price_per_kwh", "",
                                  step_kwh * prices.per_kwh))  # fmt: skip
    if prices.carbon_intensity is not None:
        out.append(LiveSeries(CARBON_SERIES, "counter", "gCO2e of that energy at carbon_intensity",
                              "grams", kwh * prices.carbon_intensity))  # fmt: skip
        if step_kwh is not None:
            out.append(LiveSeries(STEP_CARBON_SERIES, "gauge", "gCO2e of a step's energy "
                                  "(step.energyJoules) at carbon_intensity", "grams",
                                  step_kwh * prices.carbon_intensity))  # fmt: skip
    return out, labels
