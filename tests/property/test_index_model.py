"""Index lookups against a sorted-map model (Kafka's OffsetIndexTest uses a TreeMap)."""

from __future__ import annotations

import bisect
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore.index import OffsetIndex, TimeIndex

pytestmark = pytest.mark.property

BASE = 1_000


@given(
    deltas=st.lists(st.integers(min_value=1, max_value=50), max_size=60),
    targets=st.lists(st.integers(min_value=BASE - 10, max_value=BASE + 3_100), max_size=40),
    truncate_at=st.none() | st.integers(min_value=BASE, max_value=BASE + 3_100),
)
def test_offset_index_matches_sorted_map(
    deltas: list[int], targets: list[int], truncate_at: int | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = OffsetIndex(Path(tmp) / "x.index", BASE, 80 * 8)
        model: dict[int, int] = {}
        offset = BASE
        for i, delta in enumerate(deltas):
            offset += delta
            index.append(offset, i * 100)
            model[offset] = i * 100
        if truncate_at is not None:
            index.truncate_to(truncate_at)
            model = {o: p for o, p in model.items() if o < truncate_at}
        keys = sorted(model)
        for target in targets:
            slot = bisect.bisect_right(keys, target) - 1
            expected = (keys[slot], model[keys[slot]]) if slot >= 0 else (BASE, 0)
            assert tuple(index.lookup(target)) == expected
        index.close()
        reopened = OffsetIndex(Path(tmp) / "x.index", BASE, 80 * 8, writable=False)
        assert [tuple(reopened.entry_at(n)) for n in range(reopened.entries)] == sorted(
            model.items()
        )
        reopened.close()


@given(
    points=st.lists(
        st.tuples(st.integers(min_value=0, max_value=20), st.integers(min_value=0, max_value=5)),
        max_size=50,
    ),
    targets=st.lists(st.integers(min_value=-5, max_value=2_000), max_size=30),
)
def test_time_index_matches_model(points: list[tuple[int, int]], targets: list[int]) -> None:
    """Append (timestamp step, offset step) pairs; only strictly greater timestamps stay."""
    with tempfile.TemporaryDirectory() as tmp:
        index = TimeIndex(Path(tmp) / "x.timeindex", BASE, 80 * 12)
        model: list[tuple[int, int]] = []
        timestamp, offset = 0, BASE
        for ts_step, offset_step in points:
            timestamp += ts_step
            offset += offset_step
            index.maybe_append(timestamp, offset)
            if not model or timestamp > model[-1][0]:
                model.append((timestamp, offset))
        for target in targets:
            candidates = [entry for entry in model if entry[0] <= target]
            expected = candidates[-1] if candidates else (-1, BASE)
            assert tuple(index.lookup(target)) == expected
        index.close()
