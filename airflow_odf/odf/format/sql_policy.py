"""The SQL policy (`airflow_odf/utils/sql_policy`) applied to metadata events: a transform's queries may
read its inputs (by alias) and earlier steps; a preprocess's may read `input` and earlier steps.

Manifests are checked by `odf snapshot validate`, `odf add` (Repository.add), the DAG factory and the
apply-manifest operator, pulled chains before a replay, and every engine request before it is sent, so
SQL from a manifest author or a peer never reaches Spark unchecked.
"""

from __future__ import annotations

from typing import Any

from airflow_odf.odf.errors import ManifestError, OdfError, Problem, quoted
from airflow_odf.odf.format import model

PREPROCESS_INPUT = "input"
"""The view a preprocess reads (the engine's name for the data just read)."""


class SqlPolicyError(OdfError):
    """SQL the policy refuses: names what (transform or preprocess), the step, the construct and where."""


def transform_inputs(event: model.SetTransform) -> list[str]:
    """The names a transform's queries may read: each input's alias, else its reference."""
    return [ti.alias or ti.dataset_ref for ti in event.inputs]


def steps_of(sql: model.TransformSql) -> list[tuple[str, str | None]]:
    """(query, alias) of each step; a lone `query` is one step without an alias."""
    if sql.queries:
        return [(q.query, q.alias) for q in sql.queries]
    return [(sql.query or "", None)]


def sql_refusal(sql: model.TransformSql, inputs: list[str], what: str) -> str | None:
    """Why the policy refuses these steps ("transform step 2 of 3 (alias 'x'): ..."), or None.

    SQL written for another engine (Flink, DataFusion) is checked as Spark SQL too, as Spark runs it
    here: a refusal says so."""
    # imported here: sqlglot takes half a second to import, which every command and DAG parse that only
    # opens a repository would pay
    from airflow_odf.utils.sql_policy import StepRefused, check_steps

    try:
        check_steps(steps_of(sql), inputs)
    except StepRefused as e:
        other = (
            f"; its engine is {sql.engine}, and this provider runs SQL on Spark"
            if sql.engine != "spark"
            else ""
        )
        return f"{what} {e}{other}"
    return None


def event_sql_refusal(event: Any) -> str | None:
    """Why the policy refuses the SQL of a SetTransform, SetPollingSource or AddPushSource, or None (also
    for events without SQL, or with a transform in another language)."""
    if isinstance(event, model.SetTransform) and isinstance(event.transform, model.TransformSql):
        return sql_refusal(event.transform, transform_inputs(event), "transform")
    preprocess = getattr(event, "preprocess", None)
    if isinstance(preprocess, model.TransformSql):
        return sql_refusal(preprocess, [PREPROCESS_INPUT], "preprocess")
    return None


def snapshot_sql_problems(snapshot: model.DatasetSnapshot) -> list[Problem]:
    """The policy's refusals of a DatasetSnapshot's SQL, each with its field path and the dataset named."""
    problems = []
    for i, event in enumerate(snapshot.metadata):
        refusal = event_sql_refusal(event)
        if refusal is not None:
            key = "transform" if isinstance(event, model.SetTransform) else "preprocess"
            problems.append(
                Problem(f"content.metadata[{i}].{key}", f"dataset {quoted(snapshot.name)}: {refusal}")
            )
    return problems


def require_snapshots_sql_allowed(snapshots: list[model.DatasetSnapshot], source: str) -> None:
    """Raises ManifestError (`source`: the file) listing every refused SQL of the snapshots."""
    problems = [p for snapshot in snapshots for p in snapshot_sql_problems(snapshot)]
    if problems:
        raise ManifestError(source, problems)


def require_sql_allowed(event: Any, dataset: str) -> None:
    """Raises SqlPolicyError naming `dataset` when the event's SQL is refused."""
    refusal = event_sql_refusal(event)
    if refusal is not None:
        raise SqlPolicyError(f"{dataset}: {refusal}")
