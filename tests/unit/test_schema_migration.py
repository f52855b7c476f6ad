"""Migration of a legacy raw-Arrow SetDataSchema (RFC-010) to ODF form, and explicit schema changes.

The legacy dataset is built the way an older writer left it: a SetDataSchema holding only
`rawArrowSchema` (written with the codec), then an AddData of a real Parquet slice with its hashes. It is
read before and after the migration; a second migration adds nothing; explicit changes are committed only
when the evolution rules allow them, and a denial names the rule and commits nothing.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.odf.chain.data_access import tail
from airflow_odf.odf.chain.dataset import Dataset, fold
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.engine_client.contract import OutputSlice
from airflow_odf.odf.format import model as m
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.parquet_hashes import logical_hash_of_parquet
from airflow_odf.odf.operation import stage_slice
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.repo.schema_migration import (
    SchemaMigrationError,
    apply_schema,
    check_proposed,
    migrate_schema,
)
from airflow_odf.odf.schema.ddl import DESCRIPTION
from airflow_odf.odf.schema.evolution import SchemaEvolutionError, odf_schema
from airflow_odf.odf.schema.raw_arrow import decode_raw_arrow_schema, encode_raw_arrow_schema

T0 = Timestamp.parse("2023-11-01T00:00:00Z")
T1 = Timestamp.parse("2023-11-02T00:00:00Z")
MS = m.TimeUnit.MILLISECOND
UTC = dt.timezone.utc

#: What an RFC-010 writer recorded: Arrow nullability all over (it could not state it reliably), and
#: an Arrow layout (large_string) that ODF keeps only as an encoding.
LEGACY_ARROW = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("op", pa.int32()),
        pa.field("system_time", pa.timestamp("ms", tz="UTC")),
        pa.field("event_time", pa.timestamp("ms", tz="UTC")),
        pa.field("city", pa.large_utf8()),
        pa.field("population", pa.int64()),
    ]
)


def _opt(t: Any) -> m.DataTypeOption:
    return m.DataTypeOption(inner=t)


def _field(name: str, t: Any, extra: dict[str, Any] | None = None) -> m.DataField:
    return m.DataField(name=name, type=t, extra=extra)


TIMESTAMP = m.DataTypeTimestamp(unit=MS, timezone="UTC")
#: The ODF form of LEGACY_ARROW: nullability as Option, the layout hint stripped.
CONVERTED = m.DataSchema(
    fields=[
        _field("offset", _opt(m.DataTypeInt64())),
        _field("op", _opt(m.DataTypeInt32())),
        _field("system_time", _opt(TIMESTAMP)),
        _field("event_time", _opt(TIMESTAMP)),
        _field("city", _opt(m.DataTypeString())),
        _field("population", _opt(m.DataTypeInt64())),
    ]
)
ROWS = [
    {
        "offset": 0,
        "op": 0,
        "system_time": dt.datetime(2023, 11, 1, tzinfo=UTC),
        "event_time": dt.datetime(2020, 1, 1, tzinfo=UTC),
        "city": "Vancouver",
        "population": 675218,
    },
    {
        "offset": 1,
        "op": 0,
        "system_time": dt.datetime(2023, 11, 1, tzinfo=UTC),
        "event_time": dt.datetime(2020, 1, 1, tzinfo=UTC),
        "city": "Seattle",
        "population": None,
    },
]


def _legacy_dataset(repo: Repository, tmp_path: Path, name: str = "legacy") -> Dataset:
    """Seed + push source, then the legacy SetDataSchema and one AddData with a real slice."""
    read = m.ReadStepCsv(header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"])
    source = m.AddPushSource(source_name="default", read=read, merge=m.MergeStrategyAppend())
    repo.add(m.DatasetSnapshot(name=name, kind=m.DatasetKind.ROOT, metadata=[source]), system_time=T0)
    dataset = repo.dataset(name)
    path = tmp_path / f"{name}-slice.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS, schema=LEGACY_ARROW), path)
    new_data, staged = stage_slice(OutputSlice(str(path), 0, 1, 2))
    legacy = m.SetDataSchema(raw_arrow_schema=encode_raw_arrow_schema(LEGACY_ARROW))
    add = m.AddData(new_data=new_data, new_watermark=Timestamp.parse("2020-01-01T00:00:00Z"))
    dataset.commit([legacy, add], system_time=T0, objects=[staged])
    return dataset


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    return Repository.init(tmp_path / "repo")


def _events(dataset: Dataset) -> list[Any]:
    return [b.event for _, b in reversed(list(dataset.iter_blocks()))]


def _refolded(dataset: Dataset) -> ChainState:
    """The state folded from the Seed with every chain rule (not the summary index)."""
    return fold(ChainState(), reversed(list(dataset.iter_blocks())))


def test_the_legacy_dataset_is_what_an_rfc010_writer_left(repo: Repository, tmp_path: Path) -> None:
    dataset = _legacy_dataset(repo, tmp_path)
    state = dataset.state()
    assert state.schema is not None and state.schema.schema is None
    assert decode_raw_arrow_schema(state.schema.raw_arrow_schema).equals(LEGACY_ARROW)
    [add] = [e for e in _events(dataset) if isinstance(e, m.AddData)]
    path = dataset.store.local_path(f"data/{add.new_data.physical_hash}")
    assert logical_hash_of_parquet(path) == add.new_data.logical_hash
    assert verify_integrity(dataset) == []
    assert odf_schema(state.schema) == CONVERTED  # read through the lazy conversion


def test_migration_appends_the_equivalent_odf_schema_and_the_data_reads_the_same(
    repo: Repository, tmp_path: Path
) -> None:
    dataset = _legacy_dataset(repo, tmp_path)
    blocks_before = [h for h, _ in dataset.iter_blocks()]
    before = tail(dataset, 10)
    assert before is not None and before.to_pylist() == ROWS

    result = migrate_schema(dataset, system_time=T1)

    assert result.changed and result.dataset == "legacy" and result.changes == []
    assert result.schema == CONVERTED
    assert result.commit is not None and result.commit.new_blocks == [dataset.head()]
    event = dataset.block(dataset.head()).event
    assert event == m.SetDataSchema(schema=CONVERTED)  # ODF form only, no raw Arrow copy
    assert [h for h, _ in dataset.iter_blocks()][1:] == blocks_before  # history is not rewritten
    legacy = dataset.block(blocks_before[1]).event
    assert isinstance(legacy, m.SetDataSchema) and legacy.raw_arrow_schema is not None
    assert _refolded(dataset).schema == event and dataset.state().schema == event
    after = tail(dataset, 10)
    assert after is not None and after.to_pylist() == ROWS and after.schema.equals(before.schema)
    assert verify_integrity(dataset) == []


def test_a_second_migration_adds_nothing(repo: Repository, tmp_path: Path) -> None:
    dataset = _legacy_dataset(repo, tmp_path)
    migrate_schema(dataset, system_time=T1)
    head = dataset.head()
    again = migrate_schema(dataset, system_time=T1)
    assert not again.changed and again.commit is None
    assert again.message == "legacy: the schema is already in ODF form"
    assert again.schema == CONVERTED and dataset.head() == head


def test_a_dataset_written_in_odf_form_is_left_untouched(repo: Repository) -> None:
    fresh = repo.add(m.DatasetSnapshot(name="fresh", kind=m.DatasetKind.ROOT, metadata=[]), system_time=T0)
    dataset = repo.dataset_by_id(fresh.dataset_id)
    dataset.commit([m.SetDataSchema(schema=CONVERTED)], system_time=T0)
    head = dataset.head()
    result = migrate_schema(dataset)
    assert not result.changed and dataset.head() == head


def test_migration_errors_name_the_dataset_and_commit_nothing(repo: Repository, tmp_path: Path) -> None:
    repo.add(m.DatasetSnapshot(name="empty", kind=m.DatasetKind.ROOT, metadata=[]), system_time=T0)
    empty = repo.dataset("empty")
    with pytest.raises(SchemaMigrationError, match=r"^empty has no SetDataSchema yet"):
        migrate_schema(empty)

    repo.add(m.DatasetSnapshot(name="odd", kind=m.DatasetKind.ROOT, metadata=[]), system_time=T0)
    odd = repo.dataset("odd")
    union = pa.schema([pa.field("u", pa.dense_union([pa.field("i", pa.int8())]))])
    odd.commit([m.SetDataSchema(raw_arrow_schema=encode_raw_arrow_schema(union))], system_time=T0)
    head = odd.head()
    with pytest.raises(
        SchemaMigrationError, match=r"^odd: the legacy rawArrowSchema cannot be converted.*columns\.u"
    ):
        migrate_schema(odd)
    assert odd.head() == head


def test_on_the_first_conversion_the_author_may_state_optionality(repo: Repository, tmp_path: Path) -> None:
    """RFC-016: replacing a legacy schema, optionality differences are ignored; afterwards they are not."""
    dataset = _legacy_dataset(repo, tmp_path)
    required = {"offset", "op", "system_time", "city"}
    meant = m.DataSchema(
        fields=[f if f.name not in required else _field(f.name, f.type.inner) for f in CONVERTED.fields]
    )
    result = apply_schema(dataset, meant, system_time=T1)
    assert result.changed
    assert {(c.column, c.rule, c.allowed) for c in result.changes} == {
        (name, "became-required", True) for name in required
    }
    assert dataset.state().schema == m.SetDataSchema(schema=meant)

    head = dataset.head()
    with pytest.raises(SchemaEvolutionError) as e:
        apply_schema(dataset, CONVERTED, system_time=T1)
    assert {(c.column, c.rule) for c in e.value.changes if not c.allowed} == {
        (name, "became-optional") for name in required
    }
    assert "legacy: the proposed schema was not committed" in str(e.value)
    assert e.value.rule == "schema-evolution" and dataset.head() == head


def _migrated(repo: Repository, tmp_path: Path) -> Dataset:
    dataset = _legacy_dataset(repo, tmp_path)
    migrate_schema(dataset, system_time=T1)
    return dataset


def test_column_descriptions_are_an_allowed_change(repo: Repository, tmp_path: Path) -> None:
    dataset = _migrated(repo, tmp_path)
    described = m.DataSchema(
        fields=[
            _field(f.name, f.type, {DESCRIPTION: "City name"} if f.name == "city" else None)
            for f in CONVERTED.fields
        ],
        extra={DESCRIPTION: "Cities and their population"},
    )
    result = apply_schema(dataset, described, system_time=T1)
    assert result.changed
    assert [(c.column, c.rule, c.allowed) for c in result.changes] == [
        ("city", "attributes-changed", True),
        ("*", "attributes-changed", True),
    ]
    recorded = dataset.state().schema
    assert recorded is not None and recorded.schema == described
    assert recorded.schema.fields[4].extra == {DESCRIPTION: "City name"}
    head = dataset.head()
    again = apply_schema(dataset, described, system_time=T1)  # the same proposal: nothing to append
    assert not again.changed and dataset.head() == head
    assert tail(dataset, 10).to_pylist() == ROWS


def test_a_new_optional_column_may_be_proposed_without_the_system_columns(
    repo: Repository, tmp_path: Path
) -> None:
    dataset = _migrated(repo, tmp_path)
    data_only = m.DataSchema(fields=[*CONVERTED.fields[4:], _field("country", _opt(m.DataTypeString()))])
    head = dataset.head()
    schema, changes = check_proposed(dataset, data_only)
    assert [f.name for f in schema.fields] == [*(f.name for f in CONVERTED.fields), "country"]
    assert [(c.column, c.old, c.new, c.rule, c.allowed) for c in changes] == [
        ("country", None, "Option<String>", "optional-column-added", True)
    ]
    assert dataset.head() == head  # checking commits nothing
    result = apply_schema(dataset, data_only, system_time=T1)
    assert result.changed and dataset.state().schema == m.SetDataSchema(schema=schema)


@pytest.mark.parametrize(
    ("change", "column", "rule"),
    [
        (lambda fs: [f for f in fs if f.name != "population"], "population", "column-removed"),
        (
            lambda fs: [_field(f.name, _opt(m.DataTypeInt32())) if f.name == "population" else f for f in fs],
            "population",
            "type-changed",
        ),
        (lambda fs: [*fs, _field("country", m.DataTypeString())], "country", "required-column-added"),
    ],
)
def test_denied_changes_name_the_rule_and_commit_nothing(
    repo: Repository, tmp_path: Path, change: Any, column: str, rule: str
) -> None:
    dataset = _migrated(repo, tmp_path)
    proposed = m.DataSchema(fields=change(list(CONVERTED.fields)))
    _, diff = check_proposed(dataset, proposed)
    assert [(c.column, c.rule, c.allowed) for c in diff] == [(column, rule, False)]
    head = dataset.head()
    with pytest.raises(SchemaEvolutionError) as e:
        apply_schema(dataset, proposed, system_time=T1)
    assert [(c.column, c.rule) for c in e.value.changes] == [(column, rule)]
    assert f"{column}: " in str(e.value) and f"({rule}, denied)" in str(e.value)
    assert dataset.head() == head


def test_a_schema_may_be_set_before_any_data(repo: Repository) -> None:
    repo.add(m.DatasetSnapshot(name="push", kind=m.DatasetKind.ROOT, metadata=[]), system_time=T0)
    dataset = repo.dataset("push")
    hinted = m.DataSchema(
        fields=[
            _field("offset", m.DataTypeInt64()),
            _field("name", m.DataTypeString(), {"arrow.apache.org/bufferEncoding": {"kind": "View"}}),
        ]
    )
    result = apply_schema(dataset, hinted, system_time=T0)
    assert result.changed
    recorded = dataset.state().schema
    assert recorded == m.SetDataSchema(  # logical types only (RFC-016): the encoding hint is not recorded
        schema=m.DataSchema(fields=[_field("offset", m.DataTypeInt64()), _field("name", m.DataTypeString())])
    )
