"""SipHash-c-d-128, the offset map's keyed digest: the reference vectors of the SipHash
authors' implementation (key 00..0f, message 00..n-1, the 2-4 instance), and the cleaner's
1-3 instance, in whichever implementation this process runs."""

from __future__ import annotations

import pytest

from storagecore.cleaner.offset_map import IMPLEMENTATION, key_digest
from storagecore.cleaner.siphash import siphash128

KEY = bytes(range(16))
# vectors_sip128[n] of the reference implementation's vectors.h.
SIPHASH_2_4_128 = [
    "a3817f04ba25a8e66df67214c7550293",
    "da87c1d86b99af44347659119b22fc45",
    "8177228da4a45dc7fca38bdef60affe4",
    "9c70b60c5267a94e5f33b6b02985ed51",
    "f88164c12d9c8faf7d0f6e7c7bcd5579",
]


@pytest.mark.parametrize(("length", "expected"), list(enumerate(SIPHASH_2_4_128)))
def test_reference_vectors(length: int, expected: str) -> None:
    assert siphash128(bytes(range(length)), KEY, 2, 4).hex() == expected


def test_the_cleaner_digest_is_siphash_1_3_in_either_implementation() -> None:
    assert IMPLEMENTATION in ("c", "python")
    for length in (0, 1, 7, 8, 9, 16, 100):
        data = bytes(range(length))
        assert key_digest(data, KEY) == siphash128(data, KEY, 1, 3)
    assert siphash128(b"", KEY, 1, 3) != siphash128(b"", KEY, 2, 4)


def test_a_secret_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(ValueError, match="secret of 15 bytes"):
        siphash128(b"k", bytes(15))
