"""The engine contract: the versioned JSON request an ingest engine receives and the response it returns.

The coordinator (this package) and the engine (`airflow_odf.engine`, or any other engine) share nothing
but these two documents and the files they name. Schemas travel as Arrow IPC schema messages in base64,
so that an engine needs no ODF type knowledge; ODF manifest fragments (read step, merge strategy) travel
in their manifest JSON form (camelCase keys, `kind` tags). Documented in docs/engine-contract.md.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_odf.odf.errors import OdfError
from airflow_odf.utils.engine_json import TypeWidening, Vocab

CONTRACT_VERSION = 1
BAD_RECORDS_FAIL = "fail"
BAD_RECORDS_QUARANTINE = "quarantine"
ENGINE_STOPPED = "engine-stopped"
"""The error kind of a request whose engine stopped under it (a stopped SparkContext, a restarted or
unreachable server): no fault of the input; trying again once the engine is back may succeed."""


class EngineContractError(OdfError):
    """A request or response that does not follow the contract (wrong version, missing field)."""


def schema_to_text(schema: pa.Schema) -> str:
    """An Arrow schema as base64 of its IPC message."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


@dataclass
class InputFile:
    """One prepared input file and the event time its source gives it (used where the data has none)."""

    path: str
    source_event_time: str | None = None  # RFC 3339, UTC
    size: int | None = None  # bytes, when the file is not on the engine's disk (it sizes its partitions)


@dataclass
class SqlStep:
    query: str
    alias: str | None = None


@dataclass
class IngestRequest:
    """Everything an engine needs to read, preprocess, merge and write one ingest transaction."""

    operation_id: str
    dataset_id: str
    dataset_alias: str
    system_time: str  # RFC 3339 UTC; one value for the whole transaction, truncated to ms in the data
    next_offset: int  # offset of the first new record (previous last offset + 1, or 0)
    inputs: list[InputFile]
    read: dict[str, Any]  # ODF ReadStep in manifest JSON form
    merge: dict[str, Any]  # ODF MergeStrategy in manifest JSON form
    # the engine writes its data files, checkpoint and quarantine here: a local folder, or a URI in
    # the repository's bucket (`s3a://...`), where it then hashes what it wrote (OutputSlice)
    out_dir: str
    vocab: Vocab = field(default_factory=Vocab)
    read_schema: str | None = None  # Arrow schema from read.schema / read.ddlSchema, resolved by the core
    preprocess: list[SqlStep] | None = None  # Spark SQL over the view `input`; the last step is the output
    dataset_schema: str | None = None  # Arrow schema of the dataset's current SetDataSchema, if any
    prev_checkpoint_path: str | None = None  # merge state written by the previous ingest
    prev_data_paths: list[str] = field(default_factory=list)  # previous slices, oldest first (or withheld)
    # > 0: that many previous slices were left out of prev_data_paths, the checkpoint being current; an
    # engine that cannot use the checkpoint answers NEEDS_PREVIOUS_DATA and gets them in a new request
    prev_data_withheld: int = 0
    prev_watermark: str | None = None
    max_records_per_slice: int | None = None  # a slice (file, AddData block) holds at most this many
    target_slice_bytes: int = 1024 * 1024 * 1024  # input bytes per sorted partition (at least one slice)
    bad_records: str = BAD_RECORDS_FAIL  # or BAD_RECORDS_QUARANTINE
    # quality checks on the written slices (docs/checks.md), answered in IngestResponse.check_results;
    # optional: a request without them is as before, and an engine that ignores them is caught by the
    # core (no results for the checks it sent: nothing committed)
    checks: dict[str, Any] | None = None
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> IngestRequest:
        data = load_json_object(text, "request")
        try:
            data["inputs"] = [InputFile(**i) for i in data["inputs"]]
            data["vocab"] = Vocab(**data.get("vocab", {}))
            if data.get("preprocess") is not None:
                data["preprocess"] = [SqlStep(**s) for s in data["preprocess"]]
            return cls(**data)
        except (TypeError, KeyError) as e:
            raise EngineContractError(f"engine request: {e}") from None


@dataclass
class TransformInputSpec:
    """One input of a transform: a view named `alias` over its records in `[offset_start, offset_end]`."""

    alias: str
    dataset_id: str
    schema: str  # Arrow schema of the input's data
    data_paths: list[str] = field(default_factory=list)
    offset_start: int | None = None
    offset_end: int | None = None  # None: no new records
    vocab: Vocab = field(default_factory=Vocab)


