"""Signed heads in a dataset's store: signing the heads this repository commits, and judging the
attestation a store holds for a head (on pull, push and verify).

An attestation (`identity/attestation.py`) lives at `attestations/<head>` beside the blocks, written
after the blocks and before `refs/head` moves. A dataset is signed here only when the repository's key
store holds its key (it was created here, or its key was imported); a dataset pulled from elsewhere is
read-only here and its heads carry only the attestations that came with them. The key is read once per
`Dataset` object, on its first commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from airflow_odf.odf.format import model
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.identity.attestation import (
    AttestationError,
    HeadFacts,
    SignaturePolicy,
    attestation_key,
    check_attestation,
    make_attestation,
)
from airflow_odf.odf.storage.store import ObjectStore, ObjectTooLargeError

SignatureStatus = Literal["signed", "missing", "bad"]
#: What the verification record and the ODF view say of a head that carries no attestation.
UNSIGNED = "unsigned"


def head_facts(dataset_id: DatasetId, head: Multihash, block: model.MetadataBlock) -> HeadFacts:
    """What the attestation of `head` (whose block is `block`) must vouch for."""
    return HeadFacts(dataset_id, head, block.sequence_number, block.prev_block_hash)


class HeadSigner:
    """Signs the heads of one dataset with its key. `load` reads the key (None: not held here); it is
    called once, on the first signature, so a Dataset that only reads never touches the key store."""

    def __init__(self, dataset_id: DatasetId, load: Callable[[DatasetId], bytes | None]) -> None:
        self.dataset_id = dataset_id
        self._load = load
        self._secret: bytes | None = None
        self._loaded = False

    def __repr__(self) -> str:  # never shows the key
        return f"HeadSigner({self.dataset_id})"

    def holds_key(self) -> bool:
        if not self._loaded:
            self._secret = self._load(self.dataset_id)
            self._loaded = True
        return self._secret is not None

    def attestation(self, head: Multihash, block: model.MetadataBlock) -> bytes | None:
        """The signed attestation of `head`; None when the key is not here (nothing is signed)."""
        if not self.holds_key():
            return None
        assert self._secret is not None
        return make_attestation(self._secret, head_facts(self.dataset_id, head, block))


@dataclass(frozen=True)
class HeadSignature:
    """What the attestation of a head says: `signed` (by `signer`, the dataset's DID), `missing`, or
    `bad` (`kind` and `message` from AttestationError). `attestation`: the bytes of a good one."""

    head: Multihash
    status: SignatureStatus
    signer: DatasetId | None = None
    kind: str | None = None
    message: str | None = None
    attestation: bytes | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (`odf verify`, `odf pull --format json`, the tasks' XCom)."""
        signer = None if self.signer is None else str(self.signer)
        out: dict[str, Any] = {"status": self.status, "signer": signer}
        if self.status == "bad":
            out.update(kind=self.kind, message=self.message)
        return out

    def describe(self) -> str:
        """`head f… signed by did:odf:…`, `head f… unsigned`, `head f… bad signature (kind): …`."""
        if self.status == "signed":
            return f"head {self.head} signed by {self.signer}"
        if self.status == "missing":
            return f"head {self.head} {UNSIGNED}"
        return f"head {self.head} has a bad attestation ({self.kind}: {self.message})"

    def refusal(self, policy: SignaturePolicy) -> str | None:
        """Why `policy` refuses this head (None: accepted): `check` refuses a bad attestation,
        `require` also a missing one, `ignore` nothing."""
        if policy == "ignore" or self.status == "signed":
            return None
        if self.status == "bad":
            return f"its attestation is bad ({self.kind}: {self.message})"
        if policy == "require":
            return "it carries no attestation (signatures are required)"
        return None


def read_attestation(store: ObjectStore, head: Multihash) -> bytes | None:
    """The attestation a store holds for `head`, None when it holds none; AttestationError (malformed)
    when the store refuses it as larger than any attestation (every store reads no further)."""
    key = attestation_key(head)
    try:
        data = store.get_or_none(key)
    except ObjectTooLargeError as e:
        raise AttestationError("malformed", str(e)) from None
    return data  # its size is checked with the rest (`check_attestation`)


def judge_head(
    store: ObjectStore, dataset_id: DatasetId, head: Multihash, block: model.MetadataBlock
) -> HeadSignature:
    """Reads and checks the attestation `store` holds for `head` of dataset `dataset_id`. A store that
    cannot be read (a failing peer) raises its own error: that says nothing about the signature."""
    try:
        data = read_attestation(store, head)
        if data is None:
            return HeadSignature(head, "missing")
        signer = check_attestation(data, head_facts(dataset_id, head, block))
    except AttestationError as e:
        return HeadSignature(head, "bad", kind=e.kind, message=str(e))
    return HeadSignature(head, "signed", signer=signer, attestation=data)
