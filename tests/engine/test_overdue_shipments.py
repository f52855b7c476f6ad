"""The kamu-cli `overdue_shipments` example, adapted to Spark SQL, end to end through the `odf` command.

dags_examples/overdue_shipments is copied to tmp_path (its FilesGlob paths are relative to the working
directory, and the incremental steps add files). Expected rows are computed by hand from the CSV files:
an order is overdue when the shipments dated within [order time, order time + 2 days] do not add up to
its quantity; rows are per order and 1-day window of the order time.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from airflow_odf.cli.main import main
from airflow_odf.odf.chain.data_access import read_slice, tail
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import manifest_to_plain
from airflow_odf.odf.repo.repository import Repository
from tests.paths import REPO, UPSTREAM, needs_upstream

EXAMPLE = REPO / "dags_examples" / "overdue_shipments"
ORDERS = "com.acme.orders"
SHIPMENTS = "com.acme.shipments"
OVERDUE = "com.acme.shipments.overdue"
COLUMNS = [
    "offset",
    "op",
    "system_time",
    "order_time",
    "order_id",
    "num_shipments",
    "first_shipment",
    "last_shipment",
    "order_quantity",
    "shipped_quantity_total",
]


def _t(text: str) -> datetime:
    """A UTC timestamp as pyarrow reads the data back."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """Runs an `odf` data command with `--format json`; returns its report."""
    capsys.readouterr()
    assert main([*args, "--master", "local[2]", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _pull(capsys: pytest.CaptureFixture[str], repo: Path, name: str) -> dict[str, Any]:
    """`odf pull` of a root (from the working directory, where its relative glob points)."""
    return _cli(capsys, "pull", "--repo", str(repo), name)


def _transform(capsys: pytest.CaptureFixture[str], repo: Path) -> dict[str, Any]:
    """`odf transform` of the derivative."""
    return _cli(capsys, "transform", "--repo", str(repo), OVERDUE)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Output records without system_time (the wall clock of the run)."""
    return [tuple(r[c] for c in COLUMNS if c != "system_time") for r in table.to_pylist()]


def _head_event(repo: Repository, name: str) -> Any:
    """The event of the dataset's head block."""
    dataset = repo.dataset(name)
    head = dataset.head()
    assert head is not None
    return dataset.block(head).event


