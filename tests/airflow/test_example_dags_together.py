"""Every example DAG can be enabled in one deployment with all the others: no two DAGs that start by
themselves (a schedule, an asset) write the same dataset, no DAG follows through a watcher a dataset
that a task of the examples writes (each commit would start it twice), and every DAG has the
production settings its docstring explains (`max_active_runs`, `retries` on the tasks that write).
Parsed as the DAG processor parses the folder: no repository, no Spark."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from airflow.sdk import Asset
from jinja2 import meta

from airflow_odf.odf.format.multiformats import DatasetId
from airflow_odf.operators.base import OdfBaseOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.verify import OdfVerifyOperator
from tests.airflow.dag_runs import EXAMPLES
from tests.paths import REPO


@pytest.fixture
def example_dags(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every DAG of dags_examples, the watcher's included (it needs a dataset id to be defined)."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("ODF_EXAMPLE_SENSORS_DID", str(DatasetId.generate()[0]))
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as Airflow does: the examples import each other
    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    return bag.dags


def _writes(task: Any) -> bool:
    """An ODF task that commits into its dataset (not one that only reads it or applies manifests)."""
    return isinstance(task, OdfBaseOperator) and not isinstance(
        task, OdfApplyManifestOperator | OdfVerifyOperator
    )


def _starts_by_itself(dag: Any) -> bool:
    return dag.schedule is not None


def test_one_dag_that_starts_by_itself_per_dataset(example_dags: dict[str, Any]) -> None:
    writers: dict[tuple[str, str], set[str]] = defaultdict(set)
    for dag in example_dags.values():
        if _starts_by_itself(dag):
            for task in dag.tasks:
                if _writes(task):
                    writers[task.odf_conn_id, task.dataset].add(dag.dag_id)
    assert {dataset: dags for dataset, dags in writers.items() if len(dags) > 1} == {}
    assert set(example_dags) >= {"odf_asset_scheduled", "odf_trades_follower", "odf_asset_watcher"}


def test_no_watcher_follows_a_dataset_the_examples_write(example_dags: dict[str, Any]) -> None:
    written = {task.dataset for dag in example_dags.values() for task in dag.tasks if _writes(task)}
    watched = {
        dag.schedule.name
        for dag in example_dags.values()
        if isinstance(dag.schedule, Asset) and dag.schedule.watchers
    }
    assert watched == {"com.example.sensors"}
    assert watched & written == set()


def test_every_example_dag_has_production_settings(example_dags: dict[str, Any]) -> None:
    for dag in example_dags.values():
        assert dag.max_active_runs <= 3, dag.dag_id  # explicitly bounded (Airflow's default is 16)
        for task in dag.tasks:
            if _writes(task):
                assert task.retries >= 2, (dag.dag_id, task.task_id)


def _template_context(logical_date: datetime | None) -> dict[str, Any]:
    """The template context Airflow's task runner gives a task of a manual run with this logical date
    (None: a run started from the UI or the REST API, whose default is no logical date)."""
    from airflow.sdk import DAG, BaseOperator
    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState, DagRunType, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    with DAG("probe", schedule=None):
        task = BaseOperator(task_id="probe")
    now = datetime(2024, 5, 1, tzinfo=timezone.utc)
    run = DagRun(
        dag_id="probe",
        run_id="probe",
        logical_date=logical_date,
        data_interval_start=logical_date,
        data_interval_end=logical_date,
        run_after=now,
        start_date=now,
        end_date=None,
        run_type=DagRunType.MANUAL,
        state=DagRunState.RUNNING,
        consumed_asset_events=[],
        partition_key=None,
    )
    ti = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(),
        task_id="probe",
        dag_id="probe",
        run_id="probe",
        try_number=1,
        map_index=-1,
        task=task,
        max_tries=0,
        dag_version_id=uuid.uuid4(),
        _ti_context_from_server=TIRunContext(dag_run=run, max_tries=0),
    )
    return dict(ti.get_template_context())


NO_LOGICAL_DATE = set(_template_context(None))
#: what a template may use only in a run with a logical date (`ds`, `ts`, `data_interval_start`, ...)
LOGICAL_DATE_ONLY = set(_template_context(datetime(2024, 5, 1, tzinfo=timezone.utc))) - NO_LOGICAL_DATE


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a template field's value (lists, tuples, mappings: keys and values)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple | set):
        for v in value:
            yield from _strings(v)


def test_every_template_of_the_examples_renders_without_a_logical_date(example_dags: dict[str, Any]) -> None:
    """Runs started from the UI or the REST API have no logical date: their context lacks `ds`, `ts`,
    `data_interval_*`, and a template naming one fails the task (issue 36: `odf_sql_report`'s `{{ ds }}`
    failed every such run while `dag.test()`, which sets a logical date, passed)."""
    assert {"ds", "ts", "logical_date", "data_interval_start"} <= LOGICAL_DATE_ONLY  # the probe works
    checked = 0
    for dag in example_dags.values():
        env = dag.get_template_env()
        defined = NO_LOGICAL_DATE | set(env.globals) | set(dag.user_defined_macros or {})
        for task in dag.tasks:
            for field in task.template_fields:
                for text in _strings(getattr(task, field, None)):
                    if "{{" not in text and "{%" not in text:
                        continue
                    used = meta.find_undeclared_variables(env.parse(text))
                    assert used <= defined, (dag.dag_id, task.task_id, field, text, used - defined)
                    checked += 1
    assert checked >= 5  # the examples' templates were found


def _python_strings(code: str) -> Iterator[str]:
    """The string literals of a (possibly partial) python block."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.STRING:
                yield ast.literal_eval(token.string)
    except (tokenize.TokenError, SyntaxError, ValueError):
        return


def test_no_template_in_the_docs_needs_a_logical_date() -> None:
    """The docs' python examples (Airflow templates, not the `${{ env.NAME }}` of manifests) use nothing
    that a run without a logical date lacks."""
    from airflow.sdk import DAG

    env = DAG("docs", schedule=None).get_template_env()  # Airflow's filters (`ds`, `ts`, ...)
    checked = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S):
            for text in _python_strings(block):
                if "{{" in text and "${{" not in text:
                    used = meta.find_undeclared_variables(env.parse(text))
                    assert not used & LOGICAL_DATE_ONLY, (doc.name, text)
                    checked.append(text)
    assert any("run_after" in text for text in checked)  # the sql.md and airflow.md templates
