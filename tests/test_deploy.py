"""``sysmetrics deploy grafana|prometheus-rules [DIR]``: the shipped dashboard and rules.

Regression (issue 33): the Grafana dashboard and the Prometheus rules lived in the
repository's ``deploy/`` only, so a user who installed the wheel had no way to get them.
They are package data now (one copy, ``sysmetrics/deploy/``), written out by the command;
the wheel check (``make wheel-check``) runs the command from an installed wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sysmetrics import deploy_files

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "sysmetrics" / "deploy"


def deploy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "sysmetrics", "deploy", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("target", "names"),
    [
        ("grafana", ["grafana/sysmetrics-dashboard.json"]),
        ("prometheus-rules",
         ["prometheus/sysmetrics-rules.yml", "prometheus/sysmetrics-rules.test.yml"]),
    ],
)  # fmt: skip
def test_deploy_writes_the_shipped_files(target: str, names: list[str], tmp_path: Path) -> None:
    out = tmp_path / "new" / "folder"  # made where missing
    done = deploy(target, str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = [out / n.rsplit("/", 1)[-1] for n in names]
    assert done.stdout.splitlines() == [str(p) for p in written]
    for name, path in zip(names, written):
        assert path.read_bytes() == (SHIPPED / name).read_bytes(), name
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written)
    # Again: the same files, left as they are.
    again = deploy(target, str(out), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr


def test_deploy_writes_into_the_current_folder_by_default(tmp_path: Path) -> None:
    done = deploy("grafana", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sysmetrics-dashboard.json\n"
    shipped = SHIPPED / "grafana" / "sysmetrics-dashboard.json"
    assert (tmp_path / "sysmetrics-dashboard.json").read_bytes() == shipped.read_bytes()


def test_deploy_replaces_a_changed_file_only_with_force(tmp_path: Path) -> None:
    mine = tmp_path / "sysmetrics-rules.yml"
    mine.write_text("groups: []  # my own\n")
    refused = deploy("prometheus-rules", str(tmp_path), cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert (
        f"sysmetrics deploy: error: {mine} exists and differs from the shipped file: give "
        "--force to replace it, or another directory\n"
    ) in refused.stderr
    assert mine.read_text() == "groups: []  # my own\n"
    assert not (tmp_path / "sysmetrics-rules.test.yml").exists()  # nothing written
    forced = deploy("prometheus-rules", str(tmp_path), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert mine.read_bytes() == (SHIPPED / "prometheus" / "sysmetrics-rules.yml").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sysmetrics-rules.test.yml",
        "sysmetrics-rules.yml",
    ]  # no temporary file left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["grafna"], "argument target: invalid choice: 'grafna' (choose from 'grafana', "
                     "'prometheus-rules')"),
        ([], "the following arguments are required: target"),
        (["grafana", "a", "b"], "unrecognized arguments: b"),
        (["grafana", "afile"], "argument DIR: cannot write 'afile': Not a directory"),
    ],
)  # fmt: skip
def test_bad_arguments_are_clear_errors(args: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a folder")
    done = deploy(*args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert f"sysmetrics deploy: error: {message}\n" in done.stderr
    assert done.stderr.startswith("usage: sysmetrics deploy ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_the_files_have_one_home_and_ship_as_package_data() -> None:
    """Every file under sysmetrics/deploy/ is a target's, the package data names them all,
    and the repository keeps no second copy (``deploy/`` holds a pointer only)."""
    shipped = sorted(str(p.relative_to(SHIPPED)) for p in SHIPPED.rglob("*") if p.is_file())
    assert shipped == sorted(n for names in deploy_files.TARGETS.values() for n in names)
    for name in shipped:
        assert deploy_files.read(name) == (SHIPPED / name).read_bytes()
        assert deploy_files.path(name) == SHIPPED / name
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"deploy/*/*.json", "deploy/*/*.yml"' in pyproject
    assert {p.suffix for p in (ROOT / "deploy").rglob("*") if p.is_file()} <= {".md"}
