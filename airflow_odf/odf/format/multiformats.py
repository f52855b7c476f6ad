"""Multiformats as ODF uses them: unsigned varints, multihash, multibase and `did:odf` identities.

Text forms follow the reference implementation: hashes and `did:odf` are written in base16 (`f`),
`did:key` in base58btc (`z`); `f`/`F`, `z` and `u` (base64url, no padding) are accepted on read.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import ClassVar

from airflow_odf.odf.errors import OdfFormatError, quoted
from airflow_odf.odf.limits import MAX_MULTIBASE_CHARS
from airflow_odf.utils.hashing.multihash import ARROW0_SHA3_256, SHA3_256, encode_varint

ED25519_PUB = 0xED
ODF_METADATA_BLOCK = 0x400000
ODF_DATASET_SNAPSHOT = 0x400001

_BASE58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_BASE58_INDEX = {c: i for i, c in enumerate(_BASE58_ALPHABET)}


# --------------------------------------------------------------------------------------------------
# varint
# --------------------------------------------------------------------------------------------------


def decode_varint(data: bytes, pos: int = 0) -> tuple[int, int]:
    """Returns `(value, position after the varint)`; at most 9 bytes as the multiformats spec allows."""
    value = 0
    for i in range(9):
        if pos + i >= len(data):
            raise OdfFormatError("truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise OdfFormatError("varint is not minimally encoded")
            return value, pos + i + 1
    raise OdfFormatError("varint longer than 9 bytes")


# --------------------------------------------------------------------------------------------------
# multibase
# --------------------------------------------------------------------------------------------------


def base58btc_encode(data: bytes) -> str:
    zeros = len(data) - len(data.lstrip(b"\0"))
    num = int.from_bytes(data, "big")
    chars = []
    while num:
        num, rem = divmod(num, 58)
        chars.append(_BASE58_ALPHABET[rem])
    return "1" * zeros + "".join(reversed(chars))


def base58btc_decode(text: str) -> bytes:
    num = 0
    for c in text:
        try:
            num = num * 58 + _BASE58_INDEX[c]
        except KeyError:
            raise OdfFormatError(f"invalid base58btc character {c!r}") from None
    zeros = len(text) - len(text.lstrip("1"))
    body = num.to_bytes((num.bit_length() + 7) // 8, "big") if num else b""
    return b"\0" * zeros + body


def multibase_decode(text: str) -> bytes:
    """Decodes `f`/`F` (base16), `z` (base58btc) and `u` (base64url without padding).

    Text longer than any hash or key is refused before decoding: base58 decoding is quadratic.
    """
    if not text:
        raise OdfFormatError("empty multibase string")
    if len(text) > MAX_MULTIBASE_CHARS:
        raise OdfFormatError(
            f"multibase text of {len(text)} characters is longer than the {MAX_MULTIBASE_CHARS} allowed"
        )
    prefix, body = text[0], text[1:]
    try:
        if prefix in "fF":
            if len(body) % 2:
                raise OdfFormatError("odd number of hex digits")
            return bytes.fromhex(body)
        if prefix == "z":
            return base58btc_decode(body)
        if prefix == "u":
            if "=" in body or "+" in body or "/" in body:
                raise OdfFormatError("base64url must not contain '=', '+' or '/'")
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except ValueError as e:
        raise OdfFormatError(f"invalid multibase {prefix!r} text: {e}") from None
    raise OdfFormatError(f"unsupported multibase prefix {prefix!r} (expected 'f', 'z' or 'u')")


# --------------------------------------------------------------------------------------------------
# multihash
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Multihash:
    """A self-describing hash: multicodec `code` plus `digest`."""

    code: int
    digest: bytes

    @classmethod
    def sha3_256(cls, data: bytes) -> Multihash:
        return cls(SHA3_256, hashlib.sha3_256(data).digest())

    @classmethod
    def from_bytes(cls, data: bytes) -> Multihash:
        code, pos = decode_varint(data)
        size, pos = decode_varint(data, pos)
        digest = data[pos:]
        if len(digest) != size:
            raise OdfFormatError(f"multihash digest has {len(digest)} bytes, its header says {size}")
        _check_digest(code, digest)
        return cls(code, bytes(digest))

    @classmethod
    def parse(cls, text: str) -> Multihash:
        """Parses a multibase multihash string such as `f1620…`."""
        if not isinstance(text, str):
            raise OdfFormatError(f"expected a multihash string, got {type(text).__name__}")
        return cls.from_bytes(multibase_decode(text))

    def to_bytes(self) -> bytes:
        if self.code == SHA3_256 and len(self.digest) == 32:
            return _SHA3_256_HEADER + self.digest
        return encode_varint(self.code) + encode_varint(len(self.digest)) + self.digest

    def to_multibase(self) -> str:
        return "f" + self.to_bytes().hex()

    def short(self) -> str:
        """Last 8 characters, as the reference shows hashes in short form."""
        return self.to_multibase()[-8:]

    def __str__(self) -> str:
        return self.to_multibase()


_SHA3_256_HEADER = bytes([SHA3_256, 32])


def _check_digest(code: int, digest: bytes) -> None:
    if code in (SHA3_256, ARROW0_SHA3_256) and len(digest) != 32:
        raise OdfFormatError(f"a sha3-256 digest has 32 bytes, got {len(digest)}")


# --------------------------------------------------------------------------------------------------
# Dataset identities
# --------------------------------------------------------------------------------------------------

_ED25519_PREFIX = encode_varint(ED25519_PUB)


@dataclass(frozen=True, slots=True)
class DatasetId:
    """A dataset identity `did:odf:…`: an ed25519 public key, binary form `ed 01 ‖ key`."""

    public_key: bytes

    DID_ODF: ClassVar[str] = "did:odf:"
    DID_KEY: ClassVar[str] = "did:key:"

    def __post_init__(self) -> None:
        if len(self.public_key) != 32:
            raise OdfFormatError(f"an ed25519 public key has 32 bytes, got {len(self.public_key)}")

    @classmethod
    def from_bytes(cls, data: bytes) -> DatasetId:
        if data[:2] != _ED25519_PREFIX:
            raise OdfFormatError("dataset id is not an ed25519 key (expected prefix ed01)")
        return cls(bytes(data[2:]))

    @classmethod
    def parse(cls, text: str) -> DatasetId:
        """Accepts `did:odf:<multibase>` and `did:key:<multibase>`."""
        if not isinstance(text, str):
            raise OdfFormatError(f"expected a DID string, got {type(text).__name__}")
        for scheme in (cls.DID_ODF, cls.DID_KEY):
            if text.startswith(scheme):
                return cls.from_bytes(multibase_decode(text[len(scheme) :]))
        raise OdfFormatError(f"{quoted(text)} is not a DID (expected 'did:odf:…' or 'did:key:…')")

    @classmethod
    def generate(cls) -> tuple[DatasetId, bytes]:
        """A fresh identity; returns it with the 32-byte ed25519 private key (not part of the chain)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        key = Ed25519PrivateKey.generate()
        secret = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return cls.from_private_key(secret), secret

    @classmethod
    def from_private_key(cls, secret: bytes) -> DatasetId:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        public = Ed25519PrivateKey.from_private_bytes(secret).public_key()
        return cls(public.public_bytes(Encoding.Raw, PublicFormat.Raw))

    def as_bytes(self) -> bytes:
        return _ED25519_PREFIX + self.public_key

    def to_did_odf(self) -> str:
        return self.DID_ODF + "f" + self.as_bytes().hex()

    def to_did_key(self) -> str:
        return self.DID_KEY + "z" + base58btc_encode(self.as_bytes())

    def __str__(self) -> str:
        return self.to_did_odf()
