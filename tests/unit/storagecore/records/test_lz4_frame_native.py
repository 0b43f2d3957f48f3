"""The extension's LZ4 frame decoder (``_lz4_frame.c``) against ``lz4.frame``, the reference.

It must return the reference's bytes for every frame it takes, take every frame Kafka writes
(independent blocks, no checksums), and leave everything else to the reference (None): other
frame options, damaged frames, output over the bound. ``codecs.decompress`` must then answer
exactly as it does without the extension.
"""

from __future__ import annotations

import concurrent.futures
import random

import lz4
import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore.errors import CorruptRecordError
from storagecore.native import load_extension
from storagecore.records import codecs
from storagecore.records.codecs import Compression

_native = load_extension("storagecore.records._native")
needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not built")

BLOCK_SIZES = [
    lz4.frame.BLOCKSIZE_MAX64KB,
    lz4.frame.BLOCKSIZE_MAX256KB,
    lz4.frame.BLOCKSIZE_MAX1MB,
    lz4.frame.BLOCKSIZE_MAX4MB,
]
#: Compressible inputs of up to ~300 KB: several 64 KiB blocks, sometimes stored ones.
payloads = st.builds(
    lambda unit, times, tail: unit * times + tail,
    st.binary(min_size=1, max_size=64),
    st.integers(1, 5_000),
    st.binary(max_size=3_000),
)


def reference(frame: bytes) -> bytes | None:
    """What ``lz4.frame`` makes of ``frame``; None when it refuses it."""
    try:
        out: bytes = lz4.frame.decompress(frame)
    except RuntimeError:
        return None
    return out


def kafka_frame(data: bytes, block_size: int = lz4.frame.BLOCKSIZE_MAX64KB) -> bytes:
    """A frame as Kafka's producers write it (codecs.compress: independent blocks, no size)."""
    frame: bytes = lz4.frame.compress(
        data, block_size=block_size, block_linked=False, store_size=False
    )
    return frame


@needs_native
def test_the_extension_decodes_with_the_lz4_packages_version() -> None:
    """On this machine the system's liblz4 is the lz4 package's: the native decoder is used."""
    assert _native is not None
    assert _native.lz4_version() == lz4.library_version_number()
    assert codecs._native_lz4() is not None


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    data=payloads,
    block_size=st.sampled_from(BLOCK_SIZES),
    level=st.sampled_from([0, 3, 9, 12]),
    store_size=st.booleans(),
)
def test_kafkas_frames_are_taken_and_match(
    data: bytes, block_size: int, level: int, store_size: bool
) -> None:
    assert _native is not None
    frame = lz4.frame.compress(
        data,
        block_size=block_size,
        block_linked=False,
        store_size=store_size,
        compression_level=level,
    )
    assert _native.lz4_frame_decompress(frame, 1 << 30) == data == reference(frame)
    # Bytes after the frame are ignored, as the reference ignores them.
    assert _native.lz4_frame_decompress(frame + b"\x04\x22\x4d\x18junk", 1 << 30) == data


@needs_native
@settings(max_examples=100, deadline=None)
@given(
    data=payloads,
    block_linked=st.booleans(),
    block_checksum=st.booleans(),
    content_checksum=st.booleans(),
)
def test_other_frames_are_left_to_the_reference(
    data: bytes, block_linked: bool, block_checksum: bool, content_checksum: bool
) -> None:
    """Linked blocks and checksums are the reference's (None), whatever the content; codecs
    still decompresses them."""
    assert _native is not None
    frame = lz4.frame.compress(
        data,
        block_linked=block_linked,
        block_checksum=block_checksum,
        content_checksum=content_checksum,
    )
    taken = _native.lz4_frame_decompress(frame, 1 << 30)
    # What the frame declares (liblz4 writes a single block as independent even when asked for
    # linked ones): independent blocks (0x20), block and content checksums (0x10, 0x04).
    flags = frame[4]
    if not flags & 0x20 or flags & 0x14:
        assert taken is None
    else:
        assert taken == data
    assert (flags & 0x20 == 0) <= block_linked  # a linked frame only when asked for
    assert codecs.decompress(Compression.LZ4, frame) == data


