"""Object stores: where a dataset's blocks, data, checkpoints and refs live.

A store maps slash-separated keys (`blocks/<hash>`, `refs/head`, ...) to bytes. Every backend offers
the same small interface so the same dataset code runs on a local disk, S3 or HTTP: get / put /
exists / list / delete, and `compare_and_swap` for refs — the only mutable objects — so that two
writers can never both move a head from the same old value.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from airflow_odf.odf import limits
from airflow_odf.odf.errors import OdfError


class ObjectNotFoundError(OdfError, KeyError):
    """The key does not exist in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "object not found"


class ConflictError(OdfError):
    """A compare-and-swap found another value than expected: someone else moved the ref first."""

    @classmethod
    def changed(cls, key: str, expected: bytes | None, found: bytes | None) -> ConflictError:
        """The conflict every store reports: the ref's expected and found values."""
        return cls(f"{key} changed concurrently: expected {_show(expected)}, found {_show(found)}")


def read_limit(key: str) -> tuple[int, str] | None:
    """The most bytes a store's `get` reads for a key, and why (the same on every store: a peer's or a
    planted object is refused, not read whole): refs and names hold one hash or name, blocks are
    capped by `limits.max_block_bytes()`, attestations by `limits.MAX_ATTESTATION_BYTES`; other objects
    (summaries, data) are not capped here."""
    if key.startswith(("refs/", "aliases/")) or key == "info/alias":
        return limits.MAX_REF_BYTES, "more than a ref or name holds"
    if key.startswith("blocks/"):
        return limits.max_block_bytes(), f"the block limit, {limits.MAX_BLOCK_BYTES_ENV}"
    if key.startswith("attestations/"):
        return limits.MAX_ATTESTATION_BYTES, "more than a head attestation holds"
    return None


def _show(value: bytes | None) -> str:
    return "nothing" if value is None else value.decode(errors="replace")


class ObjectTooLargeError(OdfError):
    """An object is larger than its reader accepts: a peer sending more than it declared or than a
    limit allows. Nothing of it was kept."""


def object_too_large(key: str, where: str, limit: int, detail: str) -> ObjectTooLargeError:
    """The one message for an object refused for its size, naming the object, the store and why."""
    return ObjectTooLargeError(f"{key} at {where} is larger than {limit} bytes ({detail}); refused")


class InvalidKeyError(OdfError, ValueError):
    """A key that could escape the store (`..`, absolute paths, empty parts)."""


def check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in key:
        raise InvalidKeyError(f"invalid object key {key!r}")
    return key


class ObjectStore(ABC):
    """Key -> bytes storage with an atomic compare-and-swap for refs."""

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Writes atomically: readers see the old object or the new one, never a part."""

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Stores several small objects (e.g. received blocks): each atomically, all durable on return."""
        for key, data in items:
            self.put(key, data)

    @abstractmethod
    def put_file(self, key: str, source: Path, *, move: bool = False) -> None:
        """Stores a local file's content under `key` (moving it when allowed and possible)."""

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectNotFoundError:
            return False
        return True

    @abstractmethod
    def size(self, key: str) -> int: ...

    @abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Keys directly under `prefix/` (not recursive), in no particular order."""

    @abstractmethod
    def delete(self, key: str) -> None: ...

    @abstractmethod
    def compare_and_swap(self, key: str, expected: bytes | None, new: bytes | None) -> None:
        """Sets `key` to `new` (None deletes) only if its value is `expected` (None = absent)."""

    def get_or_none(self, key: str) -> bytes | None:
        try:
            return self.get(key)
        except ObjectNotFoundError:
            return None

    def local_path(self, key: str) -> Path | None:
        """A path readers may open directly (for Spark), when the store is on the local disk."""
        return None

    def engine_uri(self, key: str) -> str | None:
        """Where an engine may read the object in place (a local path, or e.g. `s3a://` on a cluster
        configured for it); None: the object must be staged on the local disk first."""
        path = self.local_path(key)
        return None if path is None else str(path)

    @property
    def engine_writes_in_place(self) -> bool:
        """Whether the engine writes its output into this store itself (a bucket the Spark cluster
        writes through `s3a://`), to a staging area the commit then copies from; else it writes to the
        local operation folder and the commit uploads the files."""
        return False

    def copy(self, source: str, key: str) -> None:
        """Copies an object to another key inside the store, without the bytes passing through here."""
        raise OdfError(f"{self!r} cannot copy objects inside itself ({source} -> {key})")

    def list_tree(self, prefix: str) -> Iterator[tuple[str, float]]:
        """Keys under `prefix/` at any depth, with their last-modified time (seconds since the epoch),
        for `odf gc` in a store without local files (a bucket). A store that cannot list has none."""
        return iter(())

    def child(self, prefix: str) -> ObjectStore:
        """The store of the keys under `prefix/` (a repository's datasets live in sub-stores)."""
        raise OdfError(f"{self!r} cannot open sub-stores")

    def get_file(self, key: str, target: Path, *, max_bytes: int | None = None) -> None:
        """Copies an object to a local file, all or nothing; remote backends stream big objects.
        `max_bytes` (e.g. the size a block declares): a larger object is refused (ObjectTooLargeError)
        and `target` is left untouched; streaming backends stop reading one byte beyond it."""
        data = self.get(key)
        if max_bytes is not None and len(data) > max_bytes:
            raise object_too_large(key, repr(self), max_bytes, "more than expected")
        with writing_atomically(target) as f:
            f.write(data)


@contextlib.contextmanager
def writing_atomically(target: Path) -> Iterator[BinaryIO]:
    """A temp file next to `target` that replaces it only when the block ends without an error, so
    an interrupted download never leaves a partial file under the final name."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
