"""`odf engine serve` as a real process: it prints its URL once the server accepts connections, a Spark
Connect client runs a query on it with the ODF session options, and SIGTERM stops the server and its JVM
(exit code 0, port free). Its errors — port in use, no Java, no Spark — are one line, exit code 2."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from airflow_odf.odf.engine_client.connect_server import free_port

ODF = Path(sys.executable).parent / "odf"


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


def test_an_unreachable_server_fails_the_command_in_one_line_naming_its_url(tmp_path: Path) -> None:
    pytest.importorskip(
        "airflow_odf.engine.connect_runner", reason="engineer A's SparkConnectRunner is not there yet"
    )
    repo, data = tmp_path / "repo", tmp_path / "s.ndjson"
    data.write_text('{"measured_at": "2024-01-02T00:00:00Z", "sensor_id": "a", "celsius": 1.5}\n')
    manifest = Path(__file__).parents[2] / "dags_examples" / "manifests" / "com.example.sensors.yaml"
    for argv in (["init", "--repo", repo], ["add", "--repo", repo, manifest]):
        subprocess.run([str(ODF), *map(str, argv)], check=True, capture_output=True)
    url = f"sc://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    proc = subprocess.run(
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
        timeout=60,
        env={**os.environ, "ODF_SPARK_REMOTE": url},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and url in lines[0] and "odf engine serve" in lines[0], proc.stderr
