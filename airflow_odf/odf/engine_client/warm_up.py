"""`odf engine warm-up`: makes the class archive that lets small local engine jobs start fast.

One `spark-submit` job answers a tiny ingest (CSV read, offsets, Parquet write) and a tiny transform
(Parquet read in offset order, SQL, slice write) on one JVM started with `-XX:ArchiveClassesAtExit`: at
its exit the JVM stores every class it loaded, and later engine jobs on this machine map them instead of
loading them again (see `fast_start`). The archive is written beside its final name and renamed into
place only when the job answered both requests, so a failed or concurrent warm-up never leaves a
half-written archive where jobs look for it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_odf.odf.engine_client.contract import (
    IngestRequest,
    IngestResponse,
    InputFile,
    SqlStep,
    TransformInputSpec,
    TransformRequest,
    schema_to_text,
)
from airflow_odf.odf.engine_client.fast_start import (
    DRIVER_JAVA_OPTIONS,
    class_archive_path,
    is_local_master,
    java_option,
)
from airflow_odf.odf.engine_client.runner import EngineRunError, SparkSubmitRunner

_DATASET_ID = "did:odf:fed01" + "00" * 32
_SYSTEM_TIME = "2024-01-01T00:00:00Z"
_CSV = "event_time,city,population\n2024-01-01T00:00:00Z,A,1000\n2024-01-02T00:00:00Z,B,2000\n"
_QUERY = "SELECT event_time, city, population * 2 AS doubled FROM `warm-up.root` WHERE city > ''"
_DATA_SCHEMA = pa.schema(
    [("event_time", pa.timestamp("ms", tz="UTC")), ("city", pa.string()), ("population", pa.int64())]
)


def build_class_archive(
    master: str = "local[*]",
    *,
    spark_submit: str = "spark-submit",
    directory: Path | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Runs the warm-up job on `master` (a local one) and returns the archive it made."""
    if not is_local_master(master):
        raise EngineRunError(f"a class archive is made and used on local masters only, not {master!r}")
    target = class_archive_path(directory)
    if target is None:
        raise EngineRunError("cannot find the Spark installation (set SPARK_HOME) or java (set JAVA_HOME)")
    target.parent.mkdir(parents=True, exist_ok=True)
    dump = target.with_name(f"{target.name}.tmp{os.getpid()}")
    runner = SparkSubmitRunner(master, spark_submit=spark_submit, log=log, fast_start=False)
    try:
        with tempfile.TemporaryDirectory(prefix="odf-warm-up-") as tmp:
            work = Path(tmp) / "op"
            work.mkdir()
            requests = _write_requests(work)
            dump_option = java_option("-XX:ArchiveClassesAtExit", dump)
            # the JVM lists every class it cannot archive (signed jars, old class files): not worth a log
            runner.submit(requests, work, {DRIVER_JAVA_OPTIONS: f"{dump_option} -Xlog:cds=off"})
            for _, response_path in requests:
                response = IngestResponse.from_json(response_path.read_bytes())
                if response.error is not None:
                    raise EngineRunError(f"the warm-up job failed: {response.error.message}")
        if not dump.is_file():
            raise EngineRunError("the JVM wrote no class archive (dynamic archives need Java 13 or later)")
        os.replace(dump, target)
    finally:
        dump.unlink(missing_ok=True)
    return target


def _write_requests(work: Path) -> list[tuple[Path, Path]]:
    """An ingest and a transform request over tiny inputs in `work`, as (request, response) paths."""
    csv = work / "input.csv"
    csv.write_text(_CSV, encoding="utf-8")
    ingest = IngestRequest(
        operation_id="warm-up-ingest",
        dataset_id=_DATASET_ID,
        dataset_alias="warm-up.root",
        system_time=_SYSTEM_TIME,
        next_offset=0,
        inputs=[InputFile(str(csv), _SYSTEM_TIME)],
        read={"kind": "Csv", "header": True},
        merge={"kind": "Append"},
        out_dir=str(work / "ingest-out"),
        read_schema=schema_to_text(_DATA_SCHEMA),
    )
    slice_path, input_slice = work / "slice.parquet", _input_slice()
    pq.write_table(input_slice, slice_path)
    transform = TransformRequest(
        operation_id="warm-up-transform",
        dataset_id=_DATASET_ID,
        dataset_alias="warm-up.derivative",
        system_time=_SYSTEM_TIME,
        next_offset=0,
        queries=[SqlStep(_QUERY)],
        inputs=[
            TransformInputSpec(
                alias="warm-up.root",
                dataset_id=_DATASET_ID,
                schema=schema_to_text(input_slice.schema),
                data_paths=[str(slice_path)],
                offset_start=0,
                offset_end=1,
            )
        ],
        out_dir=str(work / "transform-out"),
    )
    pairs = []
    for name, request in (("ingest", ingest), ("transform", transform)):
        request_path = work / f"{name}-request.json"
        request_path.write_text(request.to_json(), encoding="utf-8")
        pairs.append((request_path, work / f"{name}-response.json"))
    return pairs


def _input_slice() -> pa.Table:
    """Two records of a root dataset as its slice file holds them (system columns first)."""
    system_time = pa.scalar(0, pa.timestamp("ms", tz="UTC"))
    return pa.table(
        {
            "offset": pa.array([0, 1], pa.int64()),
            "op": pa.array([0, 0], pa.int32()),
            "system_time": pa.array([system_time, system_time]),
            "event_time": pa.array([1704067200000, 1704153600000], pa.timestamp("ms", tz="UTC")),
            "city": ["A", "B"],
            "population": pa.array([1000, 2000], pa.int64()),
        }
    )
