"""The engine request's deadline without Spark: where its value comes from (argument, $ODF_ENGINE_TIMEOUT,
the default, `--engine-timeout`) and how bad values are refused; the watchdog that stops a request; and
the spark-submit runner killing a job that outlives it (a stand-in `spark-submit` that only sleeps, so
no JVM starts), answered with the one-line `timeout` error."""

from __future__ import annotations

import argparse
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from airflow_odf.cli.engine import LazyRunner, engine_options
from airflow_odf.cli.main import main
from airflow_odf.odf.engine_client.contract import IngestResponse
from airflow_odf.odf.engine_client.runner import EngineDeadlineError, SparkSubmitRunner
from airflow_odf.utils.engine_deadline import (
    APPLICATION_KILLED,
    DEFAULT_ENGINE_TIMEOUT,
    ENGINE_TIMEOUT_VARIABLE,
    TIMEOUT,
    Deadline,
    resolve_engine_timeout,
    timeout_error,
)


def test_the_deadline_is_the_argument_else_the_variable_else_one_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENGINE_TIMEOUT_VARIABLE, raising=False)
    assert resolve_engine_timeout() == DEFAULT_ENGINE_TIMEOUT == 3600
    monkeypatch.setenv(ENGINE_TIMEOUT_VARIABLE, " 90 ")
    assert resolve_engine_timeout() == 90
    assert resolve_engine_timeout("") == 90  # an empty setting is no setting
    assert resolve_engine_timeout(2.5) == 2.5
    assert resolve_engine_timeout("600") == 600


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf", 0, -1.0])
def test_a_deadline_that_is_no_positive_number_is_refused_naming_its_source(
    value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"^engine_timeout .*: expected a number of seconds above 0$"):
        resolve_engine_timeout(value, "engine_timeout")  # type: ignore[arg-type]
    monkeypatch.setenv(ENGINE_TIMEOUT_VARIABLE, str(value))
    with pytest.raises(ValueError, match=rf"^\${ENGINE_TIMEOUT_VARIABLE} .*: expected a number"):
        resolve_engine_timeout()


def test_the_timeout_error_is_one_line_saying_how_to_raise_it() -> None:
    error = timeout_error(4, APPLICATION_KILLED)
    assert error == {
        "kind": TIMEOUT,
        "message": "the engine request exceeded its deadline of 4 s (ODF_ENGINE_TIMEOUT, --engine-timeout, "
        "the operators' engine_timeout); its Spark application was killed",
    }


def test_the_watchdog_stops_a_body_that_outlives_it_again_and_again_until_it_ends() -> None:
    calls: list[int] = []
    twice = threading.Event()

    def expire() -> None:
        calls.append(1)
        if len(calls) == 2:
            twice.set()

    with Deadline(0.01, expire, again=0.01) as deadline:
        assert twice.wait(30)
    assert deadline.passed
    after = len(calls)
    with Deadline(0.01, expire) as once:
        once._thread.join(30)  # it expired, and without `again` it is over
    assert once.passed and len(calls) == after + 1  # again=None: once


def test_the_watchdog_of_a_body_that_ends_in_time_does_nothing() -> None:
    with Deadline(600, lambda: pytest.fail("expired")) as deadline:
        pass
    assert not deadline.passed


def _parse(*argv: str) -> argparse.Namespace:
    return argparse.ArgumentParser(parents=[engine_options()]).parse_args(argv)


def test_engine_timeout_option_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_TIMEOUT_VARIABLE, raising=False)
    assert _parse().engine_timeout is None  # the runners' default: one hour
    assert _parse("--engine-timeout", "30").engine_timeout == 30
    monkeypatch.setenv(ENGINE_TIMEOUT_VARIABLE, "45")
    args = _parse("--engine", "spark-submit")
    assert args.engine_timeout == 45
    assert LazyRunner(args)._create().timeout == 45  # type: ignore[attr-defined]
    monkeypatch.setenv(ENGINE_TIMEOUT_VARIABLE, "never")
    assert _parse("--engine-timeout", "5").engine_timeout == 5  # the option wins over a bad variable


@pytest.mark.parametrize(("option", "variable"), [(["--engine-timeout", "0"], None), ([], "-3")])
def test_a_bad_engine_timeout_fails_the_command_in_one_line(
    option: list[str],
    variable: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    if variable is None:
        monkeypatch.delenv(ENGINE_TIMEOUT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(ENGINE_TIMEOUT_VARIABLE, variable)
    with pytest.raises(SystemExit) as exited:
        main(["pull", "some.dataset", "--repo", str(tmp_path), *option])
    assert exited.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    value = "0" if variable is None else variable
    assert error.endswith(
        f"argument --engine-timeout: '{value}': expected a number of seconds above 0 (--engine-timeout, "
        f"${ENGINE_TIMEOUT_VARIABLE})"
    )


def _sleeping_spark_submit(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for spark-submit that writes its pid and sleeps, and where it writes the pid."""
    pid_file = tmp_path / "spark-submit.pid"
    script = tmp_path / "spark-submit"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    script.chmod(0o755)
    return script, pid_file


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def assert_killed_at_the_deadline(runner: Any, tmp_path: Path, pid_file: Path) -> Path:
    """Runs a request with `runner` (a 0.5 s deadline over the sleeping spark-submit): answered with the
    timeout error, the stand-in killed. Returns the operation folder."""
    work = tmp_path / "operations" / "op"
    work.mkdir(parents=True)
    response = IngestResponse.from_json(runner.run(json.dumps({"version": 1}), work))
    assert response.error is not None
    assert (response.error.kind, response.error.message) == (
        TIMEOUT,
        timeout_error(0.5, APPLICATION_KILLED)["message"],
    )
    assert not _alive(int(pid_file.read_text()))
    return work


def test_spark_submit_past_its_deadline_is_killed_and_answered_with_a_timeout(tmp_path: Path) -> None:
    spark_submit, pid_file = _sleeping_spark_submit(tmp_path)
    runner = SparkSubmitRunner(spark_submit=str(spark_submit), log=lambda _line: None, timeout=0.5)
    work = assert_killed_at_the_deadline(runner, tmp_path, pid_file)
    # several requests in one job (the class-archive warm-up): the same, as an error
    with pytest.raises(EngineDeadlineError, match=r"deadline of 0\.5 s .*its Spark application was killed$"):
        runner.submit([(work / "request.json", work / "response.json")], work, {})
    assert not _alive(int(pid_file.read_text()))
