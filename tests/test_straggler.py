"""Every rank's step keys and stragglers by arrival (issue 34, items 3-5).

The real runs are Lightning DDP jobs of 2 simulated nodes x 2 ranks (gloo on CPU,
``tests/jobs/straggler_job.py``): one rank slowed in its forward, one in its backward (a
sleep in a gradient hook), one in its data, or every rank alike. Each node's sampling
rank writes its run file; the two are read back as one run and the findings name the
straggler. The four runs are made by one launch of the job, one ``Trainer.fit`` after
the other (the launch and the imports took most of each run's 18 s on 2 CPUs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import arrival
from sysmetrics.arrival import RankBoard, RankSlot, RankTotals, read_slot
from sysmetrics.findings import findings
from sysmetrics.findings.nodes import arrivals
from sysmetrics.runfile import read_runs
from tests.launch import free_port, run_all

JOBS = Path(__file__).parent / "jobs"


# The runs of the one launch, in order: each slows one rank's forward, backward or data,
# or every rank's forward alike (steps of the tiny model alone take a few ms, so 80 of
# them gave a quiet machine's nodes fewer than MIN_SAMPLES samples: CI).
SLOWS = ("forward:3", "backward:1", "data:2", "forward:*")


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The straggler job on 2 simulated nodes x 2 ranks, once for each of SLOWS: each
    run's nodes' run files."""
    pytest.importorskip("lightning")
    out = tmp_path_factory.mktemp("straggler")
    port = str(free_port())
    outputs = run_all([
        ([sys.executable, str(JOBS / "straggler_job.py"), str(out)],
         {"NODE_RANK": str(k), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
          "JOB_SLOW": ",".join(SLOWS)})
        for k in (0, 1)
    ])  # fmt: skip
    for output in outputs:
        assert "SystemMetricsWarning" not in output, output[-4000:]
    return {slow: [out / str(i) / f"node{k}.jsonl" for k in (0, 1)] for i, slow in enumerate(SLOWS)}


@pytest.mark.serial
@pytest.mark.parametrize(
    ("slow", "rank", "node", "cause", "words"),
    [
        ("forward:3", 3, 1, "forward", "slow in its forward"),
        ("backward:1", 1, 0, "backward", "slow in its backward"),
        ("data:2", 2, 1, "data", "slow waiting for its data"),
    ],
)
def test_the_rank_that_arrives_last_is_named_with_its_cause(
    four_ranks: dict[str, list[Path]], slow: str, rank: int, node: int, cause: str, words: str
) -> None:
    files = four_ranks[slow]
    run = read_runs(files)
    # Every rank's keys, on its node's run file only (node aggregates beside them).
    for k, path in enumerate(files):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        keys = set().union(*(x.get("metrics", {}) for x in lines))
        for r in (2 * k, 2 * k + 1):
            for key in arrival.RANK_KEYS:
                assert f"rank.{r}.{key}" in keys, (path, r, key)
        assert not any(key.startswith(f"rank.{2 * (1 - k)}.") for key in keys)
        assert {"step.rankMaxSeconds", "step.maxDataWaitPercent"} <= keys
        assert "step.arrivalSpreadSeconds" in keys
    (found,) = [f for f in findings(run) if f.rule == "straggler-node"]
    assert found.subject is not None and found.subject.kind == "rank"
    assert (found.subject.id, found.subject.facet, found.subject.node) == (str(rank), cause, node)
    first = f"Rank {rank} (node {node}) reached the gradient all-reduce last"
    assert found.sentence.startswith(first)
    assert words in found.sentence and "the others waited for it" in found.sentence
    ranked = arrivals(run)
    assert ranked is not None and ranked.straggler == rank
    others = [r for r in ranked.ranks.values() if r.rank != rank]
    # It came ~30 ms (the sleep) after the others, and waited for them the least.
    assert 0.015 < ranked.gap < 0.1, ranked
    assert all(ranked.ranks[rank].peer < r.peer for r in others), ranked


@pytest.mark.serial
def test_four_equal_ranks_have_no_straggler(four_ranks: dict[str, list[Path]]) -> None:
    run = read_runs(four_ranks["forward:*"])  # every rank sleeps alike in its forward
    assert "straggler-node" not in [f.rule for f in findings(run)]
    ranked = arrivals(run)
    assert ranked is not None and len(ranked.ranks) == 4
    assert ranked.straggler is None and ranked.said.startswith("no straggler: "), ranked


# -- the slots and the board ---------------------------------------------------------------


