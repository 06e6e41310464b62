"""The labelled diagnosis suite (issue 32): how often the findings are right.

It runs each scenario of ``labels.py`` for real, judges ``sysmetrics report --json``
against its label and the machine's measured state, and prints per-rule precision and
recall, top-cause accuracy, false warnings on healthy controls and abstentions.

``python benchmarks/diagnosis/suite.py`` (``make diagnosis``) runs every scenario, one at a
time (about 20-60 s each); ``--quick`` the subset marked quick; ``--only NAME ...`` the
named ones; ``--json PATH`` also writes the results. Each run's files are kept under
``--work`` (a temporary directory by default).

While a scenario runs, the harness reads ``/proc`` every :data:`WATCH_S` s: the host's
busy CPUs (``/proc/stat``) and the job's (the CPU time of the process tree it started,
``/proc/<pid>/stat``); what is left are the other processes' CPUs. A label holds only
where its premise held (:data:`PREMISES`); else the scenario is void, not scored. Where
other processes kept at least :data:`CONTENDED_CPUS` CPUs busy, ``contention`` is true
whatever the label says: it is then neither required nor a false warning.

Scores, over the scored scenarios: a rule fires rightly where the label requires it
(true positive), wrongly where the label forbids it (a healthy control forbids every
rule); precision = right / (right + wrong), recall = right / required. The top cause is
right where the report's first finding is of the label's ``top`` rule and its sentence
matches ``cause`` (a healthy control: no finding at all). An abstention: a scenario
with required rules where nothing fired. The input-bound sub-cause: ``cause`` matched in
the scenarios whose top is ``input-bound``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import gpu_runs  # noqa: E402
from labels import BY_NAME, HEALTHY, SCENARIOS, Scenario  # noqa: E402

WATCH_S = 0.5  # s between two readings of /proc
CONTENDED_CPUS = 0.8  # CPUs' worth used by other processes: the host is contended
SATURATED_SHARE = 0.8  # the job's CPUs over the machine's: saturated
HOST_BUSY_PERCENT = 90.0  # the host's busy % above which single-core leaves a sample out
FREE_SHARE = 0.5  # ... and the share of readings below it for a host "free"
CGROUP_ROOT = "/sys/fs/cgroup/memory"
TICK = os.sysconf("SC_CLK_TCK")
NCPUS = os.cpu_count() or 1
PYTHON = sys.executable


# ---- the machine's state, from /proc -----------------------------------------------------


def _host() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def _tree(root: int) -> float:
    """CPU jiffies of ``root`` and its descendants (their reaped children's included)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(name)
        parents[pid] = int(rest[1])
        times[pid] = sum(float(x) for x in rest[11:15])  # utime stime cutime cstime
    mine = {root}
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return sum(times.get(p, 0.0) for p in mine)


class Watch(threading.Thread):
    """Reads the host's and a process tree's CPU time every :data:`WATCH_S` s."""

    def __init__(self) -> None:
        super().__init__(name="diagnosis-watch", daemon=True)
        self.roots: list[int] = []
        self.done = threading.Event()
        self.host_cpus: list[float] = []  # CPUs' worth busy, per reading
        self.job_cpus: list[float] = []
        self._job_last = 0.0  # the job tree's jiffies at the last reading (only grows)

    def run(self) -> None:
        """Read until :attr:`done` is set."""
        busy, total = _host()
        job = 0.0
        while not self.done.wait(WATCH_S):
            b, t = _host()
            j = max(job, sum(_tree(r) for r in self.roots))
            if t > total:  # t - total: jiffies of all CPUs, NCPUS per tick of wall time
                self.host_cpus.append(NCPUS * (b - busy) / (t - total))
                self.job_cpus.append(min(float(NCPUS), NCPUS * (j - job) / (t - total)))
            busy, total, job = b, t, j

    def state(self) -> dict[str, float]:
        """Means over the readings: the host's, the job's and the others' CPUs."""
        if not self.host_cpus:
            return {}
        host, job = statistics.mean(self.host_cpus), statistics.mean(self.job_cpus)
        free = sum(h < NCPUS * HOST_BUSY_PERCENT / 100 for h in self.host_cpus)
        return {
            "host_cpus": host,
            "job_cpus": job,
            "others_cpus": max(0.0, host - job),
            "host_free_share": free / len(self.host_cpus),
        }


# ---- running a scenario ------------------------------------------------------------------


@dataclass
class Outcome:
    """What one scenario gave."""

    scenario: Scenario
    fired: list[tuple[str, str]] = field(default_factory=list)  # (rule, sentence), in order
    state: dict[str, float] = field(default_factory=dict)
    void: str = ""  # why the premise did not hold
    seconds: float = 0.0
    median_step: Optional[float] = None  # s: the run's median step.seconds
    mean_step: Optional[float] = None  # s: the run's wall-clock seconds per step
    predicted: Optional[float] = None  # times: the top finding's gain_times (item 5)
    verdict: str = ""  # the report's verdict, its label
    live: list[str] = field(default_factory=list)  # the live findings said on stderr
    error: str = ""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _record(run_file: Path, args: tuple[str, ...], interval: float) -> list[str]:
    return [PYTHON, "-m", "sysmetrics", "record", "-o", str(run_file), "--interval",
            str(interval), "--", PYTHON, str(HERE / "workloads.py"), *args]  # fmt: skip


def _cgroup(limit_mib: int) -> Optional[str]:
    """A cgroup v1 memory cgroup limited to ``limit_mib``; None where there is none."""
    if not os.path.isdir(CGROUP_ROOT) or os.geteuid() != 0:
        return None
    path = os.path.join(CGROUP_ROOT, f"sysmetrics-diagnosis-{os.getpid()}-{limit_mib}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit_mib << 20))
    except OSError:
        return None
    return path


def _join(path: str) -> None:
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def _children(pid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    return out


def _in_kernel(s: Scenario, run_file: Path, work: Path, watch: Watch) -> tuple[list[str], str]:
    """Run ``s``'s workload in a real Jupyter kernel, as a notebook's cell runs it.

    ipykernel started by jupyter_client (a notebook's frontend does the same through the
    Jupyter server), the workload run in the kernel's own process by one ``execute``
    request, its output (the progress bar, the live findings) read from the kernel's
    iopub channel as a frontend reads it. ``watch`` is started on the kernel's process.
    Returns the live findings said and an error ('' where the cell ran).
    """
    from jupyter_client.manager import KernelManager

    argv = [str(HERE / "workloads.py"), *s.args, "--run-file", str(run_file),
            "--interval", str(s.interval), "--logs", str(work / "logs"),
            "--scratch", str(work / "checkpoint.bin")]  # fmt: skip
    code = (f"import runpy, sys\nsys.argv = {argv!r}\n"
            f"runpy.run_path(sys.argv[0], run_name='__main__')")  # fmt: skip
    km = KernelManager(kernel_name="python3")
    # the kernel process's own stderr (its TCP warning); the cell's goes to iopub
    km.start_kernel(env=_env(), cwd=str(work), stderr=subprocess.DEVNULL)
    kc = km.client()
    stderr, error = [], ""
    try:
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
        pid = km.provisioner.pid if km.provisioner is not None else None
        watch.roots = [pid] if pid else []
        watch.start()
        msg_id = kc.execute(code)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            msg = kc.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stderr":
                stderr.append(content["text"])
            elif kind == "error":
                error = f"the cell raised {content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        else:
            error = "the cell ran past 300 s"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(stderr)
    live = [line for line in re.split(r"[\r\n]", text) if line.startswith("sysmetrics: ")]
    return live, error


def _report(files: list[Path], o: Outcome) -> list[tuple[str, str]]:
    """The report's findings (rule, sentence); sets ``o``'s predicted gain and verdict."""
    done = subprocess.run(
        [PYTHON, "-m", "sysmetrics", "report", "--json", *map(str, files)],
        capture_output=True, text=True, env=_env(), timeout=120, check=True,
    )  # fmt: skip
    document = json.loads(done.stdout)
    found = document["findings"]
    top = [f for f in found if f["rule"] == o.scenario.top]
    if top:
        o.predicted = top[0]["evidence"].get("gain_times")
    if document.get("verdict"):
        o.verdict = document["verdict"]["label"]
    return [(f["rule"], f["sentence"]) for f in found]


def _mean_step(files: list[Path]) -> Optional[float]:
    """The run's wall-clock seconds per step, stalls and slow steps included."""
    from sysmetrics.findings import memo, read_run
    from sysmetrics.findings.gains import wall_per_step

    with memo():
        means = [m for f in files if f.exists() and (m := wall_per_step(read_run(f))) is not None]
    return statistics.mean(means) if means else None  # several nodes: their mean


def _median_step(files: list[Path]) -> Optional[float]:
    values = []
    for path in files:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError, AttributeError):
                    v = json.loads(line).get("metrics", {}).get("step.seconds")
                    if isinstance(v, float):
                        values.append(v)
    return statistics.median(values) if values else None


def run(s: Scenario, work: Path) -> Outcome:
    """Run scenario ``s`` in folder ``work`` and judge nothing yet."""
    out = Outcome(s)
    work.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    if s.kind == "crafted":
        path = work / "run.jsonl"
        path.write_bytes(gpu_runs.RUNS[s.name]())
        out.fired = _report([path], out)
        out.seconds = time.monotonic() - start
        return out
    cgroup = None
    for premise in s.premise:
        if premise.startswith("cgroup_"):
            cgroup = _cgroup(int(premise.split("_")[1]))
            if cgroup is None:
                out.void = f"no cgroup v1 memory controller to use at {CGROUP_ROOT} (as root)"
                return out
    watch = Watch()
    burner = None
    if "others_busy" in s.premise:  # a process outside the job spinning on one CPU
        burner = subprocess.Popen([PYTHON, "-c", "while True: pass"])
    procs: list[subprocess.Popen[str]] = []
    files: list[Path] = []
    try:
        if s.kind == "nodes":
            for k, args in enumerate((s.args, s.args1)):
                files.append(work / f"node{k}.jsonl")
                procs.append(subprocess.Popen(
                    _record(files[-1], args, s.interval), env=_env(NODE_RANK=str(k)),
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=work,
                ))  # fmt: skip
        elif s.kind == "record":
            files.append(work / "run.jsonl")
            procs.append(subprocess.Popen(
                _record(files[-1], s.args, s.interval), env=_env(), cwd=work,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                preexec_fn=(lambda: _join(cgroup)) if cgroup else None,
            ))  # fmt: skip
        elif s.kind == "notebook":
            files.append(work / "run.jsonl")
            out.live, out.error = _in_kernel(s, files[-1], work, watch)
        else:  # callback
            files.append(work / "run.jsonl")
            cmd = [PYTHON, str(HERE / "workloads.py"), *s.args, "--run-file", str(files[-1]),
                   "--interval", str(s.interval), "--logs", str(work / "logs"),
                   "--scratch", str(work / "checkpoint.bin")]  # fmt: skip
            procs.append(subprocess.Popen(cmd, env=_env(), cwd=work, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))  # fmt: skip
        if s.kind != "notebook":
            watch.roots = [p.pid for p in procs]
            watch.start()
        if s.kill_after:
            time.sleep(s.kill_after)
            for p in procs:  # the workload under record: killed, as a job killed for time
                for child in _children(p.pid):
                    with contextlib.suppress(OSError):
                        os.kill(child, signal.SIGKILL)
        errs = [p.communicate(timeout=300)[1] for p in procs]
        out.live += [
            line for e in errs for line in e.splitlines() if line.startswith("sysmetrics: ")
        ]
    finally:
        watch.done.set()
        if watch.ident is not None:
            watch.join()
        if burner is not None:
            burner.kill()
            burner.wait()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if cgroup is not None:
            with contextlib.suppress(OSError):
                os.rmdir(cgroup)
    out.seconds = time.monotonic() - start
    out.state = watch.state()
    out.void = _void(s, out.state)
    try:
        out.fired = _report(files, out)
    except (subprocess.SubprocessError, ValueError, KeyError) as exc:
        out.error = f"report failed: {exc}"
    out.median_step = _median_step(files)
    out.mean_step = _mean_step(files)
    return out


PREMISES = {
    "job_saturated": "the job's CPU at least 80 % of the machine's",
    "host_free": "the host under 90 % busy in at least half the readings",
    "others_busy": "other processes at least 0.8 CPUs busy",
    "job_one_cpu": "the job at about one CPU's worth (the single-core rule's low to high, "
    "mean of the readings): what others left it on a saturated host",
    "cgroup_2048": "a cgroup v1 memory limit of 2 GiB set on the job",
}
"""What each premise means (the cgroup ones are set up, not measured)."""


def _void(s: Scenario, state: dict[str, float]) -> str:
    """Why ``s``'s premise did not hold, measured; '' where it held."""
    if not state:
        return "no readings of /proc"
    if "job_saturated" in s.premise and state["job_cpus"] < SATURATED_SHARE * NCPUS:
        return f"the job used {state['job_cpus']:.2f} of {NCPUS} CPUs, not saturated"
    if "host_free" in s.premise and state["host_free_share"] < FREE_SHARE:
        return f"the host was over 90 % busy in {1 - state['host_free_share']:.0%} of readings"
    if "others_busy" in s.premise and state["others_cpus"] < CONTENDED_CPUS:
        return f"other processes used only {state['others_cpus']:.2f} CPUs"
    if "job_one_cpu" in s.premise:
        from sysmetrics.findings.cpu import SINGLE_CORE  # the rule's own range

        if not SINGLE_CORE.low <= state["job_cpus"] <= SINGLE_CORE.high:
            return f"the job got {state['job_cpus']:.2f} CPUs, not about one CPU's worth"
    return ""


# ---- judging -------------------------------------------------------------------------------


@dataclass
class Verdict:
    """One scenario judged against its label."""

    outcome: Outcome
    rules: set[str]  # fired, less what the measured state made true anyway
    required: set[str]
    forbidden: set[str]
    top_right: bool
    missing: set[str]
    wrong: set[str]
    abstained: bool

    @property
    def passed(self) -> bool:
        """Every required rule fired, no forbidden one did, and the top cause is right."""
        return not self.missing and not self.wrong and self.top_right


def judge(o: Outcome, all_rules: set[str]) -> Verdict:
    """``o`` against its label and its measured state."""
    s = o.scenario
    contended = o.state.get("others_cpus", 0.0) >= CONTENDED_CPUS
    allowed = {"contention"} if contended and "contention" not in s.must else set()
    fired = [(r, t) for r, t in o.fired if r not in allowed]
    rules = {r for r, _ in fired}
    required = set(s.must)
    forbidden = (all_rules if s.top == HEALTHY and not s.must else set(s.must_not)) - allowed
    if s.top == HEALTHY:
        top_right = not (rules & forbidden) and required <= rules
    else:
        top_right = bool(fired) and fired[0][0] == s.top and bool(re.search(s.cause, fired[0][1]))
    return Verdict(o, rules, required, forbidden, top_right, required - rules,
                   rules & forbidden, bool(required) and not rules)  # fmt: skip


def table(verdicts: list[Verdict], voids: list[Outcome], all_rules: list[str]) -> str:
    """The accuracy table, as text (Markdown)."""
    lines = [
        "| scenario | fired | label | top cause | result | issue 32 | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        s = v.outcome.scenario
        label = " ".join([*(f"+{r}" for r in s.must), *(f"-{r}" for r in s.must_not)])
        label = label or "healthy: no finding"
        fired = ", ".join(r for r, _ in v.outcome.fired) or "none"
        result = "pass" if v.passed else "FAIL" + (
            f" (missing {', '.join(sorted(v.missing))})" if v.missing else "") + (
            f" (wrong {', '.join(sorted(v.wrong))})" if v.wrong else "") + (
            "" if v.top_right else " (top cause)")  # fmt: skip
        lines.append(f"| {s.name} | {fired} | {label} | "
                     f"{'right' if v.top_right else 'wrong'} | {result} | {s.issue} | "
                     f"{v.outcome.verdict} |")  # fmt: skip
    for o in voids:
        lines.append(
            f"| {o.scenario.name} | - | - | - | void: {o.void or o.error} | {o.scenario.issue} "
            f"| {o.verdict} |"
        )
    lines += ["", "| rule | required | fired rightly | fired wrongly | precision | recall |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for rule in all_rules:
        req = sum(rule in v.required for v in verdicts)
        tp = sum(rule in v.required and rule in v.rules for v in verdicts)
        fp = sum(rule in v.forbidden and rule in v.rules for v in verdicts)
        if not (req or fp or any(rule in v.forbidden for v in verdicts)):
            continue
        precision = f"{tp / (tp + fp):.0%}" if tp + fp else "-"
        recall = f"{tp / req:.0%}" if req else "-"
        lines.append(f"| {rule} | {req} | {tp} | {fp} | {precision} | {recall} |")
    n = len(verdicts)
    top = sum(v.top_right for v in verdicts)
    healthy = [v for v in verdicts if v.outcome.scenario.top == HEALTHY and not v.required]
    false_warn = sum(bool(v.wrong) for v in healthy)
    sub = [v for v in verdicts if v.outcome.scenario.top == "input-bound"]
    sub_right = sum(v.top_right for v in sub)
    lines += [
        "",
        f"- scenarios: {n} scored, {len(voids)} void; all labels met: "
        f"{sum(v.passed for v in verdicts)} of {n}",
        f"- top cause right: {top} of {n} ({top / n:.0%}; target >= 90 %)" if n else "",
        f"- false warnings on healthy controls: {false_warn} of {len(healthy)} (target 0)",
        f"- input-bound sub-cause right: {sub_right} of {len(sub)}"
        + (f" ({sub_right / len(sub):.0%}; target >= 85 %)" if sub else ""),
        f"- abstentions (a required finding, nothing said): {sum(v.abstained for v in verdicts)}",
    ]
    return "\n".join(lines)


GAIN_TOLERANCE = 0.25  # the predicted gain within this share of the realised one ...
GAIN_TARGET = 0.8  # ... in at least this share of the fixed variants (issue 32 item 5)


def gains(outcomes: list[Outcome]) -> str:
    """Each fixed variant's realised speed-up over its broken scenario, and the predicted.

    Realised: the broken run's wall-clock seconds per step over the fixed run's (every
    step counted: a slow step or a stall is in it, not the median's). Predicted: the
    ``gain_times`` of the broken run's top finding (its advice's "up to"). Within
    :data:`GAIN_TOLERANCE` of each other, or not.
    """
    by = {o.scenario.name: o for o in outcomes}
    lines = [
        "| broken -> fixed | wall s per step | median step | realised | predicted | error | "
        "within +-25 % |",
        "|---|---|---|---|---|---|---|",
    ]
    judged = within = 0
    for o in outcomes:
        broken = by.get(o.scenario.fixes)
        if broken is None or not broken.mean_step or not o.mean_step:
            continue
        realised = broken.mean_step / o.mean_step
        median = (
            f"{broken.median_step:.3f} -> {o.median_step:.3f}"
            if broken.median_step and o.median_step
            else "-"
        )
        if broken.predicted:
            error = broken.predicted / realised - 1
            ok = abs(error) <= GAIN_TOLERANCE
            judged += 1
            within += ok
            said = f"{broken.predicted:.2f}x | {error:+.0%} | {'yes' if ok else 'no'}"
        else:
            said = "none (no finding of its top rule) | - | no"
            judged += 1
        void = " (broken run void)" if broken.void else ""
        lines.append(
            f"| {broken.scenario.name} -> {o.scenario.name}{void} | {broken.mean_step:.3f} -> "
            f"{o.mean_step:.3f} | {median} | {realised:.2f}x | {said} |"
        )
    if not judged:
        return ""
    lines += [
        "",
        f"- predicted gain within +-25 % of the realised: {within} of {judged} "
        f"({within / judged:.0%}; target >= {GAIN_TARGET:.0%})",
    ]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])  # the summary
    p.add_argument("--quick", action="store_true", help="only the scenarios marked quick")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--work", metavar="DIR", help="keep each run's files here")
    p.add_argument("--rejudge", metavar="PATH", help="judge a --json file's runs again")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from sysmetrics.findings.registry import REGISTRY

    all_rules = [r.code for r in REGISTRY]
    chosen = [s for s in SCENARIOS if (not args.quick or s.quick)
              and (not args.only or s.name in args.only)]  # fmt: skip
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="diagnosis-"))
    began = time.monotonic()
    outcomes = []
    if args.rejudge:  # the runs of a previous --json, judged by the labels as they are now
        kept = json.loads(Path(args.rejudge).read_text())
        for r in kept["scenarios"]:
            if r["name"] in BY_NAME and BY_NAME[r["name"]] in chosen:
                o = Outcome(BY_NAME[r["name"]], [tuple(f) for f in r["fired"]], r["state"])
                o.void, o.error, o.seconds = r["void"], r["error"], r["seconds"]
                o.median_step, o.live = r["median_step"], r["live"]
                o.mean_step, o.predicted = r.get("mean_step"), r.get("predicted")
                o.verdict = r.get("verdict", "")
                o.void = o.void or (_void(o.scenario, o.state) if o.state else "")
                outcomes.append(o)
        chosen = [o.scenario for o in outcomes]
    for s in chosen if not args.rejudge else ():
        o = run(s, work / s.name)
        outcomes.append(o)
        state = " ".join(f"{k}={v:.2f}" for k, v in o.state.items())
        print(f"{s.name}: {o.seconds:.0f} s; fired {[r for r, _ in o.fired]} "
              f"verdict {o.verdict!r} "
              f"{state} {('VOID: ' + o.void) if o.void else ''}{o.error}", flush=True)  # fmt: skip
    scored = [o for o in outcomes if not o.void and not o.error]
    verdicts = [judge(o, set(all_rules)) for o in scored]
    voids = [o for o in outcomes if o.void or o.error]
    text = table(verdicts, voids, all_rules)
    took = time.monotonic() - began
    head = (f"Diagnosis suite, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{platform.node() or 'host'}: {platform.processor() or platform.machine()}, "
            f"{NCPUS} CPUs, Python {platform.python_version()}; {len(chosen)} scenarios in "
            f"{took / 60:.1f} min")  # fmt: skip
    if args.rejudge:
        head = f"{kept['head']} (judged again by the labels of {time.strftime('%Y-%m-%d')})"
    print("\n" + head + "\n\n" + text)
    g = gains(outcomes)
    if g:
        print("\nPredicted and realised gains of the fixed variants (issue 32 item 5):\n\n" + g)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "head": head, "table": text, "gains": g,
            "scenarios": [{"name": o.scenario.name, "fired": o.fired, "state": o.state,
                           "void": o.void, "error": o.error, "seconds": o.seconds,
                           "median_step": o.median_step, "mean_step": o.mean_step,
                           "predicted": o.predicted, "verdict": o.verdict,
                           "live": o.live} for o in outcomes],
        }, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
