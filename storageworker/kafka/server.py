"""The asyncio listener of the ``kafka`` port.

One task per connection reads size-prefixed requests, answers each in order (Kafka's rule: one
in flight per connection; a Produce answer may wait for the next Produce's, already read, so that
both go in one write: :mod:`.framing`), and closes the connection on anything it cannot decode,
logging the client address. Log I/O runs in worker threads so that one slow disk read never
stalls the other connections; group requests wait on the event loop without blocking anyone.

Limits (:class:`ListenerSettings`): ``max_connections`` (a connection beyond it is closed at
once), ``max_request_bytes`` (a larger declared size closes the connection before reading it),
``request_timeout_ms`` (a request must arrive whole, and a response must be taken by the
client, within it), ``idle_timeout_ms`` (a silent connection is closed, Kafka's
``connections.max.idle.ms``). Security: TLS from certificate files, SASL (PLAIN, SCRAM) from a
users file; without either the listener only binds a loopback address unless
``allow_plaintext`` says otherwise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

from storagecore.config import TopicPartition
from storagecore.errors import (
    UnknownTopicOrPartitionError,
)
from storagecore.records.file_records import FileRegion
from storageworker.kafka import admin_topics, apis, messages
from storageworker.kafka.broker import WorkerBroker
from storageworker.kafka.counters import Histogram, KafkaCounters
from storageworker.kafka.deadline import ReadDeadline
from storageworker.kafka.framing import HeldAnswers, IncomingFrames
from storageworker.kafka.groups import GroupCoordinator
from storageworker.kafka.listener_settings import ListenerSettings
from storageworker.kafka.offset_records import OFFSETS_TOPIC
from storageworker.kafka.sasl import AuthenticationError, Authenticator
from storageworker.kafka.schema import decode, encode
from storageworker.kafka.transaction_coordinator import TransactionCoordinator
from storageworker.kafka.transaction_state import TRANSACTION_STATE_TOPIC
from storageworker.kafka.wire import ProtocolError, Reader, Writer
from storageworker.worker import Worker

logger = logging.getLogger(__name__)

_ALWAYS_ALLOWED: Final = frozenset({18, 17, 36})
#: API key → the transaction coordinator's method serving it.
_TRANSACTION_APIS: Final = {
    22: "init_producer_id",
    24: "add_partitions",
    25: "add_offsets",
    26: "end_txn",
    28: "txn_offset_commit",
}  # ApiVersions, SaslHandshake, SaslAuthenticate
#: A Produce request holding at most this many bytes of records is appended on the event loop's
#: own thread; a larger one in a worker thread. The append writes to the page cache (no fsync,
#: Kafka's default too), tens of microseconds for the Java producer's 16 KiB batches, while the
#: hand-off to a thread and back cost about 2 ms per request: the loop thread, back from a
#: send() or a select(), waited for the GIL that the append's thread held (Python's 5 ms switch
#: interval), as py-spy showed under Kafka's ProducerPerformance (benchmarks/bench_broker.py).
#: An append that rolls the active segment does not wait for the old segment's fsync nor for
#: the new producer snapshot's: the worker's LogManager runs them on its flush thread
#: (``background_roll_flush``, storagecore/roll_flush.py), and the recovery point moves after.
INLINE_PRODUCE_BYTES_MAX: Final = 1 << 20


class KafkaServer:
    """Serves :class:`WorkerBroker` from a thread with its own event loop."""

    def __init__(self, worker: Worker, settings: ListenerSettings) -> None:
        settings.check()
        self.worker = worker
        self.settings = settings
        self.ssl = settings.ssl_context()
        self.counters = KafkaCounters()
        self.broker: WorkerBroker | None = None
        self.groups: GroupCoordinator | None = None
        self.transactions: TransactionCoordinator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        #: Set by the next append, then replaced (see :func:`apis.fetch`); loop thread only.
        self._appended: asyncio.Event | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._txn_timer: asyncio.Task[None] | None = None
        self.port = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="logkeeper-kafka", daemon=True)
        self._thread.start()
        if not self._ready.wait(120):
            raise RuntimeError("the Kafka listener did not start")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        loop.run_forever()
        loop.close()

    async def _listen(self) -> None:
        settings = self.settings
        self._appended = asyncio.Event()
        self._server = await asyncio.start_server(
            self._connection, settings.host, settings.port, limit=1 << 20, ssl=self.ssl
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        advertised = settings.advertised_host or (
            socket.gethostname() if settings.host in ("0.0.0.0", "::", "") else settings.host
        )
        broker = WorkerBroker(self.worker, advertised, self.port)
        broker.counters = self.counters
        loop = asyncio.get_running_loop()
        loop_thread = threading.current_thread()

        def on_append() -> None:  # called from the thread that appended
            if threading.current_thread() is loop_thread:
                self._notify_append()
            else:
                loop.call_soon_threadsafe(self._notify_append)

        broker.on_append = on_append
        self.broker = broker

        async def append(tp: TopicPartition, records: bytes) -> Any:
            return await asyncio.to_thread(broker.append, tp, records)

        self.groups = GroupCoordinator(append, settings.offsets_topic_partitions)

        async def write(tp: TopicPartition, records: bytes, coordinator: bool) -> int:
            return await asyncio.to_thread(broker.write, tp, records, coordinator)

        self.transactions = broker.transactions = TransactionCoordinator(
            write,
            broker.partitions,
            broker.next_producer_id,
            self.groups,
            settings.transaction_state_partitions,
            lambda: int(time.time() * 1000),
            max_timeout_ms=settings.transaction_max_timeout_ms,
        )
        await asyncio.to_thread(self._load_offsets)
        await self.transactions.complete_pending()
        self.worker.transactions_status = self.transactions.status
        self._expiry = loop.create_task(self._expire_sessions())
        self._txn_timer = loop.create_task(self._abort_transactions())
        self._ready.set()

    def _next_append(self) -> asyncio.Event:
        assert self._appended is not None
        return self._appended

    def _notify_append(self) -> None:
        """Wake every fetch waiting for data: set this event, later waits take a new one."""
        assert self._appended is not None
        done, self._appended = self._appended, asyncio.Event()
        done.set()

    def _load_offsets(self) -> None:
        """Read ``__consumer_offsets`` and ``__transaction_state`` back into the
        coordinators' memory."""
        assert self.groups is not None and self.transactions is not None
        settings = self.settings
        records = self._load(OFFSETS_TOPIC, settings.offsets_topic_partitions, self.groups.load)
        logger.info("Loaded %d committed offsets from %s", records, OFFSETS_TOPIC)
        records = self._load(
            TRANSACTION_STATE_TOPIC, settings.transaction_state_partitions, self.transactions.load
        )
        logger.info("Loaded %d transaction states from %s", records, TRANSACTION_STATE_TOPIC)

    def _load(
        self, topic: str, partitions: int, apply: Callable[[bytes, TopicPartition], int]
    ) -> int:
        assert self.broker is not None
        records = 0
        for partition in range(partitions):
            tp = TopicPartition(topic, partition)
            try:
                log = self.broker.log_of(tp)
            except UnknownTopicOrPartitionError:
                continue
            offset = log.log_start_offset
            while offset < log.high_watermark:
                result = log.read(offset, 4 << 20)
                if result.next_offset <= offset:
                    break
                records += apply(result.records, tp)
                offset = result.next_offset
        return records

    async def _abort_transactions(self) -> None:
        """Abort timed-out transactions every ``transaction_abort_interval_ms`` (Kafka's
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms``)."""
        interval_s = self.settings.transaction_abort_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            assert self.transactions is not None
            try:
                await self.transactions.abort_expired()
            except Exception:
                logger.exception("The transaction timeout check failed; retried next round")

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            assert self.groups is not None
            self.groups.expire_sessions()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or not loop.is_running():
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
        counters, settings = self.counters, self.settings
        if counters.open_connections >= settings.max_connections:
            counters.refused_connections += 1
            logger.warning(
                "Kafka connection from %s refused: %d open", peer, settings.max_connections
            )
            writer.close()
            return
        counters.connections += 1
        counters.open_connections += 1
        set_send_buffer(writer.get_extra_info("socket"), settings.socket_send_buffer_bytes)
        session = _Session(peer, authenticated=settings.sasl_users is None)
        request_timeout_s = settings.request_timeout_ms / 1000
        idle_timeout_s = settings.idle_timeout_ms / 1000
        # Neither wait_for (a task per read: a tenth of the loop's time under the Java
        # producer) nor asyncio.timeout (two timer handles per request): one timer per
        # connection, and each read sets its deadline (deadline.py).
        deadline = ReadDeadline(
            asyncio.get_running_loop(),
            asyncio.current_task(),
            min(request_timeout_s, idle_timeout_s),
        )
        frames, held = IncomingFrames(reader), HeldAnswers()
        try:
            while True:
                if not frames.buffered(4):
                    await self._write_held(writer, held)  # never held while waiting
                    deadline.arm(idle_timeout_s)
                    if not await frames.fill(4):
                        return  # the client closed the connection
                    deadline.disarm()
                size = frames.next_size()
                if size > settings.max_request_bytes or size < 8:
                    counters.malformed_requests += 1
                    logger.warning("Kafka request from %s of %d bytes refused", peer, size)
                    return
                if not frames.buffered(4 + size):
                    await self._write_held(writer, held)
                    deadline.arm(request_timeout_s)
                    if not await frames.fill(4 + size):
                        return  # closed in the middle of a request
                    deadline.disarm()
                payload = frames.take(size)
                counters.bytes_in += size + 4
                response = await self._answer(payload, session)
                if response is None:
                    pass
                elif held.may_hold(payload, response, frames):
                    counters.bytes_out += held.hold(response)
                else:
                    counters.bytes_out += await self._send(writer, response, held.take())
                if session.close_after:
                    return
        except TimeoutError:
            counters.timed_out_connections += 1
            logger.info("Kafka connection from %s closed: timed out", peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            if deadline.expired:  # a read's deadline passed: the deadline cancelled the task
                counters.timed_out_connections += 1
                logger.info("Kafka connection from %s closed: timed out", peer)
                return
            # The listener is stopping (stop() cancels every task): the connection ends here
            # and is closed below. The handler returns instead of ending cancelled, which
            # asyncio's stream callback would log as an error with a traceback, one per
            # connection still open at SIGTERM.
            logger.debug("Kafka connection from %s closed: the listener is stopping", peer)
            return
        except ProtocolError as exc:
            counters.malformed_requests += 1
            logger.warning("Malformed Kafka request from %s: %s", peer, exc)
        finally:
            deadline.close()
            counters.open_connections -= 1
            held.write_to(writer)  # answers to requests served: sent before the close
            writer.close()

    async def _write_held(self, writer: asyncio.StreamWriter, held: HeldAnswers) -> None:
        """Write the held answers, drained (as :meth:`_send` does) when the kernel did not
        take them all: a client that sends and never reads is still timed out."""
        if not held.count:
            return
        held.write_to(writer)
        if writer.transport.get_write_buffer_size():
            async with asyncio.timeout(self.settings.request_timeout_ms / 1000):
                await writer.drain()

    async def _send(self, writer: asyncio.StreamWriter, response: Writer, held: list[bytes]) -> int:
        """Write a framed response after the ``held`` ones (bytes of earlier framed answers);
        a client that does not take all of it within ``request_timeout_ms`` is dropped.

        File regions (fetched records) go with ``loop.sendfile``: ``os.sendfile`` from the
        segment file to the socket on plaintext connections (zero copy, as Kafka's
        ``FileRecords.writeTo``), a read-and-write fallback on TLS ones.
        """
        parts = response.parts
        chunks = [part for part in parts if not isinstance(part, FileRegion)]
        if len(chunks) == len(parts):
            # The common case (every answer but a large Fetch's): one write, and a drain (with
            # its timer) only when the kernel did not take it all (an asyncio.timeout costs
            # 8-10 us, from a micro run of two per request: 17-20 us).
            writer.write(b"".join([*held, response.size.to_bytes(4, "big"), *chunks]))
            if writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.settings.request_timeout_ms / 1000):
                    await writer.drain()
            return response.size + 4
        timeout_s = self.settings.request_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        tls = writer.get_extra_info("sslcontext") is not None
        pending: list[bytes] = [*held, response.size.to_bytes(4, "big")]
        try:
            async with asyncio.timeout(timeout_s):  # the whole response, one timer
                for part in response.parts:
                    if not isinstance(part, FileRegion):
                        pending.append(part)
                        continue
                    writer.write(b"".join(pending))
                    pending.clear()
                    await writer.drain()
                    with open(part.fd, "rb", closefd=False) as file:
                        sent = await loop.sendfile(
                            writer.transport, file, part.position, part.size_bytes
                        )
                    if sent != part.size_bytes:  # the frame is broken: only closing is left
                        raise ConnectionError(f"sendfile sent {sent} of {part.size_bytes} bytes")
                    if not tls:
                        self.counters.bytes_out_zero_copy += sent
                writer.write(b"".join(pending))
                await writer.drain()
        finally:
            response.close()
        return response.size + 4

    async def _answer(self, payload: bytes, session: _Session) -> Writer | None:
        body = Reader(payload)
        api_key, version, correlation_id = body.int16(), body.int16(), body.int32()
        message = messages.MESSAGES.get(api_key)
        if message is None:
            raise ProtocolError(f"unsupported API key {api_key}")
        name = message.name
        if api_key == messages.API_VERSIONS.api_key and version not in message.versions:
            # Kafka answers any ApiVersions version, newer ones in v0 (KIP-511).
            answer = apis.api_versions(version, apis.SUPPORTED)
            return self._frame(correlation_id, message.response, answer, version=0)
        if version not in message.versions:
            raise ProtocolError(
                f"{name} v{version} is not supported ({message.versions.low}-"
                f"{message.versions.high})"
            )
        if not session.authenticated and api_key not in _ALWAYS_ALLOWED:
            raise ProtocolError(f"{name} before SASL authentication")
        flexible = message.is_flexible(version)
        client_id = body.nullable_string()
        if flexible:
            decode((), body, version, True)  # the request header's tagged fields
        data = decode(message.request, body, version, flexible)
        request = apis.Request(api_key, version, correlation_id, client_id, data)
        key = (name, version)
        self.counters.requests[key] = self.counters.requests.get(key, 0) + 1
        started = time.monotonic()
        result = await self._dispatch(request, session)
        histogram = self.counters.latency.get(name)
        if histogram is None:
            histogram = self.counters.latency[name] = Histogram()
        histogram.observe(time.monotonic() - started)
        if result is None:
            return None
        for code in _error_codes(result):
            if code:
                error_key = (name, int(code))
                self.counters.errors[error_key] = self.counters.errors.get(error_key, 0) + 1
        return self._frame(
            correlation_id,
            message.response,
            result,
            version=version,
            flexible=flexible,
            header_flexible=message.response_header_version(version) == 1,
        )

    @staticmethod
    def _frame(
        correlation_id: int,
        fields: Any,
        result: dict[str, Any],
        *,
        version: int,
        flexible: bool = False,
        header_flexible: bool = False,
    ) -> Writer:
        out = Writer().int32(correlation_id)
        if header_flexible:
            out.tagged_fields()
        return encode(fields, out, version, flexible, result)

    async def _dispatch(self, request: apis.Request, session: _Session) -> dict[str, Any] | None:
        broker, groups = self.broker, self.groups
        assert broker is not None and groups is not None
        key, data = request.api_key, request.data
        if key == 0:
            if _records_bytes(data) <= INLINE_PRODUCE_BYTES_MAX:
                result, _ = apis.produce(request, broker)
            else:
                result, _ = await asyncio.to_thread(apis.produce, request, broker)
            return result
        if key == 1:
            response, _ = await apis.fetch(
                request, broker, asyncio.to_thread, self._next_append, zero_copy=True
            )
            return response
        if key == 18:
            return apis.api_versions(request.version, apis.SUPPORTED)
        if key == 3:
            return apis.metadata(request, broker)
        if key == 2:
            return await asyncio.to_thread(apis.list_offsets, request, broker)
        if key == 8:
            return await groups.commit(data, broker.partitions(), int(time.time() * 1000))
        if key == 9:
            return groups.fetch_offsets(data)
        if key == 10:
            return apis.find_coordinator(request, broker)
        if key == 11:
            return await groups.join(data, request.client_id or "", request.version)
        if key == 12:
            return groups.heartbeat(data)
        if key == 13:
            return groups.leave(data, request.version)
        if key == 14:
            return await groups.sync(data)
        if key == 21:
            return await asyncio.to_thread(apis.delete_records, request, broker)
        if key == 22 and data["transactional_id"] is None:
            return apis.init_producer_id(request, broker)
        if key in _TRANSACTION_APIS:
            assert self.transactions is not None
            serve: Callable[[dict[str, Any], int], Awaitable[dict[str, Any]]] = getattr(
                self.transactions, _TRANSACTION_APIS[key]
            )
            return await serve(data, request.version)
        if key in admin_topics.API_KEYS:
            return await asyncio.to_thread(
                admin_topics.handle, request, broker.topic_admin, broker.node_id
            )
        if key == 32:
            return apis.describe_configs(request, broker)
        if key == 17:
            return self._sasl_handshake(data, session)
        assert key == 36, key
        return self._sasl_authenticate(data, session)

    def _sasl_handshake(self, data: dict[str, Any], session: _Session) -> dict[str, Any]:
        mechanisms = list(self.settings.sasl_mechanisms) if self.settings.sasl_users else []
        if self.settings.sasl_users is None or session.authenticated:
            return {"error_code": apis.ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": mechanisms}
        if data["mechanism"] not in mechanisms:
            return {
                "error_code": apis.ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                "mechanisms": mechanisms,
            }
        session.authenticator = Authenticator(data["mechanism"], self.settings.sasl_users)
        return {"error_code": apis.ErrorCode.NONE, "mechanisms": mechanisms}

    def _sasl_authenticate(self, data: dict[str, Any], session: _Session) -> dict[str, Any]:
        authenticator = session.authenticator
        if authenticator is None or session.authenticated:
            session.close_after = True
            return {
                "error_code": apis.ErrorCode.ILLEGAL_SASL_STATE,
                "error_message": "SaslAuthenticate without a SaslHandshake",
            }
        try:
            answer = authenticator.step(data["auth_bytes"])
        except AuthenticationError as exc:
            self.counters.failed_authentications += 1
            logger.warning(
                "Kafka client %s failed %s authentication: %s",
                session.peer,
                authenticator.mechanism,
                exc,
            )
            session.close_after = True
            return {
                "error_code": apis.ErrorCode.SASL_AUTHENTICATION_FAILED,
                "error_message": str(exc),
            }
        if authenticator.complete:
            session.authenticated = True
            logger.info(
                "Kafka client %s authenticated as %s (%s)",
                session.peer,
                authenticator.user,
                authenticator.mechanism,
            )
        return {"error_code": apis.ErrorCode.NONE, "auth_bytes": answer}


@dataclasses.dataclass
class _Session:
    peer: Any
    authenticated: bool
    authenticator: Authenticator | None = None
    close_after: bool = False


def set_send_buffer(sock: Any, size_bytes: int) -> None:
    """Kafka's ``socket.send.buffer.bytes`` on an accepted connection (its Acceptor sets it
    the same way); -1 leaves the kernel's size."""
    if size_bytes != -1:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size_bytes)


def _records_bytes(data: dict[str, Any]) -> int:
    """The bytes of records in a decoded Produce request."""
    return sum(
        len(item["records"] or b"")
        for topic in data["topic_data"]
        for item in topic["partition_data"]
    )


def _error_codes(value: Any) -> Iterator[int]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "error_code":
                yield int(item)
            elif isinstance(item, (dict, list)):
                yield from _error_codes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _error_codes(item)


__all__ = ["KafkaCounters", "KafkaServer", "ListenerSettings", "WorkerBroker"]
