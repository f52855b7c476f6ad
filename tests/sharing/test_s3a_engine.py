"""A real Spark engine with the s3a jars (`scripts/s3a-jars`) working on an `s3://` repository in moto:
the `odf` command with `--spark-s3a` and the spark-submit engine, two ingests, each one JVM. The engine
is given `s3a://` URIs (the second ingest reads the first one's merge checkpoint from the bucket), the
records and offsets are right, and the S3 keys are on no command line and in no request: they reach
spark-submit in a file only their owner can read, removed when the job ends.

Without a JVM: the Airflow layer's spark-submit runner (a stand-in `spark-submit` records what it is
given), the `odf_repo` connection's `spark_s3a`, and `odf engine serve --s3a`.
"""

from __future__ import annotations

import json
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.odf.engine_client.runner import SparkSubmitRunner
from airflow_odf.odf.storage.url import SPARK_S3A_ENV
from airflow_odf.utils.s3a import CLASS_PATH_KEYS, S3A_SECRET_KEYS, s3a_conf, s3a_jars, with_s3a_conf
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY

ORDERS = "com.acme.orders"
SECRETS = (ACCESS_KEY, SECRET_KEY)


def _jars_or_fail() -> None:
    """The engine tests need the cached jars: `scripts/test` fetches them (ensure-env)."""
    try:
        s3a_jars()
    except ValueError as e:
        pytest.fail(str(e))


@dataclass
class Submitted:
    """One spark-submit the CLI's runner started: its argv, its requests, its secrets file."""

    argv: list[str]
    requests: list[str]
    secrets_mode: int
    secrets: str


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[Submitted]:
    """Records every spark-submit command (and what it is given) before it runs."""
    seen: list[Submitted] = []
    run = SparkSubmitRunner._submit

    def recording(self: SparkSubmitRunner, cmd: list[str], requests: Any, work_dir: Path) -> None:
        secrets = Path(cmd[cmd.index("--properties-file") + 1])
        seen.append(
            Submitted(
                list(cmd),
                [Path(request).read_text() for request, _ in requests],
                stat.S_IMODE(secrets.stat().st_mode),
                secrets.read_text(),
            )
        )
        run(self, cmd, requests, work_dir)

    monkeypatch.setattr(SparkSubmitRunner, "_submit", recording)
    return seen


def _orders_manifest(path: Path) -> Path:
    """A root dataset with a push source and a Ledger merge (its merge state is a checkpoint)."""
    source = {
        "kind": "AddPushSource",
        "sourceName": "default",
        "read": {
            "kind": "Csv",
            "header": True,
            "schema": ["event_time TIMESTAMP", "order_id BIGINT", "qty BIGINT"],
        },
        "merge": {"kind": "Ledger", "primaryKey": ["order_id"]},
    }
    snapshot = {"name": ORDERS, "kind": "Root", "metadata": [source]}
    path.write_text(json.dumps({"kind": "DatasetSnapshot", "version": 1, "content": snapshot}))
    return path


def _uris(value: Any) -> list[str]:
    """Every string in a request that names a location with a scheme."""
    if isinstance(value, dict):
        return [uri for item in value.values() for uri in _uris(item)]
    if isinstance(value, list):
        return [uri for item in value for uri in _uris(item)]
    return [value] if isinstance(value, str) and "://" in value else []


