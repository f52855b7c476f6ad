"""Pulling several datasets at once: which ones, in which order, and running them level by level.

As the reference's `pull --recursive`: every dataset gets a depth — a root 0, a derivative one more than
its deepest input — and the plan runs depth by depth. Levels run one after the other, so a derivative
only starts once everything it reads is up to date; the datasets of one level do not depend on each
other and run concurrently. A failed dataset skips everything downstream of it in the plan, while
independent datasets still run, and the outcome names every dataset. Planning reads metadata only;
what "pulling" a dataset means (ingest, transform) is the caller's callable: this module runs no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.repo.repository import Repository

PullAction = Literal["ingest", "transform", "none"]
PullStatus = Literal["updated", "up-to-date", "skipped", "failed"]
NO_POLLING_SOURCE = "no polling source: nothing to pull (push data with `odf ingest`)"


class PullPlanError(OdfError):
    """The pull cannot be planned: a dependency cycle, or a bad option."""


class PullFailedError(OdfError):
    """Some datasets of a pull failed; one line per failed dataset, each naming it."""

    def __init__(self, outcomes: Sequence[PullOutcome]) -> None:
        self.outcomes = list(outcomes)
        super().__init__("\n".join(o.line() for o in self.outcomes))


@dataclass(frozen=True)
class PlannedPull:
    """One dataset of the plan. `inputs` are the derivative's inputs present in the repository (all of
    them, planned or not); `action` says what pulling it does: a root with a polling source ingests,
    a derivative transforms, a root without a polling source (push only) has nothing to pull.
    """

    name: str
    dataset_id: DatasetId
    kind: model.DatasetKind | None
    head: Multihash | None
    depth: int
    action: PullAction
    inputs: tuple[DatasetId, ...] = ()

    @property
    def note(self) -> str | None:
        """Why pulling does nothing, when it does nothing by construction."""
        return NO_POLLING_SOURCE if self.action == "none" else None


@dataclass(frozen=True)
class PullPlan:
    """The datasets to pull, grouped into levels of equal depth, shallowest first."""

    levels: tuple[tuple[PlannedPull, ...], ...]

    @property
    def datasets(self) -> list[PlannedPull]:
        """Every planned dataset in execution order (by depth, then by name)."""
        return [p for level in self.levels for p in level]


@dataclass(frozen=True)
class _Node:
    name: str
    kind: model.DatasetKind | None
    head: Multihash | None
    action: PullAction
    inputs: tuple[DatasetId, ...]


def _load(repo: Repository, did: DatasetId) -> _Node:
    dataset = repo.dataset_by_id(did)
    state = dataset.state()
    inputs: list[DatasetId] = []
    if state.transform is not None and state.kind is model.DatasetKind.DERIVATIVE:
        for inp in state.transform.inputs:
            try:
                ref = DatasetId.parse(inp.dataset_ref)
            except OdfError:
                continue  # not a DID: the transform itself reports it
            # An input missing from the repository is left to the transform, which names it: it fails
            # that one dataset instead of the whole plan.
            if ref not in inputs and repo.dataset_by_id(ref).head() is not None:
                inputs.append(ref)
    if state.kind is model.DatasetKind.DERIVATIVE:
        action: PullAction = "transform"
    elif state.polling_source is not None:
        action = "ingest"
    else:
        action = "none"
    return _Node(repo.name_of(dataset), state.kind, state.head, action, tuple(inputs))


def plan_pull(repo: Repository, names: Sequence[str] | None = None, *, recursive: bool = False) -> PullPlan:
    """Plans pulling `names` (names or `did:odf:` references; None = every dataset of the repository),
    and with `recursive` everything upstream of them. Unknown names fail before anything runs.

    Depths are the datasets' depths in the whole upstream graph, also when not recursive, so that
    `pull B A` of a derivative B over A still runs A first.
    """
    if names is None:
        targets = [did for _, did in repo.list()]
    else:
        targets = list(dict.fromkeys(repo.resolve(n) for n in names))
    nodes: dict[DatasetId, _Node] = {}
    depths: dict[DatasetId, int] = {}

    def visit(did: DatasetId, path: tuple[DatasetId, ...]) -> int:
        if did in depths:
            return depths[did]
        if did in path:
            cycle = [*path[path.index(did) :], did]
            raise PullPlanError("dependency cycle: " + " -> ".join(nodes[d].name for d in cycle))
        node = nodes[did] = nodes.get(did) or _load(repo, did)
        depth = 1 + max((visit(i, (*path, did)) for i in node.inputs), default=-1)
        depths[did] = depth
        return depth

    for did in targets:
        visit(did, ())
    selected = set(depths) if recursive else set(targets)
    by_depth: dict[int, list[PlannedPull]] = {}
    for did in selected:
        n = nodes[did]
        planned = PlannedPull(n.name, did, n.kind, n.head, depths[did], n.action, n.inputs)
        by_depth.setdefault(depths[did], []).append(planned)
    levels = tuple(
        tuple(sorted(by_depth[d], key=lambda p: (p.name.lower(), str(p.dataset_id))))
        for d in sorted(by_depth)
    )
    return PullPlan(levels)


class Pulled(Protocol):
    """What pulling one dataset returns (e.g. `IngestResult`)."""

    @property
    def up_to_date(self) -> bool: ...


R = TypeVar("R", bound=Pulled)


@dataclass(frozen=True)
class PullOutcome(Generic[R]):
    """What happened to one planned dataset: its result, or the error, or why it was skipped."""

    planned: PlannedPull
    status: PullStatus
    result: R | None = None
    error: Exception | None = None
    message: str = ""

    @property
    def name(self) -> str:
        return self.planned.name

    def line(self) -> str:
        """`name: message`, once: many core errors begin with the dataset's name already."""
        text = self.message or self.status
        if text.startswith((f"{self.name}:", f"{self.name} ")):
            return text
        return f"{self.name}: {text}"


