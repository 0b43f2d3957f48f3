"""``logkeeper consume``: print the records of a topic-partition as JSON lines.

Opens the log dir with its lock (so not while a ``logkeeper produce`` or a worker holds it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from logkeeper.topic_args import topic_config


def _json_bytes(record_field: str, data: bytes | None, out: dict[str, Any]) -> None:
    if data is None:
        out[record_field] = None
        return
    try:
        out[record_field] = data.decode("utf-8")
    except UnicodeDecodeError:
        import base64

        out[record_field + "_b64"] = base64.b64encode(data).decode("ascii")


def cmd_consume(args: argparse.Namespace) -> int:
    from storagecore import LogManager, TopicPartition

    _config, configs = topic_config(args)
    tp = TopicPartition(args.topic, args.partition)
    with LogManager([args.dir], config_for=configs) as manager:
        log = manager.get_log(tp)
        for record in log.records(args.start, args.end):
            line: dict[str, Any] = {"offset": record.offset, "timestamp": record.timestamp}
            _json_bytes("key", record.key, line)
            _json_bytes("value", record.value, line)
            headers: dict[str, Any] = {}
            for key, value in record.headers:
                headers[key] = None if value is None else value.decode("utf-8", errors="replace")
            line["headers"] = headers
            sys.stdout.write(json.dumps(line) + "\n")
    return 0
