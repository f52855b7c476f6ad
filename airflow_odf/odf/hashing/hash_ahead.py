"""A transform's slice, hashed ahead while the engine runs: its system columns, and its data columns
from Spark's part files as the engine publishes them (`parts_ahead`).

A transform's slice holds `offset` = next offset, next + 1, ..., `system_time` = the request's time, and
(unless the query selects one) `op` = +A in every row: values known before the engine has written a
row. Their logical-hash column streams (a third of the logical-hash work of the benchmark's slice) are
fed in a background thread while the coordinator waits for the engine, at the lowest CPU priority
(SCHED_IDLE on Linux) so that it takes only what the engine leaves idle, with the hasher's state kept
every 64 Ki rows. Once the slice is written, a column continues from the latest state within its row
count, but only when its values, read back from the file, are exactly the known ones
(`parquet_hashes`): the hash is always the file's. Published parts are hashed first when
there are any: the system columns are hashed up to the batch's input records, usually more than the
output holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.hashing.arrow_digest import column_type_bytes
from airflow_odf.odf.hashing.parquet_hashes import HashedParts, KnownColumn
from airflow_odf.odf.hashing.parts_ahead import PartsAhead
from airflow_odf.utils.background import BackgroundWork

ROWS_PER_STATE = 1 << 16
"""Rows between two kept hasher states: the most a column hashes again after the engine has answered."""
POLL_SECONDS = 0.01
"""How often the published parts are looked for once nothing else is left to hash."""


class _ColumnAhead:
    """One known column, value `first + step * row`: its hasher's states so far (the background thread
    appends, readers take copies)."""

    def __init__(self, name: str, arrow_type: pa.DataType, first: int, step: int) -> None:
        self.type_bytes = column_type_bytes(arrow_type, name)
        self.width = arrow_type.bit_width // 8
        self._first, self._step, self._rows = first, step, ROWS_PER_STATE
        self._dtype = np.dtype(f"<i{self.width}")
        self._ramp = np.arange(self._rows, dtype=self._dtype) * step
        self._buffer = np.full(self._rows, first, dtype=self._dtype)
        self._states = [hashlib.sha3_256(self.type_bytes)]  # state k: after k * self._rows rows

    def advance(self) -> None:
        """Hashes the next rows. The GIL is held only for microseconds (numpy's ufuncs and SHA3 release
        it), so that this low-priority thread never keeps others waiting for it."""
        k = len(self._states) - 1
        if self._step:
            np.add(self._ramp, self._first + self._step * k * self._rows, out=self._buffer)
        state = self._states[k].copy()
        state.update(self._buffer.view(np.uint8))
        self._states.append(state)

    def hasher_at(self, rows: int) -> tuple[Any, int]:
        states = self._states
        k = min(rows // self._rows, len(states) - 1)
        return states[k].copy(), k * self._rows

    def expected(self, start: int, count: int) -> np.ndarray:
        if not self._step:
            return np.full(count, self._first, dtype=self._dtype)
        first = self._first + self._step * start
        return np.arange(first, first + self._step * count, self._step, dtype=self._dtype)


class HashAhead(BackgroundWork):
    """Hashes a transform slice's known system columns in the background while the `with` body runs
    (the engine), up to `max_rows` rows (the batch's input records: more is rarely needed, and the rest
    is hashed from the file), and the parts published in `parts_dir`. `columns` and `parts` are what
    `parquet_hashes` takes as `known` and `parts`."""

    def __init__(
        self,
        *,
        offset: str,
        op: str,
        system_time: str,
        next_offset: int,
        time: Timestamp,
        max_rows: int,
        parts_dir: Path | None = None,
    ) -> None:
        millis = time.epoch_nanos() // 1_000_000
        self._ahead = {
            offset: _ColumnAhead(offset, pa.int64(), next_offset, 1),
            op: _ColumnAhead(op, pa.int32(), 0, 0),
            system_time: _ColumnAhead(system_time, pa.timestamp("ms", tz="UTC"), millis, 0),
        }
        self.columns: dict[str, KnownColumn] = dict(self._ahead)
        self._max_rows = max_rows
        self._parts = PartsAhead(parts_dir) if parts_dir is not None else None
        super().__init__("odf-hash-ahead", join=False)  # a state under way is not waited for

    @property
    def parts(self) -> HashedParts | None:
        return self._parts.hashed if self._parts is not None else None

    def _run(self) -> None:
        _lowest_priority()
        rows = 0
        while not self._stop.is_set():
            if self._parts is not None and self._parts.hash_next(self._stop):
                continue
            if rows < self._max_rows:
                for column in self._ahead.values():
                    column.advance()
                rows += ROWS_PER_STATE
            elif self._parts is None:
                return
            else:
                self._stop.wait(POLL_SECONDS)


def _lowest_priority() -> None:
    """This thread only gets CPU time nothing else wants. Linux: the thread's own policy, SCHED_IDLE,
    under which any other thread that wakes up takes the CPU at once (at nice 19 it would wait for the
    end of a time slice; the engine's request then took 0.1 s longer on 2 cores, measured), else nice 19."""
    if not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        os.sched_setscheduler(thread, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, thread, 19)
