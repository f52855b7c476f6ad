"""The lineage graph of a repository: its datasets, which derivative reads which input, and the remote
URL each pulled dataset came from. `lineage_picture` shows it as text, DOT, SVG and HTML.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from airflow_odf.odf.repo.overview import DatasetOverview

REMOTE = "Remote"
"""The kind of a node that is a remote dataset's URL (where a dataset of the repository was pulled from)."""
INPUT = "input"
PULLED_FROM = "pulled from"


@dataclass(frozen=True)
class LineageNode:
    key: str  # the dataset id; for a remote, its URL
    name: str
    kind: str | None  # Root, Derivative, Remote, "?" (unreadable); None: an input not in this repository
    head: str | None = None
    records: int | None = None
    last_update: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class LineageEdge:
    source: str  # the key of an input (or of the remote a dataset was pulled from)
    target: str
    relation: str = INPUT  # INPUT or PULLED_FROM


@dataclass(frozen=True)
class Lineage:
    nodes: list[LineageNode]
    edges: list[LineageEdge]

    def around(self, keys: Collection[str]) -> Lineage:
        """Only the nodes of `keys`, everything upstream of them and everything downstream."""
        kept = set(keys) | self._reachable(keys, forward=True) | self._reachable(keys, forward=False)
        return Lineage(
            [n for n in self.nodes if n.key in kept],
            [e for e in self.edges if e.source in kept and e.target in kept],
        )

    def _reachable(self, keys: Collection[str], *, forward: bool) -> set[str]:
        step: dict[str, list[str]] = {}
        for e in self.edges:
            a, b = (e.source, e.target) if forward else (e.target, e.source)
            step.setdefault(a, []).append(b)
        seen: set[str] = set()
        pending = list(keys)
        while pending:
            for nxt in step.get(pending.pop(), []):
                if nxt not in seen:
                    seen.add(nxt)
                    pending.append(nxt)
        return seen


def lineage(datasets: Sequence[DatasetOverview]) -> Lineage:
    """Datasets as nodes, each derivative's inputs and each pulled dataset's origin as edges; an input
    that is not in the repository is a node of its own, named by the alias the derivative gives it."""
    nodes: dict[str, LineageNode] = {}
    for d in datasets:
        if d.dataset_id:
            nodes[d.dataset_id] = LineageNode(
                d.dataset_id, d.name, d.kind or "?", d.head, d.records, d.last_update, d.error
            )
    edges = []
    for d in datasets:
        if not d.dataset_id:
            continue
        for input_id, alias in d.inputs:
            nodes.setdefault(input_id, LineageNode(input_id, alias, None))
            edges.append(LineageEdge(input_id, d.dataset_id))
        if d.origin:
            nodes.setdefault(d.origin, LineageNode(d.origin, d.origin, REMOTE))
            edges.append(LineageEdge(d.origin, d.dataset_id, PULLED_FROM))
    return Lineage(list(nodes.values()), edges)
