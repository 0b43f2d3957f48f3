"""The topic set read from a directory of files (the operator's shards, one file per Topic):
files whose metadata did not move are not read again, files whose text did not change are not
parsed again, and what is read is the same either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storagecore.errors import ConfigError
from storageworker import topics as topics_module
from storageworker.topics import parse_topic_sources, read_topic_sources, stat_stamp


def entry(name: str, partitions: int = 1) -> str:
    return (
        "apiVersion: logkeeper.io/v1alpha1\nkind: Topic\n"
        f"metadata:\n  name: {name}\nspec:\n  partitions: {partitions}\n"
    )


def test_the_stamp_is_withheld_while_files_are_fresh(tmp_path: Path) -> None:
    (tmp_path / "t0.yaml").write_text(entry("t0"))
    # Just written: timestamps are coarse, a rewrite could keep them: no stamp, read anyway.
    assert stat_stamp(tmp_path) is None
    assert stat_stamp(tmp_path / "missing") is None


def test_the_stamp_moves_with_any_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics_module, "RACY_NS", 0)
    for n in range(3):
        (tmp_path / f"t{n}.yaml").write_text(entry(f"t{n}"))
    (tmp_path / ".t0.yaml.tmp").write_text("not: read")
    first = stat_stamp(tmp_path)
    assert first is not None and stat_stamp(tmp_path) == first
    # Hidden files (the kubelet's temporaries, ..data) do not count.
    (tmp_path / ".t0.yaml.tmp").unlink()
    assert stat_stamp(tmp_path) == first
    # A file replaced (the kubelet's way: a new inode) with the same size and mtime.
    target = tmp_path / "t1.yaml"
    mtime = target.stat().st_mtime_ns
    replacement = tmp_path / ".t1.tmp"
    replacement.write_text(entry("t9"))
    os.utime(replacement, ns=(mtime, mtime))
    replacement.replace(target)
    second = stat_stamp(tmp_path)
    assert second not in (None, first)
    (tmp_path / "t2.yaml").unlink()
    assert stat_stamp(tmp_path) not in (None, second)


def test_only_changed_files_are_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(20):
        (tmp_path / f"t{n}.yaml").write_text(entry(f"t{n}"))
    parsed: list[str] = []
    real = topics_module.parse_topic_manifests

    def counting(text: str, *, source: str) -> object:
        parsed.append(Path(source).name)
        return real(text, source=source)

    monkeypatch.setattr(topics_module, "parse_topic_manifests", counting)
    cache: topics_module.ParseCache = {}
    first = parse_topic_sources(read_topic_sources(tmp_path), cache)
    assert len(parsed) == 20 and sorted(first) == sorted(f"t{n}" for n in range(20))
    parsed.clear()
    (tmp_path / "t3.yaml").write_text(entry("t3", partitions=4))
    (tmp_path / "t4.yaml").unlink()
    second = parse_topic_sources(read_topic_sources(tmp_path), cache)
    assert parsed == ["t3.yaml"]
    assert second["t3"].partitions == 4 and "t4" not in second and len(second) == 19
    assert str(tmp_path / "t4.yaml") not in cache
    # Without the cache, the same result.
    assert parse_topic_sources(read_topic_sources(tmp_path)) == second
    # A topic declared in two files is still refused, naming both.
    (tmp_path / "dup.yaml").write_text(entry("t5"))
    with pytest.raises(ConfigError, match="t5.*also declared"):
        parse_topic_sources(read_topic_sources(tmp_path), cache)
