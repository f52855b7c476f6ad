"""The lineage graph shown: a text tree, DOT source, SVG laid out by Graphviz's `dot`, one HTML file.

Names come from repositories (untrusted). In the DOT source every label and link is a quoted string with
`\\` and `"` escaped, so nothing can add attributes or statements, and `dot` writes text into the SVG as
XML-escaped character data; nodes are numbered (`n0`, `n1`, ...), never named after datasets. `dot` runs
as a subprocess with an argument list and a time limit (never a shell). The HTML escapes every text it
adds and holds everything inline: it loads nothing when viewed.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections.abc import Callable

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.repo.lineage import PULLED_FROM, REMOTE, Lineage, LineageNode

DOT_TIMEOUT_SECONDS = 20.0
_FILL = {"Root": "#e8f0fe", "Derivative": "#e6f4ea", REMOTE: "#fef7e0"}
NOT_HERE = "not in this repository"


class LineageGraphError(OdfError):
    """`dot` is missing, failed or took too long."""


class GraphvizMissingError(LineageGraphError):
    """No `dot` on PATH (callers say where it is missing and what else to ask for)."""


def _short(block_hash: str) -> str:
    return "…" + block_hash[-8:]


def node_facts(node: LineageNode) -> list[str]:
    """What a node says besides its name, one short part each (kind, records, head, last update)."""
    if node.error is not None:
        return ["BROKEN", node.error]
    if node.kind is None:
        return [NOT_HERE, node.key]
    if node.kind == REMOTE:
        return ["remote"]
    parts = [node.kind]
    if node.records is not None:
        parts.append(f"{node.records} records")
    if node.head is not None:
        parts.append(f"head {_short(node.head)}")
    if node.last_update is not None:  # to the second: enough to read, shorter to draw
        parts.append(f"updated {re.sub(r'[.][0-9]+Z$', 'Z', node.last_update)}")
    return parts


# ----- text -----


def lineage_text(graph: Lineage) -> str:
    """A tree from the nodes nothing feeds (roots, remotes, outside inputs) down to the derivatives; a
    node reached a second time is named with "(see above)" instead of repeating what is below it."""
    by_key = {n.key: n for n in graph.nodes}
    below: dict[str, list[str]] = {}
    fed = set()
    for e in graph.edges:
        below.setdefault(e.source, []).append(e.target)
        fed.add(e.target)
    order = sorted(by_key, key=lambda k: (by_key[k].name.lower(), k))
    rank = {key: i for i, key in enumerate(order)}
    shown: set[str] = set()
    lines: list[str] = []

    def visit(key: str, lead: str, branch: str) -> None:
        node = by_key[key]
        line = f"{lead}{branch}{_printable(node.name)}"
        if key in shown:
            lines.append(f"{line} (see above)")
            return
        shown.add(key)
        lines.append(f"{line}  [{_printable(', '.join(node_facts(node)))}]")
        children = sorted(below.get(key, []), key=rank.__getitem__)
        inner = lead + ("" if not branch else "    " if branch == "└── " else "│   ")
        for i, child in enumerate(children):
            visit(child, inner, "└── " if i == len(children) - 1 else "├── ")

    for key in order:
        if key not in fed:
            visit(key, "", "")
    for key in order:  # a cycle no top reaches
        if key not in shown:
            visit(key, "", "")
    return "\n".join(lines) + "\n" if lines else "(no datasets)\n"


def _printable(text: str) -> str:
    """Text from a repository as a terminal may show it: control characters escaped."""
    return text if text.isprintable() else repr(text)


# ----- DOT and SVG -----


def _escaped(text: str) -> str:
    """`text` for inside a DOT double-quoted string, literally (no escape sequences, one line)."""
    return " ".join(text.split()).replace("\\", "\\\\").replace('"', '\\"')


def _quoted(text: str) -> str:
    return f'"{_escaped(text)}"'


def _label(lines: list[str]) -> str:
    """Lines joined by `\\n`, DOT's centred line break; each line escaped."""
    return '"' + "\\n".join(_escaped(line) for line in lines) + '"'


def lineage_dot(graph: Lineage, href: Callable[[str], str | None] = lambda key: None) -> str:
    """The DOT source; `href(node key)` is the link of a node (None: no link)."""
    number = {node.key: f"n{i}" for i, node in enumerate(graph.nodes)}
    lines = [
        "digraph lineage {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=12];',
        '  edge [color="#5f6368"];',
    ]
    for node in graph.nodes:
        facts = node_facts(node)
        attrs = {
            "tooltip": f"{node.name} ({facts[0]}) {node.key}",
            "fillcolor": _FILL.get(node.kind or "", "#f1f3f4"),
        }
        link = href(node.key)
        if link:
            attrs.update(URL=link, target="_self")
        if node.kind is None or node.kind == REMOTE:
            attrs["style"] = "rounded,dashed,filled"
        label = _label([node.name, facts[0], *_two_per_line(facts[1:])])
        quoted = [f"label={label}", *(f"{k}={_quoted(v)}" for k, v in attrs.items())]
        lines.append(f"  {number[node.key]} [{', '.join(quoted)}];")
    for e in graph.edges:
        style = ' [style=dashed, label="pulled"]' if e.relation == PULLED_FROM else ""
        lines.append(f"  {number[e.source]} -> {number[e.target]}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _two_per_line(parts: list[str]) -> list[str]:
    return [" · ".join(parts[i : i + 2]) for i in range(0, len(parts), 2)]


def lineage_svg(graph: Lineage, href: Callable[[str], str | None] = lambda key: None) -> str:
    """The graph as an `<svg>` element (no XML prolog or DOCTYPE): a file of its own or part of a page."""
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizMissingError("Graphviz is not installed (no `dot` on PATH)")
    try:
        done = subprocess.run(
            [dot, "-Tsvg"],
            input=lineage_dot(graph, href).encode(),
            capture_output=True,
            timeout=DOT_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LineageGraphError(f"dot did not draw the graph within {DOT_TIMEOUT_SECONDS:g} s") from None
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip()[:500]
        raise LineageGraphError(f"dot failed (exit {done.returncode}): {reason}")
    svg = done.stdout.decode()
    start = svg.find("<svg")
    if start < 0:
        raise LineageGraphError("dot wrote no <svg> element")
    return svg[start:]


# ----- one HTML file -----

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5rem;
       color: #202124; }
h1 { font-size: 1.4rem; } .graph svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: .88rem; margin-top: 1rem; }
th, td { border-bottom: 1px solid #dadce0; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f1f3f4; } code { font-family: ui-monospace, Menlo, Consolas, monospace; }
"""
# nothing may load from anywhere; inline styles only (the SVG's are attributes)
_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


def _text(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def lineage_html(graph: Lineage, title: str) -> str:
    """One self-contained page: the picture (SVG inline) and a table of the nodes."""
    rows = "".join(
        f"<tr><td>{_text(n.name)}</td><td>{_text(', '.join(node_facts(n)))}</td>"
        f"<td><code>{_text(n.key)}</code></td></tr>"
        for n in graph.nodes
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">'
        f"<title>{_text(title)}</title><style>{_STYLE}</style></head>"
        f'<body><h1>{_text(title)}</h1><div class="graph">{lineage_svg(graph)}</div>'
        f"<table><thead><tr><th>Dataset</th><th>What</th><th>Id</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></body></html>\n"
    )
