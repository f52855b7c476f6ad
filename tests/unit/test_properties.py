"""Property tests of the ODF core: generic strategies for every model class, built from `format.fields`.

The strategies walk the same field descriptors as the codecs (`fields_of`), so a type added to the model
is generated here without extra code. Properties: FlatBuffers and YAML round-trips, deterministic
encoding, block hash = sha3-256 multihash of the bytes, and robustness of the decoder to corrupt input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from datetime import date
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_odf.odf.errors import BlockDecodeError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT, Kind, TypeSpec, fields_of
from airflow_odf.odf.format.flatbuffers_codec import (
    block_hash,
    decode_block,
    decode_table,
    encode_block,
    encode_table,
)
from airflow_odf.odf.format.manifests import SQL_ENGINES, dump_manifest, dump_manifests, load_manifests
from airflow_odf.odf.format.multiformats import SHA3_256, DatasetId, Multihash
from airflow_odf.odf.format.names import is_dataset_name
from airflow_odf.odf.format.timestamps import Timestamp

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

EVENT_CLASSES = METADATA_EVENT.members
ALL_TABLES = sorted(
    {
        c
        for c in vars(model).values()
        if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == model.__name__
    },
    key=lambda c: c.__name__,
)

_INT_RANGES = {
    "i": (-(2**31), 2**31 - 1),
    "I": (0, 2**32 - 1),
    "q": (-(2**63), 2**63 - 1),
    "Q": (0, 2**64 - 1),
    "h": (-(2**15), 2**15 - 1),
}
_EPOCH = date(1970, 1, 1).toordinal()


def _year_start(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH) * 86400


def timestamps(min_year: int = 1, max_year: int = 9999) -> st.SearchStrategy[Timestamp]:
    """Any instant with nanoseconds in the given years (UTC)."""
    last = _year_start(max_year + 1) - 1 if max_year < 9999 else _year_start(9999) + 365 * 86400 - 1
    return st.builds(Timestamp, st.integers(_year_start(min_year), last), st.integers(0, 999_999_999))


def json_values(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """JSON-safe values without floats (float formatting is not canonical across implementations)."""
    scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | text
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=8,
    )


class Gen:
    """Generic strategies for model values, driven by the field descriptors of `format.fields`."""

    def __init__(
        self,
        min_year: int = 1,
        overrides: dict[type, st.SearchStrategy] | None = None,
        text: st.SearchStrategy[str] | None = None,
    ) -> None:
        self.min_year = min_year
        # any code point but surrogates: non-ASCII, controls, line breaks, YAML-significant characters
        self.text = text if text is not None else st.text(max_size=12)
        self.overrides = dict(overrides or {})
        self._tables: dict[type, st.SearchStrategy] = {}
        self._generic: dict[type, st.SearchStrategy] = {}

    def value(self, t: TypeSpec) -> st.SearchStrategy[Any]:
        kind = t.kind
        if kind is Kind.STRING:
            return self.text
        if kind is Kind.BYTES:
            return st.binary(max_size=40)
        if kind is Kind.MULTIHASH:
            return st.binary(max_size=64).map(Multihash.sha3_256)
        if kind is Kind.DATASET_ID:
            return st.binary(min_size=32, max_size=32).map(DatasetId)
        if kind is Kind.TIMESTAMP:
            return timestamps(self.min_year)
        if kind is Kind.INT:
            low, high = _INT_RANGES[t.fmt]
            return st.integers(low, high)
        if kind is Kind.BOOL:
            return st.booleans()
        if kind is Kind.ENUM:
            return st.sampled_from(list(t.cls))
        if kind is Kind.EXTRA:
            return st.dictionaries(self.text, json_values(self.text), max_size=3)
        if kind is Kind.LIST:
            assert t.item is not None
            return st.lists(self.value(t.item), max_size=3)
        if kind is Kind.TABLE:
            return self.table(t.cls)
        if kind is Kind.UNION:
            assert t.union is not None
            return st.one_of([self.table(m) for m in t.union.members])
        raise AssertionError(kind)

    def table(self, cls: type) -> st.SearchStrategy[Any]:
        if cls in self.overrides:
            return self.overrides[cls]
        if cls not in self._tables:
            self._tables[cls] = st.deferred(lambda: self._build(cls))
        return self._tables[cls]

    def generic(self, cls: type) -> st.SearchStrategy[Any]:
        """The field-by-field strategy of `cls`, ignoring an override of `cls` itself."""
        if cls not in self._generic:
            self._generic[cls] = self._build(cls)
        return self._generic[cls]

    def _build(self, cls: type) -> st.SearchStrategy[Any]:
        kwargs = {}
        for f in fields_of(cls):
            strategy = self.value(f.type)
            kwargs[f.name] = strategy if f.required else st.none() | strategy
        return st.builds(cls, **kwargs)

    def blocks(self, events: st.SearchStrategy[Any]) -> st.SearchStrategy[model.MetadataBlock]:
        return st.builds(
            model.MetadataBlock,
            system_time=timestamps(self.min_year),
            prev_block_hash=st.none() | self.value(TypeSpec(Kind.MULTIHASH)),
            sequence_number=st.integers(0, 2**64 - 1),
            event=events,
        )


# Scalars that YAML 1.1 or 1.2 would read as something else than a string, or fold, unless quoted.
TRICKY_TEXTS = [
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "true",
    "False",
    "null",
    "~",
    "",
    " ",
    "010",
    "0x1F",
    "1_000",
    "1:30",
    "0b11",
    "1.",
    ".5",
    "+12",
    "-0",
    ".inf",
    "-.Inf",
    ".nan",
    "2024-01-01",
    "2024-01-01T00:00:00Z",
    "=",
    "<<",
    "- a",
    "a: b",
    "#x",
    "'",
    '"',
    "@x",
    "`x",
    "%x",
    "!x",
    "&x",
    "*x",
    "|",
    ">",
    "[",
    "{",
    "? x",
    "a\n",
    "\n",
    "é\u2028",
    "\x85",
    "\t",
    "\r\n",
    "\ufeff",
    "\x00",
    "a\n b\n",
    "  lead",
    "trail  ",
    "1e3",
    "1E5",
    "-1e-3",
    "+1e3",
    "0o17",
    "Null",
    "TRUE",
    "+.inf",
    ".NaN",
    "0x",
    "-",
    "---",
    "...",
    "a #b",
    "a:b",
    "[a]",
    "{a: 1}",
    "%YAML 1.2",
]
YAML_TEXT = st.text(max_size=12) | st.sampled_from(TRICKY_TEXTS)

ANY = Gen()
YAML_SAFE = Gen(min_year=1000, text=YAML_TEXT)  # years < 1000: see test_yaml_timestamps_before_year_1000


def sha3_multihash(data: bytes) -> Multihash:
    return Multihash(SHA3_256, hashlib.sha3_256(data).digest())


# --------------------------------------------------------------------------------------------------
# FlatBuffers
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("event_cls", EVENT_CLASSES, ids=[c.__name__ for c in EVENT_CLASSES])
@PROPERTY
@given(data=st.data())
def test_block_flatbuffers_round_trip(event_cls: type, data: st.DataObject):
    block = data.draw(ANY.blocks(ANY.table(event_cls)))
    assert type(block.event) is event_cls
    encoded = encode_block(block)
    assert decode_block(encoded) == block
    assert encode_block(block) == encoded  # deterministic
    assert encode_block(decode_block(encoded)) == encoded  # decoding loses nothing that shapes the bytes
    h = block_hash(encoded)
    assert h == sha3_multihash(encoded)
    assert str(h) == "f1620" + hashlib.sha3_256(encoded).hexdigest()


@PROPERTY
@given(block=ANY.blocks(ANY.value(TypeSpec(Kind.UNION, union=METADATA_EVENT))))
def test_block_of_any_event_round_trips(block: model.MetadataBlock):
    event(type(block.event).__name__)
    encoded = encode_block(block)
    assert decode_block(encoded) == block
    assert block_hash(encoded) == sha3_multihash(encoded)


@pytest.mark.parametrize("cls", ALL_TABLES, ids=[c.__name__ for c in ALL_TABLES])
@FEW
@given(data=st.data())
def test_every_model_table_round_trips_as_flatbuffer(cls: type, data: st.DataObject):
    obj = data.draw(ANY.table(cls))
    encoded = encode_table(obj)
    assert decode_table(encoded, cls) == obj
    assert encode_table(obj) == encoded


def test_every_metadata_event_kind_is_covered():
    assert [c.__name__ for c in EVENT_CLASSES] == [
        "AddData",
        "ExecuteTransform",
        "Seed",
        "SetPollingSource",
        "SetTransform",
        "SetVocab",
        "SetAttachments",
        "SetInfo",
        "SetLicense",
        "SetDataSchema",
        "AddPushSource",
        "DisablePushSource",
        "DisablePollingSource",
    ]


# --------------------------------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("event_cls", EVENT_CLASSES, ids=[c.__name__ for c in EVENT_CLASSES])
@PROPERTY
@given(data=st.data())
def test_block_yaml_round_trip(event_cls: type, data: st.DataObject):
    block = data.draw(YAML_SAFE.blocks(YAML_SAFE.table(event_cls)))
    text = dump_manifest(block)
    (m,) = load_manifests(text)
    assert (m.kind, m.version) == ("MetadataBlock", 3)
    assert m.content == block
    assert dump_manifest(m.content) == text  # canonical writing is stable


@pytest.mark.parametrize("event_cls", EVENT_CLASSES, ids=[c.__name__ for c in EVENT_CLASSES])
@FEW
@given(data=st.data())
def test_event_yaml_round_trip(event_cls: type, data: st.DataObject):
    ev = data.draw(YAML_SAFE.table(event_cls))
    (m,) = load_manifests(dump_manifest(ev))
    assert (m.kind, m.version, m.content) == ("MetadataEvent", 1, ev)


@settings(max_examples=50, deadline=None)
@given(ts=timestamps(1, 999))
def test_yaml_timestamps_before_year_1000(ts: Timestamp):
    assert Timestamp.parse(str(ts)) == ts
    block = model.MetadataBlock(system_time=ts, sequence_number=0, event=model.SetInfo())
    (m,) = load_manifests(dump_manifest(block))
    assert m.content == block


@pytest.mark.parametrize("text", TRICKY_TEXTS)
def test_number_like_strings_round_trip(text: str):
    info = model.SetInfo(description=text, keywords=[text])
    (m,) = load_manifests(dump_manifest(info))
    assert m.content == info
    schema = model.SetDataSchema(schema=model.DataSchema(fields=[], extra={text: text}))
    (m,) = load_manifests(dump_manifest(schema))
    assert m.content == schema


# ----- DatasetSnapshot: only what a snapshot may contain -----


@st.composite
def valid_sql(draw: st.DrawFn) -> model.TransformSql:
    sql = dataclasses.replace(
        draw(SNAPSHOT_GEN.generic(model.TransformSql)), engine=draw(st.sampled_from(SQL_ENGINES))
    )
    if draw(st.booleans()):
        return dataclasses.replace(sql, query=draw(SNAPSHOT_GEN.text), queries=None)
    steps = draw(st.lists(SNAPSHOT_GEN.generic(model.SqlQueryStep), min_size=1, max_size=3))
    named = [
        s if s.alias is not None else dataclasses.replace(s, alias=draw(SNAPSHOT_GEN.text))
        for s in steps[:-1]
    ]
    return dataclasses.replace(sql, query=None, queries=[*named, steps[-1]])


_WORD = st.text(alphabet="abcXYZ019", min_size=1, max_size=4)
_HOSTNAME = st.lists(st.lists(_WORD, min_size=1, max_size=3).map("-".join), min_size=1, max_size=3).map(
    ".".join
)
dataset_names = _HOSTNAME  # a repository takes no account prefix

SNAPSHOT_GEN = Gen(min_year=1000, overrides={model.TransformSql: valid_sql()}, text=YAML_TEXT)
SNAPSHOT_GEN.overrides[model.SetTransform] = st.builds(
    model.SetTransform,
    inputs=st.lists(SNAPSHOT_GEN.table(model.TransformInput), min_size=1, max_size=3),
    transform=valid_sql(),
)

_COMMON = [model.SetVocab, model.SetAttachments, model.SetInfo, model.SetLicense, model.SetDataSchema]
SNAPSHOT_EVENTS = {
    model.DatasetKind.ROOT: [model.SetPollingSource, model.AddPushSource, *_COMMON],
    model.DatasetKind.DERIVATIVE: [model.SetTransform, *_COMMON],
}


@st.composite
def snapshots(draw: st.DrawFn) -> model.DatasetSnapshot:
    kind = draw(st.sampled_from(list(model.DatasetKind)))
    events = st.one_of([SNAPSHOT_GEN.table(c) for c in SNAPSHOT_EVENTS[kind]])
    return model.DatasetSnapshot(
        name=draw(dataset_names), kind=kind, metadata=draw(st.lists(events, max_size=4))
    )


@PROPERTY
@given(snap=snapshots())
def test_snapshot_yaml_round_trip(snap: model.DatasetSnapshot):
    assert is_dataset_name(snap.name)
    for e in snap.metadata:
        event(type(e).__name__)
    text = dump_manifest(snap)
    (m,) = load_manifests(text)
    assert (m.kind, m.version, m.content) == ("DatasetSnapshot", 1, snap)


@FEW
@given(
    contents=st.lists(
        snapshots() | YAML_SAFE.blocks(YAML_SAFE.value(TypeSpec(Kind.UNION, union=METADATA_EVENT))),
        min_size=1,
        max_size=4,
    )
)
def test_multi_document_yaml_round_trip(contents: list[Any]):
    manifests = load_manifests(dump_manifests(contents))
    assert [m.content for m in manifests] == contents


@pytest.mark.parametrize(
    "event_cls",
    sorted({c for cs in SNAPSHOT_EVENTS.values() for c in cs}, key=lambda c: c.__name__),
    ids=lambda c: c.__name__,
)
@FEW
@given(data=st.data())
def test_each_snapshot_event_kind_round_trips(event_cls: type, data: st.DataObject):
    kind = (
        model.DatasetKind.ROOT
        if event_cls in SNAPSHOT_EVENTS[model.DatasetKind.ROOT]
        else (model.DatasetKind.DERIVATIVE)
    )
    ev = data.draw(SNAPSHOT_GEN.table(event_cls))
    snap = model.DatasetSnapshot(name=data.draw(dataset_names), kind=kind, metadata=[ev])
    (m,) = load_manifests(dump_manifest(snap))
    assert m.content == snap


# --------------------------------------------------------------------------------------------------
# Corrupt block files
# --------------------------------------------------------------------------------------------------


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[bytes, bytes]:
    original = encode_block(draw(ANY.blocks(ANY.value(TypeSpec(Kind.UNION, union=METADATA_EVENT)))))
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        event(op)
        if op == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        elif not data:
            data += draw(st.binary(min_size=1, max_size=8))
        elif op == "flip":
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif op == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            i = draw(st.integers(0, len(data) - 1))
            del data[i : i + draw(st.integers(1, 8))]
    return original, bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=corruptions())
def test_corrupt_blocks_decode_or_raise_block_decode_error(case: tuple[bytes, bytes]):
    _original, corrupt = case
    try:
        block = decode_block(corrupt)
    except BlockDecodeError as e:
        event("BlockDecodeError")
        assert str(e)
    else:
        event("decoded")
        assert isinstance(block, model.MetadataBlock)


@PROPERTY
@given(data=st.binary(max_size=300))
def test_random_bytes_decode_or_raise_block_decode_error(data: bytes):
    try:
        block = decode_block(data)
    except BlockDecodeError:
        return
    assert isinstance(block, model.MetadataBlock)


@PROPERTY
@given(block=ANY.blocks(ANY.value(TypeSpec(Kind.UNION, union=METADATA_EVENT))), cut=st.integers(0, 10_000))
def test_every_truncation_is_rejected(block: model.MetadataBlock, cut: int):
    """A prefix of a block file never decodes (the outer vector length no longer fits)."""
    encoded = encode_block(block)
    with pytest.raises(BlockDecodeError):
        decode_block(encoded[: cut % len(encoded)])


def _block_with_timestamp(ts: str) -> bytes:
    return encode_block(
        model.MetadataBlock(
            system_time=Timestamp.parse(ts), sequence_number=1, event=model.SetInfo(description="d")
        )
    )


def _patch(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1
    return data.replace(old, new)


def test_day_366_of_a_non_leap_year_is_rejected():
    """The reference (`NaiveDate::from_yo_opt`) rejects it; reading it as Jan 1 would change the bytes."""
    data = _block_with_timestamp("2050-12-31T00:00:00Z")
    corrupt = _patch(data, struct.pack("<iH", 2050, 365), struct.pack("<iH", 2050, 366))
    with pytest.raises(BlockDecodeError):
        decode_block(corrupt)


def test_day_366_of_a_leap_year_is_valid():
    data = _block_with_timestamp("2048-12-31T23:59:59.5Z")
    assert struct.pack("<iH", 2048, 366) in data
    assert str(decode_block(data).system_time) == "2048-12-31T23:59:59.500Z"


@pytest.mark.parametrize(("year", "ordinal"), [(0, 1), (10000, 1), (-1, 1), (2050, 0), (2050, 367)])
def test_out_of_range_timestamp_parts_are_rejected(year: int, ordinal: int):
    data = _block_with_timestamp("2050-06-01T00:00:00Z")
    day = date(2050, 6, 1).timetuple().tm_yday
    corrupt = _patch(data, struct.pack("<iH", 2050, day), struct.pack("<iH", year, ordinal))
    with pytest.raises(BlockDecodeError, match="systemTime"):
        decode_block(corrupt)


def test_huge_integer_in_extra_attributes_is_a_block_decode_error():
    """json.loads raises a plain ValueError past int max_str_digits; it must surface as BlockDecodeError."""
    data = encode_block(
        model.MetadataBlock(
            system_time=Timestamp(0), sequence_number=1, event=model.AddData(extra={"a/b": "x" * 5000})
        )
    )
    corrupt = _patch(data, b'"' + b"x" * 5000 + b'"', b"1" * 5002)  # still valid JSON, same length
    with pytest.raises(BlockDecodeError):
        decode_block(corrupt)


def test_extra_attributes_that_are_not_an_object_are_rejected():
    data = encode_block(
        model.MetadataBlock(system_time=Timestamp(0), sequence_number=1, event=model.AddData(extra={"a": 1}))
    )
    corrupt = _patch(data, b'{"a":1}', b"[1,2,3]")
    with pytest.raises(BlockDecodeError, match="extra"):
        decode_block(corrupt)
