"""The signature policy of a pull in Airflow: the task's `signatures`, else `[odf] signatures`, else
`check`; a refused head fails the task without retries and leaves the repository as it was. (A pull
that requires signatures, end to end with S3: tests/sharing/test_sharing_dag.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.sharing import OdfPullOperator, pull_signature_policy
from tests.unit.test_dataset import rich_dataset
from tests.unit.test_signed_heads import NAME, files_under, folder, signed_repo


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__ODF__SIGNATURES", raising=False)


def test_task_argument_then_odf_option_then_check(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pull_signature_policy(None) == "check"
    monkeypatch.setenv("AIRFLOW__ODF__SIGNATURES", " Require ")
    assert pull_signature_policy(None) == "require"
    assert pull_signature_policy("ignore") == "ignore"
    monkeypatch.setenv("AIRFLOW__ODF__SIGNATURES", "sometimes")
    with pytest.raises(
        OdfError, match=r"^\[odf\] signatures='sometimes': expected one of require, check, ignore$"
    ):
        pull_signature_policy(None)
    with pytest.raises(ValueError, match="signatures='always': expected one of require, check, ignore"):
        OdfPullOperator(task_id="pull", dataset=NAME, remote_url="file:///nowhere", signatures="always")


def _replica(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repository:
    replica = Repository.init(tmp_path / "replica")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ODF_DEFAULT", json.dumps({"conn_type": "odf_repo", "host": replica.root.as_uri()})
    )
    return replica


def test_an_unsigned_head_fails_the_task_under_require_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "unsigned"
    rich_dataset(source, tmp_path / "stage")
    replica = _replica(tmp_path, monkeypatch)
    before = files_under(replica.root)
    monkeypatch.setenv("AIRFLOW__ODF__SIGNATURES", "require")
    task = OdfPullOperator(task_id="pull", dataset=NAME, remote_url=source.as_uri())
    with pytest.raises(AirflowFailException, match=r"carries no attestation \(signatures are required\)"):
        task.execute({})
    assert files_under(replica.root) == before
    # the task's argument wins over [odf]
    check = OdfPullOperator(task_id="pull", dataset=NAME, remote_url=source.as_uri(), signatures="check")
    monkeypatch.setattr(check, "report", lambda context, result: result)  # no asset event outside a run
    assert check.execute({})["signature"] == {"status": "missing", "signer": None}
    assert replica.dataset(NAME).head() is not None


def test_the_xcom_names_the_signer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    origin, did = signed_repo(tmp_path / "a", tmp_path)
    replica = _replica(tmp_path, monkeypatch)
    task = OdfPullOperator(
        task_id="pull", dataset=NAME, remote_url=folder(origin, did).as_uri(), signatures="require"
    )
    monkeypatch.setattr(task, "report", lambda context, result: result)  # no asset event outside a run
    result = task.execute({})
    assert result["signature"] == {"status": "signed", "signer": str(did)}
    assert result["new_head"] == str(replica.dataset(NAME).head())
