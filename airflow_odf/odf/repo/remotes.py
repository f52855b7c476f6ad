"""The remotes a dataset remembers: where it was pulled from and pushed to (`info/remotes`).

Kept beside the repository (not in sharing/) because more than sharing reads them: a plain `odf pull
NAME` / `odf push NAME` repeats the last sync, and the lineage shows where a pulled dataset came from.
"""

from __future__ import annotations

import json

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.errors import OdfError

REMOTES_KEY = "info/remotes"
PULL = "pull"
PUSH = "push"


class RemotesError(OdfError):
    """A dataset's `info/remotes` is not what it should be."""


def remotes(dataset: Dataset) -> dict[str, list[str]]:
    """`{"pull": [urls], "push": [urls]}` remembered for a dataset, most recent last."""
    raw = dataset.store.get_or_none(REMOTES_KEY)
    if not raw:
        return {PULL: [], PUSH: []}
    try:
        plain = json.loads(raw)
        urls = {d: list(plain.get(d, [])) for d in (PULL, PUSH)}
        valid = all(isinstance(u, str) for direction in urls.values() for u in direction)
    except (ValueError, AttributeError, TypeError):
        valid = False
    if not valid:
        raise RemotesError(f"{REMOTES_KEY} of {dataset.store!r} is not a JSON object of URL lists")
    return urls


def remember_remote(dataset: Dataset, direction: str, url: str) -> None:
    current = remotes(dataset)
    urls = [u for u in current[direction] if u != url]
    current[direction] = [*urls, url]
    dataset.store.put(REMOTES_KEY, json.dumps(current, indent=2).encode())
