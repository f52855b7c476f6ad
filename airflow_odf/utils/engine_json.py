"""Objects of the engine contract's JSON that both sides build in Python. The core and the engine may not
import each other, so what both need is defined here once, in the contract's JSON shape (field names
are the JSON keys)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TypeWidening:
    """A column the engine holds as a coarser type than its source gives (e.g. uint8 -> short): what
    was given, what Spark holds, and why. An InferResponse's `widenings` are these, as JSON objects."""

    column: str
    arrow_type: str
    spark_type: str
    reason: str

    def __str__(self) -> str:
        return f"{self.column}: {self.arrow_type} -> {self.spark_type} ({self.reason})"
