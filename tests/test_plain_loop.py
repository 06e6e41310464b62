"""Plain loops under ``sysmetrics record``: ``sysmetrics.batches``, ``sysmetrics.step`` and
the step file's timing block, with real recorder processes and real step files."""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import sysmetrics
from sysmetrics import runfile, stepfile
from sysmetrics.collectors.rapl import RaplCollector
from sysmetrics.monitor import SystemMonitor
from sysmetrics.steptime import StepClock, StepTotals

from .test_rapl import add, powercap

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, locks files")

FETCH, BODY = 0.02, 0.03  # s: the loop's wait for each batch, and its step's work
# The loop times itself (argv[1]: a file of "FETCH_SECONDS STEP_END" lines, one a step,
# its own clock): the truth the step keys are checked against, whatever the load.
LOOP = f"""
import sys, time, warnings
import numpy as np
import sysmetrics
warnings.simplefilter("error")
fetched = [0.0]

def data(n):
    for _ in range(n):
        start = time.perf_counter()
        time.sleep({FETCH})  # the batch's fetch
        fetched[0] = time.perf_counter() - start
        yield np.zeros((8, 3))  # 8 samples

i = 0
with open(sys.argv[1], "w") as truth:
    for epoch in range(2):
        truth.write("epoch %r\\n" % time.perf_counter())
        for batch in sysmetrics.batches(data(30)):
            time.sleep({BODY})  # the step's work
            i += 1
            sysmetrics.step(i)
            truth.write("%r %r\\n" % (fetched[0], time.perf_counter()))
        time.sleep(0.5)  # "validation" between epochs: no step's time
"""


