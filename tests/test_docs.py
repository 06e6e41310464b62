"""The documentation says what the code does: runnable blocks run, messages exist, tables generate.

- Every code block marked runnable (an HTML comment ``<!-- runnable -->`` on the line
  before a fenced ``python`` block) in README.md and docs/*.md runs, as a user would paste
  it, in a fresh interpreter in an empty folder, within a time bound; a block whose
  imports are not installed is skipped with the module's name.
- Every error and warning message the docs quote (a backticked span that reads as one:
  ``TypeError: ...``, ``... is invalid: ...``, ``sysmetrics: ...``) occurs in the code: its
  fixed text (what is left between the quoted values, numbers and ``...``) is in a string
  literal of ``sysmetrics/`` or ``integrations/``, so a message changed in the code fails
  here until the docs follow.
- Every ``<!-- generated: NAME -->`` marker names a generator, and the front page stays
  a front page.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sysmetrics import _docs

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"^<!-- runnable -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
RUN_TIMEOUT_S = 300  # a block trains a tiny model on CPU: seconds, minutes on a loaded box


def _blocks() -> list[tuple[str, str]]:
    """Each distinct runnable block, named by every page and position it is at
    (``README.md#0 = docs/lightning.md#0``): a block the README repeats from a how-to
    page runs once (the three framework snippets, about 20 s of CPU each time)."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for i, m in enumerate(RUNNABLE.finditer(page.read_text(encoding="utf-8"))):
            found.setdefault(m.group(1), []).append(f"{page.relative_to(ROOT)}#{i}")
    return [(" = ".join(names), code) for code, names in found.items()]


def test_runnable_blocks_are_found() -> None:
    """The marker is recognised: the README's three framework snippets at least."""
    names = [name for name, _ in _blocks()]
    assert sum(name.startswith("README.md#") for name in names) >= 3, names


@pytest.mark.long
@pytest.mark.parametrize(("name", "code"), _blocks(), ids=[n for n, _ in _blocks()])
def test_runnable_block_runs(name: str, code: str, tmp_path: Path) -> None:
    tree = ast.parse(code)
    for node in ast.walk(tree):
        modules = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for module in modules:
            top = module.split(".")[0]
            if top and importlib.util.find_spec(top) is None:
                pytest.skip(f"{name} imports {top}, which is not installed")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stderr[-3000:]}"


# --- messages --------------------------------------------------------------------------

MESSAGE = re.compile(
    r"^(?:(?:TypeError|ValueError|RuntimeError|OSError|ImportError|SystemMetricsWarning): "
    r"|sysmetrics(?: record| report| deploy| compare)?: )|is invalid[:;]"
)
# What a message quotes but the code does not write: values, lists of names, and text
# from elsewhere (argparse's "PROG: error: argument --flag:", the OS's strerror).
VALUE = re.compile(
    r"'[^']*'|\"[^\"]*\"|<[^>]*>|\.\.\.|…|\(did you mean [^)]*\)|\[Errno \d+\]"
    r"|\b\w+(?:, \w+){2,}|\b\w*_\w*(?:, \w+)+|\b(?:None|True|False)\b|\b[\w-]+\.[a-z]{2,5}\b"
    r"|\b[a-z]+_[a-z_]+\b|\b[A-Z][a-z]+[A-Z]\w*\b|-?\d[\d.,]*"
    r"|\b(?:TypeError|ValueError|RuntimeError|OSError|ImportError|SystemMetricsWarning): "
    r"|^sysmetrics (?:record|report|deploy|compare):"
    r"(?: error:(?: argument [-\w]+:| unrecognized arguments:)?)?"
    r"|^argument [-\w]+:"
)
FOREIGN = (
    "No such file or directory",
    "Address already in use",
    "Connection refused",
    "Permission denied",
    "Exec format error",
    "can't start new thread",
    "Too many open files",
)


def _words(text: str) -> list[str]:
    return [w for w in (w.strip(",;:()") for w in text.split()) if w]


