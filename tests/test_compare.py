"""``sysmetrics compare`` and ``report --baseline`` (issue 36, items 1 and 4), on real recordings.

Each recording is ``sysmetrics record`` of a plain loop that fetches its batches through
``sysmetrics.batches`` and marks its steps with ``sysmetrics.step``. The step times are
dominated by sleeps (and, for "more compute", a busy wait of a fixed wall time), so the
load of a shared 2-core machine does not move them: two recordings of the same loop must
come out "no difference beyond noise", and a loop with a slower loader or more compute
per step must come out slower, with the cause named. So they run in the parallel pass
(3 runs of 3 passed beside it, 2026-11-28), the four recordings made side by side.
"""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sysmetrics import compare as cmp
from sysmetrics.report import comparing
from sysmetrics.runfile import Run, read_runs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="records with /proc")

STEPS = 60
INTERVAL = "0.2"
LOOP = f"""
import sys, time
import sysmetrics

fetch, sleep, busy = (float(v) for v in sys.argv[1:4])

def data(n):
    for _ in range(n):
        time.sleep(fetch)  # the batch's fetch
        yield [0.0] * 8

for i, batch in enumerate(sysmetrics.batches(data({STEPS})), 1):
    time.sleep(sleep)  # the step's work, waiting on a device
    end = time.perf_counter() + busy
    while time.perf_counter() < end:  # the step's work on the CPU
        pass
    sysmetrics.step(i)
"""

