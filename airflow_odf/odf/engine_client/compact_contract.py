"""The engine contract of a compaction (request kind "compact"): which slice files to merge into one file
each, and the merged files the engine wrote. Like every request of the contract (`contract.py`), plain
JSON that names files; documented in docs/engine-contract.md.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from airflow_odf.odf.engine_client.contract import (
    CONTRACT_VERSION,
    EngineContractError,
    EngineFailure,
    OutputSlice,
    load_json_object,
)
from airflow_odf.utils.engine_json import Vocab


@dataclass
class CompactGroup:
    """Consecutive slices (oldest first) that become one file holding records `[offset_start, offset_end]`
    sorted by offset. Groups of one `schema_epoch` share one schema (no SetDataSchema between them):
    an engine may merge them in one job."""

    data_paths: list[str]
    offset_start: int
    offset_end: int
    schema_epoch: int = 0


@dataclass
class CompactRequest:
    """Merge each group's slice files into one Parquet file under `out_dir` (a local folder, or a URI in
    the repository's bucket, where the engine then hashes what it wrote, as for an ingest). Records are
    copied as they are: system columns included, nothing recomputed."""

    operation_id: str
    dataset_id: str
    dataset_alias: str
    groups: list[CompactGroup]
    out_dir: str
    vocab: Vocab = field(default_factory=Vocab)
    kind: str = "compact"
    version: int = CONTRACT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)


@dataclass
class CompactResponse:
    """One merged file per group, in the groups' order."""

    slices: list[OutputSlice] = field(default_factory=list)
    engine: dict[str, str] = field(default_factory=dict)
    error: EngineFailure | None = None
    version: int = CONTRACT_VERSION

    @classmethod
    def from_json(cls, text: str | bytes) -> CompactResponse:
        data = load_json_object(text, "response")
        try:
            slices = [OutputSlice(**s) for s in data.get("slices", [])]
            error = EngineFailure(**data["error"]) if data.get("error") is not None else None
            return cls(slices=slices, engine=data.get("engine", {}), error=error)
        except (TypeError, KeyError) as e:
            raise EngineContractError(f"engine response: {e}") from None
