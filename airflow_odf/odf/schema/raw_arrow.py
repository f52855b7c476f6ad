"""RFC-010 `rawArrowSchema`: a bare Arrow `Schema` flatbuffer (root table = Schema, no IPC framing).

kamu stopped writing this field (RFC-016 replaced it), but older chains carry it, so the reader must
accept the layout of any standard Arrow writer and must survive corrupt bytes: every defect raises
`OdfFormatError` naming the field. The Arrow tables are described once, declaratively (`_TYPES`), and
both directions are generic over that description; only the pyarrow mapping is type-specific.

Writing uses the `flatbuffers` package's builder: byte identity with other writers is not needed.

pyarrow cannot represent everything the format can: schemas in the non-native byte order and
YEAR_MONTH / DAY_TIME intervals are rejected on read; a Map's `entries` field always reads as pyarrow's
non-null "entries"; a Null field always reads as nullable. Dictionary ids are not kept (pyarrow schemas
have none), the writer numbers dictionaries 0, 1, ... Extension types are not written; on read they
stay their storage type plus the `ARROW:extension:*` field metadata, as in any reader not knowing them.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import flatbuffers
import pyarrow as pa
from flatbuffers import number_types

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.decode_budget import DecodeBudget

#: One field of an Arrow type table: (name, kind, default). Kinds are `struct` formats for scalars,
#: "str" for a string and "[i]" for a vector of int32.
_Slot = tuple[str, str, Any]

#: The `Type` union of Arrow's Schema.fbs in union-id order (1 = Null), each with its table's fields
#: in slot order and their schema defaults (absent scalars read as the default).
_TYPES: tuple[tuple[str, tuple[_Slot, ...]], ...] = (
    ("Null", ()),
    ("Int", (("bitWidth", "i", 0), ("is_signed", "?", False))),
    ("FloatingPoint", (("precision", "h", 0),)),
    ("Binary", ()),
    ("Utf8", ()),
    ("Bool", ()),
    ("Decimal", (("precision", "i", 0), ("scale", "i", 0), ("bitWidth", "i", 128))),
    ("Date", (("unit", "h", 1),)),
    ("Time", (("unit", "h", 1), ("bitWidth", "i", 32))),
    ("Timestamp", (("unit", "h", 0), ("timezone", "str", None))),
    ("Interval", (("unit", "h", 0),)),
    ("List", ()),
    ("Struct_", ()),
    ("Union", (("mode", "h", 0), ("typeIds", "[i]", None))),
    ("FixedSizeBinary", (("byteWidth", "i", 0),)),
    ("FixedSizeList", (("listSize", "i", 0),)),
    ("Map", (("keysSorted", "?", False),)),
    ("Duration", (("unit", "h", 1),)),
    ("LargeBinary", ()),
    ("LargeUtf8", ()),
    ("LargeList", ()),
    ("RunEndEncoded", ()),
    ("BinaryView", ()),
    ("Utf8View", ()),
    ("ListView", ()),
    ("LargeListView", ()),
)
_TYPE_IDS = {name: i + 1 for i, (name, _) in enumerate(_TYPES)}
_TYPE_SLOTS = dict(_TYPES)

# Field: name, nullable, type_type, type, dictionary, children, custom_metadata (slot indexes).
# Schema: endianness, fields, custom_metadata, features. DictionaryEncoding: id, indexType, isOrdered.
_FIELD_SLOTS = 7
_SCHEMA_SLOTS = 4
_DICTIONARY_SLOTS = 4

#: Arrow's `Endianness` of this host: pyarrow schemas always describe native-endian data.
_NATIVE_ENDIANNESS = 0 if sys.byteorder == "little" else 1
_MAX_DEPTH = 64

_SIZES = {"B": 1, "?": 1, "h": 2, "H": 2, "i": 4, "I": 4}
_FLAGS = {
    "?": number_types.BoolFlags,
    "h": number_types.Int16Flags,
    "i": number_types.Int32Flags,
    "q": number_types.Int64Flags,
}

_TIME_UNITS = ("s", "ms", "us", "ns")
_FLOATS = (pa.float16(), pa.float32(), pa.float64())
_INTS = {
    (8, True): pa.int8(),
    (16, True): pa.int16(),
    (32, True): pa.int32(),
    (64, True): pa.int64(),
    (8, False): pa.uint8(),
    (16, False): pa.uint16(),
    (32, False): pa.uint32(),
    (64, False): pa.uint64(),
}
_DECIMALS = {32: pa.decimal32, 64: pa.decimal64, 128: pa.decimal128, 256: pa.decimal256}
#: Types whose table has no fields and that have no children.
_PLAIN = {
    "Null": pa.null(),
    "Binary": pa.binary(),
    "Utf8": pa.utf8(),
    "Bool": pa.bool_(),
    "LargeBinary": pa.large_binary(),
    "LargeUtf8": pa.large_utf8(),
    "BinaryView": pa.binary_view(),
    "Utf8View": pa.string_view(),
}
_PLAIN_NAMES = {t: name for name, t in _PLAIN.items()}
#: Variable-size list types: (pyarrow factory, pyarrow predicate).
_LISTS = {
    "List": (pa.list_, pa.types.is_list),
    "LargeList": (pa.large_list, pa.types.is_large_list),
    "ListView": (pa.list_view, pa.types.is_list_view),
    "LargeListView": (pa.large_list_view, pa.types.is_large_list_view),
}
#: Child field counts of the types that have children (Struct_ and Union: any number).
_CHILDREN = {"FixedSizeList": 1, "Map": 1, "RunEndEncoded": 2, **dict.fromkeys(_LISTS, 1)}

#: Errors pyarrow raises for type parameters it rejects.
_PYARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


class _Table:
    """One table of a FlatBuffer; every read is bounds-checked, paid from the buffer's `budget`, and
    errors name `path`."""

    def __init__(self, buf: bytes, pos: int, path: str, budget: DecodeBudget) -> None:
        budget.spend(where=path)
        self.buf = buf
        self.pos = pos
        self.path = path
        self.budget = budget
        self.vtable = pos - _unpack(buf, "i", pos, path)
        self.vt_size = _unpack(buf, "H", self.vtable, path)
        self.obj_size = _unpack(buf, "H", self.vtable + 2, path)
        if self.vt_size < 4 or self.vt_size % 2 or self.vtable + self.vt_size > len(buf):
            raise OdfFormatError(f"{path}: invalid vtable at {self.vtable}")
        if self.obj_size < 4 or pos + self.obj_size > len(buf):
            raise OdfFormatError(f"{path}: table of {self.obj_size} bytes at {pos} exceeds the buffer")

    def _field(self, index: int) -> int:
        """Absolute position of field `index`, or 0 when it is absent."""
        slot = 4 + 2 * index
        if slot >= self.vt_size:
            return 0
        off = _unpack(self.buf, "H", self.vtable + slot, self.path)
        if off and (off < 4 or off >= self.obj_size):
            raise OdfFormatError(
                f"{self.path}: field offset {off} outside its table of {self.obj_size} bytes"
            )
        return self.pos + off if off else 0

    def scalar(self, index: int, fmt: str, default: Any) -> Any:
        pos = self._field(index)
        if not pos:
            return default
        value = _unpack(self.buf, fmt, pos, self.path)
        return bool(value) if fmt == "?" else value

    def _target(self, index: int) -> int:
        pos = self._field(index)
        return pos and _deref(self.buf, pos, self.path)

    def table(self, index: int, path: str) -> _Table | None:
        target = self._target(index)
        return _Table(self.buf, target, path, self.budget) if target else None

    def string(self, index: int) -> bytes | None:
        target = self._target(index)
        if not target:
            return None
        length = _unpack(self.buf, "I", target, self.path)
        if target + 4 + length > len(self.buf):
            raise OdfFormatError(f"{self.path}: string of {length} bytes at {target} exceeds the buffer")
        self.budget.spend(length, self.path)
        return bytes(self.buf[target + 4 : target + 4 + length])

    def _vector(self, index: int, elem_size: int) -> list[int]:
        """Positions of the elements of vector field `index` (empty when absent)."""
        target = self._target(index)
        if not target:
            return []
        count = _unpack(self.buf, "I", target, self.path)
        if target + 4 + elem_size * count > len(self.buf):
            raise OdfFormatError(f"{self.path}: vector of {count} elements at {target} exceeds the buffer")
        self.budget.spend(where=self.path)
        return [target + 4 + elem_size * i for i in range(count)]

    def tables(self, index: int, path: str) -> list[_Table]:
        return [
            _Table(self.buf, _deref(self.buf, p, path), f"{path}[{i}]", self.budget)
            for i, p in enumerate(self._vector(index, 4))
        ]

    def ints(self, index: int) -> list[int] | None:
        if not self._field(index):
            return None
        return [_unpack(self.buf, "i", p, self.path) for p in self._vector(index, 4)]


def _unpack(buf: bytes, fmt: str, pos: int, path: str) -> int:
    if pos < 0 or pos + _SIZES[fmt] > len(buf):
        raise OdfFormatError(f"{path}: offset {pos} is outside the buffer of {len(buf)} bytes")
    return struct.unpack_from("<" + fmt, buf, pos)[0]


def _deref(buf: bytes, pos: int, path: str) -> int:
    return pos + _unpack(buf, "I", pos, path)


def _text(raw: bytes, path: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise OdfFormatError(f"{path}: not valid UTF-8") from None


def _read_metadata(table: _Table, index: int, path: str) -> dict[bytes, bytes] | None:
    """`custom_metadata` pairs, kept as bytes like pyarrow does (values need not be UTF-8)."""
    out = {}
    for entry in table.tables(index, path):
        key = entry.string(0)
        if key is None:
            raise OdfFormatError(f"{entry.path}: key is missing")
        out[key] = entry.string(1) or b""
    return out or None


def _read_params(table: _Table | None, slots: tuple[_Slot, ...]) -> dict[str, Any]:
    if table is None:  # an absent type table reads as all defaults
        return {name: default for name, _, default in slots}
    params: dict[str, Any] = {}
    for i, (name, kind, default) in enumerate(slots):
        if kind == "str":
            raw = table.string(i)
            params[name] = None if raw is None else _text(raw, f"{table.path}.{name}")
        elif kind == "[i]":
            params[name] = table.ints(i)
        else:
            params[name] = table.scalar(i, kind, default)
    return params


def _read_field(table: _Table, depth: int) -> pa.Field:
    """A field and its children, depth-first."""
    if depth > _MAX_DEPTH:
        raise OdfFormatError(f"{table.path}: nested deeper than {_MAX_DEPTH} levels")
    raw_name = table.string(0)
    name = "" if raw_name is None else _text(raw_name, f"{table.path}.name")
    where = f"{table.path} ({name})" if name else table.path
    type_id = table.scalar(2, "B", 0)
    if not 1 <= type_id <= len(_TYPES):
        raise OdfFormatError(f"{where}.type: unknown Arrow type id {type_id}")
    type_name, slots = _TYPES[type_id - 1]
    params = _read_params(table.table(3, f"{where}.type"), slots)
    children = [_read_field(child, depth + 1) for child in table.tables(5, f"{where}.children")]
    dictionary = table.table(4, f"{where}.dictionary")
    metadata = _read_metadata(table, 6, f"{where}.custom_metadata")
    try:
        arrow_type = _arrow_type(type_name, params, children, where)
        if dictionary is not None:
            arrow_type = _dictionary_type(dictionary, arrow_type)
        # pyarrow refuses non-nullable Null fields, which other writers may produce
        nullable = table.scalar(1, "?", False) or type_name == "Null"
        return pa.field(name, arrow_type, nullable, metadata)
    except OdfFormatError:
        raise
    except _PYARROW_ERRORS as e:
        raise OdfFormatError(f"{where}: invalid Arrow {type_name} type: {e}") from None


def _dictionary_type(table: _Table, value_type: pa.DataType) -> pa.DataType:
    index = table.table(1, f"{table.path}.indexType")
    index_type = pa.int32()  # the format's default when `indexType` is absent
    if index is not None:
        params = _read_params(index, _TYPE_SLOTS["Int"])
        index_type = _arrow_type("Int", params, [], index.path)
    return pa.dictionary(index_type, value_type, table.scalar(2, "?", False))


def _time_unit(unit: int, where: str) -> str:
    if not 0 <= unit < len(_TIME_UNITS):
        raise OdfFormatError(f"{where}: unknown Arrow TimeUnit {unit}")
    return _TIME_UNITS[unit]


def _non_negative(value: int, what: str, where: str) -> int:
    if value < 0:
        raise OdfFormatError(f"{where}: negative {what} {value}")
    return value


def _arrow_type(name: str, p: dict[str, Any], children: list[pa.Field], where: str) -> pa.DataType:
    """The pyarrow type of an Arrow `Type` union member read as `p`; may raise pyarrow's errors."""
    if name not in ("Struct_", "Union") and len(children) != _CHILDREN.get(name, 0):
        count = _CHILDREN.get(name, 0)
        raise OdfFormatError(
            f"{where}: Arrow {name} type needs {count} child field(s), found {len(children)}"
        )
    if name in _PLAIN:
        return _PLAIN[name]
    if name in _LISTS:
        return _LISTS[name][0](children[0])
    if name == "Int":
        key = (p["bitWidth"], p["is_signed"])
        if key not in _INTS:
            raise OdfFormatError(f"{where}: unsupported Arrow Int bitWidth {p['bitWidth']}")
        return _INTS[key]
    if name == "FloatingPoint":
        if not 0 <= p["precision"] < len(_FLOATS):
            raise OdfFormatError(f"{where}: unknown Arrow FloatingPoint precision {p['precision']}")
        return _FLOATS[p["precision"]]
    if name == "Decimal":
        if p["bitWidth"] not in _DECIMALS:
            raise OdfFormatError(f"{where}: unsupported Arrow Decimal bitWidth {p['bitWidth']}")
        return _DECIMALS[p["bitWidth"]](p["precision"], p["scale"])
    if name == "Date":
        if p["unit"] not in (0, 1):
            raise OdfFormatError(f"{where}: unknown Arrow DateUnit {p['unit']}")
        return pa.date32() if p["unit"] == 0 else pa.date64()
    if name == "Time":
        unit = _time_unit(p["unit"], where)
        if p["bitWidth"] != (32 if unit in ("s", "ms") else 64):
            raise OdfFormatError(f"{where}: Arrow Time bitWidth {p['bitWidth']} does not fit unit {unit}")
        return pa.time32(unit) if p["bitWidth"] == 32 else pa.time64(unit)
    if name == "Timestamp":
        return pa.timestamp(_time_unit(p["unit"], where), p["timezone"])
    if name == "Duration":
        return pa.duration(_time_unit(p["unit"], where))
    if name == "Interval":
        if p["unit"] != 2:
            raise OdfFormatError(
                f"{where}: Arrow Interval unit {p['unit']} is not supported (only MONTH_DAY_NANO)"
            )
        return pa.month_day_nano_interval()
    if name == "FixedSizeBinary":
        return pa.binary(_non_negative(p["byteWidth"], "byteWidth", where))
    if name == "FixedSizeList":
        return pa.list_(children[0], _non_negative(p["listSize"], "listSize", where))
    if name == "Struct_":
        return pa.struct(children)
    if name == "Map":
        entries = children[0].type
        if not pa.types.is_struct(entries) or entries.num_fields != 2:
            raise OdfFormatError(f"{where}: Arrow Map entries must be a struct of key and value")
        return pa.map_(entries.field(0), entries.field(1), p["keysSorted"])
    if name == "Union":
        if p["mode"] not in (0, 1):
            raise OdfFormatError(f"{where}: unknown Arrow UnionMode {p['mode']}")
        return pa.union(children, "sparse" if p["mode"] == 0 else "dense", p["typeIds"])
    if name == "RunEndEncoded":
        return pa.run_end_encoded(children[0].type, children[1].type)
    raise AssertionError(name)


