"""Writes a volume's topic set (:mod:`storageoperator.topic_set`) into its shard ConfigMaps.

Called by the handlers: :meth:`TopicSetStore.put` for one Topic's event (one merge patch of
its own key, nothing when the shard already has that entry), :meth:`TopicSetStore.sync` for
the volume's own pass (every shard read afresh and patched with its delta). It keeps what it
last read or wrote of each shard, so that a Topic event (or the resume of every Topic when the
operator starts) costs no read of the shard and no write when nothing changed.

# Invariant: the operator is the only writer of the shards (one replica, strategy Recreate);
# a write that fails drops the shard's copy, so the next call reads it again. An edit by hand
# is undone by the volume's next pass, which reads every shard.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import kopf
import kubernetes
from kubernetes.client.exceptions import ApiException

from storageoperator import topic_set

logger = logging.getLogger(__name__)


class TopicSetStore:
    def __init__(
        self,
        core: Callable[[], kubernetes.client.CoreV1Api],
        retrying: Callable[[Callable[[], Any], str], Any],
    ) -> None:
        self._core = core
        self._retrying = retrying
        self._guard = threading.Lock()
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        # (namespace, shard name) → its data as last read or written; absent: not known.
        self._data: dict[tuple[str, str], dict[str, str] | None] = {}

    def _lock(self, where: tuple[str, str]) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(where, threading.Lock())

    def _read(self, namespace: str, name: str) -> dict[str, str] | None:
        """The shard's data (None when it does not exist), from the API server."""
        try:
            current = self._retrying(
                lambda: self._core().read_namespaced_config_map(name, namespace),
                f"read ConfigMap {namespace}/{name}",
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(current.data or {})

    def _known(self, namespace: str, name: str) -> dict[str, str] | None:
        where = (namespace, name)
        if where not in self._data:
            self._data[where] = self._read(namespace, name)
        return self._data[where]

    def _create(
        self, namespace: str, volume: Mapping[str, Any], shard: int, data: Mapping[str, str]
    ) -> bool:
        """Create the shard; False when it exists already (someone created it meanwhile)."""
        manifest = topic_set.shard_manifest(volume["metadata"]["name"], shard, data)
        kopf.adopt(manifest, owner=volume)  # type: ignore[arg-type]
        try:
            self._core().create_namespaced_config_map(namespace, cast(Any, manifest))
        except ApiException as exc:
            if exc.status != 409:
                raise
            return False
        logger.info("Created ConfigMap %s/%s", namespace, manifest["metadata"]["name"])
        return True

    def _patch(self, namespace: str, name: str, patch: Mapping[str, str | None]) -> None:
        self._retrying(
            lambda: self._core().patch_namespaced_config_map(
                name, namespace, {"data": dict(patch)}
            ),
            f"patch ConfigMap {namespace}/{name}",
        )

    def put(self, volume: Mapping[str, Any], topic_name: str, text: str | None) -> bool:
        """Set (``text``) or remove (None) the entry of the Topic ``topic_name`` (its
        ``metadata.name``) in its shard; True when something was written. ShardFullError,
        naming the shard, when the entry does not fit."""
        namespace = volume["metadata"]["namespace"]
        shard = topic_set.shard_of(topic_name)
        name = topic_set.shard_name(volume["metadata"]["name"], shard)
        key = topic_set.entry_key(topic_name)
        where = (namespace, name)
        with self._lock(where):
            try:
                data = self._known(namespace, name)
                if data is None:
                    if text is None:
                        return False
                    if self._create(namespace, volume, shard, {key: text}):
                        self._data[where] = {key: text}
                        return True
                    data = self._data[where] = self._read(namespace, name)
                    assert data is not None, f"ConfigMap {namespace}/{name} exists (409)"
                if data.get(key) == text:
                    return False
                if text is not None:
                    topic_set.check_fits(data, key, text, shard=name, topic=topic_name)
                self._patch(namespace, name, {key: text})
            except BaseException:
                self._data.pop(where, None)
                raise
            if text is None:
                data.pop(key, None)
            else:
                data[key] = text
            return True

    def sync(
        self,
        volume: Mapping[str, Any],
        list_topics: Callable[[], tuple[Iterable[Mapping[str, Any]], frozenset[str]]],
    ) -> list[str]:
        """Every shard of the volume to the entries of the Topics ``list_topics()`` gives (the
        volume's live Topics, and the names of the paused ones, which keep their entry as it
        is); the names of the shards written. The Topics are listed once every shard is
        locked: a Topic whose entry was put before is in the list, one put later waits."""
        namespace = volume["metadata"]["namespace"]
        volume_name = volume["metadata"]["name"]
        names = topic_set.shard_names(volume_name)
        written = []
        with self._guard:
            locks = [self._locks.setdefault((namespace, n), threading.Lock()) for n in names]
        for lock in locks:
            lock.acquire()
        try:
            topics, paused = list_topics()
            current = {shard: self._read(namespace, name) for shard, name in enumerate(names)}
            desired = topic_set.desired_shards(
                topics, {s: d for s, d in current.items() if d is not None}, paused
            )
            for shard, name in enumerate(names):
                where = (namespace, name)
                self._data.pop(where, None)
                now = current[shard]
                want = topic_set.bounded(desired[shard], now or {})
                if now is None:
                    if not self._create(namespace, volume, shard, want):
                        continue  # created meanwhile: the next call reads it
                    written.append(f"ConfigMap/{name}")
                else:
                    patch = topic_set.delta(want, now)
                    if patch:
                        self._patch(namespace, name, patch)
                        written.append(f"ConfigMap/{name}")
                self._data[where] = want
        finally:
            for lock in locks:
                lock.release()
        return written
