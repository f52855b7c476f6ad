"""`odf rename` renames only: a derivative reads its inputs by DID, so it keeps transforming (real local
Spark) after its input is renamed, and after it is renamed itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.cli.main import main
from airflow_odf.engine.local_runner import LocalSparkRunner
from airflow_odf.odf.format import model
from airflow_odf.odf.repo.repository import DatasetNotFoundError, Repository
from tests.engine.test_transform_pipeline import ORDERS, Env, _derivative, _root

TOTALS = "orders.totals"
RENAMED = "com.acme.orders-v2"


@pytest.fixture
def env(runner: LocalSparkRunner, tmp_path: Path) -> Env:
    repo = Repository.init(tmp_path / "repo")
    _root(repo, ORDERS, ["event_time TIMESTAMP", "order_id BIGINT", "quantity BIGINT"])
    return Env(repo, runner, tmp_path)


def test_a_derivative_keeps_transforming_after_a_rename(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _derivative(env.repo, TOTALS, [(None, f"SELECT event_time, order_id, quantity FROM `{ORDERS}`")], ORDERS)
    orders_id = env.repo.resolve(ORDERS)
    env.push(ORDERS, "2024-01-01T10:00:00Z,1,10\n")
    env.transform(TOTALS)

    assert main(["rename", ORDERS, RENAMED, "--repo", str(env.repo.root)]) == 0
    assert f"renamed {ORDERS} to {RENAMED} ({orders_id})" in capsys.readouterr().out
    with pytest.raises(DatasetNotFoundError):
        env.repo.resolve(ORDERS)
    assert env.repo.resolve(RENAMED) == orders_id
    assert env.repo.names_of(orders_id) == [RENAMED]
    # the derivative's input is the DID: it resolves to the renamed dataset; the alias its query uses stays
    (transform_input,) = env.repo.dataset(TOTALS).state().transform.inputs
    assert transform_input.dataset_ref == str(orders_id) and transform_input.alias == ORDERS

    input_head = env.push(RENAMED, "2024-01-02T10:00:00Z,2,5\n")
    result = env.transform(TOTALS)
    assert not result.up_to_date
    (last,) = env.executes(TOTALS)[-1:]
    assert [(i.dataset_id, str(i.new_block_hash)) for i in last.query_inputs] == [(orders_id, input_head)]
    assert env.rows(TOTALS, "order_id", "quantity") == [(0, 0, 1, 10), (1, 0, 2, 5)]

    # renaming the derivative itself: it transforms under its new name
    assert main(["rename", TOTALS, "orders.totals-v2", "--repo", str(env.repo.root)]) == 0
    env.push(RENAMED, "2024-01-03T10:00:00Z,3,7\n")
    env.transform("orders.totals-v2")
    assert env.rows("orders.totals-v2", "order_id") == [(0, 0, 1), (1, 0, 2), (2, 0, 3)]
    assert isinstance(env.events("orders.totals-v2")[-1], model.ExecuteTransform)
