"""YAML manifests (DatasetSnapshot, MetadataBlock, MetadataEvent): read leniently, written canonically.

Reading accepts what the reference accepts: union short forms (`type: String`), case-insensitive
`kind` tags and enum names, several `---` documents per file, the legacy `schema: [DDL...]` of read
steps. It reports every problem at once, each with the path to the field
(`content.metadata[1].merge.primaryKey`). YAML is read with 1.2 scalar rules: only `true`/`false` are
booleans and timestamps stay text, so `on`, `no` or `2024-01-01` are never silently re-typed.
Hostile text costs bounded time and memory: the size (`limits.max_manifest_bytes()`), nesting, alias
expansion, the number of YAML nodes and integer length are capped, and so are a transform's inputs, a
schema's fields, each list of steps and a field name's length (`limits`); each cap is a one-line problem.
YAML is scanned and parsed by libyaml when PyYAML has it (the pure-Python scanner takes seconds per
megabyte), then composed here, where the caps are checked.

Writing follows the schema: keys in declaration order, union `kind` first, PascalCase tags, RFC 3339
times, multi-line SQL as literal blocks.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_odf.odf import limits
from airflow_odf.odf.errors import ManifestError, OdfFormatError, Problem, quoted
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT, Kind, TypeSpec, enum_name, fields_of, union_spec
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.names import dataset_name_problem
from airflow_odf.odf.format.schema_bounds import field_name_problem, schema_problem
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.limits import MAX_MANIFEST_BYTES_ENV, max_manifest_bytes

try:  # libyaml's scanner and parser: the events of a 4 MiB text in a fraction of a second
    from yaml._yaml import CParser as _EventSource
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _EventSource = None

MANIFEST_VERSIONS = {"DatasetSnapshot": (1,), "MetadataEvent": (1,), "MetadataBlock": (2, 3)}
_WRITE_VERSION = {"DatasetSnapshot": 1, "MetadataEvent": 1, "MetadataBlock": 3}
_INT_RANGES = {
    "i": (-(2**31), 2**31 - 1),
    "I": (0, 2**32 - 1),
    "q": (-(2**63), 2**63 - 1),
    "Q": (0, 2**64 - 1),
}
_READ_STEPS = set(fields_of(model.SetPollingSource)[2].type.union.members)  # type: ignore[union-attr]
#: The SQL engines of the reference implementation, which the manifests of the ODF world name; any other
#: name is a typo. (This provider runs every transform on Spark.)
SQL_ENGINES = ("datafusion", "flink", "risingwave", "spark")
_NOT_IN_SNAPSHOT = (
    model.Seed,
    model.AddData,
    model.ExecuteTransform,
    model.DisablePollingSource,
    model.DisablePushSource,
)


@dataclass(frozen=True)
class Manifest:
    """One YAML document: its `kind` (DatasetSnapshot, MetadataBlock, MetadataEvent) and typed content."""

    kind: str
    version: int
    content: Any


# --------------------------------------------------------------------------------------------------
# YAML dialect
# --------------------------------------------------------------------------------------------------


#: Deeper than any manifest (a struct type nests three levels per struct): the composer and the model
#: reader recurse once per level.
MAX_YAML_DEPTH = 100
#: The nodes (and scalar characters) a text may expand to through aliases, per character of text, on
#: top of `_EXPANSION_ALLOWANCE`; text without aliases expands to at most about two per character.
EXPANSION_PER_CHAR = 4
_EXPANSION_ALLOWANCE = 100_000
#: Longer integer literals are refused: manifest numbers fit in 64 bits, and Python converts integers
#: of more than 4300 digits neither from nor to text.
_MAX_INT_CHARS = 64
#: YAML nodes per text (aliases not expanded; the expansion budget bounds those): room for a schema at
#: the field limit, and what the composer and the model reader go through in about a second. libyaml
#: counts them before anything is composed, so a text of millions of nodes is refused in a fraction of
#: a second.
MAX_YAML_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """YAML 1.2 core scalars; duplicate keys are an error, as in the reference's parser.

    Composing is bounded: nesting deeper than `MAX_YAML_DEPTH`, an alias to a node that contains it
    (a recursive structure) and aliases expanding beyond `expansion_budget` nodes and characters (a
    "billion laughs") are errors with their line and column.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.expansion_budget = EXPANSION_PER_CHAR * len(text) + _EXPANSION_ALLOWANCE
        self.depth = 0
        self.nodes = 0
        # weight of each node composed in the current document: nodes plus scalar characters, aliases
        # expanded; a node still being composed has none yet
        self.weights: dict[int, int] = {}

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        self.expansion_budget -= self.weights[id(node)]
        self.weights = {}
        return node

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self.weights:
                raise yaml.composer.ComposerError(
                    None, None, f"alias *{event.anchor} refers to a node that contains it", event.start_mark
                )
            return node
        if self.depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark
            )
        self.nodes += 1
        if self.nodes > MAX_YAML_NODES:  # counted before composing when libyaml parses
            raise _too_many_nodes(event.start_mark)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        weight = 1 + _children_weight(node, self.weights)
        if weight > self.expansion_budget:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"aliases expand the text beyond {self.expansion_budget} nodes and characters "
                f"(at most {EXPANSION_PER_CHAR} per character of text)",
                event.start_mark,
            )
        self.weights[id(node)] = weight
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    "a mapping key must be a plain value, not a list or mapping",
                    key_node.start_mark,
                ) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


