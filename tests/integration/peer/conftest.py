"""The two peers of the differential tests: Apache Kafka's broker and ``logkeeper serve``.

Both are session-wide (one JVM and one worker for all the tests of ``tests/integration/peer``)
and hold the same topics, declared once in :data:`TOPICS`; tests keep apart by topic and group
names. A test runs its scenario against each peer with the same client and compares.
Without ``mvn``, ``javac`` or ``java`` these tests skip and say which tool is missing.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic
from tests.kafka_support import maven
from tests.kafka_support.broker import KafkaBroker, free_port
from tests.kafka_support.raw_client import RawClient

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SEGMENT_BYTES = 1 << 20  # Kafka 4's smallest segment.bytes

#: name → (partitions, config): the topics both peers hold.
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    **{f"produce-{codec}-{idem}": (1, {}) for codec in CODECS for idem in ("idem", "plain")},
    "offsets": (1, {}),
    "deletes": (1, {}),
    "rebalance": (2, {}),
    "membership": (2, {}),
    "spark-source": (2, {}),
    **{f"txn-{name}": (2, {}) for name in ("commit", "fence", "timeout", "offsets", "open")},
    "txn-rdkafka": (1, {}),
    "oversize": (1, {"segment.bytes": str(SEGMENT_BYTES), "max.message.bytes": str(2 << 20)}),
    "configured": (
        1,
        {
            "cleanup.policy": "compact",
            "retention.ms": "3600000",
            "segment.bytes": str(SEGMENT_BYTES),
            "min.cleanable.dirty.ratio": "0.2",
        },
    ),
}


#: The worker lets clients create topics with these prefixes (the tests of client topics, Kafka
#: Streams and Kafka Connect); the broker lets clients create any topic.
CLIENT_TOPIC_PREFIXES = 'clientTopicPrefixes: ["client_", "wordcount-", "connect-"]\n'


@dataclasses.dataclass(frozen=True)
class Peers:
    kafka: str
    logkeeper: str

    def both(self) -> tuple[tuple[str, str], tuple[str, str]]:
        return ("kafka", self.kafka), ("logkeeper", self.logkeeper)


def create_on_broker(address: str, topics: dict[str, tuple[int, dict[str, str]]] = TOPICS) -> None:
    """Create ``topics`` on the broker at ``address`` and wait until each has its leaders."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": address})
    futures = admin.create_topics(
        [NewTopic(name, count, 1, config=config) for name, (count, config) in topics.items()],
        operation_timeout=30,
    )
    for future in futures.values():
        future.result(60)
    wait_for_leaders(address, topics)


def wait_for_leaders(address: str, topics: dict[str, tuple[int, dict[str, str]]] = TOPICS) -> None:
    """Until Metadata shows a leader for every partition of every topic and ListOffsets is
    answered for each without an error (a condition polled with a short pause: the broker
    announces nothing when its leaders are elected, and a restarted broker names itself the
    leader in Metadata a moment before it serves the partition: NOT_LEADER_OR_FOLLOWER)."""
    import threading

    pause = threading.Event()
    for _ in range(600):
        with RawClient(address) as client:
            answer = client.call(
                3,
                12,
                {
                    "topics": [{"topic_id": uuid.UUID(int=0), "name": name} for name in topics],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
            ready = {
                t["name"]
                for t in answer["topics"]
                if t["error_code"] == 0
                and len(t["partitions"]) == topics[t["name"]][0]
                and all(p["leader_id"] >= 0 for p in t["partitions"])
            }
            if ready == set(topics):
                offsets = client.call(
                    2,
                    7,
                    {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [
                            {
                                "name": name,
                                "partitions": [
                                    {"partition_index": i, "timestamp": -1} for i in range(count)
                                ],
                            }
                            for name, (count, _config) in topics.items()
                        ],
                    },
                )
                if all(
                    part["error_code"] == 0
                    for answered in offsets["topics"]
                    for part in answered["partitions"]
                ):
                    return
        pause.wait(0.1)
    raise AssertionError(f"the broker has no leaders for {sorted(set(topics) - ready)}")


def wait_for_group_coordinator(address: str, group: str) -> None:
    """Until OffsetFetch for ``group`` answers without a coordinator error. Kafka's broker
    creates ``__consumer_offsets`` on the first group request and loads its partitions
    (answering COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
    meanwhile, which clients retry); the worker holds the topic from its start."""
    import threading

    pause = threading.Event()
    code = -1
    for _ in range(600):
        with RawClient(address) as client:
            found = client.call(10, 3, {"key": group, "key_type": 0})
            code = found["error_code"]
            if code == 0:
                code = client.call(9, 7, {"group_id": group, "topics": None})["error_code"]
        if code == 0:
            return
        assert code in (14, 15, 16), f"{address}: group coordinator answered {code}"
        pause.wait(0.1)
    raise AssertionError(f"{address}: no group coordinator for {group} (last error {code})")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    missing = maven.missing_tools()
    if missing:
        pytest.skip(f"Kafka's broker needs {', '.join(missing)} on PATH")
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-broker"))
    try:
        broker.start()
        create_on_broker(broker.address)
        wait_for_group_coordinator(broker.address, "peers")
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def restartable_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A second broker, for the tests that stop, kill and restart it or read its log dir (the
    shared one keeps serving the others). Each such test creates its own topics and leaves it
    running. Its cleaner looks for work every 100 ms (Kafka's ``log.cleaner.backoff.ms``
    default is 15 s), so a test waits on the cleaner for well under a second."""
    missing = maven.missing_tools()
    if missing:
        pytest.skip(f"Kafka's broker needs {', '.join(missing)} on PATH")
    broker = KafkaBroker(
        tmp_path_factory.mktemp("kafka-restartable"), {"log.cleaner.backoff.ms": "100"}
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def logkeeper_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("peer-worker")
    (root / "topics").mkdir()
    (root / "settings.yaml").write_text(SETTINGS + CLIENT_TOPIC_PREFIXES, encoding="utf-8")
    declare(root, *(topic(name, count, dict(config)) for name, (count, config) in TOPICS.items()))
    served = Served(root, "--kafka-port", "0")
    yield served
    assert served.terminate() == 0, served.log_text()


class RestartableWorker:
    """A worker of its own (not the session's) at a fixed Kafka port, so that one restarted
    (cleanly or after a SIGKILL) is found at the address a running application bootstraps
    from. Client topics allowed as on the session's worker."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "topics").mkdir(parents=True)
        (root / "settings.yaml").write_text(SETTINGS + CLIENT_TOPIC_PREFIXES, encoding="utf-8")
        declare(root)
        self.port = free_port()
        self.served = Served(root, "--kafka-port", str(self.port))

    @property
    def address(self) -> str:
        return self.served.kafka_address

    def restart(self, *, kill: bool = False) -> None:
        if kill:
            self.served.kill()
        else:
            assert self.served.terminate() == 0, self.served.log_text()
        address = self.address
        self.served = Served(self.root, "--kafka-port", str(self.port))
        assert self.address == address


@pytest.fixture
def restartable_worker(tmp_path: Path) -> Iterator[RestartableWorker]:
    missing = maven.missing_tools()
    if missing:
        pytest.skip(f"Kafka's applications need {', '.join(missing)} on PATH")
    worker = RestartableWorker(tmp_path / "restartable-worker")
    try:
        yield worker
    finally:
        assert worker.served.terminate() == 0, worker.served.log_text()


@pytest.fixture(scope="session")
def peers(kafka_broker: KafkaBroker, logkeeper_worker: Served) -> Peers:
    return Peers(kafka_broker.address, logkeeper_worker.kafka_address)
