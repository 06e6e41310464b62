"""GPU truth in one command: ``make gpu-check`` (``python benchmarks/gpu_check.py --out DIR``).

On a machine without an NVIDIA GPU (no ``nvidia-smi``, or one that lists no GPU) it prints
one line saying so and exits 0 at once. On a Linux machine with one, from a fresh clone and
offline, within 15 minutes on one GPU:

1. setup: a venv in DIR/venv with ``--system-site-packages`` over the Python running this
   script (``--python`` to pick another; an outer venv's packages are added with a
   ``.pth``), so the machine's own torch, Lightning, transformers and Keras are used;
   what it lacks (sysmetrics' dependencies, pytest and hypothesis, the ``[report]``
   extra, tensorboard, Keras) is installed only from the wheel folder that
   ``make gpu-wheels`` fills (``--wheels``, default ``.gpu-wheels``), with
   ``pip --no-index``; then sysmetrics itself, editable, without dependencies. The rest
   runs in that venv (this script again, ``--stage run``).
2. ``pytest -m gpu`` (real NVML, no fakes) on the test files with that mark, and
   ``benchmarks/nvidia_tick.py``.
3. about a minute of training of an MLP on GPU 0 under each callback (Lightning with CSV
   and TensorBoard loggers, transformers' Trainer reporting to TensorBoard with its log
   history as CSV, Keras on the torch backend with ``CSVLogger``) and under
   ``sysmetrics record`` with ``sysmetrics.step(n)``, then ``sysmetrics report`` of that
   run; a framework that is missing is skipped with the reason
   (``benchmarks/gpu_check_train.py`` holds the workloads).
4. during each training, ``nvidia-smi --query-gpu=utilization.gpu,memory.used,
   temperature.gpu,power.draw,clocks.sm,clocks.mem --format=csv,noheader,nounits`` every
   2 s; each value read in the steady part is compared with the run file's nearest
   sample of ``gpu.{i}.gpu``, ``memoryAllocatedBytes``, ``temp``, ``powerWatts``,
   ``smClock``, ``memoryClock`` (utilization within 10 points, memory within 1 %, power
   within 10 %, clocks equal, temperature within 1 °C). nvidia-smi numbers GPUs as NVML
   does, which is sysmetrics' ``{i}`` when ``CUDA_VISIBLE_DEVICES`` is unset (the check
   unsets it).
5. attribution, in the ``record`` run: ``gpu.process.0.*`` in every steady sample (the job
   trains on GPU 0), ``gpu.process.{j}.*`` in none for any other GPU, and a separate
   ``python -c`` torch process holding 2 GiB on GPU 0 for 20 s is not counted.
6. the training step-time ratio with and without the callback at 1 s and 0.1 s
   (``benchmarks/overhead.py``'s table 2 on the GPU, alternating runs, medians) and the
   NVIDIA collector's CPU µs per tick per GPU.

Everything goes under DIR: checks.json (pass/fail/skip per check), summary.txt (the
table printed at the end), each phase's log, each workload's folder (run file,
nvidia-smi readings, the comparison side by side, logger CSVs and TensorBoard files),
record/report.html, overhead/result.json. Each phase has a time bound; one that overruns
is killed and fails with that reason; the whole check stops starting phases after 15
minutes. Exit status 1 if a check failed, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_logic as logic
from gpu_check_logic import Check

ROOT = Path(__file__).resolve().parent.parent
TOTAL_S = 15 * 60
SMI_PERIOD_S = 2.0
INTERVAL_S = 0.5  # sysmetrics' sampling interval in the trainings
INTRUDER_BYTES = 2 << 30
INTRUDER_HOLD_S = 20.0
OFFLINE = {
    "PIP_NO_INDEX": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "KERAS_BACKEND": "torch",
    "PYTHONUNBUFFERED": "1",
}
# pip requirement groups from the wheel folder: (name, requirements, needed to go on)
WHEEL_GROUPS = [
    ("build backend", ["setuptools>=69", "wheel"], True),
    (
        "sysmetrics' dependencies",
        ["psutil>=5.9", "nvidia-ml-py>=12.535", "typing_extensions>=4.5"],
        True,
    ),
    ("test packages", ["pytest>=8", "hypothesis>=6.100"], True),
    ("[report] extra", ["matplotlib>=3.6", "orjson>=3.9"], False),
    ("tensorboard", ["tensorboard>=2.14"], False),
    ("keras", ["keras>=3.0"], False),
]


def gpu_present(timeout: float = 15.0) -> tuple[bool, str]:
    """Whether nvidia-smi lists a GPU, and what it said (the reason when not)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False, "nvidia-smi not found"
    try:
        r = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"nvidia-smi -L failed: {exc}"
    gpus = [line for line in r.stdout.splitlines() if line.startswith("GPU ")]
    if r.returncode != 0 or not gpus:
        said = (r.stdout + r.stderr).strip().splitlines()
        return False, f"nvidia-smi -L: {said[0][:200] if said else f'exit status {r.returncode}'}"
    return True, "; ".join(gpus)


