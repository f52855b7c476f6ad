"""The operation folders of a repository's scratch space (`<work dir>/operations/<id>/`): each engine
operation works in its own, and removes it when it ends. A process killed with SIGKILL cannot, so
`odf gc` removes the folders of dead operations — and must never remove a live one.

Liveness is a lock: the process working in a folder holds an exclusive `flock` on the folder's
`owner.json` while the operation runs, and the kernel drops it when that process ends in any way.
`owner.json` also records who holds it (host, pid, process start) for people and for file systems
without locks. A folder is dead when it is older than the minimum age and
- nobody holds its lock; on a volume shared by several machines this needs a file system that carries
  locks between them (NFSv4, NFSv3 with lockd, CephFS, GPFS, ...);
- or, where the file system refuses locks, its owner is a process of this host that is gone (its pid
  and start time no longer match); a folder of another host is then kept;
- or it has no `owner.json` (left by a version before these records, or by a process killed while it
  made the folder) and is older than a minute as well.
Only folders named like operations (32 hex digits, or a staging name of one) are considered:
`py-files/` is a cache.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

OWNER_FILE = "owner.json"
_STAGING = ".new-"
_OPERATION_NAME = re.compile(rf"({re.escape(_STAGING)})?[0-9a-f]{{32}}")
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS}
_UNOWNED_GRACE_SECONDS = 60  # a folder under creation has no owner record for a moment


def create_claimed(folder: Path) -> IO[str]:
    """Creates the operation folder `folder` owned by this process: its `owner.json` is locked before
    the folder appears under its name (made under a staging name, then renamed), so no one ever sees it
    unowned. The lock lasts until the returned file is closed, or this process ends."""
    staging = folder.with_name(f"{_STAGING}{folder.name}")
    staging.mkdir(parents=True)
    owner = open(staging / OWNER_FILE, "x", encoding="utf-8")  # noqa: SIM115 (open for the operation)
    try:
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                raise
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "process_start": process_start(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        owner.write(json.dumps(record))
        owner.flush()
        staging.rename(folder)
    except BaseException:
        owner.close()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return owner


@dataclass(frozen=True)
class RemovedOperation:
    """An operation folder `odf gc` removed: where, its size in bytes, and its owner record."""

    path: Path
    size: int
    owner: dict[str, Any]

    def __str__(self) -> str:
        who = self.owner
        by = (
            f"pid {who.get('pid')} on {who.get('host')}, started {who.get('started')}"
            if who
            else "no owner record"
        )
        return f"{self.path} ({self.size / 1e6:.1f} MB; {by}; its process is gone)"


def collect_operations(work_dir: Path, min_age_seconds: float) -> list[RemovedOperation]:
    """Removes the folders of dead operations under `work_dir/operations` older than `min_age_seconds`
    (the module's rule); returns what it removed."""
    operations = work_dir / "operations"
    if not operations.is_dir() or operations.is_symlink():
        return []
    now = time.time()
    removed = []
    for folder in sorted(operations.iterdir()):
        if not _OPERATION_NAME.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
            continue
        try:
            age = now - folder.stat().st_mtime
            if age < min_age_seconds:
                continue
            gone = _remove_if_dead(folder, age)
        except FileNotFoundError:  # its operation ended meanwhile and removed it
            continue
        if gone is not None:
            removed.append(gone)
    return removed


def _remove_if_dead(folder: Path, age: float) -> RemovedOperation | None:
    """Removes `folder` (`age` seconds old) holding its lock, when its operation is dead; None when it
    is alive or cannot be known to be dead."""
    try:
        record = open(folder / OWNER_FILE, encoding="utf-8")  # noqa: SIM115 (held while removing)
    except FileNotFoundError:
        return _remove(folder, {}) if age >= _UNOWNED_GRACE_SECONDS else None
    with record:
        owner = _owner(record.read())
        try:
            fcntl.flock(record, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # held: the operation is alive
        except OSError as e:
            if e.errno not in _NO_LOCKS or not _gone_from_this_host(owner):
                return None
        return _remove(folder, owner)


def _remove(folder: Path, owner: dict[str, Any]) -> RemovedOperation:
    size = sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_dir() or p.is_symlink())
    shutil.rmtree(folder)
    return RemovedOperation(folder, size, owner)


def _owner(text: str) -> dict[str, Any]:
    """The owner record, or {} when it is not one (a write cut short)."""
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _gone_from_this_host(owner: dict[str, Any]) -> bool:
    """Whether the recorded owner is a process of this host that no longer runs."""
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    started = owner.get("process_start")
    return started is not None and process_start(owner["pid"]) != started


def process_start(pid: int) -> str | None:
    """When process `pid` started, as the boot's id and the clock ticks since boot (Linux `/proc`): the
    pair never names two processes. None when the process is gone or this is not Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return f"{boot}:{stat.rsplit(')', 1)[1].split()[19]}"
