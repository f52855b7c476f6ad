"""Process-wide test settings. Airflow reads its environment once, at its first import: set it here,
before any test module imports airflow (the Airflow-layer tests live in tests/airflow)."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.engine_client.connect_server import ConnectServer
from tests.airflow_db import fresh_db
from tests.paths import HOW_TO_GET_SHARED, REPO, REQUIRE_SHARED, missing_shared

#: the per-environment cache of the suite (scripts/ensure-env fills it): `<venv>/odf-cache`
TEST_CACHE = Path(sys.prefix) / "odf-cache" if sys.prefix != sys.base_prefix else None

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="odf-airflow-home-"))
# a worker of `pytest -n N`: an Airflow home (a SQLite DB) of its own
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["AIRFLOW_HOME"] = str(Path(os.environ["AIRFLOW_HOME"]) / os.environ["PYTEST_XDIST_WORKER"])
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags_examples")
os.environ.setdefault("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# the engine's class archive (`odf engine warm-up`) lives in the environment's own cache, never the user's:
# scripts/ensure-env makes it there once per Spark and Java installation, so that every JVM the suite
# starts loads Spark's classes from it as on a machine whose user ran the warm-up (without it, each of the
# suite's JVM starts loads and verifies them one by one). Outside a virtual environment: none, a cold start.
os.environ["ODF_CACHE_DIR"] = str(TEST_CACHE) if TEST_CACHE else tempfile.mkdtemp(prefix="odf-cache-")
# The suite's JVMs run small jobs, many at once on few CPUs: the client JIT compiler alone and the serial
# collector cost them less CPU than the optimising compiler's and G1's background threads, which compete
# with the jobs themselves (a third of the wall of the engine and Airflow tests on 2 CPUs; the product's
# own choice for a small spark-submit job is `fast_start`'s). Every JVM that Spark's scripts start: the
# drivers (a local session, spark-submit, a Connect server), the launcher before each, a cluster's daemons.
_SMALL_JOB_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_variable, _SMALL_JOB_JVM)
# the keys of datasets in object-store repositories (and of a test's node) go to a throw-away
# configuration folder, never the user's own (`airflow_odf.odf.identity.keys.default_keys_dir`)
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="odf-config-")
os.environ.pop("ODF_KEYS_DIR", None)


#: The `slow` tier: tests over about 10 s on a quiet 2-core machine, each of which starts JVMs, servers or
#: Airflow processes of its own (or runs hundreds of concurrent rounds). `pytest -m "not slow"` leaves them
#: out (the inner loop); `./scripts/test` and CI run everything. A node-id prefix: a folder, a module, a
#: test (all its parameters). Listed here, not on the tests, so one place says what the inner loop skips.
SLOW = (
    "tests/cluster/",  # a standalone cluster and moto for the session, a spark-submit per command
    "tests/deployment/",  # a real scheduler, API server and PostgreSQL
    "tests/airflow/test_asset_events_and_links.py::test_a_committing_run_emits_one_event_per_dataset",
    "tests/airflow/test_batching_dag.py::test_batching_dag_transforms_once_per_batch",
    "tests/airflow/test_connect_retry.py::test_a_server_",
    "tests/airflow/test_connect_retry.py::test_an_unreachable_server_fails_the_try",
    "tests/airflow/test_overlapping_runs.py::",
    "tests/airflow/test_retry_safety.py::",
    "tests/engine/test_connect_engine.py::test_spark_submit_gives_the_same_datasets_as_local_and_connect",
    "tests/integration/test_airflow_spark_submit.py::",
    "tests/integration/test_connect_failures.py::",
    "tests/integration/test_engine_warm_up.py::test_warm_up_makes_the_archive",
    "tests/integration/test_kill_cleanup.py::test_a_killed_task_leaves_no_spark_process",
    "tests/integration/test_overlapping_writers.py::test_odf_pull_in_three_processes",
    "tests/integration/test_schemas_doc_session.py::",
    "tests/integration/test_spark_install.py::test_local_spark_installs_each_file_once",
    "tests/integration/test_spark_log_level.py::test_spark_logs_at_warn_by_default",
    "tests/integration/test_spark_submit.py::test_push_ingest_through_spark_submit",
    "tests/sharing/test_s3_in_place.py::test_a_connect_server_started_with_s3a",
    "tests/sharing/test_s3_in_place.py::test_push_ingest_writes_and_hashes_in_the_bucket",
    "tests/sharing/test_s3_in_place_failures.py::test_an_s3_error_while_the_engine_stages",
    "tests/sharing/test_s3_in_place_one_pass.py::",
    "tests/sharing/test_s3_races.py::test_ingest_compact_gc_and_rename_at_once",
    "tests/sharing/test_s3a_engine.py::test_spark_submit_engine_ingests_into_an_s3_repository",
    "tests/sharing/test_sharing_dag.py::",
    "tests/unit/test_races.py::test_renames_deletes_and_gc_at_once",
    "tests/unit/test_races.py::test_ingest_compact_gc_and_rename_at_once",
)


#: Node-id prefixes whose tests `pytest -n N` runs on one worker, one after the other: their session
#: fixtures (a standalone cluster and its warm driver; PostgreSQL, a scheduler and an API server) are too
#: heavy to start twice, and too heavy to run beside each other on 2 CPUs (the deployment's runs have
#: deadlines).
ONE_WORKER = ("tests/cluster/", "tests/deployment/")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `pytest -n N` (pytest-xdist), a worker takes a whole module at a time, so that the module's
    fixtures (a Spark Connect server, a Spark session, moto) start once, and all of `ONE_WORKER`'s. The
    modules go out in the collection's order, the dearest first (`pytest_collection_modifyitems`), not
    xdist's default of the most tests first, which would leave the two one-worker groups to the end."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return " ".join(ONE_WORKER) if nodeid.startswith(ONE_WORKER) else nodeid.split("::", 1)[0]

    return ByModule(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the tests of `SLOW` with `slow`, and runs the dearest first: the `ONE_WORKER` groups, then
    the modules holding a slow test, then the rest, each in its own order (so that under `pytest -n N`
    the long ones start while the short ones can still fill the other workers' time)."""
    slow_modules = set()
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
            slow_modules.add(item.nodeid.split("::", 1)[0])

    def cost_rank(item: pytest.Item) -> int:
        if item.nodeid.startswith(ONE_WORKER):
            return 0
        return 1 if item.nodeid.split("::", 1)[0] in slow_modules else 2

    items.sort(key=cost_rank)