# -- phases ---------------------------------------------------------------------------


@dataclass
class Phase:
    """How one bounded step went: its exit status (None: not run or killed) and why."""

    name: str
    rc: Optional[int]
    seconds: float
    log: Path
    reason: str = ""

    def tail(self, lines: int = 5) -> str:
        """The last lines of its log, joined on one line (at most 400 characters)."""
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])[-400:]


class Runner:
    """Runs phases as child processes in their own session, each within a time bound.

    A phase gets its own bound or what is left of the whole check's, whichever is less;
    one that overruns is killed (its whole process group) and fails with that reason.
    """

    def __init__(self, out: Path, deadline: float, env: dict[str, str]) -> None:
        self.out, self.deadline, self.env = out, deadline, env

    def left(self) -> float:
        """Seconds left to the whole check."""
        return self.deadline - time.time()

    def run(self, name: str, cmd: list[str], bound: float, log: Path) -> Phase:
        """Run ``cmd`` from the repository root, its output into ``log``, for ``bound`` s."""
        limit = min(bound, self.left())
        log.parent.mkdir(parents=True, exist_ok=True)
        if self.left() < 5:
            return Phase(name, None, 0.0, log, "not run: the check's 15 minutes ran out")
        start = time.monotonic()
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            p = subprocess.Popen(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=self.env,
                start_new_session=True,
            )
            try:
                rc: Optional[int] = p.wait(timeout=limit)
                reason = "" if rc == 0 else f"exit status {rc}"
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc, reason = None, f"overran its {limit:.0f} s bound: killed"
        return Phase(name, rc, time.monotonic() - start, log, reason)


class SmiPoller:
    """Reads nvidia-smi every ``period`` s on a thread, from ``with`` to its end.

    Keeps each reading (mid-call time, parsed rows) and writes the raw lines with their
    times to ``path``; a failed or unparsable reading is kept as an error (20 at most).
    """

    def __init__(self, path: Path, period: float = SMI_PERIOD_S) -> None:
        self.path, self.period = path, period
        self.readings: list[logic.SmiReading] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-check-smi", daemon=True)

    def __enter__(self) -> SmiPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        with open(self.path, "w") as f:
            f.write("# time (s since epoch, mid-call), " + ",".join(logic.QUERY_FIELDS) + "\n")
            while not self._stop.is_set():
                t0 = time.time()
                try:
                    r = subprocess.run(
                        logic.SMI_COMMAND, capture_output=True, text=True, timeout=10
                    )
                    t = (t0 + time.time()) / 2
                    self.readings.append(logic.SmiReading(t, logic.readings(r.stdout)))
                    f.writelines(f"{t:.3f}, {line}\n" for line in r.stdout.splitlines())
                except (OSError, subprocess.SubprocessError, logic.SmiParseError) as exc:
                    if len(self.errors) < 20:
                        self.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                f.flush()
                self._stop.wait(self.period)


