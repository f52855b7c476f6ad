"""Runs a compaction: the engine merges each group's slices into one file, both hashes of every new file
are taken (here from the file, or by the engine where it wrote into the bucket), and the chain is rebuilt
on the Seed in one commit: new files first, then all blocks in one batch, then the head by
compare-and-swap from the head the compaction planned from. A writer that moved the head meanwhile
wins: the compaction then fails and changes nothing. The old slices and blocks stay until `odf gc`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.dataset import CommitResult, Dataset, StagedObject
from airflow_odf.odf.compaction.plan import CompactionOptions, CompactionPlan, plan_compaction
from airflow_odf.odf.compaction.records import check_same_records
from airflow_odf.odf.engine_client.compact_contract import CompactGroup, CompactRequest, CompactResponse
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.operation import (
    IngestError,
    Staging,
    engine_out_dir,
    local_object,
    operation_dir,
    stage_slice,
)
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.store import ConflictError
from airflow_odf.utils.engine_json import Vocab

_log = logging.getLogger(__name__)


class CompactionConflictError(ConflictError):
    """Another writer moved the head while the compaction ran: nothing of the compaction was committed."""


@dataclass
class CompactionResult:
    """What a compaction did; `as_dict` is the XCom / `--format json` form: the keys every ODF task
    reports (`new_blocks`: the hashes of the rebuilt chain's blocks after the Seed) and the counts of
    blocks and slices before and after."""

    dataset: str
    dataset_id: str
    prev_head: str
    new_head: str
    blocks_before: int
    slices_before: int
    blocks_after: int
    slices_after: int
    merged_groups: int = 0
    keep_metadata_only: bool = False
    verified: bool = False
    new_blocks: list[str] = field(default_factory=list)

    @property
    def up_to_date(self) -> bool:
        return not self.new_blocks

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "up_to_date": self.up_to_date}


def run_compaction(
    repo: Repository,
    name: str,
    runner: EngineRunner,
    options: CompactionOptions,
    *,
    system_time: Timestamp | None = None,
    log: Callable[[str], None] = _log.info,
) -> CompactionResult:
    """Compacts dataset `name` of `repo` (see the module); a dataset already compact is left as it is."""
    dataset = repo.dataset(name)
    plan = plan_compaction(dataset, name, options)
    state = dataset.state()
    head = str(plan.head)
    result = CompactionResult(
        dataset=name,
        dataset_id=str(state.dataset_id),
        prev_head=head,
        new_head=head,
        blocks_before=plan.old_blocks,
        slices_before=plan.old_slices,
        blocks_after=plan.old_blocks,
        slices_after=plan.old_slices,
        keep_metadata_only=options.keep_metadata_only,
    )
    if not plan.changes_anything:
        log(f"{name}: nothing to compact ({plan.old_blocks} block(s), {plan.old_slices} slice(s))")
        return result
    log(
        f"{name}: {plan.old_blocks} block(s) with {plan.old_slices} slice(s) become "
        f"{plan.new_blocks} block(s) with {plan.new_slices} slice(s)"
    )
    with operation_dir(repo.work_dir) as op_dir:
        staging = Staging.of(dataset, op_dir)
        try:
            merged, objects = _merge(dataset, name, plan, runner, op_dir, staging, Vocab.of(state.vocab))
            if options.verify:
                for index, group in enumerate(plan.to_merge):
                    check_same_records(dataset, name, group.slices, merged[index], op_dir / "verify")
                result.verified = True
            commit = _commit(dataset, name, plan, merged, objects, system_time)
        finally:
            if staging is not None:
                staging.clear(dataset)
    result.new_head = str(commit.new_head)
    result.blocks_after = plan.new_blocks
    result.slices_after = plan.new_slices
    result.merged_groups = len(plan.to_merge)
    result.new_blocks = [str(h) for h in commit.new_blocks]
    log(f"{name}: compacted, head {result.new_head}" + (" (records verified)" if result.verified else ""))
    return result


def _merge(
    dataset: Dataset,
    name: str,
    plan: CompactionPlan,
    runner: EngineRunner,
    op_dir: Path,
    staging: Staging | None,
    vocab: Vocab,
) -> tuple[dict[int, model.DataSlice], list[StagedObject]]:
    """The new slice of each group to merge (by its index in `plan.to_merge`) and the objects to store."""
    groups = plan.to_merge
    if not groups:
        return {}, []
    request = CompactRequest(
        operation_id=op_dir.name,
        dataset_id=str(plan.seed_state.dataset_id),
        dataset_alias=name,
        groups=[
            CompactGroup(
                data_paths=[local_object(dataset, f"data/{s.physical_hash}", op_dir) for s in group.slices],
                offset_start=group.slices[0].offset_interval.start,
                offset_end=group.slices[-1].offset_interval.end,
                schema_epoch=group.schema_epoch,
            )
            for group in groups
        ],
        out_dir=engine_out_dir(staging, op_dir),
        vocab=vocab,
    )
    response = CompactResponse.from_json(runner.run(request.to_json(), op_dir))
    if response.error is not None:
        raise IngestError(response.error.kind, f"{name}: {response.error.message}")
    if len(response.slices) != len(groups):
        raise IngestError(
            "engine", f"{name}: {len(groups)} group(s) to merge, the engine wrote {len(response.slices)}"
        )
    merged: dict[int, model.DataSlice] = {}
    objects: list[StagedObject] = []
    flush = dataset.on_local_disk
    for index, (spec, written) in enumerate(zip(request.groups, response.slices, strict=True)):
        if (written.offset_start, written.offset_end) != (spec.offset_start, spec.offset_end):
            raise IngestError(
                "engine",
                f"{name}: the merge of offsets {spec.offset_start}..{spec.offset_end} wrote "
                f"{written.offset_start}..{written.offset_end}",
            )
        merged[index], staged = stage_slice(written, flush=flush, staging=staging)
        objects.append(staged)
    return merged, objects


def _commit(
    dataset: Dataset,
    name: str,
    plan: CompactionPlan,
    merged: dict[int, model.DataSlice],
    objects: list[StagedObject],
    system_time: Timestamp | None,
) -> CommitResult:
    """The rebuilt chain on the Seed, in one commit guarded by the planned head."""
    try:
        return dataset.commit(
            plan.events(merged),
            system_time=system_time,
            expected_head=plan.head,
            objects=objects,
            onto=plan.seed_hash,
            onto_state=plan.seed_state,
        )
    except ConflictError as e:
        raise CompactionConflictError(
            f"{name}: another writer committed while the compaction ran ({e}); the compaction changed "
            "nothing and its new files are left for `odf gc`: run it again"
        ) from None
