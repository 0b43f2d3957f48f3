"""What the operator writes into Topic and StorageVolume status stays small whatever the
partition count (issue 22 point 5): per-partition detail up to PARTITION_STATUS_MAX, summaries
beyond, messages naming at most MESSAGE_ITEMS_MAX partitions."""

from __future__ import annotations

import json
from typing import Any

from storageoperator import conditions, crds

#: Far under the API server's 1 MiB object limit (and its 1.5 MiB request limit).
STATUS_BYTES_MAX = 64 * 1024
PARTITIONS = 10_000


def worker(partitions: int, *, broken: bool) -> dict[str, Any]:
    return {
        "state": "running",
        "topics": ["big"],
        "partitions": [
            {
                "topic": "big",
                "partition": p,
                "logStartOffset": 0,
                "logEndOffset": 1_000_000 + p,
                "sizeBytes": 123_456_789,
                "segments": 40,
                "cleanerState": "idle",
                "dirtyRatio": (p % 97) / 97,
                "uncleanable": broken and p % 2 == 0,
                "uncleanableReason": "CorruptRecordException at offset 123 in 0000.log"
                if broken and p % 2 == 0
                else None,
                "offline": broken and p % 2 == 1,
                "lastClean": {"messages_read": 10, "messages_written": 4, "size_reduction": 0.5},
                "lastCleanMs": 1_700_000_000_000,
            }
            # Declared beyond what the worker has: the Ready message names the missing ones.
            for p in range(partitions - 500)
        ],
        "dirs": [{"path": "/data/logs", "online": True, "disk": {"freeBytes": 10**12}}],
    }


def body(partitions: int) -> dict[str, Any]:
    return {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": "big", "namespace": "ns", "generation": 1},
        "spec": {"volume": "v", "partitions": partitions},
    }


def topic_status(partitions: int, *, broken: bool) -> dict[str, Any]:
    report = worker(partitions, broken=broken)
    view = conditions.worker_views(report)("big")
    conds = conditions.topic_conditions(
        body(partitions), volume={"metadata": {"name": "v"}}, worker=view
    )
    figures = conditions.topic_figures("big", view)
    return {**figures, "conditions": conditions.merge(None, conds, "2026-11-24T00:00:00Z")}


def test_topic_status_is_bounded_whatever_the_partition_count() -> None:
    for broken in (False, True):
        status = topic_status(PARTITIONS, broken=broken)
        size = len(json.dumps(status))
        assert size < STATUS_BYTES_MAX, (broken, size)
        listed = status["partitionStatus"]
        assert len(listed) == conditions.PARTITION_STATUS_MAX
        assert status["partitionStatusOmitted"] == PARTITIONS - 500 - len(listed)
        assert status["partitions"] == PARTITIONS - 500
        assert [p["partition"] for p in listed] == sorted(p["partition"] for p in listed)
        messages = {c["type"]: c["message"] for c in status["conditions"]}
        assert "and 490 more" in messages["Ready"]
        if broken:
            # Those needing attention are the ones listed, and counted.
            assert all(p["uncleanable"] for p in listed if p["partition"] % 2 == 0)
            assert status["uncleanablePartitions"] == (PARTITIONS - 500) // 2
            assert "more" in messages["Degraded"]
        else:
            # The dirtiest ones.
            assert min(p["dirtyRatio"] for p in listed) >= 95 / 97


def test_a_small_topic_lists_every_partition_and_omits_nothing() -> None:
    status = topic_status(conditions.PARTITION_STATUS_MAX + 500, broken=False)
    assert len(status["partitionStatus"]) == conditions.PARTITION_STATUS_MAX
    assert "partitionStatusOmitted" not in status


def test_volume_status_is_summaries_only() -> None:
    report = worker(PARTITIONS, broken=True)
    report["config"] = {"topics": {"error": "topics/x.yaml: " + "bad " * 20_000}}
    status = {
        **conditions.volume_figures(report),
        "conditions": conditions.volume_conditions(
            {"metadata": {"name": "v", "generation": 1}},
            children_ready=True,
            worker=report,
        ),
    }
    assert len(json.dumps(status)) < 16 * 1024
    assert all(len(c["message"]) <= conditions.MESSAGE_CHARS_MAX for c in status["conditions"])


def test_volume_status_lists_client_topics_up_to_the_documented_count() -> None:
    """Topics Kafka clients created: the first CLIENT_TOPICS_SHOWN by name, with the longest
    names Kafka allows; the count of all of them and of those left out beside."""
    report = worker(10, broken=False)
    created = [
        {"name": f"wordcount-{n:05d}-" + "x" * 233, "partitions": 12, "createdMs": 1}
        for n in reversed(range(PARTITIONS))
    ]
    assert len(created[0]["name"]) == 249
    report["clientTopics"] = {"prefixes": ["wordcount-"], "topics": created}
    figures = conditions.volume_figures(report)
    assert len(json.dumps(figures)) < 32 * 1024
    listed = figures["clientTopics"]
    assert len(listed) == conditions.CLIENT_TOPICS_SHOWN
    assert [t["name"] for t in listed] == sorted(t["name"] for t in created)[: len(listed)]
    assert listed[0] == {"name": created[-1]["name"], "partitions": 12}
    assert figures["clientTopicCount"] == PARTITIONS
    assert figures["clientTopicsOmitted"] == PARTITIONS - conditions.CLIENT_TOPICS_SHOWN
    # The CRD's bound is the same count.
    schema = crds.storage_volume_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert (
        schema["properties"]["status"]["properties"]["clientTopics"]["maxItems"]
        == conditions.CLIENT_TOPICS_SHOWN
    )
    # Few client topics: every one listed, none omitted.
    report["clientTopics"]["topics"] = created[:3]
    few = conditions.volume_figures(report)
    assert len(few["clientTopics"]) == 3 and few["clientTopicsOmitted"] == 0