if _EventSource is not None:

    class _FastLoader(_Loader, _EventSource):  # type: ignore[misc, valid-type]
        """`_Loader` composing (with its caps) from libyaml's events instead of the pure-Python parser's."""

        check_event = _EventSource.check_event
        peek_event = _EventSource.peek_event
        get_event = _EventSource.get_event
        dispose = _EventSource.dispose

        def __init__(self, text: str) -> None:
            _EventSource.__init__(self, text)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            self.expansion_budget = EXPANSION_PER_CHAR * len(text) + _EXPANSION_ALLOWANCE
            self.depth = 0
            self.nodes = 0
            self.weights = {}


_YAML11_ONLY = (
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:timestamp",
)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _children_weight(node: yaml.Node, weights: dict[int, int]) -> int:
    """The weight of a node's children (of a scalar: its characters), aliased children expanded."""
    if isinstance(node, yaml.ScalarNode):
        return len(node.value)
    if isinstance(node, yaml.SequenceNode):
        return sum(weights[id(item)] for item in node.value)
    return sum(weights[id(key)] + weights[id(value)] for key, value in node.value)


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """YAML 1.2 core integers: decimal (leading zeros stay decimal), 0o octal, 0x hexadecimal."""
    text = loader.construct_scalar(node)
    if len(text) > _MAX_INT_CHARS:
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"integer of {len(text)} characters is out of range (at most {_MAX_INT_CHARS})",
            node.start_mark,
        )
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


_FRAGILE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]")


class _Dumper(yaml.SafeDumper):
    """Block style; lists not indented under their key; multi-line strings as literal blocks.

    A string is quoted when YAML 1.1 (PyYAML's default) *or* 1.2 (our reader, the reference's) would
    read it as something else, so the output means the same to both.
    """

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        tag = super().resolve(kind, value, implicit)
        if kind is yaml.ScalarNode and implicit[0] and tag == "tag:yaml.org,2002:str":
            for strict_tag, pattern in _Loader.yaml_implicit_resolvers.get(value[:1] if value else "", []):
                if pattern.match(value):
                    return strict_tag
        return tag


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _FRAGILE.search(value):  # characters YAML would fold or drop unless escaped
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    if "\n" in value and not any(c in value for c in "\t\r") and value == value.rstrip(" "):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


# --------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------


