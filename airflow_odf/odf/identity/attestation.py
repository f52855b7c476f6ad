"""Head attestations: a dataset's owner signs each head it commits, beside the chain, never in it.

An attestation is a small canonical-JSON document stored at `attestations/<head multihash>` in the
dataset's folder (local disk, S3, HTTP alike), one per head, written before the ref moves:

    {"version": 1, "type": "OdfHeadAttestation", "dataset": "did:odf:…", "head": "f1620…",
     "sequenceNumber": 7, "prevHead": "f1620…" | null,
     "proof": {"type": "Ed25519Signature2020", "verificationMethod": "did:odf:…", "proofValue": "u…"}}

The signature covers the canonical JSON of the document without `proof`. It is checked against the
dataset's DID itself (the DID is the public key): no PKI, no key to look up. Keyed by head, an
attestation cannot be confused with another head's: one copied onto another head names the wrong head;
one made by a key copied under another DID names the wrong dataset or fails the signature.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from airflow_odf.odf.errors import OdfError
from airflow_odf.odf.format.multiformats import DatasetId, Multihash
from airflow_odf.odf.identity.canonical import canonical_json
from airflow_odf.odf.identity.signing import (
    PROOF_TYPE,
    is_valid_signature,
    parse_signature,
    public_key_of,
    sign,
    signature_text,
)
from airflow_odf.odf.limits import MAX_ATTESTATION_BYTES

ATTESTATIONS_PREFIX = "attestations"
ATTESTATION_TYPE = "OdfHeadAttestation"
ATTESTATION_VERSION = 1
_PROOF_FIELDS = {"type", "verificationMethod", "proofValue"}

#: What a pull does with head attestations: `require` refuses a head without a valid one; `check`
#: (default) refuses a bad one and reports a missing one (kamu's chains carry none); `ignore` skips.
SignaturePolicy = Literal["require", "check", "ignore"]
SIGNATURE_POLICIES: tuple[SignaturePolicy, ...] = ("require", "check", "ignore")
DEFAULT_SIGNATURE_POLICY: SignaturePolicy = "check"


def signature_policy(value: str, where: str) -> SignaturePolicy:
    """`value` as a policy (any case, surrounding blanks ignored); OdfError naming `where` otherwise."""
    text = value.strip().lower() if isinstance(value, str) else value
    for policy in SIGNATURE_POLICIES:
        if text == policy:
            return policy
    raise OdfError(f"{where}={value!r}: expected one of {', '.join(SIGNATURE_POLICIES)}")


class AttestationError(OdfError):
    """A head attestation that is malformed, or made for another dataset or head, or badly signed.

    `kind`: `malformed`, `other-dataset`, `other-head`, `bad-signature` or `missing`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def attestation_key(head: Multihash) -> str:
    """Where the attestation of `head` lives in the dataset's folder (beside `blocks/<head>`)."""
    return f"{ATTESTATIONS_PREFIX}/{head}"


@dataclass(frozen=True)
class HeadFacts:
    """What an attestation vouches for: the dataset, its head, the head's sequence number and the head
    before it (the previous block of the head's block, None for a Seed)."""

    dataset: DatasetId
    head: Multihash
    sequence_number: int
    prev_head: Multihash | None

    def claims(self) -> dict[str, Any]:
        return {
            "version": ATTESTATION_VERSION,
            "type": ATTESTATION_TYPE,
            "dataset": self.dataset.to_did_odf(),
            "head": str(self.head),
            "sequenceNumber": self.sequence_number,
            "prevHead": None if self.prev_head is None else str(self.prev_head),
        }


def make_attestation(secret: bytes, facts: HeadFacts) -> bytes:
    """The signed attestation document (canonical JSON bytes). ValueError when `secret` is not the
    dataset's key: a dataset is only ever signed by its own key."""
    if public_key_of(secret) != facts.dataset:
        raise ValueError(f"the key given is not the key of {facts.dataset}")
    claims = facts.claims()
    proof = {
        "type": PROOF_TYPE,
        "verificationMethod": facts.dataset.to_did_odf(),
        "proofValue": signature_text(sign(secret, canonical_json(claims))),
    }
    return canonical_json({**claims, "proof": proof})


def _document(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_ATTESTATION_BYTES:
        raise AttestationError(
            "malformed", f"{len(data)} bytes, more than the {MAX_ATTESTATION_BYTES} allowed"
        )
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise AttestationError("malformed", f"not JSON: {e}") from None
    if not isinstance(document, dict) or not isinstance(document.get("proof"), dict):
        raise AttestationError("malformed", "not an attestation document (an object with a proof)")
    try:  # one document, one byte string: any other spelling of it is refused (nothing is malleable)
        canonical = canonical_json(document) == data
    except OdfError:
        canonical = False
    if not canonical:
        raise AttestationError("malformed", "not in canonical JSON form")
    return document


def check_attestation(data: bytes, facts: HeadFacts) -> DatasetId:
    """Returns the signer (the dataset's DID) when `data` is a valid attestation of exactly `facts`;
    AttestationError naming what is wrong otherwise."""
    document = _document(data)
    proof = document.pop("proof")
    expected = facts.claims()
    if document.get("version") != ATTESTATION_VERSION or document.get("type") != ATTESTATION_TYPE:
        raise AttestationError(
            "malformed", f"version {document.get('version')!r} of type {document.get('type')!r} is unknown"
        )
    if document.get("dataset") != expected["dataset"]:
        raise AttestationError("other-dataset", f"it attests dataset {document.get('dataset')!r}")
    for field in ("head", "sequenceNumber", "prevHead"):
        if document.get(field) != expected[field]:
            raise AttestationError(
                "other-head", f"it attests {field} {document.get(field)!r}, the chain has {expected[field]!r}"
            )
    if set(document) != set(expected):
        raise AttestationError("malformed", f"unexpected fields {sorted(set(document) - set(expected))}")
    if set(proof) != _PROOF_FIELDS:
        raise AttestationError(
            "malformed", f"the proof has fields {sorted(proof)}, expected {sorted(_PROOF_FIELDS)}"
        )
    if proof.get("type") != PROOF_TYPE or proof.get("verificationMethod") != expected["dataset"]:
        raise AttestationError("bad-signature", "the proof is not an ed25519 signature by the dataset's DID")
    try:
        signature = parse_signature(proof.get("proofValue"))
    except OdfError as e:
        raise AttestationError("bad-signature", str(e)) from None
    if signature_text(signature) != proof["proofValue"]:  # e.g. other unused bits in its last character
        raise AttestationError("malformed", "the signature is not in its canonical multibase form")
    if not is_valid_signature(facts.dataset, signature, canonical_json(expected)):
        raise AttestationError("bad-signature", f"the signature is not one by the key of {facts.dataset}")
    return facts.dataset
