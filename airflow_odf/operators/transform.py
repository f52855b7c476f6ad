"""`OdfTransformOperator`: brings a derivative dataset up to date, pinned to what its upstream produced.

The heads of its inputs come from the XCom of the upstream ODF tasks (any upstream task whose result
names an input's dataset id), or from the templated `input_heads` mapping (alias, name or DID -> block
hash), which wins. So the transform processes exactly the blocks its upstream tasks committed, even
when the inputs moved on since. A retry after a landed commit finds the inputs already consumed up to
those heads and adds nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.schema.policy import SCHEMA_POLICIES
from airflow_odf.odf.transform.execute import TransformOptions, run_transform
from airflow_odf.operators.base import OdfBaseOperator, default_schema_policy
from airflow_odf.operators.checks import check_suite, declared_checks

if TYPE_CHECKING:
    from airflow_odf.lineage import LineageDataset


class OdfTransformOperator(OdfBaseOperator):
    """Runs the derivative's SQL (SetTransform) on Spark over its inputs' new blocks and commits the result.

    :param dataset: the derivative dataset's name.
    :param input_heads: input (alias, name or DID) -> block hash to stop at (templated: a template must
        render to a mapping, with the DAG's `render_template_as_native_obj=True`); inputs not
        listed take the head their upstream task reported through XCom, else their current head.
    :param max_input_records: split a backlog into ExecuteTransform blocks of at most this many records.
    :param recover_diverged: re-process everything when an input was reset or compacted.
    :param schema_policy: `strict` or `additive` (see docs/ingest.md).
    :param checks: quality checks judged on each batch's output before it is committed (a mapping in
        the checks file's form, or the path of a checks file; docs/checks.md).
    :param quarantine: keep an output that failed its checks in the scratch space.
    """

    template_fields = ("dataset", "input_heads")

    def __init__(
        self,
        *,
        input_heads: dict[str, str] | str | None = None,
        max_input_records: int | None = None,
        recover_diverged: bool = False,
        schema_policy: str | None = None,
        checks: Any = None,
        quarantine: bool = False,
        **kwargs: Any,
    ) -> None:
        schema_policy = schema_policy or default_schema_policy()
        if schema_policy not in SCHEMA_POLICIES:
            raise ValueError(f"schema_policy={schema_policy!r}: expected one of {', '.join(SCHEMA_POLICIES)}")
        if max_input_records is not None and max_input_records < 1:
            raise ValueError(f"max_input_records={max_input_records}: must be at least 1")
        super().__init__(**kwargs)
        self.input_heads = input_heads or {}
        self.max_input_records = max_input_records
        self.recover_diverged = recover_diverged
        self.schema_policy = schema_policy
        self.checks = declared_checks(checks)
        self.quarantine = quarantine

    def upstream_heads(self, context: Context, repo: Repository) -> dict[str, str]:
        """DID -> head, from the results upstream ODF tasks returned for this derivative's inputs."""
        transform = self.call(lambda: repo.dataset(self.dataset).state().transform)
        inputs = {ti.dataset_ref for ti in transform.inputs} if transform else set()
        task_ids = sorted(self.upstream_task_ids)
        if not task_ids or not inputs:
            return {}
        pulled = context["ti"].xcom_pull(task_ids=task_ids, key="return_value")
        results = pulled if isinstance(pulled, list) else [pulled]
        heads: dict[str, str] = {}
        for result in results:
            if not isinstance(result, dict) or not result.get("new_head") or not result.get("dataset_id"):
                continue
            did = str(DatasetId.parse(result["dataset_id"]))
            if did in inputs:
                heads[did] = result["new_head"]
        return heads

    def lineage_inputs(self, repo: Repository) -> tuple[LineageDataset, ...]:
        """OpenLineage inputs: the datasets of the derivative's SetTransform."""
        from airflow_odf.lineage import transform_input_lineage

        return self.call(lambda: transform_input_lineage(repo, self.dataset))

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        if not isinstance(self.input_heads, dict):
            raise AirflowFailException(
                f"input_heads rendered to {self.input_heads!r}: expected a mapping of input -> block hash "
                "(set render_template_as_native_obj=True on the DAG when it is a template)"
            )
        pins: dict[str, str] = {**self.upstream_heads(context, repo), **self.input_heads}
        if pins:
            self.log.info("%s: inputs pinned to %s", self.dataset, pins)
        options = TransformOptions(
            work_dir=self.work_dir(repo),
            pinned_heads=pins or None,
            max_input_records=self.max_input_records,
            recover_diverged=self.recover_diverged,
            schema_policy=self.schema_policy,
            checks=check_suite(self.checks),
            quarantine=self.quarantine,
            log=self.log.info,
        )
        result = self.call(lambda: run_transform(repo, self.dataset, self.runner(), options))
        return self.report(context, result.as_dict())