def outcome(frame: bytes, max_output_bytes: int) -> bytes | str:
    try:
        return codecs.decompress(Compression.LZ4, frame, max_output_bytes)
    except CorruptRecordError as exc:
        return f"CorruptRecordError: {exc}"


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    data=payloads,
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 40),
)
def test_damaged_frames_decode_as_the_reference_or_not_at_all(
    data: bytes, flips: list[tuple[int, int]], cut: int
) -> None:
    """A damaged frame: either left to the reference (None), or decoded to the reference's own
    bytes (a damaged literal decodes the same wrong way in both). codecs.decompress answers as
    without the extension: the same bytes or the same error."""
    assert _native is not None
    damaged = bytearray(kafka_frame(data))
    for position, value in flips:
        damaged[position % len(damaged)] = value
    frame = bytes(damaged[: max(1, len(damaged) - cut)])
    taken = _native.lz4_frame_decompress(frame, 1 << 30)
    if taken is not None:
        assert taken == reference(frame)
    with_native = outcome(frame, 1 << 30)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(codecs, "_native_lz4", lambda: None)
        assert outcome(frame, 1 << 30) == with_native


@needs_native
@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("spare", [-1, 0, 1])
def test_the_output_bound_is_the_references(
    spare: int, store_size: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Output over max_output_bytes is not the extension's to refuse: None, and codecs raises
    the reference's error; at the bound it decodes. With and without a content size (then the
    output is sized by it, not by the blocks)."""
    assert _native is not None
    data = b"0123456789abcdef" * 20_000  # 320,000 bytes in 5 blocks
    frame = lz4.frame.compress(data, block_linked=False, store_size=store_size)
    bound = len(data) + spare
    taken = _native.lz4_frame_decompress(frame, bound)
    assert taken == (None if spare < 0 else data)
    with_native = outcome(frame, bound)
    assert with_native == data if spare >= 0 else "more than" in str(with_native)
    monkeypatch.setattr(codecs, "_native_lz4", lambda: None)
    assert outcome(frame, bound) == with_native


@needs_native
def test_empty_and_stored_blocks() -> None:
    """An empty frame, and incompressible data, which the compressor stores uncompressed."""
    assert _native is not None
    assert _native.lz4_frame_decompress(kafka_frame(b""), 100) == b"" == reference(kafka_frame(b""))
    noise = bytes((i * 7919 + (i >> 8) * 104729) % 251 for i in range(200_000))
    frame = kafka_frame(noise)
    assert _native.lz4_frame_decompress(frame, 1 << 30) == noise


@needs_native
@pytest.mark.parametrize(
    ("position", "value", "why"),
    [
        (0, 0x05, "magic"),
        (4, 0x00, "version"),
        (4, 0x62, "reserved FLG bit"),
        (5, 0x80, "reserved BD bit"),
        (5, 0x30, "block size id below 4"),
        (6, 0x00, "header checksum"),
    ],
)
def test_header_problems_are_left_to_the_reference(position: int, value: int, why: str) -> None:
    assert _native is not None
    frame = bytearray(kafka_frame(b"abc" * 1000))
    assert frame[position] != value, why
    frame[position] = value
    assert _native.lz4_frame_decompress(bytes(frame), 1 << 30) is None, why


def spliced(header_of: bytes, blocks_of: bytes, header_bytes: int) -> bytes:
    """The first ``header_bytes`` (magic, descriptor, header checksum) of one frame, then the
    blocks of another: a frame whose descriptor (with a valid checksum) lies about its blocks."""
    return header_of[:header_bytes] + blocks_of[header_bytes:]


@needs_native
def test_a_block_over_the_frames_block_size_is_left_to_the_reference() -> None:
    """One 200,000-byte block of a 256 KiB-block frame under a 64 KiB-block descriptor: liblz4's
    frame API refuses it, so must this (it decodes blocks with at most the frame's block size)."""
    assert _native is not None
    data = b"spliced block " * 15_000  # 210,000 bytes
    big = kafka_frame(data, lz4.frame.BLOCKSIZE_MAX256KB)
    small = kafka_frame(b"x", lz4.frame.BLOCKSIZE_MAX64KB)
    assert _native.lz4_frame_decompress(big, 1 << 30) == data
    frame = spliced(small, big, 7)
    assert reference(frame) is None
    assert _native.lz4_frame_decompress(frame, 1 << 30) is None


@needs_native
@pytest.mark.parametrize("declared", [1, 9_999, 10_001, 20_000])
def test_a_content_size_the_blocks_do_not_meet_is_left_to_the_reference(declared: int) -> None:
    assert _native is not None
    data = bytes(range(100)) * 100  # 10,000 bytes

    def sized(content: bytes) -> bytes:
        frame: bytes = lz4.frame.compress(content, block_linked=False, store_size=True)
        return frame

    assert _native.lz4_frame_decompress(sized(data), 1 << 30) == data
    frame = spliced(sized(b"\x00" * declared), sized(data), 15)
    assert reference(frame) is None
    assert _native.lz4_frame_decompress(frame, 1 << 30) is None


def blocks_of(frame: bytes, header_bytes: int = 7) -> list[bytes]:
    """The blocks of a frame without checksums, each with its size word."""
    blocks, pos = [], header_bytes
    while (word := int.from_bytes(frame[pos : pos + 4], "little")) != 0:
        size = word & 0x7FFF_FFFF
        blocks.append(frame[pos : pos + 4 + size])
        pos += 4 + size
    return blocks


@needs_native
def test_a_later_block_over_the_block_size_is_left_to_the_reference() -> None:
    """A small block, then one that decodes to 210,000 bytes, under a 64 KiB-block descriptor:
    the first block's unused room must not let the second through."""
    assert _native is not None
    # Blocks that compress a little: each may make up to 64 KiB for all the frame can tell, so
    # four leave room enough for the big one if the block size were not applied to each.
    rng = random.Random(7)
    firsts = [kafka_frame(rng.randbytes(1_000) + bytes(300)) for _ in range(4)]
    assert all(not block[3] & 0x80 for frame in firsts for block in blocks_of(frame))
    big = kafka_frame(b"spliced block " * 15_000, lz4.frame.BLOCKSIZE_MAX256KB)
    frame = firsts[0][:7] + b"".join(blocks_of(f)[0] for f in firsts) + blocks_of(big)[0]
    frame += bytes(4)
    assert reference(frame) is None
    assert _native.lz4_frame_decompress(frame, 1 << 30) is None


@needs_native
def test_linked_blocks_are_left_to_the_reference_even_without_back_references() -> None:
    """Incompressible blocks of a linked frame refer to nothing before them, so each would
    decode alone: still the reference's (Kafka refuses linked frames; the reference decides)."""
    assert _native is not None
    noise = random.Random(3).randbytes(200_000)
    frame = lz4.frame.compress(noise, block_linked=True, store_size=False)
    assert not frame[4] & 0x20 and len(blocks_of(frame)) > 1
    assert reference(frame) == noise
    assert _native.lz4_frame_decompress(frame, 1 << 30) is None


@needs_native
def test_a_stored_block_over_the_block_size_is_left_to_the_reference() -> None:
    assert _native is not None
    header = kafka_frame(b"x")[:7]  # 64 KiB blocks
    stored = (0x8000_0000 | 70_000).to_bytes(4, "little") + bytes(70_000)
    frame = header + stored + bytes(4)
    assert reference(frame) is None
    assert _native.lz4_frame_decompress(frame, 1 << 30) is None
    fits = header + (0x8000_0000 | 60_000).to_bytes(4, "little") + bytes(60_000) + bytes(4)
    assert _native.lz4_frame_decompress(fits, 1 << 30) == bytes(60_000) == reference(fits)


@needs_native
def test_threads_decode_at_once_into_their_own_buffers() -> None:
    """Decoding runs without the GIL into a buffer per thread: threads decoding different frames
    at once each get their own frame's content."""
    assert _native is not None
    native = _native
    contents = [bytes([i]) * 150_000 + random.Random(i).randbytes(60_000) for i in range(4)]
    frames = [kafka_frame(content) for content in contents]

    def decode(i: int) -> bool:
        decoded = [native.lz4_frame_decompress(frames[i], 1 << 30) for _ in range(40)]
        return all(out == contents[i] for out in decoded)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(decode, range(4))) == [True] * 4
