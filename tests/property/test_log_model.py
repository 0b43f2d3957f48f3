"""The Log against an in-memory model under random appends, rolls, reads, delete-records
(truncation of the log start), flushes, clean close and reopen, and crash and reopen."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storagecore import (
    EARLIEST_TIMESTAMP,
    Compression,
    Log,
    LogConfig,
    ManualClock,
    NewRecord,
    OffsetOutOfRangeError,
    build_batch,
)
from storagecore.records.batch import iter_complete_batches

pytestmark = pytest.mark.property

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100, segment_index_bytes=240)
record_strategy = st.tuples(
    st.one_of(st.none(), st.binary(min_size=0, max_size=8)),
    st.one_of(st.none(), st.binary(min_size=0, max_size=60)),
    st.integers(min_value=0, max_value=10_000),
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.directory = self.tmp / "model-0"
        self.clock = ManualClock()
        self.log = Log.open(self.directory, CONFIG, self.clock)
        self.model: list[tuple[int, bytes | None, bytes | None, int]] = []
        self.log_start = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def end(self) -> int:
        return len(self.model)

    @rule(
        batch=st.lists(record_strategy, min_size=1, max_size=12),
        codec=st.sampled_from(list(Compression)),
    )
    def append(
        self, batch: list[tuple[bytes | None, bytes | None, int]], codec: Compression
    ) -> None:
        base_ms = self.clock.milliseconds()
        records = [NewRecord(key=k, value=v, timestamp=base_ms + t) for k, v, t in batch]
        info = self.log.append(build_batch(records, compression=codec))
        assert info.first_offset == self.end
        for record in records:
            self.model.append((len(self.model), record.key, record.value, record.timestamp))
        assert info.last_offset == self.end - 1

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.end

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(min_value=self.log_start, max_value=self.end))
        max_bytes = data.draw(st.integers(min_value=1, max_value=3000))
        fetched = self.log.read(offset, max_bytes)
        if offset == self.end:
            assert fetched.records == b""
            return
        batches = [b for _, b in iter_complete_batches(fetched.records)]
        assert batches, "a read below the log end returns at least one whole batch"
        assert fetched.next_offset == batches[-1].next_offset
        assert batches[0].base_offset <= offset <= batches[0].last_offset
        for batch in batches:
            batch.validate()
            for record in batch.records():
                assert (record.offset, record.key, record.value, record.timestamp) == self.model[
                    record.offset
                ]

    @rule(data=st.data())
    def read_out_of_range(self, data: st.DataObject) -> None:
        offset = data.draw(
            st.one_of(
                st.integers(max_value=self.log_start - 1), st.integers(min_value=self.end + 1)
            )
        )
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(offset, 100)

    @precondition(lambda self: self.end > 0)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(min_value=0, max_value=self.end))
        self.log.delete_records(offset)
        self.log_start = max(self.log_start, offset)

    @rule()
    def close_and_reopen(self) -> None:
        self.log.flush()
        self.log.close()
        self.log = Log.open(
            self.directory,
            CONFIG,
            self.clock,
            recovery_point=self.end,
            log_start_offset=self.log_start,
            had_clean_shutdown=True,
        )

    @rule()
    def crash_and_reopen(self) -> None:
        recovery_point = self.log.recovery_point
        self.log.close_handles()
        self.log = Log.open(
            self.directory,
            CONFIG,
            self.clock,
            recovery_point=recovery_point,
            log_start_offset=self.log_start,
            had_clean_shutdown=False,
        )

    @rule(step=st.integers(min_value=0, max_value=5_000))
    def time_passes(self, step: int) -> None:
        self.clock.advance(step)

    @rule(
        retention_bytes=st.sampled_from([-1, 0, 300, 1_500, 10_000]),
        retention_ms=st.sampled_from([-1, 0, 2_000, 20_000]),
        policy=st.sampled_from([("delete",), ("compact",), ("compact", "delete")]),
    )
    def retention(self, retention_bytes: int, retention_ms: int, policy: tuple[str, ...]) -> None:
        config = dataclasses.replace(
            CONFIG,
            retention_bytes=retention_bytes,
            retention_ms=retention_ms,
            cleanup_policy=policy,
        )
        self.log.update_config(config)
        before = [(s.base_offset, s.size_bytes) for s in self.log.segments]
        plan = self.log.delete_old_segments()
        self.log.update_config(CONFIG)
        deleted = plan.base_offsets
        assert deleted == [base for base, _ in before[: len(deleted)]], "only a prefix goes"
        kept_bytes = sum(size for _, size in before[len(deleted) :])
        if (
            "delete" in policy
            and retention_bytes >= 0
            and any(d.rule.value == "retention.bytes" for d in plan.deletions)
        ):
            assert kept_bytes >= retention_bytes, "the size rule never goes below the limit"
        if "delete" not in policy:
            assert all(d.rule.value == "log-start-offset" for d in plan.deletions)
        self.log_start = plan.log_start_offset_after
        self.log.delete_expired_files(force=True)

    @invariant()
    def offsets_agree(self) -> None:
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.log_start
        assert self.log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, self.log_start)
        assert self.log.log_start_offset <= self.log.recovery_point <= self.log.log_end_offset
        bases = [s.base_offset for s in self.log.segments]
        assert bases == sorted(bases) and len(set(bases)) == len(bases)

    @invariant()
    def every_record_matches(self) -> None:
        got = [(r.offset, r.key, r.value, r.timestamp) for r in self.log.records()]
        assert got == self.model[self.log_start :]


TestLogModel = LogMachine.TestCase
