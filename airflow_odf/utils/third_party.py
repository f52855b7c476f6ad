"""Third-party noise that a user of the provider can neither act on nor turn off, silenced one message
(or one logger) at a time — never a whole category or library.

- pyspark warns on import that it "does not yet fully support pandas >= 3.0.0" (a FutureWarning, once
  per process): with the preload, every Airflow component printed it at start, and every task that
  imports the Connect client printed it into its log (task stderr is logged at error level). The
  provider uses no pandas API of pyspark; the project's tests run on pandas 3.
- pyspark's Spark Connect logger is off unless `SPARK_CONNECT_LOG_LEVEL` is set (pyspark's documented
  default), but a `logging.config.dictConfig` run after pyspark's import re-enables it, with its own
  handlers on stderr. Airflow's logging set-up is such a run, and the preload imports pyspark before
  it: after an engine restart, "session.stop(): Session could not be released" (and "ReleaseExecute
  failed") reached task logs at error level, beside the provider's own one-line message naming the
  server. Once pyspark is imported, its logger gets a level above CRITICAL, which `dictConfig` leaves
  alone — unless `SPARK_CONNECT_LOG_LEVEL` asks for it. (Imported after Airflow's set-up, as a task
  without the preload does, pyspark keeps it disabled by itself.)
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

PANDAS_3_WARNING = r"PySpark does not yet fully support pandas >= 3\.0\.0"
CONNECT_LOGGER = "pyspark.sql.connect.logging"
SILENT = logging.CRITICAL + 10


def quiet_third_party() -> None:
    """Installs the filters above: the warning's at once (before pyspark is imported), the logger's
    once pyspark's Connect client is (call it again then). Idempotent."""
    warnings.filterwarnings("ignore", message=PANDAS_3_WARNING, category=FutureWarning, module=r"pyspark\.")
    if CONNECT_LOGGER in sys.modules and "SPARK_CONNECT_LOG_LEVEL" not in os.environ:
        logging.getLogger(CONNECT_LOGGER).setLevel(SILENT)
