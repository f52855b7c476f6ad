"""The hooks with real Airflow connections (given as `AIRFLOW_CONN_<ID>` environment variables, as a
deployment would) and a real `spark-submit`.

`OdfRepoHook`: every way to write the repository URL (JSON or URI-style connections, file / plain path /
s3 / http(s)), refusals with clear messages, secrets redacted by Airflow's own secrets masker, and the
UI's test button. `SparkSubmitEngineRunner`: a missing Spark connection fails without retry and names
it, the command the Spark provider's hook runs carries our job, archive and contract files, and
`on_kill` stops a running job.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.engine_client.fast_start import class_archive_path
from airflow_odf.odf.engine_client.runner import EngineRunError, job_script
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.identity.keys import export_text, private_key_pem
from airflow_odf.odf.repo.repository import Repository
from tests.unit.test_engine_deadline import _alive


def _json_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "odf_repo", **fields}))


def _uri_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, uri: str) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", uri)


# --------------------------------------------------------------------------------------------------
# OdfRepoHook: URLs
# --------------------------------------------------------------------------------------------------


def test_file_url_creates_then_opens_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _json_conn(monkeypatch, "odf_files", host=root.as_uri())
    hook = OdfRepoHook("odf_files")
    assert hook.repository_url() == root.as_uri()
    with pytest.raises(OdfError):
        hook.open_repository()  # not created yet, and not asked to
    created = hook.open_repository(create=True)
    created.add(model.DatasetSnapshot(name="a", kind=model.DatasetKind.ROOT, metadata=[]))
    reopened = hook.get_conn()
    assert isinstance(reopened, Repository) and reopened.root == root
    assert [name for name, _ in reopened.list()] == ["a"]
    assert hook.open_repository(create=True).list() == reopened.list()  # create=True keeps what is there


def test_the_work_dir_extra_places_the_scratch_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the engine works, e.g. a volume a Spark Connect server on another machine sees alike."""
    root, scratch = tmp_path / "repo", tmp_path / "volume" / "odf-work"
    _json_conn(monkeypatch, "odf_files", host=root.as_uri())
    assert OdfRepoHook("odf_files").open_repository(create=True).work_dir == root / "cache"  # the default
    _json_conn(monkeypatch, "odf_files", host=root.as_uri(), extra={"work_dir": str(scratch)})
    assert OdfRepoHook("odf_files").open_repository().work_dir == scratch
    assert OdfRepoHook("odf_files").open_repository(create=True).work_dir == scratch


def test_default_connection_id_is_odf_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _json_conn(monkeypatch, "odf_default", host=str(tmp_path / "r"))
    assert OdfRepoHook().odf_conn_id == "odf_default"
    assert OdfRepoHook().repository_url() == (tmp_path / "r").as_uri()


def test_plain_path_is_a_local_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _json_conn(monkeypatch, "odf_rel", host="data/odf")
    _json_conn(monkeypatch, "odf_abs", host=str(tmp_path / "abs repo"))
    assert OdfRepoHook("odf_rel").repository_url() == (tmp_path / "data" / "odf").as_uri()
    assert OdfRepoHook("odf_abs").repository_url() == (tmp_path / "abs repo").as_uri()
    repo = OdfRepoHook("odf_abs").open_repository(create=True)
    assert repo.root == tmp_path / "abs repo"  # the %20 of the URL is a space again