# (fetch, sleep, busy) s per step for each recording
SAME = (0.02, 0.06, 0.0)  # 80 ms steps, 25 % waiting for data
SLOW_LOADER = (0.06, 0.06, 0.0)  # 120 ms steps, 50 % waiting
MORE_COMPUTE = (0.02, 0.06, 0.05)  # 130 ms steps, 50 ms of them on the CPU


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sysmetrics", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _record(path: Path, loop: tuple[float, float, float]) -> Path:
    done = _cli(
        "record",
        "-o",
        str(path),
        "--interval",
        INTERVAL,
        "--no-findings",
        "--",
        sys.executable,
        "-c",
        LOOP,
        *map(str, loop),
    )
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real recordings: the same loop twice, a slower loader, more compute per step.

    Made side by side (their steps are sleeps and at most 0.4 CPU of busy wait: 2 CPUs
    run the four alike), in a quarter of the time one after the other took."""
    folder = tmp_path_factory.mktemp("compare")
    loops = {"a": SAME, "a2": SAME, "loader": SLOW_LOADER, "compute": MORE_COMPUTE}
    with ThreadPoolExecutor(len(loops)) as pool:
        made = {k: pool.submit(_record, folder / f"{k}.jsonl", v) for k, v in loops.items()}
        return {k: f.result() for k, f in made.items()}


def _compared(a: Path, b: Path) -> cmp.Comparison:
    return comparing.compare_files([str(a)], [str(b)])


def test_the_same_script_twice_is_no_difference_beyond_noise(runs: dict[str, Path]) -> None:
    c = _compared(runs["a"], runs["a2"])
    step = c.nodes[0].step(cmp.STEP)
    assert step is not None and step.p is not None, c.sentences
    assert step.n_a >= cmp.MIN_WINDOWS and step.n_b >= cmp.MIN_WINDOWS
    assert step.beyond is False, c.sentences
    assert c.sentences[0].startswith("No difference in step time beyond noise"), c.sentences
    assert c.slowdown() is None
    wait = c.nodes[0].step(cmp.WAIT)
    assert wait is not None and wait.beyond is False, wait


def test_a_slower_loader_is_slower_and_names_data_wait(runs: dict[str, Path]) -> None:
    c = _compared(runs["a"], runs["loader"])
    first = c.sentences[0]
    assert first.startswith("B's steps are 1.") and "x slower" in first, c.sentences
    assert "beyond noise): the extra time is data wait" in first, first
    step = c.nodes[0].step(cmp.STEP)
    assert step is not None and step.ratio is not None
    assert 1.3 < step.ratio < 1.7, step  # 120 ms against 80 ms
    # Faster the other way round, and the time saved is the data wait.
    back = _compared(runs["loader"], runs["a"])
    assert "x faster" in back.sentences[0] and "the time saved is data wait" in back.sentences[0]


def test_more_compute_per_step_is_slower_and_names_compute(runs: dict[str, Path]) -> None:
    c = _compared(runs["a"], runs["compute"])
    first = c.sentences[0]
    assert "x slower" in first and "beyond noise): the extra time is compute" in first, first
    compute = c.nodes[0].step(cmp.COMPUTE)
    assert compute is not None and compute.beyond, compute
    # The busy wait shows in the job's CPU, beyond noise.
    cpu = next(r for r in c.nodes[0].keys if r.name == "cpu")  # % of the job's CPUs
    assert cpu.p is not None and cpu.p < cmp.ALPHA, cpu
    assert cpu.a is not None and cpu.b is not None and cpu.b > cpu.a, cpu


def test_fail_on_regression_exit_status(runs: dict[str, Path], tmp_path: Path) -> None:
    """3 where B is slower by more than PCT % beyond noise; 0 where not (or within noise)."""
    a, a2, slow = str(runs["a"]), str(runs["a2"]), str(runs["loader"])
    failed = _cli("compare", a, slow, "--fail-on-regression", "10")
    assert failed.returncode == comparing.EXIT_REGRESSION == 3, failed.stderr
    assert "slower than A's, beyond noise (more than the 10 % of" in failed.stderr
    assert failed.stdout.startswith("B's steps are 1."), failed.stdout
    assert _cli("compare", a, slow, "--fail-on-regression", "90").returncode == 0
    assert _cli("compare", slow, a, "--fail-on-regression", "0").returncode == 0  # faster
    same = _cli("compare", a, a2, "--fail-on-regression", "0")
    assert same.returncode == 0, same.stdout + same.stderr
    # report --baseline: the same status, and the sentences among the findings.
    out = tmp_path / "page.html"
    rep = _cli(
        "report", slow, "--baseline", a, "--json", "-o", str(out), "--fail-on-regression", "10"
    )
    assert rep.returncode == 3, rep.stderr
    doc = json.loads(rep.stdout)
    said = [f["sentence"] for f in doc["findings"] if f["rule"] == cmp.BASELINE_RULE]
    assert said and said[0].startswith("Baseline: B's steps are 1."), said
    assert "the extra time is data wait" in said[0]
    assert "Baseline: B&#x27;s steps are 1." in out.read_text(encoding="utf-8")
    plain = _cli("report", a2, "--baseline", a, "-o", str(out), "--fail-on-regression", "5")
    assert plain.returncode == 0, plain.stderr
    assert "Baseline: No difference in step time beyond noise" in out.read_text(encoding="utf-8")
    alone = _cli("report", a2, "--fail-on-regression", "5")
    assert alone.returncode == 2 and "needs --baseline" in alone.stderr


def test_the_page_and_the_json(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "compare.html"
    done = _cli("compare", str(runs["a"]), str(runs["loader"]), "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == cmp.SCHEMA
    assert doc["sentences"][0].startswith("B's steps are 1.")
    names = [r["name"] for r in doc["nodes"][0]["steps"]]
    assert names[:5] == [cmp.STEP, cmp.WAIT, cmp.WAIT_S, cmp.COMPUTE, cmp.THROUGHPUT], names
    keys = {r["name"] for r in doc["nodes"][0]["keys"]}
    assert {"cpu", "proc.memory.rssMB"} <= keys, keys
    for r in doc["nodes"][0]["steps"]:
        assert r["p"] is None or 0 <= r["p"] <= 1
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "What changed" in page and "beyond noise" in page and "Mann-Whitney U" in page
    assert "data wait time" in page and "Machine keys both runs have" in page


def test_multi_node_against_single_node_is_refused_and_nodes_are_compared_per_node(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Two recordings made at once are the nodes of one run (read_runs numbers them 0 and 1)."""
    paths = [tmp_path / "n0.jsonl", tmp_path / "n1.jsonl"]
    threads = [threading.Thread(target=_record, args=(p, SAME)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(read_runs([str(p) for p in paths]).by_node()) == 2
    nodes = ",".join(map(str, paths))
    refused = _cli("compare", nodes, str(runs["a"]))
    assert refused.returncode == comparing.EXIT_CANNOT == 1
    assert "A has 2 nodes (0, 1) and B has one node: each node is compared with the same" in (
        refused.stderr
    )
    rep = _cli("report", str(runs["a"]), "--baseline", nodes, "--json")
    assert rep.returncode == 1 and "A has 2 nodes (0, 1) and B has one node" in rep.stderr
    per_node = comparing.compare_files([str(p) for p in paths], [str(p) for p in reversed(paths)])
    assert [n.node for n in per_node.nodes] == [0, 1]
    assert per_node.sentences[0].startswith("Node 0: No difference in step time beyond noise")
    assert any(s.startswith("Node 1: ") for s in per_node.sentences)


def test_what_cannot_be_compared_is_said(runs: dict[str, Path], tmp_path: Path) -> None:
    """A run without steps: the step time cannot be compared, and --fail-on-regression says
    it cannot tell (status 1); keys one run lacks are named as not compared."""
    no_steps = tmp_path / "no-steps.jsonl"
    with open(runs["a"], encoding="utf-8") as f, open(no_steps, "w", encoding="utf-8") as out:
        for line in f:
            record = json.loads(line)
            if "metrics" in record:
                record.pop("step", None)
                record["metrics"] = {
                    k: v for k, v in record["metrics"].items() if not k.startswith("step.")
                }
                record["metrics"]["only.here"] = 1.0
            out.write(json.dumps(record) + "\n")  # without its step keys nor step marks
    c = comparing.compare_files([str(runs["a"])], [str(no_steps)])
    assert c.sentences[0].startswith("Step time cannot be compared: B has no steps"), c.sentences
    assert not c.tested
    assert any(s.startswith("Not compared: 1 keys only in B") for s in c.sentences), c.sentences
    done = _cli("compare", str(runs["a"]), str(no_steps), "--fail-on-regression", "10")
    assert done.returncode == 1 and "cannot tell whether B's steps are slower" in done.stderr


# -- the test itself ------------------------------------------------------------------------


def test_mann_whitney_exact_small_samples() -> None:
    """Textbook values: 3 against 3, fully apart: U = 0, P = 2/20; identical: 1."""
    assert cmp.mann_whitney([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert cmp.mann_whitney([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert cmp.mann_whitney([1.0] * 10, [1.0] * 10) == 1.0
    assert cmp.mann_whitney([], [1.0]) == 1.0


def test_mann_whitney_normal_approximation_agrees_with_the_exact_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20 against 20 without ties: the exact p, and the normal approximation's (MAX_EXACT 0)."""
    a = [float(i) for i in range(20)]
    for shift in (2.5, 3.5, 5.5):
        b = [i + shift for i in range(20)]
        exact = cmp.mann_whitney(a, b)
        with monkeypatch.context() as m:
            m.setattr(cmp, "MAX_EXACT", 0)
            normal = cmp.mann_whitney(a, b)
        assert 0.0005 < exact < 0.5
        assert normal == pytest.approx(exact, rel=0.15), (shift, exact, normal)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=40),
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=40),
)
def test_mann_whitney_never_fails_and_p_is_a_probability(a: list[float], b: list[float]) -> None:
    p = cmp.mann_whitney(a, b)
    assert 0.0 <= p <= 1.0 and not math.isnan(p)
    assert cmp.mann_whitney(b, a) == pytest.approx(p)
    r = cmp.row("x", "s", a, b)
    assert r.p is None or 0.0 <= r.p <= 1.0
    assert r.beyond is None or isinstance(r.beyond, bool)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(min_value=0.001, max_value=10), min_size=5, max_size=30),
    st.floats(min_value=1.5, max_value=5),
)
def test_a_whole_shift_beyond_the_spread_is_beyond_noise(a: list[float], factor: float) -> None:
    """Every value of B above every value of A, 1.5x or more: beyond noise for n >= 5."""
    top = max(a)
    b = [top * factor + v for v in a]
    r = cmp.row("x", "s", a, b)
    assert r.beyond is True, r


def test_energy_per_step_from_counters_and_the_step_key() -> None:
    """From the energy counters: their growth over the steps advanced, warm-up left out."""
    from sysmetrics.runfile import Run
    from sysmetrics.runview import RunView

    run = Run()
    for j in range(8):  # 3 J per step of package, 1 J of DRAM, 2 steps a sample
        run.add(
            {"cpu.energyJoules": 100 + 6.0 * j, "memory.energyJoules": 50 + 2.0 * j},
            time=1000.0 + j,
            monotonic=float(j),
            step=2 * j,
        )
    run.pad()
    assert cmp.energy_per_step(RunView(run)) == pytest.approx([4.0] * 6)


def test_energy_per_step_counts_what_the_ledger_counts() -> None:
    """The job's GPUs only, as the cost ledger: a GPU another job used is not this run's
    energy (compare counted every GPU's counter, the ledger the job's, and the two pages
    of one run said different joules per step)."""
    from sysmetrics import ledger
    from sysmetrics.runfile import Run
    from sysmetrics.runview import RunView

    run = Run()
    for j in range(8):  # the job's GPU 0: 5 J a step; GPU 1, another job's: 40 J a step
        run.add(
            {"gpu.0.energyJoules": 100 + 10.0 * j, "gpu.process.0.gpu": 50.0,
             "gpu.1.energyJoules": 7 + 80.0 * j},
            time=1000.0 + j,
            monotonic=float(j),
            step=2 * j,
        )  # fmt: skip
    run.pad()
    view = RunView(run)
    assert cmp.energy_per_step(view) == pytest.approx([5.0] * 6)
    assert ledger.energy_per_step(view) == pytest.approx(5.0)


def test_docs_quote_the_sentences_the_code_writes() -> None:
    """docs/compare.md quotes the fixed words of each sentence, and the code writes them."""
    root = Path(__file__).resolve().parents[1]
    page = " ".join((root / "docs" / "compare.md").read_text("utf-8").split())  # lines joined
    pieces = []  # the string literals of the two modules (f-strings: their fixed parts)
    for module in (cmp, comparing):
        assert module.__file__ is not None
        for node in ast.walk(ast.parse(Path(module.__file__).read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                pieces.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                pieces += [v.value for v in node.values if isinstance(v, ast.Constant)]
    source = "\n".join(pieces)
    for fixed in (
        "B's steps are ",
        "beyond noise)",
        "the extra time is",
        "the time saved is",
        "of each step)",
        "compute, outside data wait (",
        "No difference in step time beyond noise (",
        " while the job's CPU is saturated in both (",
        " while the job's CPU went ",
        " while the job's CPU is the same (",
        "the run files have no data wait (step.dataWaitPercent) to split it by",
        "GPU power and clocks are the same",
        "Energy per step: ",
        "Energy per step cannot be compared: ",
        "Beyond noise too: ",
        "Not compared: ",
        "Step time cannot be compared: ",
        " has no steps",
        "neither run has steps",
        " (no step.seconds and no step marks that advance)",
        "Findings new in B: ",
        "Findings of A gone in B: ",
        "Data wait went ",
        "The runs sample at different intervals (",
        "cannot tell whether B's steps are slower: the step time could not be compared",
        "each node is compared with the same node of the other run",
        "slower than A's, beyond noise (more than the ",
        "Baseline: ",
    ):
        assert fixed in source, fixed
        assert fixed.strip() in page, fixed
    assert "compare.md" in (root / "mkdocs.yml").read_text("utf-8")


_VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())
_SAMPLE = st.fixed_dictionaries(
    {},
    optional={
        "step.seconds": _VALUES,
        "step.dataWaitPercent": _VALUES,
        "step.energyJoules": _VALUES,
        "cpu": _VALUES,
        "cpu.energyJoules": _VALUES,
        "gpu.0.powerWatts": _VALUES,
        "cpu.0.cpu_percent": _VALUES,
        "disk.out": _VALUES,
        "odd key": _VALUES,
    },
)


def _run(samples: list[tuple[dict[str, object], object, object]]) -> Run:
    run = Run()
    for j, (metrics, step, clock) in enumerate(samples):
        run.add(metrics, time=1000.0 + j, monotonic=clock, step=step)
    run.pad()
    return run


_SAMPLES = st.lists(
    st.tuples(
        _SAMPLE,
        st.one_of(st.none(), st.integers(-5, 50)),
        st.one_of(st.none(), st.floats(-10, 100)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(_SAMPLES, _SAMPLES)
def test_any_two_runs_compare_without_failing_and_every_number_is_finite(
    a: list[tuple[dict[str, object], object, object]],
    b: list[tuple[dict[str, object], object, object]],
) -> None:
    """Crafted runs of any values, steps and clocks: a comparison, a JSON document with
    finite numbers only, p in [0, 1], a page; never an exception."""
    c = cmp.compare(_run(a), _run(b))
    json.dumps(c.to_json(), allow_nan=False)
    for n in c.nodes:
        for r in (*n.steps, *n.keys):
            assert r.p is None or 0.0 <= r.p <= 1.0
    assert c.sentences
    assert comparing.render_comparison(c, "t").endswith("</html>")
    comparing.regression_status(c, 10.0)
    cmp.baseline_findings(c)


def _steady(seconds: float, wait: float, n: int = 20) -> Run:
    """A crafted run of ``n`` samples a second apart, 1 step each, its values jittered 1 %."""
    run = Run()
    for j in range(n):
        jitter = 1 + 0.01 * ((j * 7) % 5 - 2) / 2
        run.add(
            {
                "step.seconds": seconds * jitter,
                "step.dataWaitPercent": wait * jitter,
                "cpu": 95.0 * jitter,
                "gpu.0.powerWatts": 250.0 * jitter,
                "gpu.0.smClock": 1980.0 * jitter,
            },
            time=1000.0 + j,
            monotonic=float(j),
            step=j,
        )
    run.pad()
    return run


def test_the_issues_example_sentence() -> None:
    """0.32 s steps with 12 % data wait against 0.42 s with 33 %, the job's CPU saturated
    in both, GPU power and clocks unchanged: the issue's sentence, word for word."""
    c = cmp.compare(_steady(0.32, 12.0), _steady(0.42, 33.0))
    assert c.sentences[0] == (
        "B's steps are 1.31x slower (0.42 s against 0.32 s, beyond noise): the extra time is "
        "data wait (12 % -> 33 % of each step) while the job's CPU is saturated in both "
        "(95 % and 95 % of its CPUs)"
    ), c.sentences
    assert "GPU power and clocks are the same" in c.sentences
    assert c.slowdown() == pytest.approx(31.25)
    assert comparing.regression_status(c, 30.0)[0] == 3
    assert comparing.regression_status(c, 35.0)[0] == 0
