"""``sysmetrics report``: real run files (``record`` of a real child) and crafted ones.

The page is opened in headless Chromium (Debian's ``chromium``, installed under CI by
:mod:`tests.debian`, skipped with the reason elsewhere) and its screenshot checked.
"""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("matplotlib", reason="needs the [report] extra")

from sysmetrics import _optional, report
from sysmetrics import findings as fd
from sysmetrics.findings import Run, read_run
from sysmetrics.report import drawing
from sysmetrics.runfile import read_runs
from tests import debian
from tests.test_record import WORKLOAD

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def write_run(path: Path, samples: list[dict[str, Any]], steps: bool = True) -> Path:
    with path.open("w") as f:
        for n, metrics in enumerate(samples):
            step = n if steps else None
            line = {"time": 1000.0 + n, "monotonic": 5.0 + n, "step": step, "metrics": metrics}
            f.write(json.dumps(line) + "\n")
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "sysmetrics", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run file of ``sysmetrics record`` over the real workload of ``test_record``."""
    tmp = tmp_path_factory.mktemp("recorded")
    run = tmp / "run.jsonl"
    done = cli("record", "--output", str(run), "--interval", "0.1", "--disk-path", str(tmp),
               "--", sys.executable, "-c", WORKLOAD, str(tmp / "data.bin"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return run


@pytest.mark.serial
@pytest.mark.kernel
def test_report_of_a_recorded_run(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = cli("report", str(recorded), "-o", str(out), "--png", str(tmp_path / "png"))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "<h2>Findings</h2>" in page
    # Findings or the honest "no rule matched": on a shared machine the recorded run may
    # show contention (tests/test_findings.py covers each rule both ways).
    assert "No rule matched" in page or '<span class="rule">' in page
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == ["cpu.png", "disk.png", "memory.png", "network.png"]
    for name in pngs:
        assert (tmp_path / "png" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.count('src="data:image/png;base64,') == 4
    assert not re.search(r"""(src|href)=["']?(https?:|//)|url\(""", page)  # nothing fetched
    rows = table(page)
    # Ground truth: the child touched 300 MiB and spun a CPU; the rates of the disk.out
    # counter add up to the 50 MiB it wrote and synced (host-wide: at least that).
    assert rows[RSS]["unit"] == "MiB"  # under 1 GiB: MiB
    assert rows[RSS]["peak"] >= 280
    assert rows["cpu"]["peak"] > 30
    assert rows["disk.out"]["unit"] == "MiB/s"
    samples = read_run(recorded)
    written = samples.columns["disk.out"][-1] - samples.columns["disk.out"][0]
    assert written >= 45, "the 50 MiB written are not in disk.out"
    total = float(rows["disk.out"]["total"].removesuffix(" MiB").replace(",", ""))
    assert total == pytest.approx(written, rel=0.01)  # the rates add up to the counter
    marked = [s for s in samples.step if s is not None]  # marked with sysmetrics.step
    assert len(set(marked)) >= 4
    assert f"steps {min(marked)} to {max(marked)}" in page


RSS = "proc.memory.rssMB (shared pages counted once per process)"  # as the table names it


def table(page: str) -> dict[str, dict[str, Any]]:
    """The summary table's rows, by key: unit, mean, p95, peak (numbers), total (text)."""
    rows = {}
    for cells in re.findall(r"<tr>((?:<td>[^<]*</td>){7})</tr>", page):
        group, key, unit, mean, p95, peak, total = re.findall(r"<td>([^<]*)</td>", cells)
        values = [float(v.replace(",", "")) for v in (mean, p95, peak)]
        numbers = dict(zip(("mean", "p95", "peak"), values))
        rows[key] = {"group": group, "unit": unit, "total": total, **numbers}
    return rows


# -- crafted run files ---------------------------------------------------------------------


def used(gpu: float, **extra: float) -> dict[str, float]:
    return {"gpu.0.gpu": gpu, "gpu.process.0.gpu": gpu, **extra}


FINDINGS = {
    "input-bound": ([used(20, cpu=95) for _ in range(20)], "The GPUs waited on the CPU"),
    "memory-limit": (
        [{"proc.memory.percent": p} for p in (50, 70, 96, 60, 55)],
        "memory peaked at 96 %",
    ),
    "gpu-throttling": (
        [used(90, **{"gpu.0.throttle.thermal": int(n < 5)}) for n in range(10)],
        "GPU 0 was slowed down by thermal slowdown in 50% of the samples",
    ),
    "unused-gpu": (
        [used(90, **{"gpu.1.gpu": 0.0}) for _ in range(6)],
        "The job never used GPU 1",
    ),
}


@pytest.mark.parametrize("rule", sorted(FINDINGS))
def test_finding_sentences_present_and_absent(tmp_path: Path, rule: str) -> None:
    samples, sentence = FINDINGS[rule]
    page = report.render(read_run(write_run(tmp_path / "run.jsonl", samples)), "t", {})
    assert sentence in page
    assert f'<span class="rule">{rule}</span>' in page
    others = [s for r, (_, s) in FINDINGS.items() if r != rule]
    assert not [s for s in others if s in page]


def test_no_findings_on_a_quiet_run(tmp_path: Path) -> None:
    samples = [used(90, cpu=40, **{"proc.memory.percent": 30}) for _ in range(20)]
    page = report.render(read_run(write_run(tmp_path / "run.jsonl", samples)), "t", {})
    assert "No rule matched" in page
    assert not [s for _, s in FINDINGS.values() if s in page]


def test_counters_become_rates_and_units_read_well(tmp_path: Path) -> None:
    samples = [
        {
            "disk.in": 200.0 * n,  # MiB, +200 per s
            "network.recv": 2**20 * 10.0 * n,  # bytes, +10 MiB per s
            "cpu.energyJoules": 50.0 * n,  # J, +50 per s: 50 W
            "gpu.0.memoryAllocatedBytes": 2.0 * 2**30,
            "gpu.process.0.memoryAllocatedBytes": 2.0 * 2**30,  # repeats gpu.0's: left out
            "cpu.0.cpu_percent": 20.0,
            "cpu.1.cpu_percent": 60.0,
        }
        for n in range(10)
    ]
    rows = {
        r.label: r
        for r in report.summary(report.series(read_run(write_run(tmp_path / "r", samples))))
    }
    assert (rows["disk.in"].unit, rows["disk.in"].mean) == ("MiB/s", 200)
    assert rows["disk.in"].total == "1,800 MiB"  # 9 intervals of 200 MiB
    assert rows["network.recv"].total == "90 MiB"
    assert rows["cpu.energyJoules"].total == "450 J"
    assert (rows["network.recv"].unit, rows["network.recv"].peak) == ("MiB/s", 10)
    assert (rows["cpu.energyJoules"].unit, rows["cpu.energyJoules"].mean) == ("W", 50)
    assert rows["cpu.energyJoules"].group == "Energy"
    assert (rows["gpu.0.memoryAllocatedBytes"].unit, rows["gpu.0.memoryAllocatedBytes"].peak) == (
        "GiB",
        2,
    )
    assert "gpu.process.0.memoryAllocatedBytes" not in rows
    assert rows["cpu.{i}.cpu_percent (mean of 2)"].mean == 40