@pytest.mark.parametrize(
    "uri, url",
    [
        ("s3://my-bucket/odf/prod", "s3://my-bucket/odf/prod"),
        ("s3://my-bucket", "s3://my-bucket"),
        ("https://repo.example.com:8443/odf/public", "https://repo.example.com:8443/odf/public"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ],
)
def test_uri_style_connections(monkeypatch: pytest.MonkeyPatch, uri: str, url: str) -> None:
    """`AIRFLOW_CONN_X='s3://bucket/prefix'`: Airflow splits it into type, host, port and schema."""
    _uri_conn(monkeypatch, "odf_uri", uri)
    assert OdfRepoHook("odf_uri").repository_url() == url


def test_uri_style_file_and_odf_repo_connections(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _uri_conn(monkeypatch, "odf_file_uri", root.as_uri())
    assert OdfRepoHook("odf_file_uri").repository_url() == root.as_uri()
    # the connection type's own URI form, with the path URL-encoded into the host
    _uri_conn(monkeypatch, "odf_typed_uri", "odf-repo://" + str(root).replace("/", "%2F"))
    assert OdfRepoHook("odf_typed_uri").repository_url() == root.as_uri()
    Repository.init(root)
    assert OdfRepoHook("odf_typed_uri").open_repository().root == root


@pytest.mark.parametrize(
    "host, extra",
    [
        ("https://repo.example.com/odf", {"token": "an-http-bearer-token"}),
        ("http://127.0.0.1:8080/odf", {}),
    ],
)
def test_http_urls_parse_but_do_not_open_as_a_writable_repository(
    monkeypatch: pytest.MonkeyPatch, host: str, extra: dict[str, str]
) -> None:
    _json_conn(monkeypatch, "odf_remote", host=host, extra=extra)
    hook = OdfRepoHook("odf_remote")
    assert hook.repository_url() == host
    with pytest.raises(OdfError, match="'odf_remote': an HTTP repository is read-only"):
        hook.open_repository()
    ok, message = hook.test_connection()
    assert ok and host in message
    assert hook.store_credentials().bearer_token == extra.get("token")


@pytest.mark.parametrize(
    "setup, match",
    [
        (lambda mp: _json_conn(mp, "odf_bad", host="ftp://files.example.com/odf"), "scheme 'ftp'"),
        (lambda mp: _uri_conn(mp, "odf_bad", "ftp://files.example.com/odf"), "scheme 'ftp'"),
        (lambda mp: _json_conn(mp, "odf_bad", host="gs://bucket/odf"), "scheme 'gs'"),
        (lambda mp: _json_conn(mp, "odf_bad"), "no repository URL"),
    ],
)
def test_bad_connections_are_refused_clearly(monkeypatch: pytest.MonkeyPatch, setup: Any, match: str) -> None:
    setup(monkeypatch)
    hook = OdfRepoHook("odf_bad")
    with pytest.raises(OdfError, match=match) as raised:
        hook.repository_url()
    assert "'odf_bad'" in str(raised.value)  # the message names the connection
    ok, message = hook.test_connection()
    assert not ok and match in message


def test_test_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "repo"
    _json_conn(monkeypatch, "odf_t", host=root.as_uri())
    ok, message = OdfRepoHook("odf_t").test_connection()
    assert not ok and str(root) in message  # no repository there yet
    repo = Repository.init(root)
    repo.add(model.DatasetSnapshot(name="a", kind=model.DatasetKind.ROOT, metadata=[]))
    assert OdfRepoHook("odf_t").test_connection() == (True, f"ODF repository at {root} with 1 dataset(s)")
    ok, message = OdfRepoHook("odf_not_defined_anywhere").test_connection()
    assert not ok and "odf_not_defined_anywhere" in message


# --------------------------------------------------------------------------------------------------
# OdfRepoHook: secrets
# --------------------------------------------------------------------------------------------------


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def masked_log() -> Iterator[tuple[logging.Logger, _Captured]]:
    """A logger whose handler carries Airflow's secrets masker as a task's log handlers do."""
    from airflow.sdk._shared.secrets_masker import SecretsMasker, _secrets_masker

    was_enabled = SecretsMasker.is_log_masking_enabled()
    SecretsMasker.enable_log_masking()
    handler = _Captured()
    handler.addFilter(_secrets_masker())
    logger = logging.getLogger("tests.odf.masked")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logger, handler
    finally:
        logger.removeHandler(handler)
        if not was_enabled:
            SecretsMasker.disable_log_masking()


def test_secrets_of_the_connection_are_redacted_in_logs(
    monkeypatch: pytest.MonkeyPatch, masked_log: tuple[logging.Logger, _Captured]
) -> None:
    token, aws_secret, password = "tok-5f1c2a9e-http-bearer", "aws-SECRET-8d0e6b", "pw-71c3d4e5f6"
    _json_conn(
        monkeypatch,
        "odf_secret",
        host="s3://bucket/prefix",
        password=password,
        extra={"token": token, "aws_secret_access_key": aws_secret, "aws_access_key_id": "AKIAEXAMPLEKEY"},
    )
    OdfRepoHook("odf_secret").repository_url()
    logger, handler = masked_log
    logger.info("token=%s secret=%s", token, aws_secret)
    logger.info(f"password in an f-string: {password}; bucket s3://bucket/prefix")
    assert handler.lines == [
        "token=*** secret=***",
        "password in an f-string: ***; bucket s3://bucket/prefix",
    ]


@pytest.mark.parametrize(
    "host",
    [
        "https://user:pw-hunter2-secret@repo.example.com/odf",
        "ftp://user:pw-hunter2-secret@repo.example.com/odf",
        "https://repo.example.com/odf?sig=pw-hunter2-secret",
    ],
)
def test_test_connection_never_shows_credentials_of_the_url(
    monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    _json_conn(monkeypatch, "odf_leaky", host=host)
    _ok, message = OdfRepoHook("odf_leaky").test_connection()
    assert "pw-hunter2-secret" not in message and "***" in message
    assert "repo.example.com" in message


def test_every_secret_the_hook_reads_is_masked(
    monkeypatch: pytest.MonkeyPatch, masked_log: tuple[logging.Logger, _Captured]
) -> None:
    session, aws_session = "sess-TOKEN-4b1d9c0e7f", "aws-conn-SESSION-2a7e9b"
    aws_password, url_password = "aws-conn-SECRET-6c2f", "url-PASSWORD-93ab1e"
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_KEYS",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIAEXAMPLE",
                "password": aws_password,
                "extra": {"aws_session_token": aws_session},
            }
        ),
    )
    _json_conn(
        monkeypatch,
        "odf_sessions",
        host="s3://bucket/prefix",
        extra={"aws_conn_id": "aws_keys", "aws_session_token": session},
    )
    _json_conn(monkeypatch, "odf_in_url", host=f"https://user:{url_password}@repo.example.com/odf")
    credentials = OdfRepoHook("odf_sessions").store_credentials()
    assert credentials.aws_session_token == session
    OdfRepoHook("odf_in_url").test_connection()
    logger, handler = masked_log
    logger.info("%s %s %s %s", session, aws_session, aws_password, url_password)
    assert handler.lines == ["*** *** *** ***"]


