"""Kafka's five compression codecs, with Kafka's exact framing.

* gzip: an RFC 1952 stream; concatenated members are read (Java's GZIPInputStream does).
* snappy: the xerial snappy-java stream framing (16-byte header, then ``[int32 length][raw snappy
  block]`` per 32 KiB of input). A payload without the header is read as one raw snappy block.
* lz4: the LZ4 frame format with **independent** blocks of at most 64 KiB and no content size.
  ``lz4.frame``'s default is linked blocks, which Kafka rejects ("Dependent block stream is
  unsupported"); below 64 KiB liblz4 hides the difference, which is why tests use larger inputs.
  Kafka's default level (9) selects lz4-java's fast compressor; other levels select LZ4 HC.
  Decompressed by the C extension when it can (``_native.lz4_frame_decompress``: such frames,
  block by block into a buffer per thread and one copy into the returned bytes, with the
  system's liblz4 when it is the ``lz4`` package's version), else by ``lz4.frame``, which also
  words every error.
* zstd: a plain zstd frame. Kafka writes frames without a content size, so decompression streams
  (``decompressobj``) instead of asking the frame for its size.

Decompressed output is bounded by ``max_output_bytes`` so a hostile batch cannot exhaust memory.
"""

from __future__ import annotations

import enum
import functools
import struct
import zlib
from collections.abc import Callable
from types import ModuleType
from typing import Final

from storagecore.errors import CorruptRecordError, UnsupportedCompressionError
from storagecore.native import load_extension


class Compression(enum.IntEnum):
    """Codec ids as stored in the low three attribute bits."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def config_name(self) -> str:
        """The name used by ``compression.type`` and the CLI (``none`` for no codec)."""
        return self.name.lower()

    @classmethod
    def from_id(cls, codec_id: int) -> Compression:
        # A dict lookup: every batch read asks (the Enum constructor costs several times more).
        codec = _BY_ID.get(codec_id)
        if codec is None:
            raise UnsupportedCompressionError(
                f"unknown compression codec id {codec_id} (Kafka defines 0..4)"
            )
        return codec

    @classmethod
    def from_name(cls, name: str) -> Compression:
        normalized = {"uncompressed": "none"}.get(name.lower(), name.lower())
        for member in cls:
            if member.config_name == normalized:
                return member
        raise ValueError(f"unknown compression {name!r}: expected none, gzip, snappy, lz4 or zstd")


_BY_ID: Final[dict[int, Compression]] = {codec.value: codec for codec in Compression}


#: Default levels, as Kafka's ``compression.<codec>.level`` defaults.
DEFAULT_LEVELS: Final = {Compression.GZIP: -1, Compression.LZ4: 9, Compression.ZSTD: 3}

#: Upper bound on one batch's decompressed records unless the caller gives another.
DEFAULT_MAX_OUTPUT_BYTES: Final = 256 * 1024 * 1024

_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = struct.Struct(">8sii")  # magic, version, min compatible version
_XERIAL_BLOCK_LENGTH: Final = struct.Struct(">i")
_XERIAL_BLOCK_INPUT_BYTES: Final = 32 * 1024
_LZ4_KAFKA_DEFAULT_LEVEL: Final = 9
assert _XERIAL_HEADER.size == 16


@functools.cache
def _lz4_frame() -> ModuleType:
    """``lz4.frame``, imported on first use (as cramjam): a process that meets no lz4 batch,
    like ``logkeeper clean`` of an uncompressed log, does not pay for the import."""
    import lz4.frame  # noqa: PLC0415

    module: ModuleType = lz4.frame
    return module


_Lz4FrameDecompress = Callable[[bytes | memoryview, int], bytes | None]


@functools.cache
def _native_lz4() -> _Lz4FrameDecompress | None:
    """The extension's LZ4 frame decoder, or None: without the extension, without a liblz4 it
    could load, or when that liblz4 is not the version the ``lz4`` package bundles (then the two
    could disagree on a damaged block; the same version decodes exactly alike)."""
    import lz4  # noqa: PLC0415 (first use, as _lz4_frame)

    native = load_extension("storagecore.records._native")
    if native is None:
        return None
    matches = native.lz4_version() == lz4.library_version_number()
    native.lz4_matches_package(matches)  # the native append's lz4 batches (_lz4_frame.c)
    if not matches:
        return None
    decompress: _Lz4FrameDecompress = native.lz4_frame_decompress
    return decompress


@functools.cache
def _zstandard() -> ModuleType:
    """``zstandard``, imported on first use (see :func:`_lz4_frame`)."""
    import zstandard  # noqa: PLC0415

    module: ModuleType = zstandard
    return module


def compress(codec: Compression, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's producer and broker frame it for ``codec``."""
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        gzip_level = DEFAULT_LEVELS[codec] if level is None else level
        compressor = zlib.compressobj(gzip_level, zlib.DEFLATED, 31)  # 31: gzip header/trailer
        return compressor.compress(data) + compressor.flush()
    if codec is Compression.SNAPPY:
        import cramjam  # noqa: PLC0415 - on first use: its import is 5 ms of every start

        parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
        for start in range(0, len(data), _XERIAL_BLOCK_INPUT_BYTES):
            block = bytes(
                cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_INPUT_BYTES])
            )
            parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec is Compression.LZ4:
        lz4_level = DEFAULT_LEVELS[codec] if level is None else level
        # lz4-java's fast compressor for the default level, HC otherwise (Kafka KIP-390).
        frame_level = 0 if lz4_level == _LZ4_KAFKA_DEFAULT_LEVEL else lz4_level
        return bytes(
            _lz4_frame().compress(
                data,
                compression_level=frame_level,
                block_size=_lz4_frame().BLOCKSIZE_MAX64KB,
                block_linked=False,
                content_checksum=False,
                store_size=False,
            )
        )
    if codec is Compression.ZSTD:
        zstd_level = DEFAULT_LEVELS[codec] if level is None else level
        return bytes(
            _zstandard().ZstdCompressor(level=zstd_level, write_content_size=False).compress(data)
        )
    raise AssertionError(f"unhandled codec {codec!r}")


