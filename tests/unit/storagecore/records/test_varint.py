from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore.errors import CorruptRecordError
from storagecore.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    varint_size,
)

# (value, zigzag varint bytes) as protobuf/Kafka encode them.
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]
VARLONG_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (300, "d804"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_VECTORS)
def test_varint_vectors(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)
    assert varint_size(value) == len(encoded) // 2


@pytest.mark.parametrize(("value", "encoded"), VARLONG_VECTORS)
def test_varlong_vectors(value: int, encoded: str) -> None:
    assert encode_varlong(value).hex() == encoded
    assert decode_varlong(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


def test_truncated_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="truncated varint at byte 1"):
        decode_varint(b"\x00\x80", 1)


def test_overlong_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(b"\xff\xff\xff\xff\xff\x01", 0)


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(2**31)
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(2**63)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert varint_size(value) == len(encoded)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert decode_varlong(encoded, 0) == (value, len(encoded))
