"""The flags that name a log dir and its topics, and what they resolve to: one
topic-partition and its config (``produce``, ``consume``), or the Topic manifests of a log dir
(``retention``, ``clean``, ``spark compact``).

Called by the subcommand modules when they build their parsers and before they open the log
dir. Imports storagecore only inside functions, like the rest of the console script.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storagecore import LogConfig, TopicSpec


def add_topic_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", required=True, type=Path, help="log directory (created if absent)")
    parser.add_argument("--topic", required=True, help="topic name")
    parser.add_argument("--partition", type=int, default=0, help="partition (default 0)")
    parser.add_argument("--topics", type=Path, help="YAML file of Topic manifests (spec.config)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kafka topic config override, repeatable (e.g. segment.bytes=1048576)",
    )


def topic_config(args: argparse.Namespace) -> tuple[LogConfig, dict[str, LogConfig]]:
    """The LogConfig of ``args.topic`` and the config of every topic in ``--topics``."""
    from storagecore.config import (
        LogConfig,
        parse_config_assignments,
        parse_topic_manifests,
        validate_topic_name,
    )
    from storagecore.errors import ConfigError

    validate_topic_name(args.topic)
    topics = {}
    if args.topics is not None:
        topics = parse_topic_manifests(
            args.topics.read_text(encoding="utf-8"), source=str(args.topics)
        )
    overrides = parse_config_assignments(args.config)
    spec = topics.get(args.topic)
    if spec is not None and not 0 <= args.partition < spec.partitions:
        raise ConfigError(
            f"topic {args.topic!r} has {spec.partitions} partitions in {args.topics}; "
            f"partition {args.partition} does not exist"
        )
    base = spec.config if spec is not None else LogConfig()
    config = LogConfig.from_topic_config(overrides, base=base)
    configs = {name: t.config for name, t in topics.items()}
    configs[args.topic] = config
    return config, configs


def add_dir_and_topics_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", required=True, type=Path, help="log directory")
    parser.add_argument("--topics", type=Path, help="YAML file of Topic manifests (spec.config)")


def log_dir_topics(args: argparse.Namespace) -> dict[str, TopicSpec]:
    """``--dir`` checked to exist, and the Topic manifests of ``--topics`` (none without it)."""
    from storagecore.config import parse_topic_manifests
    from storagecore.errors import ConfigError

    if not args.dir.is_dir():
        raise ConfigError(f"--dir {args.dir} is not a directory")
    if args.topics is None:
        return {}
    return parse_topic_manifests(args.topics.read_text(encoding="utf-8"), source=str(args.topics))
