"""The documentation site's reference pages, generated from the declarations.

``docs_hooks/hooks.py`` (an MkDocs hook, run at every ``mkdocs build``; outside ``docs/``
so that it is not published) replaces each marker
``<!-- generated: NAME -->`` in a page with :func:`generate` ``(NAME)``, so the metrics,
options and Prometheus tables are never written by hand and cannot drift from the code:

- ``metrics``: every key family of :data:`sysmetrics.descriptions.DESCRIPTIONS`, with its
  unit, kind, weight (how a sample counts in a mean) and help;
- ``metrics-<source>``: one table per source of :data:`sysmetrics.key_sources.TABLES`
  (``metrics-host``, ``metrics-nvidia``, ...): each key, its unit (from its description)
  and what the source adds to it, where its values come from, and how the monitor
  aggregates it (from its description, or where its collector decides otherwise);
- ``prometheus``: the exported Prometheus names (:func:`~sysmetrics.descriptions.markdown_table`);
- ``options``: every option of ``SystemMonitor``, the callbacks and ``sysmetrics record``,
  from the options declaration (:data:`sysmetrics.options.OPTIONS`);
- ``findings``: every rule of the findings' registry
  (:data:`sysmetrics.findings.registry.REGISTRY`): code, summary, scope, said live or
  not, its thresholds with their units and constants, how it decides, and an example
  sentence, the rule's own on its ``fires`` example run;
- ``cli``: the ``--help`` of ``sysmetrics`` and of each of its commands, from the
  command line's own parser (:mod:`sysmetrics.cli`).

``python -m sysmetrics._docs NAME`` prints one of them.
"""

from __future__ import annotations

import dataclasses
import html
import re
import sys
from collections.abc import Callable
from functools import partial