class _Invalid:
    pass


_INVALID = _Invalid()


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }
    if isinstance(value, str):
        shown = quoted(value)
    elif isinstance(value, (bool, int, float)):
        shown = repr(value)
    else:
        shown = ""
    return f"{names.get(type(value), type(value).__name__)} {shown}".strip()


def _non_json_path(value: Any, path: str) -> str | None:
    """The path of the first value inside `value` that JSON cannot hold (e.g. YAML `!!binary`), if any."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return None
    if isinstance(value, list):
        items = (_non_json_path(v, f"{path}[{i}]") for i, v in enumerate(value))
    elif isinstance(value, dict):
        items = (
            _non_json_path(v, _join(path, k)) if isinstance(k, str) else _join(path, str(k))
            for k, v in value.items()
        )
    else:
        return path
    return next((p for p in items if p is not None), None)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


#: Problems listed per document; past this the rest are counted in one line (a list of 100,000 bad items
#: is not 100,000 lines).
MAX_PROBLEMS = 20


def _list_limits() -> dict[tuple[type, str], tuple[str, int, str]]:
    """(model class, field) -> (what the list holds, its limit, the variable that moves the limit)."""
    fields = ("fields", limits.max_schema_fields(), limits.MAX_SCHEMA_FIELDS_ENV)
    steps = limits.max_manifest_steps(), limits.MAX_MANIFEST_STEPS_ENV
    return {
        (model.SetTransform, "inputs"): (
            "inputs",
            limits.max_transform_inputs(),
            limits.MAX_TRANSFORM_INPUTS_ENV,
        ),
        (model.DataSchema, "fields"): fields,
        (model.DataTypeStruct, "fields"): fields,
        **{(step, "ddl_schema"): ("columns", *fields[1:]) for step in _READ_STEPS},
        (model.DatasetSnapshot, "metadata"): ("events", *steps),
        (model.SetPollingSource, "prepare"): ("prepare steps", *steps),
        (model.TransformSql, "queries"): ("queries", *steps),
        (model.TransformSql, "temporal_tables"): ("temporal tables", *steps),
    }


@functools.cache
def _expected_tags(spec: Any) -> str:
    """The kinds a union accepts, for its messages: joined once per union, not once per value read (a
    schema of 10,000 fields named the 25 data types 10,000 times)."""
    return ", ".join(spec.tag(m) for m in spec.members)


class _ModelReader:
    """Converts plain YAML data into model objects, collecting problems instead of stopping at the first.

    A list longer than its limit (`_list_limits`) is refused before any of its items is converted."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.failures = 0
        self.list_limits = _list_limits()

    def fail(self, path: str, message: str) -> _Invalid:
        self.failures += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(path, message))
        return _INVALID

    def all_problems(self, prefix: str = "") -> list[Problem]:
        """The problems listed, and one line counting those left out."""
        listed = [Problem(p.path, prefix + p.message) for p in self.problems]
        left_out = self.failures - len(self.problems)
        return [*listed, Problem("", f"{prefix}and {left_out} more problems")] if left_out else listed

    def _too_long(self, cls: type, name: str, raw: Any, path: str) -> bool:
        limit = self.list_limits.get((cls, name))
        if limit is None or not isinstance(raw, list) or len(raw) <= limit[1]:
            return False
        what, most, variable = limit
        self.fail(path, f"{len(raw)} {what}; at most {most} ({variable})")
        return True

    def value(self, t: TypeSpec, data: Any, path: str) -> Any:
        kind = t.kind
        if kind in _PLAIN:
            expected_type, expected = _PLAIN[kind]
            if isinstance(data, expected_type):
                return data
            return self.fail(path, f"expected {expected}, got {_describe(data)}")
        if kind is Kind.INT:
            low, high = _INT_RANGES[t.fmt]
            if isinstance(data, bool) or not isinstance(data, int):
                return self.fail(path, f"expected an integer, got {_describe(data)}")
            if not low <= data <= high:
                return self.fail(path, f"expected an integer in [{low}, {high}], got {data}")
            return data
        if kind is Kind.ENUM:
            return self.enum(t.cls, data, path)
        if kind in (Kind.MULTIHASH, Kind.DATASET_ID, Kind.TIMESTAMP):
            parse, example = _PARSERS[kind]
            try:
                return parse(data)
            except OdfFormatError as e:
                return self.fail(path, f"expected {example}: {e}")
        if kind is Kind.BYTES:
            if not isinstance(data, str):
                return self.fail(path, f"expected base64 text, got {_describe(data)}")
            try:
                return base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as e:
                return self.fail(path, f"expected base64 text: {e}")
        if kind is Kind.EXTRA:
            if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
                return self.fail(
                    path, f"expected a mapping of attribute names to values, got {_describe(data)}"
                )
            bad = _non_json_path(data, path)
            if bad is not None:
                return self.fail(bad, "expected a JSON value (text, number, boolean, null, list or mapping)")
            return data
        if kind is Kind.LIST:
            if not isinstance(data, list):
                return self.fail(path, f"expected a list, got {_describe(data)}")
            assert t.item is not None
            items = [self.value(t.item, v, f"{path}[{i}]") for i, v in enumerate(data)]
            return _INVALID if any(v is _INVALID for v in items) else items
        if kind is Kind.TABLE:
            return self.table(t.cls, data, path)
        if kind is Kind.UNION:
            return self.union(t, data, path)
        raise AssertionError(kind)

    def enum(self, cls: type[model.Int32Enum], data: Any, path: str) -> Any:
        names = {enum_name(m).lower(): m for m in cls}
        if isinstance(data, str):
            member = names.get(data.replace("_", "").replace("-", "").lower())
            if member is not None:
                return member
        expected = ", ".join(enum_name(m) for m in cls)
        return self.fail(path, f"expected one of {expected}, got {_describe(data)}")

    def union(self, t: TypeSpec, data: Any, path: str) -> Any:
        spec = t.union
        assert spec is not None
        expected = _expected_tags(spec)
        if isinstance(data, str):  # short form: `type: String`
            member = spec.by_tag.get(data.lower())
            if member is None:
                return self.fail(path, f"unknown {spec.name} kind {data!r}; expected one of {expected}")
            if any(f.required for f in fields_of(member)):
                return self.fail(
                    path, f"{spec.name} {spec.tag(member)} has required fields; use the mapping form"
                )
            return member()
        if not isinstance(data, dict):
            return self.fail(path, f"expected a {spec.name} mapping with a 'kind', got {_describe(data)}")
        tag = data.get("kind")
        if tag is None:
            return self.fail(_join(path, "kind"), f"missing; expected one of {expected}")
        member = spec.by_tag.get(tag.lower()) if isinstance(tag, str) else None
        if member is None:
            return self.fail(
                _join(path, "kind"), f"unknown {spec.name} kind {tag!r}; expected one of {expected}"
            )
        return self.table(member, data, path, skip=("kind",))

    def table(self, cls: type, data: Any, path: str, skip: tuple[str, ...] = ()) -> Any:
        specs = fields_of(cls)
        if not isinstance(data, dict):
            return self.fail(path, f"expected a {cls.__name__} mapping, got {_describe(data)}")
        by_name = {f.yaml_name: f for f in specs}
        before = self.failures
        kwargs: dict[str, Any] = {}
        for key, raw in data.items():
            if key in skip:
                continue
            key_path = _join(path, str(key))
            f = by_name.get(key) if isinstance(key, str) else None
            if f is not None and cls in _READ_STEPS and key == "schema" and isinstance(raw, list):
                f = by_name["ddlSchema"]  # legacy form: `schema` held the DDL columns before spec 0.38
            if f is None:
                known = ", ".join(by_name) or "no fields"
                self.fail(key_path, f"unknown field of {cls.__name__}; expected {known}")
                continue
            if raw is None:
                if f.required:
                    self.fail(key_path, "must not be null")
                continue
            if self._too_long(cls, f.name, raw, key_path):
                continue
            value = self.value(f.type, raw, key_path)
            if value is not _INVALID:
                kwargs[f.name] = value
        for f in specs:
            if f.required and f.yaml_name not in data:
                self.fail(_join(path, f.yaml_name), f"required field of {cls.__name__} is missing")
        if cls is model.DataField and isinstance(kwargs.get("name"), str):
            problem = field_name_problem(kwargs["name"])
            if problem is not None:
                self.fail(_join(path, "name"), problem)
        if self.failures > before:
            return _INVALID
        return cls(**kwargs)