def _error_message(e: Exception) -> str:
    return str(e) if isinstance(e, OdfError) else f"{type(e).__name__}: {e}"


def run_pull_plan(
    plan: PullPlan,
    pull_one: Callable[[PlannedPull], R],
    *,
    max_workers: int = 2,
) -> list[PullOutcome[R]]:
    """Runs `pull_one` for every planned dataset, level by level, the datasets of a level concurrently
    on at most `max_workers` threads. Returns one outcome per dataset in plan order.

    Any exception of `pull_one` fails that dataset only; the datasets reading it, directly or not, are
    skipped (their message names the failed dataset). `pull_one` is called for "none" datasets too, so
    the caller decides what their result looks like.
    """
    if max_workers < 1:
        raise PullPlanError(f"max_workers must be at least 1, got {max_workers}")
    failed_upstream: dict[DatasetId, list[str]] = {}  # dataset -> names of the failed datasets above it
    outcomes: list[PullOutcome[R]] = []
    with ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="odf-pull") as pool:
        for level in plan.levels:
            futures: dict[DatasetId, Future[R]] = {}
            for planned in level:
                blockers = sorted({b for i in planned.inputs for b in failed_upstream.get(i, [])})
                if blockers:
                    failed_upstream[planned.dataset_id] = blockers
                else:
                    futures[planned.dataset_id] = pool.submit(pull_one, planned)
            for planned in level:
                future = futures.get(planned.dataset_id)
                if future is None:
                    blockers = failed_upstream[planned.dataset_id]
                    which = ", ".join(repr(b) for b in blockers)
                    upstream = "upstream dataset" + ("s " if len(blockers) > 1 else " ")
                    outcomes.append(
                        PullOutcome(planned, "skipped", message=f"skipped: {upstream}{which} failed")
                    )
                    continue
                try:
                    result = future.result()
                except Exception as e:
                    failed_upstream[planned.dataset_id] = [planned.name]
                    outcomes.append(PullOutcome(planned, "failed", error=e, message=_error_message(e)))
                    continue
                status: PullStatus = "up-to-date" if result.up_to_date else "updated"
                outcomes.append(PullOutcome(planned, status, result=result, message=planned.note or ""))
    return outcomes
