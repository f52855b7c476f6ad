"""`odf ingest`, `odf pull` and `odf tail` on a real repository and the shared local SparkSession."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main

MANIFEST = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: {source_kind}
{source}
      read:
        kind: Csv
        header: true
        ddlSchema: [ "event_time TIMESTAMP", "city STRING", "population BIGINT" ]
      merge:
        kind: Ledger
        primaryKey: [ city ]
"""


def _add(repo: Path, tmp_path: Path, name: str, source_kind: str, source: str) -> None:
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(MANIFEST.format(name=name, source_kind=source_kind, source=source))
    assert main(["add", "--repo", str(repo), str(manifest)]) == 0


@pytest.fixture
def repo(tmp_path: Path, spark: SparkSession) -> Path:
    root = tmp_path / "repo"
    assert main(["init", "--repo", str(root)]) == 0
    return root


def test_ingest_and_tail(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add(repo, tmp_path, "cities", "AddPushSource", "      sourceName: default")
    data = tmp_path / "c.csv"
    data.write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-02T00:00:00Z,B,2\n")
    capsys.readouterr()
    args = ["ingest", "--repo", str(repo), "cities", str(data), "--format", "json", "--master", "local[2]"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dataset"] == "cities" and out["records"] == 2 and not out["up_to_date"]
    assert len(out["new_blocks"]) == 2 and out["new_head"] == out["new_blocks"][-1]
    assert set(out) == {
        "dataset",
        "dataset_id",
        "prev_head",
        "new_head",
        "new_blocks",
        "records",
        "up_to_date",
    }
    # Ledger: a second push of the same keys adds nothing
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["records"] == 0 and again["up_to_date"]

    assert main(["tail", "--repo", str(repo), "cities", "-n", "1", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["offset"], r["op"], r["city"], r["population"]) for r in rows] == [(1, 0, "B", 2)]
    assert main(["tail", "--repo", str(repo), "cities", "--format", "csv"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0] == ["offset", "op", "system_time", "event_time", "city", "population"]
    assert [row[4] for row in table[1:]] == ["A", "B"]
    assert main(["tail", "--repo", str(repo), "cities"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == table[0]


def test_pull_polling_source_and_errors(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.csv").write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1\n")
    source = f"      fetch:\n        kind: FilesGlob\n        path: {src}/*.csv"
    _add(repo, tmp_path, "polled", "SetPollingSource", source)
    capsys.readouterr()
    pull = ["pull", "--repo", str(repo), "polled", "--master", "local[2]", "--source-root", str(src)]
    assert main([*pull, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == 1
    assert main(pull) == 0
    assert "up to date" in capsys.readouterr().out

    (src / "b.csv").write_text("event_time,city,population\nnot-a-time,B,2\n")
    assert main(pull) == 2
    err = capsys.readouterr().err
    assert "b.csv" in err and "line 2" in err and "Traceback" not in err
    assert main(["pull", "--repo", str(repo), "polled", "--set-watermark", "yesterday"]) == 2
    assert "--set-watermark" in capsys.readouterr().err


def test_pull_resolves_a_relative_glob_from_the_source_root_in_any_working_directory(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: `path: in/*.csv` with `--source-root DIR` is DIR/in/*.csv, wherever the command runs."""
    src, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    (src / "in").mkdir(parents=True)
    elsewhere.mkdir()
    (src / "in" / "a.csv").write_text("event_time,city,population\n2020-01-01T00:00:00Z,A,1\n")
    _add(
        repo,
        tmp_path,
        "relative",
        "SetPollingSource",
        "      fetch:\n        kind: FilesGlob\n        path: in/*.csv",
    )
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    pull = ["pull", "--repo", str(repo), "relative", "--master", "local[2]", "--source-root", str(src)]
    assert main([*pull, "--format", "json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["records"] == 1
    assert main(["tail", "--repo", str(repo), "relative", "--format", "json"]) == 0
    assert [r["city"] for r in json.loads(capsys.readouterr().out)] == ["A"]
