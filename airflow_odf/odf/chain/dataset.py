"""A dataset: its metadata chain and objects in an object store, with atomic, validated commits.

Layout (spec "Dataset Layout"): `blocks/<hash>`, `refs/head` (no trailing newline), `data/<physical
hash>`, `checkpoints/<physical hash>`, `info/`. A commit writes objects first, then blocks, then moves
`refs/head` by compare-and-swap — a crash at any step leaves the old head, and of two racing writers
exactly one moves the head; the other gets `ConflictError` and nothing of its commit is visible. A commit
declares the keys it will reference before it stores any (`chain/in_flight.py`), so that `odf gc` never
deletes an object, even an old one it re-uses, between its object step and its head move. A dataset whose
key this repository holds signs each new head: its attestation (`attestations/<head>`,
`chain/head_signature.py`) is stored after the blocks and before the ref moves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_odf.odf.chain.head_signature import HeadSigner
from airflow_odf.odf.chain.in_flight import Intent, declaring
from airflow_odf.odf.chain.rules import ChainState, apply_block
from airflow_odf.odf.chain.summary import MAX_SUMMARY_BYTES, SUMMARY_KEY, state_from_json, state_to_json
from airflow_odf.odf.errors import BlockDecodeError, ChainRuleError, ManifestError, OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import block_hash, decode_block, encode_block
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.identity.attestation import attestation_key
from airflow_odf.odf.storage.store import ConflictError, ObjectNotFoundError, ObjectStore

HEAD_REF = "refs/head"
#: Where an engine that writes into the dataset's bucket stages an operation's output
#: (`cache/operations/<operation id>/`) until the commit copies it to its content address.
STAGING_PREFIX = "cache/operations"

log = logging.getLogger(__name__)


class CorruptDatasetError(OdfError):
    """The stored chain is damaged: a missing or tampered block, or blocks that break the rules."""


def _parse_head(raw: bytes | None) -> Multihash | None:
    if raw is None:
        return None
    try:
        return Multihash.parse(raw.decode().strip())
    except (OdfError, UnicodeDecodeError) as e:
        raise CorruptDatasetError(f"{HEAD_REF} does not hold a block hash: {e}") from None


def block_key(h: Multihash) -> str:
    return f"blocks/{h}"


class _CurrentHead:
    """Sentinel: guard a commit with whatever the head is when it starts."""

    def __repr__(self) -> str:
        return "CURRENT_HEAD"


CURRENT_HEAD = _CurrentHead()
ExpectedHead = Multihash | str | _CurrentHead | None


def _expected(value: ExpectedHead) -> Multihash | _CurrentHead | None:
    return Multihash.parse(value) if isinstance(value, str) else value


@dataclass(frozen=True)
class StagedObject:
    """An object to store as `data/<hash>` or `checkpoints/<hash>` in the same commit: a local file
    (`path`), or an object the engine wrote into the same store (`source_key`, in its staging area),
    which is copied inside the store."""

    key: str
    path: Path | None = None
    move: bool = True
    source_key: str | None = None


@dataclass(frozen=True)
class CommitResult:
    """`attested`: the new head's attestation was stored with it (signed here, or received)."""

    old_head: Multihash | None
    new_head: Multihash | None
    new_blocks: list[Multihash] = field(default_factory=list)
    state: ChainState = field(default_factory=ChainState)
    attested: bool = False

    @property
    def up_to_date(self) -> bool:
        return not self.new_blocks


