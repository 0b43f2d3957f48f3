"""The worker's ``/v1/status`` as the operator reads it: through the worker pod's IP, page by
page, so that each request stays short however many partitions the worker holds."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kubernetes.client.exceptions import ApiException

from storageoperator import metrics, render
from storageoperator.kube_api import core_api, retrying

#: Partitions per ``/v1/status`` page the timer reads, and pages at most (a bound on a pass).
STATUS_PAGE_PARTITIONS = int(os.environ.get("LOGKEEPER_STATUS_PAGE_PARTITIONS", "1000"))
STATUS_PAGES_MAX = 1000


def fetch_worker_status(
    namespace: str, volume_name: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The worker's /v1/status through its pod's IP, or (None, why not); each failure counts
    in ``logkeeper_operator_worker_status_errors_total``."""
    status, error = _read_worker_status(namespace, volume_name)
    if status is None:
        metrics.WORKER_STATUS_ERRORS.inc()
    return status, error


def _read_worker_status(
    namespace: str, volume_name: str
) -> tuple[dict[str, Any] | None, str | None]:
    pod_name = f"{render.child_name(volume_name)}-0"
    try:
        pod = retrying(
            lambda: core_api().read_namespaced_pod(pod_name, namespace), f"read pod {pod_name}"
        )
    except ApiException as exc:
        return None, f"pod {pod_name}: {exc.status} {exc.reason}"
    ip = pod.status.pod_ip if pod.status else None
    if not ip:
        return None, f"pod {pod_name} has no IP yet"
    url = f"http://{ip}:{render.HTTP_PORT}/v1/status"
    document: dict[str, Any] | None = None
    after: str | None = None
    # Page by page: each request stays short however many partitions the worker holds (a
    # whole document of 10,000 partitions takes the worker seconds to build).
    for _ in range(STATUS_PAGES_MAX):
        query = {"limit": str(STATUS_PAGE_PARTITIONS)} | ({} if after is None else {"after": after})
        page_url = f"{url}?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(page_url, timeout=5) as response:
                page = dict(json.load(response))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return None, f"{page_url}: {exc}"
        if document is None:
            document = page
        else:
            document["partitions"] += page.get("partitions") or []
        after = (page.get("page") or {}).get("nextAfter")
        if after is None:
            document.pop("page", None)
            return document, None
    return None, f"{url}: more than {STATUS_PAGES_MAX} pages of {STATUS_PAGE_PARTITIONS} partitions"