def test_a_counter_that_restarts_is_no_rate(tmp_path: Path) -> None:
    samples = [{"disk.in": 100.0 * n if n < 5 else 10.0 * (n - 5)} for n in range(10)]
    (row,) = report.summary(report.series(read_run(write_run(tmp_path / "r", samples))))
    assert row.peak == 100  # never the negative jump at the restart


def test_percentiles(tmp_path: Path) -> None:
    samples = [{"cpu": float(n)} for n in range(101)]  # 0 .. 100
    (row,) = report.summary(report.series(read_run(write_run(tmp_path / "r", samples))))
    assert (row.mean, row.p95, row.peak) == (50, 95, 100)


def test_step_axis_spreads_slow_steps_and_leaves_out_the_start() -> None:
    run = Run()
    for n, step in enumerate([None, None, 0, 0, 0, 0, 4, 8]):
        run.add({"cpu": 1.0}, time=100.0 + n, monotonic=float(n), step=step)
    run.pad()
    ax = report.axis(run)
    assert ax.label == "step"
    assert ax.left_out == 2
    assert [round(v, 6) for v in ax.x[2:]] == [0, 1, 2, 3, 4, 8]  # step 0 took 4 s
    assert all(math.isnan(v) for v in ax.x[:2])


@pytest.mark.parametrize(
    ("steps", "seconds", "label"),
    [
        ([None] * 4, 3, "elapsed time (s)"),
        ([5, 6, 0, 1], 3, "elapsed time (s)"),  # steps went back: a second run in the file
        ([None] * 4, 3 * 3600, "elapsed time (h)"),
    ],
)
def test_time_axis(steps: list[Any], seconds: float, label: str) -> None:
    run = Run()
    for n, step in enumerate(steps):
        run.add({"cpu": 1.0}, time=n * seconds / 3, monotonic=None, step=step)
    run.pad()
    assert report.axis(run).label == label


def test_keys_are_escaped_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report.data, "MAX_ROWS", 5)  # where summary() looks it up
    evil = {f"<script>alert({n})</script>": float(n) for n in range(20)}
    run = read_run(write_run(tmp_path / "r", [evil, evil]))
    page = report.render(run, "<b>title</b>", {})
    assert "<script>" not in page and "<b>title" not in page
    assert len(table(page)) == 5


def test_many_series_are_capped_in_a_figure(tmp_path: Path) -> None:
    samples = [{f"openmetrics.x.m{n}.0": float(n) for n in range(30)} for _ in range(4)]
    pngs = report.figures(read_run(write_run(tmp_path / "r", samples)))
    assert list(pngs) == ["OpenMetrics"]


def test_a_long_run_is_drawn_binned(tmp_path: Path) -> None:
    run = Run()
    for n in range(20_000):
        run.add({"cpu": float(n % 100)}, time=float(n), monotonic=float(n), step=None)
    run.pad()
    x, _, low, high = report._bins(report.axis(run).x, report.series(run)[0].values)
    assert len(x) == report.MAX_POINTS
    assert min(low) == 0 and max(high) == 99  # the peaks survive the binning


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["cpu", "disk.in", "gpu.0.gpu", "gpu.process.0.gpu", "a<b", "x"]),
            st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3), st.none()),
            max_size=6,
        ),
        max_size=12,
    ),
    st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=12),
    st.lists(st.one_of(st.none(), st.floats(), st.integers(-5, 5)), max_size=12),
)
def test_render_never_raises(
    tmp_path: Path, samples: list[dict[str, Any]], steps: list[Any], times: list[Any]
) -> None:
    run = Run()
    for n, metrics in enumerate(samples):
        step = steps[n] if n < len(steps) else None
        run.add(metrics, time=times[n] if n < len(times) else None, monotonic=None, step=step)
    run.pad()
    report.axis(run)
    page = report.render(run, "t", {})
    assert page.startswith("<!DOCTYPE html>")


def test_cli_errors(tmp_path: Path) -> None:
    missing = cli("report", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1
    assert "No such file or directory" in missing.stderr
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not a run file\n")
    empty = cli("report", str(junk))
    assert empty.returncode == 1
    assert "junk.jsonl has no samples" in empty.stderr
    run = write_run(tmp_path / "run.jsonl", [{"cpu": 1.0}, {"cpu": 2.0}])
    nowhere = cli("report", str(run), "-o", str(tmp_path / "missing" / "page.html"))
    assert nowhere.returncode == 1
    assert f"No such directory: '{tmp_path / 'missing'}'" in nowhere.stderr


def test_default_output_is_beside_the_run_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl", [{"cpu": 1.0}, {"cpu": 2.0}])
    done = cli("report", str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "run.html")
    assert (tmp_path / "run.html").exists()


def test_missing_matplotlib_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'sysmetrics-train\[report\]'"):
        _optional.matplotlib_figure()


# -- the page in a real browser ------------------------------------------------------------


def test_page_renders_in_headless_chromium(recorded: Path, tmp_path: Path) -> None:
    chromium = debian.binary("chromium", "chromium", "chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; CI does)")
    page = tmp_path / "report.html"
    report.write_report(recorded, page)
    shot = tmp_path / "shot.png"
    # No network, no first-run work, no sandbox (root under CI): the flags the machine needs.
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
           "--window-size=1100,2400", f"--screenshot={shot}", page.as_uri()]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert shot.exists(), done.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (2400, 1100)
    white = (pixels > 0.97).all(axis=-1)
    assert white.mean() < 0.97, "blank page"
    # The figures' first line colour (matplotlib's C0, #1f77b4) is on screen: the embedded
    # PNGs were decoded and drawn, not just the text.
    c0 = (abs(pixels - (0x1F / 255, 0x77 / 255, 0xB4 / 255)) < 0.05).all(axis=-1)
    assert c0.sum() > 500


def test_report_of_a_lightning_run_file(tmp_path: Path) -> None:
    """A callback's ``run_file=`` gets the same report, on the training step axis."""
    pytest.importorskip("lightning", reason="needs the [lightning] extra")
    from sysmetrics.integrations.lightning import SystemMetricsCallback
    from tests.test_lightning import TinyModel, fit

    fit(tmp_path, SystemMetricsCallback(interval=0.02, run_file=True), model=TinyModel(sleep=0.02))
    path = tmp_path / "csv/version_0/system_metrics.jsonl"
    run = read_run(path)
    assert report.axis(run).label == "step"
    page = tmp_path / "report.html"
    report.write_report(path, page)
    text = page.read_text()
    assert "steps 0 to 15" in text  # 2 epochs of 8 batches
    assert RSS in table(text)


