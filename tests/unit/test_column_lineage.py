"""Column lineage of transform SQL (`airflow_odf.odf.transform.column_lineage`) on the SQL of real
manifests — the examples' and the reference implementation's that the SQL policy accepts — with the
exact mapping each output column gets, and what gives no lineage (refused or unresolvable SQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_odf.odf.format import model
from airflow_odf.odf.format.manifests import read_manifests
from airflow_odf.odf.format.sql_policy import steps_of, transform_inputs
from airflow_odf.odf.transform.column_lineage import ColumnLineage, ColumnOrigin, column_lineage
from tests.paths import REPO, UPSTREAM, skip_without_upstream

EXAMPLES = REPO / "dags_examples"
SYSTEM = ["offset", "op", "system_time", "event_time"]
TRADES = [*SYSTEM, "symbol", "trade_id", "price", "quantity"]


def transform_of(path: Path) -> model.SetTransform:
    [manifest] = read_manifests(path)
    [event] = [e for e in manifest.content.metadata if isinstance(e, model.SetTransform)]
    return event


def lineage_of(
    path: Path, schemas: dict[str, list[str]], output: list[str] | None = None
) -> ColumnLineage | None:
    event = transform_of(path)
    assert sorted(transform_inputs(event)) == sorted(schemas)  # the relation names the SQL reads
    assert isinstance(event.transform, model.TransformSql)
    return column_lineage(steps_of(event.transform), schemas, output)


def upstream(relative: str) -> Path:
    skip_without_upstream()  # fails instead under CI's ODF_REQUIRE_SHARED (tests/conftest.py)
    return UPSTREAM / relative


def o(relation: str, column: str, kind: str) -> ColumnOrigin:
    return ColumnOrigin(relation, column, kind)


def test_daily_volume_through_two_steps() -> None:
    """Step 2 reads step 1's alias with `*`; GROUP BY 1, 2 and ORDER BY are followed to the input."""
    result = lineage_of(EXAMPLES / "manifests/com.example.trades.daily.yaml", {"trades": TRADES})
    assert result == ColumnLineage(
        {
            "event_time": (o("trades", "event_time", "TRANSFORMATION"),),  # CAST(date_trunc(...))
            "symbol": (o("trades", "symbol", "IDENTITY"),),
            "volume": (o("trades", "quantity", "AGGREGATION"),),
            "trades": (),  # COUNT(*) reads no column
        },
        (
            o("trades", "event_time", "GROUP_BY"),
            o("trades", "event_time", "SORT"),
            o("trades", "symbol", "GROUP_BY"),
            o("trades", "symbol", "SORT"),
        ),
    )
    assert list(result.columns) == ["event_time", "symbol", "volume", "trades"]  # the query's order


def test_large_trades_filter_and_computed_column() -> None:
    result = lineage_of(EXAMPLES / "manifests/com.example.trades.large.yaml", {"trades": TRADES})
    assert result == ColumnLineage(
        {
            "event_time": (o("trades", "event_time", "IDENTITY"),),
            "symbol": (o("trades", "symbol", "IDENTITY"),),
            "trade_id": (o("trades", "trade_id", "IDENTITY"),),
            "quantity": (o("trades", "quantity", "IDENTITY"),),
            "notional": (o("trades", "price", "TRANSFORMATION"), o("trades", "quantity", "TRANSFORMATION")),
        },
        (o("trades", "quantity", "FILTER"),),
    )


def test_output_schema_spells_keys_and_system_columns_have_no_origins() -> None:
    """`op` passed through is the input's `op`; `offset` and `system_time`, which the engine writes, get
    no entry; the output schema's spelling wins over the query's."""
    sensors = ["offset", "op", "system_time", "measured_at", "sensor_id", "celsius"]
    output = ["offset", "op", "system_time", "measured_at", "Sensor_ID", "fahrenheit"]
    result = lineage_of(
        EXAMPLES / "manifests/com.example.sensors.fahrenheit.yaml", {"sensors": sensors}, output
    )
    assert result == ColumnLineage(
        {
            "op": (o("sensors", "op", "IDENTITY"),),
            "measured_at": (o("sensors", "measured_at", "IDENTITY"),),
            "Sensor_ID": (o("sensors", "sensor_id", "IDENTITY"),),
            "fahrenheit": (o("sensors", "celsius", "TRANSFORMATION"),),
        }
    )


