"""The engine options shared by the `odf` commands that run Spark (`--engine`, `--master`), and
`odf engine warm-up`.

The engine is the in-process local Spark (default) or `spark-submit` (`--engine spark-submit --master
URL`), also chosen with $ODF_ENGINE and $ODF_SPARK_MASTER. The runner is created on first use, so a
command that turns out not to need Spark never imports pyspark nor starts a JVM.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_odf.odf.engine_client.runner import EngineRunner


def engine_options() -> argparse.ArgumentParser:
    """A parent parser with `--engine` and `--master`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--engine", choices=("local", "spark-submit"), default=os.environ.get("ODF_ENGINE", "local")
    )
    parent.add_argument("--master", default=os.environ.get("ODF_SPARK_MASTER"), help="Spark master URL")
    return parent


class LazyRunner:
    """The engine runner the options ask for, created when a request first needs it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._engine: str = args.engine
        self._master: str = args.master or "local[*]"
        self._runner: EngineRunner | None = None

    def run(self, request_json: str, work_dir: Path) -> str:
        if self._runner is None:
            self._runner = self._create()
        return self._runner.run(request_json, work_dir)

    def _create(self) -> EngineRunner:
        if self._engine == "spark-submit":
            from airflow_odf.odf.engine_client.runner import SparkSubmitRunner

            return SparkSubmitRunner(self._master, log=lambda line: print(line, file=sys.stderr))
        from airflow_odf.odf.engine_client.fast_start import fast_start_conf
        from airflow_odf.odf.engine_client.runner import require_local_spark

        require_local_spark()
        from airflow_odf.engine.local_runner import LocalSparkRunner  # imports pyspark: only when needed

        return LocalSparkRunner(self._master, fast_start_conf({}, self._master, None))


def cmd_engine_warm_up(args: argparse.Namespace) -> None:
    from airflow_odf.odf.engine_client.warm_up import build_class_archive

    archive = build_class_archive(args.master, log=lambda line: print(line, file=sys.stderr))
    size = archive.stat().st_size / 2**20
    print(f"{archive} ({size:.0f} MiB): used by local spark-submit jobs from now on")


def register(groups: Any) -> None:
    """Adds `engine warm-up` to the `odf` parser."""
    engine = groups.add_parser("engine", help="prepare the Spark engine of this machine").add_subparsers(
        dest="engine_command", required=True
    )
    p = engine.add_parser(
        "warm-up", help="make the class archive that lets small local spark-submit jobs start faster"
    )
    p.add_argument("--master", default="local[*]", help="a local Spark master (default local[*])")
    p.set_defaults(func=cmd_engine_warm_up)
