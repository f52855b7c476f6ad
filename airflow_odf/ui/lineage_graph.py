"""The lineage graph as a picture: Graphviz's `dot` lays it out and draws SVG, on the API server.

Names come from repositories (untrusted): in the DOT source every label and link is a quoted string
with `\\` and `"` escaped, so nothing can add attributes or statements, and `dot` writes text into the
SVG as XML-escaped character data. Nodes are numbered (`n0`, `n1`, ...), never named after datasets.
`dot` runs with a time limit; without Graphviz the page says so and lists the edges instead.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from airflow_odf.odf.errors import OdfError
from airflow_odf.ui.facts import Lineage

DOT_TIMEOUT_SECONDS = 20.0
_FILL = {"Root": "#e8f0fe", "Derivative": "#e6f4ea"}


class LineageGraphError(OdfError):
    """`dot` failed or took too long."""


def _quoted(text: str) -> str:
    """A DOT double-quoted string holding `text` literally (no escape sequences, one line)."""
    flat = " ".join(text.split())
    return '"' + flat.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lineage_dot(graph: Lineage, href: Callable[[str], str | None]) -> str:
    """The DOT source; `href(node key)` is the link of a node (None: no link)."""
    number = {node.key: f"n{i}" for i, node in enumerate(graph.nodes)}
    lines = [
        "digraph lineage {",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=12];',
        '  edge [color="#5f6368"];',
    ]
    for node in graph.nodes:
        kind = node.kind or "not in this repository"
        attrs = {
            "tooltip": f"{node.name} ({kind}) {node.key}",
            "fillcolor": _FILL.get(node.kind or "", "#f1f3f4"),
        }
        link = href(node.key)
        if link:
            attrs.update(URL=link, target="_self")
        if node.kind is None:
            attrs["style"] = "rounded,dashed"
        quoted = [f"label={_label(node.name, kind)}", *(f"{k}={_quoted(v)}" for k, v in attrs.items())]
        lines.append(f"  {number[node.key]} [{', '.join(quoted)}];")
    lines += [f"  {number[a]} -> {number[b]};" for a, b in graph.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _label(name: str, kind: str) -> str:
    """Two lines, the name above the kind (`\\n` is DOT's centred line break; the parts are escaped)."""
    return _quoted(name)[:-1] + "\\n" + _quoted(kind)[1:]


def lineage_svg(graph: Lineage, href: Callable[[str], str | None]) -> str:
    """The graph as an `<svg>` element to put inside a page (no XML prolog or DOCTYPE)."""
    dot = shutil.which("dot")
    if dot is None:
        raise LineageGraphError("Graphviz is not installed on the API server (no `dot` on PATH)")
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
