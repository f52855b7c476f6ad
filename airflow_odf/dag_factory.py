"""`build_dag`: one Airflow DAG from a folder of DatasetSnapshot manifests.

The folder is the pipeline: `apply_manifests` creates or evolves every dataset, each root with a
polling source gets an `ingest_<name>` task (optionally gated by an `OdfSourceChangedSensor`), each
derivative a `transform_<name>` task wired after the tasks of its inputs, so block hashes flow through
XCom exactly as in a hand-written DAG. Roots with only push sources get no task: something else pushes
into them.

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
from airflow_odf.operators.ingest import OdfIngestOperator
from airflow_odf.operators.manifest import OdfApplyManifestOperator
from airflow_odf.operators.transform import OdfTransformOperator

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
    :param sensor_kwargs: extra arguments of every sensor (e.g. `poke_interval`, `timeout` — keep it
        shorter than the schedule's interval).
    """
    folder = Path(manifests_dir).absolute()
    pipeline = plan_pipeline(folder, external_inputs)
    base = str(Path(source_dir).absolute() if source_dir is not None else folder.parent)
    common: dict[str, Any] = {"odf_conn_id": odf_conn_id, "spark_conn_id": spark_conn_id, "engine": engine}
    ingest_kwargs, transform_kwargs = dict(ingest_kwargs or {}), dict(transform_kwargs or {})
    sensor_settings = {"mode": "reschedule", "soft_fail": True, **(sensor_kwargs or {})}
    if gate_with_source_sensor:
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
                    **ingest_kwargs,
                )
                if gate_with_source_sensor:
                    sensor = _source_sensor(planned, odf_conn_id, base, sensor_settings)
                    apply >> sensor >> ingest
                else:
                    apply >> ingest
                produced[planned.key] = ingest
                continue
            transform = OdfTransformOperator(
                task_id=task_id_for("transform", planned.name),
                dataset=planned.name,
                **common,
                **transform_kwargs,
            )
            # inputs without a task of their own (push roots, external datasets) only need the manifests
            upstream = {produced.get(ref.lower(), apply) for ref in planned.inputs}
            for task in sorted(upstream, key=lambda t: t.task_id):
                task >> transform
            produced[planned.key] = transform
    return dag
