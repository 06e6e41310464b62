"""The wheel ships every package of the source tree, under a distribution name of our own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sysmetrics import _optional

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_in_the_wheel() -> None:
    """Regression: ``sysmetrics.host`` and ``sysmetrics.collectors.nvidia`` became packages
    but were not in pyproject's ``packages`` list, so a built wheel could not be imported
    (``ModuleNotFoundError: No module named 'sysmetrics.collectors.nvidia'``); an editable
    install hid it."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "sysmetrics").rglob("__init__.py")
    }
    found |= {"sysmetrics.integrations"} if (ROOT / "integrations/__init__.py").exists() else set()
    assert set(config["packages"]) == found


# --- the distribution's name (issue 33) ----------------------------------------------------

# Packages other than this project that an install line may name (the frameworks and tools
# the docs tell users to install beside it).
THIRD_PARTY = frozenset(
    {"jax", "lightning", "torch", "transformers", "accelerate", "keras", "tensorboard",
     "prometheus-client", "matplotlib", "orjson", "psutil", "nvidia-ml-py", "mkdocs", "tox"}
)  # fmt: skip
PIP_INSTALL = re.compile(r"pip install ([^`#\n]+)")
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*|\.)(?:\[([\w,\s-]+)\])?$")


def _project() -> tuple[str, set[str]]:
    """pyproject.toml's project name and extras, read without tomllib (absent before 3.11)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    name = re.search(r'^name = "([^"]+)"', text, re.MULTILINE)
    assert name, "pyproject.toml has no project name"
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+) = \[", section, re.MULTILINE))
    return name.group(1), extras


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _install_lines() -> list[tuple[str, str]]:
    """``(where, what pip installs)`` of every ``pip install`` in the README, the docs, the
    top-level guides and the package's messages (``_optional.install`` rendered)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += [p for p in (ROOT / "CONTRIBUTING.md",) if p.exists()]
    found = [
        (f"{page.relative_to(ROOT)}:{n}", m)
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for m in PIP_INSTALL.findall(line)
    ]
    for path in [*(ROOT / "sysmetrics").rglob("*.py"), *(ROOT / "integrations").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [(where, m) for m in PIP_INSTALL.findall(node.value)]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "install"
                and isinstance(node.args[0], ast.Constant)
            ):
                found.append((where, PIP_INSTALL.findall(_optional.install(node.args[0].value))[0]))
    return found


