"""A real Airflow deployment for the tests: the metadata DB on PostgreSQL, and the api-server, scheduler
(LocalExecutor), dag-processor and triggerer each in its own process, as a production installation
runs them; driven through the api-server's REST API (`/api/v2`) with a token of the simple auth manager.

Its DAG folder holds links to the example DAGs the tests run (an example resolves its manifests and data
beside its real file) and the tests' own DAGs (tests/deployment/dags). Every ODF task runs on the warm
engine: the `spark_default` connection is of type `spark_connect`, pointing at a Spark Connect server. The
repository connection `odf_default` lives in the metadata DB, so a test can point it at a fresh repository.
OpenLineage is on in every component, configured as an operator would (`AIRFLOW__OPENLINEAGE__*`): the
file transport, one JSON event a line in `openlineage.jsonl` beside the DAG folder.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
from cryptography.fernet import Fernet

from airflow_odf.odf.engine_client.connect_server import free_port
from tests.paths import REPO

# every example DAG file (paused until a test enables its DAG, as Airflow creates DAGs)
EXAMPLE_DAGS = tuple(sorted(p.name for p in (REPO / "dags_examples").glob("*.py")))
TEST_DAGS = Path(__file__).resolve().parent / "dags"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
USER = "admin"
FINISHED = ("success", "failed")

# Scheduling settings a production user may choose for short pipelines (docs/deployment.md): the
# scheduler's loop sleeps less when idle, the dag-processor looks for new files often.
SCHEDULING = {
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
}

T = TypeVar("T")


class DeploymentError(AssertionError):
    """The deployment did not do what a test waited for; the message carries the components' logs."""