_PLAIN = {Kind.STRING: (str, "a string"), Kind.BOOL: (bool, "true or false")}
_PARSERS = {
    Kind.MULTIHASH: (Multihash.parse, "a multihash such as f1620<64 hex digits>"),
    Kind.DATASET_ID: (DatasetId.parse, "a DID such as did:odf:fed01<64 hex digits>"),
    Kind.TIMESTAMP: (Timestamp.parse, "an RFC 3339 time such as 2024-01-31T12:00:00Z"),
}


def from_plain(t: TypeSpec, data: Any, source: str = "<data>") -> Any:
    """The model value of plain (YAML/JSON) data of type `t`; raises ManifestError with field paths."""
    reader = _ModelReader()
    value = reader.value(t, data, "")
    if reader.failures:
        raise ManifestError(source, reader.all_problems())
    return value


def _snapshot_problems(snapshot: model.DatasetSnapshot) -> list[Problem]:
    """Rules a DatasetSnapshot must follow beyond its shape."""
    name_problem = dataset_name_problem(snapshot.name)
    problems = [Problem("content.name", name_problem)] if name_problem else []
    for i, event in enumerate(snapshot.metadata):
        path = f"content.metadata[{i}]"
        tag = METADATA_EVENT.tag(type(event))
        if isinstance(event, _NOT_IN_SNAPSHOT):
            problems.append(Problem(f"{path}.kind", f"{tag} events are not allowed in a DatasetSnapshot"))
        elif isinstance(event, (model.SetPollingSource, model.AddPushSource)) and (
            snapshot.kind is model.DatasetKind.DERIVATIVE
        ):
            problems.append(Problem(f"{path}.kind", f"{tag} is only allowed on Root datasets"))
        elif isinstance(event, model.SetTransform):
            if snapshot.kind is model.DatasetKind.ROOT:
                problems.append(
                    Problem(f"{path}.kind", "SetTransform is only allowed on Derivative datasets")
                )
            if not event.inputs:
                problems.append(Problem(f"{path}.inputs", "a transform needs at least one input"))
        transform = getattr(event, "transform", None) or getattr(event, "preprocess", None)
        if isinstance(transform, model.TransformSql):
            key = "transform" if isinstance(event, model.SetTransform) else "preprocess"
            problems += _sql_problems(transform, f"{path}.{key}")
    return problems


