"""Timestamp formats in manifests: strftime (what kamu parses) and Java SimpleDateFormat (what the spec says).

`EventTimeSource::FromPath.timestampFormat` is documented by the spec as SimpleDateFormat (`yyyy-MM-dd`)
while the reference parses it with chrono strftime (`%Y-%m-%d`); a format containing `%` is strftime.
"""

from __future__ import annotations

import re
from datetime import datetime

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.timestamps import Timestamp

DEFAULT_FORMAT = "%Y-%m-%d"

_JAVA_TOKEN = re.compile(r"''|'(?:[^']|'')*'|([A-Za-z])\1*|.", re.DOTALL)
_JAVA_FIXED = {
    "d": "%d",
    "D": "%j",
    "H": "%H",
    "h": "%I",
    "m": "%M",
    "s": "%S",
    "S": "%f",
    "a": "%p",
    "Z": "%z",
    "X": "%z",
    "z": "%Z",
}
_CHRONO_FRACTION = re.compile(r"%\.?\d?f")


def _java_field(letter: str, count: int, fmt: str) -> str:
    if letter == "y":
        return "%y" if count == 2 else "%Y"
    if letter == "M":
        return "%m" if count <= 2 else "%b" if count == 3 else "%B"
    if letter == "E":
        return "%a" if count <= 3 else "%A"
    if letter in _JAVA_FIXED:
        return _JAVA_FIXED[letter]
    raise OdfFormatError(f"SimpleDateFormat {fmt!r}: pattern letter {letter!r} is not supported")


def java_to_strftime(fmt: str) -> str:
    """Translate a SimpleDateFormat pattern (`yyyyMMdd'T'HHmmss`) to a strptime one (`%Y%m%dT%H%M%S`)."""
    out = []
    for m in _JAVA_TOKEN.finditer(fmt):
        token = m.group(0)
        if m.group(1):
            out.append(_java_field(m.group(1), len(token), fmt))
        elif token.startswith("'"):
            out.append("'" if token == "''" else token[1:-1].replace("''", "'").replace("%", "%%"))
        else:
            out.append(token.replace("%", "%%"))
    return "".join(out)


def to_strptime(fmt: str) -> str:
    """Python's strptime form of a manifest format; chrono's `%.3f`-style fractions become `.%f`."""
    if "%" not in fmt:
        return java_to_strftime(fmt)
    return _CHRONO_FRACTION.sub(lambda m: ".%f" if "." in m.group(0) else "%f", fmt).replace("%:z", "%z")


def parse_timestamp(text: str, fmt: str | None) -> Timestamp:
    """Parse `text` with a manifest format; without an offset in the text the time is taken as UTC.

    A date-only format gives midnight UTC, as the reference's fall-back to a date does.
    """
    fmt = fmt or DEFAULT_FORMAT
    directive = to_strptime(fmt)
    try:
        return Timestamp.from_datetime(datetime.strptime(text, directive))
    except ValueError as e:
        raise OdfFormatError(f"{text!r} does not have the timestamp format {fmt!r}: {e}") from None