def timed_steps(path: Path) -> tuple[list[float], list[float]]:
    """Each step's seconds and its fetch's, as the loop timed them (``LOOP``)."""
    steps, fetches, last = [], [], 0.0
    for line in path.read_text().splitlines():
        first, second = line.split()
        if first == "epoch":  # an epoch's start: its first step runs from here
            last = float(second)
            continue
        steps.append(float(second) - last)
        fetches.append(float(first))
        last = float(second)
    return steps, fetches


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_a_plain_loop_under_the_recorder_gets_the_step_keys(tmp_path: Path) -> None:
    """20 ms per batch fetch, 30 ms per step body: 50 ms steps, 40 % waiting, read back
    from the run file, against the steps and fetches as the loop timed them (a loaded
    machine lengthens both alike). ``LOCAL_RANK=0`` with ``RANK=1`` (node 1's first
    rank, as torchrun sets it) times; ``WORLD_SIZE=2``: samples of the whole job, twice
    this rank's.

    Regression (issue 25): before ``sysmetrics.batches`` the loop could not run (no
    such attribute) and the run file had no ``step.*`` key."""
    run = tmp_path / "run.jsonl"
    env = {**os.environ, "LOCAL_RANK": "0", "RANK": "1", "WORLD_SIZE": "2"}
    cmd = [sys.executable, "-m", "sysmetrics", "record", "-o", str(run), "--interval", "0.1"]
    truth = tmp_path / "truth.txt"
    proc = subprocess.run(
        [*cmd, "--", sys.executable, "-c", LOOP, str(truth)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    r = runfile.read_run(run)
    cols = {k: [v for v in r.columns[k] if not math.isnan(v)] for k in r.columns}
    steps, fetches = timed_steps(truth)
    assert len(steps) == 60 and min(steps) >= FETCH + BODY
    seconds = cols["step.seconds"]
    assert len(seconds) >= 10
    assert abs(mean(seconds) - mean(steps)) <= 0.2 * mean(steps), (seconds, steps)
    # The half second between the two loops is no step's: no sample holds it (a window's
    # mean step is at most the longest step the loop timed).
    assert max(seconds) <= 1.1 * max(steps) < 0.5, (seconds, steps)
    wait = cols["step.dataWaitPercent"]
    assert abs(mean(wait) - 100 * sum(fetches) / sum(steps)) <= 10, (wait, fetches, steps)
    rate = cols["step.samplesPerSecond"]
    expected = 2 * 8 / mean(steps)
    assert abs(mean(rate) - expected) <= 0.2 * expected, rate
    marked = [s for s in r.step if s is not None]
    assert marked == sorted(marked) and marked[-1] == 60
    # A sample with step keys has the step they reached (read with them, at the tick).
    timed = [j for j, v in enumerate(r.columns["step.seconds"]) if not math.isnan(v)]
    assert all(r.step[j] is not None for j in timed)


def test_energy_per_step_from_a_rapl_counter(tmp_path: Path) -> None:
    """``step.energyJoules`` from a real :class:`RaplCollector` over a powercap tree in
    ``tmp_path`` (the kernel's sysfs ABI, see tests/test_rapl.py) whose counters the test
    raises by 3 J (package) and 1 J (DRAM) per step, with the totals of a
    :class:`StepClock` the test drives (2 steps, then 3, between samples)."""
    root = powercap(tmp_path, packages=1)
    rapl = RaplCollector.create(str(root))
    assert rapl is not None
    t = [0.0]
    clock = StepClock(lambda: t[0])
    m = SystemMonitor(interval=3600, collectors=[rapl])
    m.step_timing = clock.read
    reader = m.reader()
    clock.restart()
    m._sample_once()  # the baseline
    for n in (2, 3):
        for _ in range(n):
            t[0] += 0.01
            clock.waited(0.01)
            t[0] += 0.04
            clock.end(samples=8)
            add(root, "intel-rapl:0", 3_000_000)
            add(root, "intel-rapl:0:2", 1_000_000)  # dram
        m._sample_once()
        got = reader.snapshot(repeat=False)
        assert got["step.energyJoules"] == pytest.approx(4.0)
        assert got["step.seconds"] == pytest.approx(0.05)
        assert got["step.dataWaitPercent"] == pytest.approx(20.0)
        assert got["step.samplesPerSecond"] == pytest.approx(160.0)
    assert got["cpu.energyJoules"] == pytest.approx(15.0)


class Monitor:
    """What a :class:`stepfile._StepReader` touches of a monitor."""

    interval = 0.1
    step: int | None = None
    step_timing: object = None


@pytest.fixture
def step_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A recorder's step file, and ``sysmetrics.step``/``batches`` as in a new process
    whose ``SYSMETRICS_STEP_FILE`` names it (closed again after the test)."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    path = Path(stepfile.create(str(private)))
    monkeypatch.setenv(stepfile.ENV, str(path))
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in [
        ("_fd", None),
        ("_tried", False),
        ("_timing", None),
        ("_timing_tried", False),
    ]:
        monkeypatch.setattr(stepfile, name, value)
    yield path
    if stepfile._fd is not None:
        os.close(stepfile._fd)


def test_batches_and_step_write_totals_the_recorder_reads(step_file: Path) -> None:
    monitor = Monitor()
    reader = stepfile._StepReader(monitor, str(step_file))  # type: ignore[arg-type]
    try:
        assert monitor.step_timing == reader.timing
        assert reader.timing() is None  # nothing timed yet
        for i, _ in enumerate(sysmetrics.batches([np.zeros((3, 2))] * 4)):
            sysmetrics.step(i)
        got = reader.timing()
        assert got is not None and got.steps == 4 and got.samples == 12.0
        assert 0.0 < got.wait <= got.seconds
        reader.read()
        assert monitor.step == 3
        assert reader.timing() is got  # nothing new
    finally:
        reader.close()
    assert reader.timing() is got  # closed: the last read stands (the last sample's)


def test_energy_per_step_of_a_plain_loop_through_the_step_file(
    step_file: Path, tmp_path: Path
) -> None:
    """The recorder's path: ``batches``/``step`` write the totals, the recorder's reader
    gives them to a monitor whose real :class:`RaplCollector` reads a powercap tree the
    test raises by 5 J (package) per step: 5 J per step, 1 step or 3 between samples."""
    root = powercap(tmp_path, packages=1, dram=False)
    rapl = RaplCollector.create(str(root))
    assert rapl is not None
    m = SystemMonitor(interval=3600, collectors=[rapl])
    reader = stepfile._StepReader(m, str(step_file))
    try:
        out = m.reader()
        m._sample_once()  # the baseline
        loop = sysmetrics.batches([np.zeros((4, 1))] * 4, batch_size=16)
        for i, _ in enumerate(loop):
            if i == 1:
                m._sample_once()  # the loop's start started the first step: it is timed
                assert out.snapshot(repeat=False)["step.energyJoules"] == pytest.approx(5.0)
            add(root, "intel-rapl:0", 5_000_000)
            sysmetrics.step(i)
        m._sample_once()
        got = out.snapshot(repeat=False)
        assert got["step.energyJoules"] == pytest.approx(5.0)  # 3 steps, 15 J
        assert got["step.samplesPerSecond"] > 0.0
    finally:
        reader.close()


def test_a_writer_stopped_mid_write_leaves_the_last_consistent_totals(step_file: Path) -> None:
    """A write begun and never ended (the sequence numbers differ) never blocks the
    reader, nor gets half-read: the totals read before stand."""
    reader = stepfile._StepReader(Monitor(), str(step_file))  # type: ignore[arg-type]
    try:
        with open(step_file, "r+b") as f:
            f.seek(stepfile.TIMING)
            block = stepfile._BLOCK.pack(1, 4242, 3, 0.3, 0.1, 24.0, 1)
            f.write(block)
            f.flush()
            first = reader.timing()
            assert first == StepTotals(3, 0.3, 0.1, 24.0)
            f.seek(stepfile.TIMING)  # the next write's first part: its sequence number, pid
            f.write(stepfile._SEQ.pack(2) + stepfile._TOTALS.pack(4242, 999, 9.9, 9.9, 99.0)[:12])
            f.flush()
            t = time.perf_counter()
            assert reader.timing() is first
            assert time.perf_counter() - t < 1.0
            f.seek(stepfile.TIMING)  # totals that are none: going back, then not finite
            f.write(stepfile._BLOCK.pack(3, 4242, 2, 0.2, 0.1, 16.0, 3))
            f.flush()
            assert reader.timing() is first
            f.seek(stepfile.TIMING)
            f.write(stepfile._BLOCK.pack(4, 4242, 5, math.inf, 0.1, 16.0, 4))
            f.flush()
            assert reader.timing() is first
            # Another process takes the file over: its totals add to the first's.
            f.seek(stepfile.TIMING)
            f.write(stepfile._BLOCK.pack(5, 4343, 2, 0.2, 0.05, 16.0, 5))
            f.flush()
            assert reader.timing() == pytest.approx(StepTotals(5, 0.5, 0.15, 40.0))
    finally:
        reader.close()


def write_forever(path: str, stop: multiprocessing.synchronize.Event) -> None:
    """Write totals that all derive from one k, as fast as the writer can."""
    fd = os.open(path, os.O_RDWR)
    w = stepfile._Timing(fd, 1)
    k = 0
    while not stop.is_set():
        k += 1
        w.publish(StepTotals(k, k * 0.5, k * 0.25, k * 8.0))
    os.close(fd)


def test_the_reader_never_sees_a_mix_of_two_writes(step_file: Path) -> None:
    """A writer process publishes totals that all derive from one counter k, as fast as
    it can, while this process reads them as the recorder does: every read is one write's
    (steps k, seconds k/2, wait k/4, samples 8k), never a mix, and reads see progress.
    (With 2 CPUs, reader and writer run at once; a reader that ignores the sequence
    numbers sees mixes here.)"""
    reader = stepfile._StepReader(Monitor(), str(step_file))  # type: ignore[arg-type]
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Event()
    writer = ctx.Process(target=write_forever, args=(str(step_file), stop))
    writer.start()
    seen = set()
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            reader._seq = 0  # read the block every time, as if new
            reader._pid = 0
            reader._base = reader._raw = StepTotals(0, 0, 0.0, 0.0)
            got = reader.timing()
            if got is None:
                continue
            k = got.steps
            assert got == StepTotals(k, k * 0.5, k * 0.25, k * 8.0)
            seen.add(k)
    finally:
        stop.set()
        writer.join(10)
        reader.close()
    assert writer.exitcode == 0
    assert len(seen) > 100


def test_without_the_recorder_batches_is_the_iterables_iterator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(stepfile.ENV, raising=False)
    for name, value in [("_fd", None), ("_tried", False), ("_timing_tried", False)]:
        monkeypatch.setattr(stepfile, name, value)
    items = [1, 2, 3]
    it = sysmetrics.batches(items)
    assert type(it) is type(iter(items)) and list(it) == items
    assert stepfile._timing is None


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-8, ValueError), (math.nan, ValueError),
                         ("8", TypeError), (True, TypeError)],
)  # fmt: skip
def test_a_bad_batch_size_is_refused_with_or_without_the_recorder(
    value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"batch_size=.* is invalid: use the number of samples"):
        sysmetrics.batches([1], batch_size=value)  # type: ignore[arg-type]


