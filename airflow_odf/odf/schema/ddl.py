"""Parser of the deprecated `ddlSchema` of ODF read steps (Spark SQL DDL columns) into an ODF `DataSchema`.

As the reference implementation does it: every column (and struct field) is nullable - wrapped in
`DataTypeOption` - unless it says `NOT NULL`; `TIMESTAMP` is `Timestamp(ms, "UTC")`; array elements and
map values are nullable, map keys are not. `COMMENT '...'` goes to the field's extra as a description.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.model import (
    DataField,
    DataSchema,
    DataType,
    DataTypeBinary,
    DataTypeBool,
    DataTypeDate,
    DataTypeDecimal,
    DataTypeFloat32,
    DataTypeFloat64,
    DataTypeInt8,
    DataTypeInt16,
    DataTypeInt32,
    DataTypeInt64,
    DataTypeList,
    DataTypeMap,
    DataTypeOption,
    DataTypeString,
    DataTypeStruct,
    DataTypeTimestamp,
    ExtraAttributes,
    TimeUnit,
)

__all__ = ["DESCRIPTION", "parse_ddl_schema", "parse_ddl_type"]

#: Extra attribute holding a column's `COMMENT`.
DESCRIPTION = "opendatafabric.org/description"

#: Spark's default precision and scale of a bare `DECIMAL`, and its maximum precision.
_DEFAULT_DECIMAL = (10, 0)
_MAX_DECIMAL_PRECISION = 38
#: Limits that keep hostile input from exhausting the stack or building huge integers.
_MAX_DEPTH = 64
_MAX_DIGITS = 9


def _timestamp_utc() -> DataType:
    return DataTypeTimestamp(unit=TimeUnit.MILLISECOND, timezone="UTC")


def _timestamp_ntz() -> DataType:
    return DataTypeTimestamp(unit=TimeUnit.MILLISECOND, timezone=None)


#: Simple (non-nested) types: name -> (factory, accepts a length parameter like VARCHAR(n)).
_SIMPLE: dict[str, tuple[Callable[[], DataType], bool]] = {
    "STRING": (DataTypeString, False),
    "TEXT": (DataTypeString, False),
    "VARCHAR": (DataTypeString, True),
    "CHAR": (DataTypeString, True),
    "BOOLEAN": (DataTypeBool, False),
    "BOOL": (DataTypeBool, False),
    "TINYINT": (DataTypeInt8, False),
    "BYTE": (DataTypeInt8, False),
    "SMALLINT": (DataTypeInt16, False),
    "SHORT": (DataTypeInt16, False),
    "INT": (DataTypeInt32, False),
    "INTEGER": (DataTypeInt32, False),
    "BIGINT": (DataTypeInt64, False),
    "LONG": (DataTypeInt64, False),
    "FLOAT": (DataTypeFloat32, False),
    "REAL": (DataTypeFloat32, False),
    "DOUBLE": (DataTypeFloat64, False),
    "DATE": (DataTypeDate, False),
    "TIMESTAMP": (_timestamp_utc, False),
    "TIMESTAMP_LTZ": (_timestamp_utc, False),
    "TIMESTAMP_NTZ": (_timestamp_ntz, False),
    "BINARY": (DataTypeBinary, False),
}
_DECIMALS = ("DECIMAL", "NUMERIC")
_NESTED = ("ARRAY", "MAP", "STRUCT")
_EXPECTED_TYPES = ", ".join([*_SIMPLE, *_DECIMALS, *(f"{n}<...>" for n in _NESTED)])

_IDENT_STOP = set(" \t\r\n:,<>()`'\"")
_OPEN = {"<": ">", "(": ")"}


class _Error(Exception):
    """A parse problem at a position; turned into an `OdfFormatError` with the column's context."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