# --------------------------------------------------------------------------------------------------
# OdfRepoHook: keys
# --------------------------------------------------------------------------------------------------


def _made_here(root: Path) -> tuple[DatasetId, bytes]:
    """A dataset created in a repository at `root`; its key, taken out of the repository's key folder
    (as if it had been moved into a secrets backend)."""
    repo = Repository.init(root)
    did = repo.add(model.DatasetSnapshot(name="owned", kind=model.DatasetKind.ROOT, metadata=[])).dataset_id
    secret = repo.keys.secret(did)
    assert secret is not None
    shutil.rmtree(root / ".odf-keys")
    return did, secret


def test_the_connection_gives_dataset_and_node_keys_and_a_folder_for_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, folder = tmp_path / "repo", tmp_path / "keys"
    did, secret = _made_here(root)
    other_did, other = DatasetId.generate()
    node = DatasetId.generate()[1]
    dataset_keys = {"owned": private_key_pem(secret).decode(), str(other_did): export_text(other)}
    extra = {"dataset_keys": dataset_keys, "node_key": export_text(node), "keys_dir": str(folder)}
    _json_conn(monkeypatch, "odf_keys", host=root.as_uri(), extra=extra)
    repo = OdfRepoHook("odf_keys").get_conn()
    assert repo.keys.secret(did) == secret and repo.keys.secret(other_did) == other
    assert repo.keys.node_secret() == node
    assert "PRIVATE" not in repr(repo.keys)

    created = repo.add(model.DatasetSnapshot(name="new", kind=model.DatasetKind.ROOT, metadata=[])).dataset_id
    (stored,) = folder.iterdir()  # a dataset a task creates keeps its key in the folder `keys_dir` names
    assert stored.name == str(created).removeprefix("did:odf:") + ".key"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert not (root / ".odf-keys").exists()

    _json_conn(
        monkeypatch, "odf_keys_text", host=root.as_uri(), extra={"dataset_keys": json.dumps(dataset_keys)}
    )
    repo = OdfRepoHook("odf_keys_text").get_conn()  # a secrets backend may keep the object as JSON text
    assert repo.keys.secret(did) == secret
    assert repo.keys.folder == root / ".odf-keys"  # without keys_dir: the core's default


