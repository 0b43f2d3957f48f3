"""The operator's pure middle: manifests from resources, conditions from what it saw."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from storageoperator import conditions, render, topic_set
from storageworker.settings import load_settings
from storageworker.topics import parse_topic_sources, read_topic_sources

VOLUME: dict[str, Any] = {
    "apiVersion": "logkeeper.io/v1alpha1",
    "kind": "StorageVolume",
    "metadata": {
        "name": "v1",
        "namespace": "ns",
        "generation": 3,
        "annotations": {
            "logkeeper.io/pause-retention": "true",
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
        },
    },
    "spec": {
        "size": "5Gi",
        "storageClassName": "fast",
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": 1073741824},
        },
        "cleaner": {"threads": 2, "dedupeBufferBytes": 4194304},
        "worker": {"shutdownGracePeriodMs": 10000},
        "monitoring": {"serviceMonitor": True},
        "clientTopicPrefixes": ["wordcount-", "connect-"],
    },
}


def topic(name: str, volume: str = "v1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": "ns", "generation": 1},
        "spec": {"volume": volume, "partitions": 2, **spec},
    }


def test_config_maps_are_what_the_worker_reads(tmp_path: Path) -> None:
    topics = [topic("b", config={"cleanup.policy": "compact"}), topic("a")]
    topics[0]["metadata"]["annotations"] = {"logkeeper.io/pause-cleaning": "true", "other": "x"}
    cm = render.config_map(VOLUME)
    assert cm["metadata"]["name"] == "lk-v1"
    # The single topic set of earlier versions is removed by the operator's patch.
    assert cm["data"]["topics.yaml"] is None
    volume = load_settings(cm["data"]["settings.yaml"], source="settings.yaml")
    assert volume.settings.cleaner_threads == 2
    assert volume.settings.client_topic_prefixes == ("wordcount-", "connect-")
    assert volume.annotations == {"logkeeper.io/pause-retention": "true"}
    live = render.topics_of_volume("v1", [*topics, topic("c", "v2")])
    shards = topic_set.desired_shards(live, {}, frozenset())
    # Every shard's keys, written as the kubelet projects them, is the worker's topic set.
    for shard, data in shards.items():
        manifest = topic_set.shard_manifest("v1", shard, data)
        assert manifest["metadata"]["name"] == f"lk-v1-topics-{shard:02d}"
        for key, text in manifest["data"].items():
            (tmp_path / key).write_text(text)
    parsed = parse_topic_sources(read_topic_sources(tmp_path))
    assert sorted(parsed) == ["a", "b"] and parsed["b"].config.compact
    assert parsed["b"].annotations == {"logkeeper.io/pause-cleaning": "true"}
    # A Topic being deleted leaves the set (its deletionPolicy then applies in the worker).
    going = topic("a")
    going["metadata"]["deletionTimestamp"] = "2026-11-21T00:00:00Z"
    assert render.topics_of_volume("v1", [going]) == []


def test_stateful_set_is_locked_down_and_sized() -> None:
    sts = render.stateful_set(VOLUME, "logkeeper:1.0")
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert sts["spec"]["replicas"] == 1 and sts["metadata"]["name"] == "lk-v1"
    assert container["image"] == "logkeeper:1.0"
    assert container["args"][:2] == ["serve", "--data-dir"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    args = container["args"]
    assert args[args.index("--topics") + 1] == mounts["topics"] == "/etc/logkeeper/topics"
    assert args[args.index("--settings") + 1] == mounts["config"] + "/settings.yaml"
    (projected,) = [v["projected"] for v in pod["volumes"] if v["name"] == "topics"]
    assert [s["configMap"]["name"] for s in projected["sources"]] == [
        f"lk-v1-topics-{n:02d}" for n in range(topic_set.SHARDS)
    ]
    args = container["args"]
    flags = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--kafka")}
    assert flags["--kafka-port"] == "9092" and flags["--kafka-host"] == "0.0.0.0"
    assert flags["--kafka-advertised-host"] == "lk-v1.$(POD_NAMESPACE).svc"
    assert "--kafka-allow-plaintext" in args
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "kafka": 9092,
        "http": 8080,
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["capabilities"] == {"drop": ["ALL"]}
    assert not security["allowPrivilegeEscalation"] and pod["securityContext"]["runAsNonRoot"]
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "1073741824"},
    }
    assert pod["terminationGracePeriodSeconds"] == 15
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "logkeeper-operator"
    assert set(sts["spec"]["selector"]["matchLabels"].items()) <= set(labels.items())
    own_image = copy.deepcopy(VOLUME)
    own_image["spec"]["image"] = "mine:2"
    assert (
        render.stateful_set(own_image, "x")["spec"]["template"]["spec"]["containers"][0]["image"]
        == "mine:2"
    )


def test_service_and_service_monitor() -> None:
    svc = render.service(VOLUME)
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [
        ("kafka", 9092),
        ("http", 8080),
    ]
    monitor = render.service_monitor(VOLUME)
    assert monitor is not None and monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    plain = copy.deepcopy(VOLUME)
    del plain["spec"]["monitoring"]
    assert render.service_monitor(plain) is None


def test_merge_keeps_transition_time_unless_the_status_flips() -> None:
    first = conditions.merge(
        None, [conditions.condition("Ready", False, "Progressing", "", 1)], "T1"
    )
    again = conditions.merge(
        first, [conditions.condition("Ready", False, "Progressing", "x", 2)], "T2"
    )
    assert again[0]["lastTransitionTime"] == "T1" and again[0]["observedGeneration"] == 2
    flipped = conditions.merge(again, [conditions.condition("Ready", True, "Ready", "", 2)], "T3")
    assert flipped[0]["lastTransitionTime"] == "T3"


def worker_status(**partition: Any) -> dict[str, Any]:
    base = {
        "topic": "t",
        "sizeBytes": 10,
        "dirtyRatio": 0.5,
        "pausedCleaning": False,
        "pausedRetention": False,
    }
    return {
        "state": "running",
        "topics": ["t"],
        "config": {"topics": {"ok": True, "error": None}},
        "partitions": [{**base, "partition": 0, **partition}, {**base, "partition": 1}],
        "dirs": [{"path": "/data/logs", "online": True, "disk": {"freeBytes": 100}}],
    }


def by_type(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in items}


def test_topic_conditions_from_the_worker() -> None:
    body = topic("t")
    ready = by_type(conditions.topic_conditions(body, volume=VOLUME, worker=worker_status()))
    assert ready["Ready"]["status"] == "True" and ready["Degraded"]["status"] == "False"
    assert ready["CleaningPaused"]["status"] == "False"
    for item in ready.values():
        assert item["reason"].isalnum() and item["observedGeneration"] == 1
    sick = worker_status(
        uncleanable=True,
        uncleanableReason="CorruptRecordError: bad CRC",
        pausedCleaning=True,
        pauseReasons=["cleaning paused: annotation on the Topic"],
    )
    found = by_type(conditions.topic_conditions(body, volume=VOLUME, worker=sick))
    assert found["Degraded"]["status"] == "True" and "bad CRC" in found["Degraded"]["message"]
    assert found["CleaningPaused"]["status"] == "True"
    assert found["CleaningPaused"]["message"] == "cleaning paused: annotation on the Topic"
    more = topic("t", partitions=3)
    waiting = by_type(conditions.topic_conditions(more, volume=VOLUME, worker=worker_status()))
    assert waiting["Ready"]["status"] == "False" and "[2]" in waiting["Ready"]["message"]
    assert waiting["Progressing"]["status"] == "True"


def test_topic_conditions_without_volume_worker_or_valid_config() -> None:
    missing = by_type(conditions.topic_conditions(topic("t"), volume=None, worker=None))
    assert missing["Ready"]["reason"] == "VolumeNotFound" and "'v1'" in missing["Ready"]["message"]
    unknown = by_type(
        conditions.topic_conditions(topic("t"), volume=VOLUME, worker=None, worker_error="refused")
    )
    assert unknown["Ready"]["status"] == "Unknown" and unknown["Ready"]["message"] == "refused"
    bad = topic("t", config={"retention.mss": 5})
    invalid = by_type(conditions.topic_conditions(bad, volume=VOLUME, worker=worker_status()))
    assert (
        invalid["Ready"]["reason"] == "InvalidConfig"
        and "retention.mss" in invalid["Ready"]["message"]
    )
    paused = topic("t")
    paused["metadata"]["annotations"] = {
        "logkeeper.io/pause-reconciliation": "true",
        "logkeeper.io/pause-retention": "true",
    }
    found = by_type(conditions.topic_conditions(paused, volume=VOLUME, worker=None))
    assert found["ReconciliationPaused"]["status"] == "True"
    assert found["RetentionPaused"]["reason"] == "PauseRequested"


def test_a_topic_adopting_a_client_topic_progresses_then_reports_undeclared_partitions() -> None:
    status = worker_status()
    body = topic("t")
    adopting = {
        **status,
        "partitions": [{**p, "clientTopic": True} for p in status["partitions"]],
    }
    found = by_type(conditions.topic_conditions(body, volume=VOLUME, worker=adopting))
    assert found["Ready"]["status"] == "False"
    assert found["Progressing"]["reason"] == "AdoptingClientTopic"
    # Adopted, but the client had grown the topic to 3 partitions and the spec says 2.
    grown = {**status, "undeclaredPartitions": ["t-2", "other-2"]}
    found = by_type(conditions.topic_conditions(body, volume=VOLUME, worker=grown))
    assert found["Ready"]["status"] == "True"
    assert found["Degraded"]["reason"] == "UndeclaredPartitions"
    assert "[2]" in found["Degraded"]["message"] and "to 3" in found["Degraded"]["message"]
    healthy = by_type(conditions.topic_conditions(body, volume=VOLUME, worker=status))
    assert healthy["Degraded"]["status"] == "False"


def test_figures_for_topic_and_volume() -> None:
    status = worker_status(
        lastClean={"messages_read": 10, "messages_written": 4, "size_reduction": 0.5},
        lastCleanMs=1_700_000_000_000,
    )
    figures = conditions.topic_figures("t", status)
    assert (
        figures["partitions"] == 2
        and figures["sizeBytes"] == 20
        and figures["maxDirtyRatio"] == 0.5
    )
    first = figures["partitionStatus"][0]
    assert first["lastCleanTime"] == "2023-11-14T22:13:20Z"
    assert first["lastCleanResult"] == "10 -> 4 records, 50.0% smaller"
    volume = conditions.volume_figures(status)
    assert volume == {
        "topics": 1,
        "partitions": 2,
        "sizeBytes": 20,
        "maxDirtyRatio": 0.5,
        "uncleanablePartitions": 0,
        "diskFreeBytes": 100,
        "clientTopicCount": 0,
        "clientTopics": [],
        "clientTopicsOmitted": 0,
    }
    # The worker's own offsets topic is not counted as the user's.
    with_offsets = {
        **status,
        "topics": [*status["topics"], "__consumer_offsets"],
        "internalTopics": ["__consumer_offsets"],
        "partitions": [
            *status["partitions"],
            {"topic": "__consumer_offsets", "partition": 0, "internal": True, "sizeBytes": 99},
        ],
    }
    assert conditions.volume_figures(with_offsets) == volume
    # Topics Kafka clients created are listed by name (the worker's clientTopics section).
    created = {"name": "wordcount-counts-changelog", "partitions": 2, "config": {}}
    with_client = {**status, "clientTopics": {"prefixes": ["wordcount-"], "topics": [created]}}
    figures_with_client = conditions.volume_figures(with_client)
    assert figures_with_client["clientTopics"] == [
        {"name": "wordcount-counts-changelog", "partitions": 2}
    ]
    assert figures_with_client["clientTopicCount"] == 1
    conds = by_type(conditions.volume_conditions(VOLUME, children_ready=True, worker=status))
    assert conds["Ready"]["status"] == "True" and conds["RetentionPaused"]["status"] == "True"
    broken = {**status, "config": {"topics": {"error": "t.yaml: bad"}}}
    conds = by_type(conditions.volume_conditions(VOLUME, children_ready=True, worker=broken))
    assert conds["Degraded"]["status"] == "True" and "t.yaml: bad" in conds["Degraded"]["message"]


def test_rendered_yaml_round_trips() -> None:
    for manifest in (
        render.stateful_set(VOLUME, "i"),
        render.service(VOLUME),
        render.config_map(VOLUME),
    ):
        assert yaml.safe_load(yaml.safe_dump(manifest)) == manifest


def test_disk_free_in_the_status_moves_only_in_steps_of_one_percent() -> None:
    worker = {"dirs": [{"path": "/data", "online": True, "disk": {"freeBytes": 1_000_000}}]}
    first = conditions.volume_figures(worker)
    assert first["diskFreeBytes"] == 1_000_000
    # Another tenant's writes move the figure a little: the status keeps what it shows.
    worker["dirs"][0]["disk"]["freeBytes"] = 990_001
    assert conditions.volume_figures(worker, shown=first)["diskFreeBytes"] == 1_000_000
    # A move of 1% or more is shown, up or down.
    worker["dirs"][0]["disk"]["freeBytes"] = 990_000
    assert conditions.volume_figures(worker, shown=first)["diskFreeBytes"] == 990_000
    worker["dirs"][0]["disk"]["freeBytes"] = 1_010_000
    assert conditions.volume_figures(worker, shown=first)["diskFreeBytes"] == 1_010_000
    # A full disk is always shown as it is, and a worker that lost its figure shows none.
    worker["dirs"][0]["disk"]["freeBytes"] = 0
    assert conditions.volume_figures(worker, shown=first)["diskFreeBytes"] == 0
    assert conditions.settled_disk_free(0, 5) == 5
    assert conditions.settled_disk_free(1_000_000, None) is None


def test_disk_pressure_condition_names_the_dirs_and_floors_not_the_moving_free_bytes() -> None:
    def worker(under: bool, free: int) -> dict[str, Any]:
        pressure = {"underFloor": under, "floorBytes": 1000, "freeBytes": free, "reason": "x"}
        return {
            "state": "running",
            "dirs": [{"path": "/d", "online": True, "diskPressure": pressure}],
        }

    conds = by_type(
        conditions.volume_conditions(VOLUME, children_ready=True, worker=worker(True, 5))
    )
    assert conds["DiskPressure"]["status"] == "True"
    assert conds["DiskPressure"]["reason"] == "BelowFreeSpaceFloor"
    assert conds["DiskPressure"]["message"] == "produce is refused in /d (floor 1000 bytes)"
    again = by_type(
        conditions.volume_conditions(VOLUME, children_ready=True, worker=worker(True, 7))
    )
    assert again["DiskPressure"] == conds["DiskPressure"], "free bytes must not churn the status"
    clear = by_type(
        conditions.volume_conditions(VOLUME, children_ready=True, worker=worker(False, 9))
    )
    assert (clear["DiskPressure"]["status"], clear["DiskPressure"]["reason"]) == (
        "False",
        "EnoughFreeSpace",
    )
    unknown = by_type(conditions.volume_conditions(VOLUME, children_ready=True, worker=None))
    assert unknown["DiskPressure"]["status"] == "Unknown"
