"""The engine job: one request in, one response out, the request handed to the handler of its kind
(ingest_job, transform_job, infer_job, compact_job, query_job).

Runs in-process on a local SparkSession (`run_request`) or as the application of `spark-submit`
(`python job.py --request R --response S`, the pair repeated to answer several requests on one JVM, as
the class-archive warm-up does). Bad input never escapes as a traceback: it is answered with
an error in the response, and nothing is left for the core to commit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import pyspark
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from airflow_odf.engine.errors import ENGINE_STOPPED, EngineInputError, EngineStoppedError
from airflow_odf.engine.executor_sight import require_executors_see
from airflow_odf.engine.ingest_job import ingest, locate_bad_records
from airflow_odf.engine.py4j_errors import Py4JJavaError
from airflow_odf.engine.readers import met_broken_record
from airflow_odf.engine.session import context_stopped, get_session, request_frames
from airflow_odf.engine.spark_errors import CONTEXT_STOPPED, engine_stopped
from airflow_odf.utils.parent_death import die_with_parent

CONTRACT_VERSION = 1
_JAVA_FRAME = re.compile(r"\s*(at |\.\.\. \d+ more$)")
_Handler = Callable[[SparkSession, dict[str, Any]], dict[str, Any]]


def engine_info() -> dict[str, str]:
    return {"name": "spark", "version": pyspark.__version__}


def run_request(spark: SparkSession, request: dict[str, Any]) -> dict[str, Any]:
    """Executes an ingest, transform, infer, compact or query request (`kind`); returns the response,
    `error` set on bad input, on a cluster whose executors cannot see the request's local folder, or
    (kind `engine-stopped`) when the engine stopped under the request."""
    handler = _handler(request.get("kind"))
    # the job's persisted frames (read input, sorted output) are unpersisted at its end
    with request_frames():
        try:
            if request.get("version") != CONTRACT_VERSION:
                raise EngineInputError(
                    "contract", f"request version {request.get('version')!r}, expected {CONTRACT_VERSION}"
                )
            require_executors_see(spark, request)
            response = handler(spark, request)
        except EngineInputError as e:
            response = {"error": {"kind": e.kind, "message": e.message}}
        except EngineStoppedError as e:
            response = _stopped(e.reason)
        except (PySparkException, Py4JJavaError) as e:
            stopped = engine_stopped(e)
            if stopped is not None:
                response = _stopped(stopped)
            elif handler is ingest and met_broken_record(e):
                response = locate_bad_records(spark, request) or _engine_error(e)
            else:
                response = _engine_error(e)
        except Exception:
            if not context_stopped(spark):
                raise
            # stopped while the job was still planning: PySpark's own calls fail in any way then
            # (`F.lit` asserts there is an active SparkContext)
            response = _stopped(CONTEXT_STOPPED)
    error = response.get("error")
    if error is not None and error["kind"] != ENGINE_STOPPED and context_stopped(spark):
        response = _stopped(CONTEXT_STOPPED)  # whatever the failure looked like ("cannot read a.csv")
    return {"version": CONTRACT_VERSION, "engine": engine_info(), **response}


def _engine_error(e: BaseException) -> dict[str, Any]:
    return {"error": {"kind": "engine", "message": _first_lines(str(e))}}


def _stopped(reason: str) -> dict[str, Any]:
    """The error of a request whose engine stopped under it: one line, no Java stack (retried by callers)."""
    return {"error": {"kind": ENGINE_STOPPED, "message": str(EngineStoppedError(reason))}}


def _handler(kind: str | None) -> _Handler:
    """The handler of a request kind. Transform and infer are imported only for their kinds: a job
    compiles its modules from the `--py-files` zip at every start, and an ingest needs neither."""
    if kind == "transform":
        from airflow_odf.engine.transform_job import transform

        return transform
    if kind == "infer":
        from airflow_odf.engine.infer_job import infer

        return infer
    if kind == "compact":
        from airflow_odf.engine.compact_job import compact

        return compact
    if kind == "query":
        from airflow_odf.engine.query_job import query

        return query
    return ingest


def _first_lines(text: str, limit: int = 6) -> str:
    """The message of a Spark error without its Java stack (`at ...` frames, `... N more` elisions)."""
    lines = [line for line in text.splitlines() if line.strip() and not _JAVA_FRAME.match(line)]
    return "\n".join(lines[:limit])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="airflow-odf engine job (engine contract v1)")
    parser.add_argument("--request", action="append", required=True, help="path of a JSON request")
    parser.add_argument("--response", action="append", required=True, help="where its response goes")
    args = parser.parse_args(argv)
    if len(args.request) != len(args.response):
        parser.error("give one --response per --request")
    die_with_parent()  # the driver JVM that started this script: killed, it leaves no job behind
    spark = get_session()
    for request_path, response_path in zip(args.request, args.response, strict=True):
        with open(request_path, encoding="utf-8") as f:
            request = json.load(f)
        response = run_request(spark, request)
        with open(response_path, "w", encoding="utf-8") as f:
            json.dump(response, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
