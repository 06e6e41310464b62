"""Hangs told live (issue 34, items 1 and 2): the stall, where each rank is, the store.

The classification runs over real stacks (a DataLoader waiting for its worker, a gloo
all-reduce waiting for a peer, ``torch.save`` into a FIFO nobody reads); the lines come
from real Lightning runs (gloo on CPU, real ranks: ``tests/jobs/hang_job.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import SystemMetricsWarning, hang, progress
from sysmetrics.hang import Frame, HangWatch, Progress, StallClock, Where, classify
from sysmetrics.steptime import StepClock, StepTotals
from tests.launch import TIMEOUT, free_port, run_all

JOBS = Path(__file__).parent / "jobs"


def where_of(thread: threading.Thread, want: str, timeout: float = 30.0) -> Where:
    """The thread's place, classified, once it is ``want`` (or what it was at the timeout)."""
    deadline = time.monotonic() + timeout
    assert thread.ident is not None
    found = hang.UNKNOWN
    while time.monotonic() < deadline:
        found = classify(hang.stack(thread.ident))
        if found.kind == want:
            break
        time.sleep(0.05)
    return found


# -- where: real stacks ---------------------------------------------------------------------


class SlowItems:
    """A dataset whose items take ``seconds`` each (in the DataLoader's worker)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        time.sleep(self.seconds)
        return i


def test_a_dataloader_waiting_for_its_worker_is_fetching_data() -> None:
    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(
        SlowItems(3.0), num_workers=1, multiprocessing_context="fork"
    )
    thread = threading.Thread(target=lambda: next(iter(loader)))
    thread.start()
    try:
        assert where_of(thread, "data") == Where("data", "")
    finally:
        thread.join(30)


PEER = """
import datetime, os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=sys.argv[1], rank=1, world_size=2,
                        timeout=datetime.timedelta(seconds=60))
while not os.path.exists(sys.argv[2]):  # rank 0 waits in all_reduce meanwhile
    time.sleep(0.05)