def _bigrams() -> set[tuple[str, ...]]:
    """Every pair of words in a string literal of the package (f-strings: fixed parts)."""
    pieces = []
    for path in [*(ROOT / "sysmetrics").rglob("*.py"), *(ROOT / "integrations").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                pieces.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                pieces += [v.value for v in node.values if isinstance(v, ast.Constant)]
    return {tuple(w[i : i + 2]) for p in pieces for w in [_words(p)] for i in range(len(w) - 1)}


def _messages() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
        # Spans paired in order: `{20,}` in the pattern paired the text between a short
        # span and the next one instead, and skipped the messages after it on that line.
        for span in re.findall(r"`([^`\n]+)`", text):
            if len(span) >= 20 and MESSAGE.search(span):
                found.append((page.name, span))
    return found


def _unwritten(message: str, bigrams: set[tuple[str, ...]]) -> list[str]:
    """The parts of ``message`` with 2 or more words in a row that no literal writes.

    The message is cut at its values; in each part of 3 or more words, a word is written
    by the code when it and a neighbour are next to each other in a literal. The first or
    the last word may be a value the code fills in (a class name, an option's name).
    """
    missing = []
    for part in VALUE.split(message):
        words = _words(part)
        if len(words) < 3 or any(f in part for f in FOREIGN):
            continue
        covered = [False] * len(words)
        for i in range(len(words) - 1):
            if tuple(words[i : i + 2]) in bigrams:
                covered[i : i + 2] = [True] * 2
        if not all(covered[1:-1]) or covered[:1] + covered[-1:] == [False, False]:
            missing.append(part.strip(" ,;:()"))
    return missing


def test_documented_messages_occur_in_the_code() -> None:
    messages = _messages()
    assert len(messages) > 40, "the docs' error tables were not found"
    bigrams = _bigrams()
    missing = [
        f"{page}: {part!r} (of `{message}`)"
        for page, message in messages
        for part in _unwritten(message, bigrams)
    ]
    assert not missing, "messages the docs quote that the code does not write:\n" + "\n".join(
        missing
    )


def test_a_changed_message_is_caught() -> None:
    """The check above can fail: a message the code does not write is reported."""
    bigrams = _bigrams()
    made_up = "ValueError: interval=0 is invalid: give it in fortnights, rounded down"
    assert _unwritten(made_up, bigrams) == ["is invalid: give it in fortnights, rounded down"]
    real = "ValueError: interval=0 is invalid: it must be a number of seconds between 0.01 and 3600"
    assert _unwritten(real, bigrams) == []


# --- generated tables and the front page ------------------------------------------------


def test_every_marker_names_a_generator() -> None:
    markers = [m for page in PAGES for m in _docs.MARKER.findall(page.read_text(encoding="utf-8"))]
    assert set(markers) == set(_docs.GENERATORS), markers
    for page in PAGES:
        rendered = _docs.render(page.read_text(encoding="utf-8"))
        assert "<!-- generated:" not in rendered, page


def test_generated_tables_list_every_declaration() -> None:
    from sysmetrics.descriptions import DESCRIPTIONS
    from sysmetrics.options import OPTIONS

    metrics = _docs.generate("metrics")
    assert all(f"| `{d.key}` | {d.unit} | {d.kind} | {d.weight} |" in metrics for d in DESCRIPTIONS)
    assert "| `step.dataWaitPercent` | % | gauge | step_seconds |" in metrics
    options = _docs.generate("options")
    assert all(f"| `{o.name}` |" in options for o in OPTIONS)
    assert "| `interval` | <code>float</code> | <code>1.0</code> | s |" in options
    from sysmetrics.findings.registry import REGISTRY

    rules = _docs.generate("findings")
    assert all(f"| `{r.code}` | {r.summary} |" in rules for r in REGISTRY)
    assert "`percent` = 90 % (`CPU_BOUND_PERCENT`)" in rules
    assert 'fires.jsonl` it says: "The job kept its 4 CPUs 97 % busy' in rules


def test_metrics_page_has_no_hand_written_key_table() -> None:
    """Every key table of the Metrics page is generated: no key row is kept by hand."""
    page = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    by_hand = [line for line in page.splitlines() if line.startswith("| key |")]
    assert by_hand == [], by_hand
    from sysmetrics.key_sources import TABLES

    for table in TABLES:
        assert f"<!-- generated: metrics-{table.name} -->" in page, table.name


def test_source_tables_cover_every_family_once_described() -> None:
    """Each described family is in a source table; each key of a table is described."""
    from sysmetrics.descriptions import DESCRIPTIONS, describe
    from sysmetrics.key_sources import TABLES

    families = {d.key for d in DESCRIPTIONS}
    listed = set()
    for table in TABLES:
        for row in table.rows:
            for key in row.keys:
                if key.endswith(".*"):  # "the keys above", for each ...
                    under = {f for f in families if f.startswith(key[:-1])}
                    assert under, key
                    listed |= under
                    continue
                found = key if key in families else (describe(key) or [None])[0]
                assert found is not None, f"{table.name}: {key} has no description"
                listed.add(key if key in families else found.key)  # type: ignore[union-attr]
    assert families - listed == set(), "families no source table lists"
    rendered = _docs.generate("metrics-host")
    assert "| `cpu` | % of the CPUs available to the process" in rendered
    assert "| `disk.in` | MiB read from whole disks" in rendered and "| latest |" in rendered
    steps = _docs.generate("metrics-steps")
    assert "| mean over the steps |" in steps and "| mean over the seconds |" in steps


def test_source_tables_aggregate_as_the_collectors_do() -> None:
    """A row that overrides its families' aggregation says what its collector does."""
    from sysmetrics.collectors.ipu import IPUCollector
    from sysmetrics.key_sources import IPU

    collector = object.__new__(IPUCollector)  # aggregation() reads no state
    for row in IPU.rows:
        key = row.keys[0].replace("{device_id}", "0")
        assert row.aggregation == {"last": "latest"}.get(collector.aggregation(key)), row.keys
        assert _docs.generate("metrics-ipu").count("| latest |") == len(IPU.rows)


def test_readme_tested_versions_are_the_pinned_ones() -> None:
    """The README's "latest tested" versions are what constraints.txt installs."""
    pins = {}
    for name in ("constraints.txt", "constraints-torch.txt"):
        text = (ROOT / name).read_text(encoding="utf-8")
        pins.update(re.findall(r"^([\w-]+)==(\S+)$", text, re.MULTILINE))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = {
        m[0]: m[1] for m in re.findall(r"^\| `\[(\w+)\]` \|.*\| (.*) \|$", readme, re.MULTILINE)
    }
    extra = {"lightning": "lightning", "transformers": "transformers", "accelerate": "transformers",
             "keras": "keras", "matplotlib": "report", "numpy": "report"}  # fmt: skip
    for package, row in extra.items():
        pin = re.escape(pins[package])
        assert re.search(rf"(^|\s){pin}(\s|$)", rows[row]), (package, rows[row])
    assert f"torch {pins['torch']}" in readme


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, len(lines)
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / link).is_file(), link


