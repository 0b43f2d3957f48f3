"""Status and conditions: from what the operator saw and what the worker reports. Pure.

Conditions have the metav1.Condition shape. :func:`merge` keeps a condition's
``lastTransitionTime`` unless its status flips, so a status written again with the same facts
is byte-identical (the operator then skips the write: no hot loop). Reasons are CamelCase.

Topic conditions: ``Ready`` (the worker has every declared partition with the declared config
in force), ``Progressing`` (not yet), ``Degraded`` (a partition is uncleanable or offline, the
worker rejected its topic file, or the worker cannot be reached), ``CleaningPaused``,
``RetentionPaused`` (from the worker's report, else from the annotations),
``ReconciliationPaused`` (the operator leaves the children alone and only reports).

Size: what the operator writes into a status stays far below the API server's object limit
(1.5 MiB a request, 1 MiB advised) whatever the partition count. A Topic's
``partitionStatus`` lists every partition up to :data:`PARTITION_STATUS_MAX`; beyond, it lists
that many (those needing attention first: uncleanable or offline, then the dirtiest) and
``partitionStatusOmitted`` says how many it leaves out, beside the summaries (``partitions``,
``sizeBytes``, ``maxDirtyRatio``, ``uncleanablePartitions``). A message names at most
:data:`MESSAGE_ITEMS_MAX` partitions ("and N more") and is cut at :data:`MESSAGE_CHARS_MAX`.
The StorageVolume's status holds summaries, and the topics Kafka clients created up to
:data:`CLIENT_TOPICS_SHOWN` (the first by name; ``clientTopicCount`` counts them all and
``clientTopicsOmitted`` those left out).
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from storagecore.config import TopicPartition, topic_spec_from_manifest
from storagecore.errors import ConfigError

PAUSE_RECONCILIATION: Final = "logkeeper.io/pause-reconciliation"
PAUSE_CLEANING: Final = "logkeeper.io/pause-cleaning"
PAUSE_RETENTION: Final = "logkeeper.io/pause-retention"

#: Partitions listed in a Topic's ``partitionStatus`` at most (about 300 bytes each).
PARTITION_STATUS_MAX: Final = 100
#: Items (partitions, reasons) a condition message names at most.
MESSAGE_ITEMS_MAX: Final = 10
#: Characters of a condition message at most (metav1.Condition allows 32768).
MESSAGE_CHARS_MAX: Final = 2048

Condition = dict[str, Any]


def listing(items: Sequence[str], limit: int = MESSAGE_ITEMS_MAX) -> str:
    """``items`` joined, the first ``limit`` of them and how many more."""
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def worker_views(
    worker: Mapping[str, Any] | None,
) -> Callable[[str], Mapping[str, Any] | None]:
    """For each topic name, the worker's report cut down to that topic's partitions (and
    ``topics`` to that name when present): the per-Topic functions below then cost the
    topic's own partitions, not the volume's, in the timer's pass over every Topic."""
    if worker is None:
        return lambda name: None
    by_topic: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for entry in worker.get("partitions") or ():
        by_topic[str(entry.get("topic"))].append(entry)
    names = set(worker.get("topics") or ())

    def view(name: str) -> Mapping[str, Any]:
        return {
            **worker,
            "partitions": by_topic.get(name, []),
            "topics": [name] if name in names else [],
        }

    return view


