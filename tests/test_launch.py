"""The tests' launcher of multi-process jobs (:func:`tests.launch.run_all`) when a launch
hangs: a launcher whose worker never ends, in a session of its own, as a torchrun whose
rank hangs (torchrun starts each rank with ``start_new_session``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.launch import run_all, zombie

# A launcher that starts a worker in a session of its own and waits for it; the worker
# writes its pid, then sleeps.
LAUNCHER = """
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c",
    "import os, sys, time\\nopen(sys.argv[1], 'w').write(str(os.getpid()))\\n"
    "def stuck_here():\\n    time.sleep(600)\\nstuck_here()", sys.argv[1]],
    start_new_session=True)
worker.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes in /proc")
def test_a_hung_launch_is_stopped_whole_and_says_where_it_hung(tmp_path: Path) -> None:
    """Regression: a launch still running at the timeout lost its launcher only (its
    workers ran on, orphaned) and its test failed with no word of where it was stuck;
    killing the launcher's process group instead would miss a worker in a session of its
    own, which holds the output pipe open: the test would wait for it for good."""
    pidfile = tmp_path / "worker.pid"
    with pytest.raises(pytest.fail.Exception) as failed:
        run_all([([sys.executable, "-c", LAUNCHER, str(pidfile)], {})], timeout=5)
    worker = int(pidfile.read_text())
    message = str(failed.value)
    assert "still running after 5 s" in message
    assert "stuck_here" in message  # the worker's stack, from faulthandler on SIGABRT
    assert not os.path.exists(f"/proc/{worker}") or zombie(worker), "the worker ran on"
