"""UTC timestamps with nanosecond precision (the reference writes `Utc::now()` with nanoseconds).

Python's `datetime` holds only microseconds, so a `Timestamp` keeps whole epoch seconds and the
nanoseconds of that second; both the FlatBuffers struct and RFC 3339 text round-trip exactly.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from airflow_odf.odf.errors import OdfFormatError, quoted

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
# The range of `datetime` (and of the reference's text form): 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_MIN_SECONDS = (date.min.toordinal() - _EPOCH_ORDINAL) * 86400
_MAX_SECONDS = (date.max.toordinal() - _EPOCH_ORDINAL) * 86400 + 86399
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)


@dataclass(frozen=True, order=True, slots=True)
class Timestamp:
    """A point in time: `seconds` since the Unix epoch (UTC) and `nanosecond` within that second."""

    seconds: int
    nanosecond: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.nanosecond < 1_000_000_000:
            raise OdfFormatError(f"nanosecond must be in [0, 1e9), got {self.nanosecond}")

    # ----- construction -----

    @classmethod
    def now(cls) -> Timestamp:
        return cls.from_epoch_nanos(time.time_ns())

    @classmethod
    def from_epoch_nanos(cls, nanos: int) -> Timestamp:
        seconds, nanosecond = divmod(nanos, 1_000_000_000)
        return cls(seconds, nanosecond)

    @classmethod
    def from_datetime(cls, value: datetime) -> Timestamp:
        """A naive datetime is taken as UTC."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return cls(delta.days * 86400 + delta.seconds, delta.microseconds * 1000)

    @classmethod
    def from_parts(cls, year: int, ordinal: int, seconds_from_midnight: int, nanosecond: int) -> Timestamp:
        """From the FlatBuffers `Timestamp` struct fields (ordinal = 1-based day of the year)."""
        if not 1 <= ordinal <= 365 + calendar.isleap(year) or not 0 <= seconds_from_midnight < 86400:
            raise OdfFormatError(f"invalid timestamp parts: day {ordinal}, second {seconds_from_midnight}")
        try:
            day = date(year, 1, 1).toordinal() + ordinal - 1 - _EPOCH_ORDINAL
        except ValueError as e:
            raise OdfFormatError(f"invalid timestamp year {year}: {e}") from None
        return cls(day * 86400 + seconds_from_midnight, nanosecond)

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        """RFC 3339 with up to nine fractional digits and a `Z` or `±HH:MM` offset."""
        if isinstance(text, datetime):
            return cls.from_datetime(text)
        if not isinstance(text, str):
            raise OdfFormatError(f"expected an RFC 3339 timestamp string, got {type(text).__name__}")
        m = _RFC3339.match(text.strip())
        if not m:
            raise OdfFormatError(f"{quoted(text)} is not an RFC 3339 timestamp (e.g. 2024-01-31T12:00:00Z)")
        year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
        fraction = m.group(7) or ""
        try:
            local = datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
        except ValueError as e:
            raise OdfFormatError(f"{text!r} is not a valid timestamp: {e}") from None
        seconds = cls.from_datetime(local).seconds
        if m.group(9):  # in whole seconds: the datetime arithmetic would overflow near years 1 and 9999
            offset = int(m.group(10)) * 3600 + int(m.group(11)) * 60
            seconds -= offset if m.group(9) == "+" else -offset
        if not _MIN_SECONDS <= seconds <= _MAX_SECONDS:
            raise OdfFormatError(f"{text!r} is outside the years 0001 to 9999 once moved to UTC")
        return cls(seconds, int(fraction.ljust(9, "0")) if fraction else 0)

    # ----- conversion -----

    def parts(self) -> tuple[int, int, int, int]:
        """`(year, ordinal, seconds_from_midnight, nanosecond)` for the FlatBuffers struct."""
        days, seconds_from_midnight = divmod(self.seconds, 86400)
        day = date.fromordinal(days + _EPOCH_ORDINAL)
        return day.year, day.timetuple().tm_yday, seconds_from_midnight, self.nanosecond

    def to_datetime(self) -> datetime:
        """Aware UTC datetime; sub-microsecond digits are truncated."""
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
            seconds=self.seconds, microseconds=self.nanosecond // 1000
        )

    def epoch_nanos(self) -> int:
        return self.seconds * 1_000_000_000 + self.nanosecond

    def isoformat(self) -> str:
        """RFC 3339 in UTC with `Z`, fraction of 0, 3, 6 or 9 digits as needed (the reference's AutoSi)."""
        dt = self.to_datetime()
        text = f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}"
        ns = self.nanosecond
        if ns == 0:
            return text + "Z"
        if ns % 1_000_000 == 0:
            return f"{text}.{ns // 1_000_000:03d}Z"
        if ns % 1000 == 0:
            return f"{text}.{ns // 1000:06d}Z"
        return f"{text}.{ns:09d}Z"

    def __str__(self) -> str:
        return self.isoformat()
