"""The SQL policy's picture of Spark (`airflow_odf/utils/sql_policy`) against the running Spark: the
committed list of built-in functions is exactly the registry's, and every function the deny-list
refuses and every table function it allows is one Spark has."""

from __future__ import annotations

import re

import pyspark
from pyspark.sql import SparkSession

from airflow_odf.utils.sql_policy.functions import REFUSED_FUNCTIONS, TABLE_FUNCTIONS
from airflow_odf.utils.sql_policy.spark_builtins import BUILTIN_FUNCTIONS, SPARK_VERSION

_NAME = re.compile(r"[A-Za-z_]")


def registry(spark: SparkSession) -> set[str]:
    """The names of Spark's built-in functions (operators such as `+` or `!` left out)."""
    return {row.function for row in spark.sql("SHOW SYSTEM FUNCTIONS").collect() if _NAME.match(row.function)}


def table_function_registry(spark: SparkSession) -> set[str]:
    listed = spark._jsparkSession.sessionState().tableFunctionRegistry().listFunction()  # type: ignore[attr-defined]
    return {listed.apply(i).funcName() for i in range(listed.size())}


def test_the_builtin_list_is_the_running_sparks_registry(spark: SparkSession) -> None:
    assert pyspark.__version__ == SPARK_VERSION
    running = registry(spark)
    assert sorted(running - BUILTIN_FUNCTIONS) == []  # in Spark, missing from the list: refused wrongly
    assert sorted(BUILTIN_FUNCTIONS - running) == []  # listed, unknown to Spark
    assert running == BUILTIN_FUNCTIONS


def test_refused_and_table_functions_are_sparks(spark: SparkSession) -> None:
    functions, table_functions = registry(spark), table_function_registry(spark)
    assert {"range", "explode", "stack"} <= table_functions
    assert sorted(set(REFUSED_FUNCTIONS) - functions - table_functions) == []
    assert sorted(TABLE_FUNCTIONS - table_functions - functions) == []
    # the table functions allowed only generate rows: none of them is refused
    assert sorted(TABLE_FUNCTIONS & set(REFUSED_FUNCTIONS)) == []
