"""`OdfSqlOperator` through `dag.test()` of example DAG 7 (`odf_sql_report`), run without a logical date
as the UI and the REST API start it: a small result as XCom, as of the block the upstream ingest
returned (templated `as_of`), the whole table written to a path templated with the run's date; and a
result above the cap failing with a message saying so."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import Repository
from airflow_odf.operators.sql import OdfSqlOperator
from tests.airflow.dag_runs import load_dag, task_states, xcom


@pytest.mark.usefixtures("airflow_db", "spark")
def test_the_sql_report_dag(odf_repo: Path, tmp_path: Path) -> None:
    dag = load_dag("odf_sql_report.py", "odf_sql_report")
    # as a run started from the UI or the REST API: no logical date (`{{ ds }}` would fail it)
    run = dag.test(logical_date=None, run_conf={"report_dir": str(tmp_path / "reports")})
    assert run.logical_date is None
    assert set(task_states(run).values()) == {"success"}
    assert xcom(run, "symbol_summary") == [
        {"symbol": "ACME", "trades": 3, "quantity": 425},
        {"symbol": "INIT", "trades": 2, "quantity": 30},
    ]
    report = tmp_path / "reports" / f"trades-{run.run_after:%Y-%m-%d}.csv"  # the day it was started
    assert xcom(run, "trades_report") == {"path": str(report), "format": "csv"}
    with report.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["offset"], r["symbol"], r["quantity"]) for r in rows] == [
        ("0", "ACME", "100"),
        ("1", "INIT", "20"),
        ("2", "ACME", "250"),
        ("3", "INIT", "10"),
        ("4", "ACME", "75"),
    ]

    # as of the ingest's first AddData block: the first file's records only
    repo = Repository.open(odf_repo)
    dataset = repo.dataset("com.example.trades")
    first = next(
        str(h) for h, b in reversed(list(dataset.iter_blocks())) if isinstance(b.event, model.AddData)
    )
    files_before = {str(p): p.read_bytes() for p in sorted(odf_repo.rglob("*")) if p.is_file()}
    op = OdfSqlOperator(
        task_id="pinned",
        sql="SELECT trade_id FROM `com.example.trades` ORDER BY offset",
        as_of={"com.example.trades": first},
    )
    assert op.execute({}) == [{"trade_id": 1001}, {"trade_id": 1002}, {"trade_id": 1003}]
    too_big = OdfSqlOperator(task_id="too_big", sql="SELECT * FROM `com.example.trades`", max_rows=2)
    with pytest.raises(AirflowFailException, match="the result has more than 2 rows: write it to a file"):
        too_big.execute({})
    with pytest.raises(
        AirflowFailException, match="statement DROP at line 1, column 1 is refused: only a query runs here"
    ):
        OdfSqlOperator(task_id="drop", sql="DROP VIEW `com.example.trades`").execute({})
    assert {str(p): p.read_bytes() for p in sorted(odf_repo.rglob("*")) if p.is_file()} == files_before


def test_the_operator_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="format='xlsx'"):
        OdfSqlOperator(task_id="bad", sql="SELECT 1", format="xlsx")
    with pytest.raises(ValueError, match="max_rows=0"):
        OdfSqlOperator(task_id="bad", sql="SELECT 1", max_rows=0)
