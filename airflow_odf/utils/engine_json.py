"""Objects of the engine contract's JSON that both sides build in Python. The core and the engine may not
import each other, so what both need is defined here once, in the contract's JSON shape (field names
are the JSON keys)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

# a response's error kind: the engine cannot use the checkpoint of a request whose previous slices were
# withheld (`prev_data_withheld`), and asks for them (docs/engine-contract.md)
NEEDS_PREVIOUS_DATA = "needs-previous-data"


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


@dataclass(frozen=True)
class Vocab:
    """The names of the system columns (ODF DatasetVocabulary with every default filled in): a request's
    `vocab` object, which the engine uses to name the columns it reads and writes."""

    offset_column: str = "offset"
    operation_type_column: str = "op"
    system_time_column: str = "system_time"
    event_time_column: str = "event_time"

    @classmethod
    def of(cls, vocab: Any) -> Vocab:
        """The names a SetVocab (or anything with its attributes) sets, the defaults for the rest."""
        defaults = cls()
        return cls(**{f.name: getattr(vocab, f.name, None) or getattr(defaults, f.name) for f in fields(cls)})

    @classmethod
    def from_json(cls, plain: Mapping[str, str]) -> Vocab:
        """From a request's `vocab` object; missing names take their defaults."""
        defaults = cls()
        return cls(**{f.name: plain.get(f.name, getattr(defaults, f.name)) for f in fields(cls)})

    def to_json(self) -> dict[str, str]:
        return asdict(self)
