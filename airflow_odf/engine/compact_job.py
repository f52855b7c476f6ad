"""The engine's compact requests: each group of slice files merged into one Parquet file, sorted by offset.

Groups that share a schema are merged by one Spark job, without a shuffle: each group's files are read
and coalesced into one partition and sorted there, and the union of these frames has one partition per
group, which Spark writes as one file each (`writer.write_slices`: described from the footers, or, in a
bucket, described and hashed by the executors where they are). Records are copied as they are.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from airflow_odf.engine.errors import EngineInputError
from airflow_odf.engine.remote_files import is_uri
from airflow_odf.engine.session import session_conf
from airflow_odf.engine.slice_footer import WrittenSlice
from airflow_odf.engine.writer import write_slices, write_slices_in_place
from airflow_odf.utils.engine_json import Vocab

_UNION_PARTITIONING = "spark.sql.unionOutputPartitioning"
_LISTING_JOB_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def compact(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Answers a CompactRequest (`compact_contract`) with one slice per group, in the groups' order."""
    groups = request.get("groups")
    if not isinstance(groups, list) or not groups:
        raise EngineInputError("contract", "a compact request needs at least one group")
    vocab = Vocab(**request.get("vocab", {}))
    write = write_slices_in_place if is_uri(request["out_dir"]) else write_slices
    written: list[WrittenSlice] = []
    with session_conf(spark, _request_conf(groups)):
        for epoch, members in itertools.groupby(groups, key=lambda group: group.get("schema_epoch", 0)):
            frames = _sorted_groups(spark, list(members), vocab)
            out_dir = f"{request['out_dir'].rstrip('/')}/epoch-{epoch}"
            slices, _ = write(
                functools.reduce(DataFrame.union, frames), out_dir, vocab=vocab, max_records_per_slice=None
            )
            written += slices
    return {"slices": [s.__dict__ for s in _one_per_group(written, groups)]}


def _request_conf(groups: list[dict[str, Any]]) -> dict[str, str]:
    """A union of one-partition frames keeps one partition per frame: Spark 4 would otherwise zip the
    children's partitions together (they all have the same, single, partitioning), merging the groups.
    Files on this disk are listed by the driver (a listing job per group would cost more than the
    listing); files in a store keep Spark's parallel listing."""
    conf = {_UNION_PARTITIONING: "false"}
    if not any(is_uri(path) for group in groups for path in group.get("data_paths") or []):
        conf[_LISTING_JOB_THRESHOLD] = str(2**31 - 1)
    return conf


def _sorted_groups(spark: SparkSession, groups: list[dict[str, Any]], vocab: Vocab) -> list[DataFrame]:
    """Each group's records in one partition, by offset; the groups share one schema, read once."""
    for group in groups:
        paths = group.get("data_paths")
        if not isinstance(paths, list) or not paths:
            raise EngineInputError("contract", "every compact group needs its data_paths")
    schema = spark.read.parquet(groups[0]["data_paths"][0]).schema
    return [
        spark.read.schema(schema)
        .parquet(*group["data_paths"])
        .coalesce(1)
        .sortWithinPartitions(vocab.offset_column)
        for group in groups
    ]


def _one_per_group(written: list[WrittenSlice], groups: list[dict[str, Any]]) -> list[WrittenSlice]:
    """The written files in the groups' order; each group must have become exactly one file with its
    offsets, else nothing may be committed."""
    by_start = {s.offset_start: s for s in written}
    out = []
    for group in groups:
        found = by_start.get(group["offset_start"])
        if found is None or found.offset_end != group["offset_end"] or len(written) != len(groups):
            raise EngineInputError(
                "internal",
                f"the merge of offsets {group['offset_start']}..{group['offset_end']} did not give one "
                f"file of exactly those records ({len(written)} file(s) for {len(groups)} group(s))",
            )
        out.append(found)
    return out
