"""Structured logs: the log context found in a record's arguments, plain and JSON."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from storagecore.config import TopicPartition
from storageworker.logs import PLAIN_FORMAT, JsonFormatter, LogContextFilter

TP = TopicPartition("orders", 3)


def record(message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("storagecore.log", logging.INFO, __file__, 1, message, args, None)


def dirs(tp: TopicPartition) -> Path | None:
    return Path("/data/v0") if tp == TP else None


def test_plain_line_carries_the_log_context() -> None:
    entry = record("%s: rolled new log segment at offset %d", TP, 42)
    assert LogContextFilter(dirs).filter(entry)
    line = logging.Formatter(PLAIN_FORMAT).format(entry)
    assert "[Log topic=orders partition=3 dir=/data/v0] orders-3: rolled new log segment" in line


def test_context_from_extra_and_none_when_absent() -> None:
    entry = record("Cleaning paused")
    entry.tp = TopicPartition("other", 0)
    LogContextFilter(dirs).filter(entry)
    assert entry.log_context == "[Log topic=other partition=0] "  # no dir known
    plain = record("Worker running: %d logs", 5)
    LogContextFilter(dirs).filter(plain)
    assert plain.log_context == ""


def test_json_lines_have_the_context_as_fields() -> None:
    entry = record("%s: deleting", TP)
    LogContextFilter(dirs).filter(entry)
    document = json.loads(JsonFormatter().format(entry))
    assert document["message"] == "orders-3: deleting"
    assert (document["topic"], document["partition"], document["dir"]) == ("orders", 3, "/data/v0")
    assert document["level"] == "INFO" and document["logger"] == "storagecore.log"
    bare = record("no context")
    LogContextFilter(dirs).filter(bare)
    assert "topic" not in json.loads(JsonFormatter().format(bare))
