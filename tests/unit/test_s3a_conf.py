"""The Spark conf that makes `s3a://` reach a store (`airflow_odf.utils.s3a`, `spark_s3a_conf`), and how
the runners keep its keys off command lines: property names as hadoop-aws 3.5.0 reads them, settings
from the credentials or the environment, the secrets in a 0600 properties file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from airflow_odf.odf.engine_client.connect_server import ConnectServer
from airflow_odf.odf.engine_client.runner import SparkSubmitRunner
from airflow_odf.odf.storage.url import (
    SPARK_S3A_ENV,
    SparkS3aError,
    StoreCredentials,
    engine_scheme,
    spark_s3a_conf,
)
from airflow_odf.utils.s3a import (
    CLASS_PATH_KEYS,
    HADOOP_VERSION,
    S3A_SECRET_KEYS,
    s3a_conf,
    split_secrets,
    with_s3a_conf,
    write_secret_properties,
)

JARS = [f"hadoop-aws-{HADOOP_VERSION}.jar", "bundle-2.35.4.jar"]
S3A = "spark.hadoop.fs.s3a."


@pytest.fixture
def jars_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A jar cache as `scripts/s3a-jars` leaves it, and an environment without AWS settings."""
    folder = tmp_path / "jars"
    folder.mkdir()
    for jar in JARS:
        (folder / jar).write_bytes(b"jar")
    (folder / f"s3a-jars-{HADOOP_VERSION}.txt").write_text("\n".join(JARS) + "\n")
    monkeypatch.setenv("ODF_JARS_DIR", str(folder))
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        SPARK_S3A_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    return folder