def test_overdue_shipments_join_window_and_three_steps() -> None:
    orders, shipments = "com.acme.orders", "com.acme.shipments"
    schemas = {orders: [*SYSTEM, "order_id", "quantity"], shipments: [*SYSTEM, "order_id", "quantity"]}
    result = lineage_of(EXAMPLES / "overdue_shipments/manifests/com.acme.shipments.overdue.yaml", schemas)
    assert result == ColumnLineage(
        {
            # `window.start` of GROUP BY window(order_time, '1 day'): order_time is the orders' event_time
            "order_time": (o(orders, "event_time", "TRANSFORMATION"),),
            "order_id": (o(orders, "order_id", "IDENTITY"),),
            "num_shipments": (),
            "first_shipment": (o(shipments, "event_time", "AGGREGATION"),),
            "last_shipment": (o(shipments, "event_time", "AGGREGATION"),),
            "order_quantity": (o(orders, "quantity", "AGGREGATION"),),
            "shipped_quantity_total": (o(shipments, "quantity", "AGGREGATION"),),  # SUM(COALESCE(...))
        },
        (
            o(orders, "event_time", "GROUP_BY"),
            o(orders, "event_time", "JOIN"),  # BETWEEN o.event_time AND ...
            o(orders, "event_time", "SORT"),
            o(orders, "order_id", "GROUP_BY"),
            o(orders, "order_id", "JOIN"),
            o(orders, "order_id", "SORT"),
            o(orders, "quantity", "FILTER"),  # order_quantity <> shipped_quantity_total
            o(shipments, "event_time", "JOIN"),
            o(shipments, "order_id", "JOIN"),
            o(shipments, "quantity", "FILTER"),
        ),
    )


def test_leaderboard_derived_table_and_window_function() -> None:
    scores = ["offset", "op", "system_time", "match_time", "match_id", "player_id", "score"]
    result = lineage_of(upstream("kamu-cli/examples/leaderboard/leaderboard.yaml"), {"player_scores": scores})
    assert result == ColumnLineage(
        {
            "place": (),  # row_number(): its PARTITION BY / ORDER BY decide it (the dataset's WINDOW)
            "match_time": (o("player_scores", "match_time", "IDENTITY"),),
            "match_id": (o("player_scores", "match_id", "IDENTITY"),),
            "player_id": (o("player_scores", "player_id", "IDENTITY"),),
            "score": (o("player_scores", "score", "IDENTITY"),),
        },
        (o("player_scores", "score", "WINDOW"),),
    )


def test_tax_report_union_of_four_inputs_spelled_as_their_schemas() -> None:
    """Kamu's UNION ALL of four yearly datasets: each output column comes from the column at its position
    in every branch; upper-case names are matched case-insensitively, as Spark does."""
    path = upstream(
        "kamu-contrib/ca.vancouver.opendata/property/tax-report/ca.vancouver.opendata.property.tax-report.yaml"
    )
    event = transform_of(path)
    names = transform_inputs(event)
    columns = ["PID", "REPORT_YEAR", "LEGAL_TYPE", "FOLIO", "LAND_COORDINATE", "ZONING_DISTRICT"]
    columns += ["ZONING_CLASSIFICATION", "LOT", "PLAN", "BLOCK", "DISTRICT_LOT", "FROM_CIVIC_NUMBER"]
    columns += ["TO_CIVIC_NUMBER", "STREET_NAME", "PROPERTY_POSTAL_CODE"]
    columns += [f"NARRATIVE_LEGAL_LINE{i}" for i in range(1, 6)]
    columns += ["CURRENT_LAND_VALUE", "CURRENT_IMPROVEMENT_VALUE", "TAX_ASSESSMENT_YEAR"]
    columns += ["PREVIOUS_LAND_VALUE", "PREVIOUS_IMPROVEMENT_VALUE", "YEAR_BUILT", "BIG_IMPROVEMENT_YEAR"]
    columns += ["TAX_LEVY", "NEIGHBOURHOOD_CODE"]
    schemas = {name: ["offset", "op", "system_time", "event_time", *columns] for name in names}
    result = lineage_of(path, schemas, ["offset", "op", "system_time", "event_time", *columns])
    assert result is not None and len(names) == 4
    assert list(result.columns) == columns
    for column in columns:
        assert result.columns[column] == tuple(sorted(o(name, column, "IDENTITY") for name in names))
    assert result.dataset == ()


def test_currency_conversion_temporal_join() -> None:
    rates, transactions = "ca.bankofcanada.exchange-rates.daily", "my.trading.transactions"
    schemas = {
        rates: [*SYSTEM, "currency_base", "currency_target", "rate"],
        transactions: [*SYSTEM, "symbol", "quantity", "price", "settlement", "currency"],
    }
    result = lineage_of(
        upstream("kamu-cli/examples/currency_conversion/my.trading.transactions.cad.yaml"), schemas
    )
    assert result == ColumnLineage(
        {
            "event_time": (o(transactions, "event_time", "IDENTITY"),),
            "symbol": (o(transactions, "symbol", "IDENTITY"),),
            "quantity": (o(transactions, "quantity", "IDENTITY"),),
            "price_usd": (o(transactions, "price", "IDENTITY"),),
            "price_cad": (o(rates, "rate", "TRANSFORMATION"), o(transactions, "price", "TRANSFORMATION")),
            "settlement_usd": (o(transactions, "settlement", "IDENTITY"),),
            "settlement_cad": (
                o(rates, "rate", "TRANSFORMATION"),
                o(transactions, "settlement", "TRANSFORMATION"),
            ),
        },
        (
            o(rates, "currency_base", "JOIN"),
            o(rates, "currency_target", "JOIN"),
            o(transactions, "currency", "JOIN"),
        ),
    )


