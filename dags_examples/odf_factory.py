"""Example DAG 4: a whole pipeline generated from a folder of DatasetSnapshot manifests.

`build_dag` reads `factory_manifests/` (the manifest files only: no repository, no Spark at parse time)
and builds `apply_manifests` -> `ingest_com.example.weather.readings` (the root's FilesGlob over
`data/weather-*.csv`, resolved against this folder) -> `transform_com.example.weather.daily`, the
transform pinned to the head its upstream ingest returned through XCom. Adding a manifest to the folder
adds its task; a cycle or an unknown input fails the DAG import with the file's name.

It is started by hand and the only DAG writing the weather datasets; `max_active_runs=1` and
`retries=2` (through `default_args`, for every task), as for the other examples.

Connections: `odf_default` (an `odf_repo` connection) and, with the default engine, `spark_default`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow_odf.dag_factory import build_dag

EXAMPLES = Path(__file__).resolve().parent

# [START howto_dag_factory]
weather = build_dag(
    EXAMPLES / "factory_manifests",
    dag_id="odf_factory_weather",
    schedule=None,
    source_dir=EXAMPLES,
    create_repository=True,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    tags=["odf", "example"],
)
# [END howto_dag_factory]