@dataclass
class TransformRequest:
    """A derivative's SQL over its inputs' new records; answered with an IngestResponse of one slice."""

    operation_id: str
    dataset_id: str
    dataset_alias: str
    system_time: str
    next_offset: int
    queries: list[SqlStep]
    inputs: list[TransformInputSpec]
    out_dir: str
    vocab: Vocab = field(default_factory=Vocab)
    # where the engine hard-links the output's part files as they are committed, named
    # `<place>-<file>.parquet` (6 and 3 digits: the part's place in the slice, Spark's file number), for
    # the coordinator to hash while the engine runs (`parts_ahead`)
    parts_ready_dir: str | None = None
    checks: dict[str, Any] | None = None  # as in IngestRequest
    kind: str = "transform"
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


@dataclass
class InferRequest:
    """Read and preprocess sample files as the first ingest would, and report the schema it would record
    (system columns included); the engine writes no data. Answered with an InferResponse."""

    operation_id: str
    dataset_id: str
    dataset_alias: str
    inputs: list[InputFile]
    read: dict[str, Any]  # ODF ReadStep in manifest JSON form
    merge: dict[str, Any]  # ODF MergeStrategy in manifest JSON form
    out_dir: str  # scratch space of the engine
    vocab: Vocab = field(default_factory=Vocab)
    read_schema: str | None = None  # as in IngestRequest
    preprocess: list[SqlStep] | None = None
    kind: str = "infer"
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


@dataclass
class InferResponse:
    output_schema: str | None = None  # Arrow schema the first ingest would write
    widenings: list[TypeWidening] = field(default_factory=list)  # of the read schema / source columns
    engine: dict[str, str] = field(default_factory=dict)
    error: EngineFailure | None = None
    version: int = CONTRACT_VERSION

    @classmethod
    def from_json(cls, text: str | bytes) -> InferResponse:
        data = load_json_object(text, "response")
        try:
            data["widenings"] = [TypeWidening(**w) for w in data.get("widenings", [])]
            if data.get("error") is not None:
                data["error"] = EngineFailure(**data["error"])
            return cls(**data)
        except (TypeError, KeyError) as e:
            raise EngineContractError(f"engine response: {e}") from None


@dataclass
class OutputSlice:
    """One written data file: a contiguous offset range, becomes one DataSlice / AddData block.

    An engine that writes into the repository's bucket (`out_dir` a URI) hashes the file where it
    wrote it and says so here: its hashes (multihash text), size and the columns that hold nulls; the
    core then commits it by a copy inside the bucket, without reading it."""

    path: str
    offset_start: int
    offset_end: int
    num_records: int
    max_event_time: str | None = None
    physical_hash: str | None = None
    logical_hash: str | None = None
    size: int | None = None
    null_columns: list[str] | None = None


@dataclass
class EngineFailure:
    """Why the engine refused the input: `kind` is stable (`bad-input`, `bad-schema`, `sql`, ...)."""

    kind: str
    message: str


@dataclass
class IngestResponse:
    output_schema: str | None = None  # Arrow schema of the output (known even when nothing was written)
    slices: list[OutputSlice] = field(default_factory=list)
    max_event_time: str | None = None  # over all new records
    new_checkpoint_path: str | None = None
    # with an `out_dir` URI: the merge state file's physical hash (multihash text) and size
    new_checkpoint_physical_hash: str | None = None
    new_checkpoint_size: int | None = None
    num_quarantined: int = 0
    quarantine_path: str | None = None
    engine: dict[str, str] = field(default_factory=dict)  # name and version, recorded in block extras
    error: EngineFailure | None = None
    # with `checks` in the request: `{name, observed, success, failing_rows}` per check
    check_results: list[dict[str, Any]] | None = None
    version: int = CONTRACT_VERSION

    @property
    def num_records(self) -> int:
        return sum(s.num_records for s in self.slices)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> IngestResponse:
        data = load_json_object(text, "response")
        try:
            data["slices"] = [OutputSlice(**s) for s in data.get("slices", [])]
            if data.get("error") is not None:
                data["error"] = EngineFailure(**data["error"])
            return cls(**data)
        except (TypeError, KeyError) as e:
            raise EngineContractError(f"engine response: {e}") from None


def load_json_object(text: str | bytes, what: str) -> dict[str, Any]:
    """The JSON object of an engine's `what` (request, response), or an EngineContractError saying why
    it is not one (every request kind's contract module parses with it)."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise EngineContractError(f"engine {what} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise EngineContractError(f"engine {what}: expected a JSON object")
    version = data.get("version")
    if version != CONTRACT_VERSION:
        raise EngineContractError(
            f"engine {what}: contract version {version!r} is not supported (expected {CONTRACT_VERSION})"
        )
    return data


def write_json(path: str | Path, text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")