def test_reth_mint_burn_union_reads_as_spark_reads_it() -> None:
    """Written for DataFusion, where `"from"` is a column; Spark reads a string there, so the burned
    branch gives the holder no column — lineage says what Spark runs."""
    columns = ["block_number", "block_hash", "transaction_index", "transaction_hash", "log_index"]
    columns += ["token_symbol", "event_name", "amount", "eth_amount"]
    schemas = {name: [*SYSTEM, *columns, "to", "from"] for name in ("tokens_minted", "tokens_burned")}
    result = lineage_of(
        upstream("kamu-cli/examples/reth-vs-snp500/net.rocketpool.reth.mint-burn.yaml"), schemas
    )
    assert result is not None
    assert result.columns["holder_address"] == (o("tokens_minted", "to", "IDENTITY"),)
    for column in ["event_time", *columns]:
        both = (o("tokens_burned", column, "IDENTITY"), o("tokens_minted", column, "IDENTITY"))
        assert result.columns[column] == both


def test_ctes_scalar_subquery_table_form_and_struct_fields() -> None:
    schemas = {"t": [*SYSTEM, "Symbol", "price", "qty", "point"], "u": ["offset", "symbol", "name"]}
    steps = [
        ("TABLE t", "x"),
        (
            "WITH a AS (SELECT event_time, symbol AS s, price * qty AS n, point FROM x WHERE qty > 0),\n"
            "     b AS (SELECT * FROM a)\n"
            "SELECT event_time, s, n, point.lat AS lat,\n"
            "       (SELECT max(name) FROM u WHERE u.symbol = b.s) AS name,\n"
            "       sum(n) OVER (PARTITION BY s ORDER BY event_time) AS running\n"
            "FROM b",
            None,
        ),
    ]
    assert column_lineage(steps, schemas) == ColumnLineage(
        {
            "event_time": (o("t", "event_time", "IDENTITY"),),
            "s": (o("t", "Symbol", "IDENTITY"),),
            "n": (o("t", "price", "TRANSFORMATION"), o("t", "qty", "TRANSFORMATION")),
            "lat": (o("t", "point", "TRANSFORMATION"),),
            "name": (o("u", "name", "AGGREGATION"),),
            "running": (o("t", "price", "AGGREGATION"), o("t", "qty", "AGGREGATION")),
        },
        (
            o("t", "Symbol", "FILTER"),  # the sub-query's u.symbol = b.s
            o("t", "Symbol", "WINDOW"),
            o("t", "event_time", "WINDOW"),
            o("t", "qty", "FILTER"),
            o("u", "symbol", "FILTER"),
        ),
    )


def test_join_using() -> None:
    schemas = {"t": ["event_time", "symbol", "price"], "u": ["symbol", "name"]}
    assert column_lineage([("SELECT t.event_time, u.name FROM t JOIN u USING (symbol)", None)], schemas) == (
        ColumnLineage(
            {"event_time": (o("t", "event_time", "IDENTITY"),), "name": (o("u", "name", "IDENTITY"),)},
            (o("t", "symbol", "JOIN"), o("u", "symbol", "JOIN")),
        )
    )


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(
            [("SELECT reflect('java.lang.System', 'getenv', 'HOME') AS v FROM t", None)], id="refused"
        ),
        pytest.param(
            [("SELECT * FROM t", "a"), ("SELECT * FROM csv.`/etc/passwd`", None)], id="refused-step"
        ),
        pytest.param([("SELECT * FROM other", None)], id="not-given"),
        pytest.param([("SELECT event_time, nope FROM t", None)], id="unknown-column"),
        pytest.param([("SELECT * FROM t; SELECT * FROM t", None)], id="two-statements"),
        pytest.param([], id="no-step"),
    ],
)
def test_what_cannot_be_resolved_gives_no_lineage(steps: list[tuple[str, str | None]]) -> None:
    assert column_lineage(steps, {"t": ["event_time", "symbol"]}) is None


def test_sql_written_for_another_engine_that_spark_refuses() -> None:
    """Flink's TUMBLE_START (kamu's own overdue-shipments example) is not Spark SQL: no lineage."""
    schemas = {name: [*SYSTEM, "order_id", "quantity"] for name in ("com.acme.orders", "com.acme.shipments")}
    assert (
        lineage_of(upstream("kamu-cli/examples/overdue_shipments/com.acme.shipments.overdue.yaml"), schemas)
        is None
    )
