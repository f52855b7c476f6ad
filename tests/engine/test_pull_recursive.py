"""`odf pull` of derivatives and whole pipelines (`--recursive`, `--all`) on the shared local SparkSession.

The pipeline: `cities` (a FilesGlob polling source over CSV files) -> `big` (cities of at least 10
inhabitants) -> `big.upper` (their names in upper case).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository

ROOT = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Root
  metadata:
    - kind: {source}
      read:
        kind: Csv
        header: true
        ddlSchema: [ "event_time TIMESTAMP", "city STRING", "population BIGINT" ]
      merge:
        kind: Append
"""
DERIVATIVE = """\
kind: DatasetSnapshot
version: 1
content:
  name: {name}
  kind: Derivative
  metadata:
    - kind: SetTransform
      inputs:
        - datasetRef: {input}
      transform:
        kind: Sql
        engine: spark
        query: "{query}"
"""
HEADER = "event_time,city,population\n"


def _add(repo: Path, tmp_path: Path, name: str, text: str) -> None:
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(text)
    assert main(["add", "--repo", str(repo), str(manifest)]) == 0


@pytest.fixture
def src(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "a.csv").write_text(HEADER + "2020-01-01T00:00:00Z,a,5\n2020-01-01T00:00:00Z,b,50\n")
    (folder / "b.csv").write_text(HEADER + "2020-01-02T00:00:00Z,c,500\n")
    return folder


@pytest.fixture
def repo(tmp_path: Path, src: Path, spark: SparkSession) -> Path:
    root = tmp_path / "repo"
    assert main(["init", "--repo", str(root)]) == 0
    polling = f"SetPollingSource\n      fetch:\n        kind: FilesGlob\n        path: {src}/*.csv"
    _add(root, tmp_path, "cities", ROOT.format(name="cities", source=polling))
    query = "SELECT event_time, city, population FROM cities WHERE population >= 10"
    _add(root, tmp_path, "big", DERIVATIVE.format(name="big", input="cities", query=query))
    query = "SELECT event_time, upper(city) AS city FROM big"
    _add(root, tmp_path, "big.upper", DERIVATIVE.format(name="big.upper", input="big", query=query))
    return root


def _text_pull(repo: Path, src: Path) -> list[str]:
    """The argv of a recursive `odf pull` of `big.upper` printing text, reading sources from `src`."""
    return ["pull", "--repo", str(repo), "-r", "big.upper", "--master", "local[2]", "--source-root", str(src)]


