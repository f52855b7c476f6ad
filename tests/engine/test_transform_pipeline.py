"""Derivatives over several inputs, end to end: joins and unions over dotted names, batching, an empty
first run, checkpoints of input watermarks, recovery from a diverged input, reproducibility verification
and query evolution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.data_access import read_slice
from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.evolution import SchemaEvolutionError
from airflow_odf.odf.transform.checkpoint import read_checkpoint
from airflow_odf.odf.transform.evolution import check_transform_change
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.odf.transform.plan import InputDivergedError
from airflow_odf.odf.transform.verify import verify_reproducibility

T0 = Timestamp.parse("2024-01-01T00:00:00Z")


def _t(day: int) -> Timestamp:
    return Timestamp.parse(f"2024-02-{day:02d}T00:00:00Z")


ORDERS = "com.acme.orders"
SHIPMENTS = "com.acme.shipments"


def _root(repo: Repository, name: str, ddl: list[str]) -> None:
    read = model.ReadStepCsv(header=True, ddl_schema=ddl)
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    snapshot = model.DatasetSnapshot(name=name, kind=model.DatasetKind.ROOT, metadata=[source])
    repo.add(snapshot, system_time=T0)


def _derivative(repo: Repository, name: str, queries: list[tuple[str | None, str]], *inputs: str) -> None:
    repo.add(_derivative_snapshot(name, queries, *inputs), system_time=T0)


def _derivative_snapshot(
    name: str, queries: list[tuple[str | None, str]], *inputs: str
) -> model.DatasetSnapshot:
    transform = model.SetTransform(
        inputs=[model.TransformInput(dataset_ref=i) for i in inputs],
        transform=model.TransformSql(
            engine="spark", queries=[model.SqlQueryStep(alias=a, query=q) for a, q in queries]
        ),
    )
    return model.DatasetSnapshot(name=name, kind=model.DatasetKind.DERIVATIVE, metadata=[transform])


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    repo = Repository.init(tmp_path / "repo")
    _root(repo, ORDERS, ["event_time TIMESTAMP", "order_id BIGINT", "quantity BIGINT"])
    _root(repo, SHIPMENTS, ["event_time TIMESTAMP", "order_id BIGINT", "quantity BIGINT"])
    return repo


class Env:
    """Pushes and transforms against one repository, with deterministic system times."""

    def __init__(self, repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> None:
        self.repo, self.runner, self.tmp = repo, runner, tmp_path
        self.day = 1

    def now(self) -> Timestamp:
        self.day += 1
        return _t(self.day)

    def push(self, name: str, rows: str) -> str:
        path = self.tmp / f"in-{self.day}-{name}.csv"
        path.write_text("event_time,order_id,quantity\n" + rows)
        options = IngestOptions(work_dir=self.tmp / "w")
        result = push_ingest(
            self.repo.dataset(name), name, self.runner, [path], options, system_time=self.now()
        )
        assert result.new_head is not None
        return result.new_head

    def transform(self, name: str, **options: Any) -> Any:
        opts = TransformOptions(work_dir=self.tmp / "w", **options)
        return run_transform(self.repo, name, self.runner, opts, system_time=self.now())

    def events(self, name: str) -> list[Any]:
        return [b.event for _, b in reversed(list(self.repo.dataset(name).iter_blocks()))]

    def executes(self, name: str) -> list[model.ExecuteTransform]:
        return [e for e in self.events(name) if isinstance(e, model.ExecuteTransform)]

    def rows(self, name: str, *columns: str) -> list[tuple[Any, ...]]:
        dataset = self.repo.dataset(name)
        return [
            tuple(r.get(c) for c in ("offset", "op", *columns))
            for e in self.executes(name)
            if e.new_data is not None
            for r in read_slice(dataset, e.new_data).to_pylist()
        ]


@pytest.fixture
def env(repo: Repository, runner: LocalSparkRunner, tmp_path: Path) -> Env:
    return Env(repo, runner, tmp_path)


JOIN = [
    (
        "order_shipments",
        f"""SELECT o.event_time, o.order_id, o.quantity AS ordered, COALESCE(SUM(s.quantity), 0) AS shipped
        FROM `{ORDERS}` AS o LEFT JOIN `{SHIPMENTS}` AS s ON o.order_id = s.order_id
        GROUP BY o.event_time, o.order_id, o.quantity""",
    ),
    (None, "SELECT * FROM order_shipments ORDER BY order_id"),
]
UNION = [
    (
        None,
        f"""SELECT event_time, order_id, quantity, 'order' AS kind FROM `{ORDERS}`
        UNION ALL SELECT event_time, order_id, -quantity AS quantity, 'shipment' AS kind FROM `{SHIPMENTS}`
        ORDER BY event_time, kind""",
    )
]


def test_join_and_union_over_dotted_inputs(env: Env) -> None:
    _derivative(env.repo, "orders.shipped", JOIN, ORDERS, SHIPMENTS)
    _derivative(env.repo, "orders.ledger", UNION, ORDERS, SHIPMENTS)
    orders = env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n2024-01-01T11:00:00Z,2,5\n")
    shipments = env.push(SHIPMENTS, "2024-01-01T12:00:00Z,1,4\n2024-01-01T13:00:00Z,1,6\n")
    env.transform("orders.shipped")
    env.transform("orders.ledger")
    assert env.rows("orders.shipped", "order_id", "ordered", "shipped") == [
        (0, 0, 1, 10, 10),
        (1, 0, 2, 5, 0),
    ]
    assert env.rows("orders.ledger", "order_id", "quantity", "kind") == [
        (0, 0, 1, 10, "order"),
        (1, 0, 2, 5, "order"),
        (2, 0, 1, -4, "shipment"),
        (3, 0, 1, -6, "shipment"),
    ]
    [execute] = env.executes("orders.ledger")
    assert [
        (i.dataset_id, str(i.new_block_hash), i.prev_offset, i.new_offset) for i in execute.query_inputs
    ] == [
        (env.repo.resolve(ORDERS), orders, None, 1),
        (env.repo.resolve(SHIPMENTS), shipments, None, 1),
    ]
    # watermark = the minimum of the inputs' (each input's is its last event time)
    assert execute.new_watermark == Timestamp.parse("2024-01-01T11:00:00Z")
    # incremental: only the new shipment is consumed; orders bring nothing new
    env.push(SHIPMENTS, "2024-01-02T09:00:00Z,2,5\n")
    env.transform("orders.ledger")
    last = env.executes("orders.ledger")[-1]
    assert [(i.prev_offset, i.new_offset, i.new_block_hash is None) for i in last.query_inputs] == [
        (1, None, True),
        (1, 2, False),
    ]
    assert env.rows("orders.ledger", "order_id", "quantity", "kind")[-1] == (4, 0, 2, -5, "shipment")
    # the orders' watermark came from the checkpoint: no new explicit watermark for them in this run
    assert last.new_watermark == Timestamp.parse("2024-01-01T11:00:00Z")
    checkpoint = env.repo.dataset("orders.ledger").store.get(
        f"checkpoints/{last.new_checkpoint.physical_hash}"
    )
    assert read_checkpoint(checkpoint) == {
        env.repo.resolve(ORDERS): Timestamp.parse("2024-01-01T11:00:00Z"),
        env.repo.resolve(SHIPMENTS): Timestamp.parse("2024-01-02T09:00:00Z"),
    }
    assert last.prev_checkpoint == env.executes("orders.ledger")[0].new_checkpoint.physical_hash
    assert env.transform("orders.ledger").up_to_date
    assert verify_integrity(env.repo.dataset("orders.ledger")) == []


def test_empty_first_run_records_the_schema(env: Env) -> None:
    _derivative(
        env.repo,
        "big.orders",
        [(None, f"SELECT event_time, order_id, quantity FROM `{ORDERS}` WHERE quantity > 1000")],
        ORDERS,
    )
    env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n")
    result = env.transform("big.orders")
    assert len(result.new_blocks) == 2 and result.records == 0
    schema, execute = env.events("big.orders")[-2:]
    assert isinstance(schema, model.SetDataSchema)
    assert [f.name for f in schema.schema.fields] == [
        "offset",
        "op",
        "system_time",
        "event_time",
        "order_id",
        "quantity",
    ]
    assert execute.new_data is None and execute.query_inputs[0].new_offset == 0
    env.push(ORDERS, "2024-01-02T10:00:00Z,2,2000\n")
    env.transform("big.orders")
    assert env.rows("big.orders", "order_id", "quantity") == [(0, 0, 2, 2000)]


def test_batched_backlog_equals_one_run(env: Env) -> None:
    query = [(None, f"SELECT event_time, order_id, quantity * 2 AS double FROM `{ORDERS}`")]
    _derivative(env.repo, "batched", query, ORDERS)
    _derivative(env.repo, "whole", query, ORDERS)
    for day in range(1, 6):
        env.push(ORDERS, "".join(f"2024-01-0{day}T0{h}:00:00Z,{day * 10 + h},{h}\n" for h in range(3)))
    result = env.transform("batched", max_input_records=6)
    env.transform("whole")
    executes = env.executes("batched")
    assert len(executes) == 3 and result.records == 15
    assert [(e.query_inputs[0].prev_offset, e.query_inputs[0].new_offset) for e in executes] == [
        (None, 5),
        (5, 11),
        (11, 14),
    ]
    assert [(e.new_data.offset_interval.start, e.new_data.offset_interval.end) for e in executes] == [
        (0, 5),
        (6, 11),
        (12, 14),
    ]
    assert [r[2:] for r in env.rows("batched", "order_id", "double")] == [
        r[2:] for r in env.rows("whole", "order_id", "double")
    ]
    assert [r[0] for r in env.rows("batched", "order_id")] == list(range(15))
    assert verify_reproducibility(env.repo, "batched", env.runner, env.tmp / "v") == []


def test_diverged_input_fails_then_recovers_from_scratch(env: Env) -> None:
    query = [(None, f"SELECT event_time, order_id FROM `{ORDERS}`")]
    _derivative(env.repo, "ids", query, ORDERS)
    first = env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n")
    env.push(ORDERS, "2024-01-02T10:00:00Z,2,10\n")
    env.transform("ids")
    derivative = env.repo.dataset("ids")
    old_head = derivative.head()
    # the input is reset and rewritten: the derivative's last processed block is gone
    assert main(["reset", "--repo", str(env.repo.root), ORDERS, first]) == 0
    env.push(ORDERS, "2024-01-03T10:00:00Z,3,10\n")
    with pytest.raises(InputDivergedError, match="no longer contains block"):
        env.transform("ids")
    assert derivative.head() == old_head
    result = env.transform("ids", recover_diverged=True)
    assert result.records == 2
    events = env.events("ids")
    assert [type(e).__name__ for e in events] == ["Seed", "SetTransform", "SetDataSchema", "ExecuteTransform"]
    assert env.rows("ids", "order_id") == [(0, 0, 1), (1, 0, 3)]
    assert all(h != old_head for h, _ in derivative.iter_blocks())
    assert verify_integrity(derivative) == []


def test_verification_passes_on_honest_data_and_fails_on_tampering(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    _derivative(env.repo, "orders.shipped", JOIN, ORDERS, SHIPMENTS)
    env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n2024-01-01T11:00:00Z,2,5\n")
    env.push(SHIPMENTS, "2024-01-01T12:00:00Z,1,4\n")
    env.transform("orders.shipped")
    env.push(ORDERS, "2024-01-02T10:00:00Z,3,7\n")
    env.transform("orders.shipped")
    assert verify_reproducibility(env.repo, "orders.shipped", env.runner, env.tmp / "v") == []
    capsys.readouterr()
    base = ["verify", "--repo", str(env.repo.root), "--format", "json"]
    assert main([*base, "orders.shipped"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["reproducibility"] == "checked"

    # the same recorded blocks under another query: the replay gives other data
    dataset = env.repo.dataset("orders.shipped")
    forged_query = [
        (JOIN[0][0], JOIN[0][1].replace("COALESCE(SUM(s.quantity), 0)", "COALESCE(SUM(s.quantity), 0) + 1")),
        JOIN[1],
    ]
    _derivative(env.repo, "forged", forged_query, ORDERS, SHIPMENTS)
    forged = env.repo.dataset("forged")
    copied = [
        e for e in env.events("orders.shipped") if isinstance(e, model.SetDataSchema | model.ExecuteTransform)
    ]
    forged.commit(copied, system_time=_t(20), objects=_objects(dataset, copied))
    problems = verify_reproducibility(env.repo, "forged", env.runner, env.tmp / "v")
    assert [(p.sequence_number, p.field) for p in problems] == [(3, "logical hash"), (4, "logical hash")]
    assert main([*base, "forged"]) == 4
    report = json.loads(capsys.readouterr().out)
    assert [p["field"] for p in report["not_reproducible"]] == ["logical hash", "logical hash"]

    # a tampered data file fails the integrity part of `odf verify --full` (a file verified before is
    # not looked at again by the default, incremental verify: nothing new after the verified head)
    execute = env.executes("orders.shipped")[0]
    path = dataset.store.local_path(f"data/{execute.new_data.physical_hash}")
    assert path is not None
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    assert main([*base, "orders.shipped"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks_checked"] == 0
    assert main([*base, "--full", "orders.shipped"]) == 4
    report = json.loads(capsys.readouterr().out)
    assert report["reproducibility"] == "not checked"
    assert [(p["kind"], p["ref"]) for p in report["problems"]] == [
        ("data", f"data/{execute.new_data.physical_hash}")
    ]
    assert "tampered" in report["problems"][0]["message"]


def _objects(dataset: Dataset, events: list[Any]) -> list[StagedObject]:
    """Copies of the objects the events refer to (for committing them to another dataset)."""
    out = []
    for e in events:
        for ref in (getattr(e, "new_data", None), getattr(e, "new_checkpoint", None)):
            if ref is None:
                continue
            folder = "data" if isinstance(ref, model.DataSlice) else "checkpoints"
            key = f"{folder}/{ref.physical_hash}"
            path = dataset.store.local_path(key)
            assert path is not None
            out.append(StagedObject(key, path, move=False))
    return out


def test_query_evolution_is_checked_before_commit(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    base_query = f"SELECT event_time, order_id, quantity FROM `{ORDERS}`"
    _derivative(env.repo, "evolving", [(None, base_query)], ORDERS)
    env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n")
    env.transform("evolving")
    dataset = env.repo.dataset("evolving")
    head = dataset.head()

    def change(query: str) -> model.DatasetSnapshot:
        return check_transform_change(
            env.repo, _derivative_snapshot("evolving", [(None, query)], ORDERS), env.runner, env.tmp / "w"
        )

    # a removed column and a changed type are denied, naming the rule; nothing is committed
    with pytest.raises(SchemaEvolutionError, match=r"quantity: .*column-removed"):
        change(f"SELECT event_time, order_id FROM `{ORDERS}`")
    with pytest.raises(SchemaEvolutionError, match=r"order_id: .*type-changed"):
        change(f"SELECT event_time, CAST(order_id AS STRING) AS order_id, quantity FROM `{ORDERS}`")
    assert dataset.head() == head
    # the same output schema: only the SetTransform is committed
    same = change(f"SELECT event_time, order_id, quantity FROM `{ORDERS}` WHERE quantity > 0")
    assert [type(e).__name__ for e in same.metadata] == ["SetTransform"]
    # a new optional column: the SetTransform goes with the new SetDataSchema
    query = f"SELECT event_time, order_id, quantity, CAST(NULL AS STRING) AS note FROM `{ORDERS}`"
    manifest = env.tmp / "evolving.yaml"
    manifest.write_text(
        "kind: DatasetSnapshot\nversion: 1\ncontent:\n  name: evolving\n  kind: Derivative\n  metadata:\n"
        "  - kind: SetTransform\n    inputs:\n    - datasetRef: com.acme.orders\n    transform:\n"
        f'      kind: Sql\n      engine: spark\n      query: "{query}"\n'
    )
    assert main(["add", "--repo", str(env.repo.root), str(manifest)]) == 0
    new_events = env.events("evolving")[-2:]
    assert [type(e).__name__ for e in new_events] == ["SetTransform", "SetDataSchema"]
    assert [f.name for f in new_events[1].schema.fields][-1] == "note"
    env.push(ORDERS, "2024-01-02T10:00:00Z,2,3\n")
    env.transform("evolving")
    assert env.rows("evolving", "order_id", "note")[-1] == (1, 0, 2, None)
    # a denied change through `odf add`: one clear line, exit 2, nothing committed
    head = dataset.head()
    manifest.write_text(manifest.read_text().replace(", CAST(NULL AS STRING) AS note", ""))
    capsys.readouterr()
    assert main(["add", "--repo", str(env.repo.root), str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "evolving" in err and "note" in err and "column-removed" in err
    assert dataset.head() == head
    assert verify_reproducibility(env.repo, "evolving", env.runner, env.tmp / "v") == []


def test_transform_schema_policy(env: Env) -> None:
    _derivative(env.repo, "policy", [(None, f"SELECT event_time, order_id FROM `{ORDERS}`")], ORDERS)
    env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n")
    env.transform("policy")
    dataset = env.repo.dataset("policy")
    # a query change committed without the add-time check (e.g. by another tool)
    wider = _derivative_snapshot(
        "policy", [(None, f"SELECT event_time, order_id, quantity FROM `{ORDERS}`")], ORDERS
    )
    dataset.commit([env.repo.normalize_event(wider.metadata[0])], system_time=_t(20))
    env.push(ORDERS, "2024-01-02T10:00:00Z,2,20\n")
    head = dataset.head()
    with pytest.raises(SchemaEvolutionError, match=r"policy strict.*quantity: - -> Option<Int64>"):
        env.transform("policy")
    assert dataset.head() == head
    result = env.transform("policy", schema_policy="additive")
    assert [type(b.event).__name__ for h, b in dataset.iter_blocks(stop=head)] == [
        "ExecuteTransform",
        "SetDataSchema",
    ]
    assert result.records == 1
    assert env.rows("policy", "order_id", "quantity") == [(0, 0, 1, None), (1, 0, 2, 20)]
