"""Splicing Parquet files column-wise: the result reads back as the zipped tables, row group by row group."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_odf.engine import parquet_splice
from airflow_odf.engine.parquet_splice import (
    INT32,
    INT64,
    ParquetSource,
    Side,
    SpliceError,
    SteppedColumn,
    required_element,
    splice,
    write_stepped_columns,
)

LEFT = pa.table(
    {
        "id": pa.array(range(10), pa.int64()),
        "tags": [[str(i)] * (i % 3) for i in range(10)],
        "info": [{"a": i, "b": None if i % 2 else f"v{i}"} for i in range(10)],
    }
)
RIGHT = pa.table({"name": [f"n{i % 3}" for i in range(10)], "x": [i / 4 for i in range(10)]})


def _write(path: Path, table: pa.Table, row_groups: list[int], **options: object) -> ParquetSource:
    with pq.ParquetWriter(path, table.schema, **options) as writer:  # type: ignore[arg-type]
        start = 0
        for rows in row_groups:
            writer.write_table(table.slice(start, rows), row_group_size=rows)
            start += rows
    return ParquetSource.open(path)


def _side(source: ParquetSource) -> Side:
    return Side(source, [(source, i) for i in range(len(source.row_groups))])


def test_columns_of_two_files_interleaved_by_row_group(tmp_path: Path) -> None:
    # page indexes and bloom filters in the sources would point into them: the splice leaves them out
    left = _write(tmp_path / "l.parquet", LEFT, [4, 6], write_page_index=True)
    right = _write(tmp_path / "r.parquet", RIGHT, [4, 6], use_dictionary=["name"], compression="zstd")
    target = tmp_path / "out.parquet"
    fields = [(1, 0), (0, 0), (0, 2), (1, 1), (0, 1)]  # name, id, info, x, tags
    rows = splice(target, [_side(left), _side(right)], fields, key_value_metadata={b"k": b"v"})
    assert rows == 10
    out = pq.ParquetFile(target)
    assert out.metadata.num_row_groups == 2
    assert [out.metadata.row_group(i).num_rows for i in range(2)] == [4, 6]
    assert out.schema_arrow.metadata == {b"k": b"v"}
    expected = pa.table(
        [RIGHT["name"], LEFT["id"], LEFT["info"], RIGHT["x"], LEFT["tags"]],
        names=["name", "id", "info", "x", "tags"],
    )
    assert out.read().to_pylist() == expected.to_pylist()
    assert out.read_row_group(1).to_pylist() == expected.slice(4).to_pylist()
    column = out.metadata.row_group(0).column(0)
    assert column.path_in_schema == "name" and "RLE_DICTIONARY" in column.encodings
    assert column.compression == "ZSTD"
    assert not out.metadata.row_group(0).column(1).has_offset_index
    assert out.metadata.created_by == left.footer.get(6).decode()  # type: ignore[union-attr]


def test_sides_may_take_row_groups_from_several_files(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.parquet", LEFT.slice(0, 3), [3])
    second = _write(tmp_path / "b.parquet", LEFT.slice(3), [2, 5])
    right = _write(tmp_path / "r.parquet", RIGHT, [3, 2, 5])
    data = Side(first, [(first, 0), (second, 0), (second, 1)])
    target = tmp_path / "out.parquet"
    assert splice(target, [data, _side(right)], [(0, 0), (1, 1)], key_value_metadata={}) == 10
    table = pq.read_table(target)
    assert table.column("id").to_pylist() == list(range(10))
    assert table.column("x").to_pylist() == RIGHT["x"].to_pylist()


def test_no_row_groups_gives_the_schema_alone(tmp_path: Path) -> None:
    left = _write(tmp_path / "l.parquet", LEFT.slice(0, 0), [])
    right = _write(tmp_path / "r.parquet", RIGHT.slice(0, 0), [])
    target = tmp_path / "out.parquet"
    assert splice(target, [_side(left), _side(right)], [(0, 0), (1, 0)], key_value_metadata={}) == 0
    out = pq.ParquetFile(target)
    assert out.metadata.num_row_groups == 0 and out.schema_arrow.names == ["id", "name"]


def test_mismatched_row_groups_are_refused(tmp_path: Path) -> None:
    left = _write(tmp_path / "l.parquet", LEFT, [4, 6])
    right = _write(tmp_path / "r.parquet", RIGHT, [5, 5])
    with pytest.raises(SpliceError, match="row group 0: different row counts"):
        splice(tmp_path / "o.parquet", [_side(left), _side(right)], [(0, 0)], key_value_metadata={})
    single = _write(tmp_path / "s.parquet", RIGHT, [10])
    with pytest.raises(SpliceError, match="different numbers of row groups"):
        splice(tmp_path / "o.parquet", [_side(left), _side(single)], [(0, 0)], key_value_metadata={})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"PAR1 not really a parquet file", "does not end with"),
        (
            b"PAR1\x00\x00\x00\x15\xff\xff\xff\xff\x05\x00\x00\x00PAR1",
            "unreadable footer: the struct runs past",
        ),
        (b"PAR1\x15\x05\x00\x00\x01PAR1", "a footer of 16777221 bytes in a file of 13"),
        (b"PAR1\x00\x00\x00\x00\x01\x00\x00\x00PAR1", "the footer has no schema"),
    ],
)
def test_a_file_that_is_not_parquet_is_named(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(data)
    with pytest.raises(SpliceError, match=r"x\.parquet: " + message):
        ParquetSource.open(path)


def test_without_copy_file_range_the_bytes_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = _write(tmp_path / "l.parquet", LEFT, [4, 6])
    right = _write(tmp_path / "r.parquet", RIGHT, [4, 6])
    sides, fields = [_side(left), _side(right)], [(0, 0), (1, 0), (0, 1)]
    splice(tmp_path / "kernel.parquet", sides, fields, key_value_metadata={})

    def across_file_systems(*_args: object) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", across_file_systems)
    monkeypatch.setattr(parquet_splice, "_COPY_CHUNK", 7)  # many reads per column chunk
    splice(tmp_path / "copied.parquet", sides, fields, key_value_metadata={})
    assert (tmp_path / "copied.parquet").read_bytes() == (tmp_path / "kernel.parquet").read_bytes()
    assert pq.read_table(tmp_path / "copied.parquet").column("name").to_pylist() == RIGHT["name"].to_pylist()

    (tmp_path / "r.parquet").write_bytes((tmp_path / "r.parquet").read_bytes()[:10])  # truncated under us
    with pytest.raises(SpliceError, match=r"r\.parquet: ends inside a column chunk"):
        splice(tmp_path / "broken.parquet", sides, fields, key_value_metadata={})


def test_stepped_columns_read_back_as_their_sequences(tmp_path: Path) -> None:
    """Built without an encoder: every value, the types and the statistics as a reader sees them, across
    DELTA_BINARY_PACKED block boundaries (128 values), negative values and steps, and spliced."""
    utc_millis = parquet_splice.TIMESTAMP_UTC_MILLIS
    columns = [
        SteppedColumn(required_element("offset", INT64), -300, 1),
        SteppedColumn(required_element("op", INT32), 0, 0),
        SteppedColumn(required_element("t", INT64, *utc_millis), 1_714_564_800_123, 0),
        SteppedColumn(required_element("down", INT64), 2**40, -7),
    ]
    counts = [1, 2, 128, 129, 257, 1000]
    path = tmp_path / "stepped.parquet"
    write_stepped_columns(str(path), columns, counts)
    table = pq.read_table(path)
    n = sum(counts)
    assert table.schema == pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("op", pa.int32(), nullable=False),
            pa.field("t", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("down", pa.int64(), nullable=False),
        ]
    )
    assert table["offset"].to_pylist() == list(range(-300, -300 + n))
    assert table["op"].to_pylist() == [0] * n
    assert set(table["t"].cast(pa.int64()).to_pylist()) == {1_714_564_800_123}
    assert table["down"].to_pylist() == [2**40 - 7 * i for i in range(n)]
    metadata = pq.read_metadata(path)
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == counts
    start = 0
    for i, count in enumerate(counts):
        offset, down = metadata.row_group(i).column(0), metadata.row_group(i).column(3)
        assert offset.encodings == ("DELTA_BINARY_PACKED",) and offset.compression == "SNAPPY"
        assert (offset.statistics.min, offset.statistics.max) == (start - 300, start - 300 + count - 1)
        assert (down.statistics.min, down.statistics.max) == (
            2**40 - 7 * (start + count - 1),
            2**40 - 7 * start,
        )
        start += count
    spliced = tmp_path / "spliced.parquet"
    stepped = ParquetSource.open(path)
    values = _write(tmp_path / "v.parquet", pa.table({"v": list(range(n))}), counts)
    splice(spliced, [_side(stepped), _side(values)], [(0, 0), (1, 0), (0, 2)], key_value_metadata={})
    assert pq.read_table(spliced).to_pydict() == {
        "offset": table["offset"].to_pylist(),
        "v": list(range(n)),
        "t": table["t"].to_pylist(),
    }


def test_stepped_columns_without_rows(tmp_path: Path) -> None:
    column = SteppedColumn(required_element("offset", INT64), 0, 1)
    path = tmp_path / "empty.parquet"
    write_stepped_columns(str(path), [column], [])
    table = pq.read_table(path)
    assert table.num_rows == 0 and table.schema.names == ["offset"]
