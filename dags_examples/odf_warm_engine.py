"""Example DAG: the trades pipeline of example DAG 1 on a warm engine, a long-running Spark Connect server.

Every ODF task of a DAG usually starts its own Spark (a JVM, seconds before any data moves). Here the
engine's work runs on one Spark Connect server shared by all tasks and DAG runs: start it next to the
Airflow workers with `odf engine serve` (it prints its `sc://HOST:PORT` URL) and point a connection of
the Spark provider's type `spark_connect` at it. A task whose `spark_conn_id` is such a connection runs
on Connect without further settings — here every task gets it through `default_args`.

An unreachable server fails the task within seconds with a message naming its URL; the retries below
give it time to come back (e.g. while its service restarts).

It writes the datasets example DAG 1 writes, on purpose: the same pipeline on another engine. Both
are started by hand, and their runs may overlap — with each other and among themselves, up to
`max_active_runs=3` — because the writers reconcile: a task that loses the race for the head plans
again from the winner's and commits only what is still missing, so each trade is ingested once.

Connections: `odf_default` (an `odf_repo` connection, e.g. host `file:///data/odf`) and
`spark_connect_default` (type `spark_connect`, host `sc://127.0.0.1`, port 15002; a token, if the server
requires one, as password; `{"use_ssl": true}` as extra for TLS). The server's Spark writes the slices
where the tasks read them: on this machine, or a volume both see.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag
from odf_trades_pipeline import trades_pipeline_tasks  # the DAG folder is on sys.path, as in Airflow

# [START howto_odf_warm_engine_default_args]
# every ODF task of the DAG runs on the Spark Connect server of this connection (type spark_connect)
WARM_ENGINE = {"spark_conn_id": "spark_connect_default", "retries": 2, "retry_delay": timedelta(seconds=30)}
# [END howto_odf_warm_engine_default_args]


@dag(
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    tags=["odf", "example"],
    max_active_runs=3,
    default_args=WARM_ENGINE,
)
def odf_warm_engine() -> None:
    trades_pipeline_tasks()  # the tasks of example DAG 1, unchanged: the engine comes from default_args


warm_engine = odf_warm_engine()
