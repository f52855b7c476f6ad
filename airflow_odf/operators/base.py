"""What every ODF operator shares: the repository and engine connections, error mapping, XCom and assets.

Each operator resolves its connections in `execute` (never at parse time), calls one function of the
core, and returns the core's result dict as XCom: `{dataset, dataset_id, prev_head, new_head,
new_blocks, records, up_to_date}`, plus `reconciled: {lost_races, heads_found}` when another writer
(an overlapping run) moved the head first and the core planned again from it. When the task committed
blocks, the dataset's asset (`odf://<dataset id>`) gets an event carrying `{head, prev_head}` through
the operator's `AssetAlias` outlet, so DAGs can be scheduled on it; a task that found its dataset up
to date emits none.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.exceptions import AirflowNotFoundException
from airflow.sdk import AssetAlias, BaseOperator, Context
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.assets import declared_assets, odf_asset
from airflow_odf.exceptions import OdfChecksFailedException, OdfSchemaViolationException, airflow_error
from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.links import OdfDatasetLink
from airflow_odf.notifications.schema_violation import violation_summary
from airflow_odf.odf.engine_client.runner import EngineRunner, require_local_spark
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository
from airflow_odf.utils.engine_deadline import resolve_engine_timeout

if TYPE_CHECKING:
    from airflow_odf.lineage import LineageDataset, OdfLineage
    from airflow_odf.odf.checks.results import ChecksFailed

ENGINES = ("spark-submit", "local", "spark-connect")
RUN_EXTRA_KEY = "airflow-provider-odf.dev/airflow-task"
T = TypeVar("T")


def default_schema_policy() -> str:
    """`[odf] schema_policy` (strict unless configured)."""
    return conf.get("odf", "schema_policy", fallback="strict")


def asset_alias(dataset: str) -> AssetAlias:
    """The outlet through which an operator reports the asset of `dataset` (its DID is known at run time)."""
    return AssetAlias(name=f"odf:{dataset}")


class OdfBaseOperator(BaseOperator):
    """Base of the ODF operators: `dataset` in the repository of `odf_conn_id`, data work on Spark.

    `engine="spark-submit"` runs each engine request as a job on the cluster of the Spark connection
    `spark_conn_id`; `engine="spark-connect"` runs it on the long-running Spark Connect server of that
    connection (of type `spark_connect`); `engine="local"` runs it in the worker's own local
    SparkSession. The default is `[odf] default_engine` (spark-submit); a Spark connection of type
    `spark_connect` selects spark-connect by itself (unless the engine is `local`).

    `engine_timeout` is each engine request's deadline in seconds (else `[odf] engine_timeout`, else
    $ODF_ENGINE_TIMEOUT, else one hour): a request still running then is stopped — its Spark jobs
    cancelled, its spark-submit application killed — and the task fails without retries, committing
    nothing (the same request would do the same work again).
    """

    template_fields: tuple[str, ...] = ("dataset",)
    ui_color = "#d5e8f7"
    operator_extra_links = (OdfDatasetLink(),)

    def __init__(
        self,
        *,
        dataset: str,
        odf_conn_id: str = OdfRepoHook.default_conn_name,
        spark_conn_id: str = "spark_default",
        engine: str | None = None,
        spark_conf: dict[str, str] | None = None,
        engine_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        engine = engine or conf.get("odf", "default_engine", fallback="spark-submit")
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r}: expected one of {', '.join(ENGINES)}")
        if engine_timeout is not None:
            resolve_engine_timeout(engine_timeout, "engine_timeout")  # a bad one: the DAG does not load
        if not dataset:
            raise ValueError("dataset: the name of an ODF dataset is required")
        declared = [] if "outlets" in kwargs else declared_assets(dataset)  # outlets given: as given
        kwargs.setdefault("outlets", [asset_alias(dataset), *declared])
        super().__init__(**kwargs)
        self.declared_assets = declared
        self.dataset = dataset
        self.odf_conn_id = odf_conn_id
        self.spark_conn_id = spark_conn_id
        self.engine = engine
        self.spark_conf = spark_conf or {}
        self.engine_timeout = engine_timeout
        self._runner: Any = None
        self._result: dict[str, Any] | None = None  # what `report` returned: the run's lineage facts
        self._refused: ChecksFailed | None = None  # the checks that refused this run's data, if any

    def repository(self) -> Repository:
        return self.call(lambda: OdfRepoHook(self.odf_conn_id).open_repository())

    def runner(self) -> EngineRunner:
        from airflow_odf.hooks.spark_engine import (
            SparkConnectEngineRunner,
            SparkSubmitEngineRunner,
            with_fast_start,
        )

        engine = self.engine_in_use()
        if engine == "local":
            require_local_spark()
            from airflow_odf.engine.local_runner import LocalSparkRunner  # pyspark in the worker

            master = self.spark_conf.get("spark.master", "local[*]")
            conf = with_fast_start(self.engine_conf(), master, None)
            self._runner = LocalSparkRunner(master, conf, timeout=self.request_deadline())
        elif engine == "spark-connect":
            # a Connect server gets its s3a jars and settings when it starts (`odf engine serve --s3a`)
            self._runner = SparkConnectEngineRunner(
                self.spark_conn_id, conf=self.spark_conf, timeout=self.request_deadline()
            )
        else:
            name = f"odf-{self.dag_id}-{self.task_id}"
            self._runner = SparkSubmitEngineRunner(
                self.spark_conn_id, conf=self.engine_conf(), name=name, timeout=self.request_deadline()
            )
        return self._runner

    def engine_in_use(self) -> str:
        """The engine the task's requests run on (what records name, e.g. the verification's): `engine`,
        except that a Spark connection of type `spark_connect` selects spark-connect unless it is local."""
        from airflow_odf.hooks.spark_engine import SPARK_CONNECT_CONN_TYPE, connection_type

        if self.engine == "spark-submit" and connection_type(self.spark_conn_id) == SPARK_CONNECT_CONN_TYPE:
            return "spark-connect"
        return self.engine

    def request_deadline(self) -> float:
        """Seconds an engine request may run: `engine_timeout`, else `[odf] engine_timeout`, else
        $ODF_ENGINE_TIMEOUT, else one hour. A bad configured value fails the task (no retries)."""
        value, source = self.engine_timeout, "engine_timeout"
        if value is None:
            value, source = conf.get("odf", "engine_timeout", fallback=None), "[odf] engine_timeout"
        try:
            return resolve_engine_timeout(value, source)
        except ValueError as e:
            raise AirflowFailException(str(e)) from None

    def engine_conf(self) -> dict[str, str]:
        """The task's Spark conf plus the s3a jars and settings of the repository connection
        (`spark_s3a`); without that connection (opening the repository reports it), the task's."""
        try:
            return OdfRepoHook(self.odf_conn_id).engine_spark_conf(self.spark_conf)
        except AirflowNotFoundException:
            return dict(self.spark_conf)

    @staticmethod
    def work_dir(repo: Repository) -> Path:
        """The repository's scratch space (inside a local one: slices move, not copy)."""
        return repo.work_dir

    def call(self, fn: Callable[[], T]) -> T:
        """Runs a core call, turning ODF errors into the Airflow exception with the right retry semantics."""
        try:
            return fn()
        except OdfError as e:
            error = airflow_error(self.dataset, e)
            if isinstance(error, OdfSchemaViolationException):  # in the main log section, not Post Execute
                self.log.error("%s", violation_summary(error))
            if isinstance(error, OdfChecksFailedException):  # every failed check and its failing rows
                self._refused = error.failure
                self.log.error("%s", "\n".join([*error.failure.lines(), *error.failure.sample_lines()]))
            raise error from None

    def pre_execute(self, context: Any) -> None:
        """Takes the declared assets (`declared_assets`) out of the outlets for this run: declared, they
        make the task their producer on the Assets page, but Airflow would emit an event on each at every
        success; the event goes through the alias instead, once per commit (`report`)."""
        self.outlets = [o for o in self.outlets if o not in self.declared_assets]

    def run_marker(self, context: Context) -> str:
        """Identifies this task's run in the blocks it commits (so that a retry can find them)."""
        ti = context["ti"]
        marker = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}"
        return marker if ti.map_index in (None, -1) else f"{marker}/{ti.map_index}"

    def report(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """Emits the asset event of the dataset (`{head, prev_head}`) if blocks were committed, and
        returns the XCom dict. An up-to-date run emits nothing: DAGs scheduled on the dataset would
        otherwise run for nothing."""
        if result.get("new_blocks") and result.get("dataset_id") and result.get("new_head"):
            alias = asset_alias(self.dataset)
            if any(isinstance(o, AssetAlias) and o.name == alias.name for o in self.outlets):
                context["outlet_events"][alias].add(
                    odf_asset(result["dataset_id"], result["dataset"]),
                    extra={"head": result["new_head"], "prev_head": result["prev_head"]},
                )
        self.log.info(
            "%s: %s",
            result.get("dataset"),
            "up to date" if result.get("up_to_date") else result.get("new_head"),
        )
        reconciled = result.get("reconciled")
        if reconciled:
            self.log.info(
                "%s: another writer moved the head first %d time(s) (to %s); this task planned again "
                "from it and committed %d block(s) of its own",
                result.get("dataset"),
                reconciled["lost_races"],
                ", ".join(str(h) for h in reconciled["heads_found"]),
                len(result.get("new_blocks") or []),
            )
        self._result = result
        return result

    def on_kill(self) -> None:
        if self._runner is not None and hasattr(self._runner, "on_kill"):
            self._runner.on_kill()

    def lineage(self, result: dict[str, Any] | None = None) -> OdfLineage:
        """What this task read (`lineage_inputs`) and wrote (its dataset, with schema), per the repository;
        with the `result` of its run (its XCom dict), also what that run did (`run_lineage`)."""
        from airflow_odf.lineage import OdfLineage, repository_dataset_lineage, run_lineage

        repo = self.repository()
        try:
            output = repository_dataset_lineage(repo, self.dataset)
        except DatasetNotFoundError:  # not a dataset of its own (e.g. applying manifests)
            return OdfLineage()
        lineage = OdfLineage(inputs=self.lineage_inputs(repo), outputs=(output,))
        return lineage if result is None else self.call(lambda: run_lineage(repo, lineage, result))

    def lineage_inputs(self, repo: Repository) -> tuple[LineageDataset, ...]:
        """The datasets this task reads; none for ingests (their sources are outside the repository)."""
        return ()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage, called by its provider if installed (docs/lineage.md): inputs, output with schema,
        namespace `odf`, and what this run did (versions, statistics, column lineage, checks)."""
        from airflow_odf.lineage import to_operator_lineage

        return to_operator_lineage(self.lineage(self._result))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """OpenLineage of a failed run (docs/lineage.md): when checks refused the data, every check's
        result as an assertion and the inputs at the heads the refused batch read; no output version,
        as nothing was committed. Any other failure: the datasets, without a run's facts."""
        from airflow_odf.lineage import to_operator_lineage

        return to_operator_lineage(self.lineage(self.refused_result()))

    def refused_result(self) -> dict[str, Any] | None:
        """The run's facts when checks refused its data (`ChecksFailed.as_dict`: `committed` false, every
        check's result, a transform's `input_heads`); None when they did not."""
        return None if self._refused is None else self._refused.as_dict()
