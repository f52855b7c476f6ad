"""The ODF view's HTML, rendered on the server: no scripts, every value escaped.

What a repository holds (names, descriptions, records, messages) is untrusted: every text goes through
`_text` (HTML-escaped, quotes included) and every link is built by `Paths` from percent-encoded parts,
so no value can open a tag, an attribute or a `javascript:` link. The SVG of the lineage graph comes
from the core's `lineage_picture`, which escapes its own text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from airflow_odf.odf.chain.head_signature import UNSIGNED
from airflow_odf.odf.repo.history import SchemaHistory
from airflow_odf.odf.repo.lineage import Lineage
from airflow_odf.odf.repo.overview import DatasetOverview, Verification
from airflow_odf.odf.schema.evolution import SchemaChange
from airflow_odf.ui.facts import BlockDetail, BlockEntry, ChainPage, Records, SchemaText, schema_text

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5rem;
       color: #202124; }
h1 { font-size: 1.4rem; margin: 0 0 .3rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
nav { font-size: .9rem; margin-bottom: 1rem; color: #5f6368; }
table { border-collapse: collapse; font-size: .88rem; margin: .4rem 0; }
th, td { border-bottom: 1px solid #dadce0; padding: .3rem .6rem; text-align: left; vertical-align: top; }
th { background: #f1f3f4; } .facts th { background: none; color: #5f6368; font-weight: 500; }
code, pre, .hash { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; }
pre { background: #f8f9fa; padding: .6rem; overflow-x: auto; border: 1px solid #dadce0; }
.error { color: #b3261e; } .note { color: #5f6368; font-size: .9rem; }
.denied { color: #b3261e; font-weight: 600; } .allowed { color: #137333; }
.current { background: #fef7e0; } .graph svg { max-width: 100%; height: auto; }
a { color: #1a73e8; text-decoration: none; } a:hover { text-decoration: underline; }
"""


