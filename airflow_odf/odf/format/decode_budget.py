"""What decoding one FlatBuffer may produce, in proportion to its length.

Offsets may point anywhere, so a hostile buffer can point a thousand vector slots at one table whose
vector points a thousand times at another: a few hundred bytes that decode to billions of objects, or a
vector of offsets to one long string that decodes to gigabytes. An honest writer stores each value
once, behind at least 4 bytes of its own (a table's offset to its vtable, a vector's or string's
length), so it never needs more than one object per 4 bytes nor more value bytes than the buffer has.
The budget allows twice that.
"""

from __future__ import annotations

from airflow_odf.odf.errors import OdfFormatError

#: Objects (tables, vectors, strings) decoded per byte of buffer: an honest buffer needs at most 1/4.
OBJECTS_PER_BYTE = 0.5
#: Bytes of strings and byte vectors decoded per byte of buffer: an honest buffer needs at most 1.
VALUE_BYTES_PER_BYTE = 2


class DecodeBudget:
    """Counts down the objects and value bytes one buffer may still produce."""

    __slots__ = ("objects_left", "size", "value_bytes_left")

    def __init__(self, size: int) -> None:
        self.size = size
        self.objects_left = int(size * OBJECTS_PER_BYTE)
        self.value_bytes_left = size * VALUE_BYTES_PER_BYTE

    def spend(self, value_bytes: int = 0, where: str = "") -> None:
        """Takes one object, with `value_bytes` bytes of string or byte-vector content; an error names
        `where` (the path being read)."""
        self.objects_left -= 1
        self.value_bytes_left -= value_bytes
        if self.objects_left < 0:
            what = f"{int(self.size * OBJECTS_PER_BYTE)} objects"
        elif self.value_bytes_left < 0:
            what = f"{self.size * VALUE_BYTES_PER_BYTE} bytes of text and binary values"
        else:
            return
        prefix = f"{where}: " if where else ""
        raise OdfFormatError(
            f"{prefix}a buffer of {self.size} bytes decodes to more than {what} "
            "(offsets shared between values)"
        )