def pytest_configure(config: pytest.Config) -> None:
    """Under ODF_REQUIRE_SHARED=1 (CI) the tests of the shared reference material may not be skipped: a
    shared folder that is absent or incomplete stops the run before any test, with one message."""
    missing = missing_shared()
    if REQUIRE_SHARED and missing:
        raise pytest.UsageError(
            f"ODF_REQUIRE_SHARED is set but the shared folder lacks {', '.join(map(str, missing))}"
            f" (the tests that read it would be skipped): {HOW_TO_GET_SHARED}"
        )


@pytest.fixture
def count_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many chain walks (`Dataset.iter_blocks`) started; starts at [0]."""
    walks = [0]
    original = Dataset.iter_blocks

    def counted(self: Dataset, *args: Any, **kwargs: Any) -> Iterator[Any]:
        walks[0] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Dataset, "iter_blocks", counted)
    return walks


@pytest.fixture(scope="session")
def connect_url() -> Iterator[str]:
    """The `sc://127.0.0.1:PORT` of one Spark Connect server for the whole session (`odf engine serve`'s
    server on a free port; a JVM start costs seconds), stopped at the end."""
    server = ConnectServer(
        "local[2]", port=0, conf={"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "2g"}
    )
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A fresh metadata DB for `dag.test()`, once per session: a copy of the environment's migrated one
    (tests/airflow_db.py), put in place of the file Airflow's engine points at once it holds no
    connection to it."""
    from airflow import settings

    database = settings.engine.url.database
    assert settings.engine.url.get_backend_name() == "sqlite" and database, settings.engine.url
    settings.engine.dispose()
    fresh_db(Path(database))
