"""The client topic store, the ``clientTopicPrefixes`` setting and the config operations of
IncrementalAlterConfigs, without a worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storagecore.config import LogConfig, TopicSpec
from storagecore.errors import ConfigError
from storageworker.client_topics import (
    ClientTopic,
    ClientTopicStore,
    StoreUnavailableError,
    allowed,
)
from storageworker.settings import parse_settings
from storageworker.topic_admin import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT, _apply


def test_prefixes_come_from_the_volume_spec() -> None:
    settings = parse_settings({"clientTopicPrefixes": ["wordcount-", "connect-", "wordcount-"]})
    assert settings.settings.client_topic_prefixes == ("wordcount-", "connect-")
    assert parse_settings({}).settings.client_topic_prefixes == ()
    assert allowed("wordcount-store-changelog", ("wordcount-",))
    assert not allowed("other", ("wordcount-",))
    assert not allowed("anything", ())
    assert allowed("anything", ("",))


@pytest.mark.parametrize(
    ("value", "named"),
    [("wordcount-", "expected a list"), (["a/b"], "'a/b'"), ([3], "expected a list")],
)
def test_bad_prefixes_are_refused_by_name(value: object, named: str) -> None:
    with pytest.raises(ConfigError, match="clientTopicPrefixes") as raised:
        parse_settings({"clientTopicPrefixes": value}, source="vol.yaml")
    assert named in str(raised.value) and "vol.yaml" in str(raised.value)


def test_the_store_round_trips_and_adoption_forgets(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    store = ClientTopicStore(path)
    store.load()
    assert store.loaded and store.topics() == {}
    store.put(ClientTopic("app-a", 2, {"cleanup.policy": "compact"}, 5))
    store.put(ClientTopic("app-b", 1, {}, 6))
    again = ClientTopicStore(path)
    again.load()
    assert again.topics() == store.topics()
    assert again.topics()["app-a"].spec().config.compact
    declared = {"app-a": TopicSpec("app-a", 3, LogConfig(), resource_name="res-a")}
    [(adopted, spec)] = again.adopt(declared)
    assert adopted.name == "app-a" and spec.resource_name == "res-a"
    third = ClientTopicStore(path)
    third.load()
    assert set(third.topics()) == {"app-b"}
    assert third.remove("app-b") is not None and third.remove("app-b") is None


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ("{not json", "not valid JSON"),
        ('{"version": 2, "topics": []}', "version 1"),
        ('{"version": 1, "topics": [{"name": "a b", "partitions": 1}]}', "topics[0]"),
        ('{"version": 1, "topics": [{"name": "x", "partitions": 1, "config": {"k": "1"}}]}', "'k'"),
    ],
)
def test_a_bad_store_is_reported_kept_and_refuses_changes(
    tmp_path: Path, document: str, named: str
) -> None:
    path = tmp_path / "store.json"
    path.write_text(document)
    store = ClientTopicStore(path)
    store.load()
    assert not store.loaded and store.error is not None
    assert str(path) in store.error and named in store.error
    with pytest.raises(StoreUnavailableError, match="store.json"):
        store.put(ClientTopic("x", 1, {}, 0))
    assert path.read_text() == document


def test_incremental_operations_follow_kafka() -> None:
    config: dict[str, str] = {"cleanup.policy": "compact"}
    _apply(config, "cleanup.policy", OP_APPEND, "delete", "t")
    assert config["cleanup.policy"] == "compact,delete"
    _apply(config, "cleanup.policy", OP_APPEND, "delete", "t")  # already there
    assert config["cleanup.policy"] == "compact,delete"
    _apply(config, "cleanup.policy", OP_SUBTRACT, "compact", "t")
    assert config["cleanup.policy"] == "delete"
    _apply(config, "retention.ms", OP_SET, "5", "t")
    _apply(config, "retention.ms", OP_DELETE, None, "t")
    assert "retention.ms" not in config
    with pytest.raises(Exception, match="append is not allowed for config key: retention.ms"):
        _apply(config, "retention.ms", OP_APPEND, "1", "t")
    with pytest.raises(Exception, match="Null value"):
        _apply(config, "retention.ms", OP_SET, None, "t")
    fresh: dict[str, str] = {}
    _apply(fresh, "cleanup.policy", OP_APPEND, "compact", "t")  # onto Kafka's default
    assert json.dumps(fresh) == '{"cleanup.policy": "delete,compact"}'
