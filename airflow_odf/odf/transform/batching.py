"""Batching a derivative's transforms: is there enough unprocessed input to run it now?

kamu's batching rule (its flow configuration's `minRecordsToAwait` / `maxBatchingInterval`): a
derivative is transformed once its inputs together hold at least N records it has not processed, or
once T has passed since the first input change it has not processed — whichever comes first, and
only when there is some change at all. A change is what a transform would consume: a block adding
records or a watermark (kamu counts a watermark change too).

The question is answered cheaply, so that a sensor or trigger can ask it every minute:

- the records come from the summaries alone: per input, its last offset (its head's summary) minus
  the last offset the derivative's ExecuteTransforms read of it (the derivative's summary) — no block
  is read;
- the time of the first unprocessed change needs the input's blocks after the last one processed
  (never the whole chain), and only while the records are not enough; a `BacklogCache` kept across
  checks reads each of those blocks once: once the first change is found it cannot change until the
  derivative processes it.

The heads read are the pins: a transform pinned to them processes exactly the records counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.repo.repository import Repository

# the planner's own resolution of inputs and of what was processed, so both count the same blocks
from airflow_odf.odf.transform.plan import (
    InputDivergedError,
    ResolvedInput,
    TransformPlanError,
    last_processed,
    resolve_input,
)

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*\Z")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: The manifest-style names of the rule's settings (as kamu's flow configuration spells them).
RULE_KEYS = ("minRecordsToAwait", "maxBatchingInterval")


class BatchingRuleError(OdfError):
    """A batching rule that cannot be: N below 1, T not a positive duration, an unknown setting."""


def parse_interval(value: Any) -> float:
    """Seconds of a `maxBatchingInterval`: a number of seconds, a `timedelta`, or `30s`, `15m`, `1h`, `2d`."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
    else:
        raise BatchingRuleError(
            f"maxBatchingInterval {value!r}: expected seconds, a timedelta or a duration "
            "such as 30s, 15m, 1h, 2d"
        )
    if not seconds > 0:
        raise BatchingRuleError(f"maxBatchingInterval {value!r}: must be a positive duration")
    return seconds


@dataclass(frozen=True)
class BatchingRule:
    """Run when the unprocessed input records reach `min_records_to_await`, or `max_batching_interval`
    seconds after the first unprocessed change (None: wait for the records only)."""

    min_records_to_await: int = 1
    max_batching_interval: float | None = None

    def __post_init__(self) -> None:
        n = self.min_records_to_await
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BatchingRuleError(f"minRecordsToAwait {n!r}: must be a whole number of at least 1")
        if self.max_batching_interval is not None:
            object.__setattr__(self, "max_batching_interval", parse_interval(self.max_batching_interval))

    @classmethod
    def from_plain(cls, plain: Any, where: str = "batching") -> BatchingRule:
        """From `{"minRecordsToAwait": N, "maxBatchingInterval": T}` (either may be left out)."""
        if not isinstance(plain, dict):
            raise BatchingRuleError(f"{where}: expected a mapping with {' and/or '.join(RULE_KEYS)}")
        unknown = sorted(set(plain) - set(RULE_KEYS))
        if unknown or not plain:
            raise BatchingRuleError(
                f"{where}: unknown setting(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
                f"expected {' and/or '.join(RULE_KEYS)}"
            )
        try:
            return cls(plain.get("minRecordsToAwait", 1), plain.get("maxBatchingInterval"))
        except BatchingRuleError as e:
            raise BatchingRuleError(f"{where}: {e}") from None

    def as_plain(self) -> dict[str, Any]:
        return {
            "minRecordsToAwait": self.min_records_to_await,
            "maxBatchingInterval": self.max_batching_interval,
        }


@dataclass
class BacklogCache:
    """What earlier checks learnt of each input's unprocessed blocks, so a block is read once.

    Keyed by (input, the derivative's last processed block of it): the head walked down from and the
    first unprocessed change found below it (None: none yet). A new ExecuteTransform changes the key.
    """

    walked: dict[tuple[DatasetId, Multihash | None], tuple[Multihash, Timestamp | None]] = field(
        default_factory=dict
    )


@dataclass(frozen=True)
class InputBacklog:
    """One input's unprocessed part: blocks `(processed_block, head]`, records after `processed_offset`."""

    alias: str
    name: str
    dataset_id: DatasetId
    head: Multihash
    processed_block: Multihash | None
    new_records: int
    first_change: Timestamp | None
    ready: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "dataset": self.name,
            "dataset_id": str(self.dataset_id),
            "head": str(self.head),
            "processed_block": None if self.processed_block is None else str(self.processed_block),
            "new_records": self.new_records,
            "first_change": None if self.first_change is None else str(self.first_change),
        }


