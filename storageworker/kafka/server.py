"""The asyncio listener of the ``kafka`` port.

One task per connection reads size-prefixed requests, answers each in order (Kafka's rule: one
in flight per connection), and closes the connection on anything it cannot decode, logging the
client address. Limits: ``max_connections`` (a connection beyond it is closed at once) and
``max_request_bytes`` (a larger declared size closes the connection before reading it). Log I/O
runs in worker threads so that one slow disk read never stalls the other connections.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from storagecore.config import TopicPartition
from storagecore.errors import UnknownTopicOrPartitionError
from storagecore.log import FetchResult
from storageworker.kafka import apis
from storageworker.kafka.wire import ProtocolError, Reader, Writer, frame, frame_size
from storageworker.worker import Worker

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES: Final = 100 * 1024 * 1024
MAX_CONNECTIONS: Final = 1000


@dataclasses.dataclass
class KafkaCounters:
    """Monotonic counters for the worker's metrics."""

    connections: int = 0
    open_connections: int = 0
    requests: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    refused_connections: int = 0
    malformed_requests: int = 0


class WorkerBroker:
    """The worker as a single-node Kafka cluster that leads every partition it holds."""

    def __init__(self, worker: Worker, host: str, port: int, node_id: int = 0) -> None:
        self.worker = worker
        self.host = host
        self.port = port
        self.node_id = node_id
        self.cluster_id = "logkeeper"

    def partitions(self) -> dict[str, int]:
        manager = self.worker.log_manager
        if manager is None:
            return {}
        logs = manager.logs
        result: dict[str, int] = {}
        for name, spec in self.worker.topics.items():
            count = 0
            while TopicPartition(name, count) in logs and count < spec.partitions:
                count += 1
            if count:
                result[name] = count
        return result

    def _log(self, tp: TopicPartition) -> Any:
        manager = self.worker.log_manager
        log = manager.find_log(tp) if manager is not None else None
        if log is None:
            raise UnknownTopicOrPartitionError(f"{tp} is not on this worker")
        return log

    def append(self, tp: TopicPartition, records: bytes) -> tuple[int, int, int]:
        info = self._log(tp).append(records)
        return info.first_offset, info.log_append_time, info.log_start_offset

    def read(self, tp: TopicPartition, offset: int, max_bytes: int) -> FetchResult:
        result: FetchResult = self._log(tp).read(offset, max_bytes)
        return result

    def list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        log = self._log(tp)
        if timestamp == apis.EARLIEST_TIMESTAMP:
            return -1, int(log.log_start_offset)
        if timestamp == apis.LATEST_TIMESTAMP:
            return -1, int(log.log_end_offset)
        found = log.offset_for_timestamp(timestamp)
        return (-1, -1) if found is None else (int(found.timestamp), int(found.offset))


class KafkaServer:
    """Serves :class:`WorkerBroker` on ``host:port`` from a thread with its own event loop."""

    def __init__(
        self,
        worker: Worker,
        host: str,
        port: int,
        *,
        max_connections: int = MAX_CONNECTIONS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.worker = worker
        self.host = host
        self.requested_port = port
        self.max_connections = max_connections
        self.max_request_bytes = max_request_bytes
        self.counters = KafkaCounters()
        self.broker: WorkerBroker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="logkeeper-kafka", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the Kafka listener did not start")

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def listen() -> None:
            self._server = await asyncio.start_server(
                self._connection, self.host, self.requested_port, limit=1 << 20
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
            self.broker = WorkerBroker(self.worker, self.host, self.port)
            self._ready.set()

        loop.run_until_complete(listen())
        loop.run_forever()
        loop.close()

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # -- one connection --------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        counters = self.counters
        if counters.open_connections >= self.max_connections:
            counters.refused_connections += 1
            logger.warning("Kafka connection from %s refused: %d open", peer, self.max_connections)
            writer.close()
            return
        counters.connections += 1
        counters.open_connections += 1
        try:
            while True:
                try:
                    header = await reader.readexactly(4)
                except asyncio.IncompleteReadError:
                    return  # the client closed the connection
                size = frame_size(header)
                if size > self.max_request_bytes or size < 8:
                    counters.malformed_requests += 1
                    logger.warning("Kafka request from %s of %d bytes refused", peer, size)
                    return
                payload = await reader.readexactly(size)
                counters.bytes_in += size + 4
                response = await self._answer(payload, peer)
                if response is not None:
                    writer.write(response)
                    counters.bytes_out += len(response)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except ProtocolError as exc:
            counters.malformed_requests += 1
            logger.warning("Malformed Kafka request from %s: %s", peer, exc)
        finally:
            counters.open_connections -= 1
            writer.close()

    async def _answer(self, payload: bytes, peer: Any) -> bytes | None:
        body = Reader(payload)
        api_key, version, correlation_id = body.int16(), body.int16(), body.int32()
        try:
            key = apis.ApiKey(api_key)
        except ValueError:
            raise ProtocolError(f"unsupported API key {api_key}") from None
        low, high = apis.SUPPORTED[key]
        if key is not apis.ApiKey.API_VERSIONS and not low <= version <= high:
            raise ProtocolError(f"{key.name} v{version} is not supported ({low}-{high})")
        client_id = body.nullable_string()
        request = apis.Request(api_key, version, correlation_id, client_id, body)
        name = key.name
        self.counters.requests[(name, version)] = self.counters.requests.get((name, version), 0) + 1
        broker = self.broker
        assert broker is not None

        def run(function: Callable[[], Any]) -> Any:
            return asyncio.to_thread(function)

        result: bytes | None
        if key is apis.ApiKey.API_VERSIONS:
            result = apis.api_versions(request)
        elif key is apis.ApiKey.METADATA:
            result = apis.metadata(request, broker)
        elif key is apis.ApiKey.PRODUCE:
            result, _ = await run(lambda: apis.produce(request, broker))
        elif key is apis.ApiKey.FETCH:
            result, _ = await apis.fetch(request, broker, run)
        else:
            result = await run(lambda: apis.list_offsets(request, broker))
        if result is None:
            return None
        return frame(Writer().int32(correlation_id).bytes() + result)
