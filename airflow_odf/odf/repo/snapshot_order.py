"""The order in which DatasetSnapshot manifests are applied: inputs before the derivatives that read them."""

from __future__ import annotations

from collections.abc import Iterator

from airflow_odf.odf.format import model


def _inputs(s: model.DatasetSnapshot, by_name: dict[str, model.DatasetSnapshot]) -> Iterator[str]:
    """The names of the given snapshots that `s` reads."""
    for event in s.metadata:
        if isinstance(event, model.SetTransform):
            for inp in event.inputs:
                key = inp.dataset_ref.lower()
                if key in by_name:
                    yield key


def dependency_order(snapshots: list[model.DatasetSnapshot]) -> list[model.DatasetSnapshot]:
    """One snapshot per dataset name — the last one given wins — with derivatives after their inputs.

    A depth-first walk with its own stack: linear in snapshots and inputs, and a chain of ten thousand
    derivatives neither recurses ten thousand deep nor copies its path at every step. A cycle is cut
    where it closes (the repository then names the missing input)."""
    by_name = {s.name.lower(): s for s in snapshots}
    ordered: list[model.DatasetSnapshot] = []
    done: set[str] = set()
    on_path: set[str] = set()
    for start in by_name:
        if start in done:
            continue
        stack = [(start, _inputs(by_name[start], by_name))]
        on_path.add(start)
        while stack:
            key, pending = stack[-1]
            dep = next((d for d in pending if d not in done and d not in on_path), None)
            if dep is not None:
                on_path.add(dep)
                stack.append((dep, _inputs(by_name[dep], by_name)))
                continue
            stack.pop()
            on_path.discard(key)
            done.add(key)
            ordered.append(by_name[key])
    return ordered
