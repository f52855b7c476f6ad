"""Ingest end to end: core planning and commit, the engine on the shared local SparkSession.

Every test checks what lands in the dataset: blocks (offsets, hashes, watermarks, checkpoints, source
state), the data files (rows, op codes, system columns), and that bad input commits nothing.
"""

from __future__ import annotations

import http.server
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.parquet_hashes import logical_hash_of_parquet, physical_hash_of_file
from airflow_odf.odf.ingest.fetch.fetcher import SourceNotFoundError, SourceUnreachableError
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.polling import pull_polling
from airflow_odf.odf.ingest.push import push_ingest, push_ingest_bytes
from airflow_odf.odf.operation import IngestError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.evolution import SchemaEvolutionError

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
T1 = Timestamp.parse("2024-03-01T10:00:00.123456Z")
T2 = Timestamp.parse("2024-03-02T10:00:00Z")
T3 = Timestamp.parse("2024-03-03T10:00:00Z")


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def _options(tmp_path: Path, **kwargs: Any) -> IngestOptions:
    """The test's directory is the task's source_dir: the one its local sources may read."""
    return IngestOptions(work_dir=tmp_path / "work", source_dir=tmp_path, **kwargs)


def _push_dataset(repo: Repository, name: str, read: Any, merge: Any, *extra: Any) -> Dataset:
    events = [*extra, model.AddPushSource(source_name="default", read=read, merge=merge)]
    repo.add(model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=events), system_time=T0)
    return repo.dataset(name)


def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _events(dataset: Dataset) -> list[Any]:
    return [b.event for _, b in reversed(list(dataset.iter_blocks()))]


def _rows(dataset: Dataset) -> list[dict[str, Any]]:
    slices = [e.new_data for e in _events(dataset) if isinstance(e, model.AddData) and e.new_data]
    return [row for s in slices for row in read_slice(dataset, s).to_pylist()]


def _changes(dataset: Dataset, *columns: str) -> list[tuple]:
    return [(r["offset"], r["op"], *(r[c] for c in columns)) for r in _rows(dataset)]


CSV_READ = model.ReadStepCsv(
    header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"]
)


