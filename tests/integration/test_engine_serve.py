"""`odf engine serve` as a real process: it prints its URL once the server accepts connections, a Spark
Connect client runs a query on it with the ODF session options, and SIGTERM stops the server and its JVM
(exit code 0, port free). Its errors — port in use, no Java, no Spark — are one line, exit code 2. With a
token ($ODF_ENGINE_TOKEN), which no command line and no output shows, it refuses clients without it (one
line naming the server and the refusal) and serves those that send it: in the URL or as the password of
a `spark_connect` connection."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from pyspark.errors import AnalysisException

from airflow_odf.engine.connect_runner import connect_mode, open_session
from airflow_odf.engine.errors import ConnectTokenRefusedError
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.engine_client.connect_server import TOKEN_CONF, TOKEN_VARIABLE, free_port
from airflow_odf.odf.engine_client.runner import EngineRunError
from airflow_odf.odf.format.manifests import read_single
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from tests.connections import spark_connect_conn

ODF = Path(sys.executable).parent / "odf"
SENSORS = Path(__file__).parents[2] / "dags_examples" / "manifests" / "com.example.sensors.yaml"
READING = '{"measured_at": "2024-01-02T00:00:00Z", "sensor_id": "a", "celsius": 1.5}\n'
TOKEN = "odf-test-token-7c41e9"


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(ODF), "engine", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


@pytest.fixture
def listening_socket() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_serve_prints_its_url_serves_queries_and_stops_on_sigterm() -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from airflow_odf.engine.connect_runner import connect_mode

    proc = serve("--port", "0", "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=3")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # printed once the server accepts connections
        match = re.fullmatch(r"sc://127\.0\.0\.1:(\d+)", url)
        assert match, (url, proc.poll())
        port = int(match.group(1))
        jvms = psutil.Process(proc.pid).children(recursive=True)
        assert [p for p in jvms if p.name() == "java"], "the server runs in a child JVM"

        # a bare session of the server (not the runner's: those set the ODF options themselves), in
        # connect_mode: pyspark's classic builder.remote() would switch this whole process to Connect
        with connect_mode():
            spark = ConnectSession.builder.remote(url).create()
            try:
                assert spark.range(10).selectExpr("sum(id) AS total").collect()[0]["total"] == 45
                # the ODF session options are the defaults of every client session; --conf adds to them
                assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
                assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MILLIS"
                assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
            finally:
                spark.stop()
        assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ  # the process is not left in Connect mode

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert out == "", "stdout holds the URL line only"
    assert not [p for p in jvms if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not accepts_connections(port)


def test_serve_refuses_a_port_in_use(listening_socket: int) -> None:
    proc = serve("--port", str(listening_socket))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    assert err.splitlines() == [
        f"port {listening_socket} on 127.0.0.1 is in use: stop what listens there or choose another port "
        "(--port, 0 picks a free one)"
    ]


@pytest.mark.parametrize(
    ("variable", "phrase"),
    [("JAVA_HOME", "no Java found"), ("SPARK_HOME", "has no jars/ folder")],
)
def test_serve_without_java_or_spark_says_so_in_one_line(tmp_path: Path, variable: str, phrase: str) -> None:
    env = {**os.environ, variable: str(tmp_path)}
    proc = serve("--port", str(free_port("127.0.0.1")), env=env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cannot start a Spark Connect server: "), err
    assert phrase in lines[0]


def cli_ingest(tmp_path: Path, remote: str) -> subprocess.CompletedProcess[str]:
    """`odf ingest` of one reading into a new repository, on the Connect server `remote`."""
    repo, data = tmp_path / "repo", tmp_path / "s.ndjson"
    data.write_text(READING)
    for argv in (["init", "--repo", repo], ["add", "--repo", repo, SENSORS]):
        subprocess.run([str(ODF), *map(str, argv)], check=True, capture_output=True)
    return subprocess.run(
        [
            str(ODF),
            "ingest",
            "--repo",
            str(repo),
            "com.example.sensors",
            str(data),
            "--engine",
            "spark-connect",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ODF_SPARK_REMOTE": remote},
    )


def test_an_unreachable_server_fails_the_command_in_one_line_naming_its_url(tmp_path: Path) -> None:
    url = f"sc://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    proc = cli_ingest(tmp_path, url)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and url in lines[0] and "odf engine serve" in lines[0], proc.stderr


@dataclass
class TokenServer:
    url: str
    process: subprocess.Popen[str]
    log: Path  # its stderr


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    """`odf engine serve` with the token in $ODF_ENGINE_TOKEN (its log in a file: a pipe nobody reads
    could fill up and stall the server)."""
    log = tmp_path_factory.mktemp("token-server") / "stderr.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [str(ODF), "engine", "serve", "--port", "0", "--master", "local[1]"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "ODF_ENGINE_TOKEN": TOKEN},
        )
    try:
        assert proc.stdout is not None
        yield TokenServer(proc.stdout.readline().strip(), proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_serve_keeps_its_token_off_command_lines_and_output(token_server: TokenServer) -> None:
    url = token_server.url
    assert re.fullmatch(r"sc://127\.0\.0\.1:\d+", url), (url, token_server.process.poll())
    server = psutil.Process(token_server.process.pid)
    processes = [p for p in (server, *server.children(recursive=True)) if p.status() != psutil.STATUS_ZOMBIE]
    assert not [p.cmdline() for p in processes if TOKEN in " ".join(p.cmdline())]  # `ps` shows them all
    [jvm] = [p for p in processes if p.name() == "java"]
    assert TOKEN not in "".join(jvm.environ().values())  # a query could read its environment
    cmdline = jvm.cmdline()
    properties = Path(cmdline[cmdline.index("--properties-file") + 1])  # where it read its token
    assert not properties.exists() and not properties.parent.exists()  # removed once it served
    log = token_server.log.read_text()
    assert f"clients must send the server's token: {url}/;token=TOKEN" in log
    assert TOKEN not in log


def test_no_query_and_no_conf_read_of_a_client_yields_the_server_s_token(token_server: TokenServer) -> None:
    """Tried as an attacker would, with the real server: the conf API (redacted by the guard's
    interceptor), SET (Spark's redaction), the environment and system properties (reflection: refused by
    the guard), variable substitution (off); a client that loosens the redaction is refused every query;
    a query that would stop the server is refused and the server serves the next client."""
    with connect_mode():
        spark = open_session(f"{token_server.url}/;token={TOKEN}")
        try:
            answers = [
                spark.conf.get(TOKEN_CONF),
                *spark.conf.getAll.values(),
                *(row["value"] for row in spark.sql(f"SET {TOKEN_CONF}").collect()),
                *(row["value"] for row in spark.sql("SET").collect()),
                *(row["value"] for row in spark.sql("SET -v").collect()),
                *spark.sql(
                    f"SELECT '${{sparkconf:{TOKEN_CONF}}}' AS v, '${{env:{TOKEN_VARIABLE}}}' AS w"
                ).first(),
            ]
            assert spark.conf.get(TOKEN_CONF) == "*********(redacted)"
            assert not [answer for answer in answers if answer and TOKEN in answer]
            for sql in (
                f"SELECT reflect('java.lang.System', 'getenv', '{TOKEN_VARIABLE}')",
                f"SELECT reflect('java.lang.System', 'getProperty', '{TOKEN_CONF}')",
                "SELECT java_method('java.lang.System', 'exit', 0)",
            ):
                with pytest.raises(AnalysisException, match="ODF_SQL_GUARD: reflection"):
                    spark.sql(sql).collect()
            spark.conf.set("spark.sql.legacy.setCommandRejectsSparkCoreConfs", "false")
            spark.conf.set("spark.redaction.regex", "nothing-matches")  # allowed by Spark now
            with pytest.raises(AnalysisException) as refused:
                spark.sql(f"SET {TOKEN_CONF}").collect()
            assert "ODF_SQL_GUARD: spark.sql.legacy.setCommandRejectsSparkCoreConfs was changed" in str(
                refused.value
            )
        finally:
            spark.stop()
        spark = open_session(f"{token_server.url}/;token={TOKEN}")  # the server is still there
        try:
            assert spark.sql("SELECT 1 AS one").first()["one"] == 1
        finally:
            spark.stop()


def test_a_server_with_a_token_refuses_clients_without_it(token_server: TokenServer, tmp_path: Path) -> None:
    url = token_server.url
    with connect_mode():
        with pytest.raises(ConnectTokenRefusedError) as refused:
            open_session(url)
        assert str(refused.value).startswith(
            f"Spark Connect server {url}: refused a client without a token; "
        )
        with pytest.raises(ConnectTokenRefusedError) as refused:
            open_session(f"{url}/;token=not-the-token")
        message = str(refused.value)
        assert message.startswith(f"Spark Connect server {url}: refused the token the client sent; ")
        assert "not-the-token" not in message and "unreachable" not in message

        spark = open_session(f"{url}/;token={TOKEN}")
        try:
            assert spark.range(10).selectExpr("sum(id) AS total").collect()[0]["total"] == 45
        finally:
            spark.stop()

    proc = cli_ingest(tmp_path, url)  # the command: one line, no traceback
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [str(ConnectTokenRefusedError(url, token_sent=False))]


def test_the_token_as_password_of_a_spark_connect_connection(
    token_server: TokenServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_odf.hooks.spark_engine import SparkConnectEngineRunner

    for conn_id, password in (("odf_token_right", TOKEN), ("odf_token_wrong", "not-the-token")):
        connection = spark_connect_conn(token_server.url, password=password)
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    data = tmp_path / "s.ndjson"
    data.write_text(READING)
    repo = Repository.init(tmp_path / "repo")
    repo.add(read_single(SENSORS, "DatasetSnapshot"))
    name, options = "com.example.sensors", IngestOptions(work_dir=tmp_path / "work")

    head = repo.dataset(name).head()
    with pytest.raises(EngineRunError) as refused:
        push_ingest(repo.dataset(name), name, SparkConnectEngineRunner("odf_token_wrong"), [data], options)
    assert "refused the token the client sent" in str(refused.value)
    assert "not-the-token" not in str(refused.value)
    assert repo.dataset(name).head() == head  # nothing committed

    result = push_ingest(
        repo.dataset(name), name, SparkConnectEngineRunner("odf_token_right"), [data], options
    )
    assert result.records == 1
    events = [block.event for _, block in repo.dataset(name).iter_blocks()]
    [new_data] = [e.new_data for e in events if getattr(e, "new_data", None) is not None]
    assert read_slice(repo.dataset(name), new_data).select(["offset", "sensor_id"]).to_pylist() == [
        {"offset": 0, "sensor_id": "a"}
    ]