class Dataset:
    """One dataset in a store. Cheap to create; state is read through the summary index. `signer`
    signs the heads it commits (None: a dataset this process only reads or receives)."""

    def __init__(self, store: ObjectStore, signer: HeadSigner | None = None) -> None:
        self.store = store
        self.signer = signer

    def __repr__(self) -> str:
        return f"Dataset({self.store!r})"

    @property
    def on_local_disk(self) -> bool:
        """Whether its objects are files on this machine (staged files are moved in, not uploaded)."""
        return self.store.local_path("data") is not None

    # ----- reading -----

    def head(self) -> Multihash | None:
        return _parse_head(self.store.get_or_none(HEAD_REF))

    def existing_head(self) -> Multihash:
        """The head of a dataset that must exist (a named one): a missing `refs/head` is damage, not an
        empty dataset — reading it as empty would hide, or let `gc` delete, every block there is."""
        head = self.head()
        if head is None:
            blocks = sum(1 for _ in self.store.list("blocks"))
            raise CorruptDatasetError(f"{HEAD_REF} is missing (the dataset has {blocks} block(s))")
        return head

    def block_bytes(self, h: Multihash, *, verify: bool = True) -> bytes:
        try:
            data = self.store.get(block_key(h))
        except ObjectNotFoundError:
            raise CorruptDatasetError(f"block {h} is missing") from None
        if verify and block_hash(data) != h:
            raise CorruptDatasetError(f"block {h} is corrupt: its bytes hash to {block_hash(data)}")
        return data

    def block(self, h: Multihash) -> model.MetadataBlock:
        try:
            return decode_block(self.block_bytes(h))
        except BlockDecodeError as e:
            raise CorruptDatasetError(f"block {h} cannot be decoded: {e}") from None

    def iter_blocks(
        self, start: Multihash | None = None, stop: Multihash | None = None
    ) -> Iterator[tuple[Multihash, model.MetadataBlock]]:
        """Blocks from `start` (default: head) back to the Seed, or until (excluding) `stop`."""
        h = start if start is not None else self.head()
        while h is not None and h != stop:
            block = self.block(h)
            yield h, block
            h = block.prev_block_hash

    def state(self, *, record: bool = True) -> ChainState:
        """The dataset's current state, from the summary plus any newer blocks (rebuilt when needed);
        `record=False` leaves a stale summary as it is (read-only commands: `odf sql`)."""
        head = self.head()
        summary = self.recorded_summary()
        if summary is not None and summary.head == head:
            return summary
        newer: list[tuple[Multihash, model.MetadataBlock]] = []
        base = ChainState()
        for h, block in self.iter_blocks(head):
            if summary is not None and h == summary.head:
                base = summary
                break
            newer.append((h, block))
        state = fold(base, reversed(newer))
        if record and head is not None:  # a dataset being created gets its summary with its first commit
            self._write_summary(state)
        return state

    def state_at(self, block_hash: Multihash) -> ChainState:
        """The state as of an earlier block of the chain (a fold from the Seed: O(chain))."""
        head = self.head()
        blocks = []
        found = False
        for h, block in self.iter_blocks(head):
            found = found or h == block_hash
            if found:
                blocks.append((h, block))
        if not found:
            raise ChainRuleError("rebase-target", f"block {block_hash} is not in the chain of head {head}")
        return fold(ChainState(), reversed(blocks))

    def recorded_summary(self) -> ChainState | None:
        """The summary as readers use it; None when it is missing, damaged, unreadable or larger than
        `MAX_SUMMARY_BYTES` (derived data: then rebuilt from the chain)."""
        try:
            if self.store.size(SUMMARY_KEY) > MAX_SUMMARY_BYTES:
                return None
            return state_from_json(self.store.get(SUMMARY_KEY))
        except (ValueError, KeyError, TypeError, AttributeError, OdfError, ManifestError):
            return None

    def _write_summary(self, state: ChainState) -> None:
        with contextlib.suppress(OSError, OdfError):
            self.store.put(SUMMARY_KEY, state_to_json(state))

    # ----- writing -----

    def commit(
        self,
        events: Sequence[Any],
        *,
        system_time: Timestamp | None = None,
        expected_head: ExpectedHead = CURRENT_HEAD,
        objects: Sequence[StagedObject] = (),
        onto: Multihash | None = None,
        onto_state: ChainState | None = None,
    ) -> CommitResult:
        """Appends one block per event, validated against the chain rules, atomically.

        `expected_head` guards against lost updates: the commit fails with ConflictError unless the
        head is still that value (default: whatever the head was when the commit started).
        `onto` rewrites history: the new blocks follow that earlier block of the chain instead of the
        head, and the blocks after it leave the chain (their objects stay until `gc`) — in the same
        single move of the head, so a failure leaves the old chain in place. `onto_state`: the state as
        of `onto`, when the caller has it (else it is folded from the chain).
        """
        state = self.state()
        expected = _expected(expected_head)
        if expected is not CURRENT_HEAD and expected != state.head:
            raise ConflictError(f"head is {state.head}, expected {expected}")
        system_time = system_time or Timestamp.now()
        if state.system_time is not None and system_time < state.system_time:
            system_time = state.system_time  # clocks may step back; the chain's time may not
        blocks: list[tuple[Multihash, bytes]] = []
        new_state = state if onto is None else onto_state or self.state_at(onto)
        last: model.MetadataBlock | None = None
        for event in events:
            last = model.MetadataBlock(
                system_time=system_time,
                prev_block_hash=new_state.head,
                sequence_number=new_state.sequence_number + 1,
                event=event,
            )
            data = encode_block(last)
            h = block_hash(data)
            new_state = apply_block(new_state, last, h)
            blocks.append((h, data))
        if not blocks and onto is None:
            return CommitResult(state.head, state.head, [], state)
        small = {block_key(h): data for h, data in blocks}  # blocks, then the new head's attestation
        small.update(self._attestation(state.head, new_state.head, last))
        keys = [*(obj.key for obj in objects), *small]
        sources = [obj.source_key for obj in objects if obj.source_key is not None]
        with declaring(self.store, [*keys, *sources]) as intent:
            for obj in objects:
                if not self.store.exists(obj.key):  # re-used objects are not stored twice
                    self._store_object(obj)
            for key, data in small.items():
                self.store.put(key, data)
            intent.settle(keys, lambda missing: self._restore(missing, objects, small))
            self._move_head(state.head, new_state.head)
        self._write_summary(new_state)
        attested = len(small) > len(blocks)
        return CommitResult(state.head, new_state.head, [h for h, _ in blocks], new_state, attested)

    def _attestation(
        self, old: Multihash | None, new: Multihash | None, block: model.MetadataBlock | None
    ) -> dict[str, bytes]:
        """`{attestations/<new>: bytes}` when this dataset signs its heads, else `{}` — reported when
        the old head was signed (by a key elsewhere: a pulled dataset committed to here, so that its
        new head is unsigned). Made before anything is stored: a key that cannot be read fails the
        commit whole."""
        if new is None or self.signer is None:
            return {}
        attestation = self.signer.attestation(new, block if block is not None else self.block(new))
        if attestation is not None:
            return {attestation_key(new): attestation}
        signed_before = old is not None and self.store.exists(attestation_key(old))
        if signed_before and not self.store.exists(attestation_key(new)):  # (a reset may find one there)
            log.warning(
                "%s: head %s is not signed: the dataset's key is not in this repository's key store (its "
                "previous head was signed elsewhere; pull it from its owner rather than commit here)",
                self.signer.dataset_id,
                new,
            )
        return {}

    def append_block_bytes(
        self,
        blocks: Sequence[bytes],
        *,
        expected_head: ExpectedHead,
        replace: bool = False,
        intent: Intent | None = None,
        attestation: bytes | None = None,
    ) -> CommitResult:
        """Appends blocks received verbatim (e.g. pulled): hashed, decoded and validated, never re-encoded.

        `replace`: the blocks are a whole chain from its Seed that takes the place of the current one
        (a forced sync over a diverged history), validated from scratch. `intent`: the declaration the
        caller made for these blocks, their objects and the attestation (see `declaring`), else one is
        made here. `attestation`: the new head's, as received (checked by the caller), stored verbatim
        after the blocks; received heads are never signed here.
        """
        state = self.state()
        expected_head = _expected(expected_head)
        if expected_head is not CURRENT_HEAD and expected_head != state.head:
            raise ConflictError(f"head is {state.head}, expected {expected_head}")
        new_state = ChainState() if replace else state
        hashes = []
        for data in blocks:
            h = block_hash(data)
            new_state = apply_block(new_state, decode_block(data), h)
            hashes.append(h)
        if not hashes:
            return CommitResult(state.head, new_state.head, hashes, new_state)
        by_key = {block_key(h): data for h, data in zip(hashes, blocks, strict=True)}
        signed = {} if attestation is None else {attestation_key(hashes[-1]): attestation}
        written = {**by_key, **signed}
        declared = contextlib.nullcontext(intent) if intent is not None else declaring(self.store, written)
        with declared as current:
            self.store.put_many(list(by_key.items()))
            self.store.put_many(list(signed.items()))  # after the blocks, before the ref
            current.settle(written, lambda missing: self.store.put_many([(k, written[k]) for k in missing]))
            self._move_head(state.head, new_state.head)
        self._write_summary(new_state)
        return CommitResult(state.head, new_state.head, hashes, new_state, bool(signed))

    def _store_object(self, obj: StagedObject) -> None:
        if obj.source_key is not None:
            self.store.copy(obj.source_key, obj.key)
        elif obj.path is not None:
            self.store.put_file(obj.key, obj.path, move=obj.move)
        else:
            raise ValueError(f"staged object {obj.key} has neither a local file nor a source key")

    def _restore(self, missing: list[str], objects: Sequence[StagedObject], small: dict[str, bytes]) -> None:
        """Stores again what a collection that missed this commit's declaration deleted: only objects
        that existed before the commit can be (the collection listed them first), and those the commit
        did not store, so their staged files are still there. `small`: blocks and attestation."""
        by_key = {obj.key: obj for obj in objects}
        for key in missing:
            if key in small:
                self.store.put(key, small[key])
                continue
            obj = by_key[key]
            if obj.source_key is None and (obj.path is None or not obj.path.exists()):
                raise OdfError(f"{key} was deleted by a concurrent `odf gc` and its staged file is gone")
            self._store_object(obj)

    def _move_head(self, old: Multihash | None, new: Multihash | None) -> None:
        """CAS against the ref's exact stored bytes (another tool may have written it with a newline)."""
        raw = self.store.get_or_none(HEAD_REF)
        current = _parse_head(raw)
        if current != old:
            raise ConflictError(f"{HEAD_REF} moved concurrently: expected {old}, found {current}")
        self.store.compare_and_swap(HEAD_REF, raw, None if new is None else str(new).encode())

    def reset(self, to: Multihash, *, expected_head: ExpectedHead = CURRENT_HEAD) -> CommitResult:
        """Moves the head back to an earlier block of the chain (compare-and-swap), signed like a commit
        (`odf gc` keeps the attestations of every block of the chain, so no declaration is needed)."""
        head = self.existing_head()
        expected_head = _expected(expected_head)
        if expected_head is not CURRENT_HEAD and expected_head != head:
            raise ConflictError(f"head is {head}, expected {expected_head}")
        target = next((block for h, block in self.iter_blocks(head) if h == to), None)
        if target is None:
            raise ChainRuleError("reset-target", f"block {to} is not in the chain of head {head}")
        signed = self._attestation(head, to, target)
        for key, data in signed.items():
            self.store.put(key, data)
        self._move_head(head, to)
        return CommitResult(head, to, [], self.state(), bool(signed))


def fold(state: ChainState, blocks: Any) -> ChainState:
    """Applies `(hash, block)` pairs oldest first; a rule violation means the stored chain is corrupt."""
    for h, block in blocks:
        try:
            state = apply_block(state, block, h)
        except ChainRuleError as e:
            raise CorruptDatasetError(
                f"block {h} (sequence {block.sequence_number}) breaks the chain: {e}"
            ) from None
    return state
