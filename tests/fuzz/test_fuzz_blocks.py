"""Mutated conformance blocks: decoding gives a block or a BlockDecodeError, never another exception,
and stays within a time limit (the decode budget keeps it linear in the block's size)."""

from __future__ import annotations

import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given
from hypothesis import strategies as st

from airflow_odf.odf.errors import BlockDecodeError
from airflow_odf.odf.format import model
from airflow_odf.odf.format.flatbuffers_codec import decode_block
from tests.fuzz.conftest import Outcomes
from tests.paths import CONFORMANCE_BLOCKS

VECTORS = [p.read_bytes() for p in sorted(CONFORMANCE_BLOCKS.glob("*.bin"))]
SECONDS_PER_DECODE = 20


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fails the example instead of hanging the suite."""

    def expire(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"decoding took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _flip_bit(data: bytearray, draw: st.DrawFn) -> None:
    pos = draw(st.integers(0, len(data) - 1))
    data[pos] ^= 1 << draw(st.integers(0, 7))


def _truncate(data: bytearray, draw: st.DrawFn) -> None:
    del data[draw(st.integers(0, len(data) - 1)) :]


def _splice(data: bytearray, draw: st.DrawFn) -> None:
    """A piece of another vector in place of (or inserted into) this one."""
    other = draw(st.sampled_from(VECTORS))
    start = draw(st.integers(0, len(other) - 1))
    piece = other[start : start + draw(st.integers(1, 64))]
    at = draw(st.integers(0, len(data)))
    end = at + draw(st.sampled_from([0, len(piece)]))
    data[at:end] = piece


def _rewrite_offset(data: bytearray, draw: st.DrawFn) -> None:
    pos = draw(st.integers(0, max(0, len(data) // 4 - 1))) * 4
    value = draw(st.integers(0, 64) | st.integers(0, 2**32 - 1) | st.sampled_from([0xFFFFFFFF, 0x80000000]))
    data[pos : pos + 4] = struct.pack("<I", value)


def _repeat_offset(data: bytearray, draw: st.DrawFn) -> None:
    """Points the slot at `pos` where the slot before it points: a vector of repeated offsets."""
    pos = draw(st.integers(1, max(1, len(data) // 4 - 1))) * 4
    if pos + 4 > len(data):
        return
    (previous,) = struct.unpack_from("<I", data, pos - 4)
    struct.pack_into("<I", data, pos, (previous - 4) % 2**32)


MUTATIONS = [_flip_bit, _truncate, _splice, _rewrite_offset, _repeat_offset]


@st.composite
def mutated_blocks(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(VECTORS)))
    for mutate in draw(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=6)):
        if data:
            mutate(data, draw)
    return bytes(data)


def test_every_vector_decodes() -> None:
    assert len(VECTORS) >= 14
    assert all(isinstance(decode_block(v), model.MetadataBlock) for v in VECTORS)


@given(data=mutated_blocks())
def test_a_mutated_block_decodes_or_is_a_block_decode_error(data: bytes, outcomes: Outcomes) -> None:
    with time_limit(SECONDS_PER_DECODE):
        try:
            block = decode_block(data)
        except BlockDecodeError as e:
            assert str(e) and "\n" not in str(e)
            outcomes.record("block bytes", "refused")
        else:
            assert isinstance(block, model.MetadataBlock)
            outcomes.record("block bytes", "accepted")
