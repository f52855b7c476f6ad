"""Example DAG 7: reporting with `OdfSqlOperator` — Spark SQL over the repository's datasets, read-only.

`apply_manifests` and `ingest_trades` bring `com.example.trades` up to date (as example DAG 1 does);
`symbol_summary` returns a small aggregate as XCom (rows as JSON objects), the trades table pinned to
the head `ingest_trades` returned — so it reports exactly what its upstream committed, even when
another ingest moved the dataset on since; `trades_report` writes the whole table as a CSV file into
the folder of the `report_dir` param, one file per run date — the logical date, or for a run started
from the UI or the REST API (which has none) the day it was started (a retry writes it again).

Production settings: the queries write nothing to the repository, so runs may overlap freely; the
ingest reconciles with overlapping writers (see example DAG 1). `retries=2` for what may pass (a
Spark job that crashed); a bad query fails at once, no retry. Started by hand (`schedule=None`).

Connections: `odf_default` (an `odf_repo` connection) and, with the default engine, `spark_default`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import dag

from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.sql import OdfSqlOperator

EXAMPLES = Path(__file__).resolve().parent


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=3,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params={"report_dir": "/tmp/odf-reports"},
    tags=["odf", "example"],
)
def odf_sql_report() -> None:
    apply = OdfApplyManifestOperator(
        task_id="apply_manifests",
        manifests=[str(EXAMPLES / "manifests" / "com.example.trades.yaml")],
        create_repository=True,
    )
    ingest = OdfIngestOperator(
        task_id="ingest_trades", dataset="com.example.trades", source_dir=str(EXAMPLES)
    )
    # [START howto_operator_odf_sql]
    summary = OdfSqlOperator(
        task_id="symbol_summary",
        sql="""
            SELECT symbol, count(*) AS trades, sum(quantity) AS quantity
            FROM `com.example.trades`
            GROUP BY symbol ORDER BY symbol
        """,
        as_of={"com.example.trades": "{{ ti.xcom_pull(task_ids='ingest_trades')['new_head'] }}"},
    )
    report = OdfSqlOperator(
        task_id="trades_report",
        sql="SELECT offset, event_time, symbol, price, quantity FROM `com.example.trades` ORDER BY offset",
        # the run's date: its logical date, or (a run started from the UI or the REST API has none)
        # the day it was started; `{{ ds }}` is undefined in such a run
        output_path="{{ params.report_dir }}/trades-"
        "{{ (dag_run.logical_date or dag_run.run_after) | ds }}.csv",
    )
    # [END howto_operator_odf_sql]
    apply >> ingest >> [summary, report]


report_dag = odf_sql_report()
