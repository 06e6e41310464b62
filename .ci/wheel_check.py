#!/usr/bin/env python3
"""The wheel is what users get (issue 33): build it, install it away from the checkout, use it.

``make wheel-check`` (in ``.ci/run``) runs this with the dev environment's Python:

1. builds the sdist and, from the unpacked sdist, the wheel (``python -m build`` where the
   ``build`` package is installed, the ``[dev]`` extra's; else the sdist with setuptools'
   PEP 517 hooks and the wheel with ``pip wheel --no-deps``);
2. checks what they hold: the wheel every module of the source tree (``integrations/`` as
   ``sysmetrics/integrations/``), the Grafana dashboard and Prometheus rules, ``py.typed``
   and LICENSE, under the distribution name of ``pyproject.toml``;
3. installs the wheel with its ``[report]`` extra into a fresh venv (``constraints.txt``'s
   pins) and, from a temporary folder with no ``PYTHONPATH`` (the checkout is not
   importable), imports every module, runs ``sysmetrics record -- python -c ...`` into a
   folder that does not exist yet, ``sysmetrics report`` (page and ``--json``) and
   ``sysmetrics deploy grafana|prometheus-rules``, whose files must equal the shipped ones.

Exits 0 when every check holds, 1 with the failing check otherwise. Nothing is written in
the checkout: the sdist is built from a copy of it, and all is under a temporary folder,
removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Modules that import a framework the wheel does not depend on: an ImportError naming one
# of these (and nothing else) is what a user without that extra gets too.
OPTIONAL_IMPORTS = {"lightning", "pytorch_lightning", "transformers", "keras", "torch",
                    "accelerate", "jax", "tensorflow"}  # fmt: skip
RECORDED = (
    "import time, sysmetrics\nfor i in range(8):\n    sysmetrics.step(i)\n    time.sleep(0.15)\n"
)
TIMEOUT_S = 600  # one step (an install fetches from the index)


class Failed(Exception):
    """A check that does not hold."""


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``cmd``; its stdout, or :class:`Failed` with its output where it fails."""
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0:
        raise Failed(
            f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def project() -> tuple[str, str]:
    """pyproject.toml's project name and version."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    name = re.search(r'^name = "([^"]+)"', text, re.MULTILINE)
    version = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)
    if not name or not version:
        raise Failed("pyproject.toml has no project name or version")
    return name.group(1), version.group(1)


def source_files() -> set[str]:
    """The wheel's paths of the source tree's modules and shipped data."""
    found = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "sysmetrics").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.is_symlink()
        and p.relative_to(ROOT / "sysmetrics").parts[0] != "integrations"
        and (p.suffix == ".py" or "deploy" in p.parts or p.name == "py.typed")
    }  # fmt: skip
    found |= {f"sysmetrics/integrations/{p.name}" for p in (ROOT / "integrations").glob("*.py")}
    return found


def source_copy(work: Path) -> Path:
    """The checkout's files (tracked, and untracked but not ignored) copied to ``work/src``.

    The sdist is built from this copy: setuptools writes its egg-info beside the sources,
    and in the checkout that would rewrite the metadata of the editable install that the
    tests running beside this check (``.ci/run``) read.
    """
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT)
    src = work / "src"
    for rel in filter(None, listed.split("\0")):
        if (ROOT / rel).is_file():  # a tracked file deleted in the work tree is absent
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    return src


def build(dist: Path, work: Path) -> tuple[Path, Path]:
    """The sdist (of :func:`source_copy`), and the wheel built from it, in ``dist``."""
    py = sys.executable
    src = source_copy(work)
    if importlib.util.find_spec("build") is not None:
        run([py, "-m", "build", "--outdir", str(dist), str(src)], cwd=work)
    else:
        print("  (no `build` package here: setuptools' sdist hook, then pip wheel)")
        code = ("import sys; from setuptools import build_meta as b; "
                "print(b.build_sdist(sys.argv[1]))")  # fmt: skip
        run([py, "-c", code, str(dist)], cwd=src)
        (sdist,) = dist.glob("*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(work / "sdist")
        (unpacked,) = (work / "sdist").iterdir()
        run([py, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist),
             str(unpacked)], cwd=work)  # fmt: skip
    sdists, wheels = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise Failed(f"expected one sdist and one wheel, got {sorted(os.listdir(dist))}")
    return sdists[0], wheels[0]


def check_contents(sdist: Path, wheel: Path, name: str, version: str) -> None:
    """The wheel holds every module and shipped file, the sdist what builds it."""
    normal = re.sub(r"[-_.]+", "_", name)
    if not wheel.name.startswith(f"{normal}-{version}-"):
        raise Failed(f"the wheel {wheel.name} is not {name} {version}")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(meta).decode()
    missing = source_files() - names
    if missing:
        raise Failed(f"the wheel lacks {sorted(missing)}")
    if f"Name: {name}\n" not in metadata:
        raise Failed(f"the wheel's METADATA does not name {name}")
    if not any(n.endswith("LICENSE") for n in names):
        raise Failed("the wheel holds no LICENSE")
    with tarfile.open(sdist) as tar:
        held = {m.name.split("/", 1)[-1] for m in tar.getmembers()}
    for needed in ("LICENSE", "README.md", "pyproject.toml", "sysmetrics/deploy/grafana/"
                   "sysmetrics-dashboard.json"):  # fmt: skip
        if needed not in held:
            raise Failed(f"the sdist lacks {needed}")
    print(f"  {wheel.name}: {len(names)} files, every module and shipped file of the tree")


def check_installed(wheel: Path, work: Path) -> None:
    """Install ``wheel`` in a fresh venv and use it from a folder outside the checkout."""
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    py = str(venv / "bin" / "python")
    run([py, "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"),
         f"{wheel}[report]"], cwd=work)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    home = work / "user"  # run from here: the checkout is not on sys.path
    home.mkdir()
    where = run([py, "-c", "import sysmetrics; print(sysmetrics.__file__)"], home, env).strip()
    if not where.startswith(str(venv)):
        raise Failed(f"sysmetrics was imported from {where}, not from the installed wheel")

    # Every module imports, but those that need a framework the user did not install.
    code = f"""
import importlib, json, pkgutil, sysmetrics
optional = {sorted(OPTIONAL_IMPORTS)!r}
done, skipped, failed = [], [], []
for m in pkgutil.walk_packages(sysmetrics.__path__, "sysmetrics."):
    if m.name == "sysmetrics.__main__":  # runs the command line; run below
        continue
    try:
        importlib.import_module(m.name)
        done.append(m.name)
    except ImportError as exc:
        top = (exc.name or "").split(".")[0]
        (skipped if top in optional else failed).append(f"{{m.name}}: {{exc!r}}")
    except Exception as exc:
        failed.append(f"{{m.name}}: {{exc!r}}")
print(json.dumps({{"done": done, "skipped": skipped, "failed": failed}}))
"""
    imports = json.loads(run([py, "-c", code], home, env))
    if imports["failed"]:
        raise Failed("modules that do not import:\n" + "\n".join(imports["failed"]))
    expected = {p[: -len(".py")].replace("/", ".").removesuffix(".__init__")
                for p in source_files() if p.endswith(".py")}  # fmt: skip
    expected.discard("sysmetrics.__main__")
    seen = set(imports["done"]) | {s.split(":")[0] for s in imports["skipped"]}
    if expected - seen - {"sysmetrics"}:
        raise Failed(f"modules not found in the installed wheel: {sorted(expected - seen)}")
    print(f"  imported {len(imports['done'])} modules; without their framework: "
          f"{', '.join(s.split(':')[0] for s in imports['skipped']) or 'none'}")  # fmt: skip

    bin_ = venv / "bin"
    _, version = project()
    said = run([str(bin_ / "sysmetrics"), "--version"], home, env)
    if said != f"sysmetrics {version}\n":
        raise Failed(f"sysmetrics --version said {said!r}, not {version}")
    run_file = home / "runs" / "first" / "run.jsonl"  # its folders do not exist yet
    run([str(bin_ / "sysmetrics"), "record", "--interval", "0.2", "--no-findings", "--output",
         str(run_file), "--", py, "-c", RECORDED], home, env)  # fmt: skip
    lines = [json.loads(line) for line in run_file.read_text().splitlines()]
    steps = {line.get("step") for line in lines} - {None}
    if lines[0].get("run", {}).get("version") != version or not steps or "end" not in lines[-1]:
        raise Failed(f"the run file is not a whole recording with steps: {lines[:1]} ...")
    run([str(bin_ / "sysmetrics"), "report", str(run_file), "-o", str(home / "report.html")],
        home, env)  # fmt: skip
    page = (home / "report.html").read_text()
    if "<img" not in page:
        raise Failed("the report page has no figure")
    document = json.loads(run([str(bin_ / "sysmetrics"), "report", str(run_file), "--json"],
                              home, env))  # fmt: skip
    if not document:
        raise Failed("sysmetrics report --json printed nothing")
    print(f"  record: {len(lines)} lines, steps {min(steps)}..{max(steps)}; report: page "
          f"{len(page) // 1024} KiB and --json")  # fmt: skip

    shipped = ROOT / "sysmetrics" / "deploy"
    # What the installed package declares it ships, against the checkout's files.
    code = "import json; from sysmetrics.deploy_files import TARGETS; print(json.dumps(TARGETS))"
    targets: dict[str, list[str]] = json.loads(run([py, "-c", code], home, env))
    if not targets:
        raise Failed("the installed package declares no deploy targets")
    for target, files in targets.items():
        out = home / "deploy" / target
        written = run([str(bin_ / "sysmetrics"), "deploy", target, str(out)], home, env)
        for file in files:
            got = out / file.rsplit("/", 1)[-1]
            if (
                str(got) not in written.split("\n")
                or got.read_bytes() != (shipped / file).read_bytes()
            ):
                raise Failed(f"sysmetrics deploy {target} did not write the shipped {file}")
    print("  deploy: grafana and prometheus-rules wrote the shipped files")


def main() -> int:
    """Build, check, install and use the wheel; 0 where every check holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    work = Path(tempfile.mkdtemp(prefix="sysmetrics-wheel-check-"))
    started = time.monotonic()
    try:
        name, version = project()
        print(f"wheel check: {name} {version} (in {work})")
        dist = work / "dist"
        dist.mkdir()
        sdist, wheel = build(dist, work)
        print(f"  built {sdist.name} and {wheel.name}")
        check_contents(sdist, wheel, name, version)
        check_installed(wheel, work)
    except (Failed, subprocess.TimeoutExpired) as exc:
        print(f"wheel check FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wheel check: passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
