"""Index mappings that hold no file descriptor (storagecore/index/_mapping.c) and the indexes
written through them: no descriptor left open, resize and trim byte-exact, errors that name the
file and tell resource exhaustion from disk failure."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from storagecore.file_cache import FileCache, is_resource_exhausted
from storagecore.index import MAPPED, OffsetIndex, TimeIndex
from storagecore.index import base as index_base
from storagecore.native import load_extension

_MAPPING = load_extension("storagecore.index._mapping")
needs_native = pytest.mark.skipif(_MAPPING is None, reason="storagecore.index._mapping not loaded")
ENTRY = struct.Struct(">ii")


def descriptors_of(path: Path) -> list[str]:
    """This process's open descriptors that lead to ``path``."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:
            continue  # the listing's own descriptor, closed since
        if target == str(path) or target.startswith(f"{path} "):
            found.append(name)
    return found


def mappings_of(path: Path) -> int:
    """Lines of /proc/self/maps that map ``path`` (what counts against vm.max_map_count)."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip("\n").endswith(str(path)))


def test_expected_implementation_is_loaded() -> None:
    """CI runs the suite twice; each run must use the implementation it claims to test."""
    forced_python = os.environ.get("STORAGECORE_NO_EXTENSIONS", "") not in ("", "0")
    assert ("python" if forced_python else "c") == index_base.IMPLEMENTATION
    assert MAPPED is not forced_python


@needs_native
def test_a_mapping_holds_no_descriptor_and_writes_reach_the_file(tmp_path: Path) -> None:
    assert _MAPPING is not None
    path = tmp_path / "0.index"
    path.write_bytes(bytes(32))
    mapping = _MAPPING.Mapping(path)
    assert descriptors_of(path) == [] and mappings_of(path) == 1
    assert len(mapping) == mapping.length == 32 and mapping.path == str(path)
    ENTRY.pack_into(mapping, 8, 5, 700)
    assert path.read_bytes()[8:16] == ENTRY.pack(5, 700), "MAP_SHARED: the page cache's bytes"
    mapping.flush()
    mapping.resize(48)
    assert path.stat().st_size == 48 == len(mapping)
    assert bytes(memoryview(mapping)[8:16]) == ENTRY.pack(5, 700), "kept across a resize"
    mapping.resize(16)
    assert path.read_bytes() == bytes(8) + ENTRY.pack(5, 700)
    mapping.resize(0)
    assert len(mapping) == 0 and bytes(memoryview(mapping)) == b"" and mappings_of(path) == 0
    assert descriptors_of(path) == []
    mapping.close()
    assert mapping.closed and mappings_of(path) == 0


@needs_native
def test_a_mapping_in_use_is_neither_resized_nor_closed(tmp_path: Path) -> None:
    assert _MAPPING is not None
    path = tmp_path / "0.timeindex"
    path.write_bytes(bytes(24))
    mapping = _MAPPING.Mapping(path)
    with memoryview(mapping) as view:
        with pytest.raises(BufferError, match="0.timeindex.*1 buffers use it"):
            mapping.resize(12)
        with pytest.raises(BufferError, match="0.timeindex"):
            mapping.close()
        view[0] = 7
    mapping.resize(12)
    mapping.close()
    mapping.close()  # twice is fine
    with pytest.raises(ValueError, match="0.timeindex: the mapping is closed"):
        memoryview(mapping)
    with pytest.raises(ValueError, match="closed"):
        mapping.resize(24)
    assert path.read_bytes() == b"\x07" + bytes(11)


@needs_native
def test_mapping_errors_name_the_file_and_keep_their_errno(tmp_path: Path) -> None:
    assert _MAPPING is not None
    missing = tmp_path / "missing.index"
    with pytest.raises(FileNotFoundError) as caught:
        _MAPPING.Mapping(missing)
    assert caught.value.filename == str(missing)
    path = tmp_path / "1.index"
    path.write_bytes(bytes(16))
    mapping = _MAPPING.Mapping(path)
    mapping.path = tmp_path / "renamed.index"  # a rename the file did not see
    with pytest.raises(FileNotFoundError, match="renamed.index"):
        mapping.resize(8)
    assert not mapping.closed and len(mapping) == 16, "a failed open changes nothing"
    with pytest.raises(ValueError, match="negative"):
        mapping.resize(-1)
    mapping.close()


@contextlib.contextmanager
def descriptors_exhausted() -> Iterator[None]:
    """EMFILE for every open until the end of the block: the soft limit lowered to the lowest
    free descriptor and the free ones below it taken."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    taken: list[int] = []
    try:
        limit = os.open(os.devnull, os.O_RDONLY)
        taken.append(limit)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit + 1, hard))
        while True:
            try:
                taken.append(os.open(os.devnull, os.O_RDONLY))
            except OSError as exc:
                assert exc.errno == errno.EMFILE
                break
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@needs_native
def test_emfile_on_map_is_a_resource_error(tmp_path: Path) -> None:
    assert _MAPPING is not None
    path = tmp_path / "2.index"
    path.write_bytes(bytes(16))
    mapping = _MAPPING.Mapping(path)
    with descriptors_exhausted():
        with pytest.raises(OSError) as on_map:
            _MAPPING.Mapping(path)
        with pytest.raises(OSError) as on_resize:
            mapping.resize(32)
    for caught in (on_map, on_resize):
        assert caught.value.errno == errno.EMFILE and is_resource_exhausted(caught.value)
        assert caught.value.filename == str(path)
    assert len(mapping) == 16 and path.stat().st_size == 16, "nothing changed"
    mapping.resize(32)
    assert len(mapping) == 32
    mapping.close()


