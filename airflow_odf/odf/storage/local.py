"""The local disk as an object store: files under a directory, written to a temp file and renamed,
refs moved under a file lock, directories fsynced so that a commit survives a crash."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from airflow_odf.odf.storage.store import (
    ConflictError,
    ObjectNotFoundError,
    ObjectStore,
    check_key,
    writing_atomically,
)


class LocalObjectStore(ObjectStore):
    """A directory on the local file system. Writes go to a temp file then `os.replace`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def local_path(self, key: str) -> Path:
        return self._path(key)

    def child(self, prefix: str) -> LocalObjectStore:
        return LocalObjectStore(self._path(prefix))

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(f"{key} not found in {self.root}") from None

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
        tmp = target.parent / f".tmp-{os.getpid()}-{target.name}"
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

    def get_file(self, key: str, target: Path) -> None:
        try:
            source = open(self._path(key), "rb")  # noqa: SIM115 - closed by the `with` below
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFoundError(f"{key} not found in {self.root}") from None
        with source, writing_atomically(target) as f:
            shutil.copyfileobj(source, f, 1024 * 1024)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{key} not found in {self.root}") from None

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
                current = path.read_bytes() if path.is_file() else None
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