def test_steps_at_samples_without_a_clock_fall_back_to_time() -> None:
    run = Run()
    for time, step in [(1.0, None), (None, 0), (None, 1), (4.0, None)]:
        run.add({"cpu": 1.0}, time=time, monotonic=None, step=step)
    run.pad()
    assert report.axis(run).label == "elapsed time (s)"


def test_appended_recordings_are_told_apart(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with path.open("w") as f:  # two recordings at 0.5 s, 20 s apart, each from step 0
        for n in range(20):
            t = n * 0.5 + (20.0 if n >= 10 else 0.0)
            metrics = {"cpu": 50.0, "disk.in": 100.0 * (n % 10)}  # a new monitor: from 0
            f.write(json.dumps({"time": 1e9 + t, "monotonic": t, "step": n % 10,
                                "metrics": metrics}) + "\n")  # fmt: skip
    run = read_run(path)
    page = report.render(run, "t", {})
    assert "20 samples in 2 recordings (the file was appended to) over 9.0 s" in page
    assert "one every 0.5 s" in page
    (disk,) = [s for s in report.series(run) if s.label == "disk.in"]
    assert sorted(set(disk.values[~np.isnan(disk.values)])) == [200.0]  # none across the gap
    ax = report.axis(run)
    assert ax.label == "elapsed time (s)" and ax.starts == (0, 10)
    x, *_ = report._drawn(ax, disk.values)
    assert np.isnan(x).sum() == 1  # one break: no line across the 20 s gap
    assert (x[8], x[10]) == (4.5, 25.5) and np.isnan(x[9])


def test_memory_unit_follows_its_size(tmp_path: Path) -> None:
    samples = [{"proc.memory.rssMB": 300.0, "proc.memory.availableMB": 20_000.0}] * 3
    rows = {
        r.label: r
        for r in report.summary(report.series(read_run(write_run(tmp_path / "r", samples))))
    }
    assert (rows[RSS].unit, rows[RSS].peak) == ("MiB", 300)
    assert rows["proc.memory.availableMB"].unit == "GiB"


def test_report_never_overwrites_the_run_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl", [{"cpu": 1.0}, {"cpu": 2.0}])
    before = run.read_bytes()
    done = cli("report", str(run), "-o", str(run))
    assert done.returncode == 1
    assert "is the run file: give another -o" in done.stderr
    assert run.read_bytes() == before
    html_named = write_run(tmp_path / "run.html", [{"cpu": 1.0}])  # default -o: itself
    assert cli("report", str(html_named)).returncode == 1


def test_no_metric_values_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run.jsonl", [{"cpu": "high"}])
    done = cli("report", str(run))
    assert done.returncode == 1
    assert "has no metric values" in done.stderr


def test_gpu_figure_puts_utilization_first_and_keeps_temperature(tmp_path: Path) -> None:
    keys = {"correctedMemoryErrors": 0.0, "pcieRxBytes": 1e9, "gpu": 80.0, "temp": 70.0,
            "powerWatts": 300.0, "smClock": 1700.0, "memoryAllocatedBytes": 5e10,
            "throttle.thermal": 0.0}  # fmt: skip
    samples = [{f"gpu.0.{k}": v for k, v in keys.items()} for _ in range(5)]
    run = read_run(write_run(tmp_path / "r", samples))
    drawn = [s for s in report.series(run) if s.unit != "count/s"]  # as figures() does
    units = [unit for unit, _ in report._panels(drawn)]
    assert units == ["%", "GiB", "°C", "W", "MHz", "MiB/s", "0/1"]
    assert report.figures(run)["GPU 0"][:4] == b"\x89PNG"


def test_a_group_of_error_counters_only_has_no_figure(tmp_path: Path) -> None:
    samples = [{"gpu.0.correctedMemoryErrors": float(n)} for n in range(5)]
    run = read_run(write_run(tmp_path / "r", samples))
    assert report.figures(run) == {}
    assert report.summary(report.series(run))[0].total == "4 count"


# 20 examples: each writes a page with its figures (0.45 s of CPU); the regression's
# names are always among them (@example).
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.sampled_from(
                ["disk./x$\\badcmd$.usagePercent", "$x^2$", "\\", "<b>", "a\x00\r\n", "_x"]
            ),
            st.builds(lambda c, n: c * n, st.characters(), st.integers(2000, 20_000)),
        ),
        min_size=1,
        max_size=6,
    )
)
@example(["disk./x$\\badcmd$.usagePercent", "$x^2$", "\\", "<b>", "a\x00\r\n", "_x"])
def test_any_key_names_give_a_page(tmp_path: Path, keys: list[str]) -> None:
    """Regression: a key with mathtext (``$\\badcmd$`` in a disk path) gave no page at all.

    Control characters, ``$``, ``\\``, HTML and very long names: always a page, through
    ``write_report`` with its figures, every key plain text.
    """
    samples = [{k: float(n + i) for i, k in enumerate(keys)} for n in range(4)]
    path = write_run(tmp_path / "run.jsonl", samples)
    out = tmp_path / "page.html"
    report.write_report(path, out)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>")
    assert "<td><b>" not in page  # escaped: &lt;b&gt;
    assert page.count('src="data:image/png;base64,') >= 1


@pytest.mark.parametrize("pss", [True, False], ids=["with-pss", "rss-only"])
def test_the_jobs_memory_is_drawn_as_its_pss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pss: bool
) -> None:
    """Regression (issue 22, item 1): the memory figure drew the RSS summed over the job
    (8 forked workers sharing a dataset: 23 GiB) beside its PSS (2.5 GiB); where the run
    has PSS, the RSS is left out of the figures and marked in the table."""
    shared = {"proc.memory.pssMB": 2_600.0} if pss else {}
    samples = [{"proc.memory.rssMB": 23_000.0, "memory": 15.0, **shared}] * 3
    run = read_run(write_run(tmp_path / "r", samples))
    drawn: dict[str, list[str]] = {}
    monkeypatch.setattr(  # where figures() looks it up
        report.drawing,
        "figure_png",
        lambda g, members, *a: drawn.setdefault(g, [s.label for s in members]),
    )
    report.figures(run)
    labels = {r.label for r in report.summary(report.series(run))}
    assert RSS in labels  # in the table, marked
    if pss:
        assert drawn["Memory"] == ["memory", "proc.memory.pssMB"]
    else:
        assert drawn["Memory"] == ["memory", RSS]


def test_a_key_measured_in_few_samples_has_its_points_marked() -> None:
    """A key measured in under half the samples (PSS: a reading every few seconds) was
    drawn as a line through readings seconds apart, a ramp nobody measured; its points
    are marked. A key in every sample is a plain line."""
    import numpy as np

    nan = float("nan")
    sparse = np.array([1.0, nan, nan, nan, 5.0, nan, nan, nan, 9.0, nan])
    dense = np.arange(10.0)
    assert report.point_marker(sparse, sparse[~np.isnan(sparse)]) == "o"
    assert report.point_marker(dense, dense) is None
    assert report.point_marker(dense[:2], dense[:2]) == "o"  # too few to see as a line


