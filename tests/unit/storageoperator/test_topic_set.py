"""The sharded topic set: stable shards, bounded keys and writes, full shards refused."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from storageoperator import topic_set


def topic(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": "ns", "generation": 1},
        "spec": {"volume": "v", "partitions": 1, **spec},
    }


def test_the_shard_of_a_name_is_stable_across_processes() -> None:
    names = [f"topic-{n}" for n in range(50)]
    here = [topic_set.shard_of(n) for n in names]
    code = (
        "import json, sys; from storageoperator import topic_set; "
        f"print(json.dumps([topic_set.shard_of(n) for n in {names!r}]))"
    )
    # Another interpreter (another hash seed) puts every name in the same shard.
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PYTHONPATH": ":".join(sys.path)},
    )
    assert json.loads(other.stdout) == here
    # And the names spread over the shards.
    counts = [0] * topic_set.SHARDS
    for n in range(10_000):
        counts[topic_set.shard_of(f"t-{n}")] += 1
    assert min(counts) > 10_000 / topic_set.SHARDS / 2


def test_keys_are_valid_configmap_keys_even_for_the_longest_names() -> None:
    assert topic_set.entry_key("orders") == "orders.yaml"
    longest = "a" * 253
    key = topic_set.entry_key(longest)
    assert len(key) == topic_set.KEY_LENGTH_MAX and key.endswith(".yaml")
    assert topic_set.entry_key("a" * 252 + "b") != key  # the hash keeps them apart


def test_desired_shards_keep_a_paused_topics_entry_as_it_is() -> None:
    live = [topic("a", partitions=3), topic("b")]
    shard_b, key_b = topic_set.topic_key(live[1])
    kept = {shard_b: {key_b: "the entry as the worker has it\n"}}
    shards = topic_set.desired_shards(live, kept, frozenset({"b"}))
    assert shards[shard_b][key_b] == "the entry as the worker has it\n"
    shard_a, key_a = topic_set.topic_key(live[0])
    assert "partitions: 3" in shards[shard_a][key_a]
    assert sum(len(d) for d in shards.values()) == 2


def test_delta_is_only_what_changed() -> None:
    assert topic_set.delta({"a": "1", "b": "2"}, {"a": "1", "c": "3"}) == {"b": "2", "c": None}
    assert topic_set.delta({"a": "1"}, {"a": "1"}) == {}


def test_a_full_shard_refuses_a_new_entry_naming_the_shard() -> None:
    big = "x" * 1000
    current: dict[str, str] = {}
    while topic_set.data_bytes(current) + 1010 + 200 <= topic_set.SHARD_BYTES_MAX:
        current[f"t{len(current)}.yaml"] = big
    bigger = "y" * 1500
    topic_set.check_fits(current, "fits.yaml", "x" * 100, shard="s", topic="fits")
    with pytest.raises(topic_set.ShardFullError, match="Topic new: ConfigMap lk-v-topics-07"):
        topic_set.check_fits(current, "new.yaml", bigger, shard="lk-v-topics-07", topic="new")
    # Replacing an entry already there by one of the same size fits.
    topic_set.check_fits(current, "t0.yaml", big, shard="s", topic="t0")
    # The volume's pass keeps what is there and leaves the new key out.
    kept = topic_set.bounded({**current, "new.yaml": bigger}, current)
    assert kept == current
