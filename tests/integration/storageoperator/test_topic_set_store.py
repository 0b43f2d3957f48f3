"""The topic set's writer against the fake API server (in this process): what it writes, and
what it does not write again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from storageoperator import topic_set
from storageoperator.topic_set_store import TopicSetStore
from tests.k8s.fake_apiserver import FakeCluster

NS = "default"


class Cluster:
    def __init__(self, root: Path) -> None:
        self.cluster = FakeCluster(root)
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            str(self.cluster.kubeconfig), client_configuration=configuration
        )
        self.core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))

    def writes(self) -> list[tuple[str, str, int]]:
        return self.cluster.call(
            lambda: [
                (w.method, w.path.rsplit("/", 1)[1], w.body_bytes)
                for w in self.cluster.server.writes
            ]
        )

    def data(self, shard_name: str) -> dict[str, str]:
        return dict(self.core.read_namespaced_config_map(shard_name, NS).data or {})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    result = Cluster(tmp_path)
    try:
        yield result
    finally:
        result.cluster.stop()


VOLUME: dict[str, Any] = {
    "apiVersion": "logkeeper.io/v1alpha1",
    "kind": "StorageVolume",
    "metadata": {"name": "v", "namespace": NS, "uid": "uid-v"},
    "spec": {"size": "1Gi"},
}


def topic(name: str, partitions: int = 1, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"volume": "v", "partitions": partitions},
    }


def store(cluster: Cluster) -> TopicSetStore:
    return TopicSetStore(lambda: cluster.core, lambda call, what: call())


def shard_of(name: str) -> str:
    return topic_set.shard_name("v", topic_set.shard_of(name))


def test_a_topic_event_writes_its_own_key_once(cluster: Cluster) -> None:
    writer = store(cluster)
    assert writer.put(VOLUME, "a", topic_set.entry(topic("a")))  # creates the shard
    (created,) = cluster.writes()
    assert created[:2] == ("POST", "configmaps")
    owner = cluster.core.read_namespaced_config_map(shard_of("a"), NS).metadata
    assert [o.uid for o in owner.owner_references] == ["uid-v"]
    assert owner.labels[topic_set.SHARD_LABEL] == shard_of("a")[-2:]
    # The same entry again (a resume, a status-only event): nothing written.
    assert not writer.put(VOLUME, "a", topic_set.entry(topic("a")))
    # A new store (an operator restart) reads the shard once and writes nothing either.
    again = store(cluster)
    assert not again.put(VOLUME, "a", topic_set.entry(topic("a")))
    assert len(cluster.writes()) == 1
    # A change: one merge patch of that key, the size of one entry.
    assert again.put(VOLUME, "a", topic_set.entry(topic("a", partitions=3)))
    method, name, size = cluster.writes()[-1]
    assert (method, name) == ("PATCH", shard_of("a")) and size < 400
    assert "partitions: 3" in cluster.data(shard_of("a"))["a.yaml"]
    # Removed: the key goes.
    assert again.put(VOLUME, "a", None)
    assert "a.yaml" not in cluster.data(shard_of("a"))
    assert not again.put(VOLUME, "a", None)


def test_the_volume_pass_writes_deltas_and_keeps_paused_entries(cluster: Cluster) -> None:
    writer = store(cluster)
    names = [f"t{n}" for n in range(40)]
    live = [topic(n) for n in names]
    written = writer.sync(VOLUME, lambda: (live, frozenset()))
    assert len(written) == topic_set.SHARDS  # every shard created, empty ones too
    assert all(topic_set.entry_key(n) in cluster.data(shard_of(n)) for n in names)
    before = len(cluster.writes())
    assert writer.sync(VOLUME, lambda: (live, frozenset())) == []
    assert len(cluster.writes()) == before
    # t0 changed while paused: its entry stays as it was; t1 gone: removed; a hand edit undone.
    live[0] = topic("t0", partitions=9, **{"logkeeper.io/pause-reconciliation": "true"})
    del live[1]
    cluster.core.patch_namespaced_config_map(
        shard_of("t2"), NS, {"data": {"t2.yaml": "edited by hand"}}
    )
    written = writer.sync(VOLUME, lambda: (live, frozenset({"t0"})))
    assert sorted(written) == sorted({f"ConfigMap/{shard_of('t1')}", f"ConfigMap/{shard_of('t2')}"})
    assert "partitions: 1" in cluster.data(shard_of("t0"))["t0.yaml"]
    assert "t1.yaml" not in cluster.data(shard_of("t1"))
    assert cluster.data(shard_of("t2"))["t2.yaml"] == topic_set.entry(topic("t2"))


def test_a_full_shard_refuses_the_topic_naming_the_shard(cluster: Cluster) -> None:
    writer = store(cluster)
    name = "big"
    filler = {f"f{n}.yaml": "x" * 100_000 for n in range(9)}
    cluster.core.create_namespaced_config_map(
        NS, {"metadata": {"name": shard_of(name)}, "data": filler}
    )
    with pytest.raises(topic_set.ShardFullError, match=f"Topic big: ConfigMap {shard_of(name)}"):
        writer.put(VOLUME, name, topic_set.entry(topic(name)) + "#" * 30_000)
    assert "big.yaml" not in cluster.data(shard_of(name))
