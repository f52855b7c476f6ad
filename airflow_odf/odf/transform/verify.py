"""Reproducibility verification of a derivative: each ExecuteTransform is run again and compared.

INGEST-TRANSFORM-SEMANTICS §2.6: each recorded batch is rebuilt from its block — the input intervals,
the SetTransform and vocabulary then in effect, the block's system time, previous offset and checkpoint
— and run on the engine in a scratch directory; nothing is committed. The replay must give the same
offsets, logical hash (Parquet bytes may differ), watermark, checkpoint presence and schema. Every
mismatch is reported with the block it concerns, not just the first. An incremental verification
(`chain/verification.py`) replays only the transforms after the last verified head.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.engine_client.runner import EngineRunner
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.sql_policy import event_sql_refusal
from airflow_odf.odf.operation import operation_dir
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.transform.execute import execute_batch
from airflow_odf.odf.transform.plan import InputSchemas, replay_batch

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReproducibilityProblem:
    """One recorded ExecuteTransform whose replay differs (`field`: what differs)."""

    block_hash: Multihash
    sequence_number: int
    field: str
    recorded: str
    replayed: str

    def __str__(self) -> str:
        return (
            f"block {self.sequence_number} ({self.block_hash}): {self.field} is not reproducible: "
            f"recorded {self.recorded}, replay gives {self.replayed}"
        )


class NotReplayable(ReproducibilityProblem):
    """An ExecuteTransform that is not replayed, as its SQL is refused (`recorded`: why)."""

    def __str__(self) -> str:
        return f"block {self.sequence_number} ({self.block_hash}): not replayable: {self.recorded}"


def _show(value: Any) -> str:
    return "none" if value is None else str(value)


def _compare(
    h: Multihash, seq: int, recorded: model.ExecuteTransform, replayed: model.ExecuteTransform
) -> list[ReproducibilityProblem]:
    old, new = recorded.new_data, replayed.new_data
    pairs = [
        ("offset interval", old and old.offset_interval, new and new.offset_interval),
        ("logical hash", old and old.logical_hash, new and new.logical_hash),
        ("watermark", recorded.new_watermark, replayed.new_watermark),
        ("checkpoint presence", recorded.new_checkpoint is not None, replayed.new_checkpoint is not None),
    ]
    return [ReproducibilityProblem(h, seq, name, _show(a), _show(b)) for name, a, b in pairs if a != b]


def verify_reproducibility(
    repo: Repository,
    name: str,
    runner: EngineRunner,
    work_dir: Path,
    *,
    log: Callable[[str], None] = _log.info,
    since: ChainState | None = None,
    blocks: Sequence[tuple[Multihash, model.MetadataBlock]] | None = None,
) -> list[ReproducibilityProblem]:
    """Replays the ExecuteTransforms of the derivative `name`; an empty list means reproducible.

    By default every one from the Seed; with `blocks` (oldest first) only those among them, which
    follow the state `since` (an incremental verification passes the blocks it checked). Root datasets
    have nothing to replay (their data comes from outside) and give an empty list.
    """
    if blocks is None:
        blocks = list(reversed(list(repo.dataset(name).iter_blocks())))
    start = since if since is not None else ChainState()
    refused = _not_replayable(start, blocks)
    if refused:
        return refused
    schemas = InputSchemas(repo)
    state = start
    problems: list[ReproducibilityProblem] = []
    for h, block in blocks:
        event = block.event
        if isinstance(event, model.ExecuteTransform):
            problems += _replay(repo, state, name, h, block, event, runner, work_dir, schemas)
            log(f"{name}: block {block.sequence_number} replayed")
        state = apply_block(state, block, h)
    return problems


def _not_replayable(
    state: ChainState, blocks: Sequence[tuple[Multihash, model.MetadataBlock]]
) -> list[ReproducibilityProblem]:
    """The first ExecuteTransform whose SetTransform the SQL policy refuses, before anything runs: a
    peer's chain is replayed only when all of its SQL is a query over its inputs."""
    for h, block in blocks:
        if isinstance(block.event, model.ExecuteTransform) and state.transform is not None:
            refusal = event_sql_refusal(state.transform)
            if refusal is not None:
                return [NotReplayable(h, block.sequence_number, "sql policy", refusal, "nothing executed")]
        state = apply_block(state, block, h)
    return []


def _replay(
    repo: Repository,
    state: ChainState,
    name: str,
    h: Multihash,
    block: model.MetadataBlock,
    event: model.ExecuteTransform,
    runner: EngineRunner,
    work_dir: Path,
    schemas: InputSchemas,
) -> list[ReproducibilityProblem]:
    def problem(field: str, recorded: str, replayed: str) -> list[ReproducibilityProblem]:
        return [ReproducibilityProblem(h, block.sequence_number, field, recorded, replayed)]

    try:
        batch = replay_batch(repo, state, event, schemas)
        with operation_dir(work_dir) as op_dir:
            output = execute_batch(repo, state, name, batch, runner, op_dir, block.system_time)
    except OdfError as e:
        return problem("replay", "a successful run", f"an error: {e}")
    if output.events[:-1]:  # a SetDataSchema: the block came before any schema was recorded
        return problem("schema", "none before the data", "the output's schema")
    return _compare(h, block.sequence_number, event, output.execute_transform)
