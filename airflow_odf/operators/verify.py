"""`OdfVerifyOperator`: integrity and, for derivatives, reproducibility; fails the task on any mismatch.

The same checks as `odf verify`: block hashes, chain rules, sizes and hashes of data files and
checkpoints, then ExecuteTransforms replayed on the engine and compared with their blocks
(docs/transform.md). By default only what came after the head the last successful verification
recorded (`airflow_odf/odf/chain/verification.py`), so a run costs the same however long the history;
`full=True` checks everything. A failure will not go away by retrying: it fails without retries.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.verification import Blocks, verify_dataset
from airflow_odf.odf.transform.verify import ReproducibilityProblem, verify_reproducibility
from airflow_odf.operators.base import OdfBaseOperator


class OdfVerifyOperator(OdfBaseOperator):
    """Verifies a dataset; `integrity_only` skips the replay of transforms, `full` ignores the record of
    the last verification and checks the whole chain.

    Returns `{dataset, dataset_id, head, ok, problems, reproducibility, full, since, reason,
    blocks_checked, objects_checked, transforms_replayed, record}`.
    """

    def __init__(self, *, integrity_only: bool = False, full: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [])
        super().__init__(**kwargs)
        self.integrity_only = integrity_only
        self.full = full

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        dataset = self.call(lambda: repo.dataset(self.dataset))

        def replay(since: ChainState, blocks: Blocks) -> list[ReproducibilityProblem]:
            return verify_reproducibility(
                repo,
                self.dataset,
                self.runner(),
                self.work_dir(repo),
                log=self.log.info,
                since=since,
                blocks=blocks,
            )

        result = self.call(
            lambda: verify_dataset(
                dataset,
                full=self.full,
                replay=None if self.integrity_only else replay,
                engine=self.engine_in_use(),  # a spark_connect connection replays on its server
            )
        )
        problems = [str(p) for p in [*result.problems, *result.not_reproducible]]
        report = {
            "dataset": self.dataset,
            "dataset_id": str(result.state.dataset_id) if result.state else None,
            "ok": result.ok,
            "problems": problems,
            **result.fields(),
        }
        if problems:
            for line in problems:
                self.log.error("%s: %s", self.dataset, line)
            raise AirflowFailException(f"{self.dataset}: verification failed: {'; '.join(problems)}")
        self.log.info("%s: verified %s", self.dataset, result.describe())
        return report
