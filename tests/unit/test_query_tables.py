"""The coordinator side of `odf sql` without Spark: which slice files make a table (from the summary; as
of a block, walking back only that far), which names a query mentions, the statement check, and how
results are placed and printed."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.odf.chain.data_access import BlockNotInChainError, data_as_of, slices_as_of
from airflow_odf.odf.chain.dataset import Dataset, StagedObject
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.query.output import OutputExistsError, place_folder, require_free, write_rows
from airflow_odf.odf.query.tables import QueryError, names_in, pin, query_tables
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.data_schema import data_schema_from_arrow, data_schema_to_arrow
from airflow_odf.odf.schema.evolution import odf_schema

SCHEMA = pa.schema(
    [pa.field("offset", pa.int64(), nullable=False), pa.field("op", pa.int32()), pa.field("v", pa.string())]
)


def _slice(tmp_path: Path, start: int, rows: int) -> tuple[model.AddData, StagedObject]:
    path = tmp_path / f"slice-{start}.parquet"
    offsets = list(range(start, start + rows))
    pq.write_table(pa.table([offsets, [0] * rows, [f"r{o}" for o in offsets]], schema=SCHEMA), path)
    physical = Multihash.sha3_256(path.read_bytes())
    event = model.AddData(
        prev_offset=None if start == 0 else start - 1,
        new_data=model.DataSlice(
            logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
            physical_hash=physical,
            offset_interval=model.OffsetInterval(start=start, end=start + rows - 1),
            size=path.stat().st_size,
        ),
    )
    return event, StagedObject(f"data/{physical}", path)


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Repository, list[str], list[str]]:
    """A root `com.example.t` with AddData, AddData, SetInfo, AddData: its blocks (newest last, from the
    first AddData) and its slices' physical hashes (oldest first)."""
    repo = Repository.init(tmp_path / "repo")
    schema = model.SetDataSchema(schema=data_schema_from_arrow(SCHEMA))
    created = repo.add(
        model.DatasetSnapshot(name="com.example.t", kind=model.DatasetKind.ROOT, metadata=[schema])
    )
    dataset = repo.dataset_by_id(created.dataset_id)
    blocks, slices = [], []
    for start, rows in ((0, 2), (2, 2), (None, 0), (4, 1)):
        if start is None:
            commit = dataset.commit([model.SetInfo(description="between")])
        else:
            event, staged = _slice(tmp_path, start, rows)
            commit = dataset.commit([event], objects=[staged])
            slices.append(str(event.new_data.physical_hash))  # type: ignore[union-attr]
        blocks.append(str(commit.new_head))
    return repo, blocks, slices


def _blocks_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    read = [0]
    original = Dataset.block

    def counted(self: Dataset, h: Multihash) -> model.MetadataBlock:
        read[0] += 1
        return original(self, h)

    monkeypatch.setattr(Dataset, "block", counted)
    return read


