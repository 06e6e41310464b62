"""What the CI's layout of the suite assumes of the tests, checked (tox.ini, Makefile).

`make versions` runs the minimum versions' tox envs side by side, each over the test
files tox.ini names, leaving out the tests marked ``kernel``: a test marked ``serial``
(one that needs the machine to itself) must not be among what they run.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _marks(node: ast.expr) -> set[str]:
    """The marker names in ``pytest.mark.NAME`` or ``pytest.mark.NAME(...)`` expressions
    (a list of them too)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(_marks(x) for x in node.elts))
    if isinstance(node, ast.Call):
        node = node.func
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    ):
        return {node.attr}
    return set()


def marked(path: Path) -> dict[str, set[str]]:
    """Each test function of ``path`` and its markers (its own and the module's
    ``pytestmark``), read from the source."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            module |= _marks(node.value)
    return {
        node.name: module.union(*(_marks(d) for d in node.decorator_list))
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def min_version_files() -> list[Path]:
    """The test files the minimum versions' envs (``[testenv:*-min]``) run, as tox.ini
    names them (in their commands or in the sections they refer to)."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    text = ""
    for section in config.sections():
        if section.endswith("-min"):
            text += " ".join(config[section].values())
            for ref in re.findall(r"\{\[([\w:-]+)\]", text):
                if config.has_section(ref):
                    text += " ".join(config[ref].values())
    names = sorted(set(re.findall(r"tests/test_\w+\.py", text)))
    return [ROOT / n for n in names]


def test_the_minimum_versions_envs_run_no_serial_test() -> None:
    files = min_version_files()
    assert {"test_lightning.py", "test_step_time.py", "test_report.py"} <= {p.name for p in files}
    wrong = [
        f"{path.name}::{name}"
        for path in files
        for name, marks in marked(path).items()
        if "serial" in marks and "kernel" not in marks
    ]
    assert not wrong, f"marked serial, run side by side by `make versions`: {wrong}"


def test_the_check_reads_the_marks_it_must() -> None:
    """The reader finds a decorator's mark and the module's (else the check above could
    pass on anything)."""
    marks = marked(ROOT / "tests" / "test_job_memory.py")  # module pytestmark: kernel, long
    assert marks and all({"kernel", "long"} <= m for m in marks.values())
    spinning = marked(ROOT / "tests" / "test_findings.py")
    assert "serial" in spinning["test_a_recorded_run_spinning_every_cpu_is_cpu_bound"]