# -- issue 26: stalls, the idle tail, speed first, several files, --json, --x --------------


def write_lines(
    path: Path, rows: list[tuple[float, Any, dict[str, Any]]], node: Any = None
) -> Path:
    """A run file of ``(seconds, step, metrics)`` rows, with a ``run`` line (node ``node``)."""
    with path.open("w") as f:
        start = 1.7e9
        pid = zlib.crc32(path.name.encode()) % 100_000  # each file its own recording
        run = {"host": "h", "pid": pid, "start": start + rows[0][0], "interval": 0.5}
        f.write(json.dumps({"run": run if node is None else {**run, "node": node}}) + "\n")
        for t, step, metrics in rows:
            line = {"time": start + t, "monotonic": 100.0 + t, "step": step, "metrics": metrics}
            f.write(json.dumps(line if node is None else {**line, "node": node}) + "\n")
    return path


def deadlock(path: Path) -> Path:
    """A DDP deadlock as a run file: 100 steps in 60 s, then step 100 for 10 min, idle."""
    rows = [(t * 0.5, min(int(t * 0.5 / 0.6), 100), {"cpu": 95.0 if t < 120 else 1.0,
             **({"step.seconds": 0.6, "step.dataWaitPercent": 10.0} if t < 120 else {})})
            for t in range(120 + 1200)]  # fmt: skip
    return write_lines(path, rows)


def test_a_deadlock_is_a_marked_span_not_a_vertical_line(tmp_path: Path) -> None:
    """Regression (issue 26): a real 10-minute DDP deadlock drew as one vertical line at the
    last step: every sample after it sat at x = 100. The stall gets a width of its own on
    the step axis, its samples spread by time, and the page, figures and JSON say it."""
    path = deadlock(tmp_path / "run.jsonl")
    run = read_run(path)
    ax = report.axis(run)
    assert ax.label == "step"
    tail = ax.x[122:]
    assert not np.isnan(tail).any()  # drawn, not left out
    assert np.all(np.diff(tail) > 0)  # spread by time, not stacked at one x
    (stall,) = ax.stalls
    assert stall.ended and stall.step == 100 and stall.next_step is None
    assert stall.seconds == pytest.approx(600, abs=1)
    assert stall.x1 - stall.x0 == pytest.approx(report.STALL_MAX_WIDTH * 100)  # 10 min: capped
    page = report.render(run, "t", {})
    assert "no new step after step 100 for the last 10 min 00 s" in page
    assert "the run ended stalled" in page
    done = cli("report", str(path), "--json")
    assert done.returncode == 0, done.stderr
    (node,) = json.loads(done.stdout)["nodes"]
    assert node["stalls"] == [{"step": 100, "next_step": None, "seconds": stall.seconds,
                               "start": stall.start, "ended": True}]  # fmt: skip
    assert not (tmp_path / "run.html").exists()  # --json alone writes no page
    from matplotlib.patches import Rectangle

    for group in ("Training", "CPU"):  # every figure shades it, with its duration
        top = drawn_figure(run, group).axes[0]
        (span,) = [p for p in top.patches if p.get_hatch() == "//"]
        # axvspan's patch: a Rectangle from matplotlib 3.9, a Polygon before (3.6 here).
        if isinstance(span, Rectangle):
            x0, x1 = span.get_x(), span.get_x() + span.get_width()
        else:
            xs = [x for x, _ in span.get_xy()]
            x0, x1 = min(xs), max(xs)
        assert (x0, x1) == (pytest.approx(stall.x0), pytest.approx(stall.x1))
        assert [t.get_text() for t in top.texts] == [" no new step\nfor 10 min 00 s "]


def test_a_stall_in_the_middle_widens_the_axis_and_keeps_step_ticks(tmp_path: Path) -> None:
    """Steps 0..50 at 0.5 s, 30 s without a new step, then steps 51..100: the stall's
    samples spread over their own width, later steps shift right by it, ticks say steps."""
    rows: list[tuple[float, Any, dict[str, Any]]] = [(n * 0.5, n, {"cpu": 50.0}) for n in range(51)]
    rows += [(25.0 + n * 0.5, 50, {"cpu": 5.0}) for n in range(1, 61)]  # 30 s at step 50
    rows += [(55.0 + n * 0.5, 50 + n, {"cpu": 50.0}) for n in range(1, 51)]
    run = read_run(write_lines(tmp_path / "r.jsonl", rows))
    ax = report.axis(run)
    (stall,) = ax.stalls
    assert (stall.step, stall.next_step, stall.ended) == (50, 51, False)
    assert stall.seconds == pytest.approx(30.5)
    width = stall.x1 - stall.x0
    assert width > 1 + report.STALL_MIN_WIDTH * 100  # more than the one step it spans
    assert ax.at_step(40) == 40 and ax.at_step(60) == pytest.approx(60 + width - 1)
    assert np.all(np.diff(ax.x[~np.isnan(ax.x)]) > 0)
    assert "no new step after step 50 for 30.5 s (25.0 s after the start)" in report.render(
        run, "t", {}
    )
    timed = report.axis(run, "time")  # the same stall on the time axis
    assert timed.label == "elapsed time (s)"
    assert [(s.first, s.last) for s in timed.stalls] == [(stall.first, stall.last)]
    figure = drawn_figure(run, "CPU")
    labels = [t.get_text() for t in figure.axes[-1].get_xticklabels()]
    assert labels and all(label.isdigit() for label in labels)
    assert int(labels[-1]) <= 100  # step numbers, not widened x positions


def test_the_idle_tail_after_the_last_step_is_not_drawn(tmp_path: Path) -> None:
    """Regression (issue 26): the samples after the last step (the job winding down, CPU
    at 0) were stacked at the last step, a vertical drop to zero. A tail shorter than a
    stall is left out of the step axis (the page says how many samples); a long one is
    a stall (above)."""
    rows: list[tuple[float, Any, dict[str, Any]]] = [(n * 0.5, n, {"cpu": 90.0}) for n in range(50)]
    rows += [(25.0 + n * 0.5, 49, {"cpu": 0.0}) for n in range(1, 13)]  # 6 s idle
    run = read_run(write_lines(tmp_path / "r.jsonl", rows))
    ax = report.axis(run)
    assert np.isnan(ax.x[-12:]).all()  # not a vertical line at step 49
    assert ax.x[-13] == 49  # step 49 first seen; it took its 0.5 s
    assert ax.after == 12 and ax.stalls == ()
    assert "The 12 samples after the last step" in report.render(run, "t", {})
    assert report.axis(run, "time").x[-1] == pytest.approx(31.0)  # all there on time


