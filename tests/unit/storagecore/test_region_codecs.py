"""The codecs the cleaner's region calls take per compressed batch
(storagecore.cleaner.offset_map.DECOMPRESSORS): lz4 by one library call, with the reference's
bytes and errors, and the reference beyond the size that could expand past its bound."""

from __future__ import annotations

import unittest.mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore import Compression
from storagecore.cleaner import offset_map as offset_map_module
from storagecore.errors import CorruptRecordError
from storagecore.records import codecs as records_codecs


@given(data=st.binary(max_size=3000), junk=st.binary(max_size=8))
def test_region_lz4_decompressor_gives_the_reference_bytes(data: bytes, junk: bytes) -> None:
    """The region calls' lz4 decompressor (one library call per batch) returns what the
    reference's stepped reads return, trailing bytes after the frame ignored by both, and
    raises where the reference raises (the engine then leaves the batch to the reference)."""
    frame = records_codecs.compress(Compression.LZ4, data)
    decompress = offset_map_module.DECOMPRESSORS[int(Compression.LZ4)]
    assert decompress is not None
    for payload in (frame, frame + junk):
        expected = records_codecs.decompress(Compression.LZ4, payload)
        assert decompress(memoryview(payload)) == expected == data
    with pytest.raises(CorruptRecordError):
        records_codecs.decompress(Compression.LZ4, frame[:-5])
    with pytest.raises(Exception):  # noqa: B017 - the library's own error types
        decompress(memoryview(frame[:-5]))


def test_region_lz4_decompressor_takes_the_reference_above_its_bound() -> None:
    """A payload past the whole-call bound goes through the reference, whose stepped reads
    stop a payload that would expand past its output bound."""
    frame = records_codecs.compress(Compression.LZ4, b"x" * 5000)
    with (
        unittest.mock.patch.object(offset_map_module, "_LZ4_WHOLE_INPUT_BYTES_MAX", 10),
        unittest.mock.patch.object(
            records_codecs, "decompress", wraps=records_codecs.decompress
        ) as reference,
    ):
        assert offset_map_module._decompress_lz4(memoryview(frame)) == b"x" * 5000
    assert reference.call_count == 1
