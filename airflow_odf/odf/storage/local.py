"""The local disk as an object store: files under a directory, written to a temp file and renamed,
refs moved under a file lock, directories fsynced so that a commit survives a crash.

A repository on disk is untrusted input like any other: nothing is read or written through a symbolic
link that leads out of the store's boundary (the repository root), only regular files are read, and
refs, names and blocks are refused before they are read when they are larger than any real one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.storage.store import (
    ConflictError,
    ObjectNotFoundError,
    ObjectStore,
    check_key,
    object_too_large,
    read_limit,
    writing_atomically,
)


class UnsafeObjectError(OdfError):
    """An object the local store refuses: not a regular file, or reached through a symbolic link that
    leads out of the repository. (One larger than its limit: `ObjectTooLargeError`.)"""


def _inside(path: str, boundary: str) -> bool:
    return path == boundary or path.startswith(boundary.rstrip(os.sep) + os.sep)


class LocalObjectStore(ObjectStore):
    """A directory on the local file system. Writes go to a temp file then `os.replace`.

    `boundary` (default: `root`; sub-stores inherit their parent's) is the directory no read or write
    may leave through a symbolic link.
    """

    def __init__(self, root: str | Path, *, boundary: str | Path | None = None) -> None:
        self.root = Path(root)
        self.boundary = os.path.realpath(self.root if boundary is None else boundary)

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        """The key's path, once its folder is known to resolve inside the boundary."""
        path = self.root / check_key(key)
        self._check_folder(key, os.path.realpath(path.parent))
        return path

    def _check_folder(self, key: str, folder: str) -> None:
        if not _inside(folder, self.boundary):
            raise UnsafeObjectError(f"{key}: its folder is a symbolic link out of {self.boundary}; refused")

    def _resolved(self, key: str) -> str:
        """Where the key's path leads (through links inside the boundary); never out of the boundary.
        One realpath per read: unless the file itself is a link, its folder is where the path leads."""
        path = self.root / check_key(key)
        resolved = os.path.realpath(path)
        if os.path.islink(path):
            self._path(key)
        else:
            self._check_folder(key, os.path.dirname(resolved))
        if not _inside(resolved, self.boundary):
            raise UnsafeObjectError(f"{key} is a symbolic link out of {self.boundary}; refused")
        return resolved

    def local_path(self, key: str) -> Path:
        self._resolved(key)
        return self.root / key

    def child(self, prefix: str) -> LocalObjectStore:
        return LocalObjectStore(self._path(prefix), boundary=self.boundary)

    def _not_found(self, key: str) -> ObjectNotFoundError:
        return ObjectNotFoundError(f"{key} not found in {self.root}")

    def get(self, key: str) -> bytes:
        """The object's bytes: only a regular file, at most `read_limit(key)` bytes (a larger one is
        refused unread); O_NONBLOCK so that a FIFO planted in the repository cannot block the reader."""
        try:
            fd = os.open(self._resolved(key), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except (FileNotFoundError, NotADirectoryError):
            raise self._not_found(key) from None
        except OSError as e:
            raise UnsafeObjectError(f"{key} in {self.root} cannot be read: {e.strerror or e}") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise UnsafeObjectError(f"{key} in {self.root} is {what}")
        with os.fdopen(fd, "rb") as f:
            capped = read_limit(key)
            if capped is None:
                return f.read()
            limit, why = capped
            too_large = object_too_large(key, str(self.root), limit, why)
            if info.st_size > limit:
                raise too_large
            data = f.read(limit + 1)  # it may grow while read
        if len(data) > limit:
            raise too_large
        return data

    def _write_atomic(self, path: Path, data: bytes) -> None:
        with writing_atomically(path) as f:
            f.write(data)

    def put(self, key: str, data: bytes) -> None:
        self._write_atomic(self._path(key), data)

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Writes and fsyncs the files concurrently (the file system batches concurrent fsyncs into few
        journal commits), then renames them into place: one file after another would cost a journal
        commit each."""
        staged: list[tuple[str, Path]] = []
        for directory in {self._path(key).parent for key, _ in items}:
            directory.mkdir(parents=True, exist_ok=True)

        def write(item: tuple[str, bytes]) -> tuple[str, Path]:
            path = self._path(item[0])
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(item[1])
                f.flush()
                os.fsync(f.fileno())
            return tmp, path

        try:
            with ThreadPoolExecutor(max_workers=_PARALLEL_FSYNCS) as pool:
                done = list(pool.map(write, items))
            for tmp, path in done:
                os.replace(tmp, path)
            for directory in {path.parent for _, path in done}:
                fsync_path(str(directory))
        except BaseException:
            for tmp, _ in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise

    def put_file(self, key: str, source: Path, *, move: bool = False) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        # one name per writer, threads too: two may store the same content-addressed object at once
        tmp = target.parent / f".tmp-{os.getpid()}-{threading.get_native_id()}-{target.name}"
        if move:
            try:
                os.replace(source, tmp)
            except OSError:  # another file system
                shutil.copyfile(source, tmp)
        else:
            shutil.copyfile(source, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def get_file(self, key: str, target: Path, *, max_bytes: int | None = None) -> None:
        try:
            source = open(self._resolved(key), "rb")  # noqa: SIM115 - closed by the `with` below
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise self._not_found(key) from None
        with source, writing_atomically(target) as f:
            copied = 0
            while chunk := source.read(1024 * 1024):
                copied += len(chunk)
                if max_bytes is not None and copied > max_bytes:
                    raise object_too_large(key, str(self.root), max_bytes, "more than expected")
                f.write(chunk)

    def exists(self, key: str) -> bool:
        return os.path.isfile(self._resolved(key))

    def size(self, key: str) -> int:
        try:
            return os.stat(self._resolved(key)).st_size
        except (FileNotFoundError, NotADirectoryError):
            raise self._not_found(key) from None

    def list(self, prefix: str) -> Iterator[str]:
        directory = self._path(prefix)
        if not directory.is_dir():
            return
        for entry in os.scandir(directory):
            if entry.is_file() and not entry.name.startswith("."):  # temp and lock files are hidden
                yield f"{prefix}/{entry.name}"

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def compare_and_swap(self, key: str, expected: bytes | None, new: bytes | None) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = path.parent / f".{path.name}.lock"
        with open(lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                current = self.get_or_none(key)
                if current != expected:
                    raise ConflictError.changed(key, expected, current)
                if new is None:
                    path.unlink(missing_ok=True)
                else:
                    self._write_atomic(path, new)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


_PARALLEL_FSYNCS = 16


def fsync_path(path: str | Path) -> None:
    """Flushes a file's (or a directory's) data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