def test_spark_submit_engine_ingests_into_an_s3_repository_over_s3a(
    moto_endpoint: str,
    s3_bucket: str,
    s3_admin: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    submitted: list[Submitted],
) -> None:
    _jars_or_fail()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)  # the CLI's S3 settings: the environment's
    monkeypatch.setenv("ODF_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv(SPARK_S3A_ENV, "0")  # `--spark-s3a` sets it for the command; restored afterwards
    repo = f"s3://{s3_bucket}/odf"
    engine = ["--repo", repo, "--engine", "spark-submit", "--master", "local[2]", "--spark-s3a"]
    day1, day2 = tmp_path / "day1.csv", tmp_path / "day2.csv"
    day1.write_text("event_time,order_id,qty\n2024-02-01T00:00:00Z,1,5\n2024-02-01T01:00:00Z,2,20\n")
    day2.write_text("event_time,order_id,qty\n2024-02-01T01:00:00Z,2,20\n2024-02-02T00:00:00Z,3,30\n")
    assert main(["init", "--repo", repo]) == 0
    assert main(["add", str(_orders_manifest(tmp_path / "orders.yaml")), "--repo", repo]) == 0
    capsys.readouterr()

    results = []
    for day in (day1, day2):
        assert main(["ingest", ORDERS, str(day), *engine, "--format", "json"]) == 0, capsys.readouterr().err
        results.append(json.loads(capsys.readouterr().out))
    assert [r["records"] for r in results] == [2, 1]  # the ledger knew order 2: its state came over s3a

    assert main(["tail", ORDERS, "--repo", repo, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["offset"], r["order_id"], r["qty"]) for r in rows] == [(0, 1, 5), (1, 2, 20), (2, 3, 30)]
    assert main(["verify", ORDERS, "--repo", repo]) == 0

    # the engine was given s3a:// URIs into the bucket, never s3:// ones it could not open
    assert len(submitted) == 2
    requests = [json.loads(text) for job in submitted for text in job.requests]
    uris = [uri for request in requests for uri in _uris(request)]
    assert uris and all(uri.startswith(f"s3a://{s3_bucket}/odf/") for uri in uris), uris
    assert requests[1]["prev_checkpoint_path"].startswith(f"s3a://{s3_bucket}/odf/")
    checkpoint_key = requests[1]["prev_checkpoint_path"].removeprefix(f"s3a://{s3_bucket}/")
    assert s3_admin.head_object(Bucket=s3_bucket, Key=checkpoint_key)["ContentLength"] > 0
    # the keys: on no command line and in no request; in a file only their owner could read
    for job in submitted:
        assert not [arg for arg in job.argv if any(secret in arg for secret in SECRETS)], job.argv
        assert not [text for text in job.requests if any(secret in text for secret in SECRETS)]
        assert f"spark.hadoop.fs.s3a.endpoint={moto_endpoint}" in job.argv
        class_path = [arg for arg in job.argv if arg.startswith("spark.executor.extraClassPath=")]
        assert len(class_path) == 1 and "hadoop-aws-" in class_path[0]
        assert job.secrets_mode == 0o600
        assert f"spark.hadoop.fs.s3a.secret.key={SECRET_KEY}" in job.secrets.splitlines()
    assert not list((tmp_path / "work").rglob("spark-secrets.properties"))  # removed after each job


# --------------------------------------------------------------------------------------------------
# Without a JVM: the Airflow layer and `odf engine serve --s3a`
# --------------------------------------------------------------------------------------------------

FAKE_SPARK_SUBMIT = """#!/bin/sh
# records its arguments (one a line) and its properties file (mode, text); answers the request
printf '%s\\n' "$@" >"$RECORD/argv"
response=""
while [ $# -gt 0 ]; do
    case "$1" in
        --properties-file) stat -c %a "$2" >"$RECORD/mode"; cat "$2" >"$RECORD/secrets" ;;
        --response) response="$2" ;;
    esac
    shift
done
echo '{"answered": true}' >"$response"
"""


def test_the_airflow_spark_submit_runner_keeps_the_keys_off_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_odf.hooks.spark_engine import SparkSubmitEngineRunner

    _jars_or_fail()
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir()
    record.mkdir()
    spark_submit = bin_dir / "spark-submit"
    spark_submit.write_text(FAKE_SPARK_SUBMIT)
    spark_submit.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("RECORD", str(record))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_S3A_FAKE", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    s3a = s3a_conf(
        endpoint="http://127.0.0.1:9000",
        region=REGION,
        path_style=True,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        session_token="testing-session-token",
    )
    runner = SparkSubmitEngineRunner("spark_s3a_fake", conf=with_s3a_conf({"spark.driver.memory": "1g"}, s3a))
    work = tmp_path / "operations" / "op1"
    work.mkdir(parents=True)
    assert json.loads(runner.run(json.dumps({"version": 1}), work)) == {"answered": True}
    argv = (record / "argv").read_text().splitlines()
    secrets = (*SECRETS, "testing-session-token")
    assert not [arg for arg in argv if any(secret in arg for secret in secrets)], argv
    assert argv[argv.index("--properties-file") + 1] == str(work / "spark-secrets.properties")
    assert "--load-spark-defaults" in argv  # read in addition to spark-defaults.conf, not instead
    class_path = s3a["spark.executor.extraClassPath"]
    assert f"spark.executor.extraClassPath={class_path}" in argv and "spark.driver.memory=1g" in argv
    assert (record / "mode").read_text().strip() == "600"
    # the three s3a keys: a spark-submit driver hands them to the executors itself (no executorEnv copies)
    assert sorted(line.partition("=")[0] for line in (record / "secrets").read_text().splitlines()) == sorted(
        S3A_SECRET_KEYS & s3a.keys()
    )
    assert len(S3A_SECRET_KEYS & s3a.keys()) == 3
    assert not (work / "spark-secrets.properties").exists()  # removed when the job ended


