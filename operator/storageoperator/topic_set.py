"""A volume's topic set as the worker reads it: sharded ConfigMaps, one key per Topic.

Pure functions, no API calls (:mod:`storageoperator.topic_set_store` writes them).

Why sharded ConfigMaps with one key per Topic (and not the worker watching its Topics):

* A ConfigMap is capped by the API server at 1 MiB, one object for every Topic of a volume
  (what the operator wrote before) held a few thousand Topics at most and was rewritten whole
  on every change: applying N Topics wrote O(N) ConfigMaps of O(N) size.
* A Topic's entry is the key ``<metadata.name>.yaml`` of the ConfigMap
  ``lk-<volume>-topics-NN``, NN = a stable hash of the Topic's name modulo :data:`SHARDS`. A
  change to one Topic is one merge patch of its own key (``null`` removes it): the bytes the
  operator sends per Topic event are those of one entry, whatever the count, and the number
  of writes grows linearly with the Topics applied.
* All shards are mounted in one projected volume, so the pod spec never changes with the
  count and the worker reads one directory of small files (``storageworker.topics``), as it
  already read a mounted ConfigMap. The kubelet refreshes it in place, without a restart.
* The worker needs no API access, no RBAC and no Kubernetes client; it keeps working from the
  files when the API server is away, and runs unchanged outside Kubernetes.

Capacity: :data:`SHARDS` ConfigMaps of at most :data:`SHARD_BYTES_MAX` each. A Topic manifest
is about 150 to 400 bytes (more with a long ``spec.config``), so a volume holds over 100,000
Topics before a shard fills; a Topic that would overfill its shard is refused with an error
naming the shard (:class:`ShardFullError`), never written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

from storageoperator import render

#: ConfigMaps per volume: fixed, as the pod spec mounts each of them (a projected volume).
SHARDS: Final = render.TOPIC_SHARDS
#: Bytes of ``data`` per shard we accept (the API server refuses objects over 1 MiB; the rest
#: is room for metadata).
SHARD_BYTES_MAX: Final = 900 * 1024
#: ConfigMap keys are at most 253 characters; longer Topic names get a hashed key.
KEY_LENGTH_MAX: Final = 253
SUFFIX: Final = ".yaml"
SHARD_LABEL: Final = render.SHARD_LABEL


class ShardFullError(Exception):
    """A Topic's entry would take its shard over :data:`SHARD_BYTES_MAX`."""


def _digest(name: str) -> bytes:
    return hashlib.sha256(name.encode("utf-8")).digest()


def shard_of(topic_name: str) -> int:
    """The shard of a Topic (by its ``metadata.name``): stable across processes and versions."""
    return int.from_bytes(_digest(topic_name)[:8], "big") % SHARDS


shard_name = render.topic_shard_name
shard_names = render.topic_shard_names


def entry_key(topic_name: str) -> str:
    """The ConfigMap key (and the worker's file name) of a Topic's entry."""
    key = topic_name + SUFFIX
    if len(key) <= KEY_LENGTH_MAX:
        return key
    tag = _digest(topic_name).hex()[:16]
    return f"{topic_name[: KEY_LENGTH_MAX - len(SUFFIX) - len(tag) - 1]}-{tag}{SUFFIX}"


def topic_key(topic: Mapping[str, Any]) -> tuple[int, str]:
    """(shard, key) of a Topic resource."""
    name = str((topic.get("metadata") or {}).get("name"))
    return shard_of(name), entry_key(name)


def entry(topic: Mapping[str, Any]) -> str:
    """A Topic's entry: its spec and the ``logkeeper.io/`` annotations the worker acts on."""
    return yaml.safe_dump(render.clean_manifest("Topic", topic), sort_keys=True)


def data_bytes(data: Mapping[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def check_fits(current: Mapping[str, str], key: str, text: str, *, shard: str, topic: str) -> None:
    """ShardFullError (naming the shard and the Topic) when ``key: text`` would overfill it."""
    size = data_bytes(current) - (
        len(key.encode()) + len(current[key].encode()) if key in current else 0
    )
    size += len(key.encode()) + len(text.encode())
    if size > SHARD_BYTES_MAX:
        raise ShardFullError(
            f"Topic {topic}: ConfigMap {shard} would hold {size} bytes, over the "
            f"{SHARD_BYTES_MAX} the operator writes into one shard; the volume's topic set "
            "is full (shorten spec.config, or spread Topics over more volumes)"
        )


def shard_manifest(volume_name: str, shard: int, data: Mapping[str, str]) -> render.Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": shard_name(volume_name, shard),
            "labels": {**render.labels(volume_name), SHARD_LABEL: f"{shard:02d}"},
        },
        "data": dict(data),
    }


def desired_shards(
    topics: Iterable[Mapping[str, Any]],
    current: Mapping[int, Mapping[str, str]],
    paused: frozenset[str],
) -> dict[int, dict[str, str]]:
    """Every shard's data: the entries of ``topics`` (live, on the volume), and for each paused
    Topic (by ``metadata.name``) the entry as ``current`` (shard → data) has it now."""
    result: dict[int, dict[str, str]] = {shard: {} for shard in range(SHARDS)}
    for topic in topics:
        name = str(topic["metadata"]["name"])
        shard, key = topic_key(topic)
        if name in paused:
            kept = current.get(shard, {}).get(key)
            if kept is not None:
                result[shard][key] = kept
            continue
        result[shard][key] = entry(topic)
    return result


def delta(desired: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str | None]:
    """The merge patch of ``data`` taking ``current`` to ``desired`` (None removes a key)."""
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in desired})
    return patch


def bounded(desired: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """``desired`` without the new keys that would take the shard over
    :data:`SHARD_BYTES_MAX` (keys already in ``current`` first, then by name): a full shard
    keeps what the worker has; the Topic handler refuses the rest with a ShardFullError."""
    result: dict[str, str] = {}
    size = 0
    for key in sorted(desired, key=lambda k: (k not in current, k)):
        added = len(key.encode()) + len(desired[key].encode())
        if size + added <= SHARD_BYTES_MAX:
            result[key] = desired[key]
            size += added
    return result
