"""`OdfApplyManifestOperator`: creates or evolves datasets from DatasetSnapshot manifests.

Roots and derivatives are added in dependency order; an existing dataset gets only the events that
changed. A changed query of a derivative is checked against the schema-evolution rules before it is
committed (docs/transform.md), which needs the engine. Returns one result dict per dataset. An
overlapping run that creates or changes a dataset first does not fail the task: the manifest is
applied again against what that run left — usually nothing changed (`reconciled` in the result).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import Context

from airflow_odf.odf.chain.reconcile import Reconciliation
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.format.sql_policy import require_snapshots_sql_allowed
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.odf.repo.snapshot_order import dependency_order
from airflow_odf.odf.transform.evolution import check_transform_change
from airflow_odf.operators.base import OdfBaseOperator


class OdfApplyManifestOperator(OdfBaseOperator):
    """Applies DatasetSnapshot manifests (files or directories of `*.yaml`) to the repository.

    :param manifests: manifest files or directories (templated).
    :param create_repository: initialise the repository if it does not exist yet.
    """

    template_fields = ("manifests",)

    def __init__(
        self, *, manifests: Sequence[str] | str, create_repository: bool = False, **kwargs: Any
    ) -> None:
        paths = [manifests] if isinstance(manifests, str) else list(manifests)
        if not paths:
            raise ValueError("manifests: give at least one manifest file or directory")
        kwargs.setdefault("dataset", "manifests")
        kwargs.setdefault("outlets", [])
        super().__init__(**kwargs)
        self.manifests = paths
        self.create_repository = create_repository

    def snapshots(self) -> list[model.DatasetSnapshot]:
        files: list[Path] = []
        for p in map(Path, self.manifests):
            files += sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml")) if p.is_dir() else [p]
        found: list[model.DatasetSnapshot] = []
        for f in files:
            snapshots = [
                m.content for m in self.call(lambda f=f: read_manifests(f)) if m.kind == "DatasetSnapshot"
            ]
            self.call(lambda f=f, snapshots=snapshots: require_snapshots_sql_allowed(snapshots, str(f)))
            found += snapshots
        return dependency_order(found)

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_odf.hooks.repo import OdfRepoHook

        repo: Repository = self.call(
            lambda: OdfRepoHook(self.odf_conn_id).open_repository(create=self.create_repository)
        )
        runner = self.runner()
        work_dir = self.work_dir(repo)

        def checked(snapshot: model.DatasetSnapshot) -> model.DatasetSnapshot:
            return check_transform_change(repo, snapshot, runner, work_dir)

        results = []
        for snapshot in self.snapshots():
            record = Reconciliation()
            added = self.call(
                lambda s=snapshot, r=record: repo.add_reconciling(s, r, check=checked, log=self.log.info)
            )
            head = None if added.commit.new_head is None else str(added.commit.new_head)
            prev = None if added.commit.old_head is None else str(added.commit.old_head)
            result = {
                "dataset": added.name,
                "dataset_id": str(added.dataset_id),
                "prev_head": prev,
                "new_head": head,
                "new_blocks": [str(h) for h in added.commit.new_blocks],
                "created": added.created,
                "up_to_date": not added.commit.new_blocks,
            }
            if record.lost_races:
                result["reconciled"] = record.as_dict()
            results.append(result)
            self.log.info(
                "%s: %s",
                added.name,
                "created" if added.created else f"{len(added.commit.new_blocks)} new blocks",
            )
        return results