def decode_raw_arrow_schema(data: bytes) -> pa.Schema:
    """Reads `SetDataSchema.rawArrowSchema` (a bare Arrow `Schema` flatbuffer) as a pyarrow schema."""
    path = "rawArrowSchema"
    buf = bytes(data)
    if buf[:4] == b"\xff\xff\xff\xff":
        raise OdfFormatError(f"{path}: this is an Arrow IPC message, expected a bare Schema flatbuffer")
    root = _Table(buf, _deref(buf, 0, path), path, DecodeBudget(len(buf)))
    endianness = root.scalar(0, "h", 0)
    if endianness != _NATIVE_ENDIANNESS:
        raise OdfFormatError(f"{path}.endianness: {endianness} is not this host's byte order")
    fields = [_read_field(table, 0) for table in root.tables(1, f"{path}.fields")]
    metadata = _read_metadata(root, 2, f"{path}.custom_metadata")
    try:
        return pa.schema(fields, metadata)
    except _PYARROW_ERRORS as e:
        raise OdfFormatError(f"{path}: {e}") from None


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def _type_parts(t: pa.DataType, where: str) -> tuple[str, dict[str, Any], list[pa.Field]]:
    """The Arrow `Type` member, its table fields and its child fields for a pyarrow type."""
    if t in _PLAIN_NAMES:
        return _PLAIN_NAMES[t], {}, []
    if pa.types.is_integer(t):
        return "Int", {"bitWidth": t.bit_width, "is_signed": pa.types.is_signed_integer(t)}, []
    if pa.types.is_floating(t):
        return "FloatingPoint", {"precision": _FLOATS.index(t)}, []
    if pa.types.is_decimal(t):
        return "Decimal", {"precision": t.precision, "scale": t.scale, "bitWidth": t.bit_width}, []
    if pa.types.is_date(t):
        return "Date", {"unit": 0 if pa.types.is_date32(t) else 1}, []
    if pa.types.is_time(t):
        return "Time", {"unit": _TIME_UNITS.index(t.unit), "bitWidth": t.bit_width}, []
    if pa.types.is_timestamp(t):
        return "Timestamp", {"unit": _TIME_UNITS.index(t.unit), "timezone": t.tz}, []
    if pa.types.is_duration(t):
        return "Duration", {"unit": _TIME_UNITS.index(t.unit)}, []
    if t == pa.month_day_nano_interval():
        return "Interval", {"unit": 2}, []
    if pa.types.is_fixed_size_binary(t):
        return "FixedSizeBinary", {"byteWidth": t.byte_width}, []
    if pa.types.is_map(t):
        return "Map", {"keysSorted": t.keys_sorted}, [t.field(0)]
    for name, (_, is_list) in _LISTS.items():
        if is_list(t):
            return name, {}, [t.value_field]
    if pa.types.is_fixed_size_list(t):
        return "FixedSizeList", {"listSize": t.list_size}, [t.value_field]
    if pa.types.is_struct(t):
        return "Struct_", {}, [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_union(t):
        mode = 0 if t.mode == "sparse" else 1
        return (
            "Union",
            {"mode": mode, "typeIds": list(t.type_codes)},
            [t.field(i) for i in range(t.num_fields)],
        )
    if pa.types.is_run_end_encoded(t):
        return "RunEndEncoded", {}, [t.field(0), t.field(1)]
    raise OdfFormatError(f"{where}: Arrow type {t} cannot be written as a raw Arrow schema")


class _Encoder:
    """Writes fields children-first (the builder needs every referenced object before its table)."""

    def __init__(self) -> None:
        self.b = flatbuffers.Builder(1024)
        self.next_dictionary_id = 0

    def offsets(self, items: list[int]) -> int:
        self.b.StartVector(4, len(items), 4)
        for item in reversed(items):
            self.b.PrependUOffsetTRelative(item)
        return self.b.EndVector()

    def metadata(self, metadata: dict[bytes, bytes] | None) -> int:
        entries = []
        for key, value in (metadata or {}).items():
            k, v = self.b.CreateString(key), self.b.CreateString(value)
            self.b.StartObject(2)
            self.b.PrependUOffsetTRelativeSlot(0, k, 0)
            self.b.PrependUOffsetTRelativeSlot(1, v, 0)
            entries.append(self.b.EndObject())
        return self.offsets(entries) if entries else 0

    def type_table(self, name: str, params: dict[str, Any]) -> int:
        slots = _TYPE_SLOTS[name]
        refs = {}
        for slot_name, kind, _ in slots:
            value = params.get(slot_name)
            if value is not None and kind == "str":
                refs[slot_name] = self.b.CreateString(value)
            elif value is not None and kind == "[i]":
                self.b.StartVector(4, len(value), 4)
                for v in reversed(value):
                    self.b.PrependInt32(v)
                refs[slot_name] = self.b.EndVector()
        self.b.StartObject(len(slots))
        for i, (slot_name, kind, default) in enumerate(slots):
            if slot_name in refs:
                self.b.PrependUOffsetTRelativeSlot(i, refs[slot_name], 0)
            elif kind in _FLAGS:
                self.b.PrependSlot(_FLAGS[kind], i, params[slot_name], default)
        return self.b.EndObject()

    def dictionary(self, t: pa.DictionaryType, where: str) -> int:
        if not pa.types.is_integer(t.index_type):
            raise OdfFormatError(f"{where}: dictionary index type {t.index_type} is not an integer")
        _, index_params, _ = _type_parts(t.index_type, where)
        index = self.type_table("Int", index_params)
        self.b.StartObject(_DICTIONARY_SLOTS)
        self.b.PrependInt64Slot(0, self.next_dictionary_id, 0)
        self.b.PrependUOffsetTRelativeSlot(1, index, 0)
        self.b.PrependBoolSlot(2, t.ordered, False)
        self.next_dictionary_id += 1
        return self.b.EndObject()

    def field(self, field: pa.Field, where: str) -> int:
        t = field.type
        dictionary = 0
        if pa.types.is_dictionary(t):
            dictionary = self.dictionary(t, where)
            t = t.value_type
        if isinstance(t, pa.BaseExtensionType):
            raise OdfFormatError(f"{where}: extension type {t} cannot be written as a raw Arrow schema")
        name, params, children = _type_parts(t, where)
        child_refs = [self.field(c, f"{where}.children[{i}]") for i, c in enumerate(children)]
        name_ref = self.b.CreateString(field.name)
        children_ref = self.offsets(child_refs)
        metadata_ref = self.metadata(field.metadata)
        type_ref = self.type_table(name, params)
        self.b.StartObject(_FIELD_SLOTS)
        self.b.PrependUOffsetTRelativeSlot(0, name_ref, 0)
        self.b.PrependBoolSlot(1, field.nullable, False)
        self.b.PrependUint8Slot(2, _TYPE_IDS[name], 0)
        self.b.PrependUOffsetTRelativeSlot(3, type_ref, 0)
        if dictionary:
            self.b.PrependUOffsetTRelativeSlot(4, dictionary, 0)
        self.b.PrependUOffsetTRelativeSlot(5, children_ref, 0)
        if metadata_ref:
            self.b.PrependUOffsetTRelativeSlot(6, metadata_ref, 0)
        return self.b.EndObject()


def encode_raw_arrow_schema(schema: pa.Schema) -> bytes:
    """A bare Arrow `Schema` flatbuffer for `SetDataSchema.rawArrowSchema` (standard layout)."""
    enc = _Encoder()
    fields = enc.offsets(
        [enc.field(f, f"rawArrowSchema.fields[{i}] ({f.name})") for i, f in enumerate(schema)]
    )
    metadata = enc.metadata(schema.metadata)
    enc.b.StartObject(_SCHEMA_SLOTS)
    enc.b.PrependInt16Slot(0, _NATIVE_ENDIANNESS, 0)
    enc.b.PrependUOffsetTRelativeSlot(1, fields, 0)
    if metadata:
        enc.b.PrependUOffsetTRelativeSlot(2, metadata, 0)
    enc.b.Finish(enc.b.EndObject())
    return bytes(enc.b.Output())
