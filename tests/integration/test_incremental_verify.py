"""Incremental verification of a derivative on the in-process local engine: `OdfVerifyOperator` and
`odf verify` replay only the ExecuteTransforms after the last verified head, check only the new objects,
fall back to everything after a reset, and keep their record out of what is pushed and pulled.

Engine requests are counted by a runner that wraps the real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.chain.verification import RECORD_KEY, read_record
from airflow_odf.odf.format import model
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.ingest.options import IngestOptions
from airflow_odf.odf.ingest.push import push_ingest
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import pull_dataset, push_dataset
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.operators.verify import OdfVerifyOperator
from tests.engine.conftest import runner, spark  # noqa: F401

T0 = Timestamp.parse("2024-01-01T00:00:00Z")
ROOT, DERIVATIVE = "trades", "acme"


class CountingRunner:
    """The real engine, counting the requests it is given."""

    def __init__(self, inner: LocalSparkRunner) -> None:
        self.inner = inner
        self.requests = 0

    def run(self, request_json: str, work_dir: Path) -> str:
        self.requests += 1
        return self.inner.run(request_json, work_dir)


@pytest.fixture
def counting(runner: LocalSparkRunner) -> CountingRunner:  # noqa: F811
    return CountingRunner(runner)


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    repo = Repository.init(tmp_path / "repo")
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "symbol STRING", "price DOUBLE"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name=ROOT, kind=model.DatasetKind.ROOT, metadata=[source]), system_time=T0)
    sql = model.TransformSql(
        engine="spark", query=f"SELECT event_time, symbol, price * 10 AS p10 FROM {ROOT}"
    )
    transform = model.SetTransform(inputs=[model.TransformInput(dataset_ref=ROOT)], transform=sql)
    repo.add(
        model.DatasetSnapshot(name=DERIVATIVE, kind=model.DatasetKind.DERIVATIVE, metadata=[transform]),
        system_time=T0,
    )
    return repo


def transform_run(repo: Repository, engine: Any, tmp_path: Path) -> None:
    """One more row into the root, then one more ExecuteTransform of the derivative."""
    n = len(list(repo.dataset(ROOT).iter_blocks()))
    path = tmp_path / f"in-{n}.csv"
    path.write_text(f"event_time,symbol,price\n2024-01-02T{n % 24:02d}:00:00Z,ACME,{n}\n")
    work = tmp_path / "work"
    push_ingest(repo.dataset(ROOT), ROOT, engine, [path], IngestOptions(work_dir=work))
    assert len(run_transform(repo, DERIVATIVE, engine, TransformOptions(work_dir=work)).new_blocks) >= 1


def operator_verify(repo: Repository, engine: CountingRunner, **kwargs: Any) -> dict[str, Any]:
    """`OdfVerifyOperator.execute` against this repository and runner (its connections stubbed)."""
    op = OdfVerifyOperator(task_id="verify", dataset=DERIVATIVE, engine="local", **kwargs)
    op.repository = lambda: repo  # type: ignore[method-assign]
    op.runner = lambda: engine  # type: ignore[method-assign]
    return op.execute({})  # type: ignore[arg-type]


def slice_of(repo: Repository, h: Any) -> Path:
    dataset = repo.dataset(DERIVATIVE)
    event = dataset.block(h).event
    assert isinstance(event, model.ExecuteTransform) and event.new_data is not None
    return dataset.store.local_path(f"data/{event.new_data.physical_hash}")  # type: ignore[return-value]


def tamper(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def tampered(path: Path) -> str:
    """The problem reported for a data file whose content changed."""
    return f"data data/{path.name}: content hashes to .*\\(tampered\\)"


def test_operator_replays_only_new_transforms(
    repo: Repository, counting: CountingRunner, tmp_path: Path
) -> None:
    for _ in range(3):
        transform_run(repo, counting, tmp_path)
    counting.requests = 0
    first = operator_verify(repo, counting)
    assert first["ok"] and first["full"] and first["transforms_replayed"] == 3 and counting.requests == 3
    assert first["reason"] == "no earlier verification recorded"
    verified = first["head"]
    transform_run(repo, counting, tmp_path)
    counting.requests = 0
    second = operator_verify(repo, counting)
    assert second["ok"] and not second["full"] and second["since"] == verified
    assert second["transforms_replayed"] == 1 and counting.requests == 1  # only the new one
    assert second["blocks_checked"] == 1 and second["objects_checked"] == 2  # its slice and checkpoint
    assert second["record"] == f"{RECORD_KEY} at {second['head']}"
    record = read_record(repo.dataset(DERIVATIVE))
    assert record.replay is not None and str(record.replay.head) == second["head"]
    assert record.replay.engine == "local" and not record.replay.full
    counting.requests = 0
    assert operator_verify(repo, counting)["transforms_replayed"] == 0 and counting.requests == 0
    # an integrity-only run moves the integrity entry only: the next replay starts after the last replay
    transform_run(repo, counting, tmp_path)
    counting.requests = 0
    integrity = operator_verify(repo, counting, integrity_only=True)
    assert integrity["reproducibility"] == "not checked" and counting.requests == 0
    assert operator_verify(repo, counting)["since"] == second["head"] and counting.requests == 1
    # full=True replays everything
    counting.requests = 0
    everything = operator_verify(repo, counting, full=True)
    assert everything["full"] and everything["transforms_replayed"] == 5 and counting.requests == 5


def test_tampered_new_and_old_slices(repo: Repository, counting: CountingRunner, tmp_path: Path) -> None:
    transform_run(repo, counting, tmp_path)
    assert operator_verify(repo, counting)["ok"]
    dataset = repo.dataset(DERIVATIVE)
    old = slice_of(repo, dataset.existing_head())
    record = dataset.store.get(RECORD_KEY)
    transform_run(repo, counting, tmp_path)
    new = slice_of(repo, dataset.existing_head())
    original = new.read_bytes()
    tamper(new)
    counting.requests = 0
    with pytest.raises(AirflowFailException, match=tampered(new)):
        operator_verify(repo, counting)
    assert counting.requests == 0  # integrity first: nothing replayed
    assert dataset.store.get(RECORD_KEY) == record  # a failed verification records nothing
    new.write_bytes(original)
    tamper(old)  # verified before: only a full run looks at it again
    assert operator_verify(repo, counting)["ok"]
    with pytest.raises(AirflowFailException, match=tampered(old)):
        operator_verify(repo, counting, full=True)


def test_cli_reset_below_the_record_and_push_pull(
    repo: Repository,
    counting: CountingRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("airflow_odf.cli.main.LazyRunner", lambda args: counting)
    for _ in range(3):
        transform_run(repo, counting, tmp_path)

    def verify(*extra: str) -> dict[str, Any]:
        counting.requests = 0
        capsys.readouterr()
        code = main(["verify", DERIVATIVE, "--repo", str(repo.root), "--format", "json", *extra])
        report = json.loads(capsys.readouterr().out)
        assert code == 0 and report["ok"], report
        assert report["transforms_replayed"] == counting.requests
        return report

    assert verify()["transforms_replayed"] == 3
    transform_run(repo, counting, tmp_path)
    assert verify()["transforms_replayed"] == 1
    capsys.readouterr()
    assert main(["verify", DERIVATIVE, "--repo", str(repo.root)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{DERIVATIVE}: ok (") and "0 new blocks after the verified head" in text
    # a reset below the verified head: the record no longer holds, the next run replays everything left
    blocks = [h for h, _ in repo.dataset(DERIVATIVE).iter_blocks()]
    assert main(["reset", DERIVATIVE, str(blocks[2]), "--repo", str(repo.root)]) == 0
    after_reset = verify()
    assert after_reset["full"] and "no longer in the chain" in after_reset["reason"]
    assert after_reset["transforms_replayed"] == 2  # the two ExecuteTransforms left below the reset
    assert verify("--full")["transforms_replayed"] == 2
    # push and pull never carry the record
    remote = tmp_path / "remote" / DERIVATIVE
    push_dataset(repo, DERIVATIVE, f"file://{remote}", remember=False)
    assert (remote / "refs" / "head").is_file() and not (remote / RECORD_KEY).exists()
    other = Repository.init(tmp_path / "other")
    pull_dataset(other, f"file://{remote}", name=DERIVATIVE, remember=False)
    pulled = other.dataset(DERIVATIVE)
    assert pulled.head() == repo.dataset(DERIVATIVE).head()
    assert pulled.store.get_or_none(RECORD_KEY) is None
