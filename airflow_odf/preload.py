"""What every ODF task imports, imported once in an Airflow process that forks its task processes.

A task on the warm engine spends about 3 s importing before its first request: pyspark's Connect
client requires pandas, numpy and gRPC (about 2 s of it), then the ODF core and pyarrow. The
LocalExecutor's workers and Celery's prefork workers start each task as a fork of themselves, so a
module imported before the fork is there in every task for free. `airflow_local_settings.py`, which
every Airflow process imports at start, is the place:

    import airflow_odf.preload

Nothing here opens a connection or starts a thread (a gRPC channel made before a fork would be
unusable after it). Only modules that do not import Airflow are listed: Airflow is still starting when
its local settings are imported. See docs/deployment.md ("Per-task start-up"). Nothing is printed
either: pyspark's import-time warning and its Connect logger are silenced (airflow_odf/utils/third_party.py).
"""

from __future__ import annotations

import importlib

from airflow_odf.utils.third_party import quiet_third_party

PRELOADED = (
    "airflow_odf.engine.connect_runner",  # pyspark's Connect client: pandas, numpy, gRPC
    "airflow_odf.odf.chain.verification",
    "airflow_odf.odf.ingest.polling",
    "airflow_odf.odf.ingest.push",
    "airflow_odf.odf.transform.execute",
    "airflow_odf.odf.transform.verify",
)

for _module in PRELOADED:
    importlib.import_module(_module)
# pyspark is imported now, before Airflow's logging set-up: keep its Connect logger off
quiet_third_party()