def test_a_table_is_its_slices_up_to_a_block(
    chain: tuple[Repository, list[str], list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, blocks, slices = chain
    dataset = repo.dataset("com.example.t")
    state = dataset.state()
    read = _blocks_read(monkeypatch)
    expected = {0: slices[:1], 1: slices[:2], 2: slices[:2], 3: slices}
    for index, block in enumerate(blocks):
        read[0] = 0
        assert slices_as_of(dataset, state, Multihash.parse(block)) == expected[index]
        assert read[0] == len(blocks) - index  # from the head back to that block, no further
    with pytest.raises(BlockNotInChainError, match="is not in the chain"):
        slices_as_of(dataset, state, Multihash.sha3_256(b"elsewhere"))

    read[0] = 0
    [table] = query_tables(repo, "SELECT * FROM `com.example.t`", tmp_path / "op")
    assert read[0] == 0  # the current data: from the summary, no block read
    data = repo.dataset("com.example.t").store.local_path("data")
    assert table.name == "com.example.t" and table.data_paths == [str(data / h) for h in slices]
    [table] = query_tables(repo, "SELECT 1", tmp_path / "op", {"COM.EXAMPLE.T": blocks[1]})
    assert table.data_paths == [str(data / h) for h in slices[:2]]
    with pytest.raises(QueryError, match=r"as of com\.example\.t=zz: not a block hash"):
        query_tables(repo, "SELECT 1", tmp_path / "op", {"com.example.t": "zz"})


def test_names_are_the_relations_the_query_reads_in_every_spelling() -> None:
    names = ["com.example.t", "t", "acme", "acme-2"]
    sql = "SELECT t.x FROM `com.example.t` t JOIN ACME a ON a.t = t.x JOIN acme USING (k) WHERE s = 'acme-2x'"
    # from the parse: the alias `t`, the column `a.t` and the string 'acme-2x' are no relations
    assert names_in(sql, names) == {"com.example.t": ["com.example.t"], "acme": ["ACME", "acme"]}
    with_cte = "WITH t AS (SELECT * FROM `acme-2`) SELECT * FROM t"
    assert names_in(with_cte, names) == {"acme-2": ["acme-2"]}


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT * FROM com.example.tt",
            r"relation com\.example\.tt at line 1, column 15 is refused: it reads a path",
        ),
        (
            "SELECT * FROM nothing",
            r"relation nothing at line 1, column 15 is no dataset here; the datasets: t",
        ),
        (
            "\n\tDROP TABLE x",
            r"the query: statement DROP at line 2, column 2 is refused: only a query runs here",
        ),
        ("SELECT reflect('java.lang.System', 'getenv', 'HOME')", r"function reflect at line 1, column 8"),
        ("", r"the query: the text is refused: it holds no statement"),
    ],
)
def test_a_statement_is_refused_before_any_table_is_made(sql: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        names_in(sql, ["t"])


def test_outputs_are_placed_whole_and_never_over_the_repository(tmp_path: Path) -> None:
    repo_root = tmp_path / "repo"
    repo_root.mkdir()
    require_free(tmp_path / "new", force=False, forbidden=repo_root)
    (tmp_path / "empty").mkdir()
    require_free(tmp_path / "empty", force=False)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("x")
    with pytest.raises(OutputExistsError, match="exists and is not empty: give --force"):
        require_free(tmp_path / "full", force=False)
    for inside in (repo_root, repo_root / "out", tmp_path):
        with pytest.raises(OutputExistsError, match="refusing to write into or over the repository"):
            require_free(inside, force=True, forbidden=repo_root)

    sources = []
    for i in range(3):
        (tmp_path / f"src-{i}").write_text(str(i))
        sources.append(str(tmp_path / f"src-{i}"))
    written = place_folder(sources, tmp_path / "full", "csv")
    assert [p.name for p in written] == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == [p.name for p in written]
    assert [p.read_text() for p in written] == ["0", "1", "2"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_rows_printed_as_table_csv_and_json() -> None:
    table = pa.table({"symbol": ["ACME", None], "n": [3, 12]})
    out = io.StringIO()
    write_rows(table, "table", out)
    assert out.getvalue() == "symbol  n\nACME    3\n        12\n"
    out = io.StringIO()
    write_rows(table, "csv", out)
    assert out.getvalue() == "symbol,n\nACME,3\n,12\n"
    out = io.StringIO()
    write_rows(table, "json", out)
    assert (
        out.getvalue()
        == '[\n  {\n    "symbol": "ACME",\n    "n": 3\n  },\n  {\n    "symbol": null,\n    "n": 12\n  }\n]\n'
    )


def test_as_of_a_block_before_a_schema_change_the_table_has_the_schema_of_then(
    chain: tuple[Repository, list[str], list[str]], tmp_path: Path
) -> None:
    repo, blocks, slices = chain
    dataset = repo.dataset("com.example.t")
    wider = SCHEMA.append(pa.field("w", pa.string()))
    dataset.commit([model.SetDataSchema(schema=data_schema_from_arrow(wider))])
    state = dataset.state()
    for block, columns in (
        (blocks[1], SCHEMA.names),
        (blocks[3], SCHEMA.names),
        (str(state.head), wider.names),
    ):
        pinned = pin(dataset, state, Multihash.parse(block))
        schema = data_schema_to_arrow(odf_schema(pinned.schema))  # type: ignore[arg-type]
        assert schema.names == columns, block
    assert data_as_of(dataset, state, Multihash.parse(blocks[1]))[0] == slices[:2]
    [table] = query_tables(repo, "SELECT 1", tmp_path / "op", {"com.example.t": blocks[1]})
    assert pa.ipc.read_schema(pa.py_buffer(base64.b64decode(table.schema or ""))).names == SCHEMA.names