def test_a_store_at_its_own_endpoint_with_keys(jars_dir: Path) -> None:
    conf = s3a_conf(
        endpoint="http://127.0.0.1:9000",
        region="eu-west-1",
        path_style=True,
        access_key="AK",
        secret_key="SK",
    )
    assert conf == {
        "spark.driver.extraClassPath": ":".join(str(jars_dir / jar) for jar in JARS),
        "spark.executor.extraClassPath": ":".join(str(jars_dir / jar) for jar in JARS),
        S3A + "path.style.access": "true",
        S3A + "endpoint": "http://127.0.0.1:9000",
        S3A + "connection.ssl.enabled": "false",
        S3A + "endpoint.region": "eu-west-1",
        S3A + "access.key": "AK",
        S3A + "secret.key": "SK",
        S3A + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    public, secrets = split_secrets(conf)
    assert secrets == {S3A + "access.key": "AK", S3A + "secret.key": "SK"}
    assert set(public) == set(conf) - S3A_SECRET_KEYS


def test_aws_itself_with_session_credentials_or_hadoops_default_chain(jars_dir: Path) -> None:
    temporary = s3a_conf(
        endpoint="https://s3.eu-west-1.amazonaws.com",
        region=None,
        path_style=False,
        access_key="AK",
        secret_key="SK",
        session_token="TOKEN",
    )
    assert temporary[S3A + "connection.ssl.enabled"] == "true"
    assert temporary[S3A + "session.token"] == "TOKEN"
    assert (
        temporary[S3A + "aws.credentials.provider"]
        == "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    )
    assert S3A + "endpoint.region" not in temporary
    chain = s3a_conf(endpoint=None, region="us-east-1", path_style=False)
    assert set(chain) == {*CLASS_PATH_KEYS, S3A + "path.style.access", S3A + "endpoint.region"}
    with pytest.raises(ValueError, match="both the access key id and the secret key"):
        s3a_conf(endpoint=None, region=None, path_style=False, access_key="AK")
    with pytest.raises(ValueError, match="http:// or https:// URL"):
        s3a_conf(endpoint="127.0.0.1:9000", region=None, path_style=True)


def test_the_tasks_own_conf_wins_and_its_jars_are_kept(jars_dir: Path) -> None:
    s3a = s3a_conf(endpoint=None, region=None, path_style=False)
    mine = {
        "spark.driver.extraClassPath": "/opt/my.jar",
        S3A + "path.style.access": "true",
        "spark.driver.memory": "2g",
    }
    merged = with_s3a_conf(mine, s3a)
    ours = [str(jars_dir / jar) for jar in JARS]
    assert merged["spark.driver.extraClassPath"] == ":".join(["/opt/my.jar", *ours])
    assert merged["spark.executor.extraClassPath"] == ":".join(ours)
    assert merged[S3A + "path.style.access"] == "true" and merged["spark.driver.memory"] == "2g"
    assert with_s3a_conf(mine, {}) == mine


def test_secrets_file_is_the_owners_only_and_escaped(tmp_path: Path) -> None:
    path = tmp_path / "secrets.properties"
    path.write_text("stale")  # replaced, not appended to
    write_secret_properties(path, {S3A + "secret.key": "a=b:c\\d #e", S3A + "session.token": " lead"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == (
        "spark.hadoop.fs.s3a.secret.key=a\\=b\\:c\\\\d #e\nspark.hadoop.fs.s3a.session.token=\\ lead\n"
    )


def test_repository_urls_and_the_environment(jars_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = StoreCredentials(
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
        region="us-east-1",
        endpoint_url="http://127.0.0.1:5000",
        engine_scheme="s3a",
    )
    conf = spark_s3a_conf("s3://bucket/odf", keys)
    assert conf[S3A + "endpoint"] == "http://127.0.0.1:5000" and conf[S3A + "path.style.access"] == "true"
    assert conf[S3A + "access.key"] == "AK" and conf[S3A + "endpoint.region"] == "us-east-1"
    # s3a off, or not an S3 repository: nothing
    assert spark_s3a_conf("s3://bucket/odf", StoreCredentials(endpoint_url="http://127.0.0.1:5000")) == {}
    assert spark_s3a_conf("file:///data/odf", keys) == {} and spark_s3a_conf("/data/odf", keys) == {}
    # the s3+http form names its endpoint; the rest comes from the environment, as for boto3
    monkeypatch.setenv(SPARK_S3A_ENV, "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV-AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ENV-SK")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert engine_scheme(StoreCredentials()) == "s3a"
    conf = spark_s3a_conf("s3+https://minio.internal:9000/bucket/odf")
    assert conf[S3A + "endpoint"] == "https://minio.internal:9000"
    assert conf[S3A + "connection.ssl.enabled"] == "true" and conf[S3A + "path.style.access"] == "true"
    assert (conf[S3A + "access.key"], conf[S3A + "secret.key"]) == ("ENV-AK", "ENV-SK")
    assert conf[S3A + "endpoint.region"] == "eu-central-1"
    # AWS itself: no endpoint, virtual-host addressing
    monkeypatch.setenv("AWS_ENDPOINT_URL", "")
    conf = spark_s3a_conf("s3://bucket/odf")
    assert S3A + "endpoint" not in conf and conf[S3A + "path.style.access"] == "false"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5001")
    assert spark_s3a_conf("s3://bucket/odf")[S3A + "endpoint"] == "http://127.0.0.1:5001"


def test_missing_jars_fail_with_what_to_run(jars_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ODF_JARS_DIR", str(jars_dir / "absent"))
    with pytest.raises(SparkS3aError) as e:
        spark_s3a_conf("s3://bucket/odf", StoreCredentials(engine_scheme="s3a"))
    assert str(e.value) == (
        f"spark_s3a: the s3a jars (hadoop-aws {HADOOP_VERSION}) are not in {jars_dir / 'absent'}: run "
        f"scripts/s3a-jars (in the provider's source tree) to fetch them into {jars_dir / 'absent'}"
    )


def test_runners_put_the_keys_in_a_file_not_on_the_command_line(jars_dir: Path, tmp_path: Path) -> None:
    conf = s3a_conf(
        endpoint="http://127.0.0.1:9000",
        region=None,
        path_style=True,
        access_key="AKID-ON-NO-LINE",
        secret_key="SECRET-ON-NO-LINE",
    )
    public, _ = split_secrets(conf)
    secrets_file = tmp_path / "secrets.properties"
    submit = SparkSubmitRunner("local[1]").command([], tmp_path / "py.zip", public, secrets_file)
    server = ConnectServer(conf=conf)
    assert server.conf == public  # the server keeps the keys for its file
    serve = server.command(tmp_path / "spark", tmp_path / "connect.jar", secrets_file)
    for cmd in (submit, serve):
        assert not any("ON-NO-LINE" in arg for arg in cmd), cmd
        at = cmd.index("--properties-file")
        assert cmd[at + 1 : at + 3] == [str(secrets_file), "--load-spark-defaults"]
        assert f"spark.driver.extraClassPath={conf['spark.driver.extraClassPath']}" in cmd
    assert "--properties-file" not in ConnectServer(conf=public).command(tmp_path, tmp_path / "connect.jar")