from sysmetrics.descriptions import DESCRIPTIONS, Description, describe, markdown_table
from sysmetrics.key_sources import TABLES, Table
from sysmetrics.options import OPTIONS

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: reST literals as code, pipes escaped."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"``\1``", text).replace("``", "`")
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Code in a table cell: HTML, since a pipe in a Markdown code span ends the cell."""
    return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"


def options_table() -> str:
    """The options reference: one row per declared option, in declaration order."""
    rows = [
        "| option | type | default | unit | where | `record` flag | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in OPTIONS:
        where = "callbacks" if o.scope == "callback" else "`SystemMonitor`, callbacks"
        flag = f"`{o.flag}`" if o.flag else ""
        env = f" (environment variable `{o.env}`)" if o.env else ""
        rows.append(
            f"| `{o.name}` | {_code(o.type)} | {_code(repr(o.default))} | {o.unit or ''} | {where} "
            f"| {flag} | {_cell(o.help)}{env} |"
        )
    return "\n".join(rows) + "\n"


def metrics_table() -> str:
    """Every key family: its unit, kind (gauge or counter), weight, Prometheus name and help."""
    rows = [
        "| key | unit | kind | weight | Prometheus | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for d in DESCRIPTIONS:
        prom = f"`sysmetrics_{d.prometheus}`" if d.prometheus else "not exported"
        rows.append(f"| `{d.key}` | {d.unit} | {d.kind} | {d.weight} | {prom} | {_cell(d.help)} |")
    return "\n".join(rows) + "\n"


_AGGREGATION = {"mean": "mean", "last": "latest", "peak": "mean, plus `.max`"}
_WEIGHTED = {"steps": "mean over the steps", "step_seconds": "mean over the seconds"}


def _aggregation(d: Description) -> str:
    """How the monitor aggregates a family, in words (a weighted mean says by what)."""
    if d.aggregation == "mean" and d.weight in _WEIGHTED:
        return _WEIGHTED[d.weight]
    return _AGGREGATION[d.aggregation]


def _keys_cell(keys: tuple[str, ...]) -> str:
    """The key cell: keys after the first that share its prefix as their last part.

    ``gpu.{i}.smClock``, ``.memoryClock``, as the page has always written them.
    """
    base = keys[0].rsplit(".", 1)[0] + "."
    names = [keys[0]] + [k[len(base) - 1 :] if k.startswith(base) else k for k in keys[1:]]
    return ", ".join(f"`{n}`" for n in names)


def _family(key: str) -> Description | None:
    """The description of a family (``gpu.{i}.gpu``) or of a concrete key (``gpu.0.gpu``)."""
    if key.endswith(".*"):
        return None
    family = next((d for d in DESCRIPTIONS if d.key == key), None)
    if family is not None:
        return family
    found = describe(key)
    return found[0] if found else None


def source_table(table: Table) -> str:
    """One source's key table: key, unit, its source columns, aggregation.

    The unit and the aggregation come from each key's
    :class:`~sysmetrics.descriptions.Description`; the table adds what the source says
    (:mod:`sysmetrics.key_sources`).
    """
    rows = [
        "| " + " | ".join(["key", "unit", *table.columns, "aggregation"]) + " |",
        "|" + "---|" * (len(table.columns) + 3),
    ]
    for row in table.rows:
        found = [d for d in map(_family, row.keys) if d is not None]
        units = ", ".join(dict.fromkeys(d.unit for d in found))
        aggregation = row.aggregation or " / ".join(dict.fromkeys(_aggregation(d) for d in found))
        cells = [_keys_cell(row.keys), units + row.note, *row.sources, aggregation]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _value(value: float, unit: str) -> str:
    """A threshold's value with its unit: ``90 %``, ``0.3`` (a share), ``1.5 times``."""
    number = f"{value:g}"
    if unit == "share":
        return number
    if unit == "%":
        return f"{number} %"
    return f"{number} {unit}"


def findings_table() -> str:
    """The findings' rules: one row each, then how each decides and its example sentence."""
    from sysmetrics.findings import findings, read_run
    from sysmetrics.findings.registry import REGISTRY

    rows = [
        "| rule | says | scope | said live | thresholds (constant) |",
        "|---|---|---|---|---|",
    ]
    details = []
    for rule in REGISTRY:
        held = []
        for f in dataclasses.fields(rule.thresholds):
            value = getattr(rule.thresholds, f.name)
            meta = f.metadata
            held.append(
                f"`{f.name}` = {_value(value, meta['unit'])} (`{meta['constant']}`): "
                f"{_cell(meta['help'])}"
            )
        scope = "each node" if rule.scope == "node" else "the whole run, across nodes"
        live = "yes" if rule.live else "no: only the whole run decides"
        rows.append(
            f"| `{rule.code}` | {_cell(rule.summary)} | {scope} | {live} "
            f"| {'<br>'.join(held) or 'none'} |"
        )
        example = [
            f.sentence for f in findings(read_run(rule.example("fires"))) if f.rule == rule.code
        ]
        said = (
            f'\n  On `examples/{rule.code}/fires.jsonl` it says: "{example[0]}"' if example else ""
        )
        details.append(f"- **`{rule.code}`**: {rule.how}. Why it matters: {rule.why}{said}")
    return "\n".join(rows) + "\n\n" + "\n".join(details) + "\n"


def console_table() -> str:
    """The short keys ``console=True`` shows, in the order shown."""
    from sysmetrics.console_view import CONSOLE_KEYS

    rows = ["| short key | from | unit |", "|---|---|---|"]
    for c in CONSOLE_KEYS:
        source = f"gpu.{{i}}.{c.source}" if c.per_gpu else c.source
        rows.append(f"| `{c.label}` | `{source}` | {_cell(c.unit)} |")
    return "\n".join(rows) + "\n"


HELP_COLUMNS = 88  # the width the CLI reference's help texts are wrapped at


def cli_help() -> str:
    """The CLI reference: ``sysmetrics --help``, then each command's, as the parser prints them."""
    import argparse
    import os

    from sysmetrics import cli

    parser = cli._parser()[0]
    commands = [
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    ]
    helps = [("sysmetrics --help", parser)]
    for action in commands:
        helps += [(f"sysmetrics {name} --help", sub) for name, sub in action.choices.items()]
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)  # argparse wraps at the terminal's width
    try:
        parts = [
            f"## `{title}`\n\n```text\n{p.format_help().rstrip()}\n```\n" for title, p in helps
        ]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_help,
    "console": console_table,
    "findings": findings_table,
    "verdict": lambda: _verdict_table(),
    "metrics": metrics_table,
    "options": options_table,
    "prometheus": markdown_table,
    **{f"metrics-{table.name}": partial(source_table, table) for table in TABLES},
}


def _verdict_table() -> str:
    """The verdict's categories and bands (:func:`sysmetrics.findings.verdict.table`)."""
    from sysmetrics.findings.verdict import table

    return table()


def render(markdown: str) -> str:
    """``markdown`` with each ``<!-- generated: NAME -->`` line replaced by its table.

    Raises:
        KeyError: a marker names no generator.

    """
    return MARKER.sub(lambda m: GENERATORS[m.group(1)]().rstrip("\n"), markdown)


def generate(name: str) -> str:
    """One generated table, by name (a key of :data:`GENERATORS`)."""
    return GENERATORS[name]()


if __name__ == "__main__":
    print(generate(sys.argv[1]), end="")
