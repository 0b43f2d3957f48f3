"""How the ``kafka`` port listens: address, limits, TLS and SASL (``logkeeper serve --kafka-*``).

Checked once at start (:meth:`ListenerSettings.check`, errors name the setting); read by
:mod:`.server`. No sockets are opened here.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import ssl
from pathlib import Path

from storagecore.errors import ConfigError
from storageworker.kafka.sasl import MECHANISMS, User


@dataclasses.dataclass(frozen=True)
class ListenerSettings:
    """How the ``kafka`` port listens (``logkeeper serve --kafka-*``)."""

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    """The host name clients are told to connect to (Metadata); default: ``host``, or the
    machine's name when ``host`` is a wildcard address."""
    max_connections: int = 1000
    max_request_bytes: int = 100 * 1024 * 1024
    request_timeout_ms: int = 30_000
    idle_timeout_ms: int = 600_000
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_client_ca_file: Path | None = None
    """When set, clients must present a certificate signed by this CA (mutual TLS)."""
    sasl_users: dict[str, User] | None = None
    sasl_mechanisms: tuple[str, ...] = MECHANISMS
    allow_plaintext: bool = False
    """Serve without TLS and SASL on a non-loopback address (a private network)."""
    offsets_topic_partitions: int = 10
    """Partitions of ``__consumer_offsets``. Groups map to partitions by hash: never change
    it on a volume that already has the topic."""
    transaction_state_partitions: int = 10
    """Partitions of ``__transaction_state`` (Kafka's default is 50). Transactional ids map to
    partitions by hash: never change it on a volume that already has the topic."""
    transaction_max_timeout_ms: int = 900_000
    """The longest ``transaction.timeout.ms`` a producer may ask for (Kafka's
    ``transaction.max.timeout.ms``)."""
    transaction_abort_interval_ms: int = 10_000
    """How often timed-out transactions are looked for and aborted (Kafka's
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``)."""
    socket_send_buffer_bytes: int = 102_400
    """``SO_SNDBUF`` of each client connection (Kafka's ``socket.send.buffer.bytes``, same
    default); -1 keeps the kernel's own, autotuned (3.9 MB on loopback here). With Kafka's
    100 KiB the worker spent 0.48-0.50 ms of CPU per 1 MiB Fetch answer instead of
    0.73-0.74, and answered in 0.57-0.58 ms instead of 0.90 (median of 980, twice, one
    client fetching serially on loopback, 2026-11-25): less kernel time per ``sendfile``."""

    def check(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("kafka listener: TLS needs both a certificate and a key file")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ConfigError("kafka listener: a client CA needs TLS (certificate and key)")
        if not 1 <= self.offsets_topic_partitions <= 1000:
            raise ConfigError("kafka listener: offsets topic partitions must be 1-1000")
        if not 1 <= self.transaction_state_partitions <= 1000:
            raise ConfigError("kafka listener: transaction state partitions must be 1-1000")
        if self.transaction_max_timeout_ms < 1 or self.transaction_abort_interval_ms < 1:
            raise ConfigError(
                "kafka listener: transaction max timeout and abort interval must be >= 1 ms"
            )
        if self.socket_send_buffer_bytes != -1 and self.socket_send_buffer_bytes < 1:
            raise ConfigError(
                "kafka listener: --kafka-socket-send-buffer-bytes must be -1 (the kernel's) or "
                ">= 1, "
                f"not {self.socket_send_buffer_bytes}"
            )
        unknown = set(self.sasl_mechanisms) - set(MECHANISMS)
        if unknown:
            raise ConfigError(f"kafka listener: unknown SASL mechanisms {sorted(unknown)}")
        secured = self.tls_cert_file is not None or self.sasl_users is not None
        if not secured and not self.allow_plaintext and not _is_loopback(self.host):
            raise ConfigError(
                f"kafka listener: {self.host} is not a loopback address; configure TLS or "
                "SASL, or allow plaintext explicitly (--kafka-allow-plaintext)"
            )

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.tls_cert_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(str(self.tls_cert_file), str(self.tls_key_file))
            if self.tls_client_ca_file is not None:
                context.load_verify_locations(str(self.tls_client_ca_file))
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"kafka listener: cannot load TLS files: {exc}") from None
        return context


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
