"""Faults of ``sysmetrics record`` and its plain-loop step timing (issue 30, items 7, 8
and 13), through the real recorder: a batch that cannot be sized, a step file the command
truncates, a recorder that fails, and ``--live`` with its stderr closed."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sysmetrics
from sysmetrics import cli, runfile, stepfile

from .test_plain_loop import Monitor, step_file  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, locks files")

RECORD = [sys.executable, "-m", "sysmetrics", "record", "--interval", "0.1"]


def run_record(
    tmp_path: Path, code: str, *args: str, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``sysmetrics record -o RUN ARGS -- python -c CODE``, to its end."""
    cmd = [*RECORD, "-o", str(tmp_path / "run.jsonl"), *args, "--", sys.executable, "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, **kwargs)


def columns(path: Path) -> dict[str, list[float]]:
    r = runfile.read_run(path)
    return {k: [v for v in r.columns[k] if not math.isnan(v)] for k in r.columns}


# -- item 7: a batch that cannot be sized -------------------------------------------------


class Unsized:
    """A batch whose ``len`` raises (as a lazily loaded batch may)."""

    def __len__(self) -> int:
        raise RuntimeError("this batch has no length yet")


class BadShape:
    """A batch whose ``shape`` raises something else than AttributeError."""

    @property
    def shape(self) -> tuple[int, ...]:
        raise RuntimeError("NestedTensorImpl doesn't support sizes")


def test_a_batch_that_cannot_be_sized_counts_no_samples_with_one_warning(
    step_file: Path,  # noqa: F811
) -> None:
    """The fake that runs everywhere: ``len`` or ``shape`` that raise count no samples,
    one warning for the loop's whole life, and every step is still timed."""
    reader = stepfile._StepReader(Monitor(), str(step_file))  # type: ignore[arg-type]
    items = [np.zeros((2, 1)), Unsized(), BadShape(), np.zeros((3, 1)), Unsized()]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i, _ in enumerate(sysmetrics.batches(items)):
                sysmetrics.step(i)
        said = [str(w.message) for w in caught]
        assert len(said) == 1, said
        assert issubclass(caught[0].category, sysmetrics.SystemMetricsWarning)
        assert "cannot find the size of a batch" in said[0], said
        assert caught[0].filename == __file__, caught[0].filename  # the loop's own line
        got = reader.timing()
        assert got is not None and got.steps == 5 and got.samples == 5.0
    finally:
        reader.close()


NESTED = """
import warnings
import torch
import sysmetrics

def data():
    for _ in range(20):
        yield torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(4, 3)])

for i, batch in enumerate(sysmetrics.batches(data())):
    batch.values().sum()
    sysmetrics.step(i + 1)
print("trained")
"""


def test_a_nested_tensor_batch_under_the_recorder_does_not_stop_training(
    tmp_path: Path,
) -> None:
    """Regression (issue 30, item 7): a torch nested tensor raises ``RuntimeError:
    ... NestedTensorImpl doesn't support sizes`` when asked its shape; under the recorder
    ``batches()`` asked, and the loop that runs fine without it died."""
    pytest.importorskip("torch")
    done = run_record(tmp_path, NESTED)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained\n"
    assert done.stderr.count("cannot find the size of a batch") == 1, done.stderr
    cols = columns(tmp_path / "run.jsonl")
    assert "step.samplesPerSecond" not in cols  # no batch was sized
    assert max(s for s in runfile.read_run(tmp_path / "run.jsonl").step if s is not None) == 20


# -- item 8: a step file the command truncates --------------------------------------------

TRUNCATE = """
import os, sys, time
import sysmetrics

def data(n):
    for _ in range(n):
        time.sleep(0.01)
        yield [0] * 4

for i, batch in enumerate(sysmetrics.batches(data(30))):
    time.sleep(0.01)
    sysmetrics.step(i + 1)
time.sleep(0.3)  # the recorder reads the whole file
os.truncate(os.environ["SYSMETRICS_STEP_FILE"], 0)
time.sleep(0.5)  # the recorder reads the truncated file
{after}
print("survived", flush=True)
sys.exit(3)
"""


@pytest.mark.parametrize("after", ["", "for i in range(31, 41): sysmetrics.step(i)"])
def test_a_command_that_truncates_its_step_file_keeps_running(tmp_path: Path, after: str) -> None:
    """Regression (issue 30, item 8): the recorder read its mapping of the truncated
    file and died of SIGBUS, whose end killed the command (its parent-death signal);
    with ``after``, the command's own ``step()`` wrote into its mapping and died of
    SIGBUS too. Now both go on, the exit status is the command's own, and the recorder
    warns once."""
    done = run_record(tmp_path, TRUNCATE.format(after=after))
    assert done.returncode == 3, (done.returncode, done.stderr)
    assert done.stdout == "survived\n"
    assert done.stderr.count("sysmetrics: warning:") == 1, done.stderr
    assert "the step file was truncated" in done.stderr, done.stderr
    run = tmp_path / "run.jsonl"
    assert len(columns(run)["step.seconds"]) >= 1  # the steps before it are kept
    end = json.loads(run.read_text().splitlines()[-1])
    assert end.get("exit_status") == 3 or end.get("end", {}).get("exit_status") == 3, end


def test_a_truncated_step_file_is_read_as_missing_until_it_is_whole(
    step_file: Path,  # noqa: F811
) -> None:
    """The fake that runs everywhere, in one process: the reader sees the file shrink,
    warns once and keeps the totals it had; ``step()`` writes it whole again (the
    write extends the file), and the reader takes the steps and totals that follow."""
    monitor = Monitor()
    reader = stepfile._StepReader(monitor, str(step_file))  # type: ignore[arg-type]
    try:
        for i, _ in enumerate(sysmetrics.batches([[1]] * 3)):
            sysmetrics.step(i + 1)
        before = reader.timing()
        assert before is not None and before.steps == 3 and monitor.step == 3
        os.truncate(step_file, 0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                assert reader.timing() is before
                reader.read()
        assert [str(w.message) for w in caught] == [
            f"sysmetrics: the step file was truncated (0 of {stepfile.SIZE} bytes left); "
            "samples get no new step nor step keys until sysmetrics.step() writes it again"
        ]
        assert monitor.step == 3
        for i, _ in enumerate(sysmetrics.batches([[1]] * 2)):  # step() never raises
            sysmetrics.step(i + 10)
        after = reader.timing()
        assert after is not None and after.steps == 5 and monitor.step == 11
    finally:
        reader.close()


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted at a private folder (root only; unmounted after)."""
    mount = tmp_path / "small"
    mount.mkdir(mode=0o700)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> None:
    """Write into ``directory`` until its filesystem has no room left."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, bytes(4096)):
            pass
    except OSError:  # ENOSPC
        pass
    finally:
        os.close(fd)


def test_a_step_file_that_cannot_be_written_again_warns_once(
    full_tmpfs: Path,
    monkeypatch: pytest.MonkeyPatch,
    step_file: Path,  # noqa: F811  (resets sysmetrics.step's state)
) -> None:
    """A real full tmpfs: the step file is truncated, the filesystem fills up, and
    writing the step file whole again fails (ENOSPC): the loop goes on, one warning,
    and later calls return at once. (Mapped, the write died of SIGBUS.)"""
    path = Path(stepfile.create(str(full_tmpfs)))
    monkeypatch.setenv(stepfile.ENV, str(path))
    loop = sysmetrics.batches([np.zeros((2, 1))] * 6)
    assert stepfile._timing is not None
    for i, _ in enumerate(loop):
        if i == 2:
            os.truncate(path, 0)
            fill(full_tmpfs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sysmetrics.step(i)
        said = [str(w.message) for w in caught]
        if i < 2:
            assert said == []
        elif i == 2:
            assert said == [
                "sysmetrics: cannot write the step file (No space left on device); "
                "sysmetrics.step() marks no more steps in this process"
            ]
        else:
            assert said == []
    assert stepfile._fd is None and stepfile._timing is None and stepfile._tried


def test_a_step_file_descriptor_that_fails_warns_once(step_file: Path) -> None:  # noqa: F811
    """The fake that runs everywhere: a descriptor that refuses writes (EBADF)."""
    sysmetrics.step(1)
    assert stepfile._fd is not None
    os.close(stepfile._fd)
    stepfile._fd = refusing = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.warns(sysmetrics.SystemMetricsWarning, match="cannot write the step file"):
            sysmetrics.step(2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sysmetrics.step(3)  # at once: no second warning
        assert stepfile._fd is None
    finally:
        os.close(refusing)


SLEEP_EXIT = "import time, sys; time.sleep(0.5); print('done', flush=True); sys.exit(5)"


def test_a_failing_recorder_leaves_the_command_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (issue 30, item 8): an exception in the recorder (here its step
    reader cannot start) killed the command; now the command runs to its end, the exit
    status is its own, and the recorder says once that it stopped recording."""

    class Broken(stepfile._StepReader):
        def start(self) -> None:
            raise RuntimeError("the reader cannot start")

    monkeypatch.setattr(cli, "_StepReader", Broken)
    code = "import time, sys; time.sleep(0.5); open(sys.argv[1], 'w').write('done'); sys.exit(5)"
    marker = tmp_path / "marker"
    argv = ["record", "--interval", "0.1", "-o", str(tmp_path / "run.jsonl"), "--",
            sys.executable, "-c", code, str(marker)]  # fmt: skip
    assert cli.main(argv) == 5
    assert marker.read_text() == "done"
    err = capsys.readouterr().err
    assert err.count("sysmetrics: warning:") == 1, err
    assert "recording stopped" in err and "the reader cannot start" in err, err


# -- item 13: --live with stderr closed ---------------------------------------------------

CLOSED = """
import os, time
{before}
time.sleep(0.6)
try:
    os.fstat(2)
    print("stderr open")
except OSError:
    print("stderr closed")
"""


@pytest.mark.parametrize(
    "before", ["", 'os.truncate(os.environ["SYSMETRICS_STEP_FILE"], 0)  # the recorder warns']
)
def test_live_with_stderr_closed_prints_nothing(tmp_path: Path, before: str) -> None:
    """Regression (issue 30, item 13): with fd 2 closed, Python's ``sys.stderr`` is None,
    and ``print(file=None)`` writes to stdout: the live lines, the notice about an
    existing run file and the warnings (here: the step file truncated) went into stdout
    among the command's output (or into a file that took fd 2). Now stdout is exactly
    the command's, whose stderr stays closed as it was given."""
    run = tmp_path / "run.jsonl"
    run.write_text("")  # "appending to the existing run file" is said, on stderr
    cmd = [
        *RECORD,
        "--live",
        "-o",
        str(run),
        "--",
        sys.executable,
        "-c",
        CLOSED.format(before=before),
    ]
    done = subprocess.run(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=120,
        preexec_fn=lambda: os.close(2),
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout == "stderr closed\n"
    for line in run.read_text().splitlines():  # nothing else went into the run file
        json.loads(line)


# -- the step file lives in memory: a write never waits on a disk's journal ---------------

WHERE = "import os; print(os.environ['SYSMETRICS_STEP_FILE'])"


def test_the_step_file_is_in_memory_where_dev_shm_is(tmp_path: Path) -> None:
    """Each ``step()`` is a ``pwrite`` now; on a disk's filesystem (ext4 under ``/tmp``)
    a write that changes the file's mtime can wait for the journal. Under ``/dev/shm``
    (tmpfs) it never does."""
    if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
        pytest.skip("no writable /dev/shm")
    done = run_record(tmp_path, WHERE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("/dev/shm/sysmetrics-"), done.stdout


def test_without_a_memory_filesystem_the_step_file_is_in_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake that runs everywhere: a memory folder that is missing, or where no
    directory can be made, leaves the system's temporary directory."""
    for memory in [str(tmp_path / "missing"), str(tmp_path / "file")]:
        (tmp_path / "file").write_text("")
        monkeypatch.setattr(stepfile, "MEMORY_DIR", memory)
        made = stepfile.private_directory()
        try:
            assert os.path.dirname(made) == tempfile.gettempdir()
            assert os.stat(made).st_mode & 0o777 == 0o700
        finally:
            os.rmdir(made)
    monkeypatch.setattr(stepfile, "MEMORY_DIR", str(tmp_path))
    made = stepfile.private_directory()
    assert os.path.dirname(made) == str(tmp_path)
    os.rmdir(made)


def test_the_step_files_descriptor_is_kept_out_of_the_way_of_the_commands_files(
    tmp_path: Path,
) -> None:
    """A command that closes the step file's descriptor (a closerange of its own low
    descriptors) and opens a file gets a low number again: never the step file's, so
    step() never writes into that file."""
    code = (
        "import os, sys, sysmetrics\n"
        "sysmetrics.step(1)\n"
        "from sysmetrics import stepfile\n"
        "assert stepfile._fd is not None and stepfile._fd >= stepfile.HIGH_FD, stepfile._fd\n"
        "os.closerange(3, 64)\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "sysmetrics.step(2)\n"
        "os.close(fd)\n"
        "print(os.path.getsize(sys.argv[1]))\n"
    )
    out = tmp_path / "other"
    done = subprocess.run(
        [sys.executable, "-m", "sysmetrics", "record", "-o", str(tmp_path / "r.jsonl"),
         "--", sys.executable, "-c", code, str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", (done.stdout, done.stderr)
