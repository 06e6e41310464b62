"""The suite fails on a SystemMetricsWarning a test did not expect, from any thread.

Each case runs a small test file in a child pytest with this suite's ``conftest.py``:
a warning issued on the test's own thread or on a background thread (as the sampling
thread and the live findings' thread issue theirs) fails the test unless ``pytest.warns``
or ``@pytest.mark.allow_warnings`` expects it; other warnings are left to pytest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent

TESTS = """
import threading
import warnings

import pytest

from sysmetrics import SystemMetricsWarning


def _in_thread(message):
    t = threading.Thread(target=warnings.warn, args=(message, SystemMetricsWarning))
    t.start()
    t.join()


def test_main_thread():
    warnings.warn("sysmetrics: collector 'x' failed", SystemMetricsWarning)


def test_background_thread():
    _in_thread("sysmetrics: the live findings failed")


def test_expected_with_warns():
    with pytest.warns(SystemMetricsWarning, match="live findings failed"):
        _in_thread("sysmetrics: the live findings failed")


@pytest.mark.allow_warnings("collector 'x'")
def test_allowed():
    _in_thread("sysmetrics: collector 'x' failed")


@pytest.mark.allow_warnings("collector 'x'")
def test_allowed_does_not_allow_others():
    _in_thread("sysmetrics: collector 'y' failed")


def test_other_warnings_pass():
    warnings.warn("not ours", UserWarning)
"""


def test_an_unexpected_warning_fails_its_test_whichever_thread_issued_it(
    pytester: pytest.Pytester,
) -> None:
    shutil.copy(HERE / "conftest.py", pytester.path / "conftest.py")
    pytester.makepyfile(test_cases=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    outcomes = {
        line.split("::")[1].split()[0]: line.split()[0]
        for line in result.outlines
        if line.startswith(("PASSED", "ERROR", "FAILED"))
    }
    assert outcomes == {
        "test_main_thread": "ERROR",
        "test_background_thread": "ERROR",
        "test_expected_with_warns": "PASSED",
        "test_allowed": "PASSED",
        "test_allowed_does_not_allow_others": "ERROR",
        "test_other_warnings_pass": "PASSED",
    }, result.outlines
    result.stdout.fnmatch_lines(
        ["*unexpected SystemMetricsWarning*", "*.py:*: sysmetrics: the live findings failed"]
    )
    result.stdout.fnmatch_lines(["*UserWarning: not ours*"])  # left to pytest's summary
