"""Multihash, multibase and DID vectors committed in the reference implementation's tests."""

from __future__ import annotations

import pytest

from airflow_odf.odf.errors import OdfFormatError
from airflow_odf.odf.format.multiformats import (
    ARROW0_SHA3_256,
    DatasetId,
    Multihash,
    base58btc_decode,
    base58btc_encode,
    decode_varint,
    encode_varint,
    multibase_decode,
)

SHA3_OF_MULTIHASH = "f162008c3792b2a4deed1bd7ea2328fb5de5531eccf0fbfa04a7d800cdc267137c635"
DID_ODF = "did:odf:fed012e6fcce36701dc791488e0d0b1745cc1e33a4c1c9fcc41c63bd343dbbe0970e6"
DID_KEY = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def test_sha3_multihash_vector() -> None:
    mh = Multihash.sha3_256(b"multihash")
    assert str(mh) == SHA3_OF_MULTIHASH
    assert mh.short() == "7137c635"
    assert "z" + base58btc_encode(mh.to_bytes()) == "zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8"
    assert Multihash.parse("zW1a3CNT52HXiJNniLkWMeev3CPRy9QiNRMWGyTrVNg4hY8") == mh
    assert Multihash.parse("F" + SHA3_OF_MULTIHASH[1:].upper()) == mh


def test_sha2_multihash_in_two_bases() -> None:
    hex_form = "f12209cbc07c3f991725836a3aa2a581ca2029198aa420b9d99bc0e131d9f3e2cbe47"
    assert Multihash.parse(hex_form) == Multihash.parse("zQmYtUc4iTCbbfVSDNKvtQqrfyezPPnFvE33wFmutw9PBBk")
    assert Multihash.parse(hex_form).code == 0x12


def test_base64url_multibase() -> None:
    mh = Multihash.sha3_256(b"x")
    import base64

    text = "u" + base64.urlsafe_b64encode(mh.to_bytes()).decode().rstrip("=")
    assert Multihash.parse(text) == mh


def test_arrow_digest_code_prefix() -> None:
    mh = Multihash(ARROW0_SHA3_256, bytes(32))
    assert mh.to_bytes()[:5] == bytes.fromhex("9680c00120")
    assert str(mh).startswith("f9680c00120")
    assert Multihash.parse(str(mh)) == mh


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 0x400000, 2**63 - 1])
def test_varint_round_trip(value: int) -> None:
    data = encode_varint(value)
    assert decode_varint(data) == (value, len(data))


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("", "empty"),
        ("x1620", "unsupported multibase prefix"),
        ("f162", "odd number"),
        ("f1620aa", "header says 32"),
        ("f1601aa", "32 bytes"),
        ("f16ff", "truncated varint"),
        ("z0OIl", "invalid base58btc"),
    ],
)
def test_bad_multihash_text(text: str, phrase: str) -> None:
    with pytest.raises(OdfFormatError, match=phrase):
        Multihash.parse(text)


def test_did_odf_and_did_key_are_the_same_identity() -> None:
    did = DatasetId.parse(DID_ODF)
    assert did.to_did_key() == DID_KEY
    assert DatasetId.parse(DID_KEY) == did
    assert str(did) == DID_ODF
    assert did.as_bytes()[:2] == b"\xed\x01" and len(did.as_bytes()) == 34
    assert len(DID_ODF) == 77


def test_generated_identity_matches_its_private_key() -> None:
    did, secret = DatasetId.generate()
    assert DatasetId.from_private_key(secret) == did
    assert DatasetId.parse(str(did)) == did
    other, _ = DatasetId.generate()
    assert other != did


@pytest.mark.parametrize("text", ["did:web:x", "odf:fed01", "did:odf:f1620" + "00" * 32, "did:odf:fed01aa"])
def test_bad_dids(text: str) -> None:
    with pytest.raises(OdfFormatError):
        DatasetId.parse(text)


def test_base58_keeps_leading_zero_bytes() -> None:
    assert base58btc_decode(base58btc_encode(b"\0\0abc")) == b"\0\0abc"
    assert multibase_decode("z" + base58btc_encode(b"\0")) == b"\0"


@pytest.mark.parametrize(
    "parse",
    [
        pytest.param(lambda text: Multihash.parse(text), id="multihash"),
        pytest.param(lambda text: DatasetId.parse("did:odf:" + text), id="did-odf"),
        pytest.param(lambda text: DatasetId.parse("did:key:" + text), id="did-key"),
    ],
)
@pytest.mark.parametrize("prefix", ["z", "f", "u"])
def test_multibase_text_longer_than_the_limit_is_refused_before_decoding(parse, prefix: str) -> None:
    """Base58 decoding is quadratic: a 400 KB `z...` ref cost 20 s. Any base is cut off at the limit."""
    text = prefix + "2" * 4_000
    with pytest.raises(OdfFormatError) as info:
        parse(text)
    assert str(info.value) == "multibase text of 4001 characters is longer than the 256 allowed"


def test_a_long_non_did_is_named_by_its_start_only() -> None:
    with pytest.raises(OdfFormatError) as info:
        DatasetId.parse("x" * 100_000)
    assert (
        str(info.value)
        == f"{'x' * 60!r}… (100000 characters) is not a DID (expected 'did:odf:…' or 'did:key:…')"
    )
