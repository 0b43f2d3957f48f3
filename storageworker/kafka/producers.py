"""Producer IDs for InitProducerId.

The producers' sequence and epoch checks, duplicate detection and their state across restarts
(Kafka's ``.snapshot`` files) belong to the storage core: :mod:`storagecore.producer_state`,
run by ``Log.append`` under the log's lock. A retry of one of a producer's last five batches is
answered there with the original offsets; the Produce handler maps the refusals to Kafka's
error codes (:func:`storageworker.kafka.apis.error_for`).
"""

from __future__ import annotations

import threading
import time


class ProducerIds:
    """Producer IDs unique across restarts without stored state: the wall clock in ms
    shifted left by 10 bits, strictly increasing within the process (1024 IDs per ms)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, int(time.time() * 1000) << 10)
            return self._last
