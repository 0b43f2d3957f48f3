"""``logkeeper operator``: run the kopf operator (the handlers of storageoperator.handlers)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import kopf

from storageoperator import handlers, metrics

logger = logging.getLogger(__name__)


def run(
    namespaces: Sequence[str] = (),
    *,
    liveness_endpoint: str | None = None,
    metrics_address: str | None = None,
) -> int:
    """Watch ``namespaces`` (none: all of them) until interrupted; with ``metrics_address``
    (``host:port``), serve the operator's Prometheus metrics there."""
    assert handlers.GROUP  # imported for its registrations
    if metrics_address:
        port = metrics.serve(metrics_address)
        logger.info("Serving metrics on %s (port %d)", metrics_address, port)
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=True,
            liveness_endpoint=liveness_endpoint,
        )
    )
    return 0
