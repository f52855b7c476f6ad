"""The multihash codes ODF data hashes use and their text form (multibase base16, as the reference
writes hashes): what an engine needs to name a file's hashes without the core's metadata model."""

from __future__ import annotations

SHA3_256 = 0x16
ARROW0_SHA3_256 = 0x300016


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128, as multiformats use it."""
    if value < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def multihash_text(code: int, digest: bytes) -> str:
    """`f<hex of varint(code) varint(len) digest>`: the form `Multihash.parse` reads."""
    return "f" + (encode_varint(code) + encode_varint(len(digest)) + digest).hex()
