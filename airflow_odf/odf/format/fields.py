"""How each model field is encoded, derived once per class from the dataclass declarations.

Both codecs (FlatBuffers and YAML) walk these descriptors instead of hand-written per-type code, so a
type added to `model` is serialized consistently everywhere.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp


class Kind(enum.Enum):
    STRING = "string"
    BYTES = "bytes"
    MULTIHASH = "multihash"
    DATASET_ID = "dataset-id"
    TIMESTAMP = "timestamp"
    INT = "int"
    BOOL = "bool"
    ENUM = "enum"
    TABLE = "table"
    UNION = "union"
    EXTRA = "extra"
    LIST = "list"


@dataclass(frozen=True)
class UnionSpec:
    """An ODF union: its name and member classes in id order (id = index + 1)."""

    name: str
    members: tuple[type, ...]

    def type_id(self, cls: type) -> int:
        return self.members.index(cls) + 1

    def tag(self, cls: type) -> str:
        """The YAML `kind` of a member: its class name without the union's name as prefix."""
        name = cls.__name__
        return name[len(self.name) :] if name.startswith(self.name) and name != self.name else name

    @property
    def by_tag(self) -> dict[str, type]:
        return _tags(self)


@cache
def _tags(spec: UnionSpec) -> dict[str, type]:
    return {spec.tag(m).lower(): m for m in spec.members}


@dataclass(frozen=True)
class TypeSpec:
    """The encoding of a value: `kind` plus what that kind needs (scalar format, class, union, item)."""

    kind: Kind
    fmt: str = ""
    cls: Any = None
    union: UnionSpec | None = None
    item: TypeSpec | None = None


@dataclass(frozen=True)
class FieldSpec:
    name: str
    yaml_name: str
    type: TypeSpec
    required: bool
    slot: int  # FlatBuffers vtable offset of the field (of the value, for a union)


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def enum_name(member: enum.Enum) -> str:
    """PascalCase spelling used in manifests, e.g. `BY_EVENT_TIME` -> `ByEventTime`."""
    return "".join(p.capitalize() for p in member.name.split("_"))


def _type_spec(annotation: Any) -> TypeSpec:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *markers = typing.get_args(annotation)
        for marker in markers:
            if isinstance(marker, model.UnionOf):
                members = typing.get_args(base) or (base,)
                return TypeSpec(Kind.UNION, union=UnionSpec(marker.name, tuple(members)))
            if isinstance(marker, model.Scalar):
                return TypeSpec(Kind.INT, fmt=marker.fmt)
        raise TypeError(f"unsupported annotation {annotation!r}")
    if origin is list:
        return TypeSpec(Kind.LIST, item=_type_spec(typing.get_args(annotation)[0]))
    if origin is dict:
        return TypeSpec(Kind.EXTRA)
    simple = {
        str: TypeSpec(Kind.STRING),
        bytes: TypeSpec(Kind.BYTES),
        bool: TypeSpec(Kind.BOOL),
        Multihash: TypeSpec(Kind.MULTIHASH),
        DatasetId: TypeSpec(Kind.DATASET_ID),
        Timestamp: TypeSpec(Kind.TIMESTAMP),
    }
    if annotation in simple:
        return simple[annotation]
    if isinstance(annotation, type) and issubclass(annotation, model.Int16Enum):
        return TypeSpec(Kind.ENUM, fmt="h", cls=annotation)
    if isinstance(annotation, type) and issubclass(annotation, model.Int32Enum):
        return TypeSpec(Kind.ENUM, fmt="i", cls=annotation)
    if dataclasses.is_dataclass(annotation):
        return TypeSpec(Kind.TABLE, cls=annotation)
    raise TypeError(f"unsupported annotation {annotation!r}")


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


@cache
def fields_of(cls: type) -> tuple[FieldSpec, ...]:
    """Field descriptors of a model class, in declaration (= FlatBuffers slot) order."""
    hints = typing.get_type_hints(cls, vars(model), include_extras=True)
    specs = []
    field_id = 0
    for f in dataclasses.fields(cls):
        spec = _type_spec(_strip_optional(hints[f.name]))
        if spec.kind is Kind.UNION:
            field_id += 1  # the union's type tag takes the id before its value
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append(FieldSpec(f.name, camel_case(f.name), spec, required, 4 + 2 * field_id))
        field_id += 1
    return tuple(specs)


def union_spec(annotation: Any) -> UnionSpec:
    spec = _type_spec(annotation)
    assert spec.union is not None
    return spec.union


METADATA_EVENT = union_spec(model.MetadataEvent)