def test_other_local_ranks_mark_steps_without_timing(
    step_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "0")  # LOCAL_RANK decides
    items = [1, 2]
    assert type(sysmetrics.batches(items)) is type(iter(items))
    sysmetrics.step(3)
    assert step_file.read_bytes()[stepfile.TIMING :] == bytes(stepfile._BLOCK.size)


def test_one_process_times_another_warns_and_marks_only(step_file: Path) -> None:
    """This process takes the step file's lock; a second process of the command (no
    rank variables) warns once and marks its steps without timing them."""
    assert not isinstance(sysmetrics.batches([1]), type(iter([1])))  # this one times
    code = (
        "import sysmetrics\n"
        "for i in sysmetrics.batches([1, 2]):\n"
        "    sysmetrics.step(70 + i)\n"
        "for i in sysmetrics.batches([1, 2]):\n"
        "    sysmetrics.step(80 + i)\n"
    )
    before = step_file.read_bytes()[stepfile.TIMING :]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("SystemMetricsWarning") == 1, proc.stderr
    assert "another process of this command times its steps already" in proc.stderr
    data = step_file.read_bytes()
    assert data[len(stepfile.MAGIC) : len(stepfile.MAGIC) + 2] == b"82"
    assert data[stepfile.TIMING :] == before


def test_a_bad_world_size_warns_and_counts_no_samples(
    step_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.warns(sysmetrics.SystemMetricsWarning, match="WORLD_SIZE='two' is not a"):
        loop = sysmetrics.batches([[1, 2]] * 3)
    for i, _ in enumerate(loop):
        sysmetrics.step(i)
    assert stepfile._timing is not None
    assert stepfile._timing.clock.read().samples == 0.0
    assert stepfile._timing.clock.read().steps == 3


def test_a_format_1_step_file_of_an_older_recorder_takes_steps_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_file: Path
) -> None:
    private = tmp_path / "old"
    private.mkdir(mode=0o700)
    old = private / "step"
    old.write_bytes(stepfile.MAGIC_1 + b" " * stepfile.WIDTH)
    old.chmod(0o600)
    monkeypatch.setenv(stepfile.ENV, str(old))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        items = [1, 2]
        assert type(sysmetrics.batches(items)) is type(iter(items))
        sysmetrics.step(12)
    assert old.read_bytes() == stepfile.MAGIC_1 + b"12".ljust(stepfile.WIDTH)


def times_in_child(queue: multiprocessing.queues.Queue[tuple[bool, list[str]]]) -> None:
    """In a forked child: whether ``batches`` times here, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        times = not isinstance(sysmetrics.batches([1]), type(iter([1])))
    queue.put((times, [str(w.message) for w in caught]))


def in_forked_child() -> tuple[bool, list[str]]:
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=times_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=30)
    child.join(30)
    return got  # type: ignore[no-any-return]


def test_a_forked_child_times_only_where_its_parent_does_not(step_file: Path) -> None:
    """A child forked before the parent times (a training function started with fork)
    times; one forked from a parent that times (a DataLoader worker) does not, and its
    parent keeps the lock."""
    sysmetrics.step(1)  # the parent has the file open, not timing
    assert in_forked_child() == (True, [])
    assert stepfile._timing is None
    assert not isinstance(sysmetrics.batches([1]), type(iter([1])))  # the parent times
    times, said = in_forked_child()
    assert not times and len(said) == 1 and "another process" in said[0], said
    assert stepfile._timing is not None
