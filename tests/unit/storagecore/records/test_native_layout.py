"""Both C extensions compile storagecore/records/_layout.h, the one C copy of layout.py's
batch positions and masks: every constant they export must be layout.py's."""

from __future__ import annotations

import pytest

from storagecore.index import OffsetIndex, TimeIndex
from storagecore.native import load_extension
from storagecore.records import layout

MODULES = ["storagecore.records._native", "storagecore.cleaner._native"]
#: Constants of a module's own, not layout copies.
#: The cleaner engine's own constants, checked in test_offset_map_native.py.
OWN = {
    "HASH_BYTES",
    "ENTRY_BYTES",
    "SECRET_BYTES",
    "SIP_C_ROUNDS",
    "SIP_D_ROUNDS",
    "STOP_END",
    "STOP_BATCH",
    "STOP_FULL",
    # The native append's (records/_segment_append.c), checked in test_log_append_native.py.
    "APPEND_SLOTS",
    "LOG_APPEND_SLOTS",
    # The legacy reader's (records/_legacy.c), checked in tests/property/test_legacy_native.py.
    "LEGACY_HEADER_BYTES",
    "LEGACY_OVERHEAD_V0",
    "LEGACY_OVERHEAD_V1",
    "OFFSET_INDEX_ENTRY_BYTES",
    "TIME_INDEX_ENTRY_BYTES",
}


@pytest.mark.parametrize("name", MODULES)
def test_layout_copies_agree(name: str) -> None:
    module = load_extension(name)
    if module is None:
        pytest.skip(f"{name} not loaded")
    exported = [c for c in dir(module) if c.isupper() and c not in OWN]
    # The header's whole list: a constant dropped from the export would go unchecked.
    assert len(exported) == 24, exported
    for constant in exported:
        assert getattr(module, constant) == getattr(layout, constant), constant


def test_index_entry_sizes_agree() -> None:
    """The native append writes index entries of storagecore/index/'s sizes."""
    module = load_extension("storagecore.records._native")
    if module is None:
        pytest.skip("storagecore.records._native not loaded")
    assert OffsetIndex.entry.size == module.OFFSET_INDEX_ENTRY_BYTES
    assert TimeIndex.entry.size == module.TIME_INDEX_ENTRY_BYTES
