"""The order in which DatasetSnapshot manifests are applied: inputs before the derivatives that read them."""

from __future__ import annotations

from airflow_odf.odf.format import model


def dependency_order(snapshots: list[model.DatasetSnapshot]) -> list[model.DatasetSnapshot]:
    """One snapshot per dataset name — the last one given wins — with derivatives after their inputs."""
    by_name = {s.name.lower(): s for s in snapshots}
    ordered: list[model.DatasetSnapshot] = []
    done: set[str] = set()

    def visit(s: model.DatasetSnapshot, path: frozenset[str]) -> None:
        key = s.name.lower()
        if key in done or key in path:
            return
        for event in s.metadata:
            if isinstance(event, model.SetTransform):
                for inp in event.inputs:
                    dep = by_name.get(inp.dataset_ref.lower())
                    if dep is not None:
                        visit(dep, path | {key})
        done.add(key)
        ordered.append(s)

    for s in by_name.values():
        visit(s, frozenset())
    return ordered