def test_the_board_turns_each_ranks_growth_into_its_keys(tmp_path: Path) -> None:
    paths = {pid: str(tmp_path / f"{pid}.slot") for pid in (11, 12)}
    slots = {pid: RankSlot(rank, paths[pid]) for pid, rank in ((11, 4), (12, 5))}
    board = RankBoard([11, 12, 13], lambda pid: str(tmp_path / f"{pid}.slot"))  # 13: no slot
    try:
        slots[11].write(RankTotals(4, 10, 1.0, 0.1, 10.0, 0.3, 0.1, 0.5))
        slots[12].write(RankTotals(5, 10, 1.0, 0.5, 10.0, 0.6, 0.1, 0.2))
        first = board.sample()
        assert first["rank.4.step.seconds"] == pytest.approx(0.1)
        assert first["rank.5.step.dataWaitPercent"] == pytest.approx(50.0)
        assert first["rank.5.step.arrivalSeconds"] == pytest.approx(0.06)
        assert first["rank.4.step.peerWaitPercent"] == pytest.approx(50.0)
        assert first["step.maxDataWaitPercent"] == pytest.approx(50.0)
        assert first["step.arrivalSpreadSeconds"] == pytest.approx(0.03)
        assert board.weights["rank.4.step.seconds"] == 10.0
        assert board.weights["rank.4.step.dataWaitPercent"] == pytest.approx(1.0)
        # Rank 5 did not step since: its keys are absent, never repeated.
        slots[11].write(RankTotals(4, 12, 1.4, 0.1, 12.0, 0.4, 0.2, 0.6))
        second = board.sample()
        assert second["rank.4.step.seconds"] == pytest.approx(0.2)
        assert second["rank.4.step.arrivalSeconds"] == pytest.approx(0.05)
        assert not any(k.startswith("rank.5.") for k in second)
        assert "step.arrivalSpreadSeconds" not in second  # one rank arrived
    finally:
        board.close()
        for slot in slots.values():
            slot.close()
    assert not any(os.path.exists(p) for p in paths.values())


def test_a_slot_read_while_it_is_rewritten_is_none(tmp_path: Path) -> None:
    slot = RankSlot(1, str(tmp_path / "s"))
    slot.write(RankTotals(1, 3, 0.3, 0.0, 3.0, 0.1, 0.05, 0.1))
    raw = bytearray(Path(slot.path).read_bytes())
    assert read_slot(raw) == RankTotals(1, 3, 0.3, 0.0, 3.0, 0.1, 0.05, 0.1)
    raw[0] += 1  # the first sequence number written, the rest not yet
    assert read_slot(raw) is None
    assert read_slot(bytearray(arrival.SLOT.size)) is None  # never written
    slot.close()


def test_the_slots_of_processes_gone_are_swept(tmp_path: Path) -> None:
    """A rank killed cannot remove its slot: the next slot made removes those whose
    process is gone, and keeps the living's and any other file."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    gone = tmp_path / arrival.SLOT_NAME.format(pid=int(done.stdout))
    living = tmp_path / arrival.SLOT_NAME.format(pid=os.getpid())
    other = tmp_path / "sysmetrics-steps-x.slot"
    for path in (gone, living, other):
        path.write_bytes(b"\0" * arrival.SLOT.size)
    assert arrival.sweep(str(tmp_path)) == 1
    assert not gone.exists() and living.exists() and other.exists()


def test_rank_series_reach_the_loggers_only_where_include_asks() -> None:
    from sysmetrics.callback import CallbackCore

    point = {"cpu": 1.0, "step.arrivalSpreadSeconds": 0.01, "rank.3.step.arrivalSeconds": 0.2}
    default = CallbackCore(interval=0.05)
    assert default.named(point) == {"system/cpu": 1.0, "system/step.arrivalSpreadSeconds": 0.01}
    asked = CallbackCore(interval=0.05, include=["cpu", "rank.*"])
    assert asked.named(point) == {"system/cpu": 1.0, "system/rank.3.step.arrivalSeconds": 0.2}
    for core in (default, asked):
        core.stop()


def test_plain_ddp_arrival_under_gloo(tmp_path: Path) -> None:
    """The timer on a plain ``DistributedDataParallel`` of 2 ranks: rank 1 sleeps 40 ms
    after its forward each step; it arrives ~40 ms later and waits the least."""
    pytest.importorskip("torch")
    out = tmp_path / "out"
    out.mkdir()
    port = str(free_port())
    run_all([
        ([sys.executable, str(JOBS / "ddp_arrival_job.py"), str(out), str(r)],
         {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
        for r in (0, 1)
    ])  # fmt: skip
    totals: list[Any] = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    fast, slow = (RankTotals(*t) for t in totals)
    assert fast.arrived == slow.arrived == 20.0
    lead = slow.arrival / slow.arrived - fast.arrival / fast.arrived
    assert 0.03 < lead < 0.2, (fast, slow)
    assert slow.peer < fast.peer, (fast, slow)


@pytest.mark.gpu
def test_cuda_arrival_is_read_from_events_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the arrival and the wait come from CUDA events read with ``query()``: no
    step ever synchronises (every synchronising call raises here), and the backwards'
    measurements arrive, at most ``CUDA_PENDING`` behind."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from sysmetrics.steptime import StepClock

    def no(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("synchronised")

    monkeypatch.setattr(torch.cuda, "synchronize", no)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", no)
    monkeypatch.setattr(torch.cuda.Event, "wait", no)
    model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(8))).cuda()
    clock = StepClock()
    timer = arrival.ArrivalTimer(clock, None)
    timer.attach(model, forward=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(64, 256, device="cuda")
    clock.restart()
    steps = 40
    for _ in range(steps):
        clock.begin()
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        clock.end()
    assert not timer.failed and timer._cuda is not None
    t = timer.totals()
    assert steps - arrival.CUDA_PENDING - 1 <= t.arrived <= steps - 1, t
    assert t.arrival > 0.0 and t.peer >= 0.0, t
    timer.close()