def test_an_index_written_to_holds_no_descriptor_and_is_mapped_while_written(
    tmp_path: Path,
) -> None:
    cache = FileCache(16)
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 1 << 20, cache=cache)
    time_index = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 1 << 20, cache=cache)
    for n in range(1, 5000):
        index.append(n, n * 10)
        time_index.maybe_append(1_000 + n, n)
    if not MAPPED:  # written with pwrite through the cache, which holds the idle descriptors
        assert cache.stats().open_files == 2
        cache.shed(1.0)
    assert cache.stats().open_files == 0
    for path in (index.path, time_index.path):
        assert descriptors_of(path) == []
        assert mappings_of(path) == (1 if MAPPED else 0)
    assert index.mapped is MAPPED and index.lookup(2500).position == 25000
    assert time_index.lookup(1_000 + 4000).offset == 4000
    index.flush()
    time_index.flush()
    assert index.path.read_bytes()[: 8 * 3] == b"".join(ENTRY.pack(n, n * 10) for n in (1, 2, 3))
    # The roll's trim: exactly the entries written, unmapped (an inactive index is read).
    index.trim_to_valid_size()
    time_index.trim_to_valid_size()
    assert not index.mapped and mappings_of(index.path) == 0 == mappings_of(time_index.path)
    assert index.path.stat().st_size == 4999 * 8 and time_index.path.stat().st_size == 4999 * 12
    assert index.lookup(4999).position == 49990 and not index.mapped, "reads do not map"
    expected = b"".join(ENTRY.pack(n, n * 10) for n in range(1, 5000))
    assert index.path.read_bytes() == expected


def test_resize_and_reset_of_a_mapped_index_keep_kafkas_bytes(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 64 * 8)
    for n in range(1, 11):
        index.append(100 + n, n * 100)
    index.resize(32 * 8)  # Kafka's resize of the active index: the entries stay
    assert index.path.stat().st_size == 32 * 8 and index.max_entries == 32
    index.append(111, 1100)
    index.truncate_to(106)
    index.append(107, 1150)
    index.trim_to_valid_size()
    kept = [(n, n * 100) for n in range(1, 6)] + [(7, 1150)]
    assert index.path.read_bytes() == b"".join(ENTRY.pack(*e) for e in kept)
    index.resize(16 * 8)  # a truncated log's segment becomes active again
    index.append(108, 1200)
    assert index.entries == 7 and index.mapped is MAPPED
    index.reset()
    assert index.entries == 0 and index.path.stat().st_size == 64 * 8
    index.append(101, 0)
    index.close()
    assert index.path.read_bytes() == ENTRY.pack(1, 0)
    assert descriptors_of(index.path) == [] and mappings_of(index.path) == 0


def test_a_renamed_mapped_index_resizes_under_its_new_name(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000000.index.cleaned", 0, 16 * 8)
    index.append(3, 30)
    index.rename_to(tmp_path / "00000000000000000000.index.swap")
    index.append(4, 40)
    index.trim_to_valid_size()
    assert not (tmp_path / "00000000000000000000.index.cleaned").exists()
    swap = tmp_path / "00000000000000000000.index.swap"
    assert swap.read_bytes() == ENTRY.pack(3, 30) + ENTRY.pack(4, 40)
    index.close()


# Run in a child process: the address-space limit that makes mmap fail with ENOMEM would fail
# the test process's own allocations too.
_ENOMEM_CHILD = """
import errno, resource, sys
from pathlib import Path
from storagecore.file_cache import is_resource_exhausted
from storagecore.index import OffsetIndex

index = OffsetIndex(Path(sys.argv[1]), 0, 64 * 8)
index.append(1, 10)
assert index.mapped
with open("/proc/self/status") as status:
    vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, ((vm_kib << 10) + (4 << 20), hard))
try:
    index.resize(64 << 20)  # truncated to 64 MiB, then too large to map
except OSError as exc:
    assert exc.errno == errno.ENOMEM and is_resource_exhausted(exc), exc
    assert str(index.path) in str(exc), exc
else:
    raise AssertionError("the mapping did not fail")
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
assert not index.mapped and index.length_bytes == Path(sys.argv[1]).stat().st_size == 64 << 20
assert index.max_entries == 8 << 20 and index.entries == 1
index.append(2, 20)  # mapped again by the next write
assert index.mapped and index.lookup(2).position == 20
index.close()
assert Path(sys.argv[1]).read_bytes() == bytes.fromhex("000000010000000a0000000200000014")
print("ok")
"""


@needs_native
def test_enomem_when_a_resize_maps_again_leaves_a_consistent_unmapped_index(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ENOMEM_CHILD, str(tmp_path / "00000000000000000000.index")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
