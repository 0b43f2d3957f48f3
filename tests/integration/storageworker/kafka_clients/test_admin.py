"""Admin APIs on the kafka port: DeleteRecords moves the log start (a consumer before it is
reset), DescribeConfigs tells set keys from defaults and refuses an unknown topic."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as Partition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.integration.storageworker.kafka_clients.clients import fill, poll_values
from tests.integration.storageworker.test_serve import Served

pytestmark = pytest.mark.integration


# -- admin APIs -------------------------------------------------------------------------------


def test_delete_records_and_describe_configs(served: Served) -> None:
    fill(served.kafka_address, "events", 100)
    admin = AdminClient({"bootstrap.servers": served.kafka_address})
    futures = admin.delete_records([Partition("events", 0, 20), Partition("events", 1, -1)])
    results = {tp.partition: f.result(10) for tp, f in futures.items()}
    assert results[0].low_watermark == 20 and results[1].low_watermark == 50
    assert served.partition("events-0")["logStartOffset"] == 20
    resource = ConfigResource(ConfigResource.Type.TOPIC, "profiles")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert not configs["cleanup.policy"].is_default
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default
    missing = ConfigResource(ConfigResource.Type.TOPIC, "nope")
    with pytest.raises(KafkaException):
        admin.describe_configs([missing])[missing].result(10)
    # A consumer positioned before the new log start is told OFFSET_OUT_OF_RANGE and resets.
    consumer = Consumer(
        {
            "bootstrap.servers": served.kafka_address,
            "group.id": "reset",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([Partition("events", 0, 5)])
    got = poll_values(consumer, 30)
    consumer.close()
    assert [m.offset() for m in got] == list(range(20, 50))
