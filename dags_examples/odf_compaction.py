"""Example maintenance DAG: weekly hard compaction of the trades root, then its derivative re-derived.

A root that ingests often (one FilesGlob file per block, a schedule every few minutes) collects many
small slices; `compact_trades` merges consecutive ones into slices of at most 10,000 records (300 MB),
checking that every record is unchanged before it commits (`verify=True`). Compaction rebuilds the
chain, so every block hash changes and `com.example.trades.daily`, which pinned the blocks it processed,
no longer finds them: `rederive_daily` re-processes its input from scratch (`recover_diverged=True`)
and `verify_daily` replays it to prove it reproducible. The old slices and blocks are garbage that
`odf gc` removes.

Production settings: one run at a time (`max_active_runs=1`): two compactions of one chain would only
make the second fail. `retries=2`, minutes apart: a compaction that loses the race for the head against
an ingest changes nothing and fails, and its retry starts over from the new head. The datasets are
those of example DAG 1 (`odf_trades_pipeline`), which creates them.

Connections: `odf_default` (an `odf_repo` connection) and, with the default engine, `spark_default`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag

from airflow_odf.operators.compact import OdfCompactOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.operators.verify import OdfVerifyOperator


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


maintenance = odf_compaction()
