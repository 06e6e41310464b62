"""``sysmetrics report``: real run files (``record`` of a real child) and crafted ones.

The page is opened in headless Chromium (Debian's ``chromium``, installed under CI by
:mod:`tests.debian`, skipped with the reason elsewhere) and its screenshot checked.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("matplotlib", reason="needs the [report] extra")

from sysmetrics import _optional, report
from sysmetrics.findings import Run, read_run
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
    with pytest.raises(ImportError, match=r"pip install 'sysmetrics\[report\]'"):
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


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
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