def test_push_append_commits_schema_then_data(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    dataset = _push_dataset(repo, "cities", CSV_READ, model.MergeStrategyAppend())
    head_before = dataset.head()
    data = _csv(
        tmp_path / "in.csv",
        "event_time,city,population\n2020-01-01T00:00:00Z,B,2000\n2019-01-01T00:00:00Z,A,1000\n,C,3000\n",
    )
    result = push_ingest(dataset, "cities", runner, [data], _options(tmp_path), system_time=T1)
    assert result.prev_head == str(head_before)
    assert len(result.new_blocks) == 2 and result.records == 3 and not result.up_to_date
    assert result.as_dict()["new_head"] == str(dataset.head())
    schema_event, add_data = _events(dataset)[-2:]
    assert isinstance(schema_event, model.SetDataSchema)
    names = [f.name for f in schema_event.schema.fields]
    assert names == ["offset", "op", "system_time", "event_time", "city", "population"]
    assert isinstance(add_data, model.AddData)
    assert add_data.prev_offset is None and add_data.prev_checkpoint is None
    assert add_data.new_data.offset_interval == model.OffsetInterval(start=0, end=2)
    # the null event time is filled with the push event time (the system time): max event time
    assert add_data.new_watermark == Timestamp.parse("2024-03-01T10:00:00.123Z")
    assert add_data.extra["airflow-provider-odf.dev/engine"]["name"] == "spark"
    path = dataset.store.local_path(f"data/{add_data.new_data.physical_hash}")
    assert physical_hash_of_file(path) == add_data.new_data.physical_hash
    assert logical_hash_of_parquet(path) == add_data.new_data.logical_hash
    assert add_data.new_data.size == path.stat().st_size
    table = pq.read_table(path)
    assert table.schema.field("offset").type == pa.int64()
    assert table.schema.field("op").type == pa.int32()
    assert table.schema.field("system_time").type == pa.timestamp("ms", tz="UTC")
    rows = table.to_pylist()
    # offsets follow event time order (nulls were filled first), as the reference assigns them
    assert [(r["offset"], r["op"], r["city"]) for r in rows] == [(0, 0, "A"), (1, 0, "B"), (2, 0, "C")]
    assert {r["system_time"] for r in rows} == {datetime(2024, 3, 1, 10, 0, 0, 123000, tzinfo=timezone.utc)}
    assert dataset.block(dataset.head()).system_time == T1
    assert verify_integrity(dataset) == []

    more = _csv(tmp_path / "more.csv", "event_time,city,population\n2021-01-01T00:00:00Z,D,4000\n")
    again = push_ingest(dataset, "cities", runner, [more], _options(tmp_path), system_time=T2)
    assert len(again.new_blocks) == 1 and again.records == 1
    last = _events(dataset)[-1]
    assert last.prev_offset == 2 and last.new_data.offset_interval == model.OffsetInterval(start=3, end=3)
    # the watermark never moves back
    assert last.new_watermark == Timestamp.parse("2024-03-01T10:00:00.123Z")


def test_event_time_from_push_option(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING"])
    dataset = _push_dataset(repo, "names", read, model.MergeStrategyAppend())
    data = _csv(tmp_path / "in.csv", "city\nX\nY\n")
    push_ingest(dataset, "names", runner, [data], _options(tmp_path), event_time=T2, system_time=T3)
    rows = _rows(dataset)
    assert [r["event_time"] for r in rows] == [datetime(2024, 3, 2, 10, tzinfo=timezone.utc)] * 2
    assert [r["city"] for r in rows] == ["X", "Y"]


def test_snapshot_merges_through_checkpoints(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    dataset = _push_dataset(repo, "census", read, model.MergeStrategySnapshot(primary_key=["city"]))
    opts = _options(tmp_path)
    push_ingest(
        dataset,
        "census",
        runner,
        [_csv(tmp_path / "1.csv", "city,population\nA,1000\nB,2000\nC,3000\n")],
        opts,
        event_time=T1,
        system_time=T1,
    )
    push_ingest(
        dataset,
        "census",
        runner,
        [_csv(tmp_path / "2.csv", "city,population\nA,1000\nB,2500\nD,4000\n")],
        opts,
        event_time=T2,
        system_time=T2,
    )
    unchanged = push_ingest(
        dataset,
        "census",
        runner,
        [_csv(tmp_path / "3.csv", "city,population\nA,1000\nB,2500\nD,4000\n")],
        opts,
        event_time=T3,
        system_time=T3,
    )
    assert unchanged.up_to_date and unchanged.new_blocks == []
    assert _changes(dataset, "city", "population") == [
        (0, 0, "A", 1000),
        (1, 0, "B", 2000),
        (2, 0, "C", 3000),
        (3, 2, "B", 2000),  # -C before +C
        (4, 3, "B", 2500),
        (5, 1, "C", 3000),  # deleted: -R with the old values
        (6, 0, "D", 4000),
    ]
    adds = [e for e in _events(dataset) if isinstance(e, model.AddData)]
    assert (
        adds[0].new_checkpoint is not None and adds[1].prev_checkpoint == adds[0].new_checkpoint.physical_hash
    )
    assert dataset.store.exists(f"checkpoints/{adds[1].new_checkpoint.physical_hash}")
    rows = _rows(dataset)
    # -C and -R keep the old event time, +C gets the new snapshot's
    assert rows[3]["event_time"] == T1.to_datetime().replace(microsecond=123000)
    assert rows[4]["event_time"] == datetime(2024, 3, 2, 10, tzinfo=timezone.utc)
    assert verify_integrity(dataset) == []


def test_several_slices_committed_together(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    read = model.ReadStepCsv(header=True, ddl_schema=["n BIGINT"])
    dataset = _push_dataset(repo, "numbers", read, model.MergeStrategyAppend())
    data = _csv(tmp_path / "n.csv", "n\n" + "".join(f"{i}\n" for i in range(1000)))
    result = push_ingest(
        dataset, "numbers", runner, [data], _options(tmp_path, max_records_per_slice=300), system_time=T1
    )
    adds = [e for e in _events(dataset) if isinstance(e, model.AddData)]
    assert len(adds) == 4 == len(result.new_blocks) - 1
    assert [
        (a.prev_offset, a.new_data.offset_interval.start, a.new_data.offset_interval.end) for a in adds
    ] == [
        (None, 0, 299),
        (299, 300, 599),
        (599, 600, 899),
        (899, 900, 999),
    ]
    assert [r["n"] for r in _rows(dataset)] == list(range(1000))


def test_empty_first_result_still_defines_the_schema(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    dataset = _push_dataset(repo, "empty", CSV_READ, model.MergeStrategyAppend())
    data = _csv(tmp_path / "in.csv", "event_time,city,population\n")
    result = push_ingest(dataset, "empty", runner, [data], _options(tmp_path), system_time=T1)
    assert len(result.new_blocks) == 1 and result.records == 0
    event = _events(dataset)[-1]
    assert isinstance(event, model.SetDataSchema)
    assert [f.name for f in event.schema.fields][-2:] == ["city", "population"]


@pytest.mark.parametrize(
    ("read", "merge", "text", "kind", "fragment"),
    [
        (
            CSV_READ,
            model.MergeStrategyAppend(),
            "event_time,city,population\n2020-01-01T00:00:00Z,A,notanumber\n",
            "bad-input",
            "line 2",
        ),
        (
            model.ReadStepCsv(header=True),
            model.MergeStrategyLedger(primary_key=["id"]),
            "city\nA\n",
            "missing-column",
            "id",
        ),
        (
            model.ReadStepCsv(header=True, ddl_schema=["op INT", "x STRING"]),
            model.MergeStrategyAppend(),
            "op,x\n0,a\n",
            "bad-schema",
            "op",
        ),
        (
            model.ReadStepCsv(header=True, ddl_schema=["event_time INT", "x STRING"]),
            model.MergeStrategyAppend(),
            "event_time,x\n5,a\n",
            "bad-schema",
            "event_time",
        ),
    ],
    ids=["broken-csv", "missing-primary-key", "op-column-with-append", "event-time-type"],
)
def test_bad_input_commits_nothing(
    repo: Repository,
    runner: LocalSparkRunner,
    tmp_path: Path,
    read: Any,
    merge: Any,
    text: str,
    kind: str,
    fragment: str,
) -> None:
    dataset = _push_dataset(repo, "bad", read, merge)
    head = dataset.head()
    data = _csv(tmp_path / "bad.csv", text)
    with pytest.raises(IngestError) as err:
        push_ingest(dataset, "bad", runner, [data], _options(tmp_path), system_time=T1)
    assert err.value.kind == kind
    assert fragment in str(err.value)
    assert dataset.head() == head
    assert list(dataset.store.list("data")) == []
    assert list((tmp_path / "work" / "operations").iterdir()) == []


def test_slice_with_another_schema_is_refused(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    read = model.ReadStepCsv(header=True, infer_schema=True)
    dataset = _push_dataset(repo, "drift", read, model.MergeStrategyAppend())
    push_ingest(
        dataset, "drift", runner, [_csv(tmp_path / "1.csv", "a,b\n1,x\n")], _options(tmp_path), system_time=T1
    )
    head = dataset.head()
    with pytest.raises(SchemaEvolutionError) as err:
        push_ingest(
            dataset,
            "drift",
            runner,
            [_csv(tmp_path / "2.csv", "a,c\n1,y\n")],
            _options(tmp_path),
            system_time=T2,
        )
    assert {(c.column, c.rule) for c in err.value.changes} >= {("b", "column-removed")}
    assert "b: Option<String> -> - (column-removed, denied)" in str(err.value)
    assert dataset.head() == head


def test_schema_policy_strict_refuses_and_additive_commits_a_new_optional_column(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    read = model.ReadStepCsv(header=True, infer_schema=True)
    dataset = _push_dataset(repo, "grows", read, model.MergeStrategyAppend())
    first = _csv(tmp_path / "1.csv", "a,b\n1,x\n")
    push_ingest(dataset, "grows", runner, [first], _options(tmp_path), system_time=T1)
    head = dataset.head()
    wider = _csv(tmp_path / "2.csv", "a,b,c\n2,y,z\n")
    with pytest.raises(SchemaEvolutionError) as err:
        push_ingest(dataset, "grows", runner, [wider], _options(tmp_path), system_time=T2)
    assert [(c.column, c.rule, c.allowed) for c in err.value.changes] == [
        ("c", "optional-column-added", True)
    ]
    assert "policy strict" in str(err.value) and "c: - -> Option<String>" in str(err.value)
    assert dataset.head() == head
    result = push_ingest(
        dataset, "grows", runner, [wider], _options(tmp_path, schema_policy="additive"), system_time=T2
    )
    events = [b.event for _, b in dataset.iter_blocks(stop=head)][::-1]
    assert [type(e).__name__ for e in events] == ["SetDataSchema", "AddData"]
    assert [f.name for f in events[0].schema.fields][-3:] == ["a", "b", "c"]
    assert result.records == 1 and [r.get("c") for r in _rows(dataset)] == [None, "z"]
    # a removed column is refused under either policy, and nothing is committed
    head = dataset.head()
    narrower = _csv(tmp_path / "3.csv", "a,c\n3,w\n")
    with pytest.raises(SchemaEvolutionError, match=r"b: .*column-removed, denied"):
        push_ingest(
            dataset, "grows", runner, [narrower], _options(tmp_path, schema_policy="additive"), system_time=T3
        )
    assert dataset.head() == head


def test_quarantine_keeps_good_rows(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
    dataset = _push_dataset(repo, "q", CSV_READ, model.MergeStrategyAppend())
    data = _csv(
        tmp_path / "q.csv",
        "event_time,city,population\n2020-01-01T00:00:00Z,A,1\n2020-01-01T00:00:00Z,B,oops\n2020-01-02T00:00:00Z,C,3\n",
    )
    result = push_ingest(
        dataset, "q", runner, [data], _options(tmp_path, bad_records="quarantine"), system_time=T1
    )
    assert result.records == 2 and result.quarantined == 1
    assert [r["city"] for r in _rows(dataset)] == ["A", "C"]


def test_files_glob_backfill_in_batches(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(1000):
        (src / f"obs-{i:04d}.csv").write_text(f"sensor,value\ns{i % 7},{i}\n")
    source = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(path=str(src / "obs-*.csv")),
        read=model.ReadStepCsv(header=True, ddl_schema=["sensor STRING", "value BIGINT"]),
        merge=model.MergeStrategyAppend(),
    )
    repo.add(
        model.DatasetSnapshot(name="obs", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    dataset = repo.dataset("obs")
    result = pull_polling(dataset, "obs", runner, _options(tmp_path, files_per_batch=250), system_time=T1)
    assert result.records == 1000
    adds = [e for e in _events(dataset) if isinstance(e, model.AddData)]
    assert len(adds) == 4
    assert adds[-1].new_source_state == model.SourceState(
        source_name="default", kind="odf/etag", value="obs-0999.csv"
    )
    assert sorted(r["value"] for r in _rows(dataset)) == list(range(1000))
    # rows follow the file order within a batch
    assert [r["value"] for r in _rows(dataset)][:3] == [0, 1, 2]
    assert pull_polling(dataset, "obs", runner, _options(tmp_path), system_time=T2).up_to_date


def test_files_read_in_one_scan_keep_their_own_event_time_and_order(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    """Several files in one scan: each row carries its own file's source event time and input position,
    whatever Spark makes of the file's name in its URI (`+`, `%`, `,` and `@` kept or escaped; `é` left
    as is, which only the per-row decode matches)."""
    src = tmp_path / "in put"
    src.mkdir()
    names = ["a+b 2024-01-04.csv", "c%d 2024-01-03.csv", "e,é 2024-01-02.csv", "f@g 2024-01-01.csv"]
    for i, name in enumerate(names):
        (src / name).write_text(f"value\n{10 * i}\n{10 * i + 1}\n")
    source = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(
            path=str(src / "*.csv"),
            event_time=model.EventTimeSourceFromPath(pattern=r".* (\d+-\d+-\d+)\.csv"),
            order=model.SourceOrdering.BY_NAME,
        ),
        read=model.ReadStepCsv(header=True, ddl_schema=["value BIGINT"]),
        merge=model.MergeStrategyAppend(),
    )
    repo.add(
        model.DatasetSnapshot(name="obs", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
    )
    dataset = repo.dataset("obs")
    options = _options(tmp_path, files_per_batch=4)
    assert pull_polling(dataset, "obs", runner, options, system_time=T1).records == 8
    [add] = [e for e in _events(dataset) if isinstance(e, model.AddData)]
    rows = [(r["offset"], r["value"], r["event_time"].date().isoformat()) for r in _rows(dataset)]
    # by event time (the file's date), then each file's rows in order
    assert rows == [
        (0, 30, "2024-01-01"),
        (1, 31, "2024-01-01"),
        (2, 20, "2024-01-02"),
        (3, 21, "2024-01-02"),
        (4, 10, "2024-01-03"),
        (5, 11, "2024-01-03"),
        (6, 0, "2024-01-04"),
        (7, 1, "2024-01-04"),
    ]
    assert add.new_watermark == Timestamp.parse("2024-01-04T00:00:00Z")


def test_checkpoint_made_stale_by_foreign_data_is_not_used(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    """Another tool appends a slice without a checkpoint: the next merge rebuilds its state from the data."""
    read = model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"])
    dataset = _push_dataset(repo, "mixed", read, model.MergeStrategySnapshot(primary_key=["city"]))
    opts = _options(tmp_path)
    push_ingest(
        dataset, "mixed", runner, [_csv(tmp_path / "1.csv", "city,population\nA,1\n")], opts, system_time=T1
    )
    first = _events(dataset)[-1]
    schema = pq.read_schema(dataset.store.local_path(f"data/{first.new_data.physical_hash}"))
    foreign = pa.table(
        {
            "offset": [1],
            "op": [0],
            "system_time": [T2.to_datetime()],
            "event_time": [T2.to_datetime()],
            "city": ["Z"],
            "population": [26],
        },
        schema=schema,
    )
    path = tmp_path / "foreign.parquet"
    pq.write_table(foreign, path)
    physical = physical_hash_of_file(path)
    dataset.commit(
        [
            model.AddData(
                prev_checkpoint=first.new_checkpoint.physical_hash,
                prev_offset=0,
                new_data=model.DataSlice(
                    logical_hash=logical_hash_of_parquet(path),
                    physical_hash=physical,
                    offset_interval=model.OffsetInterval(start=1, end=1),
                    size=path.stat().st_size,
                ),
                new_watermark=first.new_watermark,
            )
        ],
        system_time=T2,
        objects=[StagedObject(f"data/{physical}", path)],
    )
    push_ingest(
        dataset, "mixed", runner, [_csv(tmp_path / "3.csv", "city,population\nA,1\n")], opts, system_time=T3
    )
    # Z, known only from the foreign slice, is retracted: the state was rebuilt from the data
    assert _changes(dataset, "city", "population") == [(0, 0, "A", 1), (1, 0, "Z", 26), (2, 1, "Z", 26)]


class _Server:
    """A real HTTP server on 127.0.0.1 whose answer the test sets; it records the requests' headers."""

    def __init__(self) -> None:
        self.status, self.body, self.headers = 200, b"", {}
        self.seen: list[dict[str, str]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.seen.append(dict(self.headers))
                if server.status == 200 and self.headers.get("If-None-Match") == server.headers.get("ETag"):
                    self.send_response(304)
                    self.end_headers()
                    return
                self.send_response(server.status)
                for key, value in server.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/data.csv"


def test_url_source_200_304_404_500(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
    server = _Server()
    try:
        source = model.SetPollingSource(
            fetch=model.FetchStepUrl(url=server.url),
            read=model.ReadStepCsv(header=True, ddl_schema=["city STRING", "population BIGINT"]),
            merge=model.MergeStrategySnapshot(primary_key=["city"]),
        )
        repo.add(
            model.DatasetSnapshot(name="web", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0
        )
        dataset = repo.dataset("web")
        server.body = b"city,population\nA,1\nB,2\n"
        server.headers = {"ETag": '"v1"', "Last-Modified": "Fri, 01 Mar 2024 08:00:00 GMT"}
        first = pull_polling(dataset, "web", runner, _options(tmp_path), system_time=T1)
        assert first.records == 2
        add = _events(dataset)[-1]
        assert add.new_source_state == model.SourceState(source_name="default", kind="odf/etag", value='"v1"')
        # event time from Last-Modified
        assert add.new_watermark == Timestamp.parse("2024-03-01T08:00:00Z")
        assert pull_polling(dataset, "web", runner, _options(tmp_path), system_time=T2).up_to_date
        assert server.seen[-1]["If-None-Match"] == '"v1"'
        head = dataset.head()
        for status, error in ((404, SourceNotFoundError), (500, SourceUnreachableError)):
            server.status, server.headers = status, {}
            with pytest.raises(error) as err:
                pull_polling(dataset, "web", runner, _options(tmp_path), system_time=T3)
            assert err.value.retryable is (status == 500)
            assert dataset.head() == head
        server.status, server.body = 200, b"city,population\nA,1\nB,3\n"
        server.headers = {"ETag": '"v2"'}
        second = pull_polling(dataset, "web", runner, _options(tmp_path), system_time=T3)
        assert second.records == 2  # -C/+C for B
        assert _changes(dataset, "city", "population")[-2:] == [(2, 2, "B", 2), (3, 3, "B", 3)]
        # downloads do not pile up in the cache
        assert not any(
            p.is_file() for p in (tmp_path / "work" / "fetch").rglob("*") if "savepoint" not in p.name
        )
    finally:
        server.httpd.shutdown()


def test_named_push_sources_bytes_and_watermark(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path
) -> None:
    read = model.ReadStepNdJson(ddl_schema=["event_time TIMESTAMP", "v BIGINT"])
    sources = [
        model.AddPushSource(source_name=name, read=read, merge=model.MergeStrategyAppend())
        for name in ("a", "b")
    ]
    repo.add(
        model.DatasetSnapshot(name="multi", kind=model.DatasetKind.ROOT, metadata=sources), system_time=T0
    )
    dataset = repo.dataset("multi")
    data = b'{"event_time": "2024-02-01T00:00:00Z", "v": 1}\n'
    with pytest.raises(IngestError, match="several push sources"):
        push_ingest_bytes(dataset, "multi", runner, data, _options(tmp_path), system_time=T1)
    with pytest.raises(IngestError, match="no push source 'c'"):
        push_ingest_bytes(dataset, "multi", runner, data, _options(tmp_path), source_name="c", system_time=T1)
    result = push_ingest_bytes(
        dataset, "multi", runner, data, _options(tmp_path), source_name="b", system_time=T1
    )
    assert result.records == 1
    assert _events(dataset)[-1].new_watermark == Timestamp.parse("2024-02-01T00:00:00Z")
    # a watermark alone: an AddData without data, only when it moves forward
    late = Timestamp.parse("2024-02-10T00:00:00Z")
    source = model.SetPollingSource(
        fetch=model.FetchStepFilesGlob(path=str(tmp_path / "none-*.json")),
        read=read,
        merge=model.MergeStrategyAppend(),
    )
    repo.add(
        model.DatasetSnapshot(name="multi", kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T1
    )
    (tmp_path / "none-1.json").write_bytes(data)
    pull_polling(dataset, "multi", runner, _options(tmp_path), system_time=T2)
    moved = pull_polling(dataset, "multi", runner, _options(tmp_path, set_watermark=late), system_time=T3)
    event = _events(dataset)[-1]
    assert len(moved.new_blocks) == 1 and event.new_data is None and event.new_watermark == late
    assert pull_polling(
        dataset, "multi", runner, _options(tmp_path, set_watermark=late), system_time=T3
    ).up_to_date


@pytest.mark.parametrize(
    "merge",
    [
        model.MergeStrategyLedger(primary_key=["id"]),
        model.MergeStrategyUpsertStream(primary_key=["id"]),
        model.MergeStrategySnapshot(primary_key=["id"]),
    ],
    ids=["ledger", "upsert", "snapshot"],
)
def test_keyed_merges_keep_the_column_order(
    repo: Repository, runner: LocalSparkRunner, tmp_path: Path, merge: Any
) -> None:
    """Joins put key columns first; the slices must keep the dataset's column order all the same."""
    read = model.ReadStepCsv(header=True, ddl_schema=["name STRING", "id BIGINT"])
    dataset = _push_dataset(repo, "keyed", read, merge)
    opts = _options(tmp_path)
    push_ingest(dataset, "keyed", runner, [_csv(tmp_path / "1.csv", "name,id\na,1\n")], opts, system_time=T1)
    result = push_ingest(
        dataset, "keyed", runner, [_csv(tmp_path / "2.csv", "name,id\na,1\nb,2\n")], opts, system_time=T2
    )
    assert result.records == 1
    assert list(_rows(dataset)[-1]) == ["offset", "op", "system_time", "event_time", "name", "id"]
