"""The verification record of a dataset: which head was last verified, when and how, in `info/verification`.

Verifying everything on every run grows with history (every block and object re-hashed, every
transform replayed). The record lets a verification start after the head an earlier one proved: only
the newer blocks, their objects and their transforms are checked. It is derived data kept beside the
summary (`info/`), outside the chain: no block or ref refers to it, push and pull never copy it, and
`odf serve` does not serve it. A missing, unreadable, damaged or foreign record is simply ignored (the
next verification is a full one); so is an entry whose head is no longer an ancestor of the head (a
reset, a compaction, a pull that diverged), which `check_integrity` finds by walking from the head no
further than the number of newer blocks.

Trust: the record is as trustworthy as the repository's storage. Whoever can write the repository can
also forge the record (e.g. mark a tampered chain verified) or change an object verified earlier, which
an incremental verification never looks at again. `full=True` (`odf verify --full`) ignores the record
and checks everything; run it periodically and whenever the storage itself is in doubt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_odf.odf.chain.dataset import Dataset
from airflow_odf.odf.chain.head_signature import UNSIGNED, HeadSignature, judge_head
from airflow_odf.odf.chain.integrity import IntegrityCheck, IntegrityProblem, check_integrity
from airflow_odf.odf.chain.rules import ChainState
from airflow_odf.odf.chain.summary import MAX_SUMMARY_BYTES, state_from_json, state_to_json
from airflow_odf.odf.errors import ManifestError, OdfError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import Multihash
from airflow_odf.odf.format.timestamps import Timestamp
from airflow_odf.odf.identity.attestation import attestation_key

RECORD_KEY = "info/verification"
FORMAT_VERSION = 1
# two summaries and a few fields; a larger file is ignored unread (as a damaged one is)
MAX_RECORD_BYTES = 2 * MAX_SUMMARY_BYTES + 4096

Blocks = Sequence[tuple[Multihash, model.MetadataBlock]]
Replayer = Callable[[ChainState, Blocks], Sequence[Any]]
"""Replays the ExecuteTransforms among `blocks` (oldest first, following the state given); returns
what is not reproducible."""


@dataclass(frozen=True)
class VerifiedHead:
    """A verification that passed: the chain up to `state.head` (`state`: the dataset there).

    `full`: it checked everything from the Seed; `engine`: where the transforms were replayed;
    `signer`: who signed the head (its DID, or `unsigned`; None: not recorded, an older record)."""

    state: ChainState
    verified_at: Timestamp
    full: bool
    engine: str | None = None
    signer: str | None = None

    @property
    def head(self) -> Multihash:
        assert self.state.head is not None
        return self.state.head


@dataclass(frozen=True)
class VerificationRecord:
    """The last verification of integrity, and the last one that also replayed the transforms."""

    integrity: VerifiedHead | None = None
    replay: VerifiedHead | None = None


def _entry_to_plain(entry: VerifiedHead | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "head": str(entry.head),
        "sequenceNumber": entry.state.sequence_number,
        "verifiedAt": str(entry.verified_at),
        "full": entry.full,
        "engine": entry.engine,
        "signer": entry.signer,
        "state": json.loads(state_to_json(entry.state)),
    }


def record_to_json(record: VerificationRecord) -> bytes:
    plain = {
        "version": FORMAT_VERSION,
        "integrity": _entry_to_plain(record.integrity),
        "replay": _entry_to_plain(record.replay),
    }
    return json.dumps(plain, indent=1, ensure_ascii=False).encode()


def _entry_from_plain(plain: dict[str, Any] | None) -> VerifiedHead | None:
    if plain is None:
        return None
    state = state_from_json(json.dumps(plain["state"], separators=(",", ":"), ensure_ascii=False).encode())
    if (
        state.head is None
        or str(state.head) != plain["head"]
        or state.sequence_number != plain["sequenceNumber"]
    ):
        raise ValueError("the entry's head is not that of its state")
    engine, signer = plain.get("engine"), plain.get("signer")
    if any(v is not None and not isinstance(v, str) for v in (engine, signer)):
        raise ValueError("engine and signer must be text")
    return VerifiedHead(state, Timestamp.parse(plain["verifiedAt"]), bool(plain["full"]), engine, signer)


def record_from_json(data: bytes) -> VerificationRecord:
    """Raises ValueError/KeyError/TypeError/OdfError on anything unexpected."""
    plain = json.loads(data)
    if plain.get("version") != FORMAT_VERSION:
        raise ValueError("unknown verification record version")
    return VerificationRecord(_entry_from_plain(plain["integrity"]), _entry_from_plain(plain["replay"]))


def read_record(dataset: Dataset) -> VerificationRecord:
    """The dataset's record; an empty one when it is missing, unreadable, damaged or too large."""
    try:
        if dataset.store.size(RECORD_KEY) > MAX_RECORD_BYTES:
            return VerificationRecord()
        return record_from_json(dataset.store.get(RECORD_KEY))
    except (ValueError, KeyError, TypeError, AttributeError, OdfError, ManifestError):
        return VerificationRecord()


def write_record(dataset: Dataset, record: VerificationRecord) -> None:
    """Replaces the record in one atomic write (a temp file renamed, or one object PUT)."""
    dataset.store.put(RECORD_KEY, record_to_json(record))


