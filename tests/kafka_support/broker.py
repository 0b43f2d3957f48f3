"""Apache Kafka's broker as a test peer: one KRaft node (broker and controller) on loopback.

:class:`KafkaBroker` writes a ``server.properties`` with two free loopback ports, formats the
log dir with Kafka's ``StorageTool`` and a generated cluster id, starts ``kafka.Kafka`` from
the jars of ``pom.xml`` (:mod:`.maven`) and waits until the port answers Metadata naming the
broker. ``stop()`` sends SIGTERM and waits for the JVM (a controlled shutdown), killing it only
if it does not exit in time; ``kill()`` sends SIGKILL (a crash). ``start()`` again restarts the
broker over the same log dir (formatted only the first time), as the restart tests need. The
broker's own log goes to ``broker.log`` in its directory.

The settings differ from Kafka's defaults only where a single test node needs it, each said
below next to the key. One broker serves a whole test session (tests/integration/peer): start
up costs a few seconds of a JVM, so tests share it and keep apart by topic and group names.
"""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
import uuid
from pathlib import Path
from typing import IO

from tests.kafka_support import maven
from tests.kafka_support.raw_client import RawClient

#: The JVM of the broker: small heap, quick start (it serves tests, not load).
JAVA_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: The JVM options of Kafka's own ``kafka-server-start.sh`` (KAFKA_HEAP_OPTS and
#: KAFKA_JVM_PERFORMANCE_OPTS of ``kafka-run-class.sh``): the broker as it runs in production,
#: for benchmarks (the test options above stop the JIT at C1, which a benchmark must not).
PRODUCTION_JAVA_OPTIONS = (
    "-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
)  # fmt: skip
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


class BrokerError(RuntimeError):
    """The broker did not format, start or answer; the message carries its log's tail."""


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's pick for port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_id() -> str:
    """A new cluster id in Kafka's form: 16 random bytes, URL-safe base64 without padding
    (Kafka never hands out one that starts with a dash: it would read as a command option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


class KafkaBroker:
    """One ``kafka.Kafka`` process over ``root`` (which must be empty or absent)."""

    node_id = 1

    def __init__(
        self,
        root: Path,
        extra: dict[str, str] | None = None,
        java_options: tuple[str, ...] = JAVA_OPTIONS,
    ) -> None:
        self.root = root
        self.java_options = java_options
        #: Settings added to (or replacing) those of :meth:`properties`.
        self.extra = dict(extra or {})
        self.port = free_port()
        self.controller_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cluster_id = cluster_id()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    def properties(self) -> str:
        listeners = (
            f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        )
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # One node: the internal topics cannot have three replicas.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # The worker's default for __consumer_offsets (Kafka's is 50): the same group
            # lands on the same partition on both, and the topic is created faster.
            "offsets.topic.num.partitions": "10",
            # The worker never creates a topic because a client asked for its metadata
            # (topics come from Topic resources); Kafka's default (true) would.
            "auto.create.topics.enable": "false",
            # The worker completes a group's first join as soon as every member is in;
            # Kafka waits 3 s for more members by default.
            "group.initial.rebalance.delay.ms": "0",
        }
        settings.update(self.extra)
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    @property
    def config_path(self) -> Path:
        return self.root / "server.properties"

    def start(self) -> None:
        """Format the log dir (first start only: a restart keeps the broker's data) and run
        the broker until it answers Metadata."""
        jars = maven.classpath()
        if not self.config_path.is_file():
            self.root.mkdir(parents=True, exist_ok=True)
            self.config_path.write_text(self.properties(), encoding="utf-8")
            maven.run(
                [
                    "java", "-cp", jars, "kafka.tools.StorageTool", "format",
                    "--cluster-id", self.cluster_id, "--config", str(self.config_path),
                ],
                "kafka.tools.StorageTool format",
                timeout_s=120,
            )  # fmt: skip
        config = self.config_path
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed by stop)
        self.process = subprocess.Popen(
            [
                "java", *self.java_options, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", jars, "kafka.Kafka", str(config),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._wait_until_serving()

    def _wait_until_serving(self) -> None:
        """Until Metadata over the client port names this broker; the process ending (or the
        time running out) raises BrokerError with the log's tail."""
        assert self.process is not None
        waited_s, step_s = 0.0, 0.1
        while waited_s < START_TIMEOUT_S:
            if self._answers_metadata():
                return
            try:
                code = self.process.wait(step_s)  # the pause between tries: the JVM exiting
            except subprocess.TimeoutExpired:
                waited_s += step_s
                continue
            raise BrokerError(f"the Kafka broker exited with {code}:\n{self.log_tail()}")
        raise BrokerError(
            f"the Kafka broker did not answer Metadata on {self.address} within "
            f"{START_TIMEOUT_S:.0f} s:\n{self.log_tail()}"
        )

    def _answers_metadata(self) -> bool:
        try:
            with RawClient(self.address, timeout_s=5) as client:
                answer = client.call(3, 12, {"topics": [], "allow_auto_topic_creation": False})
        except OSError:
            return False
        return any(b["node_id"] == self.node_id for b in answer["brokers"])

    def log_tail(self, size: int = 6000) -> str:
        if self._log is not None:
            self._log.flush()
        if not self.log_path.is_file():
            return "(no broker log)"
        return self.log_path.read_bytes()[-size:].decode("utf-8", "replace")

    def kill(self) -> None:
        """SIGKILL: the broker ends without its shutdown (no snapshots, no clean-shutdown
        marker), as after a crash; ``start()`` then recovers the log dir."""
        process = self.process
        if process is None:
            return
        process.kill()
        process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None

    def stop(self) -> int:
        """SIGTERM (Kafka's controlled shutdown), then the exit code; killed after
        STOP_TIMEOUT_S."""
        process = self.process
        if process is None:
            return 0
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        self.process = None
        return int(process.returncode)
