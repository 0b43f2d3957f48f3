"""The flags that name a log dir and its topics, and what they resolve to: one
topic-partition and its config (``produce``, ``consume``), the configs of a log dir's logs from
its Topic manifests and ``--config`` assignments (``retention``, ``clean``), or the manifests
alone (``spark compact``).

Called by the subcommand modules when they build their parsers and before they open the log
dir. Imports storagecore only inside functions, like the rest of the console script.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection
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
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "Kafka topic config (as kafka-topics.sh --config takes it), repeatable, for every "
            "log of --dir; overrides the values of --topics (e.g. cleanup.policy=compact)"
        ),
    )


def log_dir_topics(args: argparse.Namespace) -> dict[str, TopicSpec]:
    """``--dir`` checked to exist, and the Topic manifests of ``--topics`` (none without it)."""
    from storagecore.config import parse_topic_manifests
    from storagecore.errors import ConfigError

    if not args.dir.is_dir():
        raise ConfigError(f"--dir {args.dir} is not a directory")
    if args.topics is None:
        return {}
    return parse_topic_manifests(args.topics.read_text(encoding="utf-8"), source=str(args.topics))


class LogDirConfigs:
    """The config of each log of a dir: ``default`` for a topic that ``per_topic`` lacks, and
    the topics that --topics declares (empty without it). A plain class: a NamedTuple's or a
    dataclass's generated code is compiled at import, on the path of every ``clean``."""

    __slots__ = ("declared", "default", "per_topic")

    def __init__(
        self, per_topic: dict[str, LogConfig], default: LogConfig, declared: frozenset[str]
    ) -> None:
        self.per_topic = per_topic
        self.default = default
        self.declared = declared


def log_dir_configs(
    args: argparse.Namespace, *, only: Collection[str] | None = None
) -> LogDirConfigs:
    """The configs of ``--dir``'s logs: the manifests of ``--topics`` (if given), with the
    ``--config`` assignments on top, validated as a Topic's ``spec.config`` is (an unknown key
    or a bad value fails, naming it). ``only`` (the ``--topic`` names) limits the assignments
    to those topics; the others keep their manifest's config or the defaults. Without --topics
    no YAML is parsed (nor is ``yaml`` imported)."""
    from storagecore.config import LogConfig, parse_config_assignments

    topics = log_dir_topics(args)
    overrides = parse_config_assignments(args.config)
    defaults = LogConfig()
    # Validated once, also when no log takes them (an unknown key is an error either way).
    overridden_default = LogConfig.from_topic_config(overrides, base=defaults)
    per_topic = {}
    for name, spec in topics.items():
        applies = only is None or name in only
        per_topic[name] = (
            LogConfig.from_topic_config(overrides, base=spec.config) if applies else spec.config
        )
    if only is None:
        default = overridden_default
    else:
        default = defaults
        for name in only:
            per_topic.setdefault(name, overridden_default)
    return LogDirConfigs(per_topic, default, frozenset(topics))
