"""The operator's way to the Kubernetes API: one client getter per API group, and
:func:`retrying`, through which every call goes (409 Conflict and server errors are retried
with backoff; anything else is the caller's to handle)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import kubernetes
from kubernetes.client.exceptions import ApiException

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
RETRIES = 6

T = TypeVar("T")


def retrying(call: Callable[[], T], what: str) -> T:
    """``call()``, again after 409 Conflict and server errors (0.1 s, doubling, 6 tries)."""
    delay = 0.1
    for attempt in range(RETRIES):
        try:
            return call()
        except ApiException as exc:
            if exc.status not in RETRY_STATUSES or attempt == RETRIES - 1:
                raise
            logger.warning("%s: HTTP %s, retrying in %.1fs", what, exc.status, delay)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def custom_api() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi()


def core_api() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api()


def apps_api() -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api()


def networking_api() -> kubernetes.client.NetworkingV1Api:
    return kubernetes.client.NetworkingV1Api()