def _sql_problems(sql: model.TransformSql, path: str) -> list[Problem]:
    problems = []
    if sql.engine not in SQL_ENGINES:
        message = f"unknown SQL engine {quoted(sql.engine)}; expected {', '.join(SQL_ENGINES)}"
        problems.append(Problem(f"{path}.engine", message))
    if sql.query is not None and sql.queries is not None:
        problems.append(Problem(path, "give either 'query' or 'queries', not both"))
    elif sql.query is None and not sql.queries:
        problems.append(Problem(path, "expected 'query' or a non-empty 'queries'"))
    elif sql.queries and sum(1 for q in sql.queries if q.alias is None) > 1:
        problems.append(Problem(f"{path}.queries", "only the last (output) query may have no alias"))
    return problems


def _schema_problems(content: Any) -> list[Problem]:
    """The schemas of SetDataSchema events over the limits of `schema_bounds` (fields counted with the
    nested ones, which the per-list limits do not add up)."""
    if isinstance(content, model.DatasetSnapshot):
        events = [(f"content.metadata[{i}]", e) for i, e in enumerate(content.metadata)]
    elif isinstance(content, model.MetadataBlock):
        events = [("content.event", content.event)]
    else:
        events = [("content", content)]
    problems = []
    for path, event in events:
        if isinstance(event, model.SetDataSchema) and event.schema is not None:
            problem = schema_problem(event.schema)
            if problem is not None:
                problems.append(Problem(f"{path}.schema", problem))
    return problems