def is_true(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "true"


def annotation(body: Mapping[str, Any], key: str) -> bool:
    return is_true(((body.get("metadata") or {}).get("annotations") or {}).get(key))


def now_rfc3339(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    kind: str, status: bool | None, reason: str, message: str, generation: int
) -> Condition:
    if len(message) > MESSAGE_CHARS_MAX:
        message = message[: MESSAGE_CHARS_MAX - 16] + " ... (truncated)"
    return {
        "type": kind,
        "status": "Unknown" if status is None else ("True" if status else "False"),
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
    }


def merge(
    previous: Sequence[Mapping[str, Any]] | None, new: Sequence[Condition], now: str
) -> list[Condition]:
    """``new`` with ``lastTransitionTime`` carried over from ``previous`` where the status did
    not change, and set to ``now`` where it did (or is new)."""
    before = {c.get("type"): c for c in previous or ()}
    merged = []
    for item in new:
        old = before.get(item["type"])
        if (
            old is not None
            and old.get("status") == item["status"]
            and old.get("lastTransitionTime")
        ):
            merged.append({**item, "lastTransitionTime": old["lastTransitionTime"]})
        else:
            merged.append({**item, "lastTransitionTime": now})
    return merged


def validate_topic(body: Mapping[str, Any]) -> str | None:
    """What the schema cannot catch, with storagecore's rules: None, or the message (naming
    the resource and the key)."""
    try:
        topic_spec_from_manifest(body, source="Topic")
    except ConfigError as exc:
        return str(exc)
    return None


def topic_name(body: Mapping[str, Any]) -> str:
    spec = body.get("spec") or {}
    return str(spec.get("topicName") or (body.get("metadata") or {}).get("name"))


def topic_figures(name: str, worker: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Topic status figures from the worker's ``/v1/status`` (empty without one)."""
    if worker is None:
        return {}
    entries = [p for p in worker.get("partitions") or () if p.get("topic") == name]
    partitions = []
    for entry in sorted(entries, key=lambda p: int(p["partition"])):
        item: dict[str, Any] = {
            "partition": entry["partition"],
            "logStartOffset": entry.get("logStartOffset"),
            "logEndOffset": entry.get("logEndOffset"),
            "sizeBytes": entry.get("sizeBytes"),
            "segments": entry.get("segments"),
            "cleanerState": entry.get("cleanerState"),
            "uncleanable": bool(entry.get("uncleanable")),
        }
        if entry.get("dirtyRatio") is not None:
            item["dirtyRatio"] = entry["dirtyRatio"]
        if entry.get("uncleanableReason"):
            item["uncleanableReason"] = entry["uncleanableReason"]
        last = entry.get("lastClean")
        if last and entry.get("lastCleanMs"):
            item["lastCleanTime"] = now_rfc3339(
                datetime.datetime.fromtimestamp(entry["lastCleanMs"] / 1000, datetime.UTC)
            )
            item["lastCleanResult"] = (
                f"{last.get('messages_read')} -> {last.get('messages_written')} records, "
                f"{100 * float(last.get('size_reduction') or 0):.1f}% smaller"
            )
        if entry.get("offline"):
            item["offline"] = True
        partitions.append({k: v for k, v in item.items() if v is not None})
    ratios = [p["dirtyRatio"] for p in partitions if "dirtyRatio" in p]
    shown = partitions
    if len(partitions) > PARTITION_STATUS_MAX:
        # Those needing attention first, then the dirtiest; listed by partition.
        shown = sorted(
            partitions,
            key=lambda p: (
                not (p["uncleanable"] or p.get("offline")),
                -float(p.get("dirtyRatio") or 0),
                p["partition"],
            ),
        )[:PARTITION_STATUS_MAX]
        shown.sort(key=lambda p: int(p["partition"]))
    for item in shown:
        item.pop("offline", None)  # not in the status schema: the Degraded condition says it
    figures: dict[str, Any] = {
        "topicName": name,
        "partitions": len(partitions),
        "sizeBytes": sum(int(p.get("sizeBytes") or 0) for p in partitions),
        "maxDirtyRatio": max(ratios) if ratios else None,
        "uncleanablePartitions": sum(1 for p in partitions if p["uncleanable"]),
        "partitionStatus": shown,
    }
    if len(shown) < len(partitions):
        figures["partitionStatusOmitted"] = len(partitions) - len(shown)
    return figures


def topic_conditions(
    body: Mapping[str, Any],
    *,
    volume: Mapping[str, Any] | None,
    worker: Mapping[str, Any] | None,
    worker_error: str | None = None,
) -> list[Condition]:
    """The Topic's conditions (without lastTransitionTime: see :func:`merge`)."""
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    name = topic_name(body)
    spec = body.get("spec") or {}
    declared = int(spec.get("partitions") or 1)
    invalid = validate_topic(body)
    paused = annotation(body, PAUSE_RECONCILIATION)
    result: list[Condition] = []
    ready: tuple[bool | None, str, str]
    progressing: tuple[bool, str, str] = (False, "Reconciled", "")
    degraded: tuple[bool, str, str] = (False, "Healthy", "")
    if invalid is not None:
        ready = (False, "InvalidConfig", invalid)
        degraded = (True, "InvalidConfig", invalid)
    elif volume is None:
        ready = (False, "VolumeNotFound", f"StorageVolume {spec.get('volume')!r} does not exist")
        progressing = (
            True,
            "WaitingForVolume",
            f"waiting for StorageVolume {spec.get('volume')!r}",
        )
    elif worker is None:
        ready = (None, "WorkerUnavailable", worker_error or "the worker has not reported yet")
        progressing = (True, "WaitingForWorker", worker_error or "waiting for the worker")
    else:
        present = {
            TopicPartition(p["topic"], int(p["partition"]))
            for p in worker.get("partitions") or ()
            if p.get("topic") == name
        }
        missing = [p for p in range(declared) if TopicPartition(name, p) not in present]
        in_set = name in (worker.get("topics") or ())
        config_error = ((worker.get("config") or {}).get("topics") or {}).get("error")
        bad = [
            p
            for p in worker.get("partitions") or ()
            if p.get("topic") == name and (p.get("uncleanable") or p.get("offline"))
        ]
        # A topic a Kafka client created (the volume's clientTopicPrefixes) that this resource
        # declares too: the worker adopts it at its next reload, then the spec is in force.
        adopting = any(
            p.get("clientTopic") for p in worker.get("partitions") or () if p.get("topic") == name
        )
        # Partitions beyond spec.partitions (a client grew the topic before the adoption):
        # kept and served by nobody until spec.partitions covers them (it may only grow).
        undeclared = sorted(
            int(tp.rsplit("-", 1)[1])
            for tp in worker.get("undeclaredPartitions") or ()
            if tp.rsplit("-", 1)[0] == name
        )
        if config_error:
            degraded = (True, "WorkerConfigRejected", str(config_error))
        elif bad:
            reasons = listing(
                [
                    f"{name}-{p['partition']}: "
                    + (
                        "offline"
                        if p.get("offline")
                        else f"uncleanable: {p.get('uncleanableReason')}"
                    )
                    for p in sorted(bad, key=lambda p: int(p["partition"]))
                ]
            )
            degraded = (True, "PartitionUnhealthy", reasons)
        elif undeclared:
            degraded = (
                True,
                "UndeclaredPartitions",
                f"partitions [{listing([str(p) for p in undeclared])}] of {name} are on the "
                f"volume beyond spec.partitions ({declared}); raise spec.partitions to "
                f"{undeclared[-1] + 1} to serve them",
            )
        if adopting:
            ready = (False, "AdoptingClientTopic", f"{name} was created by a Kafka client")
            progressing = (
                True,
                "AdoptingClientTopic",
                f"the worker is taking {name} over from its client topics",
            )
        elif missing or not in_set:
            absent = listing([str(p) for p in missing])
            ready = (False, "Progressing", f"the worker does not have partitions [{absent}] yet")
            progressing = (True, "ApplyingToWorker", f"partitions [{absent}] not on the worker")
        else:
            ready = (True, "Ready", f"{declared} partitions on the worker")
    result.append(condition("Ready", ready[0], ready[1], ready[2], generation))
    result.append(condition("Progressing", *progressing, generation))
    result.append(condition("Degraded", *degraded, generation))
    result += _pause_conditions(body, volume, worker, name, generation)
    result.append(
        condition(
            "ReconciliationPaused",
            paused,
            "Paused" if paused else "NotPaused",
            f"{PAUSE_RECONCILIATION} is true: children are not changed" if paused else "",
            generation,
        )
    )
    return result


def _pause_conditions(
    body: Mapping[str, Any],
    volume: Mapping[str, Any] | None,
    worker: Mapping[str, Any] | None,
    name: str,
    generation: int,
) -> list[Condition]:
    result = []
    for kind, key, field, reasons_field in (
        ("CleaningPaused", PAUSE_CLEANING, "pausedCleaning", "cleaning"),
        ("RetentionPaused", PAUSE_RETENTION, "pausedRetention", "retention"),
    ):
        entries = [p for p in (worker or {}).get("partitions") or () if p.get("topic") == name]
        if entries:
            on = any(p.get(field) for p in entries)
            why = sorted(
                {
                    r
                    for p in entries
                    for r in p.get("pauseReasons") or ()
                    if r.startswith(reasons_field)
                }
            )
            reason = "PausedOnWorker" if on else "NotPaused"
            message = "; ".join(why)
        else:
            on = annotation(body, key) or (volume is not None and annotation(volume, key))
            reason = "PauseRequested" if on else "NotPaused"
            message = f"{key} is true (not yet confirmed by the worker)" if on else ""
        result.append(condition(kind, on, reason, message, generation))
    return result


# The volume's free bytes move with every write, the worker's and any other tenant's of the disk.
# The status takes a new figure only once it moved by this fraction of the one it shows, so a busy
# disk does not make the operator write the status on every timer tick (the worker's metrics have
# the exact figure).
DISK_FREE_STEP = 0.01


def settled_disk_free(shown: int | None, measured: int | None) -> int | None:
    """The free bytes the status shows: ``shown`` until ``measured`` moved by DISK_FREE_STEP."""
    if shown is None or measured is None:
        return measured
    return shown if abs(measured - shown) < DISK_FREE_STEP * shown else measured


#: Client topics listed in a StorageVolume's status at most (the CRD's maxItems): with names of
#: up to 249 characters, about 27 KiB.
CLIENT_TOPICS_SHOWN: Final = 100


def volume_figures(
    worker: Mapping[str, Any] | None, *, shown: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The StorageVolume's status figures from the worker's report; ``shown`` is the status now."""
    if worker is None:
        return {}
    # The worker's own topics (the Kafka port's __consumer_offsets) are not the user's.
    internal = set(worker.get("internalTopics") or ())
    partitions = [p for p in worker.get("partitions") or [] if not p.get("internal")]
    ratios = [p["dirtyRatio"] for p in partitions if p.get("dirtyRatio") is not None]
    free: list[int] = [
        int((d.get("disk") or {})["freeBytes"])
        for d in worker.get("dirs") or ()
        if (d.get("disk") or {}).get("freeBytes") is not None
    ]
    client = sorted(
        (worker.get("clientTopics") or {}).get("topics") or [], key=lambda t: str(t["name"])
    )
    return {
        "topics": len(set(worker.get("topics") or ()) - internal),
        "clientTopicCount": len(client),
        # The first by name: a stable list, which moves only when one of those changes.
        "clientTopics": [
            {"name": t["name"], "partitions": t["partitions"]} for t in client[:CLIENT_TOPICS_SHOWN]
        ],
        "clientTopicsOmitted": max(len(client) - CLIENT_TOPICS_SHOWN, 0),
        "partitions": len(partitions),
        "sizeBytes": sum(int(p.get("sizeBytes") or 0) for p in partitions),
        "maxDirtyRatio": max(ratios) if ratios else None,
        "uncleanablePartitions": sum(1 for p in partitions if p.get("uncleanable")),
        "diskFreeBytes": settled_disk_free(
            (shown or {}).get("diskFreeBytes"), min(free) if free else None
        ),
    }


def disk_pressure(worker: Mapping[str, Any] | None) -> tuple[bool | None, str, str]:
    """The DiskPressure condition: True while a data directory refuses new data (free space
    below ``minFreeBytes``, or a write found none). The message names the directories and their
    floors only, not the free bytes, which move with every write."""
    if worker is None:
        return None, "WorkerUnavailable", ""
    under = [
        f"{d['path']} (floor {d['diskPressure']['floorBytes']} bytes)"
        for d in worker.get("dirs") or ()
        if (d.get("diskPressure") or {}).get("underFloor")
    ]
    if under:
        return True, "BelowFreeSpaceFloor", "produce is refused in " + ", ".join(under)
    return False, "EnoughFreeSpace", ""


def volume_conditions(
    body: Mapping[str, Any],
    *,
    children_ready: bool,
    worker: Mapping[str, Any] | None,
    worker_error: str | None = None,
) -> list[Condition]:
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    paused = annotation(body, PAUSE_RECONCILIATION)
    if worker is not None and worker.get("state") == "running":
        ready: tuple[bool | None, str, str] = (True, "WorkerReady", "the worker is running")
        progressing = (False, "Reconciled", "")
    elif not children_ready:
        ready = (False, "CreatingWorker", "the worker's StatefulSet is being created")
        progressing = (True, "CreatingWorker", "")
    else:
        ready = (None, "WorkerUnavailable", worker_error or "the worker has not reported yet")
        progressing = (True, "WaitingForWorker", worker_error or "")
    problems = []
    if worker is not None:
        for file in ("topics", "settings"):
            error = ((worker.get("config") or {}).get(file) or {}).get("error")
            if error:
                problems.append(f"{file}: {error}")
        problems += [
            f"{d['path']}: offline ({d.get('error')})"
            for d in worker.get("dirs") or ()
            if not d.get("online")
        ]
    degraded = (
        (True, "WorkerReportsProblems", "; ".join(problems)) if problems else (False, "Healthy", "")
    )
    result = [
        condition("Ready", *ready, generation),
        condition("Progressing", *progressing, generation),
        condition("Degraded", *degraded, generation),
        condition("DiskPressure", *disk_pressure(worker), generation),
    ]
    for kind, key in (("CleaningPaused", PAUSE_CLEANING), ("RetentionPaused", PAUSE_RETENTION)):
        on = annotation(body, key)
        result.append(
            condition(
                kind,
                on,
                "Paused" if on else "NotPaused",
                f"{key} is true" if on else "",
                generation,
            )
        )
    result.append(
        condition(
            "ReconciliationPaused",
            paused,
            "Paused" if paused else "NotPaused",
            f"{PAUSE_RECONCILIATION} is true: children are not changed" if paused else "",
            generation,
        )
    )
    return result
