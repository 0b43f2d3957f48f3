"""The topic set: every ``Topic`` manifest in a file or a directory of files.

A directory is what a mounted ConfigMap gives: one file per key, plus hidden ``..data``
entries that this reader skips (names starting with a dot). Files ending in ``.yaml``,
``.yml`` or ``.json`` are read, in name order; a topic declared twice (in one file or across
files) is an error. The fingerprint of the files' contents tells the reloader whether anything
changed; before reading, :func:`stat_stamp` (names, sizes, inodes, file times) tells
whether the files can have changed at all, so that a directory of thousands of files (the
operator's sharded topic set, one file per Topic) is not read on every reload interval.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path

from storagecore.config import TopicSpec, parse_topic_manifests
from storagecore.errors import ConfigError

SUFFIXES = (".yaml", ".yml", ".json")
#: A file modified this recently may change again within the file system's timestamp
#: granularity without its stamp changing ("racily clean", as git calls it): read it anyway.
RACY_NS = 2_000_000_000


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


def _is_topic_file(entry: os.DirEntry[str]) -> bool:
    return (
        not entry.name.startswith(".")
        and os.path.splitext(entry.name)[1] in SUFFIXES
        and entry.is_file()
    )


def stat_stamp(path: Path) -> str | None:
    """A digest of the topic files' names, sizes, inodes and times (modification, change);
    None when it cannot be trusted to show a change (a file changed in the last two seconds)
    or the path cannot be read (the read that follows reports why)."""
    digest = hashlib.sha256()
    newest = 0
    try:
        if path.is_dir():
            with os.scandir(path) as entries:
                stats = sorted((e.name, e.stat()) for e in entries if _is_topic_file(e))
        else:
            stats = [(path.name, path.stat())]
    except OSError:
        return None
    for name, stat in stats:
        newest = max(newest, stat.st_mtime_ns, stat.st_ctime_ns)
        digest.update(
            f"{name}\0{stat.st_size}:{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_ctime_ns}\0".encode()
        )
    if time.time_ns() - newest < RACY_NS:
        return None
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


#: A file's path → (its text, the topics it declared): what :func:`parse_topic_sources` parsed
#: last, so that a reload parses only the files that changed.
ParseCache = dict[str, tuple[str, dict[str, TopicSpec]]]


def parse_topic_sources(
    sources: TopicSources, cache: ParseCache | None = None
) -> dict[str, TopicSpec]:
    """Every file's topics; with ``cache``, a file whose text is the one parsed last is not
    parsed again (a directory of thousands of Topic files changes a few at a time), and the
    cache is left holding exactly the files of ``sources`` that parsed."""
    topics: dict[str, TopicSpec] = {}
    where: dict[str, str] = {}
    seen = set()
    for name, text in sources.files:
        seen.add(name)
        hit = cache.get(name) if cache is not None else None
        if hit is not None and hit[0] == text:
            declared = hit[1]
        else:
            declared = parse_topic_manifests(text, source=name)
            if cache is not None:
                cache[name] = (text, declared)
        for topic, spec in declared.items():
            if topic in topics:
                raise ConfigError(f"{name}: topic {topic!r} is also declared in {where[topic]}")
            topics[topic] = spec
            where[topic] = name
    if cache is not None:
        for name in [n for n in cache if n not in seen]:
            del cache[name]
    return topics