INTRUDER = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
"""


class Intruder:
    """A process outside the job that holds memory on GPU 0 for a while, on a thread.

    It starts once the run file has a stepped sample; ``window`` is when sysmetrics
    should have seen it: from 6 s after it was ready (the process lists are read every
    5 s) to 1 s before it let go.
    """

    def __init__(self, python: str, run_file: Path, log: Path, env: dict[str, str]) -> None:
        self.python, self.run_file, self.log, self.env = python, run_file, log, env
        self.window: Optional[tuple[float, float]] = None
        self.error = ""
        self._thread = threading.Thread(target=self._run, name="gpu-check-intruder", daemon=True)
        self._thread.start()

    def _stepped(self) -> bool:
        try:
            with open(self.run_file, "rb") as f:
                return any(
                    b'"step": null' not in line and b'"step":null' not in line
                    for line in f.readlines()[-5:]
                )
        except OSError:
            return False

    def _run(self) -> None:
        deadline = time.monotonic() + 90
        while not self._stepped():
            if time.monotonic() > deadline:
                self.error = "the recorded training never marked a step"
                return
            time.sleep(0.5)
        time.sleep(3)
        with open(self.log, "w") as f:
            p = subprocess.Popen(
                [self.python, "-c", INTRUDER, str(INTRUDER_BYTES), str(INTRUDER_HOLD_S)],
                stdout=subprocess.PIPE,
                stderr=f,
                text=True,
                env=self.env,
                start_new_session=True,
            )
            timer = threading.Timer(INTRUDER_HOLD_S + 60, p.kill)
            timer.start()
            assert p.stdout is not None
            ready = p.stdout.readline().strip() == "ready"
            t = time.time()
            p.wait()
            timer.cancel()
        if ready:
            self.window = (t + 6.0, t + INTRUDER_HOLD_S - 1.0)
        else:
            self.error = f"the other process did not start (exit status {p.returncode})"

    def join(self) -> None:
        """Wait for the other process to be done (bounded)."""
        self._thread.join(timeout=INTRUDER_HOLD_S + 100)


# -- stage 1: setup (the machine's Python) --------------------------------------------


def setup(
    args: argparse.Namespace, out: Path, deadline: float
) -> tuple[Optional[str], list[Check]]:
    """Make the venv and install into it; its Python, or None when it cannot go on."""
    env = {**os.environ, **OFFLINE}
    runner = Runner(out, deadline, env)
    logs = out / "logs"
    venv = out / "venv"
    checks: list[Check] = []
    probe = (
        "import json, site, sys; print(json.dumps({'venv': sys.prefix != sys.base_prefix, "
        "'site': site.getsitepackages(), 'version': sys.version.split()[0]}))"
    )
    try:
        outer = json.loads(
            subprocess.run(
                [args.python, "-c", probe], capture_output=True, text=True, timeout=60, check=True
            ).stdout
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return None, [Check("setup: the machine's Python", False, f"{args.python}: {exc}")]
    make = [args.python, "-m", "venv", "--system-site-packages", str(venv)]
    ph = runner.run("venv", make, 120, logs / "setup-venv.log")
    vpy = str(venv / "bin" / "python")
    pip = [vpy, "-m", "pip"]
    if ph.rc != 0:  # a Python without ensurepip (Debian's): the machine's pip installs into it
        shutil.rmtree(venv, ignore_errors=True)
        ph = runner.run("venv", [*make, "--without-pip"], 120, logs / "setup-venv-nopip.log")
        pip = [args.python, "-m", "pip", "--python", vpy]
    if ph.rc != 0:
        return None, [Check("setup: venv", False, f"{ph.reason}: {ph.tail()}")]
    if outer["venv"]:  # an outer venv's packages are not the base's: add them by a .pth
        purelib = subprocess.run(
            [vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        Path(purelib, "_gpu_check_outer.pth").write_text("\n".join(outer["site"]) + "\n")
    wheels = Path(args.wheels).resolve()
    have = (
        f"{len(list(wheels.glob('*.whl')))} wheels in {wheels}"
        if wheels.is_dir()
        else (f"no wheel folder {wheels} (make gpu-wheels)")
    )
    checks.append(
        Check(
            "setup: venv over the machine's Python",
            True,
            f"Python {outer['version']} ({args.python}); {have}",
        )
    )
    pip += ["install", "--no-index", "--find-links", str(wheels)]
    for name, reqs, needed in WHEEL_GROUPS:
        if name == "keras" and _importable(vpy, "keras", env):
            checks.append(Check("setup: keras", True, "the machine's own"))
            continue
        slug = re.sub(r"[^a-z0-9]+", "-", name).strip("-")
        ph = runner.run(name, [*pip, *reqs], 180, logs / f"setup-{slug}.log")
        ok = ph.rc == 0
        detail = "installed or already there" if ok else f"{ph.reason}: {ph.tail(2)}"
        checks.append(Check(f"setup: {name}", ok if needed else (ok or None), detail))
        if needed and not ok:
            return None, checks
    ph = runner.run(
        "sysmetrics",
        [*pip, "--no-deps", "--no-build-isolation", "-e", str(ROOT)],
        180,
        logs / "setup-sysmetrics.log",
    )
    checks.append(
        Check("setup: sysmetrics (editable, no dependencies)", ph.rc == 0, ph.reason or "installed")
    )
    return (vpy if ph.rc == 0 else None), checks


def _importable(python: str, module: str, env: dict[str, str]) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", code], env=env, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


# -- stage 2: the checks (in the venv) ------------------------------------------------


def gpu_marked_tests() -> list[str]:
    """The test files that have ``pytest.mark.gpu`` tests."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").glob("test_*.py")
        if "mark.gpu" in p.read_text(errors="replace")
    )


