"""Work done in a daemon thread while a `with` body runs (hashing ahead, publishing parts)."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TypeVar

_Self = TypeVar("_Self", bound="BackgroundWork")


class BackgroundWork:
    """Runs `_run` in a daemon thread named `name` from the start of the `with` body; at its end, sets
    `_stop` (which `_run` watches) and, with `join`, waits for the thread. Without `join` the body's end
    does not wait for a step under way: the thread ends after it."""

    def __init__(self, name: str, *, join: bool) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._join = join

    def _run(self) -> None:
        raise NotImplementedError

    def _ready(self) -> bool:
        """Whether the thread should start (a subclass may find it has nothing to do)."""
        return True

    def __enter__(self: _Self) -> _Self:
        if self._ready():
            self._thread.start()
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._join and self._thread.is_alive():
            self._thread.join()