def test_an_odf_repo_connection_with_spark_s3a_gives_the_engine_its_settings(
    moto_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_odf.hooks.repo import OdfRepoHook

    _jars_or_fail()
    extra = {
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "region_name": REGION,
        "endpoint_url": moto_endpoint,
    }
    connection = {"conn_type": "odf_repo", "host": f"s3://{s3_bucket}/odf"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_S3A", json.dumps({**connection, "extra": {**extra, "spark_s3a": True}})
    )
    monkeypatch.setenv("AIRFLOW_CONN_ODF_STAGED", json.dumps({**connection, "extra": extra}))
    conf = OdfRepoHook("odf_s3a").engine_spark_conf({"spark.driver.memory": "1g"})
    assert conf == with_s3a_conf(
        {"spark.driver.memory": "1g"},
        s3a_conf(
            endpoint=moto_endpoint,
            region=REGION,
            path_style=True,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
        ),
    )
    assert OdfRepoHook("odf_staged").engine_spark_conf({"spark.driver.memory": "1g"}) == {
        "spark.driver.memory": "1g"
    }


def test_odf_engine_serve_s3a_starts_the_server_with_the_environments_settings(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow_odf.cli.engine as cli_engine

    _jars_or_fail()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    started: list[dict[str, str]] = []

    class Server:
        """Notes the conf the command starts a server with; stops at once."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            started.append(args[3])

        def start(self, cancel: threading.Event) -> str:
            cancel.set()
            return "sc://127.0.0.1:15002"

        def exit_code(self) -> None:
            return None

        def stop(self) -> None:
            pass

    monkeypatch.setattr(cli_engine, "ConnectServer", Server)
    assert main(["engine", "serve", "--s3a", "--port", "0", "--conf", "spark.driver.memory=1g"]) == 0
    assert started == [
        with_s3a_conf(
            {"spark.driver.memory": "1g"},
            s3a_conf(
                endpoint=moto_endpoint,
                region=REGION,
                path_style=True,
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
            ),
        )
    ]


class _FakeSpark:
    """Stands in for `SparkSession.builder` and the session it returns: notes what the builder is
    given, what is set on the Hadoop configuration, and which jars the session started with."""

    def __init__(self) -> None:
        self.built: dict[str, str] = {}
        self.hadoop: dict[str, str] = {}
        self.started_with: dict[str, str] | None = None
        self.sparkContext = self
        self.conf = self
        self._jsc = self

    # builder
    def appName(self, name: str) -> _FakeSpark:
        return self

    def master(self, master: str) -> _FakeSpark:
        return self

    def config(self, key: str, value: str) -> _FakeSpark:
        self.built[key] = value
        return self

    def getOrCreate(self) -> _FakeSpark:
        if self.started_with is None:  # the first session starts with the builder's conf
            self.started_with = dict(self.built)
        return self

    # session, context and their confs
    def getConf(self) -> dict[str, str]:
        return self.started_with or {}

    def setLogLevel(self, level: str) -> None:
        pass

    def hadoopConfiguration(self) -> _FakeSpark:
        return self

    def set(self, key: str, value: str) -> None:
        if key.startswith("spark."):
            return  # the session's runtime conf (ODF options)
        self.hadoop[key] = value


def test_the_local_engine_sets_the_keys_on_its_running_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process engine's keys never go to the session builder (PySpark would put them on the
    JVM's command line): they are set on the running session's Hadoop configuration. A session that
    started without the jars cannot get them: a clear error says so."""
    import airflow_odf.engine.session as session
    from airflow_odf.engine.local_runner import LocalSparkRunner

    _jars_or_fail()
    fake = _FakeSpark()
    monkeypatch.setattr(session.SparkSession, "builder", fake)
    conf = s3a_conf(
        endpoint="http://127.0.0.1:9000",
        region=REGION,
        path_style=True,
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
    )
    session.get_session("local[1]", conf)
    assert not S3A_SECRET_KEYS & fake.built.keys()
    for key in CLASS_PATH_KEYS:
        assert fake.built[key] == conf[key]
    hadoop_conf = {
        key.removeprefix("spark.hadoop."): value for key, value in conf.items() if "hadoop." in key
    }
    assert fake.hadoop == hadoop_conf
    fake.started_with = {}  # a session that started without the jars
    with pytest.raises(session.SessionWithoutJars) as e:
        session.get_session("local[1]", conf)
    assert str(e.value).startswith("this process's Spark session started without ")
    assert "hadoop-aws-" in str(e.value) and "(jars load only when a session starts)" in str(e.value)
    # the in-process runner answers it as an engine-setup error: one line, which no retry here cures
    response = json.loads(LocalSparkRunner("local[1]", conf).run(json.dumps({"version": 1}), Path(".")))
    assert response["error"] == {"kind": "engine-setup", "message": str(e.value)}
