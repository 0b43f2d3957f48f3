"""storagecore.records.crc: the records extension's CRC-32C, or the crc32c package's without
extensions; both against the package on every block boundary of the three-stream path."""

from __future__ import annotations

import random

import crc32c as crc32c_package
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore.native import load_extension
from storagecore.records import crc

_NATIVE = load_extension("storagecore.records._native")


def test_the_loaded_implementation_is_used() -> None:
    expected = crc32c_package.crc32c if _NATIVE is None else _NATIVE.crc32c
    assert crc.crc32c is expected


@pytest.mark.parametrize(
    "length", [0, 1, 7, 8, 9, 767, 768, 769, 24_575, 24_576, 24_577, 65_536, 200_001]
)
def test_matches_the_package_around_block_boundaries(length: int) -> None:
    data = random.Random(length).randbytes(length)
    assert crc.crc32c(data) == crc32c_package.crc32c(data)
    assert crc.crc32c(memoryview(bytearray(data))) == crc32c_package.crc32c(data)


@given(st.binary(max_size=3000), st.integers(0, 64))
def test_matches_the_package_on_any_slice(data: bytes, skip: int) -> None:
    view = memoryview(data)[min(skip, len(data)) :]
    assert crc.crc32c(view) == crc32c_package.crc32c(bytes(view))


def test_rejects_what_is_not_a_buffer() -> None:
    with pytest.raises(TypeError):
        crc.crc32c("text")  # type: ignore[arg-type]