def _pull(repo: Path, capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> Any:
    """`odf pull ... --format json`: the printed JSON (stderr is left to `capsys`)."""
    capsys.readouterr()
    argv = ["pull", "--repo", str(repo), *args, "--format", "json", "--master", "local[2]"]
    argv += ["--source-root", str(repo.parent)]  # where the `src` fixture is
    assert main(argv) == code
    captured = capsys.readouterr()
    sys.stderr.write(captured.err)
    return json.loads(captured.out)


def _events(repo: Path, name: str) -> list[Any]:
    """The dataset's events, oldest first."""
    dataset = Repository.open(repo).dataset(name)
    return [b.event for _, b in reversed(list(dataset.iter_blocks()))]


def _rows(repo: Path, name: str, *columns: str) -> list[tuple[Any, ...]]:
    dataset = Repository.open(repo).dataset(name)
    slices = [
        e.new_data
        for e in _events(repo, name)
        if isinstance(e, model.AddData | model.ExecuteTransform) and e.new_data
    ]
    return [tuple(r[c] for c in columns) for s in slices for r in read_slice(dataset, s).to_pylist()]


def _offsets(event: Any) -> tuple[int, int] | None:
    interval = event.new_data.offset_interval if event.new_data else None
    return None if interval is None else (interval.start, interval.end)


def test_recursive_pull_updates_the_pipeline_in_order(
    repo: Path, src: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _pull(repo, capsys, "--recursive", "big.upper")
    assert [(d["dataset"], d["status"], d["depth"], d["records"]) for d in out] == [
        ("cities", "updated", 0, 3),
        ("big", "updated", 1, 2),
        ("big.upper", "updated", 2, 2),
    ]
    cities, big, upper = out
    # the root: SetDataSchema + one AddData per file; each derivative: SetDataSchema + ExecuteTransform
    assert len(cities["new_blocks"]) == 3 and len(big["new_blocks"]) == 2 and len(upper["new_blocks"]) == 2
    assert all(d["new_head"] == d["new_blocks"][-1] and d["message"] == "" for d in out)
    assert _rows(repo, "cities", "offset", "city") == [(0, "a"), (1, "b"), (2, "c")]
    assert _rows(repo, "big", "offset", "city", "population") == [(0, "b", 50), (1, "c", 500)]
    assert _rows(repo, "big.upper", "offset", "city") == [(0, "B"), (1, "C")]

    # each derivative consumed exactly its input's head as of this pull
    [big_run] = [e for e in _events(repo, "big") if isinstance(e, model.ExecuteTransform)]
    [consumed] = big_run.query_inputs
    assert str(consumed.new_block_hash) == cities["new_head"]
    assert (consumed.prev_offset, consumed.new_offset, _offsets(big_run)) == (None, 2, (0, 1))
    [upper_run] = [e for e in _events(repo, "big.upper") if isinstance(e, model.ExecuteTransform)]
    [consumed] = upper_run.query_inputs
    assert str(consumed.new_block_hash) == big["new_head"]
    assert (consumed.prev_offset, consumed.new_offset, _offsets(upper_run)) == (None, 1, (0, 1))

    again = _pull(repo, capsys, "-r", "big.upper")
    assert [(d["dataset"], d["status"], d["records"], d["new_blocks"]) for d in again] == [
        ("cities", "up-to-date", 0, []),
        ("big", "up-to-date", 0, []),
        ("big.upper", "up-to-date", 0, []),
    ]
    assert [d["new_head"] for d in again] == [d["new_head"] for d in out]
    for name in ("cities", "big", "big.upper"):
        assert verify_integrity(Repository.open(repo).dataset(name)) == []

    # new data: the next recursive pull carries only it down the pipeline
    (src / "c.csv").write_text(HEADER + "2020-01-03T00:00:00Z,d,70\n2020-01-03T00:00:00Z,e,7\n")
    capsys.readouterr()
    assert main(_text_pull(repo, src)) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"cities: 2 record(s) in 1 new block(s), head {Repository.open(repo).dataset('cities').head()}",
        f"big: 1 record(s) in 1 new block(s), head {Repository.open(repo).dataset('big').head()}",
        f"big.upper: 1 record(s) in 1 new block(s), head {Repository.open(repo).dataset('big.upper').head()}",
    ]
    assert _rows(repo, "big.upper", "offset", "city") == [(0, "B"), (1, "C"), (2, "D")]
    last = _events(repo, "big.upper")[-1]
    assert (last.prev_offset, last.query_inputs[0].prev_offset, last.query_inputs[0].new_offset) == (1, 1, 2)


def test_pulling_a_derivative_alone_transforms_only_it(
    repo: Path, src: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _pull(repo, capsys, "cities")["records"] == 3  # a single name: the dict of old
    heads = {n: str(Repository.open(repo).dataset(n).head()) for n in ("cities", "big.upper")}

    out = _pull(repo, capsys, "big")
    assert set(out) == {
        "dataset",
        "dataset_id",
        "prev_head",
        "new_head",
        "new_blocks",
        "records",
        "up_to_date",
        "input_offsets",
    }
    assert out["dataset"] == "big" and out["records"] == 2 and len(out["new_blocks"]) == 2
    assert list(out["input_offsets"].values()) == [[{"start": 0, "end": 2}]]  # all 3 records of cities
    assert _rows(repo, "big", "offset", "city") == [(0, "b"), (1, "c")]
    assert {
        n: str(Repository.open(repo).dataset(n).head()) for n in heads
    } == heads  # no ingest, no downstream

    # new source data is not ingested by a pull of the derivative: it stays up to date
    (src / "c.csv").write_text(HEADER + "2020-01-03T00:00:00Z,d,70\n")
    again = _pull(repo, capsys, "big", "--max-input-records", "1")
    assert again["up_to_date"] and again["new_head"] == out["new_head"]
    assert str(Repository.open(repo).dataset("cities").head()) == heads["cities"]

    # several names, not recursive: each is pulled, inputs first, nothing else
    out = _pull(repo, capsys, "big", "cities")
    assert [(d["dataset"], d["status"], d["records"]) for d in out] == [
        ("cities", "updated", 1),
        ("big", "updated", 1),
    ]
    assert str(Repository.open(repo).dataset("big.upper").head()) == heads["big.upper"]


def test_a_failure_skips_downstream_and_the_rest_runs(
    repo: Path, src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _add(
        repo,
        tmp_path,
        "pushed",
        ROOT.format(name="pushed", source="AddPushSource\n      sourceName: default"),
    )
    (src / "b.csv").write_text(HEADER + "not-a-time,c,500\n")
    out = _pull(repo, capsys, "--all", code=2)
    err = capsys.readouterr().err
    assert [(d["dataset"], d["status"]) for d in out] == [
        ("cities", "failed"),
        ("pushed", "up-to-date"),
        ("big", "skipped"),
        ("big.upper", "skipped"),
    ]
    failed, pushed, big, upper = out
    assert "b.csv" in failed["message"] and "line 2" in failed["message"]
    assert "new_head" not in failed  # no result: only the status and the message
    assert pushed["message"].startswith("no polling source") and pushed["records"] == 0
    assert big["message"] == upper["message"] == "skipped: upstream dataset 'cities' failed"
    # one line per failure on stderr, naming the dataset; no traceback
    failures = [line for line in err.splitlines() if "b.csv" in line]
    assert failures == [failed["message"]] and failures[0].startswith("cities: ") and "Traceback" not in err
    # the first file was committed before the failure; nothing downstream ran
    assert _rows(repo, "cities", "offset", "city") == [(0, "a"), (1, "b")]
    assert Repository.open(repo).dataset("big").state().schema is None

    # text: one line per dataset on stdout
    capsys.readouterr()
    assert main(_text_pull(repo, src)) == 2
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "cities: failed",
        "big: skipped: upstream dataset 'cities' failed",
        "big.upper: skipped: upstream dataset 'cities' failed",
    ]
    assert [line for line in captured.err.splitlines() if "b.csv" in line] == failures

    # a push-only root pulled alone: nothing to pull, not an error
    assert main(["pull", "--repo", str(repo), "pushed"]) == 0
    assert capsys.readouterr().out.startswith("pushed: up to date (no polling source")


def test_reset_derivatives_on_diverged_input(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pull(repo, capsys, "-r", "big")
    cities = Repository.open(repo).dataset("cities")
    [(_, last), (earlier, _)] = list(cities.iter_blocks())[:2]
    assert isinstance(last.event, model.AddData)
    assert main(["reset", "--repo", str(repo), "cities", str(earlier)]) == 0  # b.csv's block is gone

    capsys.readouterr()
    assert main(["pull", "--repo", str(repo), "big", "--master", "local[2]"]) == 2
    assert "reset or compacted" in capsys.readouterr().err
    out = _pull(repo, capsys, "big", "--reset-derivatives-on-diverged-input")
    assert not out["up_to_date"]
    assert _rows(repo, "big", "offset", "city") == [(0, "b")]  # re-processed from what cities holds now
    assert verify_integrity(Repository.open(repo).dataset("big")) == []