def _input(
    repo: Repository, execute: model.ExecuteTransform, name: str
) -> tuple[str | None, str | None, int | None, int | None]:
    """The (prev block, new block, prev offset, new offset) that `execute` recorded for input `name`."""
    [consumed] = [i for i in execute.query_inputs if i.dataset_id == repo.resolve(name)]
    return (
        None if consumed.prev_block_hash is None else str(consumed.prev_block_hash),
        None if consumed.new_block_hash is None else str(consumed.new_block_hash),
        consumed.prev_offset,
        consumed.new_offset,
    )


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example, as the working directory (FilesGlob paths are relative to it).

    The shared in-process JVM started elsewhere: this also shows that relative globs reach the engine
    as absolute paths.
    """
    copy = tmp_path / "overdue_shipments"
    shutil.copytree(EXAMPLE, copy)
    monkeypatch.chdir(copy)
    return copy


@needs_upstream
def test_root_manifests_are_upstream_verbatim() -> None:
    """The roots are the upstream manifests under a header comment (CHANGES.md: no change)."""
    upstream = UPSTREAM / "kamu-cli" / "examples" / "overdue_shipments"
    for name in (ORDERS, SHIPMENTS):
        ours = (EXAMPLE / "manifests" / f"{name}.yaml").read_text().splitlines(keepends=True)
        assert (
            "".join(line for line in ours if not line.startswith("#"))
            == (upstream / f"{name}.yaml").read_text()
        )


def test_overdue_shipments_end_to_end(
    example: Path, tmp_path: Path, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """init, add, pull both roots, transform; then two incremental runs and a recompute in one batch."""
    root = tmp_path / "repo"
    assert main(["init", "--repo", str(root)]) == 0
    manifests = sorted(str(p) for p in (example / "manifests").glob("*.yaml"))
    assert len(manifests) == 3
    assert main(["add", "--repo", str(root), *manifests]) == 0
    repo = Repository.open(root)

    # -- run 1: every file of the example; one AddData per file (after the SetDataSchema)
    orders = _pull(capsys, root, ORDERS)
    shipments = _pull(capsys, root, SHIPMENTS)
    assert (orders["records"], len(orders["new_blocks"])) == (6, 3)
    assert (shipments["records"], len(shipments["new_blocks"])) == (7, 5)
    first = _transform(capsys, root)
    assert first["records"] == 3 and first["prev_head"] is not None
    assert len(first["new_blocks"]) == 2  # SetDataSchema, ExecuteTransform

    overdue = repo.dataset(OVERDUE)
    schema_event = overdue.block(overdue.block(overdue.head()).prev_block_hash).event
    assert isinstance(schema_event, model.SetDataSchema)
    fields = manifest_to_plain(schema_event)["content"]["schema"]["fields"]
    timestamp = {"kind": "Timestamp", "unit": "Millisecond", "timezone": "UTC"}
    int64 = {"kind": "Int64"}
    assert [(f["name"], f["type"]) for f in fields] == [
        ("offset", int64),
        ("op", {"kind": "Int32"}),
        ("system_time", timestamp),
        ("order_time", {"kind": "Option", "inner": timestamp}),
        ("order_id", {"kind": "Option", "inner": int64}),
        ("num_shipments", int64),  # count(*) is never null
        ("first_shipment", {"kind": "Option", "inner": timestamp}),
        ("last_shipment", {"kind": "Option", "inner": timestamp}),
        ("order_quantity", {"kind": "Option", "inner": int64}),
        ("shipped_quantity_total", {"kind": "Option", "inner": int64}),
    ]

    execute = _head_event(repo, OVERDUE)
    assert isinstance(execute, model.ExecuteTransform)
    assert [i.dataset_id for i in execute.query_inputs] == [repo.resolve(ORDERS), repo.resolve(SHIPMENTS)]
    assert _input(repo, execute, ORDERS) == (None, orders["new_head"], None, 5)
    assert _input(repo, execute, SHIPMENTS) == (None, shipments["new_head"], None, 6)
    assert execute.prev_offset is None and execute.new_data is not None
    assert (execute.new_data.offset_interval.start, execute.new_data.offset_interval.end) == (0, 2)
    # min(orders watermark = last order time, shipments watermark = last shipment time)
    assert execute.new_watermark is not None
    assert execute.new_watermark.isoformat() == "2024-03-02T20:00:00Z"

    table = read_slice(overdue, execute.new_data)
    assert table.column_names == COLUMNS
    run1 = [
        # order 2: 20 ordered, 15 shipped in time (the other 5 on day 3, 30 min late)
        (0, 0, _t("2024-03-01T00:00:00"), 2, 1, _t("2024-03-02T10:00:00"), _t("2024-03-02T10:00:00"), 20, 15),
        # order 3: never shipped; count(*) counts the order's own row, as upstream
        (1, 0, _t("2024-03-01T00:00:00"), 3, 1, None, None, 5, 0),
        # order 5: shipped in full, but 1 hour after its 2 days
        (2, 0, _t("2024-03-02T00:00:00"), 5, 1, None, None, 12, 0),
    ]  # not overdue: 1 (one shipment), 4 (two shipments), 6 (shipped exactly at +2 days: BETWEEN includes it)
    assert _rows(table) == run1
    assert len({r["system_time"] for r in table.to_pylist()}) == 1

    # -- run 2: one new file per root; only their records are consumed, output offsets continue
    (example / "data" / "orders-2024-03-06.csv").write_text(
        "event_time,order_id,quantity\n"
        "2024-03-06T10:00:00Z,7,4\n"
        "2024-03-06T12:00:00Z,8,9\n"
        "2024-03-07T08:00:00Z,9,3\n"
    )
    (example / "data" / "shipments-2024-03-06.csv").write_text(
        "event_time,shipment_id,order_id,quantity\n2024-03-06T18:00:00Z,108,7,4\n2024-03-06T21:00:00Z,109,8,6\n"
    )
    orders2 = _pull(capsys, root, ORDERS)
    shipments2 = _pull(capsys, root, SHIPMENTS)
    assert orders2["prev_head"] == orders["new_head"] and orders2["records"] == 3
    assert shipments2["prev_head"] == shipments["new_head"] and shipments2["records"] == 2
    second = _transform(capsys, root)
    assert second["records"] == 2 and len(second["new_blocks"]) == 1

    execute2 = _head_event(repo, OVERDUE)
    assert _input(repo, execute2, ORDERS) == (orders["new_head"], orders2["new_head"], 5, 8)
    assert _input(repo, execute2, SHIPMENTS) == (shipments["new_head"], shipments2["new_head"], 6, 8)
    assert execute2.prev_offset == 2
    assert (execute2.new_data.offset_interval.start, execute2.new_data.offset_interval.end) == (3, 4)
    assert execute2.new_watermark.isoformat() == "2024-03-06T21:00:00Z"
    run2 = [
        # order 8: 9 ordered, 6 shipped
        (3, 0, _t("2024-03-06T00:00:00"), 8, 1, _t("2024-03-06T21:00:00"), _t("2024-03-06T21:00:00"), 9, 6),
        # order 9: no shipment in this run although its 2 days are not over (batch semantics, CHANGES.md)
        (4, 0, _t("2024-03-07T00:00:00"), 9, 1, None, None, 3, 0),
    ]  # not overdue: 7 (shipped in full the same day)
    assert _rows(read_slice(overdue, execute2.new_data)) == run2

    # -- run 3: only a shipment, in time for order 9 of run 2. A run sees only its own records: it does
    # not meet order 9 (committed in an earlier run), so nothing is output and order 9 stays overdue.
    (example / "data" / "shipments-2024-03-08.csv").write_text(
        "event_time,shipment_id,order_id,quantity\n2024-03-08T10:00:00Z,110,9,3\n"
    )
    assert _pull(capsys, root, ORDERS)["up_to_date"]
    shipments3 = _pull(capsys, root, SHIPMENTS)
    third = _transform(capsys, root)
    assert third["records"] == 0 and len(third["new_blocks"]) == 1
    execute3 = _head_event(repo, OVERDUE)
    assert isinstance(execute3, model.ExecuteTransform) and execute3.new_data is None
    assert _input(repo, execute3, ORDERS) == (orders2["new_head"], None, 8, None)
    assert _input(repo, execute3, SHIPMENTS) == (shipments2["new_head"], shipments3["new_head"], 8, 9)
    assert execute3.new_watermark.isoformat() == "2024-03-07T08:00:00Z"  # orders' is now the minimum

    everything = tail(overdue, 100)
    assert everything is not None and _rows(everything) == run1 + run2
    assert _transform(capsys, root)["up_to_date"]
    for name in (ORDERS, SHIPMENTS, OVERDUE):
        assert main(["verify", "--repo", str(root), name, "--integrity"]) == 0

    # -- the remedy CHANGES.md gives: reset the derivative to before its first transform and transform
    # again, so that one run sees every order and shipment; order 9 is then matched with shipment 110
    # and is not overdue (the answer of the upstream streaming job).
    assert main(["reset", "--repo", str(root), OVERDUE, first["prev_head"]]) == 0
    again = _transform(capsys, root)
    assert again["records"] == 4 and len(again["new_blocks"]) == 2
    execute4 = _head_event(repo, OVERDUE)
    assert _input(repo, execute4, ORDERS) == (None, orders2["new_head"], None, 8)
    assert _input(repo, execute4, SHIPMENTS) == (None, shipments3["new_head"], None, 9)
    renumbered = [(i, *row[1:]) for i, row in enumerate([*run1, run2[0]])]
    assert _rows(read_slice(overdue, execute4.new_data)) == renumbered
    assert main(["verify", "--repo", str(root), OVERDUE, "--integrity"]) == 0
