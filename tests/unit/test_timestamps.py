"""Nanosecond timestamps: RFC 3339 text and the FlatBuffers struct parts."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.timestamps import Timestamp


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("2050-01-01T12:00:00Z", "2050-01-01T12:00:00Z"),
        ("2050-01-01T12:00:00.5Z", "2050-01-01T12:00:00.500Z"),
        ("2050-01-01T12:00:00.000001Z", "2050-01-01T12:00:00.000001Z"),
        ("2050-01-01T12:00:00.123456789Z", "2050-01-01T12:00:00.123456789Z"),
        ("2050-01-01T13:30:00+01:30", "2050-01-01T12:00:00Z"),
        ("2050-01-01t12:00:00z", "2050-01-01T12:00:00Z"),
        ("1969-12-31T23:59:59.999999999Z", "1969-12-31T23:59:59.999999999Z"),
    ],
)
def test_rfc3339_parse_and_format(text: str, canonical: str) -> None:
    ts = Timestamp.parse(text)
    assert ts.isoformat() == canonical
    assert Timestamp.parse(canonical) == ts


def test_struct_parts_match_the_reference_layout() -> None:
    ts = Timestamp.parse("2050-01-01T12:00:00Z")
    assert ts.parts() == (2050, 1, 43200, 0)
    leap = Timestamp.parse("2024-12-31T00:00:01.000000007Z")
    assert leap.parts() == (2024, 366, 1, 7)
    assert Timestamp.from_parts(*leap.parts()) == leap


def test_ordering_and_datetime_conversion() -> None:
    a = Timestamp.parse("2020-01-01T00:00:00.000000001Z")
    b = Timestamp.parse("2020-01-01T00:00:00.000000002Z")
    assert a < b
    assert a.to_datetime() == datetime(2020, 1, 1, tzinfo=timezone.utc)
    assert Timestamp.from_datetime(datetime(2020, 1, 1, 0, 0, 0, 5)) == Timestamp(a.seconds, 5000)
    assert Timestamp.from_epoch_nanos(b.epoch_nanos()) == b


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01T00:00:00Z", "2024-01-01", "2024-01-01T00:00:00"])
def test_bad_timestamps(text: str) -> None:
    with pytest.raises(OdfFormatError):
        Timestamp.parse(text)


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:59:59-23:59", "9999-12-31T23:59:59.5-00:01", "0001-01-01T00:00:00+00:01"]
)
def test_offsets_that_leave_the_years_1_to_9999_are_a_format_error(text: str) -> None:
    with pytest.raises(OdfFormatError) as info:
        Timestamp.parse(text)
    assert str(info.value) == f"{text!r} is outside the years 0001 to 9999 once moved to UTC"


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("9999-12-31T23:59:59+23:59", "9999-12-31T00:00:59Z"),
        ("0001-01-01T23:59:00-00:00", "0001-01-01T23:59:00Z"),
        ("0001-01-01T00:00:00-00:01", "0001-01-01T00:01:00Z"),
    ],
)
def test_offsets_near_the_ends_of_the_range_that_stay_inside_it(text: str, utc: str) -> None:
    ts = Timestamp.parse(text)
    assert ts.isoformat() == utc
    assert Timestamp.from_parts(*ts.parts()) == ts
