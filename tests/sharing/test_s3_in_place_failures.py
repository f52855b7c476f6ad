"""Failures of the in-place S3 path (issue 26, item 6): the engine writing through `s3a://` into the
operation's staging folder, the commit copying inside the bucket, the head moved by a conditional write.
Each S3 request of the core — and of the engine, whose s3a endpoint is the same proxy — goes through a
fault-injecting proxy in front of moto (`tests/sharing/faulty_s3.py`). Whatever fails, the head is the
old one or the new one, `odf verify` passes, staged leftovers are collected by `odf gc`, and a retry
commits exactly once (records and offsets asserted).

One local SparkSession with the s3a jars for the module, started after the suite's shared one is
stopped, as in `test_s3_in_place.py` (never two at once).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.dataset import STAGING_PREFIX, Dataset
from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.operation import IngestResult
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.storage.url import StoreCredentials, open_store
from tests.sharing.conftest import ACCESS_KEY, REGION, SECRET_KEY
from tests.sharing.faulty_s3 import DROP, DROP_AFTER, Fault, FaultyS3, faulty_s3
from tests.sharing.test_s3_in_place import (
    ORDERS,
    T0,
    _ledger_snapshot,
    _orders_csv,
    _slices,
    s3a_session_runner,
)

pyspark = pytest.importorskip("pyspark")

ROWS = 2_000
STAGED_OUTPUT = r"/datasets/[^/]+/cache/operations/[^/]+/out/"
HEAD = r"/datasets/[^/]+/refs/head$"


@pytest.fixture(scope="module")
def proxy(moto_endpoint: str) -> Iterator[FaultyS3]:
    with faulty_s3(moto_endpoint) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_faults_left(proxy: FaultyS3) -> Iterator[None]:
    proxy.clear()
    yield
    proxy.clear()


@pytest.fixture(scope="module")
def runner(proxy: FaultyS3) -> Iterator[LocalSparkRunner]:
    """The in-process engine on a session whose s3a talks to the bucket through the proxy; s3a's own
    retries kept few, so an injected failure that outlasts them fails the task."""
    yield from s3a_session_runner(
        proxy.url,
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.hadoop.fs.s3a.retry.limit": "1",
            "spark.hadoop.fs.s3a.attempts.maximum": "1",
        },
    )


@pytest.fixture
def repo(proxy: FaultyS3, s3_bucket: str) -> Repository:
    """A repository whose core reaches the bucket through the proxy (with botocore's few retries)."""
    credentials = StoreCredentials(
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region=REGION,
        endpoint_url=proxy.url,
        engine_scheme="s3a",
    )
    url = f"s3://{s3_bucket}/odf"
    return Repository.in_store(open_store(url, credentials=credentials), url, create=True)


@pytest.fixture
def repo_url(moto_endpoint: str, s3_bucket: str) -> str:
    """The same repository for the `odf` command, straight to moto."""
    return f"s3+{moto_endpoint}/{s3_bucket}/odf"


@pytest.fixture
def orders(repo: Repository) -> Dataset:
    repo.add(_ledger_snapshot(), system_time=T0)
    return repo.dataset(ORDERS)


def _push(dataset: Dataset, runner: LocalSparkRunner, path: Path, work: Path) -> IngestResult:
    return push_ingest(
        dataset,
        ORDERS,
        runner,
        [path],
        IngestOptions(work_dir=work),
        system_time=Timestamp.parse("2024-03-01T12:00:00Z"),
    )


def _keys(dataset: Dataset, prefix: str) -> list[str]:
    return sorted(key for key, _ in dataset.store.list_tree(prefix))


def _one_message(error: BaseException, *, lines: int = 1) -> str:
    """The error as the `odf` command shows it: an OdfError of at most `lines` lines (an engine's error
    keeps the first lines of Spark's exception chain), no traceback, no stack frames."""
    assert isinstance(error, OdfError), f"{type(error).__name__}: {error}"
    message = str(error)
    assert message and len(message.splitlines()) <= lines and "Traceback" not in message, message
    assert not [line for line in message.splitlines() if line.strip().startswith("at ")], message
    return message


def _committed_once(dataset: Dataset, rows: int) -> None:
    """One slice of `rows` records at offsets 0..rows-1, and a chain `odf verify` accepts."""
    assert [(start, end, records) for _, start, end, records in _slices(dataset)] == [(0, rows - 1, rows)]
    assert verify_integrity(dataset) == []
    assert _keys(dataset, STAGING_PREFIX) == []


def test_an_s3_error_while_the_engine_stages_fails_the_operation_cleanly(
    runner: LocalSparkRunner, proxy: FaultyS3, orders: Dataset, repo_url: str, tmp_path: Path
) -> None:
    """The bucket refuses the engine's writes to the staging folder: one message, the old head, nothing
    in data/ or checkpoints/, the inputs it staged collected by `odf gc --min-age 0`, and a retry
    commits the records once."""
    head = orders.head()
    refused = proxy.fail(Fault("PUT", STAGED_OUTPUT, action="AccessDenied", times=10_000))
    source = _orders_csv(tmp_path / "d.csv", 0, ROWS)
    with pytest.raises(OdfError) as failed:
        _push(orders, runner, source, tmp_path / "work")
    message = _one_message(failed.value, lines=6)
    assert message.startswith(f"{ORDERS}: ") and "/cache/operations/" in message
    # Spark's S3 client says AccessDenied or 403, Arrow's (the one-pass ingest's upload) ACCESS_DENIED
    assert refused.hits and any(code in message for code in ("AccessDenied", "403", "ACCESS_DENIED")), message
    assert orders.head() == head
    assert _keys(orders, "data") == [] and _keys(orders, "checkpoints") == []
    assert [key for key in _keys(orders, STAGING_PREFIX) if "/inputs/" in key]  # left for gc
    assert main(["gc", "--repo", repo_url, "--min-age", "0"]) == 0
    assert _keys(orders, STAGING_PREFIX) == []
    assert main(["verify", ORDERS, "--repo", repo_url]) == 0

    proxy.clear()
    assert _push(orders, runner, source, tmp_path / "work").records == ROWS
    _committed_once(orders, ROWS)


@pytest.mark.parametrize("target", ["data", "checkpoints"])
def test_an_s3_error_on_the_commits_copy_leaves_the_head(
    runner: LocalSparkRunner, proxy: FaultyS3, orders: Dataset, repo_url: str, tmp_path: Path, target: str
) -> None:
    """CopyObject into `checkpoints/` (nothing copied yet) or into `data/` (the merge checkpoint already
    copied) fails past botocore's retries: the message names the object, the head is the old one, and
    the retry commits once. `odf gc` removes the staged objects and the checkpoint copied but never
    referenced by a block (its age is past `--min-age`)."""
    head = orders.head()
    copy = proxy.fail(Fault("PUT", rf"/datasets/[^/]+/{target}/", times=10_000, header="x-amz-copy-source"))
    source = _orders_csv(tmp_path / "d.csv", 0, ROWS)
    with pytest.raises(OdfError) as failed:
        _push(orders, runner, source, tmp_path / "work")
    message = _one_message(failed.value)
    assert copy.hits and f"COPY {orders.store.url}/{target}/" in message and "InternalError" in message
    assert orders.head() == head
    assert _keys(orders, "data") == []
    copied = _keys(orders, "checkpoints")  # the merge checkpoint is copied before the slice
    assert len(copied) == (1 if target == "data" else 0)
    assert main(["gc", "--repo", repo_url, "--min-age", "0"]) == 0
    assert _keys(orders, STAGING_PREFIX) == [] and _keys(orders, "checkpoints") == []
    assert main(["verify", ORDERS, "--repo", repo_url]) == 0

    proxy.clear()
    assert _push(orders, runner, source, tmp_path / "work").records == ROWS
    _committed_once(orders, ROWS)
    assert len(_keys(orders, "data")) == 1 and len(_keys(orders, "checkpoints")) == 1


@pytest.mark.parametrize(
    ("action", "times", "moved"),
    [
        ("InternalError", 10_000, False),  # refused every time: the old head, an error
        (DROP, 10_000, False),  # never reached the server: the old head, an error
        (DROP_AFTER, 1, True),  # applied, the answer lost, the retry refused (412): done
        (DROP_AFTER, 10_000, True),  # applied, every answer lost: the head read back, done
    ],
)
def test_a_failed_conditional_write_of_the_head_leaves_old_or_new(
    runner: LocalSparkRunner,
    proxy: FaultyS3,
    orders: Dataset,
    repo_url: str,
    tmp_path: Path,
    action: str,
    times: int,
    moved: bool,
) -> None:
    """The PUT of `refs/head` with If-Match fails or loses its answer: the head is exactly the old or
    the new block, the ingest reports an error exactly when the head did not move, `odf verify` passes,
    and a retry finds the records (none added) or commits them once."""
    head = orders.head()
    fault = proxy.fail(Fault("PUT", HEAD, action=action, times=times, header="If-Match"))
    source = _orders_csv(tmp_path / "d.csv", 0, ROWS)
    try:
        first = _push(orders, runner, source, tmp_path / "work")
    except OdfError as error:
        assert not moved, error
        assert f"PUT {orders.store.url}/refs/head failed" in _one_message(error)
    else:
        assert moved and first.records == ROWS
    assert len(fault.hits) >= (1 if action == DROP_AFTER and times == 1 else 2)  # botocore retried
    proxy.clear()
    new_head = orders.head()
    assert new_head is not None and (new_head != head) is moved
    assert head in [h for h, _ in orders.iter_blocks(new_head)]  # the new blocks on top of the old head
    assert main(["verify", ORDERS, "--repo", repo_url]) == 0
    assert main(["gc", "--repo", repo_url, "--min-age", "0"]) == 0

    retried = _push(orders, runner, source, tmp_path / "work")
    assert retried.records == (0 if moved else ROWS)  # the Ledger's checkpoint knows the orders
    assert [(start, end, records) for _, start, end, records in _slices(orders)] == [(0, ROWS - 1, ROWS)]
    assert verify_integrity(orders) == []
    assert main(["verify", ORDERS, "--repo", repo_url]) == 0


@pytest.mark.parametrize("action", [DROP_AFTER])
def test_a_lost_answer_to_the_first_head_write_still_creates_the_dataset(
    proxy: FaultyS3, repo: Repository, action: str
) -> None:
    """`If-None-Match: *` (the dataset's first head) applied but its answer lost: the retry's 412 is the
    store's own write, so `odf add` succeeds once."""
    fault = proxy.fail(Fault("PUT", HEAD, action=action, header="If-None-Match"))
    repo.add(_ledger_snapshot(), system_time=T0)
    assert fault.hits, proxy.requests
    dataset = repo.dataset(ORDERS)
    assert [block.sequence_number for _, block in dataset.iter_blocks()][-1] == 0
    assert verify_integrity(dataset) == []