def junit_counts(path: Path) -> dict[str, int]:
    """tests, failures, errors, skipped of a pytest JUnit XML file (zeros if unreadable)."""
    import xml.etree.ElementTree as ET

    counts = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return counts
    for suite in root.iter("testsuite"):
        for k in counts:
            counts[k] += int(suite.get(k, "0"))
    return counts


def run_checks(args: argparse.Namespace, out: Path, deadline: float) -> list[Check]:
    env = {**os.environ, **OFFLINE}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    runner = Runner(out, deadline, env)
    logs = out / "logs"
    py = sys.executable
    checks: list[Check] = []

    files = gpu_marked_tests()
    ph = runner.run(
        "pytest -m gpu",
        [
            py,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            "-rA",
            f"--junitxml={out / 'pytest-gpu.xml'}",
            *files,
        ],
        240,
        logs / "pytest-gpu.log",
    )
    n = junit_counts(out / "pytest-gpu.xml")
    ran = n["tests"] - n["skipped"]
    checks.append(
        Check(
            "pytest -m gpu",
            ph.rc == 0 and ran > 0 and not n["skipped"],
            f"{ran} ran, {n['skipped']} skipped, {n['failures'] + n['errors']} "
            f"failed, in {', '.join(files)}" + (f"; {ph.reason}" if ph.reason else ""),
            n,
        )
    )

    ph = runner.run(
        "nvidia_tick",
        [py, "benchmarks/nvidia_tick.py", "--ticks", "120"],
        240,
        out / "nvidia_tick.txt",
    )
    text = ph.log.read_text(errors="replace") if ph.log.exists() else ""
    real = "real NVML:" in text and "no NVIDIA GPU" not in text and "gpu.0.gpu under load" in text
    checks.append(
        Check(
            "benchmarks/nvidia_tick.py",
            ph.rc == 0 and real,
            "real NVML measured and loaded (nvidia_tick.txt)"
            if real
            else (ph.reason or "no real-NVML part in its output"),
        )
    )

    gpu_count = 0
    record_run: Optional[Path] = None
    for workload in ("lightning", "transformers", "keras", "record"):
        wdir = out / workload
        # A run file is appended to: one left by an earlier check in the same DIR would
        # put that run's samples in this one's steady window (seen on a reused machine).
        shutil.rmtree(wdir, ignore_errors=True)
        wdir.mkdir(parents=True)
        train = [
            py,
            "benchmarks/gpu_check_train.py",
            "plain" if workload == "record" else workload,
            "--out",
            str(wdir),
            "--seconds",
            str(args.seconds),
            "--interval",
            str(INTERVAL_S),
            "--device",
            args.device,
        ]
        run_file = wdir / "run.jsonl"
        cmd = (
            train
            if workload != "record"
            else [
                py,
                "-m",
                "sysmetrics",
                "record",
                "--output",
                str(run_file),
                "--interval",
                str(INTERVAL_S),
                "--",
                *train,
            ]
        )
        intruder = None
        with SmiPoller(wdir / "nvidia-smi.txt") as smi:
            if workload == "record":
                intruder = Intruder(py, run_file, wdir / "intruder.log", env)
            ph = runner.run(workload, cmd, args.seconds + 120, wdir / "train.log")
            if intruder is not None:
                intruder.join()
        checks += judge_training(workload, ph, wdir, smi, intruder)
        if smi.readings:
            gpu_count = max(gpu_count, len(smi.readings[-1].gpus))
        if workload == "record" and ph.rc == 0:
            record_run = run_file

    if record_run is not None:
        ph = runner.run(
            "report",
            [
                py,
                "-m",
                "sysmetrics",
                "report",
                str(record_run),
                "-o",
                str(out / "record" / "report.html"),
            ],
            180,
            logs / "report.log",
        )
        html = out / "record" / "report.html"
        checks.append(
            Check(
                "sysmetrics report of the recorded run",
                ph.rc == 0 and html.exists(),
                f"{html.relative_to(out)}" if ph.rc == 0 else ph.reason,
            )
        )
        from sysmetrics.findings import read_run

        run = read_run(record_run)
        window = logic.steady_window(run)
        checks += logic.attribution(run, [0], gpu_count, window)
    else:
        checks.append(
            Check("sysmetrics report of the recorded run", False, "no recorded run to report on")
        )

    odir = out / "overhead"
    ph = runner.run(
        "overhead",
        [
            py,
            "benchmarks/gpu_check_train.py",
            "overhead",
            "--out",
            str(odir),
            "--rounds",
            str(args.rounds),
            "--device",
            args.device,
        ],
        420,
        odir / "overhead.txt",
    )
    checks.append(overhead_check(ph, odir))
    return checks


