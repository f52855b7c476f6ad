"""Fast-start JVM options of local engine jobs: which requests get which options, and where the class
archive of a Spark and Java installation lives (the archive itself: tests/integration/test_engine_warm_up)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from airflow_odf.cli.engine import LazyRunner
from airflow_odf.odf.engine_client.fast_start import (
    CLIENT_JIT_ONLY,
    DRIVER_JAVA_OPTIONS,
    SMALL_INPUT_BYTES,
    cache_dir,
    class_archive_path,
    fast_start_conf,
    is_local_master,
    local_spark_problem,
    request_input_bytes,
)
from airflow_odf.odf.engine_client.runner import EngineRunError


@pytest.fixture(autouse=True)
def _no_spark_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No spark-defaults.conf of this machine's Spark in the way (the test that needs one writes it), and
    no class archive (the suite's own, tests/conftest.py): a test that wants one makes it."""
    (tmp_path / "spark-conf").mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "spark-conf"))
    monkeypatch.setenv("ODF_CACHE_DIR", str(tmp_path / "no-archive"))


def _file(path: Path, size: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: the size is what counts
    return str(path)


def _ingest(tmp_path: Path, input_size: int, **extra: object) -> str:
    return json.dumps({"inputs": [{"path": _file(tmp_path / "in.csv", input_size)}], **extra})


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[2]", True),
        ("local[*]", True),
        ("local[4,3]", True),
        ("local-cluster[2,1,1024]", False),
        ("spark://127.0.0.1:7077", False),
        ("yarn", False),
        ("k8s://https://127.0.0.1:6443", False),
        (None, False),
    ],
)
def test_only_local_masters_count_as_local(master: str | None, local: bool) -> None:
    assert is_local_master(master) is local


