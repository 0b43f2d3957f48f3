"""Pause, resume and compact-now: from annotations and from the admin API, as pure decisions.

Annotations (value ``"true"`` sets, anything else or absence clears; DESIGN.md):
``logkeeper.io/pause-cleaning`` and ``logkeeper.io/pause-retention`` on a Topic (that topic) or
on the StorageVolume (every topic); ``logkeeper.io/compact-now``: any new value asks for one
cleaning pass regardless of the dirty ratio; ``logkeeper.io/retry-uncleanable``: any new value
retries the uncleanable partitions at once. The admin API holds its own pauses (per topic and
for the volume). A log is paused while any hold is in force, as Kafka's nested pause counts:
resuming through the API does not override an annotation that still says pause, and removing
the annotation does not override an API pause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Final

PAUSE_CLEANING: Final = "logkeeper.io/pause-cleaning"
PAUSE_RETENTION: Final = "logkeeper.io/pause-retention"
COMPACT_NOW: Final = "logkeeper.io/compact-now"
RETRY_UNCLEANABLE: Final = "logkeeper.io/retry-uncleanable"
VERBS: Final = ("pause-cleaning", "resume-cleaning", "pause-retention", "resume-retention")


def is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def request_token(annotations: Mapping[str, str], key: str = COMPACT_NOW) -> str | None:
    """The request a one-shot annotation (compact-now, retry-uncleanable) carries: None when
    absent, empty or "false"; any other value asks once per new value."""
    value = annotations.get(key)
    if value is None or value.strip() == "" or value.strip().lower() == "false":
        return None
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class ApiHolds:
    """Pauses set through the admin API (``"*"`` stands for the whole volume)."""

    cleaning: frozenset[str] = frozenset()
    retention: frozenset[str] = frozenset()

    def apply(self, verb: str, target: str) -> ApiHolds:
        if verb == "pause-cleaning":
            return dataclasses.replace(self, cleaning=self.cleaning | {target})
        if verb == "resume-cleaning":
            return dataclasses.replace(self, cleaning=self.cleaning - {target})
        if verb == "pause-retention":
            return dataclasses.replace(self, retention=self.retention | {target})
        if verb == "resume-retention":
            return dataclasses.replace(self, retention=self.retention - {target})
        raise ValueError(f"unknown verb {verb!r} (one of {', '.join(VERBS)})")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicControls:
    pause_cleaning: bool
    pause_retention: bool
    reasons: tuple[str, ...]
    """Which holds are in force, for status (e.g. ``annotation on the Topic``)."""


VOLUME: Final = "*"


def topic_controls(
    topic: str,
    topic_annotations: Mapping[str, str],
    volume_annotations: Mapping[str, str],
    holds: ApiHolds,
) -> TopicControls:
    reasons: list[str] = []
    cleaning = retention = False
    for what, key, api in (
        ("cleaning", PAUSE_CLEANING, holds.cleaning),
        ("retention", PAUSE_RETENTION, holds.retention),
    ):
        sources = [
            source
            for source, on in (
                ("annotation on the Topic", is_true(topic_annotations.get(key))),
                ("annotation on the StorageVolume", is_true(volume_annotations.get(key))),
                ("admin API, topic", topic in api),
                ("admin API, volume", VOLUME in api),
            )
            if on
        ]
        reasons += [f"{what} paused: {source}" for source in sources]
        if what == "cleaning":
            cleaning = bool(sources)
        else:
            retention = bool(sources)
    return TopicControls(cleaning, retention, tuple(reasons))
