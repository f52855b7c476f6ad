"""The SQL policy every SQL path goes through: one query, over the relations it was given, calling no
function that reaches outside the data (`check.py`; the deny-list in `functions.py`).

It lives in utils because the engine checks each statement again before `spark.sql`, and the engine may not
import the core; it imports neither ODF, Airflow nor Spark.
"""

from airflow_odf.utils.sql_policy.check import (
    SqlRefused,
    StepRefused,
    TableRead,
    check_query,
    check_steps,
    parse_query,
)

__all__ = ["SqlRefused", "StepRefused", "TableRead", "check_query", "check_steps", "parse_query"]
