"""Example DAG 5 end to end: example DAG 1 ingests `com.example.trades` with `dag.test()`; its asset
event queues the consumer DAG through the `odf:com.example.trades` alias (Airflow's own models and
scheduler code decide that); the asset-triggered run the scheduler creates is then run with
`dag.test()`, and its transform pins its input to the head of the triggering event even though the
input moved on before the run started."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.odf.chain.data_access import iter_slices, read_slice
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from tests.airflow.dag_runs import EXAMPLES, load_dag, task_states, xcom

PRODUCER, CONSUMER = "odf_trades_pipeline", "odf_asset_scheduled"
SENSORS = "com.example.sensors"  # what the watcher example follows: pushed from outside Airflow


def sync_examples() -> None:
    """Parses dags_examples into the metadata DB, as the DAG processor (and `dag.test()`) does."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


def unpause(dag_id: str) -> None:
    """What a user does in the UI: asset events queue runs of unpaused DAGs only."""
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.get(DagModel, dag_id).is_paused = False


def scheduler_creates_asset_triggered_run(dag_id: str = CONSUMER) -> str:
    """The scheduler's own two steps: is the DAG due (its asset condition), then create its run."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunType

    with create_session() as session:
        due, _ = DagModel.dags_needing_dagruns(session)
        due = [dm for dm in due if dm.dag_id == dag_id]
        assert due, "the consumer's asset condition is not met"
        runner = SchedulerJobRunner(job=Job(), executors=[])
        runner._create_dag_runs_asset_triggered(dag_models=due, session=session)
        run = (
            session.query(DagRun)
            .filter(DagRun.dag_id == dag_id, DagRun.run_type == DagRunType.ASSET_TRIGGERED)
            .one()
        )
        return run.run_id


def run_existing(dag: Any, run_id: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`dag.test()` on the run the scheduler created (it would otherwise create a manual run)."""
    import airflow.models.dagrun as dagrun_module
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState

    def existing_run(*, dag: Any, session: Any, **_: Any) -> DagRun:
        run = session.query(DagRun).filter(DagRun.dag_id == dag.dag_id, DagRun.run_id == run_id).one()
        run.state = DagRunState.RUNNING
        run.dag = dag
        session.commit()
        return run

    monkeypatch.setattr(dagrun_module, "get_or_create_dagrun", existing_run)
    return dag.test()


def consumed_events(run_id: str, uri: str) -> list[dict[str, Any]]:
    """The events of the asset `uri` the run consumed. Only those: the metadata DB is shared by the
    session's tests, whose datasets of the same name (other ids) are assets of the same alias."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.run_id == run_id).one()
        return [
            {"uri": e.asset.uri, "extra": e.extra, "source_dag_id": e.source_dag_id}
            for e in run.consumed_asset_events
            if e.asset.uri == uri
        ]


def rendered(run_id: str, task_id: str) -> dict[str, Any]:
    """The task's template fields as rendered in that run (what the UI shows)."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(RenderedTaskInstanceFields).filter_by(run_id=run_id, task_id=task_id).one()
        return dict(row.rendered_fields)


def scheduling_references(did: str) -> dict[str, Any]:
    """How the metadata DB links the consumer to the producer's asset (`did`'s): alias reference, the
    alias resolved to that asset, a run queued for it. Other tests' datasets of the same name (other
    ids) may be assets of the alias too: only this one's are looked at."""
    from airflow.models.asset import AssetAliasModel, AssetDagRunQueue, DagScheduleAssetAliasReference
    from airflow.utils.session import create_session

    uri = f"odf://{did.removeprefix('did:odf:').lower()}"
    with create_session() as session:
        refs = session.query(DagScheduleAssetAliasReference).filter_by(dag_id=CONSUMER).all()
        alias = session.query(AssetAliasModel).filter_by(name="odf:com.example.trades").one()
        queued = session.query(AssetDagRunQueue).filter_by(target_dag_id=CONSUMER).all()
        return {
            "scheduled_on_aliases": sorted(session.get(AssetAliasModel, r.alias_id).name for r in refs),
            "alias_assets": sorted((a.name, a.uri) for a in alias.assets if a.uri == uri),
            "queued_assets": sorted(q.asset.uri for q in queued if q.asset.uri == uri),
            "expected_uri": uri,
        }


