"""SkimpyOffsetMap (Kafka's OffsetMapTest, plus the memory bound and a dict model)."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore.cleaner.offset_map import ENTRY_BYTES, SkimpyOffsetMap, key_digest

SECRET = bytes(range(16))


def test_basic_validation_and_overwrite() -> None:
    """Kafka OffsetMapTest.testBasicValidation: every key reads back; puts overwrite."""
    offset_map = SkimpyOffsetMap(4096 * ENTRY_BYTES)
    for i in range(1000):
        offset_map.put(b"%d" % i, i)
    assert all(offset_map.get(b"%d" % i) == i for i in range(1000))
    offset_map.put(b"7", 5000)
    assert offset_map.get(b"7") == 5000 and offset_map.size == 1000
    assert offset_map.get(b"absent") == -1
    assert offset_map.latest_offset == 5000


def test_clear() -> None:
    offset_map = SkimpyOffsetMap(100 * ENTRY_BYTES)
    for i in range(10):
        offset_map.put(b"%d" % i, i)
    offset_map.clear()
    assert offset_map.size == 0 and offset_map.get(b"3") == -1 and offset_map.latest_offset == -1


def test_clear_sized_for_a_round_probes_a_prefix_that_cannot_fill() -> None:
    """clear(max_keys): the probes cover just enough slots that max_keys distinct keys fit
    below the capacity (the round ends where it would over the whole table), utilization
    stays measured against the budget, and clear() without a bound probes the budget again."""
    offset_map = SkimpyOffsetMap(100_000 * ENTRY_BYTES, load_factor=0.9)
    assert offset_map.slots == offset_map.budget_slots == 100_000
    for keys in (0, 1, 5000, 20_000):
        offset_map.clear(max_keys=keys)
        assert offset_map.capacity > keys
        assert offset_map.slots < offset_map.budget_slots
        for i in range(keys):
            offset_map.put(b"key-%d" % i, i)
        assert offset_map.size == keys < offset_map.capacity
        assert all(offset_map.get(b"key-%d" % i) == i for i in range(keys))
        assert offset_map.utilization == keys / 100_000
    offset_map.clear(max_keys=10_000_000)  # more than the budget holds: the whole table
    assert offset_map.slots == offset_map.budget_slots
    offset_map.clear(max_keys=10)
    offset_map.clear()
    assert offset_map.slots == offset_map.budget_slots and offset_map.capacity == 90_000


def test_fills_to_every_slot_then_refuses() -> None:
    offset_map = SkimpyOffsetMap(64 * ENTRY_BYTES, load_factor=1.0)
    for i in range(64):
        offset_map.put(b"key-%d" % i, i)
    assert offset_map.size == 64 == offset_map.slots
    assert all(offset_map.get(b"key-%d" % i) == i for i in range(64))
    offset_map.put(b"key-3", 99)  # an existing key still updates
    assert offset_map.get(b"key-3") == 99
    assert offset_map.get(b"absent") == -1  # terminates on a full map
    with pytest.raises(AssertionError, match="full offset map"):
        offset_map.put(b"one more", 1)


def test_capacity_and_progress_rules() -> None:
    assert SkimpyOffsetMap(1000 * ENTRY_BYTES, 0.9).capacity == 900
    with pytest.raises(ValueError, match="too small to make progress"):
        SkimpyOffsetMap(ENTRY_BYTES, 0.5)
    with pytest.raises(ValueError, match="holds no key"):
        SkimpyOffsetMap(10)


def test_probe_sequence_is_kafkas() -> None:
    """Attempts walk the 13 four-byte windows of the digest, then go linear."""
    offset_map = SkimpyOffsetMap(1_000_003 * ENTRY_BYTES)
    digest = key_digest(b"some key", SECRET)
    for attempt in range(20):
        window = min(attempt, 12)
        probe = struct.unpack_from(">i", digest, window)[0] + max(0, attempt - 12)
        assert offset_map._slot(digest, attempt) == abs(probe) % 1_000_003


def test_int_min_probe_maps_to_slot_zero() -> None:
    offset_map = SkimpyOffsetMap(7 * ENTRY_BYTES)
    digest = b"\x80\x00\x00\x00" + bytes(12)
    assert offset_map._slot(digest, 0) == 0


def test_memory_is_the_configured_buffer_whatever_the_key_count() -> None:
    memory = 240_000
    tracemalloc.start()
    offset_map = SkimpyOffsetMap(memory)
    baseline, _ = tracemalloc.get_traced_memory()
    for i in range(offset_map.capacity):
        offset_map.put(b"k%d" % i, i)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert offset_map.memory_bytes == memory
    assert current - baseline < 4096  # filling allocates (almost) nothing
    assert peak - baseline < 4096


@given(
    operations=st.lists(
        st.tuples(st.binary(max_size=4), st.integers(min_value=0, max_value=2**62)), max_size=200
    )
)
def test_matches_a_dict_model(operations: list[tuple[bytes, int]]) -> None:
    offset_map = SkimpyOffsetMap(512 * ENTRY_BYTES, load_factor=1.0, secret=SECRET)
    model: dict[bytes, int] = {}
    for key, offset in operations:
        offset_map.put(key, offset)
        model[key_digest(key, SECRET)] = offset
    assert offset_map.size == len(model)
    for digest, offset in model.items():
        assert offset_map.get_digest(digest) == offset


def test_each_round_draws_a_new_secret_unless_one_is_given() -> None:
    """A key pair that collides (by chance) under one round's secret does not under the next:
    every clear() draws a new secret; a Spark job's fixed secret stays."""
    offset_map = SkimpyOffsetMap(64 * ENTRY_BYTES)
    secrets = {offset_map.secret}
    for _ in range(5):
        offset_map.clear()
        secrets.add(offset_map.secret)
    assert len(secrets) == 6
    assert all(len(secret) == 16 for secret in secrets)
    fixed = SkimpyOffsetMap(64 * ENTRY_BYTES, secret=SECRET)
    fixed.clear()
    assert fixed.secret == SECRET
    with pytest.raises(ValueError, match="secret of 3 bytes"):
        SkimpyOffsetMap(64 * ENTRY_BYTES, secret=b"abc")


def test_digests_depend_on_the_secret() -> None:
    other = bytes(16)
    assert key_digest(b"k", SECRET) != key_digest(b"k", other)
    assert key_digest(b"k", SECRET) == key_digest(b"k", SECRET)
