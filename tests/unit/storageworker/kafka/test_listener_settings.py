"""The ``kafka`` listener's socket send buffer: Kafka's ``socket.send.buffer.bytes``."""

from __future__ import annotations

import socket
import sys

import pytest

from storagecore.errors import ConfigError
from storageworker.kafka.listener_settings import ListenerSettings
from storageworker.kafka.server import set_send_buffer


def test_the_default_is_kafkas_and_the_flags() -> None:
    """One default from ``logkeeper serve --kafka-socket-send-buffer-bytes`` to the listener."""
    from logkeeper.cli import build_parser

    args = build_parser().parse_args(["serve", "--data-dir", "d", "--topics", "t"])
    assert ListenerSettings().socket_send_buffer_bytes == 102_400
    assert args.kafka_socket_send_buffer_bytes == 102_400


@pytest.mark.parametrize("size_bytes", [0, -2])
def test_a_bad_send_buffer_is_refused_by_name(size_bytes: int) -> None:
    with pytest.raises(ConfigError, match=f"--kafka-socket-send-buffer-bytes .* not {size_bytes}"):
        ListenerSettings(socket_send_buffer_bytes=size_bytes).check()


@pytest.mark.skipif(sys.platform != "linux", reason="Linux doubles SO_SNDBUF")
def test_set_send_buffer_sets_it_and_minus_one_keeps_the_kernels() -> None:
    left, right = socket.socketpair()
    with left, right:
        kernel = right.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        set_send_buffer(left, 102_400)
        set_send_buffer(right, -1)
        assert left.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 2 * 102_400
        assert right.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == kernel
