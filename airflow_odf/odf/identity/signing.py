"""Ed25519 signatures and the `did:key` / `did:odf` forms of their public keys.

A DID *is* the public key (multicodec `ed01 ‖ key`): checking a signature needs no PKI, only the DID.
Signatures travel as multibase base64url without padding (`u…`), as in kamu's `Ed25519Signature2020`
proofs.
"""

from __future__ import annotations

import base64

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.multiformats import DatasetId, multibase_decode

PROOF_TYPE = "Ed25519Signature2020"
SIGNATURE_BYTES = 64


def public_key_of(secret: bytes) -> DatasetId:
    """The identity (public key) a 32-byte private key makes, usable as `did:odf` or `did:key`."""
    if len(secret) != 32:
        raise OdfFormatError(f"an ed25519 private key has 32 bytes, got {len(secret)}")
    return DatasetId.from_private_key(secret)


def sign(secret: bytes, message: bytes) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(secret).sign(message)


def is_valid_signature(identity: DatasetId, signature: bytes, message: bytes) -> bool:
    """Whether `signature` over `message` was made by the private key of `identity`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(identity.public_key).verify(signature, message)
    except InvalidSignature:
        return False
    return True


def signature_text(signature: bytes) -> str:
    """`u` + base64url without padding: how proofs carry a signature."""
    return "u" + base64.urlsafe_b64encode(signature).decode("ascii").rstrip("=")


def parse_signature(text: object) -> bytes:
    """The signature bytes of a multibase text; OdfFormatError when it is not one."""
    if not isinstance(text, str):
        raise OdfFormatError(f"a signature is a multibase string, got {type(text).__name__}")
    signature = multibase_decode(text)
    if len(signature) != SIGNATURE_BYTES:
        raise OdfFormatError(f"an ed25519 signature has {SIGNATURE_BYTES} bytes, got {len(signature)}")
    return signature