class _Parser:
    """Recursive-descent parser over one column definition (or one type)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    # -- lexing -------------------------------------------------------------------------------------
    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text)

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def describe_here(self) -> str:
        self.skip_ws()
        if self.pos >= len(self.text):
            return "end of text"
        return f"{self.text[self.pos : self.pos + 20]!r} at position {self.pos}"

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise _Error(f"expected {what}, found {self.describe_here()}", self.pos)
        self.pos += 1

    def accept(self, char: str) -> bool:
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def word(self) -> str:
        """An unquoted identifier or keyword (may be empty)."""
        self.skip_ws()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _IDENT_STOP:
            self.pos += 1
        return self.text[start : self.pos]

    def accept_keyword(self, keyword: str) -> bool:
        save = self.pos
        if self.word().upper() == keyword:
            return True
        self.pos = save
        return False

    def name(self, what: str) -> str:
        """A column/field name: a word or a backquoted name (`` `` `` escapes a backquote)."""
        self.skip_ws()
        start = self.pos
        if self.accept("`"):
            parts: list[str] = []
            while True:
                end = self.text.find("`", self.pos)
                if end < 0:
                    raise _Error(f"unterminated backquoted {what}", start)
                parts.append(self.text[self.pos : end])
                self.pos = end + 1
                if self.text.startswith("`", self.pos):
                    parts.append("`")
                    self.pos += 1
                    continue
                break
            name = "".join(parts)
            if not name:
                raise _Error(f"empty {what} ``", start)
            return name
        name = self.word()
        if not name:
            raise _Error(f"expected a {what}, found {self.describe_here()}", start)
        return name

    def string_literal(self) -> str:
        """A quoted string; a backslash escapes the next character, a doubled quote is one quote."""
        self.skip_ws()
        start = self.pos
        quote = self.peek()
        if quote not in ("'", '"'):
            raise _Error(f"expected a quoted comment string, found {self.describe_here()}", start)
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text):
                out.append(self.text[self.pos + 1])
                self.pos += 2
            elif ch == quote:
                if self.text.startswith(quote, self.pos + 1):
                    out.append(quote)
                    self.pos += 2
                else:
                    self.pos += 1
                    return "".join(out)
            else:
                out.append(ch)
                self.pos += 1
        raise _Error("unterminated comment string", start)

    def integer(self, what: str) -> int:
        self.skip_ws()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isascii() and self.text[self.pos].isdigit():
            self.pos += 1
        if start == self.pos:
            raise _Error(f"expected {what} (an integer), found {self.describe_here()}", start)
        if self.pos - start > _MAX_DIGITS:
            raise _Error(f"{what} {self.text[start : self.pos]} is too large", start)
        return int(self.text[start : self.pos])

    # -- grammar ------------------------------------------------------------------------------------
    def field(self, what: str) -> DataField:
        """`name [:] TYPE [NOT NULL] [COMMENT 'text']`."""
        name = self.name(f"{what} name")
        self.accept(":")
        if self.at_end() or self.peek() in (",", ">", ")"):
            raise _Error(f"missing type of {what} {name!r}", self.pos)
        t = self.type()
        nullable = True
        extra: ExtraAttributes | None = None
        while True:
            if self.accept_keyword("NOT"):
                if not self.accept_keyword("NULL"):
                    raise _Error(f"expected NULL after NOT, found {self.describe_here()}", self.pos)
                if not nullable:
                    raise _Error("NOT NULL given twice", self.pos)
                nullable = False
            elif self.accept_keyword("COMMENT"):
                if extra is not None:
                    raise _Error("COMMENT given twice", self.pos)
                extra = {DESCRIPTION: self.string_literal()}
            else:
                break
        return DataField(name=name, type=DataTypeOption(inner=t) if nullable else t, extra=extra)

    def type(self) -> DataType:
        """One type, possibly nested."""
        self.depth += 1
        try:
            return self._type()
        finally:
            self.depth -= 1

    def _type(self) -> DataType:
        self.skip_ws()
        start = self.pos
        if self.depth > _MAX_DEPTH:
            raise _Error(f"types nested deeper than {_MAX_DEPTH} levels", start)
        raw = self.word()
        if not raw:
            raise _Error(f"expected a type ({_EXPECTED_TYPES}), found {self.describe_here()}", start)
        name = raw.upper()
        if name in _NESTED:
            self.expect("<", f"'<' after {name}")
            if name == "ARRAY":
                item = self.type()
                self.expect(">", "'>' closing ARRAY<")
                return DataTypeList(item_type=DataTypeOption(inner=item))
            if name == "MAP":
                key = self.type()
                self.expect(",", "',' between MAP key and value types")
                value = self.type()
                self.expect(">", "'>' closing MAP<")
                return DataTypeMap(key_type=key, value_type=DataTypeOption(inner=value))
            fields: list[DataField] = []
            if not self.accept(">"):
                while True:
                    fields.append(self.field("struct field"))
                    if self.accept(">"):
                        break
                    self.expect(",", "',' or '>' in STRUCT<")
            _check_unique([f.name for f in fields], "struct field", start)
            return DataTypeStruct(fields=fields)
        if name in _DECIMALS:
            precision, scale = _DEFAULT_DECIMAL
            if self.accept("("):
                precision = self.integer(f"{name} precision")
                scale = self.integer(f"{name} scale") if self.accept(",") else 0
                self.expect(")", f"')' closing {name}(")
                if not 1 <= precision <= _MAX_DECIMAL_PRECISION or scale > precision:
                    raise _Error(
                        f"invalid {name}({precision},{scale}): expected 1 <= precision <= "
                        f"{_MAX_DECIMAL_PRECISION} and 0 <= scale <= precision",
                        start,
                    )
            return DataTypeDecimal(precision=precision, scale=scale)
        if name in _SIMPLE:
            factory, takes_length = _SIMPLE[name]
            if self.peek() == "(":
                if not takes_length:
                    raise _Error(f"{name} takes no parameters", self.pos)
                self.pos += 1
                self.integer(f"{name} length")
                self.expect(")", f"')' closing {name}(")
            elif takes_length:
                raise _Error(
                    f"expected '(' and a length after {name}, found {self.describe_here()}", self.pos
                )
            return factory()
        raise _Error(f"unknown type {raw} (expected {_EXPECTED_TYPES})", start)


def _check_unique(names: list[str], what: str, pos: int) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise _Error(f"duplicate {what} name {n!r}", pos)
        seen.add(n)


def _split_columns(text: str) -> list[str]:
    """Split on top-level commas (outside `<>`/`()`, backquotes and quoted strings)."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "`'\"":
            i += 1
            while i < len(text) and text[i] != ch:
                i += 2 if ch != "`" and text[i] == "\\" else 1
        elif ch in _OPEN:
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    if len(parts) > 1 and not parts[-1].strip():
        parts.pop()  # a trailing comma, as in the spec's example
    return parts