def test_step_keys_are_training_and_lead_the_page(tmp_path: Path) -> None:
    """Regression (issue 26): ``step.energyJoules`` (a gauge, J per step) went to "Energy"
    by its name's suffix and the other step keys to "Other", drawn last; the training
    figure leads, seconds per step first, then the data-wait share."""
    assert report.group_of("step.energyJoules") == "Training"
    assert report.group_of("step.seconds") == "Training"
    assert report.group_of("cpu.energyJoules") == "Energy"
    assert report.group_of("gpu.0.energyJoules") == "GPU 0"
    samples = [{"step.seconds": 0.5, "step.dataWaitPercent": 20.0, "step.energyJoules": 30.0,
                "step.samplesPerSecond": 64.0, "cpu": 50.0, "cpu.energyJoules": 10.0 * n}
               for n in range(6)]  # fmt: skip
    run = read_run(write_run(tmp_path / "r.jsonl", samples))
    rows = {r.label: r for r in report.summary(report.series(run))}
    assert (rows["step.energyJoules"].unit, rows["step.energyJoules"].mean) == ("J", 30)
    assert rows["step.energyJoules"].total == ""  # a gauge: no total
    assert (rows["cpu.energyJoules"].unit, rows["cpu.energyJoules"].mean) == ("W", 10)
    pngs = report.figures(run)
    assert list(pngs)[:2] == ["Training", "CPU"]
    training = [s for s in report.series(run) if s.group == "Training"]
    assert [u for u, _ in report._panels(training)] == ["s", "%", "samples/s", "J"]
    assert drawn_figure(run, "Training").axes[0].get_title() == "Training speed"


class Kept:
    """matplotlib's ``Figure``, kept where a test can look at it after drawing."""

    made: ClassVar[list[Any]] = []

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from matplotlib.figure import Figure

        figure = Figure(*args, **kwargs)
        cls.made.append(figure)
        return figure


def drawn_figure(run: Run, group: str, **kwargs: Any) -> Any:
    """The matplotlib figure ``figures()`` draws for ``group``, kept after drawing."""
    Kept.made = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_optional, "matplotlib_figure", lambda: Kept)
        patch.setattr(drawing, "_REUSE_FIGURES", False)  # a figure of its own per group
        pngs = report.figures(run, **kwargs)
    return Kept.made[list(pngs).index(group)]


def test_an_all_zero_rate_has_no_negative_axis(tmp_path: Path) -> None:
    """Regression (issue 26): a counter that never moved (disk.in: 0 MiB/s throughout)
    got matplotlib's default range for a constant, -0.055 to 0.055: a negative rate axis."""
    samples = [{"disk.in": 7.0, "disk.out": 3.0 + n, "cpu": 50.0} for n in range(6)]
    figure = drawn_figure(read_run(write_run(tmp_path / "r", samples)), "Disk")
    (panel,) = figure.axes
    low, high = panel.get_ylim()
    assert low == 0 and high > 0


def test_findings_spans_are_marked_on_the_speed_figure(tmp_path: Path) -> None:
    from sysmetrics.findings import Finding
    from sysmetrics.runfile import Span

    samples = [{"step.seconds": 0.5, "step.dataWaitPercent": 60.0} for _ in range(20)]
    run = read_run(write_run(tmp_path / "r", samples))  # steps 0..19, times 1000..1019
    ax = report.axis(run)
    found = [
        Finding("input-bound", "waited", {}, Span("step", 5, 9)),
        Finding("memory-limit", "peaked", {}, Span("time", 1012.0, 1012.0)),
        Finding("unused-gpu", "idle", {}, None),
    ]
    assert report.finding_marks(found, ax) == [(5, 9, "input-bound"), (12, 12, "memory-limit")]
    figure = drawn_figure(run, "Training", found=found)
    top = figure.axes[0]
    assert {t.get_text() for t in top.texts} == {"input-bound", "memory-limit"}
    assert not drawn_figure(run, "Training").axes[0].texts  # nothing found: nothing marked