def _text(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _q(part: str) -> str:
    return quote(part, safe="")


@dataclass(frozen=True)
class Paths:
    """Links inside the view, under `root` (where the app is mounted, e.g. `/odf`)."""

    root: str

    def index(self) -> str:
        return f"{self.root}/"

    def repository(self, conn_id: str) -> str:
        return f"{self.root}/connections/{_q(conn_id)}"

    def dataset(self, conn_id: str, name: str, head: str | None = None) -> str:
        path = f"{self.repository(conn_id)}/datasets/{_q(name)}"
        return f"{path}?head={_q(head)}" if head else path

    def block(self, conn_id: str, name: str, block_hash: str) -> str:
        return f"{self.repository(conn_id)}/datasets/{_q(name)}/blocks/{_q(block_hash)}"

    def schema(self, conn_id: str, name: str) -> str:
        return f"{self.repository(conn_id)}/datasets/{_q(name)}/schema"


def _link(href: str, label: object, title: object = None) -> str:
    tip = f' title="{_text(title)}"' if title is not None else ""
    return f'<a href="{_text(href)}"{tip}>{_text(label)}</a>'


def _short(block_hash: str) -> str:
    return block_hash[-8:]


def _hash_link(href: str, block_hash: str) -> str:
    """A block hash in short form (as the reference shows them), the whole hash as its tooltip."""
    return f'<span class="hash">{_link(href, _short(block_hash), block_hash)}</span>'


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: Iterable[str] = ()) -> str:
    """`rows` are HTML already (escaped by the caller); `cls` gives each row a class (or "")."""
    head = "".join(f"<th>{_text(h)}</th>" for h in header)
    classes = list(cls)
    body = []
    for i, row in enumerate(rows):
        attr = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        body.append(f"<tr{attr}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _facts(rows: Iterable[tuple[str, str]]) -> str:
    """A label/value table; the values are HTML already."""
    body = "".join(f"<tr><th>{_text(label)}</th><td>{value}</td></tr>" for label, value in rows)
    return f'<table class="facts"><tbody>{body}</tbody></table>'


def _page(title: str, crumbs: Sequence[tuple[str, str | None]], body: str) -> str:
    """A whole page; `crumbs` are (label, link or None) from the top."""
    nav = " / ".join(_link(href, label) if href else _text(label) for label, href in crumbs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>{_text(title)} · ODF</title><style>{_STYLE}</style></head>"
        f"<body><nav>{nav}</nav><h1>{_text(title)}</h1>{body}</body></html>"
    )


# what the view needs from a user's role, said where it is missing
READ_CONNECTIONS = (
    "The view reads a repository with its connection's credentials, so it shows only the repositories of "
    "<code>odf_repo</code> connections your role may read (Airflow's permission to read Connections, "
    "e.g. the Op role of the simple auth manager or “can read on Connections” of FAB): ask an "
    "administrator for it."
)


def index_page(
    paths: Paths, connections: Sequence[tuple[str, str]], *, hidden: bool, may_read: bool, may_add: bool
) -> str:
    """The `odf_repo` connections the user may read: (connection id, repository URL, redacted).

    `hidden`: there are others the user may not read; `may_read`: the user may read connections at all;
    `may_add`: the user may create connections. An empty list says which of these is the reason."""
    if connections:
        body = _table(
            ["Connection", "Repository"],
            [[_link(paths.repository(cid), cid), f"<code>{_text(url)}</code>"] for cid, url in connections],
        )
        if hidden:
            other = "Other <code>odf_repo</code> connections are not listed."
            body += f'<p class="note">{other} {READ_CONNECTIONS}</p>'
    elif hidden or not may_read:
        body = (
            f'<p class="error">You may not read any <code>odf_repo</code> connection. {READ_CONNECTIONS}</p>'
        )
    elif may_add:
        body = (
            '<p class="note">No <code>odf_repo</code> connection yet. Add one (Admin → Connections, type '
            "ODF Repository), or open <code>connections/&lt;id&gt;</code> of a connection defined elsewhere "
            "(a secrets backend).</p>"
        )
    else:
        body = (
            '<p class="note">No <code>odf_repo</code> connection yet, and your role may not add one: an '
            "administrator adds it (Admin → Connections, type ODF Repository).</p>"
        )
    return _page("ODF repositories", [("ODF", None)], body)


def _verification(v: Verification | None) -> str:
    if v is None:
        return '<span class="note">—</span>'
    head = f'<span class="hash" title="{_text(v.head)}">{_text(_short(v.head))}</span>'
    if v.signer is None:
        signed = ""
    elif v.signer == UNSIGNED:
        signed = f" · {UNSIGNED}"
    else:
        did = f"did:odf:…{_short(v.signer)}"
        signed = f' · signed by <span class="hash" title="{_text(v.signer)}">{_text(did)}</span>'
    return f"{head} {_text(v.time)} ({_text(v.how)}){signed}"


def _dataset_cells(paths: Paths, conn_id: str, row: DatasetOverview) -> list[str]:
    name = _link(paths.dataset(conn_id, row.name), row.name)
    if row.error is not None:
        return [
            name,
            '<span class="error">BROKEN</span>',
            "",
            "",
            "",
            "",
            f'<span class="error">{_text(row.error)}</span>',
        ]
    head = row.head or ""
    return [
        name,
        _text(row.kind),
        _hash_link(paths.block(conn_id, row.name, head), head),
        _text(row.blocks),
        _text(row.records),
        _text(row.last_update),
        _verification(row.verification),
    ]


def repository_page(
    paths: Paths,
    conn_id: str,
    location: str,
    rows: Sequence[DatasetOverview],
    graph: Lineage,
    svg: str | None,
    graph_error: str | None,
) -> str:
    """The datasets of a repository and their lineage (`svg` from `lineage_picture`, or `graph_error`)."""
    header = ["Dataset", "Kind", "Head", "Blocks", "Records", "Last update", "Last verification"]
    datasets = (
        _table(header, [_dataset_cells(paths, conn_id, r) for r in rows])
        if rows
        else ('<p class="note">No datasets yet.</p>')
    )
    if svg is not None:
        picture = f'<div class="graph">{svg}</div>'
    else:
        names = {node.key: node.name for node in graph.nodes}
        edges = [[_text(names[e.source]), _text(names[e.target])] for e in graph.edges]
        picture = f'<p class="error">{_text(graph_error)}</p>' + _table(["Input", "Derivative"], edges)
    body = (
        f'<p class="note">Connection <code>{_text(conn_id)}</code>: <code>{_text(location)}</code></p>'
        f"<h2>Datasets</h2>{datasets}<h2>Lineage</h2>{picture}"
    )
    return _page(conn_id, [("ODF", paths.index()), (conn_id, None)], body)


def _chain_rows(paths: Paths, conn_id: str, name: str, page: ChainPage, mark: str | None) -> str:
    rows, classes = [], []
    for b in page.blocks:
        prev = _hash_link(paths.block(conn_id, name, b.prev), b.prev) if b.prev else "—"
        rows.append(
            [
                _text(b.sequence_number),
                _hash_link(paths.block(conn_id, name, b.hash), b.hash),
                _text(b.event),
                _text(b.system_time),
                _text(b.summary),
                _text(b.checks or "—"),
                prev,
            ]
        )
        classes.append("current" if b.hash == mark else "")
    header = ["#", "Block", "Event", "System time", "What", "Checks", "Previous block"]
    table = _table(header, rows, classes)
    if page.older:
        table += f"<p>{_link(paths.dataset(conn_id, name, page.older), 'Older blocks →')}</p>"
    return table


def _records(records: Records | None) -> str:
    if records is None:
        return '<p class="note">No records yet.</p>'
    rows = [[_text(cell) for cell in row] for row in records.rows]
    return _table(records.columns, rows)


@dataclass(frozen=True)
class DatasetView:
    """What the dataset page shows: the dataset as of block `as_of` (its head unless asked otherwise)."""

    row: DatasetOverview
    as_of: str
    schema: SchemaText | None
    chain: ChainPage
    records: Records | None


def dataset_page(paths: Paths, conn_id: str, view: DatasetView) -> str:
    row = view.row
    name = row.name
    current = view.as_of == row.head
    facts = [
        ("Dataset id", f"<code>{_text(row.dataset_id)}</code>"),
        ("Kind", _text(row.kind)),
        ("Head", f'<span class="hash">{_link(paths.block(conn_id, name, row.head or ""), row.head)}</span>'),
        ("Blocks", _text(row.blocks)),
        ("Records", _text(row.records)),
        ("Last update", _text(row.last_update)),
        ("Last verification", _verification(row.verification)),
    ]
    as_of = ""
    if not current:
        as_of = (
            f'<p class="current">Showing the dataset as of block <span class="hash">'
            f"{_link(paths.block(conn_id, name, view.as_of), view.as_of)}</span>; its head is now "
            f"{_link(paths.dataset(conn_id, name), _short(row.head or ''), row.head)}.</p>"
        )
    schema = _schema(view.schema) if view.schema is not None else '<p class="note">No schema yet.</p>'
    body = (
        _facts(facts)
        + as_of
        + f"<h2>Latest records</h2>{_records(view.records)}"
        + f"<h2>Schema</h2>{schema}"
        + f"<p>{_link(paths.schema(conn_id, name), 'Schema history and evolution →')}</p>"
        + f"<h2>Metadata chain</h2>{_chain_rows(paths, conn_id, name, view.chain, view.as_of)}"
    )
    crumbs = [("ODF", paths.index()), (conn_id, paths.repository(conn_id)), (name, None)]
    return _page(name, crumbs, body)


def block_page(paths: Paths, conn_id: str, name: str, detail: BlockDetail) -> str:
    b: BlockEntry = detail.entry
    prev = _link(paths.block(conn_id, name, b.prev), b.prev) if b.prev else "— (the Seed)"
    facts = [
        ("Block", f'<span class="hash">{_text(b.hash)}</span>'),
        ("Sequence number", _text(b.sequence_number)),
        ("System time", _text(b.system_time)),
        ("Event", _text(b.event)),
        ("Previous block", f'<span class="hash">{prev}</span>'),
    ]
    body = (
        _facts(facts)
        + f"<p>{_link(paths.dataset(conn_id, name, b.hash), 'The dataset as of this block →')}</p>"
        + f"<h2>Block</h2><pre>{_text(detail.manifest)}</pre>"
    )
    crumbs = [
        ("ODF", paths.index()),
        (conn_id, paths.repository(conn_id)),
        (name, paths.dataset(conn_id, name)),
        (f"block {_short(b.hash)}", None),
    ]
    return _page(f"{name}: block {b.sequence_number}", crumbs, body)


def _schema(text: SchemaText) -> str:
    """The columns as DDL, the whole schema (attributes too) as YAML one click away."""
    yaml = f"<details><summary>As ODF YAML</summary><pre>{_text(text.yaml)}</pre></details>"
    return (f"<pre>{_text(text.ddl)}</pre>" if text.ddl is not None else "") + yaml


def _changes(changes: list[SchemaChange] | None) -> str:
    if changes is None:
        return '<p class="note">The first schema.</p>'
    if not changes:
        return '<p class="note">No column changed (the same schema recorded again).</p>'
    rows = [
        [
            _text(c.column),
            _text(c.old or "—"),
            _text(c.new or "—"),
            _text(c.rule),
            '<span class="allowed">allowed</span>' if c.allowed else '<span class="denied">denied</span>',
        ]
        for c in changes
    ]
    return _table(["Column", "Before", "After", "Rule", "Evolution"], rows)


def schema_page(paths: Paths, conn_id: str, name: str, history: SchemaHistory) -> str:
    parts = []
    for v in history.versions:
        b = v.recorded
        block_hash = str(b.block_hash)
        legacy = " (a legacy raw Arrow schema, shown in ODF form)" if v.legacy else ""
        parts.append(
            f"<h2>Block {_text(b.sequence_number)} · {_text(b.system_time)}</h2>"
            f"<p>{_link(paths.block(conn_id, name, block_hash), block_hash)}{_text(legacy)}</p>"
            f"{_changes(v.changes)}{_schema(schema_text(v.schema))}"
        )
    if not history.versions:
        parts.append('<p class="note">No schema recorded yet.</p>')
    if not history.complete:
        parts.append('<p class="note">Older blocks were not searched (the history is long).</p>')
    crumbs = [
        ("ODF", paths.index()),
        (conn_id, paths.repository(conn_id)),
        (name, paths.dataset(conn_id, name)),
        ("schema", None),
    ]
    return _page(f"{name}: schema history", crumbs, "".join(parts))


def error_page(paths: Paths, status: int, title: str, message: str) -> str:
    body = f'<p class="error">{_text(message)}</p><p>{_link(paths.index(), "ODF repositories")}</p>'
    return _page(f"{status} {title}", [("ODF", paths.index())], body)


def forbidden_connection_page(paths: Paths, conn_id: str) -> str:
    """A 403 of a page under a connection: what the user lacks, not a bare "Forbidden"."""
    body = (
        f'<p class="error">You may not read the connection <code>{_text(conn_id)}</code>. '
        f"{READ_CONNECTIONS}</p><p>{_link(paths.index(), 'ODF repositories')}</p>"
    )
    return _page("403 Forbidden", [("ODF", paths.index())], body)