def judge_training(
    workload: str, ph: Phase, wdir: Path, smi: SmiPoller, intruder: Optional[Intruder]
) -> list[Check]:
    """The checks of one training: it ran, its loggers got the GPU keys, the numbers agree."""
    label = f"{workload}" if workload != "record" else "sysmetrics record"
    if ph.rc == 3:
        skip = [ln for ln in ph.tail(20).split(" | ") if ln.startswith("skip:")]
        return [Check(f"{label}: training", None, skip[0] if skip else "skipped")]
    if ph.rc != 0:
        return [Check(f"{label}: training", False, f"{ph.reason}: {ph.tail()}")]
    try:
        result = json.loads((wdir / "result.json").read_text())
    except (OSError, ValueError) as exc:
        return [Check(f"{label}: training", False, f"no result.json: {exc}")]
    checks = [
        Check(
            f"{label}: training",
            True,
            f"{result.get('steps')} steps in {result.get('seconds')} s on {result.get('device')}",
            {"steps": result.get("steps")},
        )
    ]
    problems = result.get("problems", [])
    if workload != "record":
        checks.append(
            Check(
                f"{label}: logger files have system/gpu.0.gpu",
                not problems,
                "; ".join(problems)
                or ", ".join(
                    str(Path(f).relative_to(wdir.parent)) for f in result.get("files", [])
                ),
            )
        )
    elif problems:
        checks.append(Check(f"{label}: step markers", False, "; ".join(problems)))
    if smi.errors:
        checks.append(Check(f"{label}: nvidia-smi readings", False, "; ".join(smi.errors[:3])))
    from sysmetrics.findings import read_run

    run = read_run(wdir / "run.jsonl")
    window = logic.steady_window(run)
    pairs = logic.compare(
        smi.readings, run, window, max_gap=INTERVAL_S + 1.0, varying=logic.VARYING
    )
    (wdir / "compare.txt").write_text(logic.pairs_table(pairs))
    (wdir / "compare.json").write_text(logic.pairs_json(pairs))
    gpus = range(len(smi.readings[-1].gpus)) if smi.readings else range(1)
    checks += logic.judge_pairs(label, pairs, gpus=gpus, smi=smi.readings)
    if intruder is not None:
        if intruder.window is None:
            checks.append(
                Check(
                    "attribution: another process's memory not counted",
                    False,
                    intruder.error or "no window",
                )
            )
        else:
            checks.append(logic.intruder(run, 0, INTRUDER_BYTES, intruder.window))
    return checks


