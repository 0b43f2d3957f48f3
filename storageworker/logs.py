"""Structured logs: plain lines or JSON objects, with the log's context when there is one.

storagecore passes the topic-partition as an argument of its messages (``"%s: rolled ..."``);
:class:`LogContextFilter` finds it there (or in ``extra={"tp": ...}``) and adds ``topic``,
``partition`` and ``dir`` to the record, so that a plain line reads
``... [Log topic=orders partition=0 dir=/data/v0] orders-0: rolled new log segment ...``
and a JSON line carries the three as fields.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from storagecore.config import TopicPartition

DirLookup = Callable[[TopicPartition], Path | None]


class LogContextFilter(logging.Filter):
    def __init__(self, dir_of: DirLookup) -> None:
        super().__init__()
        self.dir_of = dir_of

    def filter(self, record: logging.LogRecord) -> bool:
        tp = getattr(record, "tp", None)
        if not isinstance(tp, TopicPartition):
            args = record.args if isinstance(record.args, tuple) else ()
            tp = next((a for a in args if isinstance(a, TopicPartition)), None)
        record.log_context = ""
        if tp is not None:
            directory = self.dir_of(tp)
            record.topic, record.partition = tp.topic, tp.partition
            record.dir = str(directory) if directory is not None else None
            record.log_context = (
                f"[Log topic={tp.topic} partition={tp.partition}"
                + (f" dir={directory}" if directory is not None else "")
                + "] "
            )
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "message": record.getMessage(),
        }
        for field in ("topic", "partition", "dir"):
            value = getattr(record, field, None)
            if value is not None:
                document[field] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, sort_keys=True)


PLAIN_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(log_context)s%(message)s"


def configure(log_format: str, level: str, dir_of: DirLookup) -> None:
    """Replace the root handlers with one stderr handler of the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(LogContextFilter(dir_of))
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(PLAIN_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
