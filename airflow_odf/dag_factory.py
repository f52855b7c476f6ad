"""`build_dag`: one Airflow DAG from a folder of DatasetSnapshot manifests.

The folder is the pipeline: `apply_manifests` creates or evolves every dataset, each root with a
polling source gets an `ingest_<name>` task (optionally gated by an `OdfSourceChangedSensor`), each
derivative a `transform_<name>` task wired after the tasks of its inputs, so block hashes flow through
XCom exactly as in a hand-written DAG. Roots with only push sources get no task: something else pushes
into them. A derivative given a batching rule (`batching=`, kamu's `minRecordsToAwait` /
`maxBatchingInterval`) gets an `await_batch_<name>` check before its transform, which is skipped until
the rule holds.

Parsing reads the manifest files only — no repository, no Spark — and every problem is an error at
DAG-parse time that names the manifest file: an invalid manifest, a dataset defined twice, an input
that is neither in the folder nor declared in `external_inputs`, a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, BaseOperator

from airflow_odf.hooks.repo import OdfRepoHook
from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.format.sql_policy import require_snapshots_sql_allowed
from airflow_odf.odf.repo.snapshot_order import dependency_order
from airflow_odf.odf.transform.batching import BatchingRule, BatchingRuleError
from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator
from airflow_odf.sensors.batching import INPUT_HEADS_KEY, OdfBatchingSensor

APPLY_TASK_ID = "apply_manifests"
_NOT_IN_TASK_ID = re.compile(r"[^A-Za-z0-9_.-]")


class DagFactoryError(ValueError):
    """A folder of manifests that cannot become a DAG; the message names the manifest file."""


@dataclass(frozen=True)
class PlannedDataset:
    """One dataset of the folder: where it is defined and what the DAG does for it."""

    name: str
    file: Path
    kind: model.DatasetKind
    polling: bool
    inputs: tuple[str, ...]

    @property
    def key(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Pipeline:
    """The datasets of a manifest folder in dependency order (inputs first) and the files they came from."""

    datasets: tuple[PlannedDataset, ...]
    files: tuple[Path, ...]


def task_id_for(prefix: str, dataset: str) -> str:
    """`<prefix>_<dataset name>`: dots and dashes are valid in task ids; `/` of an account alias is not."""
    return f"{prefix}_{_NOT_IN_TASK_ID.sub('_', dataset)}"


def manifest_files(manifests_dir: Path) -> list[Path]:
    """The `*.yaml` / `*.yml` files of the folder (not recursive), sorted by name."""
    return sorted(p for p in manifests_dir.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def _read_snapshots(files: Iterable[Path]) -> list[tuple[model.DatasetSnapshot, Path]]:
    found: list[tuple[model.DatasetSnapshot, Path]] = []
    for f in files:
        try:
            snapshots = [m.content for m in read_manifests(f) if m.kind == "DatasetSnapshot"]
            require_snapshots_sql_allowed(snapshots, str(f))
        except OdfError as e:
            raise DagFactoryError(str(e)) from e
        found += [(snapshot, f) for snapshot in snapshots]
    return found


def _inputs(snapshot: model.DatasetSnapshot) -> tuple[str, ...]:
    refs: list[str] = []
    for event in snapshot.metadata:
        if isinstance(event, model.SetTransform):
            refs = [i.dataset_ref for i in event.inputs]  # the last SetTransform is the one that counts
    return tuple(refs)


def _check_cycles(by_key: Mapping[str, PlannedDataset]) -> None:
    """Raises on the first cycle found, showing it as `a (a.yaml) -> b (b.yaml) -> a (a.yaml)`."""
    done: set[str] = set()

    def visit(key: str, path: list[str]) -> None:
        if key in done:
            return
        if key in path:
            cycle = [*path[path.index(key) :], key]
            shown = " -> ".join(f"{by_key[k].name} ({by_key[k].file})" for k in cycle)
            raise DagFactoryError(f"{by_key[key].file}: the transform inputs form a cycle: {shown}")
        for ref in by_key[key].inputs:
            if ref.lower() in by_key:
                visit(ref.lower(), [*path, key])
        done.add(key)

    for key in sorted(by_key):
        visit(key, [])


def plan_pipeline(manifests_dir: str | Path, external_inputs: Iterable[str] = ()) -> Pipeline:
    """Reads and checks the folder's DatasetSnapshot manifests; raises DagFactoryError naming the file.

    `external_inputs` are dataset names (or `did:odf:` ids) that derivatives may read although no
    manifest of the folder defines them: datasets another DAG or another team maintains.
    """
    folder = Path(manifests_dir)
    if not folder.is_dir():
        raise DagFactoryError(f"{folder}: not a directory of DatasetSnapshot manifests")
    snapshots = _read_snapshots(manifest_files(folder))
    if not snapshots:
        raise DagFactoryError(f"{folder}: no DatasetSnapshot manifest (*.yaml, *.yml) in the folder")
    by_key: dict[str, PlannedDataset] = {}
    for snapshot, file in snapshots:
        planned = PlannedDataset(
            name=snapshot.name,
            file=file,
            kind=snapshot.kind,
            polling=any(isinstance(e, model.SetPollingSource) for e in snapshot.metadata),
            inputs=_inputs(snapshot),
        )
        if planned.key in by_key:
            first = by_key[planned.key]
            raise DagFactoryError(f"{file}: dataset {snapshot.name!r} is already defined in {first.file}")
        by_key[planned.key] = planned
    external = frozenset(ref.lower() for ref in external_inputs)
    for planned in by_key.values():
        for ref in planned.inputs:
            if ref.lower() not in by_key and ref.lower() not in external:
                raise DagFactoryError(
                    f"{planned.file}: {planned.name} reads {ref!r}, which no manifest in {folder} defines; "
                    "add its manifest to the folder or list it in external_inputs"
                )
    _check_cycles(by_key)
    ordered = dependency_order([s for s, _ in snapshots])
    return Pipeline(
        datasets=tuple(by_key[s.name.lower()] for s in ordered),
        files=tuple(sorted({f for _, f in snapshots})),
    )


def _source_sensor(
    planned: PlannedDataset, odf_conn_id: str, source_dir: str, kwargs: Mapping[str, Any]
) -> BaseOperator:
    from airflow_odf.sensors.source import OdfSourceChangedSensor  # only when gating is asked for

    return OdfSourceChangedSensor(
        task_id=task_id_for("source_changed", planned.name),
        dataset=planned.name,
        odf_conn_id=odf_conn_id,
        source_dir=source_dir,
        **kwargs,
    )


def batching_rules(pipeline: Pipeline, batching: Mapping[str, Any] | None) -> dict[str, BatchingRule]:
    """Dataset key -> the batching rule of each derivative named in `batching` (names in any case);
    raises DagFactoryError for a name the folder does not define, a root, or a bad rule."""
    by_key = {d.key: d for d in pipeline.datasets}
    rules: dict[str, BatchingRule] = {}
    for name, plain in (batching or {}).items():
        planned = by_key.get(str(name).lower())
        if planned is None:
            known = ", ".join(d.name for d in pipeline.datasets if d.kind is model.DatasetKind.DERIVATIVE)
            raise DagFactoryError(
                f"batching: {name!r} is not a derivative of the folder (derivatives: {known})"
            )
        if planned.kind is not model.DatasetKind.DERIVATIVE:
            raise DagFactoryError(
                f"{planned.file}: batching: {planned.name} is a root; only derivatives batch"
            )
        try:
            rules[planned.key] = BatchingRule.from_plain(plain, f"{planned.file}: batching of {planned.name}")
        except BatchingRuleError as e:
            raise DagFactoryError(str(e)) from None
    return rules


def _batching_sensor(planned: PlannedDataset, odf_conn_id: str, rule: BatchingRule) -> BaseOperator:
    """The rule checked once per run (no wait): satisfied, it pins the transform; else it is skipped."""
    return OdfBatchingSensor(
        task_id=task_id_for("await_batch", planned.name),
        dataset=planned.name,
        odf_conn_id=odf_conn_id,
        min_records_to_await=rule.min_records_to_await,
        max_batching_interval=rule.max_batching_interval,
        mode="poke",
        deferrable=False,
        timeout=0,
        soft_fail=True,
        trigger_rule="none_failed",  # checked even when its inputs' tasks found nothing new this run
    )


CHECKS_DIR = "checks"


def checks_files(folder: Path, pipeline: Pipeline) -> dict[str, Path]:
    """Dataset key -> its checks file, `checks/<dataset name>.yaml` (or `.yml`) beside the manifests
    (docs/checks.md); raises DagFactoryError for a checks file of a dataset the folder does not define
    or one whose checks do not read (it names the file and the check)."""
    from airflow_odf.operators.checks import declared_checks

    found: dict[str, Path] = {}
    by_key = {d.key: d for d in pipeline.datasets}
    checks_dir = folder / CHECKS_DIR
    if not checks_dir.is_dir():
        return found
    for path in sorted(p for p in checks_dir.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml")):
        planned = by_key.get(path.stem.lower())
        if planned is None:
            raise DagFactoryError(f"{path}: no manifest in {folder} defines a dataset named {path.stem!r}")
        if planned.key in found:
            raise DagFactoryError(f"{path}: {planned.name} already has checks in {found[planned.key]}")
        if planned.kind is model.DatasetKind.ROOT and not planned.polling:
            raise DagFactoryError(f"{path}: {planned.name} has no polling source, so no task of this DAG")
        try:
            declared_checks(path)
        except ValueError as e:
            raise DagFactoryError(str(e)) from None
        found[planned.key] = path
    return found


def _with_checks(kwargs: Mapping[str, Any], path: Path | None) -> dict[str, Any]:
    """The operator arguments with the dataset's checks file, unless the arguments name checks."""
    return {**({"checks": str(path)} if path is not None else {}), **kwargs}


