from __future__ import annotations

import pytest

from storagecore import ConfigError, LogConfig, parse_topic_manifests
from storagecore.config import (
    LONG_MAX,
    TOPIC_CONFIG_KEYS,
    parse_config_assignments,
    validate_topic_name,
)


def test_defaults_are_kafkas() -> None:
    config = LogConfig().to_topic_config()
    assert config["cleanup.policy"] == "delete"
    assert config["retention.ms"] == "604800000"
    assert config["retention.bytes"] == "-1"
    assert config["segment.bytes"] == "1073741824"
    assert config["segment.index.bytes"] == "10485760"
    assert config["index.interval.bytes"] == "4096"
    assert config["max.message.bytes"] == "1048588"
    assert config["min.cleanable.dirty.ratio"] == "0.5"
    assert config["delete.retention.ms"] == "86400000"
    assert config["file.delete.delay.ms"] == "60000"
    assert config["flush.messages"] == str(LONG_MAX)
    assert config["max.compaction.lag.ms"] == str(LONG_MAX)
    assert config["message.timestamp.type"] == "CreateTime"
    assert config["compression.type"] == "producer"


def test_round_trip_through_kafka_keys() -> None:
    config = LogConfig.from_topic_config(
        {
            "cleanup.policy": "compact,delete",
            "segment.bytes": "1048576",
            "retention.ms": -1,
            "min.cleanable.dirty.ratio": "0.1",
            "preallocate": "false",
        }
    )
    assert config.cleanup_policy == ("compact", "delete") and config.compact and config.delete
    assert LogConfig.from_topic_config(config.to_topic_config()) == config
    assert set(config.to_topic_config()) == set(TOPIC_CONFIG_KEYS)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("retention.msec", "1", "unknown topic config key 'retention.msec'"),
        ("retention.ms", "-2", r"retention.ms: -2 is outside \[-1,"),
        ("retention.ms", "soon", "retention.ms: expected an integer"),
        ("segment.bytes", "13", r"segment.bytes: 13 is outside \[14,"),
        ("min.cleanable.dirty.ratio", "1.5", "min.cleanable.dirty.ratio: 1.5 is outside"),
        ("cleanup.policy", "compact,shred", "cleanup.policy: unknown policy 'shred'"),
        ("compression.type", "brotli", "compression.type: 'brotli' is not one of"),
        ("message.timestamp.type", "createtime", "message.timestamp.type"),
        ("compression.lz4.level", "18", "compression.lz4.level: 18 is outside"),
        ("preallocate", "yes", "preallocate: expected true or false"),
        ("max.compaction.lag.ms", "0", "max.compaction.lag.ms: 0 is outside"),
    ],
)
def test_bad_keys_and_values_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LogConfig.from_topic_config({key: value})


def test_replication_keys_are_accepted_without_effect() -> None:
    assert LogConfig.from_topic_config({"min.insync.replicas": "2"}) == LogConfig()


def test_compacted_topics_roll_by_max_compaction_lag() -> None:
    config = LogConfig.from_topic_config(
        {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"}
    )
    assert config.max_segment_ms == 1000
    assert LogConfig(max_compaction_lag_ms=1000).max_segment_ms == LogConfig().segment_ms


@pytest.mark.parametrize("name", ["orders", "a.b-c_D9", "x" * 249])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a/b", "../etc", "a b", "ü", "a\x00"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(ConfigError):
        validate_topic_name(name)


def test_config_assignments() -> None:
    assert parse_config_assignments(["a=1", " b = x=y "]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="'novalue'"):
        parse_config_assignments(["novalue"])


MANIFESTS = """
apiVersion: logkeeper.io/v1alpha1
kind: StorageVolume
metadata: {name: v}
spec: {size: 1Gi}
---
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata: {name: orders}
spec:
  volume: v
  partitions: 3
  config: {cleanup.policy: compact, segment.bytes: 1048576}
---
apiVersion: v1
kind: List
items:
- apiVersion: logkeeper.io/v1alpha1
  kind: Topic
  metadata: {name: k8s-name}
  spec: {topicName: real.name, volume: v}
"""


def test_parse_topic_manifests() -> None:
    topics = parse_topic_manifests(MANIFESTS)
    assert set(topics) == {"orders", "real.name"}
    assert topics["orders"].partitions == 3 and topics["orders"].config.compact
    assert topics["orders"].config.segment_bytes == 1_048_576
    assert topics["real.name"].partitions == 1 and topics["real.name"].volume == "v"


HEAD = "kind: Topic\napiVersion: logkeeper.io/v1alpha1\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: Topic\napiVersion: logkeeper.io/v1alpha1\nmetadata: {name: 'a/b'}\n",
            "Topic 'a/b'.*outside",
        ),
        (
            HEAD + "metadata: {name: t}\nspec: {partitions: 0}\n",
            "Topic 't': spec.partitions",
        ),
        (
            HEAD + "metadata: {name: t}\nspec: {config: {x.y: 1}}\n",
            "Topic 't': spec.config: unknown topic config key 'x.y'",
        ),
        ("kind: Topic\napiVersion: other/v1\nmetadata: {name: t}\n", "expected kind Topic"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: [", "not valid YAML"),
        (
            "kind: Topic\napiVersion: logkeeper.io/v1alpha1\nmetadata: {name: t}\n---\n"
            "kind: Topic\napiVersion: logkeeper.io/v1alpha1\nmetadata: {name: t}\n",
            "declared twice",
        ),
    ],
)
def test_bad_manifests_name_the_resource(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_topic_manifests(text, source="topics.yaml")


def test_example_manifests_parse() -> None:
    from pathlib import Path

    topics = parse_topic_manifests(
        (Path(__file__).parents[3] / "examples" / "topics.yaml").read_text()
    )
    assert {"orders", "user-profiles", "audit.events"} <= set(topics)
