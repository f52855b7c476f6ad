"""A Spark standalone cluster on this machine whose executors cannot see the coordinator's disk.

The master runs as a plain process; the worker (and so every executor it starts) runs in its own mount
namespace where an empty tmpfs lies over each of the coordinator's directories (its temp dir, the test
session's base temp dir, the repositories, work and scratch dirs under them). The venv and the source
tree stay visible — executors run the venv's python, as a cluster node with the same environment
installed would — and the network is shared, so executors reach servers on 127.0.0.1 (moto, the
driver). What the coordinator writes into a hidden directory is simply not there for an executor, as on
another machine.

Both daemons get the parent-death signal (they die with the process that started them, also one killed
with SIGKILL) and a process group of their own, which `stop` ends; executors end with their worker.
The cluster's own directories (daemon logs, the worker's work and local dirs, a folder both sides see)
live under `root`, outside every hidden directory, so a failure can quote the executors' logs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path

from airflow_odf.utils.parent_death import parent_death_preexec

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
VENV_BIN = Path(sys.executable).parent
# the ways to get a private mount namespace, as root first, else as a user mapped to root
_UNSHARE_VARIANTS = (("unshare", "--mount"), ("unshare", "--user", "--map-root-user", "--mount"))


class ClusterError(RuntimeError):
    """The cluster did not come up (the message carries the daemons' log tails)."""


def spark_home() -> Path:
    """The pip-installed pyspark package directory, which is a Spark distribution (bin/spark-class)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ClusterError("pyspark is not installed in this environment")
    return Path(spec.origin).parent


def unshare_command() -> tuple[list[str] | None, str]:
    """The `unshare` prefix that gives a private mount namespace here, or None and why not."""
    if shutil.which("unshare") is None:
        return None, "the `unshare` command (util-linux) is not installed"
    reasons = []
    for variant in _UNSHARE_VARIANTS:
        probe = subprocess.run(
            [*variant, "mount", "-t", "tmpfs", "odf-probe", "/mnt"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0:
            return list(variant), ""
        reasons.append(f"`{' '.join(variant)}`: {probe.stderr.strip() or f'exit code {probe.returncode}'}")
    return None, "no private mount namespace with a tmpfs is permitted here (" + "; ".join(reasons) + ")"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def outermost(dirs: Iterable[Path]) -> list[Path]:
    """The directories with those nested in another one left out (a tmpfs over the outer one hides
    them already; the inner mount point would not even exist on it)."""
    resolved = sorted({d.resolve() for d in dirs}, key=lambda d: len(d.parts))
    kept: list[Path] = []
    for folder in resolved:
        if not any(folder == k or k in folder.parents for k in kept):
            kept.append(folder)
    return kept


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"({path}: no log)"
    return f"--- {path} (last {min(lines, len(text))} lines)\n" + "\n".join(text[-lines:])


class StandaloneCluster:
    """One master and one worker (`cores` cores, `memory`) on 127.0.0.1, the worker blind to `hidden`.

    `root` holds the cluster's own files and must lie outside every hidden directory; `shared` under it
    is a folder both the coordinator and the executors see."""

    def __init__(
        self,
        root: Path,
        hidden: Sequence[Path],
        unshare: Sequence[str],
        *,
        cores: int = 2,
        memory: str = "2g",
    ) -> None:
        self.root = root.resolve()
        self.hidden = outermost(hidden)
        clash = [d for d in self.hidden if d == self.root or d in self.root.parents]
        if clash:
            where = f"the cluster's folder {self.root} lies in a hidden directory, {clash[0]}"
            raise ClusterError(f"{where}: set $ODF_CLUSTER_DIR elsewhere")
        self.unshare = list(unshare)
        self.cores, self.memory = cores, memory
        self.shared = self.root / "shared"
        self.worker_dir = self.root / "worker"
        self.master_log, self.worker_log = self.root / "master.log", self.root / "worker.log"
        self.port, self.webui_port = free_port(), free_port()
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def daemon_env(self) -> dict[str, str]:
        """The daemons' environment: the venv first on PATH (executors run its `python3`), Spark bound to
        127.0.0.1, the worker's scratch space (shuffle, fetched jars) under its own folder."""
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.worker_dir / "local"),
            "PYSPARK_PYTHON": sys.executable,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def master_command(self) -> list[str]:
        spark_class = str(spark_home() / "bin" / "spark-class")
        ports = ["--port", str(self.port), "--webui-port", str(self.webui_port)]
        return [spark_class, MASTER_CLASS, "--host", "127.0.0.1", *ports]

    def worker_command(self) -> list[str]:
        """`unshare` into a new mount namespace, a tmpfs over each hidden directory, then the worker."""
        spark_class = str(spark_home() / "bin" / "spark-class")
        mounts = " && ".join(f"mount -t tmpfs odf-hidden {shlex.quote(str(d))}" for d in self.hidden)
        worker = [spark_class, WORKER_CLASS, self.master_url, "--host", "127.0.0.1"]
        worker += ["--port", str(free_port()), "--webui-port", str(free_port())]
        worker += [
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str(self.worker_dir / "work"),
        ]
        return [*self.unshare, "sh", "-c", f'{mounts} && exec "$@"', "odf-worker", *worker]

    def start(self, timeout: float = 120.0) -> str:
        """Starts both daemons and waits until the master lists the worker ALIVE; returns the master URL."""
        for folder in (self.shared, self.worker_dir / "local", self.worker_dir / "work"):
            folder.mkdir(parents=True, exist_ok=True)
        self._spawn(self.master_command(), self.master_log)
        self._spawn(self.worker_command(), self.worker_log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p for p in self._processes if p.poll() is not None]
            if dead:
                command = shlex.join(map(str, dead[0].args))
                self._fail(f"a Spark daemon exited with code {dead[0].returncode} ({command})")
            if self.alive_workers() >= 1:
                return self.master_url
            time.sleep(0.5)
        self._fail(f"no worker registered with {self.master_url} within {timeout:.0f} s")
        raise AssertionError("unreachable")

    def alive_workers(self) -> int:
        """How many workers the master's JSON status lists as ALIVE (0 while the master is not up)."""
        try:
            with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2) as reply:
                status = json.load(reply)
        except (OSError, ValueError):
            return 0
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def logs(self, lines: int = 30) -> str:
        """The tails of the daemons' logs and of every executor's stderr, for failure messages."""
        executors = sorted((self.worker_dir / "work").glob("*/*/stderr"))
        return "\n".join(tail(path, lines) for path in [self.master_log, self.worker_log, *executors])

    def stop(self) -> None:
        """Ends the worker (its executors with it), then the master: SIGTERM, SIGKILL after 20 s."""
        for process in reversed(self._processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()

    def _spawn(self, command: list[str], log: Path) -> None:
        with log.open("wb") as out:
            self._processes.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.daemon_env(),
                    cwd=self.root,
                    start_new_session=True,  # a process group of its own, which stop() ends
                    preexec_fn=parent_death_preexec(),  # dies with this process, even on SIGKILL
                )
            )

    def _fail(self, what: str) -> None:
        logs = self.logs()
        self.stop()
        raise ClusterError(f"{what}\n{logs}")

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cluster_root() -> Path:
    """A fresh folder for a cluster, outside the coordinator's temp dir (which the worker cannot see)."""
    base = Path(os.environ.get("ODF_CLUSTER_DIR") or "/var/tmp")
    return Path(tempfile.mkdtemp(prefix="odf-cluster-", dir=base))


def spark_submit(
    master: str,
    script: Path,
    args: Sequence[str],
    *,
    conf: dict[str, str],
    secrets: dict[str, str],
    scratch: Path,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """Runs `script` by `spark-submit` in client mode (the driver here, on the coordinator). `secrets`
    (S3 keys) go to a 0600 properties file in `scratch`, never onto the command line."""
    scratch.mkdir(parents=True, exist_ok=True)
    properties = scratch / "secret.properties"
    properties.touch(mode=0o600)
    properties.write_text("".join(f"{key} {value}\n" for key, value in secrets.items()), encoding="utf-8")
    command = [str(VENV_BIN / "spark-submit"), "--master", master, "--properties-file", str(properties)]
    for key, value in {"spark.ui.enabled": "false", **conf}.items():
        command += ["--conf", f"{key}={value}"]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [*command, str(script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=scratch,
        timeout=timeout,
        preexec_fn=parent_death_preexec(),
        check=False,
    )
