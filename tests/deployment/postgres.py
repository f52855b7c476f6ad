"""A throwaway PostgreSQL server for the real-deployment test: Debian's server binaries
(`/usr/lib/postgresql/<version>/bin`, installed by scripts/test), a cluster made with `initdb` in a
temporary directory, listening on 127.0.0.1 only, on a free port.

PostgreSQL refuses to run as root: under root the cluster belongs to the `postgres` account the Debian
package creates (`nobody` where there is none), and only its directory is handed over to it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

from airflow_odf.odf.engine_client.connect_server import free_port

BINARIES = Path("/usr/lib/postgresql")
DATABASE = "airflow"
ROLE = "airflow"


class PostgresMissingError(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def server_binaries() -> Path:
    """The `bin` folder of the newest installed PostgreSQL server."""
    found = sorted(BINARIES.glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    if not found:
        raise PostgresMissingError(
            f"no PostgreSQL server under {BINARIES}/*/bin: install Debian's postgresql package "
            "(scripts/test does it when run as root: apt-get install postgresql)"
        )
    return found[-1].parent


def _server_account() -> pwd.struct_passwd | None:
    """Whom the server runs as: None for the current user, unless that is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresMissingError("running as root, and no `postgres` or `nobody` account to run PostgreSQL as")


class PostgresServer:
    """`with PostgresServer() as server:` a running cluster with an empty database DATABASE owned by ROLE,
    reachable without password at `server.url`; stopped and deleted on exit."""

    def __init__(self) -> None:
        self.bin = server_binaries()
        self.account = _server_account()
        self.root = Path(tempfile.mkdtemp(prefix="odf-postgres-"))  # /tmp: the account can reach it
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port("127.0.0.1")
        self.url = f"postgresql+psycopg2://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, program: str, *args: str) -> None:
        account = self.account
        done = subprocess.run(
            [str(self.bin / program), *args],
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"PostgreSQL {program} failed ({done.returncode}): {done.stderr[-3000:]}{log}")

    def __enter__(self) -> PostgresServer:
        if self.account:
            os.chown(self.root, self.account.pw_uid, self.account.pw_gid)
        try:
            # --no-sync: a test cluster need not survive a power cut (the server's settings stay default)
            self._run(
                "initdb",
                "-D",
                str(self.data),
                f"--username={ROLE}",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            )
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root}"
            )
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", ROLE, DATABASE)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