# --- the site's structure: API names, the CLI reference, build helpers ------------------


def test_api_reference_names_exist() -> None:
    """Each ``::: name`` of the API page names an object of the package (mkdocstrings)."""
    names = re.findall(r"^::: ([\w.]+)$", (ROOT / "docs" / "api.md").read_text(), re.MULTILINE)
    assert len(names) >= 20, names
    for name in names:
        if name.startswith("integrations."):  # read from the repository's folder (api.md)
            name = "sysmetrics." + name
        module, _, attr = name.rpartition(".")
        spec = importlib.util.find_spec(module)  # imports its parents only, not a framework
        assert spec is not None and spec.origin, name
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        defined = set()
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                defined.add(node.name)
            elif isinstance(node, ast.ImportFrom):
                defined |= {a.asname or a.name for a in node.names}
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined |= {n.id for n in targets if isinstance(n, ast.Name)}
        assert attr in defined, name


def test_cli_reference_has_every_command() -> None:
    """The generated CLI reference has the help of every command the parser has."""
    import argparse

    from sysmetrics import cli

    text = _docs.generate("cli")
    parser = cli._parser()[0]
    commands = [
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]
    assert {"record", "report"} <= set(commands), commands
    for name in commands:
        assert f"## `sysmetrics {name} --help`" in text, name
    assert "--prometheus-port PORT" in text


def test_build_helpers_are_not_published() -> None:
    """No Python file sits in docs/ (it would be published); mkdocs.yml's hooks exist."""
    assert not list((ROOT / "docs").rglob("*.py"))
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    hooks = re.findall(r"^hooks:\n((?:  - .*\n)+)", config, re.MULTILINE)
    assert hooks, "mkdocs.yml has no hooks"
    for entry in re.findall(r"^  - (\S+)", hooks[0], re.MULTILINE):
        assert (ROOT / entry).is_file() and not entry.startswith("docs/"), entry


# --- pictures: remade by scripts/screenshots.py, never stale -----------------------------


def _screenshots() -> Any:
    path = ROOT / "scripts" / "screenshots.py"
    spec = importlib.util.spec_from_file_location("screenshots", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_picture_shows_todays_findings(tmp_path: Path) -> None:
    """The README's report picture says what today's rules say of its stored recording.

    ``docs/report-page.findings.txt`` is the findings text of ``docs/report-page.png``,
    written with it by ``make screenshots``; a rule change that changes what the page
    says of ``docs/report-page.jsonl`` fails here until the pictures are remade.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "sysmetrics", "report", str(ROOT / "docs" / "report-page.jsonl"),
         "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    today = _screenshots().findings_text(done.stdout)
    shown = (ROOT / "docs" / "report-page.findings.txt").read_text(encoding="utf-8")
    assert shown == today, "the report picture is stale: remake it with `make screenshots`"
    assert not list(tmp_path.iterdir()), "report --json wrote files"


def test_every_picture_is_remade_by_the_script() -> None:
    """Each picture the README and the docs show is one that ``make screenshots`` writes."""
    shown = {
        Path(link).name
        for page in PAGES
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text(encoding="utf-8"))
    }
    assert {"report-page.png", "tensorboard.png"} <= shown, shown
    script = (ROOT / "scripts" / "screenshots.py").read_text(encoding="utf-8")
    written = set(re.findall(r'docs / "([\w.-]+\.png)"', script))
    assert shown <= written, f"pictures no script remakes: {sorted(shown - written)}"