def test_json_document_schema(recorded: Path, tmp_path: Path) -> None:
    """``--json``: one JSON document on stdout, every field of the documented schema with
    its type; no page unless ``-o`` (then its path goes to stderr, stdout stays JSON)."""
    done = cli("report", str(recorded), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert not recorded.with_suffix(".html").exists()
    assert set(doc) == {
        "schema", "files", "x", "left_out", "verdict", "findings", "nodes", "ledger"
    }  # fmt: skip
    assert set(doc["ledger"]) == {"prices", "job", "nodes"}  # tests/test_ledger.py: its figures
    assert set(doc["verdict"]) == {"bound", "band", "share", "label", "sentence", "shares",
                                   "could_be", "missing"}  # fmt: skip
    assert doc["left_out"] == []
    assert (doc["schema"], doc["files"], doc["x"]) == (
        "sysmetrics.report/1",
        [str(recorded)],
        "step",
    )
    (node,) = doc["nodes"]
    assert set(node) == {"node", "file", "samples", "recordings", "seconds", "interval", "steps",
                         "verdict", "stalls", "keys"}  # fmt: skip
    assert node["node"] == 0 and node["file"] == str(recorded) and node["recordings"] == 1
    run = read_run(recorded)
    assert node["samples"] == len(run)
    marked = [s for s in run.step if s is not None]
    assert node["steps"] == {"first": min(marked), "last": max(marked)}
    assert isinstance(node["seconds"], float) and isinstance(node["interval"], float)
    # The workload's one stretch without a new step is its write (300 MiB touched, 50 MiB
    # written and synced): about 1 s on a quiet machine, under the stall rule's
    # STALL_MIN_SECONDS; beside parallel workers on 2 CPUs it took 5.6 s once (CI), a stall
    # the rule rightly reports. The document says what the recording holds, either way.
    last = max(marked)
    first_seen = {}
    for step, t in zip(run.step, run.monotonic):
        if step is not None and t is not None:
            first_seen.setdefault(step, t)
    write = first_seen[last] - first_seen[last - 1]  # s, from the spin's last step to the next
    if write < fd.STALL_MIN_SECONDS:
        assert node["stalls"] == []
    else:
        (stall,) = node["stalls"]
        assert stall == {"step": last - 1, "next_step": last, "seconds": pytest.approx(write),
                         "start": stall["start"], "ended": False}  # fmt: skip
        assert isinstance(stall["start"], float)
    keys = {k["key"]: k for k in node["keys"]}
    for row in keys.values():
        assert set(row) == {"group", "key", "unit", "mean", "p95", "peak", "total", "total_unit"}
        assert all(isinstance(row[f], float) for f in ("mean", "p95", "peak"))
    page_rows = table(report.render(run, "t", {}))
    assert keys["cpu"]["peak"] == pytest.approx(page_rows["cpu"]["peak"], abs=0.5)  # as the page
    disk = keys["disk.out"]
    assert (disk["unit"], disk["total_unit"]) == ("MiB/s", "MiB") and disk["total"] >= 45
    with_page = cli("report", str(recorded), "--json", "-o", str(tmp_path / "p.html"))
    assert json.loads(with_page.stdout) == doc
    assert with_page.stderr.strip() == str(tmp_path / "p.html")


def test_json_findings_have_rule_sentence_evidence_span(tmp_path: Path) -> None:
    samples, sentence = FINDINGS["memory-limit"]
    path = write_run(tmp_path / "run.jsonl", samples)
    done = cli("report", str(path), "--json")
    assert done.returncode == 0, done.stderr
    (finding,) = json.loads(done.stdout)["findings"]
    assert finding["rule"] == "memory-limit" and sentence in finding["sentence"]
    assert finding["evidence"] == {"peak_percent": 96.0}
    assert finding["span"] == {"axis": "step", "first": 2, "last": 2}
    assert finding["node"] is None
    assert finding["subject"] is None  # the job's memory: no GPU, node or step


def test_json_findings_say_their_subject(tmp_path: Path) -> None:
    """A finding about one GPU says which in ``subject``, as the live line tells them apart."""
    samples, _ = FINDINGS["gpu-throttling"]
    done = cli("report", str(write_run(tmp_path / "run.jsonl", samples)), "--json")
    assert done.returncode == 0, done.stderr
    subjects = [f["subject"] for f in json.loads(done.stdout)["findings"]]
    assert subjects and all(
        s is not None and s["kind"] == "gpu" and s["id"] == "0" and s["node"] is None
        for s in subjects
    ), subjects


def test_x_chooses_the_axis(tmp_path: Path) -> None:
    path = deadlock(tmp_path / "run.jsonl")
    for x, label in (("step", "step"), ("time", "elapsed time (min)")):
        done = cli("report", str(path), "--x", x, "--png", str(tmp_path / x))
        assert done.returncode == 0, done.stderr
        assert report.axis(read_run(path), x).label == label
    bad = cli("report", str(path), "--x", "epoch")
    assert bad.returncode == 2
    assert re.search(
        r"argument --x: invalid choice: 'epoch' \(choose from '?step'?, '?time", bad.stderr
    )
    with pytest.raises(ValueError, match="x='epoch' is invalid: use one of step, time"):
        report.axis(read_run(path), "epoch")


def test_several_run_files_make_one_report_per_node(tmp_path: Path) -> None:
    """``report a.jsonl b.jsonl``: files of ``record`` on two nodes (each says node 0)
    are nodes 0 and 1, in the order given; the page has a section per node and the
    findings across nodes; the JSON lists both nodes with their files."""
    quick = [(n * 0.5, n, {"cpu": 90.0, "step.seconds": 0.5}) for n in range(20)]
    slow = [(n * 0.5, n // 2, {"cpu": 30.0, "step.seconds": 1.0}) for n in range(20)]
    a = write_lines(tmp_path / "a.jsonl", quick, node=0)
    b = write_lines(tmp_path / "b.jsonl", slow, node=0)
    out = tmp_path / "page.html"
    done = cli("report", str(a), str(b), "-o", str(out), "--png", str(tmp_path / "png"))
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "Samples of 2 nodes (node 0 (a.jsonl), node 1 (b.jsonl))" in page
    assert "<h2>Findings across nodes</h2>" in page
    assert page.index("<h2>Node 0</h2>") < page.index("<h2>Node 1</h2>")
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == [
        "all-nodes-training.png",
        "node-0-cpu.png",
        "node-0-training.png",
        "node-1-cpu.png",
        "node-1-training.png",
    ]
    rows = table(page)  # the last row of each key: node 1's table comes second
    assert rows["cpu"]["mean"] == 30
    doc = json.loads(cli("report", str(a), str(b), "--json").stdout)
    assert [(n["node"], n["file"], n["samples"]) for n in doc["nodes"]] == [
        (0, str(a), 20),
        (1, str(b), 20),
    ]
    assert doc["files"] == [str(a), str(b)]
    assert page.index('alt="all nodes: Training"') < page.index("<h2>Node 0</h2>")
    figure = drawn_nodes_speed(read_runs([a, b]))
    (panel,) = figure.axes  # step.seconds only: one panel, a line per node
    assert [t.get_text() for t in panel.get_legend().get_texts()] == [
        "node 0 step.seconds",
        "node 1 step.seconds",
    ]
    slow_line = np.asarray(panel.get_lines()[1].get_ydata())  # NaN: the break between nodes
    assert set(slow_line[~np.isnan(slow_line)].tolist()) == {1.0}  # node 1's own, not a mix
    one = read_run(a)
    assert report.nodes_speed_png(one) is not None  # one node: its line alone
    assert report.nodes_speed_png(read_run(write_run(tmp_path / "c", [{"cpu": 1.0}] * 3))) is None


def drawn_nodes_speed(run: Run) -> Any:
    Kept.made = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_optional, "matplotlib_figure", lambda: Kept)
        assert report.nodes_speed_png(run) is not None
    return Kept.made[0]


def test_cross_node_findings_come_once_above_the_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule that compares nodes (``CROSS_NODE_RULES``) is applied to the whole run and
    shown once, above the nodes; every other rule to each node on its own."""
    from sysmetrics.findings import Finding

    def rules(run: Run) -> list[Finding]:
        nodes = run.nodes
        if len(nodes) > 1:
            return [Finding("straggler-node", f"node {nodes[-1]} is slow", {"node": 1.0})]
        return [Finding("memory-limit", f"node {nodes[0]} memory", {})]

    # The page's model asks for the cross-node rules alone over the whole run, and for
    # every rule over each node's samples (issue 31: no rule runs twice on a sample).
    monkeypatch.setattr(report.model, "node_findings", rules)
    monkeypatch.setattr(report.model, "across_findings", rules)
    a = write_lines(tmp_path / "a.jsonl", [(n, n, {"cpu": 1.0}) for n in range(6)], node=0)
    b = write_lines(tmp_path / "b.jsonl", [(n, n, {"cpu": 1.0}) for n in range(6)], node=1)
    run = read_runs([a, b])
    page = report.render(run, "t", {})
    assert page.count("node 1 is slow") == 1
    assert page.index("node 1 is slow") < page.index("<h2>Node 0</h2>")
    assert "node 0 memory" in page and "node 1 memory" in page
    assert "straggler" not in page[page.index("<h2>Node 0</h2>") :]
    listed = report.page.document(run, [str(a), str(b)], report.run_findings(run))["findings"]
    assert [(f["rule"], f["node"]) for f in listed] == [
        ("straggler-node", None),
        ("memory-limit", 0),
        ("memory-limit", 1),
    ]
    marked: dict[Any, list[str]] = {}  # what each node's figures get to mark
    monkeypatch.setattr(
        report.drawing,
        "_figures",  # what draws each node's figures (titled "..., node K")
        lambda ax, every, name, found: (
            marked.update({int(name.rsplit(" ", 1)[1]): [f.rule for f in found]}) or {}
        ),
    )
    report.write_report([a, b], tmp_path / "page.html")
    assert marked == {0: ["straggler-node", "memory-limit"], 1: ["straggler-node", "memory-limit"]}


def test_files_of_different_runs_are_refused(tmp_path: Path) -> None:
    rows = [(float(n), n, {"cpu": 1.0}) for n in range(5)]
    a = write_lines(tmp_path / "a.jsonl", rows)
    later = write_lines(tmp_path / "later.jsonl", [(t + 3600, s, m) for t, s, m in rows])
    done = cli("report", str(a), str(later))
    assert done.returncode == 1
    assert f"{a} and {later} do not overlap in time: they are not the nodes of one run" in (
        done.stderr
    )
    twice = cli("report", str(a), str(a))
    assert twice.returncode == 1 and f"{a} is given twice" in twice.stderr
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    same = cli("report", str(a), str(copy))
    assert same.returncode == 1
    assert "hold the same recording (host, pid and start)" in same.stderr
    assert not (tmp_path / "a.html").exists()


def test_step_means_are_over_steps_as_the_clock_measured(tmp_path: Path) -> None:
    """Regression: the table's mean of ``step.seconds`` was over samples, so a few slow
    steps (many samples each) outweighed many fast ones (many steps a sample). A real
    ``StepClock`` under a real monitor and run file: 60 steps of 5 ms, then 10 of 60 ms
    (50 ms of it waiting for data); the mean is the clock's own seconds per step."""
    import time

    from sysmetrics import SystemMonitor
    from sysmetrics.sinks.jsonl import JsonlSink
    from sysmetrics.steptime import StepClock

    clock = StepClock()
    monitor = SystemMonitor(interval=0.05)
    monitor.step_timing = clock.read
    path = tmp_path / "run.jsonl"
    sink = JsonlSink(monitor, path)
    # Marked from the start, as the frameworks' step counters are (0 before the first
    # step): the first sample that closed steps then says how many from the marks' growth.
    # Unmarked, its weight is the others' median (test_weights covers that guess), which
    # beside parallel workers, where the sampler ran late and few samples took the 70
    # steps, read a mean 28 % over the clock's (0.0186 s for 0.0145; 54 % at interval 0.2).
    monitor.step = 0
    monitor.start()
    time.sleep(0.2)  # samples before the first step
    clock.restart()
    for n in range(70):
        slow = n >= 60
        if slow:
            time.sleep(0.05)  # the batch arrives late
        clock.begin()
        monitor.step = n
        time.sleep(0.01 if slow else 0.005)
        clock.end()
    truth = clock.read()
    time.sleep(0.15)  # the last steps' sample
    monitor.stop()
    sink.close()
    rows = {r.label: r for r in report.summary(report.series(read_run(path)))}
    per_step = truth.seconds / truth.steps
    assert rows["step.seconds"].mean == pytest.approx(per_step, rel=0.15)
    wait = 100 * truth.wait / truth.seconds
    assert rows["step.dataWaitPercent"].mean == pytest.approx(wait, abs=8)


STALLS = """
import time, sysmetrics
t, i = time.monotonic(), 0
while time.monotonic() - t < 1.5:  # steps advance for 1.5 s ...
    i += 1
    sysmetrics.step(i)
    time.sleep(0.01)
time.sleep(11)  # ... then none for 11 s: a hang, ended by the command's end
"""


@pytest.mark.long
def test_a_real_run_that_ends_stalled_is_one_span(tmp_path: Path) -> None:
    """``record`` of a loop that stops marking steps for its last 11 s: the step axis
    spreads those samples over the stall's width, and the page and JSON say it."""
    path = tmp_path / "run.jsonl"
    done = cli("record", "--output", str(path), "--interval", "0.25", "--", sys.executable,
               "-c", STALLS)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = read_run(path)
    ax = report.axis(run)
    (stall,) = ax.stalls
    assert stall.ended and 10.5 <= stall.seconds <= 12.5
    spread = ax.x[stall.first :]
    assert np.all(np.diff(spread) > 0) and spread[-1] - spread[0] >= 0.05 * stall.step
    doc = json.loads(cli("report", str(path), "--json").stdout)
    (said,) = doc["nodes"][0]["stalls"]
    assert (said["step"], said["ended"]) == (stall.step, True)
    page = report.render(run, "t", {})
    assert f"no new step after step {stall.step} for the last" in page


def test_a_long_key_keeps_its_legend_inside_the_figure(tmp_path: Path) -> None:
    """Regression: with the same margins in every figure, a 60-character key's legend ran
    past the figure's right edge and was cut off; legend labels wrap onto lines."""
    key = "disk./very/long/path/to/some/mounted/filesystem/x.usagePercent"
    samples = [{key: 50.0 + n, "cpu": 10.0} for n in range(5)]
    figure = drawn_figure(read_run(write_run(tmp_path / "r", samples)), "Disk")
    for panel in figure.axes:
        legend = panel.get_legend()
        assert legend.get_window_extent().x1 <= figure.bbox.width
        text = "".join(t.get_text() for t in legend.get_texts()).replace("\n", "")
        assert text == report.drawing._cut(key, report.MAX_LABEL_CHARS)  # all of it, wrapped


# Samples of a run: (s since the sample before, steps since it, whether it has step keys).
STEPS_AND_GAPS = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.1, 0.5, 1.0, 12.0, 700.0]),
        st.sampled_from([0, 0, 0, 1, 3, 40]),
        st.booleans(),
    ),
    min_size=1,
    max_size=40,
)


