"""The check of `--verify`: a merged file holds exactly the records of the slices it replaces.

The logical hash (arrow-digest) does not depend on how records are cut into files or batches, and it
covers every column, system columns included (offset, op, system and event time) and the schema. So the
digest of the old slices read one after another, a batch at a time (memory bounded by a batch), must
equal the merged file's logical hash.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.errors import OdfError, OdfFormatError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import ARROW0_SHA3_256, Multihash
from airflow_odf.odf.hashing.arrow_digest import RecordDigest

_BATCH_ROWS = 10_000


class RecordsChangedError(OdfError):
    """A merged file does not hold the same records as the slices it replaces (nothing is committed)."""


def check_same_records(
    dataset: Dataset, name: str, old: list[model.DataSlice], merged: model.DataSlice, scratch: Path
) -> None:
    """Raises RecordsChangedError unless the records of `old` (in order) are those of `merged`."""
    digest: RecordDigest | None = None
    where = f"{name}: offsets {merged.offset_interval.start}..{merged.offset_interval.end}"
    try:
        for data_slice in old:
            with _opened(dataset, data_slice, scratch) as parquet:
                digest = digest or RecordDigest(parquet.schema_arrow)
                for batch in parquet.iter_batches(batch_size=_BATCH_ROWS):
                    digest.update(batch)
    except OdfFormatError as e:
        raise RecordsChangedError(f"{where}: the slices to merge do not share one schema: {e}") from None
    before = Multihash(ARROW0_SHA3_256, digest.finalize()) if digest is not None else None
    if before != merged.logical_hash:
        raise RecordsChangedError(
            f"{where}: the merged file's records differ from those of its {len(old)} slices "
            f"(logical hash {merged.logical_hash}, expected {before}); nothing was committed"
        )


@contextlib.contextmanager
def _opened(dataset: Dataset, data_slice: model.DataSlice, scratch: Path) -> Iterator[pq.ParquetFile]:
    """A slice as a Parquet file: in place on local disk, else a copy in `scratch` removed afterwards."""
    key = f"data/{data_slice.physical_hash}"
    path = dataset.store.local_path(key)
    copy = None
    if path is None:
        scratch.mkdir(parents=True, exist_ok=True)
        copy = path = scratch / str(data_slice.physical_hash)
        dataset.store.get_file(key, copy)
    try:
        with pq.ParquetFile(path) as parquet:
            yield parquet
    except (OSError, pa.ArrowException) as e:
        raise OdfError(f"{key}: cannot read data slice: {e}") from None
    finally:
        if copy is not None:
            copy.unlink(missing_ok=True)