def build_dag(
    manifests_dir: str | Path,
    *,
    dag_id: str,
    schedule: Any = None,
    odf_conn_id: str = OdfRepoHook.default_conn_name,
    spark_conn_id: str = "spark_default",
    engine: str | None = None,
    gate_with_source_sensor: bool = False,
    default_args: dict[str, Any] | None = None,
    external_inputs: Iterable[str] = (),
    source_dir: str | Path | None = None,
    create_repository: bool = False,
    ingest_kwargs: Mapping[str, Any] | None = None,
    transform_kwargs: Mapping[str, Any] | None = None,
    sensor_kwargs: Mapping[str, Any] | None = None,
    batching: Mapping[str, Mapping[str, Any]] | None = None,
    **dag_kwargs: Any,
) -> DAG:
    """One DAG that applies the folder's manifests, ingests its polling roots and updates its derivatives.

    :param manifests_dir: the folder of DatasetSnapshot manifests (`*.yaml`, `*.yml`).
    :param dag_id: the DAG's id; `schedule`, `default_args` and `**dag_kwargs` go to the DAG.
    :param odf_conn_id: the repository connection of every task.
    :param spark_conn_id: the Spark connection of every task (with `engine="spark-submit"`).
    :param engine: `spark-submit`, `spark-connect` or `local` (default: `[odf] default_engine`).
    :param gate_with_source_sensor: put an `OdfSourceChangedSensor` before each ingest, so the ingest
        runs only when its source has new data. The sensors default to `mode="reschedule"` and
        `soft_fail=True`: nothing new by the sensor's `timeout` ends sensor and ingest skipped, while a
        source that cannot be asked (a variable not set, a malformed source) fails the sensor with the
        core's message and a transient failure (network, HTTP 5xx) is logged and asked again;
        transforms then run when at least one upstream task succeeded and none failed
        (`none_failed_min_one_success`).
    :param external_inputs: inputs the derivatives may read that the folder does not define.
    :param source_dir: where relative FilesGlob paths are resolved (default: the folder's parent, so a
        project laid out as `manifests/` + `data/` works with `path: data/*.csv`).
    :param create_repository: let `apply_manifests` initialise the repository if it does not exist.
    :param ingest_kwargs: extra arguments of every `OdfIngestOperator` (e.g. `schema_policy`, `retries`).
    :param transform_kwargs: extra arguments of every `OdfTransformOperator`.
    Quality checks (docs/checks.md) go beside the manifests: `checks/<dataset name>.yaml` gives the
    dataset's ingest or transform task those checks (`checks=`); `quarantine=True` in `ingest_kwargs` /
    `transform_kwargs` keeps the slices they reject.

    :param sensor_kwargs: extra arguments of every sensor (e.g. `poke_interval`, `timeout` — keep it
        shorter than the schedule's interval).
    :param batching: derivative name -> `{"minRecordsToAwait": N, "maxBatchingInterval": T}` (T in
        seconds, a timedelta, or `30s`/`15m`/`1h`/`2d`): an `await_batch_<name>` check before the
        transform, once per run, after its inputs' tasks; the transform runs, pinned to the heads it
        counted, only when the inputs hold N unprocessed records or T has passed since the first
        unprocessed change, and is skipped otherwise (the records wait for a later run). Transforms then
        use the trigger rule `none_failed_min_one_success`, as with the source gate.
    """
    folder = Path(manifests_dir).absolute()
    pipeline = plan_pipeline(folder, external_inputs)
    checks = checks_files(folder, pipeline)
    rules = batching_rules(pipeline, batching)
    base = str(Path(source_dir).absolute() if source_dir is not None else folder.parent)
    common: dict[str, Any] = {"odf_conn_id": odf_conn_id, "spark_conn_id": spark_conn_id, "engine": engine}
    ingest_kwargs, transform_kwargs = dict(ingest_kwargs or {}), dict(transform_kwargs or {})
    sensor_settings = {"mode": "reschedule", "soft_fail": True, **(sensor_kwargs or {})}
    if gate_with_source_sensor or rules:
        transform_kwargs.setdefault("trigger_rule", "none_failed_min_one_success")

    with DAG(dag_id=dag_id, schedule=schedule, default_args=dict(default_args or {}), **dag_kwargs) as dag:
        apply = OdfApplyManifestOperator(
            task_id=APPLY_TASK_ID,
            manifests=[str(f) for f in pipeline.files],
            create_repository=create_repository,
            **common,
        )
        produced: dict[str, BaseOperator] = {}  # dataset key -> the task that updates it
        for planned in pipeline.datasets:
            if planned.kind is model.DatasetKind.ROOT:
                if not planned.polling:
                    continue
                ingest = OdfIngestOperator(
                    task_id=task_id_for("ingest", planned.name),
                    dataset=planned.name,
                    source_dir=base,
                    **common,
                    **_with_checks(ingest_kwargs, checks.get(planned.key)),
                )
                if gate_with_source_sensor:
                    sensor = _source_sensor(planned, odf_conn_id, base, sensor_settings)
                    apply >> sensor >> ingest
                else:
                    apply >> ingest
                produced[planned.key] = ingest
                continue
            # inputs without a task of their own (push roots, external datasets) only need the manifests
            upstream = sorted(
                {produced.get(ref.lower(), apply) for ref in planned.inputs}, key=lambda t: t.task_id
            )
            pins: dict[str, Any] = {}
            rule = rules.get(planned.key)
            if rule is not None:
                batch = _batching_sensor(planned, odf_conn_id, rule)
                upstream >> batch
                upstream, pins = [batch], {"input_heads": batch.output[INPUT_HEADS_KEY]}
            transform = OdfTransformOperator(
                task_id=task_id_for("transform", planned.name),
                dataset=planned.name,
                **common,
                **pins,
                **_with_checks(transform_kwargs, checks.get(planned.key)),
            )
            upstream >> transform
            produced[planned.key] = transform
    return dag