def _stepped_run(rows: list[tuple[float, int, bool]]) -> Run:
    run = Run()
    t, step = 0.0, 0
    for gap, advance, keys in rows:
        t, step = t + gap, step + advance
        metrics = {
            "cpu": 50.0,
            **({"step.seconds": 0.1, "step.dataWaitPercent": 5.0} if keys else {}),
        }
        run.add(metrics, time=1e9 + t, monotonic=t, step=step)
    run.pad()
    return run


@settings(max_examples=80, deadline=None)
@given(STEPS_AND_GAPS, st.sampled_from(report.AXES))
def test_any_steps_and_gaps_give_an_ordered_axis_and_a_page(
    rows: list[tuple[float, int, bool]], x: str
) -> None:
    """Stalls anywhere (the middle, the end, back to back), repeated clocks, jumps: the
    drawn x never goes back, every stall lies inside the run and the axis, and the page
    is made (its figures: the test after this one)."""
    run = _stepped_run(rows)
    ax = report.axis(run, x)
    drawn = ax.x[~np.isnan(ax.x)]
    assert np.all(np.diff(drawn) >= 0)
    for stall in ax.stalls:
        assert 0 <= stall.first < stall.last < len(run)
        assert stall.x1 >= stall.x0 and stall.seconds >= fd.STALL_MIN_SECONDS
    # The page's stalls are the findings' (issue 31: one detector; the findings say the
    # MAX_STALLS longest). A stall under STALL_S is one where it is over STALL_SHARE of
    # its recording, on the page as in the findings.
    said = {int(f.evidence["step"]) for f in fd.findings(run) if f.rule == "stall"}
    assert said <= {stall.step for stall in ax.stalls}
    assert len(said) == min(len({stall.step for stall in ax.stalls}), fd.MAX_STALLS)
    page = report.render(run, "t", {}, x=x)
    assert page.endswith("</html>")


