"""The engine contract of kind "query": read-only Spark SQL over datasets, each a view over its slice
files, the result written as files into the operation's folder (`odf sql`, `odf export`).

Like the other requests, it names only files and schemas (Arrow IPC in base64): the engine needs no ODF
knowledge. The engine refuses any statement that is not a query, and writes nothing anywhere but
`out_dir`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from airflow_odf.odf.engine_client.contract import (
    CONTRACT_VERSION,
    EngineContractError,
    EngineFailure,
    load_json_object,
)

QUERY_FORMATS = ("parquet", "csv", "json")  # what the engine writes; json is one object per line


@dataclass
class QueryTable:
    """A view named `name` (dots allowed: quoted with backticks in the SQL) over Parquet slice files."""

    name: str
    schema: str | None  # Arrow schema of the dataset's data; None: no data yet (an empty view)
    data_paths: list[str] = field(default_factory=list)


@dataclass
class QueryRequest:
    """One query over `tables`; the result goes to `out_dir` in `format`: one file, or with
    `single_file=False` a file per partition (names sort in the result's order)."""

    operation_id: str
    sql: str
    tables: list[QueryTable]
    out_dir: str
    format: str = "parquet"
    single_file: bool = True
    max_rows: int | None = None  # write at most max_rows + 1 rows: the core reports "more than max_rows"
    skip: int = 0  # leave out the result's first `skip` rows (before max_rows counts): paging, as kamu's
    kind: str = "query"
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


@dataclass
class QueryResponse:
    files: list[str] = field(default_factory=list)  # the result's files, in its order
    columns: list[str] = field(default_factory=list)
    engine: dict[str, str] = field(default_factory=dict)
    error: EngineFailure | None = None
    version: int = CONTRACT_VERSION

    @classmethod
    def from_json(cls, text: str | bytes) -> QueryResponse:
        data = load_json_object(text, "response")
        try:
            if data.get("error") is not None:
                data["error"] = EngineFailure(**data["error"])
            return cls(**data)
        except (TypeError, KeyError) as e:
            raise EngineContractError(f"engine response: {e}") from None
