"""The data columns of a transform's slice, hashed from Spark's part files while the engine still runs.

The engine splices the slice from the part files of one Spark write, copying their column chunks as
they are, and publishes the parts Spark has committed once fewer are still to come than it has cores
(`TransformRequest.parts_ready_dir`, named `<place>-<file>.parquet`). The coordinator hashes the
published parts' columns in that order (`PartsAhead.hash_next`, called by the hash-ahead thread), so
that when the engine answers only the parts of its last tasks are left. What was hashed ahead counts
only where the slice's column chunks are byte for byte those of the parts, in the same order
(`parquet_hashes`): the hash is always the file's. Columns with structs are left out:
their digest depends on batch boundaries (§D.5).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.hashing.arrow_digest import RecordDigest
from airflow_odf.odf.hashing.parquet_hashes import HashedParts, PartFile, hash_parquet_column, is_flat


class PartsAhead:
    """Hashes the parts published in `ready_dir`, in order, one per `hash_next` call; `hashed` is what
    `parquet_hashes` takes as `parts` (replaced, never changed, after each column of each part)."""

    def __init__(self, ready_dir: Path) -> None:
        self._dir = ready_dir
        self._next = _Next(-1, 0)  # the first is place 0's first file
        self._stopped = False
        self._digest: RecordDigest | None = None
        self._files: tuple[PartFile, ...] = ()
        self._fed: dict[str, int] = {}
        self.hashed: HashedParts | None = None

    def hash_next(self, stop: threading.Event) -> bool:
        """Hashes the next part if it is published, until `stop` is set; whether it hashed all of it."""
        if self._stopped:
            return False
        path = self._next.published(self._dir)
        if path is None:
            return False
        try:
            whole = self._hash(path, stop)
        except (OSError, pa.ArrowException, OdfError):  # hashed from the slice instead
            whole = False
        if not whole:
            self._stopped = True
            return False
        self._next = self._next.after(path)
        return True

    def _hash(self, path: Path, stop: threading.Event) -> bool:
        with pa.memory_map(str(path)) as source:
            data = source.read_buffer()
        metadata = pq.ParquetFile(pa.BufferReader(data)).metadata
        schema = metadata.schema.to_arrow_schema()
        if self._digest is None:
            self._digest = RecordDigest(schema)
        elif not schema.equals(self._digest.schema):
            return False
        self._files = (*self._files, PartFile(data, metadata))
        for index, field in enumerate(schema):
            if not is_flat(field.type):
                continue
            if not hash_parquet_column(self._digest, data, metadata, index, until=stop):
                return False  # `hashed` still has that column as it was after the previous part
            self._fed[field.name] = len(self._files)
            self.hashed = HashedParts(self._files, self._digest.copy(), dict(self._fed))
        return True


@dataclass(frozen=True)
class _Next:
    """The part that comes next: file `file` of the part at `place`, or else the next place's first (a
    task's files are published together, in order; a partition without rows has no file, and the parts
    after it are then hashed from the slice)."""

    place: int
    file: int

    def published(self, directory: Path) -> Path | None:
        for candidate in (self, _Next(self.place + 1, 0)):
            path = directory / f"{candidate.place:06d}-{candidate.file:03d}.parquet"
            if path.exists():
                return path
        return None

    def after(self, path: Path) -> _Next:
        place, file = (int(n) for n in path.stem.split("-"))
        return _Next(place, file + 1)
