"""``logkeeper serve`` (the per-volume worker) and ``logkeeper operator`` (the kopf operator):
the long-running processes. storageworker and storageoperator are imported only inside the
handlers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the per-volume worker over local directories until SIGTERM",
        description=(
            "Loads every log of the data directories (recovery as needed), creates the "
            "declared partitions, and runs retention, the cleaner threads, flushes, "
            "checkpoints and delayed deletes on their intervals. The topic set and the "
            "settings are re-read while running; a broken file keeps the last good one. "
            "HTTP: /healthz /readyz /metrics /v1/status and admin POSTs."
        ),
    )
    p.add_argument(
        "--data-dir",
        action="append",
        required=True,
        type=Path,
        help="a log directory of the volume (repeatable)",
    )
    p.add_argument(
        "--topics",
        required=True,
        type=Path,
        help="a YAML file of Topic manifests, or a directory of them (a mounted ConfigMap)",
    )
    p.add_argument(
        "--settings", type=Path, help="volume settings: a StorageVolume manifest or its spec"
    )
    p.add_argument("--http-port", type=int, default=8080, help="HTTP port (default 8080; 0: any)")
    p.add_argument(
        "--kafka-port",
        type=int,
        default=None,
        help="Kafka protocol port (e.g. 9092; 0: any; default: no Kafka listener)",
    )
    p.add_argument(
        "--kafka-host",
        default=None,
        help="address of the Kafka listener (default: --http-host)",
    )
    p.add_argument(
        "--kafka-advertised-host",
        default=None,
        help="host name clients are told to connect to (default: the listen address)",
    )
    p.add_argument("--kafka-tls-cert", type=Path, help="PEM certificate chain: serve TLS")
    p.add_argument("--kafka-tls-key", type=Path, help="PEM private key of --kafka-tls-cert")
    p.add_argument(
        "--kafka-tls-client-ca", type=Path, help="PEM CA: require client certificates (mTLS)"
    )
    p.add_argument(
        "--kafka-sasl-users",
        type=Path,
        help="YAML/JSON mapping of user name to password: require SASL authentication",
    )
    p.add_argument(
        "--kafka-sasl-mechanisms",
        default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        help="SASL mechanisms offered (default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)",
    )
    p.add_argument(
        "--kafka-allow-plaintext",
        action="store_true",
        help="serve without TLS or SASL on a non-loopback address (a private network)",
    )
    p.add_argument("--kafka-max-connections", type=int, default=1000, help="default 1000")
    p.add_argument(
        "--kafka-request-timeout-ms",
        type=int,
        default=30_000,
        help="a request must arrive, and a response be taken, within this (default 30000)",
    )
    p.add_argument(
        "--kafka-socket-send-buffer-bytes",
        type=int,
        default=102_400,
        help="SO_SNDBUF of each client connection, Kafka's socket.send.buffer.bytes (default "
        "102400; -1: the kernel's own, autotuned)",
    )
    p.add_argument(
        "--kafka-offsets-topic-partitions",
        type=int,
        default=10,
        help="partitions of __consumer_offsets (default 10; never change it later)",
    )
    p.add_argument(
        "--kafka-transaction-state-partitions",
        type=int,
        default=10,
        help="partitions of __transaction_state (default 10; never change it later)",
    )
    p.add_argument(
        "--kafka-transaction-max-timeout-ms",
        type=int,
        default=900_000,
        help="longest transaction.timeout.ms a producer may ask for (default 900000)",
    )
    p.add_argument(
        "--kafka-transaction-abort-interval-ms",
        type=int,
        default=10_000,
        help="how often timed-out transactions are aborted (default 10000)",
    )
    p.add_argument(
        "--http-host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 in a pod, with an admin token)",
    )
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser(
        "operator",
        help="run the Kubernetes operator (StorageVolume and Topic resources)",
        description=(
            "Reconciles StorageVolume and Topic resources into per-volume workers and keeps "
            "their status (kopf). Uses the in-cluster service account, else the kubeconfig. "
            "Environment: LOGKEEPER_WORKER_IMAGE (the worker image), "
            "LOGKEEPER_STATUS_INTERVAL_S (how often worker status is read, default 15), "
            "LOGKEEPER_DELETE_WAIT_S (default 120), LOGKEEPER_NETWORK_POLICY_ENABLED (a "
            "NetworkPolicy per worker, default true), "
            "LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES (comma-separated namespaces that may "
            "reach the workers' HTTP port, default monitoring), LOGKEEPER_OPERATOR_NAMESPACE "
            "and LOGKEEPER_OPERATOR_POD_LABELS (key=value,...: how the policies admit this "
            "operator's pod)."
        ),
    )
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="namespace to watch (repeatable; default: all namespaces)",
    )
    p.add_argument(
        "--liveness",
        default=None,
        metavar="URL",
        help="serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz",
    )
    p.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help="serve the operator's Prometheus metrics (/metrics) there, e.g. 0.0.0.0:9090 "
        "(default: not served)",
    )
    p.set_defaults(handler=cmd_operator)


def cmd_serve(args: argparse.Namespace) -> int:
    from storagecore.errors import ConfigError
    from storageworker.kafka.listener_settings import ListenerSettings
    from storageworker.kafka.sasl import load_users
    from storageworker.serve import serve

    level = str(args.log_level).upper()
    kafka = None
    if args.kafka_port is not None:
        try:
            kafka = ListenerSettings(
                host=args.kafka_host or args.http_host,
                port=args.kafka_port,
                advertised_host=args.kafka_advertised_host,
                max_connections=args.kafka_max_connections,
                request_timeout_ms=args.kafka_request_timeout_ms,
                socket_send_buffer_bytes=args.kafka_socket_send_buffer_bytes,
                tls_cert_file=args.kafka_tls_cert,
                tls_key_file=args.kafka_tls_key,
                tls_client_ca_file=args.kafka_tls_client_ca,
                sasl_users=load_users(args.kafka_sasl_users) if args.kafka_sasl_users else None,
                sasl_mechanisms=tuple(
                    m.strip() for m in args.kafka_sasl_mechanisms.split(",") if m.strip()
                ),
                allow_plaintext=args.kafka_allow_plaintext,
                offsets_topic_partitions=args.kafka_offsets_topic_partitions,
                transaction_state_partitions=args.kafka_transaction_state_partitions,
                transaction_max_timeout_ms=args.kafka_transaction_max_timeout_ms,
                transaction_abort_interval_ms=args.kafka_transaction_abort_interval_ms,
            )
            kafka.check()
        except ConfigError as exc:
            print(f"logkeeper serve: error: {exc}", file=sys.stderr)
            return 2
    return serve(
        args.data_dir,
        args.topics,
        args.settings,
        http_host=args.http_host,
        http_port=args.http_port,
        kafka=kafka,
        log_level="INFO" if level == "WARNING" else level,
    )


def cmd_operator(args: argparse.Namespace) -> int:
    from storageoperator.main import run

    return run(
        args.namespace, liveness_endpoint=args.liveness, metrics_address=args.metrics_address
    )
