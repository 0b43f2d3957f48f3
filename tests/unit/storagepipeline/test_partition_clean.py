"""``compact``'s partition path without Spark: a round planned on a log (plan_round), sent
through JSON, cleaned by ``clean_partition`` from read-only files and swapped in
(swap_planned) writes what the storage core cleaner writes, byte for byte, transactions
included; a plan whose segments changed is refused; a map too small writes nothing."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storagecore import Compression, ControlType, CorruptRecordError, Log, ManualClock, files
from storagecore.cleaner import Cleaner, CleanRequest
from storagecore.cleaner.manager import cleanable_offsets, log_to_clean
from storagecore.cleaner.offset_map import SkimpyOffsetMap, new_secret
from storagecore.cleaner.round_plan import RoundPlan, plan_round, swap_planned
from storagepipeline.partition_clean import PartitionCleanTask, clean_partition
from tests.conftest import START_MS
from tests.unit.storagecore.helpers.cleaning import (
    COMPACT,
    idempotent_append,
    marker,
    put,
    run_round,
    txn_append,
)

NOW_MS = START_MS + 10_000


def mixed_log(directory: Path, clock: ManualClock) -> None:
    """Keys overwritten and deleted over several segments, an aborted and a committed
    transaction, an idempotent producer, compressed and plain batches."""
    log = Log.open(directory, COMPACT, clock)
    try:
        for round_ in range(6):
            for k in range(12):
                codec = Compression.LZ4 if k % 3 == 0 else Compression.NONE
                value = None if (k + round_) % 7 == 0 else f"v{round_}".encode() * 4
                put(log, f"k{k}".encode(), value, codec=codec)
            if round_ == 1:
                txn_append(log, [b"k1", b"t1"], pid=4000, seq=0)
                marker(log, ControlType.ABORT, pid=4000)
            if round_ == 3:
                txn_append(log, [b"k2", b"t2"], pid=4001, seq=0)
                marker(log, ControlType.COMMIT, pid=4001)
                idempotent_append(log, [b"k3"], pid=4002, seq=0)
        log.roll()
    finally:
        log.close()


def log_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


def by_core(directory: Path, clock: ManualClock) -> None:
    log = Log.open(directory, COMPACT, clock)
    try:
        offsets = cleanable_offsets(log, None, NOW_MS)
        to_clean = log_to_clean(log, offsets, NOW_MS)
        cleaner = Cleaner(offset_map=SkimpyOffsetMap(1 << 20))
        request = CleanRequest(log, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset)
        cleaner.clean(request, NOW_MS)
        log.delete_expired_files(force=True)
    finally:
        log.close()


@contextlib.contextmanager
def opened(directory: Path, clock: ManualClock) -> Iterator[Log]:
    log = Log.open(directory, COMPACT, clock)
    try:
        yield log
    finally:
        log.close()


def planned(log: Log) -> RoundPlan:
    plan = plan_round(log, None, NOW_MS)
    # What the worker's admin API sends: the plan survives JSON unchanged.
    again = RoundPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    return again


def clean(plan: RoundPlan, map_bytes_max: int = 1 << 20) -> dict[str, Any]:
    task = PartitionCleanTask.from_plan(0, plan, secret=new_secret(), map_bytes_max=map_bytes_max)
    return clean_partition(task)


def test_partition_path_writes_what_the_core_cleaner_writes(
    tmp_path: Path, clock: ManualClock
) -> None:
    source = tmp_path / "t-0"
    mixed_log(source, clock)
    core = shutil.copytree(source, tmp_path / "core" / "t-0")
    by_core(core, clock)
    # The log stays open from the plan to the swap, as under the dir's lock or in a worker
    # (its loader deletes .cleaned files).
    with opened(source, clock) as log:
        plan = planned(log)
        assert len(plan.groups) > 1 and plan.aborted  # several groups, a transaction to drop
        result = clean(plan)
        assert result["fits"] and result["messages_read"] > result["messages_written"] > 0
        assert swap_planned(log, plan, result["cleaned_sizes"])
        log.delete_expired_files(force=True)
    assert log_files(source) == log_files(core)
    assert not list(source.glob(f"*{files.CLEANED_SUFFIX}"))


@pytest.mark.parametrize("refused", [False, True])
def test_a_partitions_groups_swap_in_one_run_of_the_protocol(
    tmp_path: Path, clock: ManualClock, refused: bool
) -> None:
    """All groups of a plan go in with one replace_segments (a crash leaves the round exactly
    undone or exactly done; two directory fsyncs per partition, not per group). When the log
    refuses that (a segment left it meanwhile), each group is swapped alone, as the cleaner
    does."""
    source = tmp_path / "t-0"
    mixed_log(source, clock)
    core = shutil.copytree(source, tmp_path / "core" / "t-0")
    by_core(core, clock)
    with opened(source, clock) as log:
        plan = planned(log)
        assert len(plan.groups) > 1
        sizes = clean(plan)["cleaned_sizes"]
        calls: list[tuple[list[int], list[int]]] = []
        real = log.replace_segments

        def replace(new: Any, old: Any) -> bool:
            calls.append(([s.base_offset for s in new], [s.base_offset for s in old]))
            return False if refused and len(calls) == 1 else real(new, old)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(log, "replace_segments", replace)
            assert swap_planned(log, plan, sizes)
        log.delete_expired_files(force=True)
    bases = [[plan.segments[i].base_offset for i in group] for group in plan.groups]
    every = [base for group in bases for base in group]
    assert calls[0] == ([group[0] for group in bases], every)
    if refused:
        assert calls[1:] == [([group[0]], group) for group in bases]
    else:
        assert len(calls) == 1
    assert log_files(source) == log_files(core)


def test_a_map_too_small_writes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    source = tmp_path / "t-0"
    mixed_log(source, clock)
    with opened(source, clock) as log:
        result = clean(planned(log), map_bytes_max=24 * 8)
    assert result.pop("partition_seconds") > 0  # the executor's own time, for the benchmark
    started_at, finished_at = result.pop("started_at"), result.pop("finished_at")
    assert 0 < finished_at - started_at < 600  # epoch seconds: the benchmark's busy span
    assert result == {"index": 0, "fits": False, "keys": 7}  # 8 slots at load factor 0.9
    assert not list(source.glob(f"*{files.CLEANED_SUFFIX}"))


@pytest.mark.parametrize("change", ["cleaned meanwhile", "other size", "cleaned copy lost"])
def test_a_plan_whose_segments_changed_is_not_swapped(
    tmp_path: Path, clock: ManualClock, change: str
) -> None:
    source = tmp_path / "t-0"
    mixed_log(source, clock)
    before = log_files(source)
    with opened(source, clock) as log:
        plan = planned(log)
        sizes = clean(plan)["cleaned_sizes"]
        last = plan.groups[-1][0]
        if change == "cleaned meanwhile":  # the worker's own cleaner swapped them first
            run_round(log, now=NOW_MS)
            log.delete_expired_files(force=True)
            before = log_files(source)
        elif change == "other size":  # what an append after planning looks like to the check
            segments = list(plan.segments)
            segments[last] = dataclasses.replace(
                segments[last], size_bytes=segments[last].size_bytes - 1
            )
            plan = dataclasses.replace(plan, segments=tuple(segments))
        if change == "cleaned copy lost":
            files.log_file(source, plan.segments[last].base_offset, files.CLEANED_SUFFIX).unlink()
            with pytest.raises(CorruptRecordError, match=r"t-0: cleaned copy .* -1 bytes"):
                swap_planned(log, plan, sizes)
        else:
            assert not swap_planned(log, plan, sizes)
    assert log_files(source) == before
