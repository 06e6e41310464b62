"""The documentation site's reference pages, generated from the declarations.

``docs/hooks.py`` (an MkDocs hook, run at every ``mkdocs build``) replaces each marker
``<!-- generated: NAME -->`` in a page with :func:`generate` ``(NAME)``, so the metrics,
options and Prometheus tables are never written by hand and cannot drift from the code:

- ``metrics``: every key family of :data:`sysmetrics.descriptions.DESCRIPTIONS`, with its
  unit, kind and help;
- ``prometheus``: the exported Prometheus names (:func:`~sysmetrics.descriptions.markdown_table`);
- ``options``: every option of ``SystemMonitor``, the callbacks and ``sysmetrics record``,
  from the options declaration (see :func:`_options`).

``python -m sysmetrics._docs NAME`` prints one of them.
"""

from __future__ import annotations

import html
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sysmetrics.descriptions import DESCRIPTIONS, markdown_table

MARKER = re.compile(r"^<!-- generated: ([a-z]+) -->$", re.MULTILINE)


class OptionRow(Protocol):
    """What the options page reads of an option: ``sysmetrics.options.Option`` has it."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def default(self) -> object: ...
    @property
    def help(self) -> str: ...
    @property
    def unit(self) -> str | None: ...
    @property
    def scope(self) -> str: ...
    @property
    def flag(self) -> str | None: ...


@dataclass(frozen=True)
class DocOption:
    """What the options page shows of one option: the fields of ``sysmetrics.options.Option``.

    ``sysmetrics.options.Option`` has these attributes (and a ``check``); this mirror lets
    the page be generated before that module exists.
    """

    name: str  # "disk_paths"
    type: str  # the annotation as users read it: "Sequence[str]"
    default: object  # ("/",)
    help: str  # one sentence, with the unit
    unit: str | None  # "s", "bytes", None
    scope: str  # "monitor" (SystemMonitor, callbacks, record) or "callback" (callbacks only)
    flag: str | None  # record's CLI flag ("--disk-path"), or None


# --- ADAPTER: replace at merge ------------------------------------------------------------
# Until sysmetrics.options (one declaration per option, issue 24 item 1) is merged, the
# options are read from today's structures: SystemMonitor's and CallbackCore's signatures
# and `Args:` blocks, collectors.defaults.OPTIONS (default, help) with CollectorOptions
# (types), and the `record` parser (flags). At merge, the whole body becomes:
#
#     from sysmetrics.options import OPTIONS
#     return OPTIONS
def _options() -> Sequence[OptionRow]:
    from sysmetrics import cli
    from sysmetrics.callback import CALLBACK_OPTIONS, CallbackCore
    from sysmetrics.collectors.defaults import OPTIONS, CollectorOptions
    from sysmetrics.monitor import MONITOR_OPTIONS, SystemMonitor

    record = cli._parser()[1]["record"]
    flags = {a.dest: max(a.option_strings, key=len) for a in record._actions if a.option_strings}
    units = {"interval": "s"}
    # TypedDict keeps them as ForwardRef("...") under `from __future__ import annotations`
    types = {
        k: getattr(t, "__forward_arg__", str(t))
        for k, t in CollectorOptions.__annotations__.items()
    }
    monitor_doc = _args(SystemMonitor.__doc__ or "")
    callback_doc = _args(CallbackCore.__doc__ or "")
    signatures = {
        **inspect.signature(CallbackCore.__init__).parameters,
        **inspect.signature(SystemMonitor.__init__).parameters,
    }
    found: list[DocOption] = []
    for name in (*CALLBACK_OPTIONS, *(o for o in MONITOR_OPTIONS if o not in CALLBACK_OPTIONS)):
        if name in OPTIONS:
            default, help, type_ = OPTIONS[name].default, OPTIONS[name].help, types[name]
        else:
            param = signatures[name]
            default = param.default
            type_ = str(param.annotation)
            help = monitor_doc.get(name) or callback_doc[name]
        if name == "interval":  # the callbacks' None means SystemMonitor's default
            default, type_ = 1.0, "float"
        scope = "callback" if name not in MONITOR_OPTIONS else "monitor"
        found.append(DocOption(name, type_, default, help, units.get(name), scope, flags.get(name)))
    return found


def _args(doc: str) -> dict[str, str]:
    """The entries of a Google-style ``Args:`` block, each joined into one line."""
    block = doc.partition("Args:\n")[2].split("\n\n")[0]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        m = re.match(r"\s{8}(\*{0,2}\w+): (.*)", line)
        if m:
            name = m.group(1).lstrip("*")
            entries[name] = m.group(2)
        elif name is not None:
            entries[name] += " " + line.strip()
    return entries


# --- END ADAPTER ----------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: reST literals as code, pipes escaped."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"``\1``", text).replace("``", "`")
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Code in a table cell: HTML, since a pipe in a Markdown code span ends the cell."""
    return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"


def options_table(options: Sequence[OptionRow] | None = None) -> str:
    """The options reference: one row per option, in declaration order."""
    rows = [
        "| option | type | default | unit | where | `record` flag | meaning |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in _options() if options is None else options:
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