def _read_document(doc: Any, source: str, index: int) -> tuple[Manifest | None, list[Problem]]:
    prefix = f"[document {index + 1}] " if index else ""
    if not isinstance(doc, dict):
        return None, [Problem("", f"{prefix}expected a manifest mapping with kind, version, content")]
    problems = [
        Problem(k, f"{prefix}unknown manifest field; expected kind, version, content")
        for k in doc
        if k not in ("kind", "version", "content")
    ]
    kind, version = doc.get("kind"), doc.get("version")
    if not isinstance(kind, str) or kind not in MANIFEST_VERSIONS:
        expected = ", ".join(MANIFEST_VERSIONS)
        return None, [
            *problems,
            Problem("kind", f"{prefix}expected one of {expected}, got {_describe(kind)}"),
        ]
    if isinstance(version, bool) or version not in MANIFEST_VERSIONS[kind]:
        allowed = " or ".join(str(v) for v in MANIFEST_VERSIONS[kind])
        problems.append(
            Problem("version", f"{prefix}{kind} manifests have version {allowed}, got {_describe(version)}")
        )
    if "content" not in doc:
        return None, [*problems, Problem("content", f"{prefix}required field is missing")]
    reader = _ModelReader()
    if kind == "MetadataEvent":
        content = reader.value(fields_of(model.MetadataBlock)[3].type, doc["content"], "content")
    else:
        cls = model.DatasetSnapshot if kind == "DatasetSnapshot" else model.MetadataBlock
        content = reader.table(cls, doc["content"], "content")
    problems += reader.all_problems(prefix)
    if not reader.failures:
        problems += [Problem(p.path, prefix + p.message) for p in _schema_problems(content)]
    if isinstance(content, model.DatasetSnapshot):
        problems += [Problem(p.path, prefix + p.message) for p in _snapshot_problems(content)]
    if problems or content is _INVALID:
        return None, problems
    return Manifest(kind, version, content), []


def _check_manifest_size(size: int, source: str) -> None:
    limit = max_manifest_bytes()
    if size > limit:
        message = f"larger than the {limit} bytes a manifest may have ({MAX_MANIFEST_BYTES_ENV})"
        raise ManifestError(source, [Problem("", message)])


def _too_many_nodes(mark: Any) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(
        None, None, f"more than {MAX_YAML_NODES} values (nodes) in one text", mark
    )


def _count_nodes(text: str) -> None:
    """Raises once the text has more than MAX_YAML_NODES nodes; libyaml's events cost about a
    microsecond each, composing them ten times more."""
    assert _EventSource is not None
    parser = _EventSource(text)
    nodes = 0
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
                nodes += 1
                if nodes > MAX_YAML_NODES:
                    raise _too_many_nodes(event.start_mark)
    finally:
        parser.dispose()


