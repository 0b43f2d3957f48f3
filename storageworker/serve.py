"""``logkeeper serve``: the worker as a process, until SIGTERM.

Order: read the settings and the topic set (a broken settings file stops here, exit 2) →
start the HTTP port (``/healthz`` answers, ``/readyz`` says 503 while loading) → load every
log and apply the topic set → ready → run until SIGTERM or SIGINT → stop new work, abort
running cleans, flush, write checkpoints and the clean-shutdown marker, exit 0. If the
shutdown does not finish within ``worker.shutdownGracePeriodMs`` the process exits 1 without
the marker, and the next start recovers (nothing flushed is lost either way).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from storagecore.clock import Clock
from storagecore.errors import StorageError
from storageworker import logs
from storageworker.http import AdminServer, read_token
from storageworker.kafka.broker import offsets_topic_spec
from storageworker.kafka.listener_settings import ListenerSettings
from storageworker.kafka.metrics import KafkaCollector
from storageworker.kafka.offset_records import OFFSETS_TOPIC
from storageworker.kafka.server import KafkaServer
from storageworker.kafka.transaction_state import TRANSACTION_STATE_TOPIC
from storageworker.settings import WorkerSettings
from storageworker.worker import Worker

logger = logging.getLogger(__name__)

#: How often the main thread wakes to run signal handlers that another thread received.
SIGNAL_CHECK_S = 0.2


def serve(
    data_dirs: Sequence[Path],
    topics_path: Path,
    settings_path: Path | None = None,
    *,
    http_host: str = "127.0.0.1",
    http_port: int = 8080,
    kafka: ListenerSettings | None = None,
    log_level: str = "INFO",
    clock: Clock | None = None,
) -> int:
    try:
        internal = (
            {
                OFFSETS_TOPIC: offsets_topic_spec(kafka.offsets_topic_partitions),
                TRANSACTION_STATE_TOPIC: offsets_topic_spec(
                    kafka.transaction_state_partitions, TRANSACTION_STATE_TOPIC
                ),
            }
            if kafka
            else {}
        )
        worker = Worker(
            data_dirs, topics_path, settings_path, clock=clock, internal_topics=internal
        )
        token = read_token(worker.settings.admin_token_file)
    except StorageError as exc:
        print(f"logkeeper serve: error: {exc}", file=sys.stderr)
        return 2

    def dir_of(tp: object) -> Path | None:
        manager = worker.log_manager
        log = manager.find_log(tp) if manager is not None else None  # type: ignore[arg-type]
        return log.parent_dir if log is not None else None

    logs.configure(worker.settings.log_format, log_level, dir_of)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logger.info("Received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server = AdminServer(worker, http_host, http_port, token)
    except OSError as exc:
        print(
            f"logkeeper serve: error: cannot listen on {http_host}:{http_port}: {exc}",
            file=sys.stderr,
        )
        return 2
    server.start()

    def settings_changed(old: WorkerSettings, new: WorkerSettings) -> None:
        if new.log_format != old.log_format:
            logs.configure(new.log_format, log_level, dir_of)
        if new.admin_token_file != old.admin_token_file:
            server.token = read_token(new.admin_token_file)

    worker.settings_listeners.append(settings_changed)
    print(f"logkeeper serve: listening on http://{http_host}:{server.port}", flush=True)
    try:
        worker.start()
    except StorageError as exc:
        logger.error("Cannot start: %s", exc)
        server.stop()
        return 2
    listener = None
    if kafka is not None:
        try:
            listener = KafkaServer(worker, kafka)
            listener.start()
        except (StorageError, OSError, RuntimeError) as exc:
            logger.error(
                "Cannot start the Kafka listener on %s:%d: %s", kafka.host, kafka.port, exc
            )
            worker.shutdown()
            server.stop()
            return 2
        server.registry.register(KafkaCollector(listener.counters, lambda: listener.transactions))
        print(f"logkeeper serve: kafka on {kafka.host}:{listener.port}", flush=True)
    print("logkeeper serve: ready", flush=True)
    # Woken at least every SIGNAL_CHECK_S: a signal that the kernel hands to another thread
    # (the event loop's, the scheduler's) only sets a flag, and Python runs the handler in the
    # main thread once it runs again; a wait without a timeout never returns then, and the
    # worker ignored that SIGTERM for good (seen under load: a test's stop timed out).
    while not stop.wait(SIGNAL_CHECK_S):
        pass
    if listener is not None:
        listener.stop()
    grace_s = worker.settings.shutdown_grace_period_ms / 1000
    done = threading.Thread(target=worker.shutdown, name="logkeeper-shutdown", daemon=True)
    done.start()
    done.join(grace_s)
    server.stop()
    if done.is_alive():
        logger.error("Shutdown did not finish within %.1f s; exiting without the marker", grace_s)
        logging.shutdown()
        os._exit(1)
    print("logkeeper serve: stopped", flush=True)
    return 0
