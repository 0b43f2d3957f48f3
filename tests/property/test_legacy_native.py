"""The legacy message-set readers against a simple model, and against each other.

Generated message sets (v0 and v1 messages; keys, values and timestamps of any kind; plain
sets and the inner sets of v0/v1 wrappers, LogAppendTime or not, relative or absolute) must
decode to the model, in the pure-Python reference (``legacy.decode_message_set``) and in the C
reader (``_native.decode_legacy_set``); damaged ones (a flipped byte, a cut, a bad size or
magic) must give both the same answer, records or problem text (issue 21).
"""

from __future__ import annotations

import importlib
import os
import struct
import types
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore.records import legacy

pytestmark = pytest.mark.property

_native: types.ModuleType | None
try:
    _native = importlib.import_module("storagecore.records._native")
except ImportError:  # pragma: no cover - the build is checked by the implementation test
    _native = None
needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not built")

INT64 = st.integers(-(2**63), 2**63 - 1)
FIELD = st.none() | st.binary(max_size=40)


def test_expected_implementation_is_loaded() -> None:
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == legacy.IMPLEMENTATION


@needs_native
def test_native_constants_agree() -> None:
    assert _native is not None
    assert legacy.ENTRY_HEADER.size == _native.LEGACY_HEADER_BYTES
    assert _native.LEGACY_OVERHEAD_V0 == legacy.RECORD_OVERHEAD_V0
    assert _native.LEGACY_OVERHEAD_V1 == legacy.RECORD_OVERHEAD_V1


Spec = tuple[int, int, bytes | None, bytes | None]  # stored offset, timestamp, key, value


@st.composite
def message_sets(draw: st.DrawFn) -> tuple[int, int, bool, int, list[int], list[Spec]]:
    """(wrapper magic or -1, wrapper offset, log append, its time, magics, messages)."""
    wrapper_magic = draw(st.sampled_from([-1, 0, 1]))
    count = draw(st.integers(0 if wrapper_magic < 0 else 1, 8))
    # Inside a wrapper the messages have its magic; a plain set may mix them (an upgrade).
    if wrapper_magic >= 0:
        magics = [wrapper_magic] * count
    else:
        magics = [draw(st.sampled_from([0, 1])) for _ in range(count)]
    relative = wrapper_magic == 1
    first = draw(st.integers(0, 2**40))
    offsets = list(range(count)) if relative else [first + i for i in range(count)]
    messages = [(o, draw(INT64), draw(FIELD), draw(FIELD)) for o in offsets]
    wrapper_offset = draw(st.sampled_from([0, first + count])) if relative else first
    log_append = draw(st.booleans()) and wrapper_magic == 1
    return wrapper_magic, wrapper_offset, log_append, draw(INT64), magics, messages


def encode(magics: list[int], messages: list[Spec]) -> bytes:
    return b"".join(
        legacy.encode_message(o, magic, 0, ts, key=k, value=v)
        for magic, (o, ts, k, v) in zip(magics, messages, strict=True)
    )


def model(
    wrapper_magic: int,
    wrapper_offset: int,
    log_append: bool,
    log_append_time: int,
    magics: list[int],
    messages: list[Spec],
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """What a reader must answer: offsets absolute, v0 without timestamps, LAT applied."""
    relative = wrapper_magic == 1 and wrapper_offset != 0
    base = wrapper_offset - messages[-1][0] if relative else 0
    out = []
    for magic, (offset, ts, key, value) in zip(magics, messages, strict=True):
        stamp = -1 if magic == 0 else (log_append_time if log_append else ts)
        out.append((base + offset if relative else offset, stamp, key, value))
    return out


def both(data: bytes, *args: object) -> object:
    reference = legacy.decode_message_set(data, *args)  # type: ignore[arg-type]
    if _native is not None:
        assert _native.decode_legacy_set(data, *args) == reference
    return reference


@given(message_sets())
def test_valid_sets_decode_to_the_model(
    case: tuple[int, int, bool, int, list[int], list[Spec]],
) -> None:
    wrapper_magic, wrapper_offset, log_append, lat, magics, messages = case
    data = encode(magics, messages)
    assert both(data, wrapper_magic, wrapper_offset, log_append, lat) == model(*case)


@given(message_sets(), st.data())
def test_damaged_sets_get_the_same_answer(
    case: tuple[int, int, bool, int, list[int], list[Spec]], data: st.DataObject
) -> None:
    wrapper_magic, wrapper_offset, log_append, lat, magics, messages = case
    raw = bytearray(encode(magics, messages))
    damage = data.draw(st.sampled_from(["flip", "cut", "size", "magic", "compressed", "append"]))
    if raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        if damage == "flip":
            raw[at] ^= data.draw(st.integers(1, 255))
        elif damage == "cut":
            del raw[at:]
        elif damage == "size" and len(raw) >= 12:
            struct.pack_into(">i", raw, 8, data.draw(st.integers(-5, len(raw) + 5)))
        elif damage == "magic" and len(raw) > 16:
            raw[16] = data.draw(st.integers(0, 255))
            struct.pack_into(
                ">I", raw, 12, zlib.crc32(raw[16 : 12 + struct.unpack_from(">i", raw, 8)[0]])
            )
        elif damage == "compressed" and len(raw) > 17:
            raw[17] |= data.draw(st.integers(1, 3))
            struct.pack_into(
                ">I", raw, 12, zlib.crc32(raw[16 : 12 + struct.unpack_from(">i", raw, 8)[0]])
            )
    if damage == "append":
        raw += data.draw(st.binary(max_size=30))
    answer = both(bytes(raw), wrapper_magic, wrapper_offset, log_append, lat)
    if isinstance(answer, str):
        assert answer  # a problem names what is wrong


@given(
    st.sampled_from([0, 1]),
    st.integers(0, 3),
    INT64,
    FIELD,
    FIELD,
    st.data(),
)
def test_entry_checks_agree(
    magic: int,
    codec: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    data: st.DataObject,
) -> None:
    """One shallow entry (plain or a wrapper, whose value is not looked into here), valid or
    damaged: the reference and the C check give the same answer, and a valid one has none."""
    entry = bytearray(legacy.encode_message(7, magic, codec, timestamp, key=key, value=value))
    assert legacy.check_entry(bytes(entry)) is None
    damage = data.draw(st.sampled_from(["none", "flip", "cut", "attributes", "append"]))
    at = data.draw(st.integers(0, len(entry) - 1))
    if damage == "flip":
        entry[at] ^= data.draw(st.integers(1, 255))
    elif damage == "cut":
        del entry[at:]
    elif damage == "attributes":
        entry[17] = data.draw(st.integers(0, 255))
        struct.pack_into(">I", entry, 12, zlib.crc32(entry[16:]))
    elif damage == "append":
        entry += data.draw(st.binary(min_size=1, max_size=30))
    answer = legacy.check_entry(bytes(entry))
    if _native is not None:
        assert _native.check_legacy_entry(bytes(entry)) == answer
    if damage == "none":
        assert answer is None