def overhead_check(ph: Phase, odir: Path) -> Check:
    name = "overhead: step-time ratio at 1 s and 0.1 s, CPU per tick per GPU"
    if ph.rc != 0:
        return Check(name, False, f"{ph.reason}: {ph.tail()}")
    try:
        result = json.loads((odir / "result.json").read_text())
    except (OSError, ValueError) as exc:
        return Check(name, False, f"no result.json: {exc}")
    t = result.get("training", {})
    parts = [f"{v}: x{t[v]['ratio']:.4f}" for v in ("sysmetrics 1 s", "sysmetrics 0.1 s") if v in t]
    per_gpu = result.get("nvidia_cpu_us_per_tick_per_gpu")
    if per_gpu is not None:
        parts.append(f"NVIDIA {per_gpu:.0f} CPU µs/tick/GPU")
    numbers = {"training": t, "nvidia_cpu_us_per_tick_per_gpu": per_gpu}
    return Check(
        name,
        bool(parts) and per_gpu is not None,
        "; ".join(parts + result.get("problems", [])) + " (overhead/overhead.txt)",
        numbers,
    )


def finish(out: Path, checks: list[Check], started: float, gpus: str) -> int:
    table = logic.summary_table(checks)
    head = (
        f"gpu-check on {gpus}\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{time.time() - started:.0f} s\n\n"
    )
    (out / "summary.txt").write_text(head + table)
    (out / "checks.json").write_text(
        json.dumps([c.as_json() for c in checks], indent=1, default=str)
    )
    print("\n" + head + table + f"\nresults in {out}")
    return logic.exit_code(checks)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check", help="output folder (default gpu-check)")
    parser.add_argument("--python", default=sys.executable, help="the machine's Python")
    parser.add_argument("--wheels", default=str(ROOT / ".gpu-wheels"), help="the wheel folder")
    parser.add_argument("--seconds", type=float, default=60.0, help="training per workload, s")
    parser.add_argument("--rounds", type=int, default=6, help="overhead: alternating rounds")
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cpu: train on the CPU (a smoke run of the check itself; its GPU checks fail)",
    )
    parser.add_argument(
        "--requirements",
        action="store_true",
        help="print what the check installs from the wheel folder (for make gpu-wheels)",
    )
    parser.add_argument(
        "--stage", choices=["setup", "run"], default="setup", help=argparse.SUPPRESS
    )
    parser.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.requirements:
        print("\n".join(req for _, reqs, _ in WHEEL_GROUPS for req in reqs))
        return 0
    present, said = gpu_present()
    if not present:
        print(f"gpu-check: no NVIDIA GPU on this machine ({said}): nothing to check")
        return 0
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.stage == "setup":
        started = time.time()
        deadline = started + TOTAL_S
        print(f"gpu-check: {said}; results in {out}", flush=True)
        vpy, checks = setup(args, out, deadline)
        (out / "setup.json").write_text(json.dumps([c.as_json() for c in checks], indent=1))
        if vpy is None:
            return finish(out, checks, started, said)
        os.execv(
            vpy,
            [
                vpy,
                str(Path(__file__).resolve()),
                "--stage",
                "run",
                "--out",
                str(out),
                "--deadline",
                str(deadline),
                "--seconds",
                str(args.seconds),
                "--rounds",
                str(args.rounds),
                "--device",
                args.device,
            ],
        )
    started = args.deadline - TOTAL_S
    setup_checks = [
        Check(c["name"], {"pass": True, "fail": False}.get(c["status"]), c["detail"])
        for c in json.loads((out / "setup.json").read_text())
    ]
    return finish(out, setup_checks + run_checks(args, out, args.deadline), started, said)


if __name__ == "__main__":
    sys.exit(main())