@pytest.mark.usefixtures("airflow_db", "spark")
def test_asset_scheduled_dag(odf_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sync_examples()
    unpause(CONSUMER)

    # 1. the producer (example DAG 1) ingests; only its ingest matters here
    producer = load_dag("odf_trades_pipeline.py", PRODUCER)
    produced = producer.test(mark_success_pattern="transform_daily|verify_daily")
    assert task_states(produced)["ingest_trades"] == "success"
    ingested = xcom(produced, "ingest_trades")
    repo = Repository.open(odf_repo)
    trades = repo.dataset("com.example.trades")
    event_head = ingested["new_head"]
    assert event_head == str(trades.head())

    # 2. Airflow linked the consumer to the trades asset through the alias and queued a run
    links = scheduling_references(ingested["dataset_id"])
    assert links["scheduled_on_aliases"] == ["odf:com.example.trades"]
    assert links["alias_assets"] == [("com.example.trades", links["expected_uri"])]
    assert links["queued_assets"] == [links["expected_uri"]]
    run_id = scheduler_creates_asset_triggered_run()
    [event] = consumed_events(run_id, links["expected_uri"])
    assert event["uri"] == links["expected_uri"] and event["source_dag_id"] == PRODUCER
    assert event["extra"] == {"head": event_head, "prev_head": ingested["prev_head"]}

    # 3. the input moves on before the consumer runs (another commit, metadata only)
    trades.commit([model.SetInfo(description="Trades, republished")])
    assert str(trades.head()) != event_head

    # 4. the asset-triggered run: transform pinned to the event's head, not the current one
    consumer = load_dag("odf_asset_scheduled.py", CONSUMER)
    consumed = run_existing(consumer, run_id, monkeypatch)
    assert consumed.run_id == run_id
    assert task_states(consumed) == {"apply_manifest": "success", "transform_large_trades": "success"}
    pinned = rendered(run_id, "transform_large_trades")["input_heads"]
    assert pinned == {"com.example.trades": event_head}  # from triggering_asset_events
    large = repo.dataset("com.example.trades.large")
    transformed = xcom(consumed, "transform_large_trades")
    assert transformed["new_head"] == str(large.head()) and transformed["records"] == 2
    execute = large.block(large.head()).event
    assert isinstance(execute, model.ExecuteTransform)
    [trades_input] = execute.query_inputs
    assert str(trades_input.new_block_hash) == event_head
    rows = []
    for data in iter_slices(large):
        table = read_slice(large, data)
        rows += zip(table["trade_id"].to_pylist(), table["quantity"].to_pylist(), strict=True)
    assert sorted(rows) == [(1001, 100), (1003, 250)]


def root_dataset(root: Path, name: str = "com.example.trades") -> Repository:
    """The repository with the example root `name` created from its manifest (metadata only, no Spark)."""
    from airflow_odf.odf.format.manifests import read_manifests

    repo = Repository.init(root)
    [manifest] = read_manifests(EXAMPLES / "manifests" / f"{name}.yaml")
    repo.add(manifest.content)
    return repo


def move_head(repo: Repository, text: str) -> str:
    trades = repo.dataset("com.example.trades")
    trades.commit([model.SetInfo(description=text)])
    return str(trades.head())


@pytest.mark.usefixtures("airflow_db")
def test_follower_dag_defers_until_the_head_moves(odf_repo: Path) -> None:
    """`OdfHeadChangedSensor(deferrable=True)` under `dag.test()`: its trigger runs in line; the second
    run waits from the head the first run saw until a commit moves it."""
    repo = root_dataset(odf_repo)
    first_head = str(repo.dataset("com.example.trades").head())
    dag = load_dag("odf_asset_scheduled.py", "odf_trades_follower")
    sensor = dag.get_task("wait_for_trades")
    assert sensor.deferrable
    sensor.poke_interval = 0.2  # the example polls every minute
    skip_spark = "apply_manifest|transform_notional"

    # the dataset holds no record yet: the short circuit skips the transform
    skipped = {"has_records": "success", "apply_manifest": "skipped", "transform_notional": "skipped"}
    first = dag.test(mark_success_pattern=skip_spark)
    assert task_states(first) == {"wait_for_trades": "success", **skipped}
    seen = xcom(first, "wait_for_trades")
    assert seen == {
        "dataset": "com.example.trades",
        "dataset_id": str(repo.resolve("com.example.trades")),
        "head": first_head,
        "prev_head": None,
    }

    moved: list[str] = []
    mover = threading.Timer(3.0, lambda: moved.append(move_head(repo, "moved while waiting")))
    mover.start()
    started = time.monotonic()
    second = dag.test(mark_success_pattern=skip_spark)
    mover.join()
    assert task_states(second) == {"wait_for_trades": "success", **skipped}  # a SetInfo: no record
    assert time.monotonic() - started >= 3.0  # it waited for the commit
    assert xcom(second, "wait_for_trades")["prev_head"] == first_head
    assert xcom(second, "wait_for_trades")["head"] == moved[0]


@pytest.mark.usefixtures("airflow_db")
def test_follower_transforms_a_head_that_holds_records(odf_repo: Path) -> None:
    """`has_records` lets the run go on at a head with records, and tells a head before them."""
    from tests.unit.test_compaction import build_root

    repo = Repository.init(odf_repo)
    build_root(repo, "cities", [3])
    cities = repo.dataset("cities")
    empty = next(str(h) for h, b in cities.iter_blocks() if isinstance(b.event, model.SetDataSchema))
    check = load_dag("odf_asset_scheduled.py", "odf_trades_follower").get_task("has_records")
    assert check.python_callable({"dataset": "cities", "head": str(cities.head())}) is True
    assert check.python_callable({"dataset": "cities", "head": empty}) is False


def push_sensors(repo: Repository, tmp_path: Path) -> str:
    """Readings pushed into `com.example.sensors` from outside Airflow, as `odf ingest` does; its new head."""
    from airflow_odf.engine.local_runner import LocalSparkRunner
    from airflow_odf.odf.ingest.options import IngestOptions
    from airflow_odf.odf.ingest.push import push_ingest

    files = [EXAMPLES / "data" / "sensors-1.ndjson"]
    options = IngestOptions(work_dir=tmp_path / "work")
    pushed = push_ingest(repo.dataset(SENSORS), SENSORS, LocalSparkRunner("local[2]"), files, options)
    assert pushed.new_head is not None
    return pushed.new_head


@pytest.mark.usefixtures("airflow_db", "spark")
def test_watcher_dag_runs_on_the_head_event_trigger(
    odf_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `AssetWatcher` variant: Airflow stores the watcher's trigger with the asset; run as the
    triggerer would while readings are pushed from outside Airflow, its event becomes an asset event
    (Airflow's `Trigger.submit_event`) that queues the DAG, and the run's transform, pinned to the
    event's head, converts exactly those readings (the changelog's `op` passed through)."""
    import asyncio

    from airflow.models.asset import AssetModel
    from airflow.models.trigger import Trigger
    from airflow.sdk._shared.module_loading import import_string
    from airflow.serialization.decoders import smart_decode_trigger_kwargs
    from airflow.triggers.base import TriggerEvent
    from airflow.utils.session import create_session

    from tests.airflow.test_triggers import first_event

    repo = root_dataset(odf_repo, SENSORS)
    did = str(repo.resolve(SENSORS))
    monkeypatch.setenv("ODF_EXAMPLE_SENSORS_DID", did)
    sync_examples()
    unpause("odf_asset_watcher")
    sync_examples()  # watchers are registered for assets of unpaused DAGs only
    uri = f"odf://{did.removeprefix('did:odf:').lower()}"
    with create_session() as session:
        asset = session.query(AssetModel).filter_by(uri=uri).one()
        [watcher] = asset.watchers
        stored = watcher.trigger
        trigger_id, classpath = stored.id, stored.classpath
        kwargs = {k: smart_decode_trigger_kwargs(v) for k, v in stored.kwargs.items()}
    assert (asset.name, watcher.name) == (SENSORS, "com_example_sensors_head")
    assert classpath == "airflow_odf.triggers.head.OdfHeadEventTrigger" and kwargs["dataset"] == did

    trigger = import_string(classpath)(**{**kwargs, "poll_interval": 0.1})
    moved: list[str] = []
    payload = asyncio.run(first_event(trigger, during=lambda: moved.append(push_sensors(repo, tmp_path))))
    assert payload["head"] == moved[0]
    Trigger.submit_event(trigger_id=trigger_id, event=TriggerEvent(payload))

    run_id = scheduler_creates_asset_triggered_run("odf_asset_watcher")
    [event] = consumed_events(run_id, uri)
    assert event["uri"] == uri and event["extra"] == {"from_trigger": True, "payload": payload}
    consumer = load_dag("odf_asset_scheduled.py", "odf_asset_watcher")
    ran = run_existing(consumer, run_id, monkeypatch)
    assert rendered(run_id, "transform_fahrenheit")["input_heads"] == {SENSORS: moved[0]}
    assert task_states(ran) == {"apply_manifest": "success", "transform_fahrenheit": "success"}
    fahrenheit = repo.dataset("com.example.sensors.fahrenheit")
    rows = []
    for data in iter_slices(fahrenheit):
        table = read_slice(fahrenheit, data)
        columns = (table[c].to_pylist() for c in ("op", "sensor_id", "fahrenheit"))
        rows += zip(*columns, strict=True)
    assert sorted(rows) == [(0, "s1", pytest.approx(70.7)), (0, "s2", pytest.approx(66.2))]  # +A; 21.5, 19 °C
