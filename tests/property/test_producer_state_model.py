"""Producer state against a simple model of Kafka's rules: each producer's last five batches,
of which a clean reload keeps the last one before the newest snapshot on disk plus every batch
after it, and a reload after a crash the last one only (the recovery snapshots the log end).

Producers send in-sequence batches, bump their epoch, and retry one of their earlier batches;
the log rolls, restarts cleanly, crashes, and finds its newest snapshot corrupt. A retry is a
duplicate answered with the original offsets exactly when the model still holds that batch,
and is refused as out of order otherwise.
"""

from __future__ import annotations

import collections
import dataclasses
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storagecore import Log, LogConfig, ManualClock, NewRecord, build_batch
from storagecore.errors import OutOfOrderSequenceError

pytestmark = pytest.mark.property

CONFIG = LogConfig(segment_bytes=600)
PRODUCERS = (1, 2, 3)
KEPT = 5


@dataclasses.dataclass(frozen=True)
class Sent:
    """A batch as its producer sent it, with the offsets it was appended at."""

    pid: int
    epoch: int
    first_sequence: int
    count: int
    first_offset: int

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (self.first_sequence, self.first_sequence + self.count - 1, self.first_offset,
                self.first_offset + self.count - 1)  # fmt: skip


class ProducerStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.directory = self.tmp / "p-0"
        self.clock = ManualClock()
        self.log = Log.open(self.directory, CONFIG, self.clock)
        #: Every producer batch in the log, in offset order.
        self.appended: list[Sent] = []
        #: What each producer sent last (its retries come from here), and its epoch.
        self.sent: dict[int, list[Sent]] = {pid: [] for pid in PRODUCERS}
        self.epoch: dict[int, int] = dict.fromkeys(PRODUCERS, 0)
        #: The model: per producer, its epoch and last five batches known to the log.
        self.known: dict[int, tuple[int, collections.deque[Sent]]] = {}

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _append(self, pid: int, epoch: int, first_sequence: int, count: int) -> Sent:
        records = [NewRecord(b"k", b"v", self.clock.milliseconds()) for _ in range(count)]
        info = self.log.append(
            build_batch(
                records, producer_id=pid, producer_epoch=epoch, base_sequence=first_sequence
            )
        )
        assert not info.duplicate
        sent = Sent(pid, epoch, first_sequence, count, info.first_offset)
        self.appended.append(sent)
        self.sent[pid].append(sent)
        self._learn(sent)
        return sent

    def _learn(self, sent: Sent) -> None:
        epoch, batches = self.known.get(sent.pid, (sent.epoch, collections.deque(maxlen=KEPT)))
        if epoch != sent.epoch:
            batches = collections.deque(maxlen=KEPT)
        batches.append(sent)
        self.known[sent.pid] = (sent.epoch, batches)

    @rule(pid=st.sampled_from(PRODUCERS), count=st.integers(1, 3))
    def send_next(self, pid: int, count: int) -> None:
        history = self.sent[pid]
        last = history[-1] if history else None
        following = 0 if last is None or last.epoch != self.epoch[pid] else (
            last.first_sequence + last.count
        )  # fmt: skip
        self._append(pid, self.epoch[pid], following, count)

    @rule(pid=st.sampled_from(PRODUCERS), count=st.integers(1, 3))
    def bump_epoch(self, pid: int, count: int) -> None:
        self.epoch[pid] += 1
        self._append(pid, self.epoch[pid], 0, count)

    @precondition(lambda self: any(self.sent.values()))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from([p for p in PRODUCERS if self.sent[p]]))
        history = [s for s in self.sent[pid] if s.epoch == self.epoch[pid]][-7:]
        if not history:
            return
        again = data.draw(st.sampled_from(history))
        records = [NewRecord(b"k", b"v", self.clock.milliseconds()) for _ in range(again.count)]
        batch = build_batch(
            records, producer_id=pid, producer_epoch=again.epoch, base_sequence=again.first_sequence
        )
        _epoch, batches = self.known[pid]
        if again in batches:
            info = self.log.append(batch)
            assert info.duplicate and (info.first_offset, info.last_offset) == again.key[2:]
        else:
            end = self.log.log_end_offset
            with pytest.raises(OutOfOrderSequenceError):
                self.log.append(batch)
            assert self.log.log_end_offset == end

    @rule()
    def roll(self) -> None:
        had_data = self.log.active_segment.size_bytes > 0
        self.log.roll()
        if had_data:
            assert self.newest_snapshot() == self.log.log_end_offset

    def newest_snapshot(self) -> int | None:
        offsets = [int(p.name.split(".")[0]) for p in self.directory.glob("*.snapshot")]
        return max(offsets, default=None)

    def reload_model(self, snapshot_offset: int | None) -> None:
        """Kafka's reload: the last batch before the snapshot, then every batch after it."""
        self.known = {}
        start = 0 if snapshot_offset is None else snapshot_offset
        for pid in PRODUCERS:
            before = [s for s in self.appended if s.pid == pid and s.first_offset < start]
            if before:
                self._learn(before[-1])
        for sent in self.appended:
            if sent.first_offset >= start:
                self._learn(sent)

    @rule()
    def clean_restart(self) -> None:
        self.log.flush()
        self.log.close()
        end = self.log.log_end_offset
        assert self.newest_snapshot() == (end if self.appended else None)
        self.log = Log.open(self.directory, CONFIG, self.clock, had_clean_shutdown=True)
        self.reload_model(self.newest_snapshot())

    @rule(corrupt_newest=st.booleans())
    def crash_restart(self, corrupt_newest: bool) -> None:
        self.log.flush()
        recovery_point = self.log.recovery_point
        bases = [segment.base_offset for segment in self.log.segments]
        self.log.close_handles()
        newest = self.newest_snapshot()
        if corrupt_newest and newest is not None:
            path = self.directory / f"{newest:020d}.snapshot"
            data = bytearray(path.read_bytes())
            data[-1] ^= 0xFF  # the CRC no longer matches
            path.write_bytes(bytes(data))
        self.log = Log.open(
            self.directory, CONFIG, self.clock, recovery_point=recovery_point,
            had_clean_shutdown=False,
        )  # fmt: skip
        # Kafka's recovery (LogLoader.recoverSegment): the segment holding the recovery point
        # (here the last, as everything was flushed) is replayed after the newest usable
        # snapshot at or below its base (a corrupt one skipped) and snapshotted at its end, and
        # the load reads that snapshot: each producer's last batch in the log, nothing more.
        end = self.log.log_end_offset
        assert self.newest_snapshot() == (end if self.appended else None), bases
        self.reload_model(end if self.appended else None)

    @invariant()
    def matches_the_model(self) -> None:
        for pid in PRODUCERS:
            entry = self.log.producer_state.last_entry(pid)
            if pid not in self.known:
                assert entry is None or entry.is_empty
                continue
            epoch, batches = self.known[pid]
            assert entry is not None and entry.producer_epoch == epoch
            assert [
                (b.first_sequence, b.last_sequence, b.first_offset, b.last_offset)
                for b in entry.batches
            ] == [s.key for s in batches]


TestProducerState = ProducerStateMachine.TestCase
