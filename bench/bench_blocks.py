"""Block codec throughput: encode+hash and decode of 100,000 varied blocks on one core.

Target (issue 2): >= 10,000 blocks/s each. Baseline in the same run: the standard library's C JSON
codec over the same blocks' plain (YAML/JSON) form, so the ratio is comparable across machines.

Run: .venv/bin/python bench/bench_blocks.py [--blocks N]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block, encode_block
from airflow_odf.odf.format.manifests import manifest_to_plain, read_manifests
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp

REPO = Path(__file__).resolve().parents[1]


def sample_events() -> list[Any]:
    """One of each common shape: the sample manifests' events plus data-carrying events."""
    events: list[Any] = []
    for path in sorted((REPO / "dags_examples" / "manifests").glob("*.yaml")):
        for m in read_manifests(path):
            events += m.content.metadata
    h = Multihash.sha3_256
    did = DatasetId(bytes(range(32)))
    slice_ = model.DataSlice(
        logical_hash=Multihash(ARROW0_SHA3_256, bytes(32)),
        physical_hash=h(b"data"),
        offset_interval=model.OffsetInterval(start=100, end=199),
        size=123_456,
    )
    events += [
        model.Seed(dataset_id=did, dataset_kind=model.DatasetKind.ROOT),
        model.AddData(
            prev_checkpoint=h(b"cp0"),
            prev_offset=99,
            new_data=slice_,
            new_checkpoint=model.Checkpoint(physical_hash=h(b"cp1"), size=512),
            new_watermark=Timestamp.parse("2024-01-01T00:00:00Z"),
            new_source_state=model.SourceState(source_name="default", kind="odf/etag", value='"abc"'),
            extra={"airflow.apache.org/runId": "manual__2024-01-01"},
        ),
        model.ExecuteTransform(
            query_inputs=[
                model.ExecuteTransformInput(
                    dataset_id=did,
                    prev_block_hash=h(b"a"),
                    new_block_hash=h(b"b"),
                    prev_offset=9,
                    new_offset=19,
                )
            ],
            prev_offset=99,
            new_data=slice_,
            new_watermark=Timestamp.parse("2024-01-01T00:00:00Z"),
        ),
        model.SetDataSchema(
            schema=model.DataSchema(
                fields=[
                    model.DataField(name="offset", type=model.DataTypeInt64()),
                    model.DataField(name="op", type=model.DataTypeInt32()),
                    model.DataField(name="system_time", type=model.DataTypeTimestamp()),
                    model.DataField(name="name", type=model.DataTypeOption(inner=model.DataTypeString())),
                ]
            )
        ),
    ]
    return events


def make_blocks(count: int) -> list[model.MetadataBlock]:
    events = sample_events()
    start = Timestamp.parse("2024-01-01T00:00:00Z").epoch_nanos()
    blocks = []
    for i in range(count):
        blocks.append(
            model.MetadataBlock(
                system_time=Timestamp.from_epoch_nanos(start + i * 1_000_003),
                prev_block_hash=Multihash.sha3_256(i.to_bytes(8, "little")) if i else None,
                sequence_number=i,
                event=events[i % len(events)],
            )
        )
    return blocks


def rate(label: str, count: int, fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - t0
    per_second = count / elapsed
    print(f"{label:<34} {elapsed:8.2f} s  {per_second:>10,.0f} blocks/s")
    return per_second


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=100_000)
    args = parser.parse_args()
    n = args.blocks
    print(f"machine: {platform.node()} {platform.machine()} python {platform.python_version()}; {n:,} blocks")
    blocks = make_blocks(n)
    encoded: list[bytes] = []
    hashes: list[Multihash] = []

    def encode_all() -> None:
        for b in blocks:
            data = encode_block(b)
            encoded.append(data)
            hashes.append(block_hash(data))

    enc = rate("encode + hash (ours)", n, encode_all)
    decoded: list[model.MetadataBlock] = []
    dec = rate("decode (ours)", n, lambda: decoded.extend(decode_block(d) for d in encoded))
    assert decoded == blocks, "decode(encode(block)) must give the block back"

    plain = [manifest_to_plain(b) for b in blocks]
    texts: list[str] = []
    base_enc = rate("baseline: json.dumps (C)", n, lambda: texts.extend(json.dumps(p) for p in plain))
    base_dec = rate("baseline: json.loads (C)", n, lambda: [json.loads(t) for t in texts])
    print(
        f"ratio encode+hash / json.dumps: {enc / base_enc:.2f}   target >= 10,000 blocks/s: "
        f"{'met' if enc >= 10_000 else 'NOT met'}"
    )
    print(
        f"ratio decode / json.loads:      {dec / base_dec:.2f}   target >= 10,000 blocks/s: "
        f"{'met' if dec >= 10_000 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
