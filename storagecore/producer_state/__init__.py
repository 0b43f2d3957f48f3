"""Idempotent and transactional producers of a partition, and Kafka's ``.snapshot`` files.

What belongs here: the state of each producer (:mod:`.entry`), the checks an append of its
batches must pass (:mod:`.append_info`), the snapshot file format (:mod:`.snapshot`), and the
manager that keeps a partition's producers, writes and deletes snapshots and rebuilds the
state when a log loads (:mod:`.manager`). What must not: segments' files other than
``.snapshot``, offsets users see, the transaction coordinator (the worker's). Called by
:mod:`storagecore.log` (append, roll, deletion, close) and :mod:`storagecore.loader`.
"""

from storagecore.producer_state.append_info import CompletedTxn, ProducerAppendInfo
from storagecore.producer_state.entry import BATCHES_KEPT, BatchMetadata, ProducerStateEntry
from storagecore.producer_state.manager import (
    PRODUCER_ID_EXPIRATION_MS_DEFAULT,
    PendingAppend,
    ProducerStateManager,
    rebuild_producer_state,
)

__all__ = [
    "BATCHES_KEPT",
    "PRODUCER_ID_EXPIRATION_MS_DEFAULT",
    "BatchMetadata",
    "CompletedTxn",
    "PendingAppend",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "rebuild_producer_state",
]