def _balance_error(text: str) -> _Error | None:
    """The first unbalanced bracket outside quotes, if any (gives clearer messages than the parser)."""
    stack: list[tuple[str, int]] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "`'\"":
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if ch != "`" and text[j] == "\\" else 1
            if j >= len(text):
                return None  # unterminated quote: the parser reports it
            i = j
        elif ch in _OPEN:
            stack.append((ch, i))
        elif ch in ">)":
            if not stack:
                return _Error(f"unbalanced brackets: {ch!r} at position {i} has no opening bracket", i)
            opener, pos = stack.pop()
            if _OPEN[opener] != ch:
                return _Error(
                    f"unbalanced brackets: {opener!r} at position {pos} closed by {ch!r} at position {i}", i
                )
        i += 1
    if stack:
        opener, pos = stack[-1]
        return _Error(f"unbalanced brackets: {opener!r} at position {pos} is never closed", pos)
    return None


def _parse_column(text: str) -> DataField:
    balance = _balance_error(text)
    if balance is not None:
        raise balance
    parser = _Parser(text)
    if parser.at_end():
        raise _Error("empty column definition (expected 'name TYPE')", 0)
    field = parser.field("column")
    if not parser.at_end():
        raise _Error(
            f"unexpected {parser.describe_here()} (expected NOT NULL, COMMENT '...' or end of column)",
            parser.pos,
        )
    return field


def parse_ddl_schema(columns: list[str] | str) -> DataSchema:
    """The ODF schema of a `ddlSchema`: a list of column definitions or one string of comma-separated ones.

    Raises `OdfFormatError` naming the column (index and text) and what was expected.
    """
    if isinstance(columns, str):
        items = _split_columns(columns) if columns.strip() else []
    elif isinstance(columns, list | tuple):
        items = list(columns)
    else:
        raise OdfFormatError(
            f"ddlSchema: expected a list of column definitions, got {type(columns).__name__}"
        )
    fields: list[DataField] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise OdfFormatError(f"ddlSchema[{i}]: expected a string, got {type(item).__name__}")
        try:
            fields.append(_parse_column(item))
            _check_unique([f.name for f in fields], "column", 0)
        except _Error as e:
            raise OdfFormatError(f"ddlSchema[{i}] {item.strip()!r}: {e.message}") from None
    return DataSchema(fields=fields)


def parse_ddl_type(text: str) -> DataType:
    """The ODF type of one DDL type such as `DECIMAL(10,2)` or `ARRAY<STRING>` (not wrapped in Option)."""
    if not isinstance(text, str):
        raise OdfFormatError(f"DDL type: expected a string, got {type(text).__name__}")
    try:
        balance = _balance_error(text)
        if balance is not None:
            raise balance
        parser = _Parser(text)
        t = parser.type()
        if not parser.at_end():
            raise _Error(f"unexpected {parser.describe_here()} after the type", parser.pos)
        return t
    except _Error as e:
        raise OdfFormatError(f"DDL type {text.strip()!r}: {e.message}") from None
