"""The cleaner against a model: random appends (keys, values, tombstones, codecs, several
segments), random cleaning rounds with small offset maps, clock advances, time retention and
reopen. After every step, reading the log equals the model:

* below the round's end, the latest record per key (tombstones until their horizon, which is
  stamped by the first round that keeps them and survives a reopen);
* from the round's end on, everything untouched; offsets unchanged, order kept;
* retention only ever removes records older than ``retention.ms``.

The model predicts each round itself (its end offset from the map capacity, which records go),
taking only the segment boundaries from the log: they decide which batches a round rewrites.
Batches hold one record each so that the horizon, stamped per batch, is per record here
(multi-record batches are covered by the LogCleanerTest ports).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from storagecore import Compression, Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.log_to_clean import cleanable_offsets, log_to_clean
from storagecore.cleaner.offset_map import SkimpyOffsetMap

pytestmark = pytest.mark.property

DELETE_RETENTION_MS = 1000
RETENTION_MS = 50_000
CONFIG = LogConfig(
    cleanup_policy=("compact", "delete"),
    segment_bytes=400,
    index_interval_bytes=100,
    delete_retention_ms=DELETE_RETENTION_MS,
    retention_ms=RETENTION_MS,
    file_delete_delay_ms=0,
)
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]


@dataclasses.dataclass
class Entry:
    key: bytes
    value: bytes | None
    timestamp: int
    horizon: int | None = None


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.directory = self.tmp / "model-0"
        self.clock = ManualClock()
        self.log = Log.open(self.directory, CONFIG, self.clock)
        self.model: dict[int, Entry] = {}
        self.next_offset = 0
        self.checkpoint = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(
        key=st.sampled_from(KEYS),
        tombstone=st.booleans(),
        codec=st.sampled_from(list(Compression)),
        size=st.integers(min_value=0, max_value=40),
    )
    def append(self, key: bytes, tombstone: bool, codec: Compression, size: int) -> None:
        value = None if tombstone else bytes([65 + self.next_offset % 26]) * size
        now = self.clock.milliseconds()
        offset = self.log.append(
            build_batch([NewRecord(key=key, value=value, timestamp=now)], compression=codec)
        ).first_offset
        assert offset == self.next_offset
        self.model[offset] = Entry(key, value, now)
        self.next_offset += 1

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(delta=st.integers(min_value=0, max_value=2 * DELETE_RETENTION_MS))
    def advance(self, delta: int) -> None:
        self.clock.advance(delta)

    @rule(slots=st.integers(min_value=2, max_value=12))
    def clean(self, slots: int) -> None:
        now = self.clock.milliseconds()
        offsets = cleanable_offsets(self.log, self.checkpoint, now)
        to_clean = log_to_clean(self.log, offsets, now)
        start, upper = to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
        bases = [s.base_offset for s in self.log.segments]
        offset_map = SkimpyOffsetMap(24 * slots, load_factor=0.75)
        # the model's round: map keys of [start, upper) until the map is full
        latest: dict[bytes, int] = {}
        last_put = start - 1
        full = False
        for offset in sorted(o for o in self.model if start <= o < upper):
            if len(latest) >= offset_map.capacity:
                full = True
                break
            latest[self.model[offset].key] = offset
            last_put = offset
        end = (last_put + 1) if full else max(upper, start)
        rewritten_to = min((b for b in bases if b >= end), default=end)
        stats = Cleaner(offset_map=offset_map).clean(CleanRequest(self.log, start, upper), now)
        assert stats.end_offset == end
        for offset in sorted(o for o in self.model if o < rewritten_to):
            entry = self.model[offset]
            keep = True
            if offset < end:
                if offset < latest.get(entry.key, -1):
                    keep = False
                elif entry.value is None and entry.horizon is not None:
                    keep = now < entry.horizon
            if not keep:
                del self.model[offset]
            elif entry.value is None and entry.horizon is None:
                entry.horizon = now + DELETE_RETENTION_MS
        self.checkpoint = end

    @rule()
    def retention(self) -> None:
        now = self.clock.milliseconds()
        plan = self.log.delete_old_segments()
        for offset in [o for o in self.model if o < plan.log_start_offset_after]:
            assert now - self.model[offset].timestamp > RETENTION_MS, "a young record deleted"
            del self.model[offset]
        self.checkpoint = max(self.checkpoint, self.log.log_start_offset)

    @rule()
    def reopen(self) -> None:
        self.log.flush()
        self.log.close()
        self.log = Log.open(
            self.directory,
            CONFIG,
            self.clock,
            recovery_point=self.log.recovery_point,
            log_start_offset=self.log.log_start_offset,
            had_clean_shutdown=True,
        )

    @invariant()
    def reads_equal_the_model(self) -> None:
        actual = [
            (r.offset, r.key, r.value, r.timestamp)
            for r in self.log.records(self.log.log_start_offset)
        ]
        expected = [
            (o, e.key, e.value, e.timestamp)
            for o, e in sorted(self.model.items())
            if o >= self.log.log_start_offset
        ]
        assert actual == expected
        assert self.log.log_end_offset == self.next_offset


TestCleanerModel = CleanerMachine.TestCase