dist.all_reduce(torch.ones(1))
dist.destroy_process_group()
"""


def test_a_gloo_all_reduce_waiting_for_a_peer_is_in_all_reduce(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    init = f"tcp://127.0.0.1:{free_port()}"
    go = tmp_path / "go"
    peer = subprocess.Popen([sys.executable, "-c", PEER, init, str(go)])
    try:
        dist.init_process_group("gloo", init_method=init, rank=0, world_size=2)
        try:
            thread = threading.Thread(target=lambda: dist.all_reduce(torch.ones(1)))
            thread.start()
            found = where_of(thread, "collective")
            go.touch()
            thread.join(60)
            assert found == Where("collective", "all_reduce")
        finally:
            dist.destroy_process_group()
        assert peer.wait(60) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()


def test_torch_save_into_a_slow_file_is_saving_a_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    fifo = tmp_path / "checkpoint.pt"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open, and read nothing yet
    try:
        thread = threading.Thread(target=lambda: torch.save(torch.zeros(1 << 20), fifo))
        thread.start()
        found = where_of(thread, "checkpoint")
        while thread.is_alive():  # drain: the save ends
            try:
                os.read(reader, 1 << 20)
            except BlockingIOError:
                time.sleep(0.01)
        thread.join()
    finally:
        os.close(reader)
    assert found.kind == "checkpoint" and found.phrase() == "is at step {step} saving a checkpoint"


def test_elsewhere_is_the_innermost_frame_of_the_users_code() -> None:
    done = threading.Event()

    def user_code() -> None:
        done.wait(30)

    thread = threading.Thread(target=user_code)
    thread.start()
    try:
        found = where_of(thread, "elsewhere")
    finally:
        done.set()
        thread.join()
    line = user_code.__code__.co_firstlineno + 1
    assert found == Where("elsewhere", f"test_hang.py:{line} (user_code)")


def test_classify_prefers_the_collective_and_names_it() -> None:
    dist = "/x/site-packages/torch/distributed/"
    frames = [
        Frame(dist + "distributed_c10d.py", 10, "wrapper"),
        Frame(dist + "c10d_logger.py", 20, "all_gather"),
        Frame("/x/site-packages/torch/utils/data/dataloader.py", 5, "__next__"),
        Frame("/home/u/train.py", 3, "main"),
    ]
    assert classify(frames) == Where("collective", "all_gather")
    assert classify([]) == hang.UNKNOWN


# -- when: the stall's clock ----------------------------------------------------------------


def test_the_threshold_is_the_larger_of_the_option_and_five_p99_steps() -> None:
    clock = StallClock(hang_after=2.0)
    t = 100.0
    assert clock.look(StepTotals(0, 0.0, 0.0, 0.0), "train", 0.0, t) is None
    # Before the first step: FIRST_STEP_FACTOR x hang_after.
    assert clock.look(StepTotals(0, 0.0, 0.0, 0.0), "train", 0.0, t + 19.0) is None
    assert clock.look(StepTotals(0, 0.0, 0.0, 0.0), "train", 0.0, t + 20.0) == 20.0
    assert clock.look(None, "train", 0.0, t + 20.0) is None  # no steps known: none stall
    for i in range(1, 101):  # steps of 1 s: 5 x p99 = 5 s > 2 s
        assert clock.look(StepTotals(i, float(i), 0.0, 0.0), "train", 0.0, t + 20 + i) is None
    last = t + 120
    assert clock.p99() == 1.0
    assert clock.look(StepTotals(100, 100.0, 0.0, 0.0), "train", 0.0, last + 4.9) is None
    assert clock.look(StepTotals(100, 100.0, 0.0, 0.0), "train", 0.0, last + 5.0) == 5.0
    # An announced evaluation or checkpoint is no stall; its time does not count after it.
    assert clock.look(StepTotals(100, 100.0, 0.0, 0.0), "checkpoint", 0.0, last + 60) is None
    resumed = last + 60
    stalled = clock.look(StepTotals(100, 100.0, 0.0, 0.0), "train", resumed, resumed + 4.0)
    assert stalled is None
    assert clock.look(StepTotals(100, 100.0, 0.0, 0.0), "train", resumed, resumed + 5.0) == 5.0


# -- what is said: the job's view -----------------------------------------------------------


def rec(step: int, kind: str = "", what: str = "", t: float = 1000.0, node: int = 0,
        pid: int = 1, host: str = "a") -> dict[str, Any]:  # fmt: skip
    return {"s": step, "p": "train", "k": kind, "w": what, "t": t, "n": node, "h": host, "i": pid}


def test_the_job_line_names_the_ranks_behind_and_where_the_others_wait() -> None:
    records = {r: rec(1201, "collective", "all_reduce", node=r // 4) for r in range(8)}
    records[3] = rec(1200, "data", node=0)
    records[5] = rec(1200, "data", node=1)
    line = progress.job_line(75.2, records, 8, 1001.0, 10.0, "a")
    assert line == (
        "sysmetrics: no step for 75 s: ranks 3 and 5 are at step 1200 fetching data (nodes 0 "
        "and 1); the other 6 ranks wait at step 1201 in all_reduce (nodes 0 and 1)"
    )


def test_a_silent_rank_is_dead_where_its_process_is_gone_and_silent_elsewhere() -> None:
    records: dict[int, dict[str, Any] | None] = {
        0: rec(7, "collective", "barrier"),
        1: rec(7, "collective", "barrier"),
        2: rec(6, t=980.0, pid=42),  # 21 s old, on this host, its process gone
        3: rec(6, t=980.0, pid=43, host="b"),  # 21 s old, elsewhere
        4: None,
    }
    line = progress.job_line(30.0, records, 5, 1001.0, 10.0, "a", alive=lambda pid: pid != 42)
    assert line == (
        "sysmetrics: no step for 30 s: rank 2 is dead (no word for 21 s); rank 3 is silent "
        "(no word for 21 s); rank 4 has said nothing; the other 2 ranks wait at step 7 in "
        "barrier"
    )


def test_the_ranks_behind_are_those_the_others_wait_for_or_dead() -> None:
    """Issue 34 item 5: what rank 0's exporter serves during a stall (the alert's ranks)."""
    records = {r: rec(1201, "collective", "all_reduce", node=r // 4) for r in range(8)}
    records[3] = rec(1200, "data", node=0)
    records[5] = rec(1200, "data", node=1)
    assert progress.behind(records, 8, 1001.0, 10.0, "a") == {3: "data", 5: "data"}
    same_step = {r: rec(7, "collective", "all_reduce") for r in range(4)}
    same_step[2] = rec(7, "elsewhere", "train.py:42 (training_step)")
    assert progress.behind(same_step, 4, 1001.0, 10.0, "a") == {2: "elsewhere"}
    gone: dict[int, dict[str, Any] | None] = {
        0: rec(7, "collective", "barrier"),
        1: rec(6, t=980.0, pid=42),
        2: rec(6, t=980.0, pid=43, host="b"),
        3: None,
    }
    found = progress.behind(gone, 4, 1001.0, 10.0, "a", alive=lambda pid: pid != 42)
    assert found == {1: "dead", 2: "silent", 3: "silent"}
    alike = {r: rec(7, "collective", "all_reduce") for r in range(4)}
    assert progress.behind(alike, 4, 1001.0, 10.0, "a") == {}  # no rank told apart


def test_the_exporter_serves_each_rank_behind_with_where_it_is() -> None:
    pytest.importorskip("prometheus_client")
    from sysmetrics import SystemMonitor
    from sysmetrics.sinks.prometheus import PrometheusExporter
    from tests.conftest import ScriptedCollector

    scripted = ScriptedCollector({"x": 1.0})
    scripted.release()
    monitor = SystemMonitor(interval=0.05, collectors=[scripted])
    with monitor, PrometheusExporter(monitor, 0) as exporter:
        assert wait_for(lambda: bool(monitor.latest()), 30)
        monitor.stall = hang.StepStall(time.time() - 70, 4, Where("collective", "all_reduce"),
                                       behind={3: "data", 5: "dead"})  # fmt: skip
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            page = r.read().decode()
        monitor.stall = None
    found = re.findall(
        r'^sysmetrics_training_rank_behind_seconds\{.*rank="(\d+)".*where="(\w+)"\} (\S+)$',
        page,
        re.M,
    )
    assert [(rank, where) for rank, where, _ in found] == [("3", "data"), ("5", "dead")], page
    assert all(70 <= float(v) < 100 for _, _, v in found)


def test_ranks_are_said_as_runs() -> None:
    assert progress.ranks_text([5]) == "rank 5"
    assert progress.ranks_text([5, 3]) == "ranks 3 and 5"
    assert progress.ranks_text([0, 1, 2, 3, 7, 9]) == "ranks 0-3, 7 and 9"


# -- the store ------------------------------------------------------------------------------


@pytest.fixture
def store() -> Iterator[Any]:
    """A real TCPStore server on loopback, as rendezvous makes for every job."""
    pytest.importorskip("torch")
    import datetime

    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))  # fmt: skip
    yield server
    del server


def test_every_rank_publishes_and_rank_0_reads_them_all(store: Any) -> None:
    address = ("127.0.0.1", store.port)
    channels = [progress.Channel(r, 3, r // 2, 60.0, address) for r in range(3)]
    for c in channels:
        c.open()
    for c in channels[1:]:
        c.publish(9, "train", Where("collective", "all_reduce"), 0.0)
    records = channels[0].read()
    assert records[0] is None  # not published yet
    assert [r["s"] if r else None for r in records.values()] == [None, 9, 9]
    assert records[1] is not None and records[1]["w"] == "all_reduce"
    # Within publish_every, a rank publishes nothing more (the traffic's bound).
    before = channels[1].ops
    channels[1].publish(10, "train", None, 1.0)
    assert channels[1].ops == before
    channels[1].publish(10, "train", None, 1.0 + channels[1].every)
    assert channels[1].ops == before + 1
    for c in channels:
        c.close()


def test_a_store_that_cannot_be_reached_disables_the_channel_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(progress, "STORE_TIMEOUT", 0.5)
    channel = progress.Channel(0, 2, 0, 60.0, ("127.0.0.1", free_port()))
    failed = "the job.s torch.distributed store failed"
    with pytest.warns(SystemMetricsWarning, match=failed) as caught:
        channel.open()
    assert len(caught) == 1 and channel.failed
    channel.publish(1, "train", None, 0.0)  # nothing, no error
    assert channel.ops == 0


# -- the watch: one line per stall, the monitor's stall, the exporter's gauge ---------------


def test_one_line_per_stall_and_the_exporter_serves_the_stall() -> None:
    pytest.importorskip("prometheus_client")
    from sysmetrics import SystemMonitor
    from sysmetrics.sinks.prometheus import PrometheusExporter
    from tests.conftest import ScriptedCollector

    clock, where, said = StepClock(), Progress(), []
    scripted = ScriptedCollector({"x": 1.0})
    scripted.release()  # samples never wait
    monitor = SystemMonitor(interval=0.05, collectors=[scripted])
    watch = HangWatch(0.5, clock.read, where, threading.get_ident(), say=said.append,
                      monitor=monitor)  # fmt: skip

    def scrape(url: str) -> str:
        with urllib.request.urlopen(url, timeout=10) as r:
            return str(r.read().decode())

    with monitor, PrometheusExporter(monitor, 0) as exporter:
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        watch.start()
        try:
            for step in range(3):
                clock.begin()
                clock.end()
                where.step = step
            assert wait_for(lambda: bool(said), 30)
            page = scrape(url)
            (value,) = re.findall(r"^sysmetrics_training_stalled_seconds\{.*\} (\S+)$", page, re.M)
            assert float(value) >= 0.5
            time.sleep(3 * hang.LOOK_EVERY)  # the same stall: said once
            assert len(said) == 1
            assert said[0].startswith("sysmetrics: no step for 1 s: the training thread is at "
                                      "step 2 at test_hang.py:")  # fmt: skip
            clock.begin()
            clock.end()  # the step advances: the stall is over
            assert wait_for(lambda: monitor.stall is None, 30)
            assert "sysmetrics_training_stalled_seconds" not in scrape(url)
        finally:
            watch.close()


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# -- real Lightning runs --------------------------------------------------------------------


def job(tmp_path: Path, mode: str, ranks: int, options: dict[str, Any],
        sleep: float, samples: int = 96) -> list[str]:  # fmt: skip
    """Run tests/jobs/hang_job.py (:func:`tests.launch.run_all`: a launch that hangs is
    stopped with its ranks); the stall lines rank 0 said."""
    pytest.importorskip("lightning")
    env = {"JOB_SLEEP": str(sleep), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "JOB_SAMPLES": str(samples)}  # fmt: skip
    cmd = [sys.executable, str(JOBS / "hang_job.py"), str(tmp_path), mode, str(ranks),
           json.dumps(options)]  # fmt: skip
    (output,) = run_all([(cmd, env)])
    said = tmp_path / "said.json"
    assert said.exists(), output[-3000:]
    return list(json.loads(said.read_text()))


def stalls(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [x["stall"] for x in lines if "stall" in x]


@pytest.mark.long
def test_lightning_one_process_tells_the_stall_where_the_step_sleeps(tmp_path: Path) -> None:
    run_file = tmp_path / "run.jsonl"
    said = job(tmp_path, "sleep", 1, {"hang_after": 1, "interval": 0.2,
                                      "run_file": str(run_file)}, sleep=6)  # fmt: skip
    line = re.escape("the training thread is at step 4 at hang_job.py:") + r"\d+ \(training_step\)"
    assert len(said) == 1 and re.fullmatch(r"sysmetrics: no step for \d+ s: " + line, said[0])
    (stall,) = stalls(run_file)
    assert stall["kind"] == "elsewhere" and stall["step"] == 4 and stall["said"] == said[0]
    assert 0 < len(stall["stack"]) <= hang.STACK_FRAMES
    assert "hang_job.py" in stall["stack"][0] and "training_step" in stall["stack"][0]
    from sysmetrics.runfile import read_run

    assert not read_run(run_file).left_out  # the reader skips the record, quietly


@pytest.mark.long
def test_lightning_a_slow_checkpoint_announced_by_its_hook_is_no_hang(tmp_path: Path) -> None:
    run_file = tmp_path / "run.jsonl"
    # 6 steps, a 5 s save after the 3rd and the 6th: two slow saves, each 5 times the
    # threshold (24 steps, 8 saves, took 45 s of the parallel pass for the same verdict)
    said = job(tmp_path, "checkpoint", 1, {"hang_after": 1, "interval": 0.2,
                                           "run_file": str(run_file)}, sleep=5,
               samples=24)  # fmt: skip
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) >= 1  # the saves were slow, and done
    assert said == []
    assert stalls(run_file) == []


@pytest.fixture(scope="module")
def stopped_rank(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """One 3-rank job whose last rank stops for 12 s at step 4 (the two tests below read
    it; a launch each took 22 s of the parallel pass): rank 0's stall lines, and its run
    file."""
    out = tmp_path_factory.mktemp("stopped_rank")
    run_file = out / "run.jsonl"
    said = job(
        out,
        "stop",
        3,
        {"hang_after": 2, "interval": 0.2, "run_file": str(run_file)},
        sleep=12,
        samples=960,
    )  # steps enough that 12 s is 10 times the median step
    return said, run_file


# Where every rank was: the rank behind, and where the other ranks wait.
STOPPED_RANKS = (
    re.escape("rank 2 is at step 4 at hang_job.py:")
    + r"\d+ \(training_step\); "
    + re.escape("the other 2 ranks wait at step 4 in all_reduce")
)


@pytest.mark.long
def test_lightning_ranks_the_live_line_names_the_rank_that_stopped(
    stopped_rank: tuple[list[str], Path],
) -> None:
    said, _ = stopped_rank
    assert len(said) == 1, said
    assert re.fullmatch(r"sysmetrics: no step for \d+ s: " + STOPPED_RANKS, said[0]), said


@pytest.mark.long
def test_lightning_ranks_the_stall_finding_says_where_every_rank_was(
    stopped_rank: tuple[list[str], Path],
) -> None:
    """Issue 34 item 5: rank 0's stall record keeps where every rank was, and the ``stall``
    finding of the run file read back says it."""
    from sysmetrics.findings import findings
    from sysmetrics.runfile import read_run

    _, run_file = stopped_rank
    (record,) = stalls(run_file)
    assert re.fullmatch(STOPPED_RANKS, record["ranks"]), record
    (stall,) = [f for f in findings(read_run(run_file)) if f.rule == "stall"]
    assert re.search("; the hang watch found, live, where every rank was: " + STOPPED_RANKS
                     + r"\.$", stall.sentence), stall.sentence  # fmt: skip
    assert stall.evidence["found_live"] == 1.0


@pytest.mark.long
def test_lightning_ranks_a_killed_rank_is_named_as_dead(tmp_path: Path) -> None:
    """Each rank a simulated node (Lightning's launcher kills the job when a rank dies);
    the killed rank leaves a child holding its sockets, so the others wait in all_reduce
    as under NCCL (gloo fails them at once on a closed connection)."""
    pytest.importorskip("lightning")
    port = str(free_port())
    options = json.dumps({"hang_after": 2, "interval": 0.2})
    procs = [
        subprocess.Popen(
            [sys.executable, str(JOBS / "hang_job.py"), str(tmp_path), "kill", "3", options],
            env={**os.environ, "JOB_NODES": "1", "NODE_RANK": str(k), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": port},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for k in range(3)
    ]  # fmt: skip
    try:
        _, err = procs[0].communicate(timeout=TIMEOUT)  # rank 0 exits once it has said it
    finally:
        orphan = tmp_path / "orphan.pid"
        if orphan.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(orphan.read_text()), signal.SIGKILL)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    said = (
        json.loads((tmp_path / "said.json").read_text())
        if (tmp_path / "said.json").exists()
        else err[-3000:]
    )
    assert len(said) == 1, said
    assert re.fullmatch(
        r"sysmetrics: no step for \d+ s: rank 2 is dead \(no word for \d+ s\) \(node 2\); "
        r"the other 2 ranks wait at step 4 in all_reduce \(nodes 0 and 1\)",
        said[0],
    ), said


# -- sysmetrics record: the command is not ours to inspect -----------------------------------

STEPS_THEN_SLEEP = """
import time, sysmetrics
for i, _ in enumerate(sysmetrics.batches(range(5))):
    time.sleep(0.05)
    sysmetrics.step(i)
time.sleep(8)
"""


def test_record_says_what_the_kernel_says_of_the_commands_main_thread(tmp_path: Path) -> None:
    run_file = tmp_path / "run.jsonl"
    cmd = [sys.executable, "-m", "sysmetrics", "record", "-o", str(run_file), "--interval",
           "0.2", "--hang-after", "1", "--", sys.executable, "-c", STEPS_THEN_SLEEP]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    said = [x for x in p.stderr.splitlines() if x.startswith("sysmetrics: no step")]
    assert len(said) == 1, p.stderr[-3000:]
    assert re.fullmatch(
        r"sysmetrics: no step for \d+ s: the command is at step 4; the kernel says its main "
        r"thread waits in \S+ \(state S, sleeping\)",
        said[0],
    ), said
    (stall,) = stalls(run_file)
    assert stall["kind"] == "kernel" and stall["step"] == 4 and stall["stack"] == []


def test_the_kernel_view_of_a_sleeping_process() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:  # once it sleeps (before: exec, the loader)
        assert wait_for(lambda: "nanosleep" in hang.kernel_where(sleeper.pid).what, 10)
        found = hang.kernel_where(sleeper.pid)
        assert found.kind == "kernel" and found.what.endswith(" (state S, sleeping)"), found
    finally:
        sleeper.kill()
        sleeper.wait()
    assert hang.kernel_where(sleeper.pid) == hang.UNKNOWN  # reaped: no such process


@pytest.mark.long
def test_a_rank_publishes_where_it_is_before_its_own_threshold(store: Any) -> None:
    """Rank 0 may find the stall before another rank's own threshold passes: that rank's
    record already says where it is once its step has not moved for a publishing period."""
    address = ("127.0.0.1", store.port)
    reader = progress.Channel(0, 2, 0, 60.0, address)
    reader.open()
    clock, where, release = StepClock(), Progress(), threading.Event()

    def training() -> None:
        for step in range(3):
            clock.begin()
            clock.end()
            where.step = step
        release.wait(60)  # the step stops here

    thread = threading.Thread(target=training)
    thread.start()
    assert thread.ident is not None
    # hang_after 20 s: a record every 5 s, its own stall only after 20 s.
    watch = HangWatch(20.0, clock.read, where, thread.ident,
                      channel=progress.Channel(1, 2, 0, 20.0, address))  # fmt: skip
    watch.start()
    try:
        assert wait_for(lambda: (reader.read()[1] or {}).get("k") == "elsewhere", 30)
        assert watch.stall is None  # its own threshold has not passed
        record = reader.read()[1]
        assert record is not None and record["s"] == 2
        assert record["w"].startswith("test_hang.py:") and record["w"].endswith("(training)")
    finally:
        release.set()
        thread.join()
        watch.close()
        reader.close()


def test_the_job_line_is_bounded_however_many_ranks_and_places() -> None:
    records = {r: rec(r % 50, "elsewhere", f"{'x' * 150}.py:{r} (f)") for r in range(256)}
    line = progress.job_line(61.0, records, 256, 1001.0, 10.0, "a")
    assert len(line) <= progress.MAX_LINE
    assert line.startswith("sysmetrics: no step for 61 s: ")
