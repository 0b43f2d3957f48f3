"""Issue 20's "every admin verb finishes": compact-now requests end in an outcome, and an
uncleanable partition is retried with backoff (or at once on request) and keeps its reason until
a retry succeeds (KAFKA-19895: Kafka keeps it uncleanable until a restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storagecore import LogConfig, ManualClock, TopicPartition
from storagecore.cleaner.compaction_request import Outcome
from storagecore.cleaner.uncleanable import RETRY_INITIAL_MS, RETRY_MAX_MS, retry_delay_ms
from tests.unit.storagecore.test_cleaner_manager import make_log, manager


def test_retry_delay_doubles_up_to_the_cap() -> None:
    delays = [retry_delay_ms(n) for n in range(1, 10)]
    assert delays[:4] == [
        RETRY_INITIAL_MS,
        2 * RETRY_INITIAL_MS,
        4 * RETRY_INITIAL_MS,
        8 * RETRY_INITIAL_MS,
    ]
    assert max(delays) == RETRY_MAX_MS == delays[-1]
    assert retry_delay_ms(10_000) == RETRY_MAX_MS


def test_an_uncleanable_partition_is_retried_with_backoff_and_cleared_by_success(
    tmp_path: Path, clock: ManualClock
) -> None:
    log = make_log(tmp_path, clock, "a")
    cm = manager(tmp_path)
    now = clock.milliseconds()
    cm.mark_uncleanable(log.tp, "CorruptRecordError: CRC mismatch at position 0", now)
    assert cm.grab_filthiest_log([log], now + RETRY_INITIAL_MS - 1) is None
    chosen = cm.grab_filthiest_log([log], now + RETRY_INITIAL_MS)
    assert chosen is not None and chosen.tp == log.tp  # the retry
    # It fails again: the mark stays, with the new reason, and the next retry is further out.
    cm.done_cleaning(log.tp, tmp_path, [log.tp], None)
    later = now + RETRY_INITIAL_MS
    cm.mark_uncleanable(log.tp, "CorruptRecordError: again", later)
    mark = cm.uncleanable_marks[log.tp]
    assert (mark.reason, mark.attempts, mark.since_ms) == ("CorruptRecordError: again", 2, now)
    assert mark.retry_at_ms == later + 2 * RETRY_INITIAL_MS
    assert cm.grab_filthiest_log([log], later + 2 * RETRY_INITIAL_MS - 1) is None
    retried = cm.grab_filthiest_log([log], later + 2 * RETRY_INITIAL_MS)
    assert retried is not None
    # This time the round succeeds: the mark and its reason are gone.
    cm.record_round(
        log.tp,
        end_offset=retried.first_uncleanable_offset,
        first_uncleanable_offset=retried.first_uncleanable_offset,
        next_delete_horizon_ms=None,
        now_ms=later,
    )
    assert cm.uncleanable == {}


def test_retry_now_keeps_the_reason_and_forces_a_round(tmp_path: Path, clock: ManualClock) -> None:
    # Never above its dirty ratio: only a forced round cleans it.
    lazy = LogConfig(cleanup_policy=("compact",), segment_bytes=1024, min_cleanable_dirty_ratio=1.0)
    log = make_log(tmp_path, clock, "lazy", config=lazy)
    cm = manager(tmp_path)
    now = clock.milliseconds()
    assert not cm.retry_uncleanable(log.tp, now), "not marked: nothing to retry"
    cm.mark_uncleanable(log.tp, "OSError: boom", now)
    assert cm.retry_uncleanable(log.tp, now + 1)
    assert cm.uncleanable == {log.tp: "OSError: boom"}
    assert cm.compaction_outcomes[log.tp].outcome is Outcome.PENDING
    chosen = cm.grab_filthiest_log([log], now + 1)
    assert chosen is not None and chosen.tp == log.tp


def test_compact_now_is_decided_at_once_where_it_can_be(tmp_path: Path, clock: ManualClock) -> None:
    now = clock.milliseconds()
    cm = manager(tmp_path)
    dirty = make_log(tmp_path, clock, "dirty")
    assert cm.ask_compaction(dirty, now).outcome is Outcome.PENDING
    assert cm.compaction_requests == {dirty.tp}
    # One segment only: the active segment is never cleaned, so there is nothing to clean.
    small = make_log(tmp_path, clock, "small", batches=1)
    nothing = cm.ask_compaction(small, now)
    assert nothing.outcome is Outcome.NOTHING_TO_CLEAN and nothing.finished_ms == now
    assert (
        nothing.detail
        == "nothing to clean: no dirty bytes in [0, 0) (the active segment is never cleaned)"
    )
    paused = make_log(tmp_path, clock, "paused")
    cm.abort_and_pause(paused.tp, now_ms=now)
    refused = cm.ask_compaction(paused, now)
    assert (refused.outcome, refused.detail) == (Outcome.REFUSED, "cleaning is paused")
    bad = make_log(tmp_path, clock, "bad")
    cm.mark_uncleanable(bad.tp, "CorruptRecordError: x", now)
    refused = cm.ask_compaction(bad, now)
    assert (
        refused.outcome is Outcome.REFUSED
        and "uncleanable (CorruptRecordError: x)" in refused.detail
    )
    plain = make_log(tmp_path, clock, "plain", config=LogConfig(segment_bytes=1024))
    assert cm.ask_compaction(plain, now).outcome is Outcome.REFUSED
    assert cm.compaction_requests == {dirty.tp}, "only the pending one is forced"


@pytest.mark.parametrize("how", ["done", "aborted", "failed", "paused", "nothing"])
def test_a_pending_request_always_ends(tmp_path: Path, clock: ManualClock, how: str) -> None:
    log = make_log(tmp_path, clock, "a")
    cm = manager(tmp_path)
    now = clock.milliseconds()
    assert cm.ask_compaction(log, now).outcome is Outcome.PENDING
    if how == "paused":  # paused before a round started
        cm.abort_and_pause(log.tp, now_ms=now + 1)
        expected = Outcome.ABORTED
    elif how == "nothing":  # someone else cleaned it meanwhile: the selection says so
        chosen = cm.grab_filthiest_log([log], now)
        assert chosen is not None
        cm.done_cleaning(log.tp, tmp_path, [log.tp], chosen.first_uncleanable_offset)
        cm.request_compaction(log.tp, now)
        assert cm.grab_filthiest_log([log], now + 1) is None
        expected = Outcome.NOTHING_TO_CLEAN
    else:
        chosen = cm.grab_filthiest_log([log], now)
        assert chosen is not None
        if how == "done":
            cm.record_round(
                log.tp,
                end_offset=chosen.first_uncleanable_offset,
                first_uncleanable_offset=chosen.first_uncleanable_offset,
                next_delete_horizon_ms=None,
                now_ms=now + 1,
            )
            expected = Outcome.DONE
        elif how == "aborted":
            cm.finish_request(log.tp, Outcome.ABORTED, now + 1, "the round was aborted")
            expected = Outcome.ABORTED
        else:
            cm.mark_uncleanable(log.tp, "OSError: boom", now + 1)
            expected = Outcome.FAILED
    outcome = cm.compaction_outcomes[log.tp]
    assert outcome.outcome is expected and outcome.finished_ms is not None
    assert cm.compaction_requests == set()


def test_deleted_partitions_forget_their_requests(tmp_path: Path, clock: ManualClock) -> None:
    log = make_log(tmp_path, clock, "a")
    cm = manager(tmp_path)
    cm.ask_compaction(log, clock.milliseconds())
    cm.maintain([TopicPartition("other", 0)])
    assert cm.compaction_outcomes == {} and cm.compaction_requests == set()