@dataclass(frozen=True)
class VerificationReport:
    """What one verification checked and found.

    `since`: the verified head it started after (None: from the Seed); `reason`: why it was full
    (None when incremental); `replayed`: how many ExecuteTransforms ran again (None: replay not asked
    for, or nothing to replay in a root dataset); `recorded`: where its head was recorded, or why not;
    `signature`: the head's attestation as judged (None when the chain could not be verified).
    """

    head: Multihash | None
    state: ChainState | None
    since: Multihash | None
    reason: str | None
    blocks_checked: int
    objects_checked: int
    replayed: int | None
    problems: list[IntegrityProblem] = field(default_factory=list)
    not_reproducible: list[Any] = field(default_factory=list)
    recorded: str = "nothing: the verification failed"
    signature: HeadSignature | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and not self.not_reproducible

    @property
    def full(self) -> bool:
        return self.since is None

    def fields(self) -> dict[str, Any]:
        """What was checked, as the JSON of `odf verify` and the XCom of the verify task give it."""
        return {
            "head": None if self.head is None else str(self.head),
            "reproducibility": "not checked" if self.replayed is None else "checked",
            "full": self.full,
            "since": None if self.since is None else str(self.since),
            "reason": self.reason,
            "blocks_checked": self.blocks_checked,
            "objects_checked": self.objects_checked,
            "transforms_replayed": self.replayed or 0,
            "record": self.recorded,
            "signature": None if self.signature is None else self.signature.as_dict(),
        }

    def describe(self) -> str:
        """What was checked, in one line (a task log, the command's output)."""
        if self.full:
            text = f"all {_count(self.blocks_checked, 'block')} from the Seed ({self.reason})"
        else:
            text = f"{_count(self.blocks_checked, 'new block')} after the verified head {self.since}"
        text += f", {_count(self.objects_checked, 'data/checkpoint object')} intact"
        if self.replayed is not None:
            text += f"; {_count(self.replayed, 'transform')} replayed and reproduced"
        if self.signature is not None:
            text += f"; {self.signature.describe()}"
        return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _base(record: VerificationRecord, replay: bool, full: bool) -> tuple[VerifiedHead | None, str | None]:
    """The entry to start after, or None and why not."""
    if full:
        return None, "full verification asked for"
    entry = record.integrity
    if replay and entry is not None and entry.state.kind is model.DatasetKind.DERIVATIVE:
        entry = record.replay
    if entry is None:
        return None, "no earlier verification recorded" + (" with replay" if record.integrity else "")
    return entry, None


def _head_signature(dataset: Dataset, check: IntegrityCheck) -> HeadSignature | IntegrityProblem | None:
    """The verified head's attestation judged against the dataset's DID: a bad one (or one that cannot
    be read) is a problem of the dataset; None when the chain did not verify."""
    state, head = check.state, check.head
    if check.problems or head is None or state.dataset_id is None:
        return None
    key = attestation_key(head)
    try:
        block = check.blocks[-1][1] if check.blocks else dataset.block(head)
        signature = judge_head(dataset.store, state.dataset_id, head, block)
    except OdfError as e:
        return IntegrityProblem("signature", key, f"cannot be read: {e}")
    if signature.status == "bad":
        return IntegrityProblem("signature", key, f"{signature.kind}: {signature.message}")
    return signature


def verify_dataset(
    dataset: Dataset,
    *,
    full: bool = False,
    replay: Replayer | None = None,
    engine: str | None = None,
) -> VerificationReport:
    """Verifies the blocks after the last verified head (everything when `full`, when there is no
    record, or when its head left the chain), replays their transforms when `replay` is given and the
    dataset is a derivative, and on success records the head verified. A failed verification records
    nothing; a record that cannot be written leaves the verification's outcome as it is.
    """
    record = read_record(dataset)
    base, reason = _base(record, replay is not None, full)
    check: IntegrityCheck = check_integrity(dataset, None if base is None else base.state)
    signature = _head_signature(dataset, check)
    if isinstance(signature, IntegrityProblem):
        check = replace(check, problems=[*check.problems, signature])
        signature = None
    if base is not None and check.since is None:
        reason = (
            f"the verified head {base.head} is no longer in the chain (reset, compaction or diverged pull)"
        )
    replays = None
    not_reproducible: list[Any] = []
    state = check.state
    if not check.problems and replay is not None and state.kind is model.DatasetKind.DERIVATIVE:
        new_transforms = [b for _, b in check.blocks if isinstance(b.event, model.ExecuteTransform)]
        replays = len(new_transforms)
        if new_transforms:
            not_reproducible = list(replay(check.base_state, check.blocks))
    report = VerificationReport(
        head=check.head,
        state=None if check.problems else state,
        since=check.since,
        reason=reason if check.since is None else None,
        blocks_checked=len(check.blocks),
        objects_checked=check.objects_checked,
        replayed=replays,
        problems=check.problems,
        not_reproducible=not_reproducible,
        signature=signature,
    )
    if not report.ok:
        return report
    now = Timestamp.now()
    signer = UNSIGNED if signature is None or signature.signer is None else str(signature.signer)
    verified = VerifiedHead(state, now, report.full, signer=signer)
    replayed = VerifiedHead(state, now, report.full, engine, signer) if replays is not None else record.replay
    try:
        write_record(dataset, VerificationRecord(integrity=verified, replay=replayed))
    except (OSError, OdfError) as e:
        return replace(report, recorded=f"not written: {e}")
    return replace(report, recorded=f"{RECORD_KEY} at {state.head}")