def decompress(
    codec: Compression, data: bytes | memoryview, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
) -> bytes:
    """Decompress one batch payload; raise :class:`CorruptRecordError` naming the codec."""
    if codec is Compression.NONE:
        return bytes(data)
    try:
        if codec is Compression.GZIP:
            out = _gunzip(bytes(data), max_output_bytes)
        elif codec is Compression.SNAPPY:
            out = _unsnappy(bytes(data), max_output_bytes)
        elif codec is Compression.LZ4:
            out = _unlz4(data, max_output_bytes)
        elif codec is Compression.ZSTD:
            out = _unzstd(bytes(data), max_output_bytes)
        else:
            raise AssertionError(f"unhandled codec {codec!r}")
    except CorruptRecordError:
        raise
    except Exception as exc:  # every codec library has its own error types
        raise CorruptRecordError(f"cannot decompress {codec.config_name} payload: {exc}") from exc
    return out


def _check_size(codec: str, size: int, max_output_bytes: int) -> None:
    if size > max_output_bytes:
        raise CorruptRecordError(
            f"{codec} payload decompresses to more than {max_output_bytes} bytes"
        )


def _gunzip(data: bytes, max_output_bytes: int) -> bytes:
    out = bytearray()
    while data:
        decompressor = zlib.decompressobj(47)  # 47: auto-detect gzip/zlib header
        out += decompressor.decompress(data, max_output_bytes + 1 - len(out))
        _check_size("gzip", len(out), max_output_bytes)
        if not decompressor.eof:
            raise CorruptRecordError("gzip payload is truncated")
        data = decompressor.unused_data
    return bytes(out)


def _unsnappy(data: bytes, max_output_bytes: int) -> bytes:
    import cramjam  # noqa: PLC0415 - on first use: its import is 5 ms of every start

    if not data.startswith(_XERIAL_MAGIC):
        out = bytes(cramjam.snappy.decompress_raw(data))
        _check_size("snappy", len(out), max_output_bytes)
        return out
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("snappy xerial header is truncated")
    # The version fields are ignored: some writers store them little-endian.
    pos = _XERIAL_HEADER.size
    parts: list[bytes] = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError(f"snappy xerial block length truncated at byte {pos}")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CorruptRecordError(f"snappy xerial block at byte {pos - 4} runs past the payload")
        block = bytes(cramjam.snappy.decompress_raw(data[pos : pos + length]))
        total += len(block)
        _check_size("snappy", total, max_output_bytes)
        parts.append(block)
        pos += length
    return b"".join(parts)


#: An lz4 sequence expands at most 255-fold: a payload of at most a 256th of the output bound
#: cannot pass it, so it is decompressed by one library call (about 1 us for a 1.4 KB batch,
#: against about 17 us for the stepped reads below, which guard larger payloads).
_LZ4_WHOLE_CALL_RATIO: Final = 256


def _unlz4(data: bytes | memoryview, max_output_bytes: int) -> bytes:
    native = _native_lz4()
    if native is not None and (decoded := native(data, max_output_bytes)) is not None:
        return decoded
    if len(data) * _LZ4_WHOLE_CALL_RATIO <= max_output_bytes:
        try:
            out: bytes = _lz4_frame().decompress(data)  # the first frame; trailing bytes ignored
            return out
        except RuntimeError:
            pass  # a damaged frame: the stepped reads below say what is wrong with it
    return _unlz4_stepped(bytes(data), max_output_bytes)


def _unlz4_stepped(data: bytes, max_output_bytes: int) -> bytes:
    # Ask for output in growing steps: LZ4FrameDecompressor preallocates max_length, so asking
    # for the whole bound at once costs more than the decompression itself.
    decompressor = _lz4_frame().LZ4FrameDecompressor()
    step = min(max_output_bytes + 1, max(1 << 16, len(data) * 8))
    parts = [decompressor.decompress(data, max_length=step)]
    total = len(parts[0])
    while not decompressor.eof:
        _check_size("lz4", total, max_output_bytes)
        if decompressor.needs_input:
            raise CorruptRecordError("lz4 frame is truncated")
        step = min(max_output_bytes + 1 - total, max(total, 1 << 16))
        chunk = decompressor.decompress(b"", max_length=step)
        parts.append(chunk)
        total += len(chunk)
    _check_size("lz4", total, max_output_bytes)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _unzstd(data: bytes, max_output_bytes: int) -> bytes:
    out = bytearray()
    while data:
        decompressor = _zstandard().ZstdDecompressor().decompressobj()
        out += decompressor.decompress(data)
        _check_size("zstd", len(out), max_output_bytes)
        if not decompressor.eof:
            raise CorruptRecordError("zstd frame is truncated")
        data = decompressor.unused_data
    return bytes(out)