def test_every_form_of_a_connection_key_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, masked_log: tuple[logging.Logger, _Captured]
) -> None:
    root = tmp_path / "repo"
    _did, secret = _made_here(root)
    node = DatasetId.generate()[1]
    pem = private_key_pem(secret).decode()
    _json_conn(
        monkeypatch,
        "odf_masked",
        host=root.as_uri(),
        extra={"dataset_keys": {"owned": pem}, "node_key": export_text(node)},
    )
    OdfRepoHook("odf_masked").get_conn()
    logger, handler = masked_log
    body = pem.splitlines()[1]  # an ed25519 PKCS#8 key is this one line
    logger.info("pem %s", pem)
    logger.info("line %s; node %s", body, export_text(node))
    assert handler.lines == ["pem ***", "line ***; node ***"]


def test_a_bad_connection_key_is_one_line_naming_the_connection_never_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, masked_log: tuple[logging.Logger, _Captured]
) -> None:
    root = tmp_path / "repo"
    did, _secret = _made_here(root)
    wrong_did, wrong = DatasetId.generate()

    def refusal(dataset_keys: object) -> str:
        _json_conn(monkeypatch, "odf_bad_keys", host=root.as_uri(), extra={"dataset_keys": dataset_keys})
        with pytest.raises(OdfError) as e:
            OdfRepoHook("odf_bad_keys").get_conn()
        message = str(e.value)
        assert "\n" not in message and export_text(wrong)[1:] not in message
        return message

    assert refusal({"owned": export_text(wrong)}) == (
        f"connection 'odf_bad_keys': key 'owned' is the key of {wrong_did}, not of {did}"
    )
    assert refusal({str(did): export_text(wrong)}) == (
        f"connection 'odf_bad_keys': key '{did}' is the key of {wrong_did}, not of {did}"
    )
    assert refusal({"owned": export_text(wrong) + "!"}) == (
        "connection 'odf_bad_keys': key 'owned': "
        "not an ed25519 private key (PKCS#8 PEM or multibase u…, z…, f…)"
    )
    unparsed = '{"owned": "' + export_text(wrong)
    assert refusal(unparsed) == (
        "connection 'odf_bad_keys': extra dataset_keys: "
        "expected a JSON object of dataset name or DID -> key text"
    )
    logger, handler = masked_log
    logger.info("%s", unparsed)
    assert handler.lines == ["***"]  # masked whole, though it does not parse


# --------------------------------------------------------------------------------------------------
# SparkSubmitEngineRunner
# --------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("airflow_db")
def test_missing_spark_connection_fails_without_retry_and_names_it(tmp_path: Path) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_odf.hooks.spark_engine import SparkSubmitEngineRunner

    conn_id = "spark_nowhere_to_be_found"
    # what the Spark provider alone would do: quietly submit to YARN
    assert SparkSubmitHook(conn_id=conn_id)._connection["master"] == "yarn"
    runner = SparkSubmitEngineRunner(conn_id)
    work = tmp_path / "op"
    work.mkdir()
    with pytest.raises(AirflowFailException, match=f"Spark connection '{conn_id}' is not defined"):
        runner.run('{"version": 1}', work)
    assert list(work.iterdir()) == []  # refused before anything was written or started


def test_fast_start_conf_follows_the_master_and_the_odf_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_odf.hooks.spark_engine import SparkSubmitEngineRunner, with_fast_start

    # a stand-in archive in a cache of its own: the suite's real one (tests/conftest.py) stays untouched
    monkeypatch.setenv("ODF_CACHE_DIR", str(tmp_path / "cache"))
    archive = class_archive_path()
    assert archive is not None
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"made by odf engine warm-up")
    try:
        runner = SparkSubmitEngineRunner(conf={"spark.driver.extraJavaOptions": "-Dmine=1"})
        small = json.dumps({"inputs": []})
        assert with_fast_start(runner.conf, "local[2]", small) == {
            "spark.ui.enabled": "false",
            "spark.driver.extraJavaOptions": (
                f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1 -Dmine=1"
            ),
        }
        assert with_fast_start(runner.conf, "spark://127.0.0.1:7077", small) == runner.conf
        # engine="local": the worker's own session gets the archive (its requests are not known yet)
        assert with_fast_start({}, "local[*]", None) == {
            "spark.driver.extraJavaOptions": f"-XX:SharedArchiveFile={archive}"
        }
        monkeypatch.setenv("AIRFLOW__ODF__ENGINE_FAST_START", "False")
        assert with_fast_start(runner.conf, "local[2]", small) == runner.conf
        assert with_fast_start({}, "local[*]", None) == {}
    finally:
        archive.unlink()