def test_request_input_bytes_of_each_request_kind(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _file(checkpoint / "part-0.parquet", 300)
    _file(checkpoint / "nested" / "part-1.parquet", 20)
    ingest = _ingest(
        tmp_path,
        1000,
        prev_data_paths=[_file(tmp_path / "s1.parquet", 7), _file(tmp_path / "s2.parquet", 9)],
        prev_checkpoint_path=str(checkpoint),
    )
    assert request_input_bytes(ingest) == 1000 + 7 + 9 + 300 + 20
    transform = json.dumps(
        {
            "kind": "transform",
            "inputs": [
                {"alias": "a", "data_paths": [_file(tmp_path / "a1", 50), _file(tmp_path / "a2", 60)]},
                {"alias": "b", "data_paths": []},
            ],
        }
    )
    assert request_input_bytes(transform) == 110
    assert request_input_bytes(json.dumps({"kind": "infer", "inputs": []})) == 0
    # a file that cannot be sized here: unknown, not small
    assert request_input_bytes(json.dumps({"inputs": [{"path": "s3a://bucket/data/x.parquet"}]})) is None
    assert request_input_bytes(json.dumps({"inputs": [{"path": str(tmp_path / "gone.csv")}]})) is None


def test_small_local_job_gets_the_client_compiler_and_the_archive_first(tmp_path: Path) -> None:
    archive = Path(_file(tmp_path / "cache" / "engine-classes-x.jsa", 10))
    user = {"spark.driver.memory": "1g", DRIVER_JAVA_OPTIONS: "-XX:TieredStopAtLevel=4 -Dx=1"}
    conf = fast_start_conf(user, "local[2]", _ingest(tmp_path, 100), archive)
    # the user's own options come last: a flag they set wins over ours
    assert conf == {
        "spark.driver.memory": "1g",
        DRIVER_JAVA_OPTIONS: (
            f"-XX:SharedArchiveFile={archive} {CLIENT_JIT_ONLY} -XX:TieredStopAtLevel=4 -Dx=1"
        ),
    }
    assert user[DRIVER_JAVA_OPTIONS] == "-XX:TieredStopAtLevel=4 -Dx=1"  # the caller's dict is untouched


def test_options_of_spark_defaults_are_kept(tmp_path: Path) -> None:
    """A --conf value replaces the one in spark-defaults.conf: ours must carry it along, not drop it."""
    (tmp_path / "spark-conf" / "spark-defaults.conf").write_text(
        "# site settings\n"
        "spark.driver.memory 4g\n"
        "spark.driver.extraJavaOptions -Dsite=old\n"
        "spark.driver.extraJavaOptions   -Dsite=1 -Dlog4j2.configurationFile=/etc/spark/log4j2.xml\n"
        "! spark.driver.extraJavaOptions -Dcommented=out\n"
    )
    small = _ingest(tmp_path, 10)
    assert fast_start_conf({}, "local", small, None) == {
        DRIVER_JAVA_OPTIONS: f"{CLIENT_JIT_ONLY} -Dsite=1 -Dlog4j2.configurationFile=/etc/spark/log4j2.xml"
    }
    # the task's own value replaces the site's, as spark-submit would do
    assert fast_start_conf({DRIVER_JAVA_OPTIONS: "-Dmine=1"}, "local", small, None) == {
        DRIVER_JAVA_OPTIONS: f"{CLIENT_JIT_ONLY} -Dmine=1"
    }
    (tmp_path / "spark-conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions=-Dx=1\n")
    assert fast_start_conf({}, "local", small, None) == {DRIVER_JAVA_OPTIONS: f"{CLIENT_JIT_ONLY} -Dx=1"}


def test_large_or_unsized_or_remote_jobs_keep_the_optimising_compiler(tmp_path: Path) -> None:
    archive = Path(_file(tmp_path / "a.jsa", 10))
    large = _ingest(tmp_path, SMALL_INPUT_BYTES + 1)
    assert fast_start_conf({}, "local[*]", large, archive) == {
        DRIVER_JAVA_OPTIONS: f"-XX:SharedArchiveFile={archive}"
    }
    assert fast_start_conf({}, "local[*]", _ingest(tmp_path, SMALL_INPUT_BYTES), None) == {
        DRIVER_JAVA_OPTIONS: CLIENT_JIT_ONLY
    }
    unsized = json.dumps({"inputs": [{"path": "s3a://bucket/x.csv"}]})
    assert fast_start_conf({"a": "b"}, "local", unsized, None) == {"a": "b"}
    # a cluster: the driver and executors start elsewhere, nothing is added
    small = _ingest(tmp_path, 10)
    for master in ("spark://127.0.0.1:7077", "yarn", "local-cluster[2,1,1024]"):
        assert fast_start_conf({"a": "b"}, master, small, archive) == {"a": "b"}


def test_long_lived_session_gets_the_archive_only(tmp_path: Path) -> None:
    archive = Path(_file(tmp_path / "a.jsa", 10))
    # requests of a session are not known when its JVM starts: no client JIT, whatever they will be
    assert fast_start_conf({"x": "1"}, "local[*]", None, archive) == {
        "x": "1",
        DRIVER_JAVA_OPTIONS: f"-XX:SharedArchiveFile={archive}",
    }
    assert fast_start_conf({"x": "1"}, "local[*]", None, tmp_path / "missing.jsa") == {"x": "1"}
    assert fast_start_conf({"x": "1"}, "yarn", None, archive) == {"x": "1"}


def test_archive_is_skipped_when_missing_or_the_class_path_differs(tmp_path: Path) -> None:
    small = _ingest(tmp_path, 10)
    missing = tmp_path / "never-made.jsa"
    assert fast_start_conf({}, "local", small, missing) == {DRIVER_JAVA_OPTIONS: CLIENT_JIT_ONLY}
    archive = Path(_file(tmp_path / "with space" / "a.jsa", 10))
    assert fast_start_conf({}, "local", small, archive) == {
        DRIVER_JAVA_OPTIONS: f'-XX:SharedArchiveFile="{archive}" {CLIENT_JIT_ONLY}'
    }
    extra_class_path = {"spark.driver.extraClassPath": "/opt/jars/x.jar"}
    assert fast_start_conf(extra_class_path, "local", small, archive) == {
        **extra_class_path,
        DRIVER_JAVA_OPTIONS: CLIENT_JIT_ONLY,
    }


def test_class_archive_path_follows_the_spark_and_java_installations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark, java_home = tmp_path / "spark", tmp_path / "jdk"
    _file(spark / "jars" / "spark-core.jar", 100)
    _file(java_home / "bin" / "java", 10)
    monkeypatch.setenv("SPARK_HOME", str(spark))
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    monkeypatch.setenv("ODF_CACHE_DIR", str(tmp_path / "cache"))
    first = class_archive_path()
    assert first is not None and first.parent == tmp_path / "cache"
    assert first.name.startswith("engine-classes-") and first.suffix == ".jsa"
    assert class_archive_path() == first  # stable
    assert class_archive_path(tmp_path / "elsewhere") == tmp_path / "elsewhere" / first.name
    _file(spark / "jars" / "extra.jar", 5)  # another Spark: another archive
    second = class_archive_path()
    assert second is not None and second != first
    os.utime(java_home / "bin" / "java", ns=(0, 0))  # another java build: another archive
    assert class_archive_path() not in (first, second, None)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-here"))
    assert class_archive_path() is None
    monkeypatch.setenv("SPARK_HOME", str(spark))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert class_archive_path() is None


def test_cache_dir_defaults_to_the_xdg_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ODF_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "airflow-odf"
    monkeypatch.setenv("ODF_CACHE_DIR", str(tmp_path / "odf"))
    assert cache_dir() == tmp_path / "odf"


def test_local_spark_needs_the_jars_of_the_full_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert local_spark_problem() is None  # the full pyspark of the test environment has its jars
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # e.g. only the Spark Connect client
    problem = local_spark_problem()
    assert problem is not None and f"{tmp_path} has no jars/ folder" in problem
    assert "pip install 'airflow-provider-odf[spark]'" in problem
    with pytest.raises(EngineRunError, match=r"airflow-provider-odf\[spark\]"):
        LazyRunner(argparse.Namespace(engine="local", master=None, engine_timeout=None)).run("{}", tmp_path)
    (tmp_path / "jars").mkdir()
    assert local_spark_problem() is None
