"""Sharing datasets as Airflow tasks: `OdfPushOperator` and `OdfPullOperator`.

Both ends are `odf_repo` connections: the local repository (`odf_conn_id`) and the remote one
(`remote_conn_id`, e.g. `s3://bucket/odf` with its credentials, or `http://host:port` of `odf serve`),
where a dataset lives at `<remote URL>/<remote_name>`. Everything received is verified on arrival
(docs/sharing.md). The XCom dict is the other operators' — `{dataset, dataset_id, prev_head, new_head,
new_blocks, records, up_to_date}`, about the receiving side — plus `remote_url`, `remote_head`,
`objects_transferred`, `bytes_transferred` and `signature` (the transferred head's attestation:
`{status: signed|missing|bad, signer}`, None when nothing moved). A pull that brought new blocks emits
the local dataset's asset event; a push changes nothing locally and emits none. A pull judges the head's
attestation by its `signatures` policy, else `[odf] signatures`, else `check` (docs/signatures.md).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context
from airflow.sdk.configuration import conf

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.format import model
from airflow_odf.odf.identity.attestation import (
    DEFAULT_SIGNATURE_POLICY,
    SIGNATURE_POLICIES,
    SignaturePolicy,
    signature_policy,
)
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.sharing.push_pull import SharingResult, pull_dataset, push_dataset
from airflow_odf.operators.base import OdfBaseOperator


def _records(repo: Repository, shared: SharingResult) -> int:
    """Records in the blocks that moved (the same count ingest and transform report)."""
    dataset = repo.dataset_by_id(shared.dataset_id)
    total = 0
    for h in shared.result.new_blocks:
        event = dataset.block(h).event
        if isinstance(event, model.AddData | model.ExecuteTransform) and event.new_data is not None:
            interval = event.new_data.offset_interval
            total += interval.end - interval.start + 1
    return total


class _SharingOperator(OdfBaseOperator):
    """`dataset` in the repository of `odf_conn_id`, and its counterpart in `remote_conn_id`."""

    template_fields: tuple[str, ...] = ("dataset", "remote_name", "remote_url")
    ui_color = "#e3f2d5"

    def __init__(
        self,
        *,
        remote_conn_id: str | None = None,
        remote_name: str | None = None,
        remote_url: str | None = None,
        force: bool = False,
        max_parallel_transfers: int = 8,
        **kwargs: Any,
    ) -> None:
        if (remote_conn_id is None) == (remote_url is None):
            raise ValueError("give remote_conn_id (an odf_repo connection) or remote_url, exactly one")
        if max_parallel_transfers < 1:
            raise ValueError(f"max_parallel_transfers={max_parallel_transfers}: expected 1 or more")
        super().__init__(**kwargs)
        self.remote_conn_id = remote_conn_id
        self.remote_name = remote_name
        self.remote_url = remote_url
        self.force = force
        self.max_parallel_transfers = max_parallel_transfers

    def remote(self) -> tuple[str, Any]:
        """The remote dataset's URL and the credentials to reach it."""
        if self.remote_conn_id is None:
            assert self.remote_url is not None
            return self.remote_url, None
        hook = OdfRepoHook(self.remote_conn_id)
        url = self.call(lambda: hook.dataset_url(self.remote_name or self.dataset))
        return url, self.call(hook.store_credentials)

    def result(self, repo: Repository, shared: SharingResult) -> dict[str, Any]:
        """`prev_head` / `new_head` / `new_blocks` describe the side that received (local on pull, the
        remote on push); both sides then share the head, which `remote_head` also carries."""
        r = shared.result
        return {
            "dataset": self.dataset,
            "dataset_id": str(shared.dataset_id),
            "prev_head": None if r.old_head is None else str(r.old_head),
            "new_head": None if r.new_head is None else str(r.new_head),
            "new_blocks": [str(h) for h in r.new_blocks],
            "records": _records(repo, shared),
            "up_to_date": r.up_to_date,
            "remote_url": shared.remote_url,
            "remote_head": None if r.new_head is None else str(r.new_head),
            "objects_transferred": r.objects_transferred,
            "bytes_transferred": r.bytes_transferred,
            "signature": None if r.signature is None else r.signature.as_dict(),
        }


class OdfPushOperator(_SharingOperator):
    """Copies `dataset` to the remote repository (missing objects, blocks verbatim, head by CAS).

    A remote that diverged or is ahead fails the task unless `force`; a concurrent pusher makes it
    retryable. Nothing local changes, so there is no asset event (`outlets` are empty by default).
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [])
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        url, credentials = self.remote()
        shared = self.call(
            lambda: push_dataset(
                repo,
                self.dataset,
                url,
                credentials=credentials,
                force=self.force,
                max_parallel=self.max_parallel_transfers,
                log=self.log.info,
            )
        )
        return self.report(context, self.result(repo, shared))


def pull_signature_policy(value: str | None) -> SignaturePolicy:
    """A pull's signature policy: the task's `signatures`, else `[odf] signatures`, else `check`."""
    if value is not None:
        return signature_policy(value, "signatures")
    configured = conf.get("odf", "signatures", fallback=None) or DEFAULT_SIGNATURE_POLICY
    return signature_policy(configured, "[odf] signatures")


class OdfPullOperator(_SharingOperator):
    """Copies the remote dataset into the local repository as `dataset` (created on first pull), every
    block and object verified on arrival. Emits the dataset's asset event when new blocks arrived.

    `signatures`: `check` refuses a head whose attestation is bad, `require` also one without any,
    `ignore` neither (None: `[odf] signatures`, else `check`); a refused pull fails without retries and
    changes nothing."""

    def __init__(
        self, *, create_repository: bool = False, signatures: str | None = None, **kwargs: Any
    ) -> None:
        if signatures is not None and signatures not in SIGNATURE_POLICIES:
            raise ValueError(f"signatures={signatures!r}: expected one of {', '.join(SIGNATURE_POLICIES)}")
        super().__init__(**kwargs)
        self.create_repository = create_repository
        self.signatures = signatures

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.call(lambda: OdfRepoHook(self.odf_conn_id).open_repository(create=self.create_repository))
        url, credentials = self.remote()
        policy = self.call(lambda: pull_signature_policy(self.signatures))
        shared = self.call(
            lambda: pull_dataset(
                repo,
                url,
                name=self.dataset,
                credentials=credentials,
                force=self.force,
                max_parallel=self.max_parallel_transfers,
                log=self.log.info,
                signatures=policy,
            )
        )
        return self.report(context, self.result(repo, shared))
