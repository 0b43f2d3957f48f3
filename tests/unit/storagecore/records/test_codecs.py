"""Codec framing as Kafka writes and reads it (kafka-log-layer.md §1.5)."""

from __future__ import annotations

import gzip
import os
import struct
import unittest.mock

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from storagecore.errors import CorruptRecordError, UnsupportedCompressionError
from storagecore.records import codecs
from storagecore.records.codecs import Compression, compress, decompress

TEXT = b"".join(
    b'{"user": %d, "event": "click", "page": "/p/%d"}' % (i, i % 97) for i in range(4000)
)


@pytest.mark.parametrize("codec", list(Compression))
@pytest.mark.parametrize("size", [0, 1, 1000, 65_536, 70_000, 250_000])
def test_round_trip(codec: Compression, size: int) -> None:
    data = (TEXT * 2)[:size]
    assert decompress(codec, compress(codec, data)) == data


def test_lz4_uses_independent_blocks_without_content_size_above_64_kib() -> None:
    frame = compress(Compression.LZ4, TEXT * 2)  # > 250 KB: several 64 KiB blocks
    assert len(TEXT) * 2 > 4 * 65_536
    assert frame[:4] == bytes.fromhex("04224d18")
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 0b01, "version 01"
    assert flg & 0x20, "block independence: Kafka rejects dependent blocks"
    assert not flg & 0x08, "no content size"
    assert not flg & 0x10, "no block checksum"
    assert (bd >> 4) & 0x07 == 4, "64 KiB maximum block size"


def test_python_lz4_default_would_be_linked_above_64_kib() -> None:
    """The trap the codec avoids: lz4.frame's default links blocks for large inputs."""
    frame = lz4.frame.compress(TEXT * 2, block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    assert not frame[4] & 0x20


def test_zstd_frames_have_no_content_size_and_such_frames_are_read() -> None:
    frame = compress(Compression.ZSTD, TEXT)
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    # A frame written by a streaming compressor (what Kafka's zstd-jni writes) reads too.
    streamed = zstandard.ZstdCompressor().compressobj().compress(TEXT)
    streamed += zstandard.ZstdCompressor().compressobj().flush()
    stream_writer_frame = zstandard.ZstdCompressor(write_content_size=False).compress(TEXT)
    assert decompress(Compression.ZSTD, stream_writer_frame) == TEXT


def test_snappy_uses_xerial_framing_with_32_kib_blocks() -> None:
    framed = compress(Compression.SNAPPY, TEXT)
    assert framed[:16] == bytes.fromhex("82534e415050590000000001 00000001".replace(" ", ""))
    (first_block,) = struct.unpack_from(">i", framed, 16)
    block = bytes(cramjam.snappy.decompress_raw(framed[20 : 20 + first_block]))
    assert block == TEXT[: 32 * 1024]


def test_snappy_reads_raw_payloads_and_little_endian_versions() -> None:
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(TEXT))) == TEXT
    framed = bytearray(compress(Compression.SNAPPY, TEXT))
    framed[8:16] = struct.pack("<ii", 1, 1)  # some writers store the versions little-endian
    assert decompress(Compression.SNAPPY, bytes(framed)) == TEXT


def test_gzip_reads_concatenated_members() -> None:
    data = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, data) == b"first second"


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_garbage_is_a_corrupt_record_naming_the_codec(codec: Compression) -> None:
    with pytest.raises(CorruptRecordError, match=codec.config_name):
        decompress(
            codec,
            os.urandom(64)
            if codec is not Compression.SNAPPY
            else b"\x82SNAPPY\x00" + os.urandom(40),
        )


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_truncated_payload_is_corrupt(codec: Compression) -> None:
    framed = compress(codec, TEXT)
    with pytest.raises(CorruptRecordError):
        decompress(codec, framed[: len(framed) // 2])


@pytest.mark.parametrize("codec", [c for c in Compression if c is not Compression.NONE])
def test_decompressed_size_is_bounded(codec: Compression) -> None:
    bomb = compress(codec, b"\x00" * 2_000_000)
    with pytest.raises(CorruptRecordError, match="more than 100000 bytes"):
        decompress(codec, bomb, max_output_bytes=100_000)


def test_unknown_codec_id_and_name() -> None:
    with pytest.raises(UnsupportedCompressionError, match="codec id 5"):
        Compression.from_id(5)
    with pytest.raises(ValueError, match="brotli"):
        Compression.from_name("brotli")
    assert Compression.from_name("uncompressed") is Compression.NONE


@given(data=st.binary(max_size=3000), junk=st.binary(max_size=8), cut=st.integers(1, 12))
def test_lz4_whole_call_gives_the_stepped_reads_bytes_and_errors(
    data: bytes, junk: bytes, cut: int
) -> None:
    """A small lz4 payload is decompressed by one library call; it gives what the stepped reads
    give (trailing bytes after the frame ignored by both), and a damaged frame gets the stepped
    reads' own error."""
    frame = compress(Compression.LZ4, data)
    for payload in (frame, frame + junk):
        assert decompress(Compression.LZ4, payload) == codecs._unlz4_stepped(payload, 1 << 20)
        assert decompress(Compression.LZ4, payload) == data
    damaged = frame[:-cut]
    with pytest.raises(CorruptRecordError) as whole:
        decompress(Compression.LZ4, damaged)
    with pytest.raises(CorruptRecordError) as stepped:
        decompress(Compression.LZ4, damaged, max_output_bytes=len(damaged))  # stepped only
    assert str(whole.value) == str(stepped.value)


def test_lz4_takes_the_stepped_reads_where_the_output_could_pass_the_bound() -> None:
    """One call only when the payload cannot expand past the bound (255-fold at most): a
    payload above a 256th of it goes through the stepped reads, which stop at the bound."""
    frame = compress(Compression.LZ4, b"x" * 100_000)  # a few hundred bytes
    with unittest.mock.patch.object(
        codecs, "_unlz4_stepped", wraps=codecs._unlz4_stepped
    ) as stepped:
        assert decompress(Compression.LZ4, frame) == b"x" * 100_000
        assert stepped.call_count == 0
        with pytest.raises(CorruptRecordError, match="more than 1000 bytes"):
            decompress(Compression.LZ4, frame, max_output_bytes=1000)
        assert stepped.call_count == 1