# Fewer examples than the axis's: each draws every figure with matplotlib (0.6 s of CPU).
@settings(max_examples=20, deadline=None)
@given(STEPS_AND_GAPS, st.sampled_from(report.AXES))
def test_any_steps_and_gaps_give_figures(rows: list[tuple[float, int, bool]], x: str) -> None:
    assert report.figures(_stepped_run(rows), x=x)


def test_many_stalls_are_bounded_in_words(tmp_path: Path) -> None:
    """A run that stops for 12 s every 10 steps (say, a long evaluation) has 30 stalls:
    the page says the 10 longest and sums the rest; every one is still shaded."""
    rows: list[tuple[float, Any, dict[str, Any]]] = []
    t = 0.0
    for step in range(300):
        t += 0.5 + (12.0 + step / 100 if step % 10 == 9 else 0.0)
        rows.append((t, step, {"cpu": 50.0}))
    run = read_run(write_lines(tmp_path / "r.jsonl", rows))
    ax = report.axis(run)
    assert len(ax.stalls) == 30  # before steps 9, 19, ..., 299
    page = report.render(run, "t", {})
    assert page.count("no new step after step") == report.MAX_STALLS_SAID
    assert "no new step after step 298 for 15.5 s" in page  # the longest are said
    assert "no new step after step 8 for" not in page
    assert "; 20 shorter stalls, 4 min 31 s in all" in page  # 20 x 12.5 s + 20.8 s
    figure = drawn_figure(run, "CPU")
    assert len(figure.axes[0].texts) == report.MAX_STALLS_SAID


def test_a_figure_drawn_on_a_reused_one_is_the_same_pixel_for_pixel(tmp_path: Path) -> None:
    """``figures()`` draws each figure on the last one of as many panels, cleared (the
    8-GPU day's 13 figures took half their time making panels and ticks anew): every
    PNG is pixel for pixel the one a new figure gives, with stalls, step ticks, finding
    marks, point markers, flags, a flat line, an all-zero key and recordings appended."""
    from matplotlib.image import imread

    from sysmetrics.findings import Finding
    from sysmetrics.runfile import Span

    samples: list[dict[str, Any]] = []
    steps: list[int] = []
    step = 0
    for n in range(600):
        step += 0 if 200 <= n < 260 else 1  # a stall: steps are drawn by time there
        m = {"cpu": 50 + 10 * math.sin(n / 20), "memory": 40.0, "disk.in": 5.0 * n,
             "gpu.0.gpu": 0.0, "gpu.0.temp": 70 + 0.001 * (n % 3),
             "gpu.0.throttle.thermal": float(n % 100 < 5), "step.seconds": 0.5 + (n % 50 == 0),
             "step.dataWaitPercent": 10.0 + n % 7, "proc.memory.rssMB": 2000.0 + n}  # fmt: skip
        if n % 7 == 0:
            m["proc.memory.pssMB"] = 1500.0 + n  # measured every 7th sample: marked
        if 100 <= n < 130:
            m["proc.child.7.cpu"] = 12.0
        samples.append(m)
        steps.append(step)
    path = tmp_path / "r.jsonl"
    with path.open("w") as f:
        for n, (m, s) in enumerate(zip(samples, steps)):
            f.write(json.dumps({"time": 1e9 + n, "monotonic": 5.0 + n, "step": s, "metrics": m}))
            f.write("\n")
    run = read_run(path)
    found = [Finding("input-bound", "words", {}, Span("step", 300, 400))]
    for x in report.AXES:
        reused = report.figures(run, x=x, found=found)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(drawing, "_REUSE_FIGURES", False)
            new = report.figures(run, x=x, found=found)
        assert list(reused) == list(new) and len(new) >= 5
        counts = [len(drawing._panels(ms)) for ms in [[s for s in report.series(run)
                  if s.group == g] for g in new]]  # fmt: skip
        assert len(counts) > len(set(counts))  # some figures were drawn on a reused one
        for group in new:
            a, b = (imread(io.BytesIO(pngs[group]), format="png") for pngs in (reused, new))
            assert a.shape == b.shape and np.array_equal(a, b), (x, group)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.floats(allow_infinity=False), st.just(math.nan)), min_size=1,
             max_size=30),
    st.lists(st.one_of(st.floats(-5, 5), st.just(math.nan)), min_size=29, max_size=29),
)  # fmt: skip
def test_vectorized_rates_are_counter_rates(values: list[float], seconds: list[float]) -> None:
    """``_rates`` (numpy, one pass) gives :func:`counter_rate`'s rate at every interval, NaN
    where it gives none, and the increase over the intervals that have a rate."""
    from sysmetrics.descriptions import counter_rate
    from sysmetrics.report.data import _rates

    column = np.array(values)
    dt = np.array(seconds[: len(values) - 1])
    with np.errstate(all="ignore"):
        rates, total = _rates(column, dt)
    expected = [counter_rate(a, b, t) for a, b, t in zip(values, values[1:], dt.tolist())]
    assert math.isnan(rates[0]) and len(rates) == len(values)
    for got, want in zip(rates[1:].tolist(), expected):
        assert (math.isnan(got) and want is None) or got == want
    ok = np.array([r is not None for r in expected], dtype=bool)
    with np.errstate(all="ignore"):
        want_total = float(np.diff(column)[ok].sum())  # the sum as it was made before
    assert total == want_total or (math.isnan(total) and math.isnan(want_total))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--xaxis", "time"], "--xaxis (did you mean --x?) time"),
        (["--x-axis=time"], "--x-axis=time (did you mean --x?)"),
        (["--jsn"], "--jsn (did you mean --json?)"),
        (["--pngs", "figs"], "--pngs (did you mean --png?) figs"),
    ],
)
def test_an_unknown_flag_gets_a_suggestion(args: list[str], said: str, tmp_path: Path) -> None:
    """Regression (issue 33): ``report x --xaxis time`` said only ``unrecognized arguments:
    --xaxis time``, where ``record`` suggests the flag meant."""
    done = cli("report", str(tmp_path / "x.jsonl"), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: sysmetrics report "), done.stderr
    assert done.stderr.endswith(f"sysmetrics report: error: unrecognized arguments: {said}\n")
    far = cli("report", str(tmp_path / "x.jsonl"), "--bogus")
    assert far.stderr.endswith("sysmetrics report: error: unrecognized arguments: --bogus\n")
