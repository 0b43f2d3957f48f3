"""``logkeeper operator``: run the kopf operator (the handlers of storageoperator.handlers)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import kopf

from storageoperator import handlers


def run(
    namespaces: Sequence[str] = (),
    *,
    liveness_endpoint: str | None = None,
) -> int:
    """Watch ``namespaces`` (none: all of them) until interrupted."""
    assert handlers.GROUP  # imported for its registrations
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=True,
            liveness_endpoint=liveness_endpoint,
        )
    )
    return 0
