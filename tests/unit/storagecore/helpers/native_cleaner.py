"""The cleaner's native speed-up as its differential tests load it (test_offset_map_native*.py,
test_offset_map_notes.py), and what they compare of two logs cleaned both ways: the files
(log and indexes) and the counters of a round."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from storagecore.cleaner import CleanerStats
from storagecore.native import load_extension

# None when not built (test_expected_implementation_is_loaded then fails) or disabled by
# STORAGECORE_NO_EXTENSIONS (the second CI run, where these tests skip).
_native = load_extension("storagecore.cleaner._native")
needs_native = pytest.mark.skipif(_native is None, reason="native speed-up not loaded")
START_MS = 1_700_000_000_000
SECRET = bytes(range(16))


def _files(directory: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.suffix in (".log", ".index", ".timeindex")
    }


def _counters(stats: CleanerStats) -> dict[str, object]:
    fields = dataclasses.asdict(stats)
    for timing in ("start_s", "map_complete_s", "end_s"):
        fields.pop(timing)
    return fields
