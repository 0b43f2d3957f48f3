"""``compact`` on a volume that a live worker serves: the job cleans, the worker swaps.

The driver never takes the data dir's lock and never renames a segment. Through the worker's
admin API (:mod:`storageworker.external_rounds` has the worker's half):

1. ``POST /v1/compaction/begin``: the worker pauses cleaning of the chosen partitions, plans
   their rounds as its own cleaner would, pins the planned segment files, and answers with the
   plans (:class:`storagecore.cleaner.round_plan.RoundPlan`) and the pinned paths;
2. the executors write each group's ``.cleaned`` segment beside the live segments (the same
   Spark stages as the offline job, :func:`storagepipeline.compact.clean_planned`, reading the
   pinned files), so the volume must be mounted where the executors run;
3. ``POST /v1/compaction/<job>/finish`` with the bytes written per group: the worker checks
   each partition's segments are unchanged and swaps the copies in with its own crash-safe
   protocol, then resumes cleaning. If the job fails, ``/abort`` (or, if the driver died, the
   lease) makes the worker drop the copies and resume.

Serving never stops; each partition ends exactly old or exactly new (the worker's checks and
swap protocol decide it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Final

from pyspark.sql import SparkSession

from storagecore.cleaner.offset_map import new_secret
from storagecore.cleaner.round_plan import RoundPlan
from storagepipeline.compact import MAP_BYTES_DEFAULT, CompactResult, clean_planned, result_of
from storagepipeline.logdirs import PipelineError

logger = logging.getLogger(__name__)

#: How long the worker keeps a job's pauses and pins if the driver never ends it.
LEASE_MS_DEFAULT: Final = 3_600_000
_TIMEOUT_S: Final = 600.0


class WorkerAdmin:
    """The worker's admin calls a compact job makes (JSON over HTTP)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token

    def call(self, path: str, document: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            method="POST",
            data=json.dumps(document).encode(),
            headers={"Content-Type": "application/json"},
        )
        if self.token is not None:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace").strip()
            # The worker's JSON error when it is one; otherwise the body as it came.
            with contextlib.suppress(ValueError, KeyError, TypeError):
                detail = str(json.loads(detail)["error"])
            raise PipelineError(f"worker {self.url}{path}: HTTP {exc.code}: {detail}") from exc
        except OSError as exc:
            raise PipelineError(f"worker {self.url}{path}: {exc}") from exc


def compact_online(
    spark: SparkSession,
    worker_url: str,
    *,
    topics: Sequence[str] = (),
    partitions: Sequence[str] = (),
    map_bytes: int = MAP_BYTES_DEFAULT,
    token: str | None = None,
    lease_ms: int = LEASE_MS_DEFAULT,
) -> list[CompactResult]:
    """Compact the named topics (or ``<topic>-<partition>``s) of the worker at ``worker_url``;
    each result's ``stats["swap"]`` is the worker's outcome: ``swapped``, ``changed`` (the
    segments changed meanwhile: kept as they were), ``not cleaned`` or ``failed: ...``."""
    admin = WorkerAdmin(worker_url, token)
    begun = admin.call(
        "/v1/compaction/begin",
        {"topics": list(topics), "partitions": list(partitions), "lease_ms": lease_ms},
    )
    job = str(begun["job"])
    plans = [RoundPlan.from_json(r["plan"]) for r in begun["rounds"]]
    read_paths = [[str(p) for p in r["read_paths"]] for r in begun["rounds"]]
    try:
        stats = clean_planned(
            spark, plans, secret=new_secret(), map_bytes=map_bytes, read_paths=read_paths
        )
    except BaseException:
        try:
            admin.call(f"/v1/compaction/{job}/abort", {})
        except PipelineError as exc:
            logger.warning("Compact job %s not aborted (its lease will end it): %s", job, exc)
        raise
    cleaned = {
        str(plan.tp): stats[i]["cleaned_sizes"] for i, plan in enumerate(plans) if plan.groups
    }
    outcome = admin.call(f"/v1/compaction/{job}/finish", {"cleaned": cleaned})["partitions"]
    results = []
    for i, plan in enumerate(plans):
        result = result_of(plan, stats[i])
        result.stats["swap"] = outcome.get(str(plan.tp), "not cleaned")
        results.append(result)
    return results
