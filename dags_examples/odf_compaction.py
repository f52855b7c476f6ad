"""Example maintenance DAG: weekly hard compaction of the trades root, then its derivative re-derived.

A root that ingests often (one FilesGlob file per block, a schedule every few minutes) collects many
small slices; `compact_trades` merges consecutive ones into slices of at most 10,000 records (300 MB),
checking that every record is unchanged before it commits (`verify=True`). Compaction rebuilds the
chain, so every block hash changes and `com.example.trades.daily`, which pinned the blocks it processed,
no longer finds them: `rederive_daily` re-processes its input from scratch (`recover_diverged=True`)
and `verify_daily` replays it to prove it reproducible. The old slices and blocks are garbage that
`odf gc` removes.

`trades_need_compaction` first asks the chain (a walk of its metadata, no Spark) whether compacting
would change anything: while the repository or the dataset does not exist yet — the DAG enabled before
example DAG 1 ever ran — or its slices are already as few as the limits allow, it logs why and skips
the rest of the run (a short circuit): no engine, no rewritten chain, no re-derivation for nothing.

Production settings: one run at a time (`max_active_runs=1`): two compactions of one chain would only
make the second fail. `retries=2`, minutes apart: a compaction that loses the race for the head against
an ingest changes nothing and fails, and its retry starts over from the new head. The datasets are
those of example DAG 1 (`odf_trades_pipeline`), which creates them.

Connections: `odf_default` (an `odf_repo` connection) and, with the default engine, `spark_default`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from airflow.sdk import dag, task

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.compaction.plan import CompactionOptions, plan_compaction
from airflow_odf.odf.repo.repository import RepositoryError
from airflow_odf.operators.compact import OdfCompactOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.operators.verify import OdfVerifyOperator


@task.short_circuit
def trades_need_compaction(max_slice_records: int, max_slice_size: int) -> bool:
    """Whether compacting `com.example.trades` with these limits would change its chain; False (the
    rest of the run skipped) while there is no repository or dataset yet, or nothing to merge."""
    log = logging.getLogger(__name__)
    try:
        dataset = OdfRepoHook().open_repository().dataset("com.example.trades")
    except RepositoryError as e:  # not created yet (also: the repository itself)
        log.info("nothing to compact: %s", e)
        return False
    options = CompactionOptions(max_slice_size=max_slice_size, max_slice_records=max_slice_records)
    plan = plan_compaction(dataset, "com.example.trades", options)
    if not plan.changes_anything:
        log.info("nothing to compact: %d block(s), %d slice(s)", plan.old_blocks, plan.old_slices)
    return plan.changes_anything


@dag(
    schedule="@weekly",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    tags=["odf", "example", "maintenance"],
)
def odf_compaction() -> None:
    # [START howto_operator_odf_compact]
    compact = OdfCompactOperator(
        task_id="compact_trades",
        dataset="com.example.trades",
        max_slice_records=10_000,
        max_slice_size="300MB",
        verify=True,
    )
    rederive = OdfTransformOperator(
        task_id="rederive_daily", dataset="com.example.trades.daily", recover_diverged=True
    )
    verify = OdfVerifyOperator(task_id="verify_daily", dataset="com.example.trades.daily")
    compact >> rederive >> verify
    # [END howto_operator_odf_compact]
    trades_need_compaction(compact.max_slice_records, compact.max_slice_size) >> compact


maintenance = odf_compaction()
