"""The worker at scale (issue 22): /v1/status's opt-in summary view and paging, the open-files
bound from the settings, its metrics, and readiness lost with an offline directory."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from storagecore import TopicPartition
from storagecore.errors import ConfigError, LogDirOfflineError
from storagecore.index import MAPPED
from storageworker.settings import parse_settings
from storageworker.status import StatusQuery, parse_query, volume_status
from tests.conftest import batch, break_disk
from tests.unit.storageworker.test_worker import (
    COMPACTED,
    Setup,
    setup,
    topic_yaml,
    worker_registry,
)

__all__ = ["setup"]  # the fixture, imported for these tests


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("views=summary", "unknown query parameter 'views'"),
        ("view=short", "view must be full or summary"),
        ("limit=0", "limit must be an integer from 1 to 10000"),
        ("limit=10001", "limit must be an integer"),
        ("limit=x", "limit must be an integer"),
        ("after=orders-0", "after needs limit"),
        ("limit=5&after=orders", "after: directory name 'orders'"),
    ],
)
def test_bad_status_queries_name_the_parameter(query: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_query(query)


def test_status_queries_parse() -> None:
    assert parse_query("") == StatusQuery()
    assert parse_query("view=summary&topic=a&topic=b") == StatusQuery(True, None, None, ("a", "b"))
    assert parse_query("limit=2&after=a-1") == StatusQuery(False, 2, TopicPartition("a", 1), ())


def test_summary_view_counts_without_the_partition_list(setup: Setup) -> None:
    setup.declare(topic_yaml("orders", 3), topic_yaml("events", 2))
    worker = setup.start()
    assert worker.log_manager is not None
    worker.log_manager.get_log(TopicPartition("orders", 1)).append(batch(3))
    full = volume_status(worker)
    summary = volume_status(worker, parse_query("view=summary"))
    assert "partitions" not in summary and len(full["partitions"]) == 5
    counts = summary["partitionSummary"]
    assert counts["count"] == 5 and counts["topics"] == 2 and counts["offline"] == 0
    assert counts["sizeBytes"] == sum(p["sizeBytes"] for p in full["partitions"]) > 0
    assert counts["segments"] == 5 and counts["byCleanerState"] == {"idle": 5}
    only = volume_status(worker, parse_query("view=summary&topic=events"))
    assert only["partitionSummary"]["count"] == 2
    assert summary["openFiles"]["maxOpenFiles"] == worker.log_manager.file_cache.max_open_files
    assert summary["openFiles"]["opensAtLoad"] == worker.log_manager.file_opens_at_load
    # orders-1's active .log held (and its indexes, when they are not mapped: pure Python).
    assert summary["openFiles"]["heldForAppends"] == (1 if MAPPED else 3)
    assert summary["retention"] == {"deletedSegments": 0, "deletedBytes": 0}


def test_pages_cover_the_partitions_once_in_order(setup: Setup) -> None:
    setup.declare(topic_yaml("orders", 3), topic_yaml("events", 2))
    worker = setup.start()
    every = [(p["topic"], p["partition"]) for p in volume_status(worker)["partitions"]]
    seen: list[tuple[str, int]] = []
    query = "limit=2"
    pages = 0
    while True:
        document = volume_status(worker, parse_query(query))
        pages += 1
        seen += [(p["topic"], p["partition"]) for p in document["partitions"]]
        assert document["page"]["total"] == 5
        after = document["page"]["nextAfter"]
        if after is None:
            break
        query = f"limit=2&after={after}"
    assert seen == every and pages == 3
    orders = volume_status(worker, parse_query("limit=10&topic=orders"))
    assert [p["partition"] for p in orders["partitions"]] == [0, 1, 2]
    assert orders["page"]["nextAfter"] is None


def test_max_open_files_comes_from_the_settings_and_reloads(setup: Setup) -> None:
    setup.settings.write_text("maxOpenFiles: 32\n", encoding="utf-8")
    setup.declare(topic_yaml("orders", 2))
    worker = setup.start()
    assert worker.log_manager is not None
    assert worker.log_manager.file_cache.max_open_files == 32
    assert volume_status(worker)["settings"]["maxOpenFiles"] == 32
    setup.settings.write_text("maxOpenFiles: 64\n", encoding="utf-8")
    worker.reload()
    assert worker.log_manager.file_cache.max_open_files == 64
    text = generate_latest(worker_registry(worker)).decode()
    assert "logkeeper_file_cache_max_open_files 64.0" in text
    names = ("open_files", "held_files", "hits_total", "misses_total", "evictions_total")
    for name in (*names, "sheds_total"):
        assert f"logkeeper_file_cache_{name} " in text, name
    assert "logkeeper_open_files " in text
    with pytest.raises(ConfigError, match="maxOpenFiles: must be at least 16"):
        parse_settings({"maxOpenFiles": 8})


def test_an_offline_directory_makes_the_worker_not_ready(setup: Setup) -> None:
    setup.declare(topic_yaml("orders", 1))
    worker = setup.start()
    assert worker.log_manager is not None
    assert worker.readiness() == (True, "running")
    log = worker.log_manager.get_log(TopicPartition("orders", 0))
    break_disk(log)
    with pytest.raises(LogDirOfflineError):
        log.append(batch(2))
    ready, why = worker.readiness()
    assert not ready and str(setup.root / "data") in why
    assert "logkeeper_worker_ready 0.0" in generate_latest(worker_registry(worker)).decode()


def test_dirty_ratio_gauge_is_the_cleaners_planned_ratio(setup: Setup) -> None:
    """The per-log dirty ratio of /metrics is what the cleaner's last selection planned (a
    scrape of thousands of partitions plans no log); a log not planned yet is planned then."""
    setup.declare(topic_yaml("profiles", 2, COMPACTED))
    worker = setup.start()
    assert worker.log_manager is not None and worker.cleaner is not None
    for p in range(2):
        for _ in range(30):
            worker.log_manager.get_log(TopicPartition("profiles", p)).append(
                batch(3, keys=3, value_size=200)
            )
    text = generate_latest(worker_registry(worker)).decode()
    assert 'logkeeper_log_dirty_ratio{partition="0",topic="profiles"} 1.0' in text
    # As the cleaner's selection left them (a marker value: planned ratios are below 1).
    worker.cleaner.manager.dirty_ratios = {TopicPartition("profiles", 0): 0.25}
    text = generate_latest(worker_registry(worker)).decode()
    assert 'logkeeper_log_dirty_ratio{partition="0",topic="profiles"} 0.25' in text
    assert 'logkeeper_log_dirty_ratio{partition="1",topic="profiles"} 1.0' in text
