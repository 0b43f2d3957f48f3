"""``compact``'s aggregated offset-map path without Spark: its executor functions (keys of the
dirty range through the native columnar decoder and column digests, a group's distinct keys,
the group rewritten from the joined pairs) composed in process the way the Spark job composes
them, on a log with an aborted and a committed transaction: the map they aggregate is the core
cleaner's map, and the segments swapped in are the core cleaner's, byte for byte."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from storagecore import ManualClock
from storagecore.cleaner import Cleaner, CleanerStats
from storagecore.cleaner.offset_map import SkimpyOffsetMap, new_secret
from storagecore.cleaner.round_plan import swap_planned
from storagepipeline import aggregated_map
from storagepipeline.aggregated_map import GroupTask, MapTask
from tests.unit.storagepipeline.test_partition_clean import (
    by_core,
    log_files,
    mixed_log,
    opened,
    planned,
)


def _rows(batches: Any) -> list[tuple[Any, ...]]:
    return [
        row
        for batch in batches
        for row in zip(
            *(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True
        )
    ]


def run_in_process(
    _spark: object, map_tasks: list[MapTask], group_tasks: list[GroupTask]
) -> dict[int, dict[str, Any]]:
    """:func:`aggregated_map.run`'s composition, with Python for Spark's max and join."""
    latest: dict[tuple[int, bytes], int] = {}
    for task in map_tasks:
        for tpi, digest, offset in _rows(aggregated_map._map_keys(task)):
            latest[(tpi, digest)] = max(latest.get((tpi, digest), -1), offset)
    results = {}
    for group in group_tasks:
        pairs = [
            (digest, latest[(tpi, digest)])
            for _gid, tpi, digest in _rows(aggregated_map._group_keys(group))
            if (tpi, digest) in latest
        ]
        results[group.gid] = aggregated_map._clean_cogrouped((group.gid, ([group], pairs)))
    return results


def test_the_aggregated_map_is_the_core_cleaners_map(tmp_path: Path, clock: ManualClock) -> None:
    source = tmp_path / "t-0"
    mixed_log(source, clock)
    secret = new_secret()
    with opened(source, clock) as log:
        plan = planned(log)
        captured: list[Sequence[MapTask]] = []

        def capture(_spark: object, map_tasks: list[MapTask], group_tasks: list[GroupTask]) -> Any:
            captured.append(map_tasks)
            return run_in_process(_spark, map_tasks, group_tasks)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(aggregated_map, "run", capture)
            aggregated_map.clean_plans(None, [plan], secret)  # type: ignore[arg-type]
        core = SkimpyOffsetMap(1 << 20, secret=secret)
        stats = CleanerStats(topic_partition=str(log.tp))
        Cleaner(offset_map=core).build_offset_map(
            log, plan.first_dirty_offset, plan.first_uncleanable_offset, plan.aborted, stats
        )
    latest: dict[bytes, int] = {}
    for task in captured[0]:
        for _tpi, digest, offset in _rows(aggregated_map._map_keys(task)):
            latest[digest] = max(latest.get(digest, -1), offset)
    assert plan.aborted, "the premise: an aborted transaction in the dirty range"
    assert len(latest) == core.size
    assert all(core.get_digest(digest) == offset for digest, offset in latest.items())


def test_the_aggregated_path_writes_what_the_core_cleaner_writes(
    tmp_path: Path, clock: ManualClock
) -> None:
    source = tmp_path / "spark" / "t-0"
    mixed_log(source, clock)
    expected = tmp_path / "core" / "t-0"
    shutil.copytree(source, expected)
    by_core(expected, clock)
    with opened(source, clock) as log:
        plan = planned(log)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(aggregated_map, "run", run_in_process)
            totals = aggregated_map.clean_plans(None, [plan], new_secret())  # type: ignore[arg-type]
        assert swap_planned(log, plan, totals[0]["cleaned_sizes"])
        log.delete_expired_files(force=True)
    assert log_files(source) == log_files(expected)
