"""The derived summary of a dataset: its `ChainState` as JSON in `info/summary`.

Reading a dataset's state must not walk the whole chain every time. The summary records the state at
some head; a reader whose head moved on folds only the newer blocks into it. The chain stays the only
truth: a missing, unreadable, damaged (its digest does not match) or foreign summary is simply
rebuilt from the blocks, and so is one of an older FORMAT_VERSION.

It grows with the chain by one hash per data slice (`SliceIndex`: about 70 bytes each); nothing else
in it grows with the chain.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from airflow_odf.odf.chain.rules import ChainState, SliceIndex
from airflow_odf.odf.format import model
from airflow_odf.odf.format.fields import METADATA_EVENT, Kind, TypeSpec
from airflow_odf.odf.format.manifests import event_to_plain, from_plain, table_to_plain
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp

SUMMARY_KEY = "info/summary"
# About 900,000 slices; a larger file is ignored unread (as a damaged one is) and the state rebuilt.
MAX_SUMMARY_BYTES = 64 * 1024 * 1024
FORMAT_VERSION = 2  # 2: the slice index (dataSlices, dataCheckpoint)

_EVENTS = ("vocab", "schema", "polling_source", "transform", "info", "license", "attachments")
_EVENT = TypeSpec(Kind.UNION, union=METADATA_EVENT)
_CHECKPOINT = TypeSpec(Kind.TABLE, cls=model.Checkpoint)
_SOURCE_STATE = TypeSpec(Kind.TABLE, cls=model.SourceState)
_INPUT = TypeSpec(Kind.TABLE, cls=model.ExecuteTransformInput)


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def state_to_json(state: ChainState) -> bytes:
    plain = {
        "version": FORMAT_VERSION,
        "head": _opt(state.head),
        "sequenceNumber": state.sequence_number,
        "systemTime": _opt(state.system_time),
        "datasetId": _opt(state.dataset_id),
        "kind": state.kind.name if state.kind is not None else None,
        "events": {name: event_to_plain(getattr(state, name)) for name in _EVENTS if getattr(state, name)},
        "pushSources": [event_to_plain(e) for e in state.push_sources.values()],
        "lastOffset": state.last_offset,
        "watermark": _opt(state.watermark),
        "checkpoint": table_to_plain(state.checkpoint) if state.checkpoint else None,
        "sourceStates": [table_to_plain(s) for s in state.source_states.values()],
        "transformInputs": [table_to_plain(i) for i in state.transform_inputs.values()],
        "numRecords": state.num_records,
        "dataSize": state.data_size,
        "dataSlices": state.data_slices.texts(),
        "dataCheckpoint": _opt(state.data_checkpoint),
    }
    return _dumps({**plain, "digest": _digest(plain)}).encode()


def _dumps(plain: dict[str, Any]) -> str:
    return json.dumps(plain, separators=(",", ":"), ensure_ascii=False)


def _digest(plain: dict[str, Any]) -> str:
    """Detects a summary damaged or edited after it was written (it is then rebuilt from the chain)."""
    return hashlib.sha3_256(_dumps(plain).encode()).hexdigest()


def state_from_json(data: bytes) -> ChainState:
    """Raises ValueError/KeyError/OdfError on anything unexpected; callers then rebuild from the chain."""
    plain = json.loads(data)
    if plain.pop("digest") != _digest(plain):
        raise ValueError("summary does not match its digest")
    if plain.get("version") != FORMAT_VERSION:
        raise ValueError("unknown summary version")

    def parse(value: str | None, parser: Any) -> Any:
        return None if value is None else parser(value)

    push_sources = [from_plain(_EVENT, e) for e in plain["pushSources"]]
    source_states = [from_plain(_SOURCE_STATE, s) for s in plain["sourceStates"]]
    inputs = [from_plain(_INPUT, i) for i in plain["transformInputs"]]
    slices = plain["dataSlices"]
    if not all(isinstance(text, str) for text in slices):
        raise ValueError("dataSlices must be hash texts")
    return ChainState(
        head=parse(plain["head"], Multihash.parse),
        sequence_number=int(plain["sequenceNumber"]),
        system_time=parse(plain["systemTime"], Timestamp.parse),
        dataset_id=parse(plain["datasetId"], DatasetId.parse),
        kind=parse(plain["kind"], model.DatasetKind.__getitem__),
        **{name: from_plain(_EVENT, e) for name, e in plain["events"].items() if name in _EVENTS},
        push_sources={e.source_name: e for e in push_sources},
        last_offset=plain["lastOffset"],
        watermark=parse(plain["watermark"], Timestamp.parse),
        checkpoint=from_plain(_CHECKPOINT, plain["checkpoint"]) if plain["checkpoint"] else None,
        source_states={s.source_name: s for s in source_states},
        transform_inputs={str(i.dataset_id): i for i in inputs},
        num_records=int(plain["numRecords"]),
        data_size=int(plain["dataSize"]),
        data_slices=SliceIndex(slices),
        data_checkpoint=parse(plain["dataCheckpoint"], Multihash.parse),
    )
