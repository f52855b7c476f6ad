"""The schema operators on real repositories: migration of a legacy dataset (twice), inference from a
sample file on the local Spark (nothing committed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.schema import OdfInferSchemaOperator, OdfMigrateSchemaOperator
from tests.unit.test_schema_migration import _legacy_dataset


def test_migrate_schema_operator(odf_repo: Path, tmp_path: Path) -> None:
    repo = Repository.init(odf_repo)
    dataset = _legacy_dataset(repo, tmp_path, "legacy")
    head = dataset.head()
    op = OdfMigrateSchemaOperator(task_id="migrate", dataset="legacy")
    first = op.execute({})
    assert first["changed"] and first["new_head"] == str(dataset.head()) != str(head)
    assert isinstance(dataset.block(dataset.head()).event, model.SetDataSchema)
    assert dataset.block(dataset.head()).event.schema is not None
    second = op.execute({})
    assert not second["changed"] and second["new_head"] is None
    assert "population" in first["schema"] and "offset" in first["schema"]


@pytest.mark.usefixtures("spark")
def test_infer_schema_operator(odf_repo: Path, tmp_path: Path) -> None:
    repo = Repository.init(odf_repo)
    read = model.ReadStepCsv(
        header=True, ddl_schema=["event_time TIMESTAMP", "city STRING", "population BIGINT"]
    )
    source = model.AddPushSource(source_name="default", read=read, merge=model.MergeStrategyAppend())
    repo.add(model.DatasetSnapshot(name="cities", kind=model.DatasetKind.ROOT, metadata=[source]))
    sample = tmp_path / "sample.csv"
    sample.write_text("event_time,city,population\n2024-01-01T00:00:00Z,A,1\n")
    head = repo.dataset("cities").head()
    result = OdfInferSchemaOperator(task_id="infer", dataset="cities", files=[str(sample)]).execute({})
    assert not result["committed"] and repo.dataset("cities").head() == head
    for column in ("offset", "op", "system_time", "event_time", "city", "population"):
        assert column in result["schema"]
    with pytest.raises(ValueError, match="engine="):
        OdfInferSchemaOperator(task_id="bad", dataset="cities", engine="yarn")
