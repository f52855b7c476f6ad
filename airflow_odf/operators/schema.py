"""Schema tasks: infer a root dataset's schema ahead of data (`OdfInferSchemaOperator`) and migrate a
legacy raw-Arrow schema to the ODF format (`OdfMigrateSchemaOperator`). See docs/schemas.md.

Both return a small JSON dict: the schema as ODF YAML text and whether a block was committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import Context

from airflow_odf.odf.ingest.schema_inference import InferOptions, infer_schema
from airflow_odf.odf.repo.schema_migration import migrate_schema
from airflow_odf.odf.schema.text import schema_yaml
from airflow_odf.operators.base import OdfBaseOperator
from airflow_odf.source_trust import SourceTrustArguments


class OdfInferSchemaOperator(SourceTrustArguments, OdfBaseOperator):
    """The ODF schema the dataset's first ingest would record, from a sample; optionally committed.

    :param files: sample files for a push source (templated); a polling source samples its first batch.
    :param source_name: the push source, when the dataset has several.
    :param commit: record the schema (SetDataSchema) before any data, if the dataset has none yet.
    :param source_dir: where relative FilesGlob paths of the polling source resolve (templated), as for
        the ingest task.

    Sampling a polling source runs it as the ingest would, under the same trust arguments
    (`allow_shell_steps`, `allow_container_sources`, `template_env_allow`, `local_source_dirs`).
    """

    template_fields = ("dataset", "files", "source_dir")

    def __init__(
        self,
        *,
        files: Sequence[str] | None = None,
        source_name: str | None = None,
        commit: bool = False,
        source_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.files = list(files or [])
        self.source_name = source_name
        self.commit = commit
        self.source_dir = source_dir

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        dataset = self.call(lambda: repo.dataset(self.dataset))
        prev = dataset.head()
        options = InferOptions(
            work_dir=self.work_dir(repo),
            source_dir=Path(self.source_dir) if self.source_dir else None,
            trust=self.call(self.source_trust),
            log=self.log.info,
        )
        result = self.call(
            lambda: infer_schema(
                dataset,
                self.dataset,
                self.runner(),
                options,
                files=[Path(f).absolute() for f in self.files],
                source_name=self.source_name,
                commit=self.commit,
            )
        )
        if result.committed and result.new_head:
            state = dataset.state()
            self.report(
                context,
                {
                    "dataset": self.dataset,
                    "dataset_id": str(state.dataset_id),
                    "prev_head": None if prev is None else str(prev),
                    "new_head": result.new_head,
                    "new_blocks": [result.new_head],  # the SetDataSchema block
                },
            )
        out = {
            "dataset": self.dataset,
            "schema": schema_yaml(result.schema),
            "widenings": [w.__dict__ for w in result.widenings],
            "changes": None if result.changes is None else [str(c) for c in result.changes],
            "committed": result.committed,
            "new_head": result.new_head,
        }
        if result.reconciliation.lost_races:
            out["reconciled"] = result.reconciliation.as_dict()
        return out


class OdfMigrateSchemaOperator(OdfBaseOperator):
    """Appends the ODF-form SetDataSchema equivalent to a legacy raw Arrow one; nothing the second time."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [])
        super().__init__(**kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        repo = self.repository()
        dataset = self.call(lambda: repo.dataset(self.dataset))
        result = self.call(lambda: migrate_schema(dataset, self.dataset, log=self.log.info))
        self.log.info("%s", result.message)
        out = {
            "dataset": self.dataset,
            "changed": result.changed,
            "message": result.message,
            "schema": schema_yaml(result.schema),
            "new_head": None if result.commit is None else str(result.commit.new_head),
        }
        if result.reconciliation.lost_races:
            out["reconciled"] = result.reconciliation.as_dict()
        return out
