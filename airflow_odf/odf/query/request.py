"""kamu's query request (`QueryRequest` of its HTTP API), read strictly and written back exactly as kamu
serializes it: the `input` of a query commitment, whose canonical JSON is hashed into `inputHash`.

Read from a JSON object (`POST /query`, the `input` of `POST /verify` and of a commitment file) or from
the parameters of `GET /query`. Untrusted: every field is checked for its type and bounds, unknown fields
are refused (as kamu's `deny_unknown_fields`), each problem is one RequestError naming the field. Enum
values are accepted as kamu spells them or in any case (`JsonAoS`, `json-aos`, `proof`) and written in
kamu's spelling; `include` is a set written in kamu's order (Input, Proof, Schema).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId, Multihash

#: kamu's name of this node's dialect (its `QueryDialect::SqlSpark`); kamu's own default is SqlDataFusion.
QUERY_DIALECT = "SqlSpark"
QUERY_DIALECTS = ("SqlDataFusion", "SqlFlink", "SqlSpark", "SqlRisingWave")
DATA_FORMATS = ("JsonAoS", "JsonSoA", "JsonAoA")  # kamu's layouts of the rows (`data_json`)
INCLUDES = ("Input", "Proof", "Schema")
SCHEMA_FORMATS = ("ArrowJson", "Parquet", "ParquetJson")
SCHEMA_FORMAT = "ArrowJson"  # the one this node answers
DEFAULT_LIMIT = 100  # kamu's
MAX_LIMIT = 100_000  # rows in one answer: it is held in memory, encoded and hashed
MAX_SKIP = 2**63 - 1  # Spark's row counts are signed 64-bit
MAX_QUERY_CHARS = 100_000
MAX_DATASETS = 100
MAX_ALIAS_CHARS = 512

_FIELDS = ("query", "queryDialect", "dataFormat", "include", "schemaFormat", "datasets", "skip", "limit")
_PARAMS = ("query", "queryDialect", "dataFormat", "format", "include", "schemaFormat", "skip", "limit")


class RequestError(OdfError):
    """A query or verification request that is malformed (HTTP 400; `odf` exit code 2)."""


def _enum(value: Any, choices: tuple[str, ...], where: str) -> str:
    """`value` as kamu spells one of `choices`, matched without case and dashes."""
    if isinstance(value, str):
        key = value.replace("-", "").lower()
        for choice in choices:
            if choice.lower() == key:
                return choice
    raise RequestError(f"{where} {value!r}: expected one of {', '.join(choices)}")


def _count(value: Any, where: str, bound: int) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        value = int(value)  # a query-string parameter
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= bound:
        raise RequestError(f"{where} {value!r}: expected a whole number from 0 to {bound}")
    return value


def _text(value: Any, where: str, bound: int) -> str:
    if not isinstance(value, str):
        raise RequestError(f"{where}: expected a string, got {type(value).__name__}")
    if len(value) > bound:
        raise RequestError(f"{where}: {len(value)} characters, more than the {bound} allowed")
    return value


def _object(value: Any, where: str, fields: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object with only `fields` and all of `required`."""
    if not isinstance(value, dict):
        raise RequestError(f"{where}: expected a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise RequestError(f"{where}: unknown field {unknown[0]!r} (expected {', '.join(fields)})")
    missing = [name for name in required if name not in value]
    if missing:
        raise RequestError(f"{where}: missing field {missing[0]!r}")
    return value


def parse_multihash(value: Any, where: str) -> Multihash:
    try:
        return Multihash.parse(value)
    except OdfError as e:
        raise RequestError(f"{where}: not a multihash ({e})") from None


@dataclass(frozen=True)
class DatasetPin:
    """One input dataset of a query (kamu's `DatasetState`): its DID, the name the query calls it by
    (`alias`: the view's name), and the block it is read as of (None: its head at query time)."""

    id: DatasetId
    alias: str
    block_hash: Multihash | None = None

    @classmethod
    def from_json(cls, value: Any, where: str) -> DatasetPin:
        data = _object(value, where, ("id", "alias", "blockHash"), ("id", "alias"))
        try:
            did = DatasetId.parse(data["id"])
        except OdfError as e:
            raise RequestError(f"{where}.id: {e}") from None
        alias = _text(data["alias"], f"{where}.alias", MAX_ALIAS_CHARS)
        if not alias.strip():
            raise RequestError(f"{where}.alias: empty")
        block = data.get("blockHash")
        return cls(did, alias, None if block is None else parse_multihash(block, f"{where}.blockHash"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id.to_did_odf(), "alias": self.alias}
        if self.block_hash is not None:
            out["blockHash"] = str(self.block_hash)
        return out


@dataclass(frozen=True)
class QueryInput:
    """A query as kamu's API takes it; `to_json` is what a commitment's `input` holds."""

    query: str
    query_dialect: str = QUERY_DIALECT
    data_format: str = "JsonAoS"
    include: frozenset[str] = field(default_factory=frozenset)
    schema_format: str | None = None
    datasets: tuple[DatasetPin, ...] | None = None
    skip: int = 0
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_json(cls, value: Any, where: str = "the request") -> QueryInput:
        """The `POST /query` body, or a commitment's `input`."""
        data = _object(value, where, _FIELDS, ("query",))
        include = data.get("include", [])
        if not isinstance(include, list) or len(include) > len(INCLUDES) * 2:
            raise RequestError(f"{where}.include: expected a list of {', '.join(INCLUDES)}")
        datasets = data.get("datasets")
        if datasets is not None and (not isinstance(datasets, list) or len(datasets) > MAX_DATASETS):
            raise RequestError(f"{where}.datasets: expected a list of at most {MAX_DATASETS} datasets")
        schema_format = data.get("schemaFormat")
        return cls(
            query=_text(data["query"], f"{where}.query", MAX_QUERY_CHARS),
            query_dialect=_enum(
                data.get("queryDialect", QUERY_DIALECT), QUERY_DIALECTS, f"{where}.queryDialect"
            ),
            data_format=_enum(data.get("dataFormat", "JsonAoS"), DATA_FORMATS, f"{where}.dataFormat"),
            include=frozenset(_enum(v, INCLUDES, f"{where}.include") for v in include),
            schema_format=None
            if schema_format is None
            else _enum(schema_format, SCHEMA_FORMATS, f"{where}.schemaFormat"),
            datasets=None
            if datasets is None
            else _unique(
                tuple(DatasetPin.from_json(d, f"{where}.datasets[{i}]") for i, d in enumerate(datasets))
            ),
            skip=_count(data.get("skip", 0), f"{where}.skip", MAX_SKIP),
            limit=_count(data.get("limit", DEFAULT_LIMIT), f"{where}.limit", MAX_LIMIT),
        )

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> QueryInput:
        """The parameters of `GET /query` (`format` is kamu's other name of `dataFormat`; `include` is
        comma-separated)."""
        unknown = sorted(set(params) - set(_PARAMS))
        if unknown:
            raise RequestError(f"parameter {unknown[0]!r} is unknown (expected {', '.join(_PARAMS)})")
        if "query" not in params:
            raise RequestError("parameter 'query' is missing")
        if "format" in params and "dataFormat" in params:
            raise RequestError("give dataFormat or format, not both")
        body: dict[str, Any] = {k: v for k, v in params.items() if k not in ("format", "include")}
        if "format" in params:
            body["dataFormat"] = params["format"]
        if params.get("include"):
            body["include"] = [item.strip() for item in params["include"].split(",")]
        return cls.from_json(body, "the parameters")

    def normalized(self) -> QueryInput:
        """As kamu answers it: a proof includes the input, a schema format the schema, and an included
        schema has a format (ArrowJson by default)."""
        include = set(self.include)
        if "Proof" in include:
            include.add("Input")
        if self.schema_format is not None:
            include.add("Schema")
        schema_format = (self.schema_format or SCHEMA_FORMAT) if "Schema" in include else None
        return replace(self, include=frozenset(include), schema_format=schema_format)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.query,
            "queryDialect": self.query_dialect,
            "dataFormat": self.data_format,
            "include": [name for name in INCLUDES if name in self.include],
        }
        if self.schema_format is not None:
            out["schemaFormat"] = self.schema_format
        if self.datasets is not None:
            out["datasets"] = [pin.to_json() for pin in self.datasets]
        out["skip"] = self.skip
        out["limit"] = self.limit
        return out


def _unique(pins: tuple[DatasetPin, ...]) -> tuple[DatasetPin, ...]:
    """Refuses two pins of one dataset or one alias (a query could not tell which it reads)."""
    ids: set[DatasetId] = set()
    aliases: set[str] = set()
    for pin in pins:
        if pin.id in ids or pin.alias.lower() in aliases:
            raise RequestError(f"datasets: {pin.id} or alias {pin.alias!r} is listed twice")
        ids.add(pin.id)
        aliases.add(pin.alias.lower())
    return pins