class AirflowDeployment:
    """`with AirflowDeployment(root, database_url, connect_url) as airflow:` the four components running
    against the (empty) database, DAGs parsed on demand; stopped on exit."""

    def __init__(self, root: Path, database_url: str, connect_url: str, *, preload: bool = True) -> None:
        self.root = root
        self.home = root / "home"
        self.dags = root / "dags"
        self.logs = root / "component-logs"
        for folder in (self.home, self.dags, self.logs):
            folder.mkdir(parents=True)
        if preload:  # imported by every component at start: the tasks they fork start warm
            (self.home / "config").mkdir()
            (self.home / "config" / "airflow_local_settings.py").write_text("import airflow_odf.preload\n")
        for name in EXAMPLE_DAGS:
            (self.dags / name).symlink_to(REPO / "dags_examples" / name)
        for path in TEST_DAGS.glob("*.py"):
            (self.dags / path.name).symlink_to(path)
        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(16)
        self.openlineage = root / "openlineage.jsonl"
        passwords = self.home / "passwords.json"
        passwords.write_text(json.dumps({USER: self.password}), encoding="utf-8")
        host, port = connect_url.removeprefix("sc://").rsplit(":", 1)
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        self.env = {
            **inherited,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
            "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            # one secret for all components: the api-server checks the tokens the scheduler gives tasks
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            **SCHEDULING,
            # the warm engine for every ODF task: a Spark connection of type spark_connect
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                {"conn_type": "spark_connect", "host": f"sc://{host}", "port": int(port)}
            ),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # OpenLineage to a file, as docs/lineage.md configures it; a busy machine: wait for each event
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(self.openlineage), "append": True}
            ),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "odf-deployment-test",
            "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "120",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.client: httpx.Client | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def __enter__(self) -> AirflowDeployment:
        try:
            self._airflow("db", "migrate")
            for component in COMPONENTS:
                self._start(component)
            self._wait_until_healthy()
            self.client = httpx.Client(
                base_url=self.url, headers={"Authorization": f"Bearer {self._token()}"}, timeout=30
            )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.client is not None:
            self.client.close()
        for process in self.processes.values():  # each component with the workers it started
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def _airflow(self, *args: str) -> None:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise DeploymentError(
                f"airflow {' '.join(args)} failed: {done.stdout[-2000:]}{done.stderr[-4000:]}"
            )

    def _start(self, component: str) -> None:
        command = [str(Path(sys.executable).parent / "airflow"), component]
        if component == "api-server":
            command += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        with open(self.logs / f"{component}.log", "wb") as log:
            self.processes[component] = subprocess.Popen(
                command,
                env=self.env,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped with everything it started
            )

    def _wait_until_healthy(self) -> None:
        """Until the health endpoint reports every component's heartbeat."""

        def healthy() -> bool:
            try:
                health = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
            except httpx.HTTPError:
                return False
            return all(part.get("status") == "healthy" for part in health.values())

        self.wait_for(healthy, "all components healthy", timeout=180)

    def _token(self) -> str:
        """A JWT of the simple auth manager, as a client gets one: POST /auth/token."""
        response = httpx.post(
            f"{self.url}/auth/token", json={"username": USER, "password": self.password}, timeout=30
        )
        response.raise_for_status()
        return response.json()["access_token"]

    # -- waiting and diagnostics -----------------------------------------------------------------------

    def wait_for(self, probe: Callable[[], T], what: str, *, timeout: float = 120, every: float = 0.1) -> T:
        """The first truthy result of `probe`; a DeploymentError naming `what` after `timeout` seconds or
        as soon as a component exits."""
        deadline = time.monotonic() + timeout
        while True:
            result = probe()
            if result:
                return result
            dead = [name for name, p in self.processes.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                reason = f"{', '.join(dead)} exited" if dead else f"not within {timeout:g} s"
                raise DeploymentError(f"waiting for {what}: {reason}\n{self.component_logs()}")
            time.sleep(every)

    def component_logs(self, lines: int = 40) -> str:
        """The last lines of each component's log."""
        parts = []
        for path in sorted(self.logs.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def openlineage_events(self, job: str, event_type: str) -> list[dict[str, Any]]:
        """The OpenLineage events of type `event_type` (START, COMPLETE, FAIL) of job `<dag>.<task>`."""
        if not self.openlineage.exists():
            return []
        events = [json.loads(line) for line in self.openlineage.read_text().splitlines() if line.strip()]
        return [e for e in events if e["eventType"] == event_type and e["job"]["name"] == job]

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """The task's log files (every try), as the workers wrote them."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.log")))

    # -- the REST API ----------------------------------------------------------------------------------

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call of `/api/v2/<path>`: its JSON; an HTTP error is a DeploymentError with the body."""
        assert self.client is not None
        response = self.client.request(method, f"/api/v2/{path}", **kwargs)
        if response.is_error:
            raise DeploymentError(f"{method} /api/v2/{path}: HTTP {response.status_code}: {response.text}")
        return response.json() if response.content else None

    def set_repository(self, root: Path) -> None:
        """Points the `odf_repo` connection `odf_default` (in the metadata DB) at `root`."""
        self.set_connection("odf_default", "odf_repo", host=root.as_uri())

    def set_connection(self, conn_id: str, conn_type: str, **fields: Any) -> None:
        """Creates or replaces the connection `conn_id` in the metadata DB (REST API)."""
        body = {"connection_id": conn_id, "conn_type": conn_type, **fields}
        assert self.client is not None
        if self.client.get(f"/api/v2/connections/{conn_id}").status_code == 404:
            self.api("POST", "connections", json=body)
        else:
            self.api("PATCH", f"connections/{conn_id}", json=body)

    def enable(self, *dag_ids: str) -> None:
        """Unpauses each DAG, once the dag-processor has parsed it."""
        for dag_id in dag_ids:
            self._set_paused(dag_id, False)

    def pause(self, dag_id: str) -> None:
        self._set_paused(dag_id, True)

    def pause_and_settle(self, *dag_ids: str) -> None:
        """Pauses each DAG and waits until none of its runs is queued or running (a scheduled DAG
        enabled by a test may have started a run of its own, which must not outlive the test)."""
        for dag_id in dag_ids:
            self.pause(dag_id)

        def settled() -> bool:
            params = {"state": ["queued", "running"], "limit": 100}
            return all(not self.api("GET", f"dags/{d}/dagRuns", params=params)["dag_runs"] for d in dag_ids)

        self.wait_for(settled, f"the runs of {', '.join(dag_ids)} to finish", timeout=600, every=1)

    def _set_paused(self, dag_id: str, paused: bool) -> None:
        self.wait_for(lambda: self._parsed(dag_id), f"DAG {dag_id} parsed", timeout=120, every=0.5)
        self.api("PATCH", f"dags/{dag_id}", json={"is_paused": paused})

    def _parsed(self, dag_id: str) -> bool:
        assert self.client is not None
        return self.client.get(f"/api/v2/dags/{dag_id}").status_code == 200

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Starts a run now (POST dagRuns); its run id."""
        run = self.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")

    def wait_for_runs(self, dag_id: str, run_ids: Iterable[str], timeout: float = 300) -> dict[str, str]:
        """Run id -> final state of each run."""
        run_ids = list(run_ids)

        def finished() -> dict[str, str] | None:
            states = {r: self.run(dag_id, r)["state"] for r in run_ids}
            return states if all(s in FINISHED for s in states.values()) else None

        return self.wait_for(finished, f"runs {run_ids} of {dag_id} to finish", timeout=timeout)

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")

    def task_log_through_the_api(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """A try's log as a user reads it (GET .../logs/{try_number}): each entry's message, with the
        error details of an exception."""
        path = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
        content = self.api("GET", path, params={"full_content": True})["content"]
        lines = []
        for entry in content:
            if not isinstance(entry, dict):
                lines.append(str(entry))
                continue
            lines.append(str(entry.get("event", "")))
            for detail in entry.get("error_detail") or []:
                lines.append(f"{detail.get('exc_type')}: {detail.get('exc_value')}")
        return "\n".join(lines)

    def queued_asset_events(self, dag_id: str) -> list[dict[str, Any]]:
        """The asset events waiting to start a run of an asset-scheduled DAG."""
        return self.api("GET", f"dags/{dag_id}/assets/queuedEvents")["queued_events"]

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        instances = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in instances}

    def failures(self, dag_id: str, run_id: str) -> str:
        """The states of a run's tasks and the end of the log of each that did not succeed."""
        states = self.task_states(dag_id, run_id)
        logs = [
            f"--- {task_id} ({state})\n{self.task_log(dag_id, run_id, task_id)[-4000:]}"
            for task_id, state in states.items()
            if state != "success"
        ]
        return f"{dag_id} {run_id}: {states}\n" + "\n".join(logs)

    def timeline(self, dag_id: str, run_id: str) -> str:
        """When each task was scheduled, queued, started and ended, in seconds after the run was
        created: where a run's time goes (scheduling latency against work)."""
        run = self.run(dag_id, run_id)
        origin = datetime.fromisoformat(run["queued_at"])
        instances = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        lines = [
            f"{dag_id} {run_id}: run {_since(origin, run['start_date'])}..{_since(origin, run['end_date'])}"
        ]
        for ti in sorted(instances, key=lambda ti: ti["start_date"] or ""):
            stamps = ("scheduled_when", "queued_when", "start_date", "end_date")
            lines.append(
                f"  {ti['task_id']}: "
                + " ".join(f"{k.split('_')[0]} {_since(origin, ti[k])}" for k in stamps)
            )
        return "\n".join(lines)

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """The task's return value."""
        path = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.api("GET", path, params={"deserialize": True})["value"]

    def asset_events(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The asset events the run's tasks emitted (with the URIs of their assets and the runs they
        started)."""
        params = {"source_dag_id": dag_id, "source_run_id": run_id, "limit": 100}
        return self.api("GET", "assets/events", params=params)["asset_events"]


def _since(origin: datetime, stamp: str | None) -> str:
    return "-" if stamp is None else f"{(datetime.fromisoformat(stamp) - origin).total_seconds():.2f}"
