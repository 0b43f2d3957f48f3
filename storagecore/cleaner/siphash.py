"""SipHash-c-d with a 128-bit output: the offset map's keyed key digest, in pure Python.

The reference for ``storagecore/cleaner/_siphash.h`` (the C engine's copy). The cleaner uses
SipHash-1-3-128 (:data:`C_ROUNDS`, :data:`D_ROUNDS`) under a secret drawn for each clean;
docs/offset-map.md says why a keyed pseudo-random function and not MD5. The round counts are
parameters so that the tests can check the 2-4 instance against the reference vectors of the
SipHash paper's implementation.

Slow (tens of microseconds a key): it is the specification, and the path of a process run
with ``STORAGECORE_NO_EXTENSIONS=1``; the cleaner's hot path is the C engine.
"""

from __future__ import annotations

from typing import Final

SECRET_BYTES: Final = 16
DIGEST_BYTES: Final = 16
C_ROUNDS: Final = 1
D_ROUNDS: Final = 3

_MASK: Final = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def siphash128(
    data: bytes | bytearray | memoryview,
    secret: bytes,
    c_rounds: int = C_ROUNDS,
    d_rounds: int = D_ROUNDS,
) -> bytes:
    """SipHash-``c_rounds``-``d_rounds``-128 of ``data`` under the 16-byte ``secret``: the two
    64-bit halves, little-endian, as the reference implementation writes them."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"siphash secret of {len(secret)} bytes (expected {SECRET_BYTES})")
    data = bytes(data)
    k0 = int.from_bytes(secret[:8], "little")
    k1 = int.from_bytes(secret[8:], "little")
    v = [
        0x736F6D6570736575 ^ k0,
        0x646F72616E646F6D ^ k1 ^ 0xEE,
        0x6C7967656E657261 ^ k0,
        0x7465646279746573 ^ k1,
    ]

    def rounds(n: int) -> None:
        v0, v1, v2, v3 = v
        for _ in range(n):
            v0 = (v0 + v1) & _MASK
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & _MASK
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & _MASK
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & _MASK
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)
        v[:] = [v0, v1, v2, v3]

    whole = len(data) - len(data) % 8
    for start in range(0, whole, 8):
        m = int.from_bytes(data[start : start + 8], "little")
        v[3] ^= m
        rounds(c_rounds)
        v[0] ^= m
    last = (len(data) & 0xFF) << 56 | int.from_bytes(data[whole:], "little")
    v[3] ^= last
    rounds(c_rounds)
    v[0] ^= last
    v[2] ^= 0xEE
    rounds(d_rounds)
    low = v[0] ^ v[1] ^ v[2] ^ v[3]
    v[1] ^= 0xDD
    rounds(d_rounds)
    high = v[0] ^ v[1] ^ v[2] ^ v[3]
    return low.to_bytes(8, "little") + high.to_bytes(8, "little")