@dataclass(frozen=True)
class BatchingStatus:
    """The rule evaluated for a derivative at `now`; `input_heads` are the pins that go with it."""

    dataset: str
    dataset_id: DatasetId
    rule: BatchingRule
    inputs: tuple[InputBacklog, ...]
    now: Timestamp

    @property
    def new_records(self) -> int:
        return sum(i.new_records for i in self.inputs)

    @property
    def ready(self) -> bool:
        """False while an input was never pulled (the transform could not run)."""
        return all(i.ready for i in self.inputs)

    @property
    def first_change(self) -> Timestamp | None:
        times = [i.first_change for i in self.inputs if i.first_change is not None]
        return min(times) if times else None

    @property
    def deadline(self) -> Timestamp | None:
        """When the interval ends: first unprocessed change + T (None without a change or a T)."""
        first, interval = self.first_change, self.rule.max_batching_interval
        if first is None or interval is None:
            return None
        return Timestamp.from_epoch_nanos(first.epoch_nanos() + round(interval * 1e9))

    @property
    def reason(self) -> str | None:
        """`records` (N reached), `interval` (T passed since the first change), or None (not yet)."""
        if not self.ready or (self.new_records == 0 and self.first_change is None):
            return None
        if self.new_records >= self.rule.min_records_to_await:
            return "records"
        deadline = self.deadline
        if deadline is not None and self.now >= deadline:
            return "interval"
        return None

    @property
    def satisfied(self) -> bool:
        return self.reason is not None

    def seconds_to_deadline(self) -> float | None:
        """Seconds until the interval ends (0 once it has), None when no interval is running."""
        deadline = self.deadline
        if deadline is None:
            return None
        return max(0.0, (deadline.epoch_nanos() - self.now.epoch_nanos()) / 1e9)

    def input_heads(self) -> dict[str, str]:
        """Input DID -> the head counted: what the transform must be pinned to."""
        return {str(i.dataset_id): str(i.head) for i in self.inputs}

    def describe(self) -> str:
        """One line for logs: how far the rule is, and what satisfied it."""
        counts = ", ".join(f"{i.alias}: {i.new_records}" for i in self.inputs)
        wanted = self.rule.min_records_to_await
        text = f"{self.dataset}: {self.new_records} new input record(s) ({counts}) of {wanted}"
        not_ready = [i.alias for i in self.inputs if not i.ready]
        if not_ready:
            return f"{text}; not ready: input(s) {', '.join(not_ready)} never pulled"
        deadline = self.deadline
        if deadline is not None:
            text += f"; the batching interval since {self.first_change} ends at {deadline}"
        elif self.first_change is None and self.new_records == 0:
            text += "; nothing unprocessed yet"
        reason = self.reason
        if reason == "records":
            return f"{text}: enough records, transform now"
        if reason == "interval":
            return f"{text}: the interval has passed, transform now"
        return f"{text}: waiting"

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (trigger events, XCom)."""
        return {
            "dataset": self.dataset,
            "dataset_id": str(self.dataset_id),
            "satisfied": self.satisfied,
            "reason": self.reason,
            "new_records": self.new_records,
            **self.rule.as_plain(),
            "first_change": None if self.first_change is None else str(self.first_change),
            "deadline": None if self.deadline is None else str(self.deadline),
            "input_heads": self.input_heads(),
            "inputs": [i.as_dict() for i in self.inputs],
        }


def check_batching(
    repo: Repository,
    dataset: str,
    rule: BatchingRule,
    *,
    now: Timestamp | None = None,
    cache: BacklogCache | None = None,
) -> BatchingStatus:
    """Evaluates `rule` for the derivative `dataset` of `repo` at `now` (default: the clock).

    Reads the summaries of the derivative and of each input; reads input blocks only to date the first
    unprocessed change, and only while the records are below N and the rule has an interval. Raises
    TransformPlanError for what planning the transform would refuse (not a derivative, a missing
    input) and InputDivergedError when an input no longer holds the block last processed.
    """
    derivative = repo.dataset(dataset)
    state = derivative.state()
    name = repo.name_of(derivative)
    if state.kind is not model.DatasetKind.DERIVATIVE or state.transform is None:
        raise TransformPlanError(f"{name} is not a Derivative dataset with a SetTransform: nothing to batch")
    assert state.dataset_id is not None
    now = now if now is not None else Timestamp.now()
    cache = cache if cache is not None else BacklogCache()
    inputs = [resolve_input(repo, i, ti) for i, ti in enumerate(state.transform.inputs)]
    counted = []
    for inp in inputs:
        processed_block, processed_offset = last_processed(state, inp)
        last = inp.state.last_offset
        records = 0 if last is None else max(0, last - (-1 if processed_offset is None else processed_offset))
        counted.append((inp, processed_block, records))
    total = sum(records for _, _, records in counted)
    need_time = rule.max_batching_interval is not None and total < rule.min_records_to_await
    backlogs = []
    for inp, processed_block, records in counted:
        assert inp.state.head is not None  # resolve_input refuses an input without one
        first = _first_change(inp, processed_block, cache, name) if need_time else None
        backlogs.append(
            InputBacklog(
                alias=inp.alias,
                name=inp.name,
                dataset_id=inp.dataset_id,
                head=inp.state.head,
                processed_block=processed_block,
                new_records=records,
                first_change=first,
                ready=inp.state.schema is not None,
            )
        )
    return BatchingStatus(name, state.dataset_id, rule, tuple(backlogs), now)


def _first_change(
    inp: ResolvedInput, processed_block: Multihash | None, cache: BacklogCache, derivative: str
) -> Timestamp | None:
    """The system time of the input's first block after `processed_block` that adds records or a
    watermark; None when there is none. Reads only blocks no earlier check of `cache` has read."""
    head = inp.state.head
    if head is None or head == processed_block:
        return None
    key = (inp.dataset_id, processed_block)
    walked_to, first = cache.walked.get(key, (None, None))
    if first is not None:  # the earliest change below the processed block stays the earliest
        return first
    if walked_to == head:
        return None
    stops = {processed_block, walked_to} - {None}
    h: Multihash | None = head
    while h is not None and h not in stops:  # stopping before reading a block already known
        block = inp.dataset.block(h)
        event = block.event
        if isinstance(event, model.AddData | model.ExecuteTransform) and (
            event.new_data is not None or event.new_watermark is not None
        ):
            first = block.system_time  # walking back: the last one met is the earliest
        h = block.prev_block_hash
    if h is None and processed_block is not None:
        raise InputDivergedError(inp.alias, inp.dataset_id, processed_block, derivative)
    for stale in [k for k in cache.walked if k[0] == inp.dataset_id and k != key]:
        del cache.walked[stale]  # processed since: those blocks are not the backlog any more
    cache.walked[key] = (head, first)
    return first
