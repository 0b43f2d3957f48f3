"""The topic configs DescribeConfigs reports: the worker's own keys, and the keys Kafka's broker
reports for every topic that have no meaning on a worker, at Kafka's defaults.

Kafka's admin tools (``kafka-configs --describe``, Cruise Control, Strimzi's topic operator)
read the whole list a broker answers; a key missing from it reads as "unknown to this broker".
The keys below are the ones Kafka 4.3's broker reports for a topic that the worker does not
implement: replication (one replica, no followers, no elections) and tiered storage (none).
Each is reported read-only at the value Kafka reports by default, which is also what the
worker does: it never throttles replication, never elects an unclean leader, keeps everything
local. A Topic resource may set the replication keys (storagecore accepts and ignores them, so
that a config copied from a Kafka cluster loads): their declared value is reported, as Kafka
would. The tiered-storage keys are refused by storagecore's config check (unknown keys).

Used by :func:`storageworker.kafka.apis.describe_configs`; holds no state.
"""

from __future__ import annotations

from typing import Final

#: Kafka key → the value Kafka 4.3 reports by default, for keys without meaning here.
NOT_APPLICABLE_DEFAULTS: Final[dict[str, str]] = {
    # Replication: a worker is the only replica of its partitions.
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    # Tiered storage (KIP-405): a worker keeps every segment on its volume.
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
}


def reported(values: dict[str, str], declared: dict[str, str]) -> dict[str, str]:
    """Key → value for DescribeConfigs: the worker's own keys (``values``), then the
    not-applicable ones at the value the topic declares (``declared``) or Kafka's default."""
    overlap = values.keys() & NOT_APPLICABLE_DEFAULTS.keys()
    assert not overlap, f"keys both implemented and not applicable: {sorted(overlap)}"
    applicable = {
        key: str(declared.get(key, default)) for key, default in NOT_APPLICABLE_DEFAULTS.items()
    }
    return {**values, **applicable}
