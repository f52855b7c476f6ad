"""The engine sessions refuse by themselves what an ODF engine never does (issue 34, the second wall):
SQL sent straight to `spark.sql` — no Python policy in between — on the shared local session and on the
shared Spark Connect server. Reflection (the query that read the Connect server's token from its
environment, and the one that stopped it), files read as tables, the environment through variable
substitution, script transformation, directory writes, tables over paths, added jars, and any query of
a session whose locked settings a client turned back on. The engine's own work (DataFrame reads,
Parquet writes, temporary views) still runs, and the Connect server serves after every refusal.

The guard's jar is built by scripts/jvm-guard-jar (scripts/ensure-env runs it, as CI does): these tests
require it, as the s3a tests require their jars."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from airflow_odf.engine.connect_runner import connect_mode, open_session
from airflow_odf.utils.jvm_guard import REFUSAL_PREFIX, guard_jar, guard_jar_name
from airflow_odf.utils.spark_conf import SQL_LOCKDOWN


@pytest.fixture(scope="module", autouse=True)
def _guard_built() -> None:
    if guard_jar() is None:
        pytest.fail(f"{guard_jar_name()} is not built: run scripts/jvm-guard-jar (scripts/ensure-env does)")


@pytest.fixture(scope="module")
def connect_session(connect_url: str) -> Iterator[Any]:
    with connect_mode():
        session = open_session(connect_url)
        yield session
        session.stop()


@pytest.fixture(params=["local", "connect"])
def session(request: pytest.FixtureRequest) -> Any:
    """The shared local session, then a client of the shared Connect server."""
    return request.getfixturevalue("spark" if request.param == "local" else "connect_session")


REFUSED = [
    ("SELECT reflect('java.lang.System', 'getenv', 'PATH')", "reflection"),
    ("SELECT java_method('java.lang.System', 'exit', 0)", "reflection"),
    (
        "SELECT id FROM range(1) WHERE id IN "
        "(SELECT length(try_reflect('java.lang.System', 'getProperty', 'user.home')))",
        "reflection",
    ),
    ("SELECT TRANSFORM(*) USING 'cat' FROM range(1)", "script transformation"),
    ("INSERT OVERWRITE DIRECTORY '{tmp}/out' USING csv SELECT 1", "INSERT OVERWRITE DIRECTORY"),
    ("CREATE TEMPORARY VIEW passwd USING csv OPTIONS (path '/etc/passwd')", "a view over a path"),
    ("CREATE TABLE passwd USING csv LOCATION '/etc'", "CREATE TABLE"),
    ("ADD JAR '{tmp}/any.jar'", "ADD JAR"),
    ("SET spark.sql.runSQLOnFiles=true", "SET spark.sql.runSQLOnFiles"),
    ("SET spark.sql.variable.substitute=true", "SET spark.sql.variable.substitute"),
    # a bare `user` that is no column resolves to the account: a parser cannot tell, the plan can
    ("SELECT user AS who FROM range(1)", "the engine's account"),
    ("SELECT input_file_name() FROM range(1)", "the worker's file paths"),
]


@pytest.mark.parametrize(("sql", "what"), REFUSED, ids=[what for _, what in REFUSED])
def test_the_session_itself_refuses(session: Any, sql: str, what: str, tmp_path: Path) -> None:
    with pytest.raises(AnalysisException) as refused:
        session.sql(sql.format(tmp=tmp_path)).collect()
    assert f"{REFUSAL_PREFIX}{what}" in str(refused.value).splitlines()[0]
    assert not (tmp_path / "out").exists()
    assert session.sql("SELECT 1 AS one").collect()[0]["one"] == 1  # still serves (no exit)


def test_files_and_the_environment_are_out_of_sql_s_reach(session: Any) -> None:
    with pytest.raises(AnalysisException) as not_a_table:  # runSQLOnFiles=false: a table name like any
        session.sql("SELECT * FROM csv.`/etc/passwd`").collect()
    assert "TABLE_OR_VIEW_NOT_FOUND" in str(not_a_table.value)
    # variable.substitute=false: the text stays as written
    row = session.sql("SELECT '${env:PATH}' AS env, '${system:user.home}' AS prop").collect()[0]
    assert (row["env"], row["prop"]) == ("${env:PATH}", "${system:user.home}")
    for key, value in SQL_LOCKDOWN.items():
        assert session.conf.get(key) == value


@pytest.mark.parametrize("key", sorted(SQL_LOCKDOWN))
def test_a_setting_turned_back_on_through_the_conf_api_refuses_every_query(session: Any, key: str) -> None:
    """`spark.conf.set` (a Connect client's config request) is no plan the rule could see: the rule
    checks the session's settings before every query instead."""
    session.conf.set(key, "true")
    try:
        with pytest.raises(AnalysisException) as refused:
            session.sql("SELECT 1").collect()
        assert f"{REFUSAL_PREFIX}{key} was changed; an ODF engine session keeps it false" in str(
            refused.value
        )
    finally:
        session.conf.set(key, "false")
    assert session.sql("SELECT 1 AS one").collect()[0]["one"] == 1


def test_the_engine_s_own_work_passes(session: Any, tmp_path: Path) -> None:
    """What the engine does through the DataFrame API: read files, register views, run SQL over them,
    write Parquet — the rule sees those plans too."""
    source = tmp_path / "in.csv"
    source.write_text("a,b\n1,x\n2,y\n")
    frame = session.read.option("header", "true").csv(str(source))
    frame.createOrReplaceTempView("odf_guard_input")
    result = session.sql("SELECT count(*) AS n, max(a) AS top FROM odf_guard_input")
    assert result.collect()[0]["n"] == 2
    result.write.mode("overwrite").parquet(str(tmp_path / "out"))
    assert session.read.parquet(str(tmp_path / "out")).collect()[0]["top"] == "2"
    # a column named like a niladic function is the column
    assert session.sql("SELECT user FROM (SELECT 7 AS user)").collect()[0]["user"] == 7
    session.catalog.dropTempView("odf_guard_input")  # the session is shared


def test_the_local_session_loads_the_guard_from_spark_jars(spark: SparkSession) -> None:
    """On `spark.jars`, not the driver's class path: the fast-start class archive needs that unchanged."""
    conf = spark.sparkContext.getConf()
    assert str(guard_jar()) in conf.get("spark.jars", "").split(",")
    assert "airflow_odf.guard.OdfSqlGuard" in conf.get("spark.sql.extensions", "")
    assert str(guard_jar()) not in conf.get("spark.driver.extraClassPath", "")
