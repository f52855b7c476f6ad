"""The engine options of the `odf` commands: `--engine spark-connect --remote URL` (or
$ODF_SPARK_REMOTE), their errors, and the options of `odf engine serve` — parsed without starting Spark."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.errors import CommandError
from airflow_odf.cli.main import build_parser, main

PUSH_MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: cities
  kind: Root
  metadata:
    - kind: AddPushSource
      sourceName: default
      read:
        kind: Csv
        header: true
        ddlSchema: [ "event_time TIMESTAMP", "city STRING" ]
      merge:
        kind: Ledger
        primaryKey: [ city ]
"""


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(parents=[engine_options()])
    return parser.parse_args(argv)


def test_spark_connect_takes_its_url_from_remote_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ODF_SPARK_REMOTE", raising=False)
    args = parse("--engine", "spark-connect", "--remote", "sc://127.0.0.1:15002")
    assert (args.engine, args.remote) == ("spark-connect", "sc://127.0.0.1:15002")
    LazyRunner(args)  # accepted; nothing connects before the first request

    monkeypatch.setenv("ODF_ENGINE", "spark-connect")
    monkeypatch.setenv("ODF_SPARK_REMOTE", "sc://spark-connect.internal:15002/;token=abc;use_ssl=true")
    args = parse()
    assert (args.engine, args.remote) == (
        "spark-connect",
        "sc://spark-connect.internal:15002/;token=abc;use_ssl=true",
    )
    assert parse("--remote", "sc://other:1").remote == "sc://other:1"  # the option wins


@pytest.mark.parametrize(
    ("remote", "message"),
    [
        (
            None,
            "--engine spark-connect needs the server's URL: --remote sc://HOST:PORT or $ODF_SPARK_REMOTE "
            "(start a server with `odf engine serve`)",
        ),
        ("127.0.0.1:15002", "--remote 127.0.0.1:15002: expected a Spark Connect URL, sc://HOST:PORT"),
    ],
)
def test_spark_connect_without_a_valid_url_is_refused(
    monkeypatch: pytest.MonkeyPatch, remote: str | None, message: str
) -> None:
    monkeypatch.delenv("ODF_SPARK_REMOTE", raising=False)
    args = parse("--engine", "spark-connect", *(["--remote", remote] if remote else []))
    with pytest.raises(CommandError) as e:
        LazyRunner(args)
    assert str(e.value) == message


def test_the_other_engines_ignore_remote() -> None:
    LazyRunner(parse("--engine", "local", "--remote", "not-a-url"))


def test_odf_ingest_on_spark_connect_without_url_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ODF_SPARK_REMOTE", raising=False)
    repo, manifest, data = tmp_path / "repo", tmp_path / "cities.yaml", tmp_path / "c.csv"
    manifest.write_text(PUSH_MANIFEST)
    data.write_text("event_time,city\n2020-01-01T00:00:00Z,A\n")
    assert main(["init", "--repo", str(repo)]) == 0
    assert main(["add", "--repo", str(repo), str(manifest)]) == 0
    capsys.readouterr()
    assert main(["ingest", "--repo", str(repo), "cities", str(data), "--engine", "spark-connect"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "--engine spark-connect needs the server's URL: --remote sc://HOST:PORT or $ODF_SPARK_REMOTE "
        "(start a server with `odf engine serve`)"
    ]


def test_serve_options() -> None:
    args = build_parser().parse_args(["engine", "serve"])
    assert (args.master, args.host, args.port, args.conf) == ("local[*]", "127.0.0.1", 15002, [])
    args = build_parser().parse_args(
        [
            "engine", "serve", "--master", "spark://10.0.0.5:7077", "--host", "0.0.0.0", "--port", "0",
            "--conf", "spark.driver.memory=4g", "--conf", "spark.sql.shuffle.partitions=8",
        ]
    )  # fmt: skip
    assert (args.master, args.host, args.port) == ("spark://10.0.0.5:7077", "0.0.0.0", 0)
    assert args.conf == [("spark.driver.memory", "4g"), ("spark.sql.shuffle.partitions", "8")]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "70000"], "argument --port: '70000': expected a port number, 0 to 65535"),
        (["--port", "-1"], "argument --port: '-1': expected a port number, 0 to 65535"),
        (["--conf", "spark.driver.memory"], "argument --conf: 'spark.driver.memory': expected key=value"),
    ],
)
def test_serve_option_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["engine", "serve", *argv])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
