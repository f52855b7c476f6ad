"""Writers that lose the race for the head re-plan from the new head and try again.

A commit moves `refs/head` by compare-and-swap: of two writers that planned from the same head, one
moves it and the other gets ConflictError with nothing of its commit in the chain. Overlapping runs of
a pipeline are ordinary, so an operation does not fail on that: it reads the head the other writer
made, plans again from it — which often finds that the other writer already did the work ("up to
date") — and tries again, a bounded number of times, after a random pause that keeps the losers from
colliding again in step. `Reconciliation` records what happened, for the task's report.

A writer that finds the head moved before its engine work (`claims.HeadMoved`: it re-read the head, or
waited for another writer's commit) plans again at once: that costs no engine work, is not limited to
`MAX_ATTEMPTS` (each one means another writer made progress) and needs no pause.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from airflow_odf.odf.chain.claims import HeadMoved
from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.storage.store import ConflictError

MAX_ATTEMPTS = 5
FIRST_PAUSE_SECONDS = 0.1  # the pause after the first lost race is random in [0, this]; it doubles
MAX_PAUSE_SECONDS = 2.0

_log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Reconciliation:
    """The races an operation lost: the heads other writers had moved the dataset to, oldest first."""

    heads_found: list[str | None] = field(default_factory=list)

    @property
    def lost_races(self) -> int:
        return len(self.heads_found)

    def as_dict(self) -> dict[str, Any]:
        """The XCom / `--format json` form (`reconciled`)."""
        return {"lost_races": self.lost_races, "heads_found": list(self.heads_found)}


def reconciling(
    attempt: Callable[[], T],
    *,
    what: str,
    head: Callable[[], Multihash | None],
    record: Reconciliation,
    log: Callable[[str], None] = _log.info,
    max_attempts: int = MAX_ATTEMPTS,
) -> T:
    """`attempt()`, called again each time it loses the compare-and-swap (at most `max_attempts`
    calls) or finds the head moved before its engine work (`HeadMoved`); `head()` reads the head the
    other writer made (and lets the next attempt plan from it). After the last lost race the
    ConflictError says how many there were."""
    number = 1
    while True:
        try:
            return attempt()
        except HeadMoved as e:  # found before the engine work: nothing was lost, nothing to space out
            found = head()
            record.heads_found.append(None if found is None else str(found))
            log(f"{e}; planning again from it")
        except ConflictError as e:
            found = head()
            record.heads_found.append(None if found is None else str(found))
            if number >= max_attempts:
                raise ConflictError(
                    f"{what}: lost the race for the head to other writers {number} times; last: {e}"
                ) from None
            number += 1
            log(
                f"{what}: another writer moved the head to {found} first; "
                f"planning again from it (attempt {number} of {max_attempts})"
            )
            time.sleep(random.uniform(0, min(MAX_PAUSE_SECONDS, FIRST_PAUSE_SECONDS * 2 ** (number - 2))))


def reconciling_from(
    dataset: Dataset,
    state: ChainState,
    attempt: Callable[[ChainState], T],
    *,
    what: str,
    record: Reconciliation,
    log: Callable[[str], None] = _log.info,
) -> T:
    """`attempt(state)`: plans from `state` and commits onto its head; after a lost race, called again
    with the dataset's state as the winner left it."""
    current = state

    def moved() -> Multihash | None:
        nonlocal current
        current = dataset.state()
        return current.head

    return reconciling(lambda: attempt(current), what=what, head=moved, record=record, log=log)