def _wrong(args: str, dist: str, extras: set[str]) -> list[str]:
    """What in ``pip install {args}`` is neither this distribution (with declared extras),
    the checkout (``.``, ``-e .[extras]``) nor a known third-party package."""
    words = [w.strip("'\"") for w in args.split()]
    wrong, skip = [], False
    for word in words:
        if skip or not word:
            skip = False
            continue
        if word in ("-c", "-r", "--constraint", "--requirement", "-d", "--dest"):
            skip = True  # its value is a file or folder
            continue
        if word.startswith("-"):
            continue
        m = REQUIREMENT.match(word.split("==")[0].split(">=")[0])
        if m is None:
            wrong.append(word)
            continue
        name, wanted = m.group(1), {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
        if name == "." or _normal(name) == _normal(dist):
            wrong += [f"{word} (no extra {e!r})" for e in sorted(wanted - extras)]
        elif _normal(name) not in THIRD_PARTY:
            wrong.append(word)
    return wrong


def test_the_distribution_name_is_declared_once() -> None:
    """pyproject.toml's name is the one the code tells users to install."""
    name, extras = _project()
    assert name == _optional.DIST
    assert _normal(name) != "sysmetrics"  # PyPI's sysmetrics is another author's project
    assert {"lightning", "transformers", "keras", "report", "prometheus"} <= extras


def test_every_install_line_names_this_distribution_or_a_known_package() -> None:
    """Regression (issue 33): every install line said ``pip install sysmetrics``, which
    installs an unrelated project of that name from PyPI (the import then fails)."""
    dist, extras = _project()
    lines = _install_lines()
    assert sum(where.startswith(("README.md", "docs/")) for where, _ in lines) >= 6, lines
    assert sum(where.startswith("sysmetrics/") for where, _ in lines) >= 3, lines
    wrong = [
        f"{where}: pip install {args} ({', '.join(_wrong(args, dist, extras))})"
        for where, args in lines
        if _wrong(args, dist, extras)
    ]
    assert not wrong, "install lines that name another distribution:\n" + "\n".join(wrong)


def test_the_install_line_check_can_fail() -> None:
    dist, extras = _project()
    assert _wrong("sysmetrics", dist, extras) == ["sysmetrics"]
    assert _wrong("'sysmetrics[report]'", dist, extras) == ["sysmetrics[report]"]
    assert _wrong(f"'{dist}[nope]'", dist, extras) == [f"{dist}[nope] (no extra 'nope')"]
    assert _wrong(f"'{dist}[report,prometheus]' jax", dist, extras) == []
    assert _wrong("--quiet -c constraints.txt -e '.[test,dev]'", dist, extras) == []


# --- the front page and the top-level files (issue 33 items 3 and 7) ----------------------


def test_the_readme_leads_with_what_a_user_does_first() -> None:
    """Regression (issue 33): the README opened with ``make demo``/``make test``, the
    contributor's setup, before a user's ``pip install``; they stay, named as such."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings[:3] == ["Install", "Callbacks", "`record` and `report`"], headings
    contributing = text.index("## Contributing")
    for command in ("make demo", "make test"):
        assert re.search(rf"^{command} +#", text[contributing:], re.MULTILINE), command
        assert not re.search(rf"^{command}\b", text[:contributing], re.MULTILINE), command
    assert "contributor" in text[contributing:].split("```", 1)[0]


def test_license_changelog_and_contributing_are_there() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in ("LICENSE", "CHANGELOG.md", "CONTRIBUTING.md"):
        assert (ROOT / name).is_file(), name
        assert f"]({name})" in readme, name
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text  # the full text, not a pointer
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version and f"## [{version.group(1)}]" in changelog
    assert "## [Unreleased]" in changelog and "keepachangelog.com" in changelog
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for command in ("make demo", "make test", "make lint", "make docs", "make wheel-check"):
        assert command in contributing, command


def test_no_extra_is_named_on_another_distribution() -> None:
    """``sysmetrics[lightning]`` anywhere (a docstring, a table) names PyPI's other project."""
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "CONTRIBUTING.md"]
    files += [*(ROOT / "sysmetrics").rglob("*.py"), *(ROOT / "integrations").glob("*.py")]
    wrong = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in files
        if p.exists()
        for m in re.finditer(r"(?<![\w-])sysmetrics\[\w+", p.read_text(encoding="utf-8"))
    ]
    assert not wrong, wrong


def test_every_module_imports() -> None:
    """Every module of the package imports on this interpreter (``make pythons`` runs this
    on the oldest and newest Python declared); one may fail only for an optional
    dependency this environment lacks (the engine envs have no torch, no framework)."""
    import importlib
    import pkgutil

    import sysmetrics
    import sysmetrics.integrations

    lacking, names = [], []
    # sysmetrics.integrations is integrations/ of the checkout, mapped in by the
    # package-dir table (pyproject.toml): not a folder under sysmetrics/ in a clone.
    found = [
        *pkgutil.walk_packages(sysmetrics.__path__, "sysmetrics."),
        *pkgutil.walk_packages(sysmetrics.integrations.__path__, "sysmetrics.integrations."),
    ]
    for info in found:
        if info.name.endswith("__main__") or info.name in names:
            continue  # runs the CLI; or seen through a link to integrations/ (a worktree)
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name.split(".")[0] == "sysmetrics":
                raise
            lacking.append(exc.name.split(".")[0])
    assert "sysmetrics.integrations.lightning" in names and "sysmetrics.report.model" in names
    assert set(lacking) <= {"torch", "lightning", "pytorch_lightning", "transformers", "keras",
                            "accelerate", "tensorflow", "jax", "rich", "ipywidgets", "IPython",
                            "matplotlib", "numpy", "prometheus_client"}, lacking  # fmt: skip
