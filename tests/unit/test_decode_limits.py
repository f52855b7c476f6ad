"""Hostile blocks decode in bounded time and memory, and no block larger than the limit is read or written.

The attacks point many offsets at one value: a few hundred bytes of FlatBuffer that would decode to
millions of objects, or a vector of offsets to one long string that would decode to gigabytes. They are
written here with the codec's own builder, which (unlike the model writer) lets one position be referred
to many times.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import flatbuffers
import pytest

from airflow_odf.odf.errors import BlockDecodeError, BlockEncodeError, OdfFormatError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT, fields_of
from airflow_odf.odf.format.flatbuffers_codec import _Builder, block_file, decode_block, encode_block
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.limits import MAX_BLOCK_BYTES_ENV
from airflow_odf.odf.schema.raw_arrow import decode_raw_arrow_schema
from tests.paths import CONFORMANCE_BLOCKS

ROOT = Path(__file__).resolve().parents[2]
_EPOCH = struct.pack("<iHHII", 1970, 1, 0, 0, 0)  # the Timestamp struct of 1970-01-01T00:00:00Z


def _table(b: _Builder, cls: type, *, unknown_slot: int = 0, **values: int | tuple[type, int]) -> int:
    """A table of `cls`; each value is an offset to a table or string already in `b`, or for a union
    field `(member class, offset)`. `unknown_slot` adds an unknown field there: a vtable that long."""
    b.start_table()
    for f in fields_of(cls):
        value = values.get(f.name)
        if isinstance(value, tuple):
            member, value = value
            assert f.type.union is not None
            b.add_scalar(f.slot - 2, "B", f.type.union.type_id(member))
        if value is not None:
            b.add_offset(f.slot, value)
    if unknown_slot:
        b.add_scalar(unknown_slot, "B", 1)
    return b.end_table()


def _block(b: _Builder, event_cls: type, event: int) -> bytes:
    """The block file whose event is the `event_cls` table at `event`."""
    union_slot = next(f.slot for f in fields_of(model.MetadataBlock) if f.name == "event")
    b.start_table()
    b.add_struct(next(f.slot for f in fields_of(model.MetadataBlock) if f.name == "system_time"), _EPOCH)
    b.add_scalar(union_slot - 2, "B", METADATA_EVENT.type_id(event_cls))
    b.add_offset(union_slot, event)
    return block_file(b.finish(b.end_table()))


def shared_struct_fields_block(levels: int, width: int) -> bytes:
    """A SetDataSchema whose fields vector repeats one offset, in structs nested `levels` deep."""
    b = _Builder()
    name = b.string("f")
    field = _table(
        b, model.DataField, name=name, type=(model.DataTypeString, _table(b, model.DataTypeString))
    )
    for _ in range(levels):
        struct_type = _table(b, model.DataTypeStruct, fields=b.offset_vector([field] * width))
        field = _table(b, model.DataField, name=name, type=(model.DataTypeStruct, struct_type))
    schema = _table(b, model.DataSchema, fields=b.offset_vector([field] * width))
    return _block(b, model.SetDataSchema, _table(b, model.SetDataSchema, schema=schema))


def shared_keyword_block(count: int, length: int) -> bytes:
    """A SetInfo whose `count` keywords are offsets to one string of `length` characters."""
    b = _Builder()
    keyword = b.string("k" * length)
    return _block(b, model.SetInfo, _table(b, model.SetInfo, keywords=b.offset_vector([keyword] * count)))


def long_vtable_block(count: int) -> bytes:
    """A SetTransform of `count` offsets to one input whose vtable has 30,000 slots (an unknown field).

    Within the object budget (an input and its name per 4-byte offset), but a reader that parsed the
    whole vtable of each table it meets would do 30,000 steps per input.
    """
    b = _Builder()
    one_input = _table(b, model.TransformInput, unknown_slot=60_000, dataset_ref=b.string("a"))
    sql = _table(b, model.TransformSql, engine=b.string("spark"), query=b.string("SELECT 1"))
    inputs = b.offset_vector([one_input] * count)
    event = _table(b, model.SetTransform, inputs=inputs, transform=(model.TransformSql, sql))
    return _block(b, model.SetTransform, event)


def shared_name_arrow_schema(count: int, length: int) -> bytes:
    """A raw Arrow schema of `count` offsets to one Int8 field whose name has `length` characters."""
    b = flatbuffers.Builder(1024)
    name = b.CreateString("n" * length)
    b.StartObject(2)  # Int {bitWidth: 8, is_signed: true}
    b.PrependInt32Slot(0, 8, 0)
    b.PrependBoolSlot(1, True, False)
    int_type = b.EndObject()
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUint8Slot(2, 2, 0)  # Type.Int
    b.PrependUOffsetTRelativeSlot(3, int_type, 0)
    field = b.EndObject()
    b.StartVector(4, count, 4)
    for _ in range(count):
        b.PrependUOffsetTRelative(field)
    fields = b.EndVector()
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(1, fields, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def run_bounded(code: str, *, memory: int = 1 << 30, timeout: float = 60) -> str:
    """Runs `code` in a fresh interpreter limited to `memory` bytes; its stdout. A hang fails the test."""
    preamble = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))\n"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", preamble + textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s:\n{code}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --------------------------------------------------------------------------------------------------
# The decode budget
# --------------------------------------------------------------------------------------------------


def test_shared_struct_fields_exceed_the_object_budget() -> None:
    data = shared_struct_fields_block(levels=5, width=8)  # 584 bytes, 8**6 leaf fields
    with pytest.raises(BlockDecodeError, match=r"decodes to more than \d+ objects") as info:
        decode_block(data)
    assert str(info.value).startswith("event.schema.fields[0].type.fields")


def test_shared_keyword_exceeds_the_value_bytes_budget() -> None:
    data = shared_keyword_block(count=2_000, length=1_000)
    with pytest.raises(BlockDecodeError, match=r"^event\.keywords: .* bytes of text and binary values"):
        decode_block(data)


def test_a_few_shared_values_within_the_budget_still_decode() -> None:
    block = decode_block(shared_keyword_block(count=10, length=8))
    assert block.event == model.SetInfo(keywords=["kkkkkkkk"] * 10)


def test_amplifying_blocks_fail_fast_in_little_memory() -> None:
    """The blocks of the report, at full size: each is a BlockDecodeError under 1 GiB and 60 s."""
    out = run_bounded(
        """
        from airflow_odf.odf.errors import BlockDecodeError
        from airflow_odf.odf.format.flatbuffers_codec import decode_block
        from tests.unit.test_decode_limits import shared_keyword_block, shared_struct_fields_block

        for data in (shared_struct_fields_block(6, 10), shared_keyword_block(200_000, 10_000)):
            try:
                decode_block(data)
                print("decoded")
            except BlockDecodeError as e:
                print("BlockDecodeError", len(data), str(e).split(": ")[-1])
        """
    )
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0].startswith("BlockDecodeError") and "objects (offsets shared" in lines[0]
    assert lines[1].startswith("BlockDecodeError 810") and "bytes of text and binary values" in lines[1]


def test_a_vtable_shared_by_many_tables_is_read_only_as_far_as_the_model_needs() -> None:
    out = run_bounded(
        """
        from airflow_odf.odf.format.flatbuffers_codec import decode_block
        from tests.unit.test_decode_limits import long_vtable_block

        data = long_vtable_block(200_000)
        print(len(data), len(decode_block(data).event.inputs))
        """
    )
    size, inputs = out.split()
    assert int(size) < 1_000_000 and inputs == "200000"


def test_raw_arrow_schema_with_a_shared_long_name_is_refused() -> None:
    data = shared_name_arrow_schema(count=2_000, length=1_000)
    with pytest.raises(OdfFormatError, match=r"^rawArrowSchema\.fields\[\d+\]: .* bytes of text"):
        decode_raw_arrow_schema(data)


def test_raw_arrow_schema_at_full_size_fails_fast_in_little_memory() -> None:
    out = run_bounded(
        """
        from airflow_odf.odf.errors import OdfFormatError
        from airflow_odf.odf.schema.raw_arrow import decode_raw_arrow_schema
        from tests.unit.test_decode_limits import shared_name_arrow_schema

        try:
            decode_raw_arrow_schema(shared_name_arrow_schema(200_000, 10_000))
            print("decoded")
        except OdfFormatError as e:
            print("OdfFormatError", e)
        """
    )
    assert out.startswith("OdfFormatError rawArrowSchema.fields["), out


def test_every_conformance_vector_decodes_within_the_budget() -> None:
    files = sorted(CONFORMANCE_BLOCKS.glob("*.bin"))
    assert len(files) >= 14
    for path in files:
        assert isinstance(decode_block(path.read_bytes()), model.MetadataBlock), path


# --------------------------------------------------------------------------------------------------
# The maximum block size
# --------------------------------------------------------------------------------------------------


def _info_block(description: str) -> model.MetadataBlock:
    return model.MetadataBlock(
        system_time=Timestamp(0), sequence_number=0, event=model.SetInfo(description=description)
    )


def test_a_block_larger_than_the_limit_is_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode_block(_info_block("x" * 2_000))
    monkeypatch.setenv(MAX_BLOCK_BYTES_ENV, "1000")
    with pytest.raises(BlockDecodeError) as info:
        decode_block(data)
    assert str(info.value) == (
        f"block of {len(data)} bytes is larger than the 1000 bytes a block may have (ODF_MAX_BLOCK_BYTES)"
    )


def test_a_block_larger_than_the_limit_is_not_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_BLOCK_BYTES_ENV, "1000")
    assert len(encode_block(_info_block("x" * 800))) <= 1000
    with pytest.raises(BlockEncodeError) as info:
        encode_block(_info_block("x" * 2_000))
    assert (
        str(info.value)
        == "the block would be larger than the 1000 bytes a block may have (ODF_MAX_BLOCK_BYTES)"
    )


def test_many_small_tables_are_stopped_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables without strings grow the buffer too: the builder stops before the limit is far behind."""
    monkeypatch.setenv(MAX_BLOCK_BYTES_ENV, "4096")
    fields = [model.DataField(name="", type=model.DataTypeString())] * 10_000
    event = model.SetDataSchema(schema=model.DataSchema(fields=fields))
    block = model.MetadataBlock(system_time=Timestamp(0), sequence_number=0, event=event)
    with pytest.raises(BlockEncodeError, match="larger than the 4096 bytes"):
        encode_block(block)
