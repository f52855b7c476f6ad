"""`OdfVerifyOperator`: integrity and, for derivatives, reproducibility; fails the task on any mismatch.

The same checks as `odf verify`: block hashes, chain rules, sizes and hashes of every data file and
checkpoint, then every ExecuteTransform replayed on the engine and compared with its block
(docs/transform.md). A failure will not go away by retrying: it fails without retries.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.chain.integrity import verify_integrity
from airflow_odf.odf.format import model
from airflow_odf.odf.transform.verify import verify_reproducibility
from airflow_odf.operators.base import OdfBaseOperator


class OdfVerifyOperator(OdfBaseOperator):
    """Verifies a dataset; `integrity_only` skips the replay of transforms.

    Returns `{dataset, dataset_id, head, ok, problems, reproducibility}`.
    """

    def __init__(self, *, integrity_only: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [])
        super().__init__(**kwargs)
        self.integrity_only = integrity_only

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        dataset = self.call(lambda: repo.dataset(self.dataset))
        problems = [str(p) for p in self.call(lambda: verify_integrity(dataset))]
        state = dataset.state()
        replay = not problems and not self.integrity_only and state.kind is model.DatasetKind.DERIVATIVE
        if replay:
            replayed = self.call(
                lambda: verify_reproducibility(
                    repo, self.dataset, self.runner(), self.work_dir(repo), log=self.log.info
                )
            )
            problems += [str(p) for p in replayed]
        report = {
            "dataset": self.dataset,
            "dataset_id": str(state.dataset_id),
            "head": None if state.head is None else str(state.head),
            "ok": not problems,
            "problems": problems,
            "reproducibility": "checked" if replay else "not checked",
        }
        if problems:
            for line in problems:
                self.log.error("%s: %s", self.dataset, line)
            raise AirflowFailException(f"{self.dataset}: verification failed: {'; '.join(problems)}")
        self.log.info(
            "%s: verified (%s blocks, reproducibility %s)",
            self.dataset,
            state.num_blocks,
            report["reproducibility"],
        )
        return report
