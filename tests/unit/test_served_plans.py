"""What a Spark Connect client reads of the server's plans (partition_order.py): sizes as the session's
conf states them, and the file scans a formatted physical plan passes on row by row (Spark 4's format)."""

from __future__ import annotations

import pytest

from airflow_odf.engine.partition_order import byte_size, served_scan_count

ROW_BY_ROW_UNION = """== Physical Plan ==
Union (9)
:- * Project (4)
:  +- * Filter (3)
:     +- * ColumnarToRow (2)
:        +- Scan parquet  (1)
+- * Project (8)
   +- * Filter (7)
      +- * ColumnarToRow (6)
         +- Scan parquet  (5)


(1) Scan parquet
Output [2]: [offset#1L, v#2L]
Location: InMemoryFileIndex [file:/tmp/s0.parquet]
"""
AGGREGATE = """== Physical Plan ==
AdaptiveSparkPlan (5)
+- HashAggregate (4)
   +- Exchange (3)
      +- HashAggregate (2)
         +- Scan parquet  (1)


(1) Scan parquet
"""


class _Planned:
    """A frame whose server answers `explain` with `text`."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _explain_string(self, mode: str) -> str:
        assert mode == "formatted"
        return self.text


@pytest.mark.parametrize(
    ("text", "scans"),
    [
        (ROW_BY_ROW_UNION, 2),
        ("== Physical Plan ==\n* ColumnarToRow (2)\n+- Scan parquet  (1)\n\n\n(1) Scan parquet \n", 1),
        (AGGREGATE, None),
        ("== Physical Plan ==\n* Filter (2)\n+- * Scan ExistingRDD (1)\n", None),  # not a file scan
        ("== Physical Plan ==\nLocalTableScan <empty>, [a#1]\n", None),  # a pruned, empty relation
        ("no plan at all", None),
    ],
)
def test_the_scans_of_a_row_by_row_plan_are_counted_and_any_other_plan_has_none(
    text: str, scans: int | None
) -> None:
    assert served_scan_count(_Planned(text)) == scans  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4194304", 4 << 20),
        ("128MB", 128 << 20),
        ("4m", 4 << 20),
        ("1125899906842624b", 1 << 50),
        ("2g", 2 << 30),
    ],
)
def test_sizes_are_read_as_spark_states_them(text: str, size: int) -> None:
    assert byte_size(text) == size


@pytest.mark.parametrize("text", ["", "12 apples", "-1", None])
def test_anything_else_is_no_size(text: str | None) -> None:
    with pytest.raises(ValueError, match="not a size in bytes"):
        byte_size(text)