def _load_yaml(text: str) -> list[Any]:
    if _EventSource is not None:
        _count_nodes(text)
    loader = _Loader(text) if _EventSource is None else _FastLoader(text)
    try:
        docs = []
        while loader.check_data():
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def load_manifests(text: str, source: str = "<string>") -> list[Manifest]:
    """Every document of a YAML text; raises `ManifestError` listing all problems found."""
    _check_manifest_size(len(text.encode("utf-8", "surrogatepass")), source)
    try:
        docs = _load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = getattr(e, "problem", None) or str(e)
        raise ManifestError(source, [Problem("", f"{where}invalid YAML: {reason}")]) from None
    docs = [d for d in docs if d is not None]
    if not docs:
        raise ManifestError(source, [Problem("", "no manifest in file")])
    manifests, problems = [], []
    for i, doc in enumerate(docs):
        manifest, doc_problems = _read_document(doc, source, i)
        problems += doc_problems
        if manifest is not None:
            manifests.append(manifest)
    if problems:
        raise ManifestError(source, problems)
    return manifests


def read_manifests(path: str | Path) -> list[Manifest]:
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(max_manifest_bytes() + 1)
        _check_manifest_size(len(data), str(path))
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(str(path), [Problem("", f"cannot read file: {e}")]) from None
    return load_manifests(text, str(path))


def read_single(path: str | Path, kind: str) -> Any:
    """The content of a file holding exactly one manifest of `kind`."""
    manifests = read_manifests(path)
    if len(manifests) != 1 or manifests[0].kind != kind:
        found = ", ".join(m.kind for m in manifests)
        raise ManifestError(str(path), [Problem("kind", f"expected one {kind} manifest, found: {found}")])
    return manifests[0].content


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------


def to_plain(t: TypeSpec, value: Any) -> Any:
    """The YAML/JSON-ready form of a model value."""
    kind = t.kind
    if kind in (Kind.STRING, Kind.INT, Kind.BOOL, Kind.EXTRA):
        return value
    if kind is Kind.ENUM:
        return enum_name(value)
    if kind in (Kind.MULTIHASH, Kind.DATASET_ID, Kind.TIMESTAMP):
        return str(value)
    if kind is Kind.BYTES:
        return base64.b64encode(value).decode()
    if kind is Kind.LIST:
        assert t.item is not None
        return [to_plain(t.item, v) for v in value]
    if kind is Kind.TABLE:
        return table_to_plain(value)
    if kind is Kind.UNION:
        assert t.union is not None
        return {"kind": t.union.tag(type(value)), **table_to_plain(value)}
    raise AssertionError(kind)


def table_to_plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields_of(type(obj)):
        v = getattr(obj, f.name)
        if v is not None:
            out[f.yaml_name] = to_plain(f.type, v)
    return out


def union_to_plain(annotation: Any, value: Any) -> dict[str, Any]:
    """The tagged form (`kind` + fields) of a member of a model union such as `model.ReadStep`."""
    return {"kind": union_spec(annotation).tag(type(value)), **table_to_plain(value)}


def event_to_plain(event: Any) -> dict[str, Any]:
    return {"kind": METADATA_EVENT.tag(type(event)), **table_to_plain(event)}


def manifest_kind(content: Any) -> str:
    if isinstance(content, model.DatasetSnapshot):
        return "DatasetSnapshot"
    if isinstance(content, model.MetadataBlock):
        return "MetadataBlock"
    if type(content) in METADATA_EVENT.members:
        return "MetadataEvent"
    raise TypeError(f"{type(content).__name__} is not a manifest content type")


def manifest_to_plain(content: Any) -> dict[str, Any]:
    kind = manifest_kind(content)
    body = event_to_plain(content) if kind == "MetadataEvent" else table_to_plain(content)
    return {"kind": kind, "version": _WRITE_VERSION[kind], "content": body}


def dump_manifest(content: Any) -> str:
    """Canonical YAML of a DatasetSnapshot, MetadataBlock or event."""
    return dump_yaml(manifest_to_plain(content))


def dump_manifests(contents: list[Any]) -> str:
    return "---\n".join(dump_manifest(c) for c in contents)


def dump_yaml(data: Any) -> str:
    return yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 16
    )
