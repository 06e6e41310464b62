"""The documentation site's reference pages, generated from the declarations.

``docs/hooks.py`` (an MkDocs hook, run at every ``mkdocs build``) replaces each marker
``<!-- generated: NAME -->`` in a page with :func:`generate` ``(NAME)``, so the metrics,
options and Prometheus tables are never written by hand and cannot drift from the code:

- ``metrics``: every key family of :data:`sysmetrics.descriptions.DESCRIPTIONS`, with its
  unit, kind and help;
- ``prometheus``: the exported Prometheus names (:func:`~sysmetrics.descriptions.markdown_table`);
- ``options``: every option of ``SystemMonitor``, the callbacks and ``sysmetrics record``,
  from the options declaration (:data:`sysmetrics.options.OPTIONS`).

``python -m sysmetrics._docs NAME`` prints one of them.
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Callable

from sysmetrics.descriptions import DESCRIPTIONS, markdown_table
from sysmetrics.options import OPTIONS

MARKER = re.compile(r"^<!-- generated: ([a-z]+) -->$", re.MULTILINE)


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
        rows.append(
            f"| `{o.name}` | {_code(o.type)} | {_code(repr(o.default))} | {o.unit or ''} | {where} "
            f"| {flag} | {_cell(o.help)} |"
        )
    return "\n".join(rows) + "\n"


def metrics_table() -> str:
    """Every key family: its unit, kind (gauge or counter), Prometheus name and help."""
    rows = [
        "| key | unit | kind | Prometheus | meaning |",
        "|---|---|---|---|---|",
    ]
    for d in DESCRIPTIONS:
        prom = f"`sysmetrics_{d.prometheus}`" if d.prometheus else "not exported"
        rows.append(f"| `{d.key}` | {d.unit} | {d.kind} | {prom} | {_cell(d.help)} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "metrics": metrics_table,
    "options": options_table,
    "prometheus": markdown_table,
}


def render(markdown: str) -> str:
    """``markdown`` with each ``<!-- generated: NAME -->`` line replaced by its table.

    Raises:
        KeyError: a marker names no generator.

    """
    return MARKER.sub(lambda m: GENERATORS[m.group(1)]().rstrip("\n"), markdown)


def generate(name: str) -> str:
    """One generated table, by name (``metrics``, ``options``, ``prometheus``)."""
    return GENERATORS[name]()


if __name__ == "__main__":
    print(generate(sys.argv[1]), end="")
