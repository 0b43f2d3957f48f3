"""The topic set: every ``Topic`` manifest in a file or a directory of files.

A directory is what a mounted ConfigMap gives: one file per key, plus hidden ``..data``
entries that this reader skips (names starting with a dot). Files ending in ``.yaml``,
``.yml`` or ``.json`` are read, in name order; a topic declared twice (in one file or across
files) is an error. The fingerprint of the files' contents tells the reloader whether anything
changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from storagecore.config import TopicSpec, parse_topic_manifests
from storagecore.errors import ConfigError

SUFFIXES = (".yaml", ".yml", ".json")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSources:
    files: tuple[tuple[str, str], ...]
    """(path, text) of every file read, in order."""

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, text in self.files:
            digest.update(name.encode() + b"\0" + text.encode() + b"\0")
        return digest.hexdigest()


def read_topic_sources(path: Path) -> TopicSources:
    """The text of the topic files; ConfigError naming the path when it cannot be read."""
    try:
        if path.is_dir():
            names = sorted(
                p
                for p in path.iterdir()
                if not p.name.startswith(".") and p.suffix in SUFFIXES and p.is_file()
            )
            return TopicSources(tuple((str(p), p.read_text(encoding="utf-8")) for p in names))
        return TopicSources(((str(path), path.read_text(encoding="utf-8")),))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the topic set: {exc}") from None


def parse_topic_sources(sources: TopicSources) -> dict[str, TopicSpec]:
    topics: dict[str, TopicSpec] = {}
    where: dict[str, str] = {}
    for name, text in sources.files:
        for topic, spec in parse_topic_manifests(text, source=name).items():
            if topic in topics:
                raise ConfigError(f"{name}: topic {topic!r} is also declared in {where[topic]}")
            topics[topic] = spec
            where[topic] = name
    return topics