def _descendants(pid: int) -> set[int]:
    """`pid` and every process below it (from /proc)."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            children = task / "children"
            if children.exists():
                todo += [int(c) for c in children.read_text().split()]
    return found


def _runs(pid: int, script: str) -> bool:
    """Whether a process below `pid` runs `script`."""
    for p in _descendants(pid) - {pid}:
        try:
            if script.encode() in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0"):
                return True
        except FileNotFoundError:
            pass
    return False


@pytest.mark.skipif(shutil.which("spark-submit") is None, reason="spark-submit is not on PATH")
def test_command_and_on_kill_of_a_running_spark_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real spark-submit started through the Spark provider's hook, inspected, then killed."""
    from airflow_odf.hooks.spark_engine import SparkSubmitEngineRunner

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ODF_KILL", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("ODF_CACHE_DIR", str(tmp_path / "cache"))  # not the suite's: no class archive in it
    runner = SparkSubmitEngineRunner("spark_odf_kill", conf={"spark.driver.memory": "512m"}, name="odf-kill")
    work = tmp_path / "operations" / "op1"
    work.mkdir(parents=True)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["response"] = runner.run(json.dumps({"version": 1, "kind": "Ingest"}), work)
        except Exception as e:
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while (runner._hook is None or runner._hook._submit_sp is None) and time.monotonic() < deadline:
        time.sleep(0.05)
    hook = runner._hook
    assert hook is not None and hook._submit_sp is not None, "spark-submit was not started"
    process = hook._submit_sp
    # the command the hook runs: master from the connection, our conf, archive, job and contract files
    args = list(process.args)
    assert args == hook._build_spark_submit_command(str(job_script()))
    assert args[0] == "spark-submit" and args[args.index("--master") + 1] == "local[1]"
    assert args[args.index("--name") + 1] == "odf-kill"
    assert "spark.ui.enabled=false" in args and "spark.driver.memory=512m" in args
    # a request with no input on a local master: the client JIT (no class archive made in this cache);
    # Spark's log level, also for the driver JVM's startup (`[odf] spark_log_level`, default WARN)
    log_config = work / "log4j2.properties"
    assert (
        f"spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile={log_config}"
        in args
    )
    assert "spark.log.level=WARN" in args and "rootLogger.level = WARN" in log_config.read_text()
    archive = Path(args[args.index("--py-files") + 1])
    assert archive.parent == tmp_path / "operations" / "py-files" and archive.suffix == ".zip"
    assert archive.is_file()
    assert args[-5:] == [
        str(job_script()),
        "--request",
        str(work / "request.json"),
        "--response",
        str(work / "response.json"),
    ]
    assert json.loads((work / "request.json").read_text()) == {"version": 1, "kind": "Ingest"}
    # wait until the job really runs: the JVM has started the Python driver of our job script
    deadline = time.monotonic() + 90
    while not _runs(process.pid, str(job_script())) and time.monotonic() < deadline:
        assert process.poll() is None, "the job ended on its own before it could be killed"
        time.sleep(0.1)
    tree = _descendants(process.pid)
    assert len(tree) > 1, "the job script's driver did not start"
    started = time.monotonic()
    runner.on_kill()
    thread.join(timeout=60)
    assert not thread.is_alive() and time.monotonic() - started < 30
    assert process.returncode is not None and process.returncode < 0  # ended by a signal
    assert isinstance(outcome.get("error"), EngineRunError), outcome
    assert "failed before it answered" in str(outcome["error"])
    assert not (work / "response.json").exists()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in tree if _alive(p)] == [], "processes of the killed job are still running"
    assert os.getpid() not in tree
