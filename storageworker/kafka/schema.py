"""Kafka message schemas and the one codec that reads and writes them at any version.

Kafka describes every request and response as a list of fields, each present in a range of
versions, possibly nullable in a range, possibly *tagged* (optional, written only when it
differs from its default, in flexible versions only). From a message's first flexible version
on, strings, bytes and arrays use compact (unsigned varint length + 1) encodings and every
struct ends with its tagged fields. :mod:`~storageworker.kafka.messages` declares the messages
the worker serves in that shape, transcribed from Kafka's message specifications; this module
turns a declaration into bytes and back, so a new version of an API is a line in a table, not
new code.

Decoded messages are plain dicts keyed by the fields' snake_case names; a field absent in the
version decoded holds its default. Writing takes such a dict; a missing key writes the default.
A short, oversized or malformed buffer raises :class:`~storageworker.kafka.wire.ProtocolError`
naming the field.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from storageworker.kafka.wire import ProtocolError, Reader, Writer

INFINITE: Final = 1 << 15
PRIMITIVES: Final = frozenset(
    {"int8", "int16", "int32", "int64", "uint16", "bool", "float64", "uuid", "string", "bytes"}
    | {"records"}
)
_DEFAULTS: Final[dict[str, Any]] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "bool": False,
    "float64": 0.0,
    "uuid": uuid.UUID(int=0),
    "string": "",
    "bytes": b"",
    "records": None,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @classmethod
    def parse(cls, text: str) -> Versions:
        """Kafka's notation: ``"3+"``, ``"0-2"``, ``"5"`` or ``"none"``."""
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), INFINITE)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))


NO_VERSIONS: Final = Versions(1, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    """A primitive, ``"[]"`` + a primitive, ``"[]"`` (an array of ``fields``) or ``"{}"``
    (one struct of ``fields``)."""
    versions: Versions
    nullable: Versions = NO_VERSIONS
    tag: int | None = None
    default: Any = None
    fields: tuple[Field, ...] = ()

    def default_value(self) -> Any:
        if self.default is not None:
            return self.default
        if self.type.startswith("[]"):
            return []
        if self.type == "{}":
            return {f.name: f.default_value() for f in self.fields}
        return _DEFAULTS[self.type]


def f(
    name: str,
    type_: str,
    versions: str = "0+",
    *,
    nullable: str = "none",
    tag: int | None = None,
    default: Any = None,
    fields: Sequence[Field] = (),
) -> Field:
    """One field, in the notation of Kafka's message specifications."""
    element = type_[2:] if type_.startswith("[]") else type_
    assert element in PRIMITIVES or (element in ("", "{}") and fields), f"bad type of {name}"
    return Field(
        name,
        type_,
        Versions.parse(versions),
        Versions.parse(nullable),
        tag,
        default,
        tuple(fields),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One API: its key, the versions served and its request and response fields."""

    api_key: int
    name: str
    versions: Versions
    flexible: Versions
    request: tuple[Field, ...]
    response: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 always: a client that does not know our
        # versions yet must be able to read the answer (KIP-511).
        if self.api_key == 18:
            return 0
        return 1 if self.is_flexible(version) else 0


def message(  # noqa: PLR0917 - mirrors the specification's header fields
    api_key: int,
    name: str,
    versions: str,
    flexible: str,
    request: Sequence[Field],
    response: Sequence[Field],
) -> Message:
    return Message(
        api_key,
        name,
        Versions.parse(versions),
        Versions.parse(flexible),
        tuple(request),
        tuple(response),
    )


# -- compiled plans --------------------------------------------------------------------------
#
# A struct's fields are read and written by a plan compiled once per (fields, version,
# flexible): per field a closure that already knows whether the field is present, tagged,
# nullable, compact, and its primitive's reader or writer, so a request pays for its bytes
# only (the Java producer's Produce v9 took 26 us to decode and 30-60 us to answer when each
# field's versions, type and nullability were looked up again per message).

_Decoder = Callable[[Reader], Any]
_Encoder = Callable[[Writer, Any], Any]
#: Plans by the identity of their fields (the entry keeps the fields alive, so an id is never
#: reused while its plan is cached), version and flexibility; cleared past a bound.
_DECODERS: Final[dict[tuple[int, int, bool], tuple[Sequence[Field], _Decoder]]] = {}
_ENCODERS: Final[dict[tuple[int, int, bool], tuple[Sequence[Field], _Encoder]]] = {}
_PLANS_MAX: Final = 4096


def _plan(
    cache: dict[tuple[int, int, bool], tuple[Sequence[Field], Any]],
    compile_: Callable[[Sequence[Field], int, bool], Any],
    fields: Sequence[Field],
    version: int,
    flexible: bool,
) -> Any:
    key = (id(fields), version, flexible)
    entry = cache.get(key)
    if entry is None or entry[0] is not fields:
        if len(cache) >= _PLANS_MAX:
            cache.clear()
        entry = cache[key] = (fields, compile_(fields, version, flexible))
    return entry[1]


# -- reading ---------------------------------------------------------------------------------


def decode(fields: Sequence[Field], reader: Reader, version: int, flexible: bool) -> dict[str, Any]:
    """One struct of ``fields`` at ``version`` (and its tagged fields when flexible)."""
    read: _Decoder = _plan(_DECODERS, _compile_decoder, fields, version, flexible)
    result: dict[str, Any] = read(reader)
    return result


def _compile_decoder(fields: Sequence[Field], version: int, flexible: bool) -> _Decoder:
    steps: list[tuple[str, _Decoder]] = []
    for field in fields:
        if field.tag is None and version in field.versions:
            steps.append((field.name, _compile_read(field, version, flexible)))
        else:
            steps.append((field.name, _default_of(field)))
    tagged = {
        f.tag: (f.name, _compile_read(f, version, True))
        for f in fields
        if f.tag is not None and version in f.versions
    }

    def read_struct(reader: Reader) -> dict[str, Any]:
        out = {name: step(reader) for name, step in steps}
        if flexible:
            count = reader.uvarint()
            if count:
                _read_tagged(reader, count, tagged, out)
        return out

    return read_struct


def _read_tagged(
    reader: Reader, count: int, tagged: dict[int, tuple[str, _Decoder]], out: dict[str, Any]
) -> None:
    seen: set[int] = set()
    for _ in range(count):
        tag, size = reader.uvarint(), reader.uvarint()
        if tag in seen:
            raise ProtocolError(f"tagged field {tag} appears twice")
        seen.add(tag)
        body = reader.take(size, f"tagged field {tag}")
        known = tagged.get(tag)
        if known is not None:
            out[known[0]] = known[1](Reader(body))


def _default_of(field: Field) -> _Decoder:
    value = field.default_value()
    if isinstance(value, (list, dict)):  # a fresh one per message: callers may change it
        return lambda _reader: field.default_value()
    return lambda _reader: value


def _compile_read(field: Field, version: int, flexible: bool) -> _Decoder:
    nullable = version in field.nullable
    name = field.name
    if field.type.startswith("[]"):
        element = field.type[2:]
        item = (
            _compile_decoder(field.fields, version, flexible)
            if not element
            else _compile_primitive_read(element, name, flexible, False)
        )

        def read_array(reader: Reader) -> list[Any] | None:
            count = reader.uvarint() - 1 if flexible else reader.int32()
            if count < 0:
                if not nullable:
                    raise ProtocolError(f"{name}: null array is not allowed")
                return None
            if count > reader.remaining:
                raise ProtocolError(f"{name}: array of {count} items in {reader.remaining} bytes")
            return [item(reader) for _ in range(count)]

        return read_array
    if field.type == "{}":
        return _compile_decoder(field.fields, version, flexible)
    return _compile_primitive_read(field.type, name, flexible, nullable)


def _compile_primitive_read(type_: str, name: str, flexible: bool, nullable: bool) -> _Decoder:
    if type_ in ("string", "bytes", "records"):
        text = type_ == "string"
        size_of: Callable[[Reader], int] = (
            Reader.uvarint if flexible else (Reader.int16 if text else Reader.int32)
        )
        null_allowed = nullable or type_ == "records"

        def read_sized(reader: Reader) -> Any:
            size = size_of(reader) - 1 if flexible else size_of(reader)
            if size < 0:
                if not null_allowed:
                    raise ProtocolError(f"{name}: null {type_} is not allowed")
                return None
            raw = reader.take(size, name)
            return Reader.decode_text(raw, name) if text else bytes(raw)

        return read_sized
    if type_ == "uint16":
        return lambda reader: reader.int16() & 0xFFFF
    if type_ == "uuid":
        return lambda reader: uuid.UUID(bytes=bytes(reader.take(16, name)))
    readers: dict[str, _Decoder] = {
        "int8": Reader.int8,
        "int16": Reader.int16,
        "int32": Reader.int32,
        "int64": Reader.int64,
        "bool": Reader.boolean,
        "float64": Reader.float64,
    }
    return readers[type_]


# -- writing ---------------------------------------------------------------------------------


def encode(
    fields: Sequence[Field],
    writer: Writer,
    version: int,
    flexible: bool,
    values: Mapping[str, Any],
) -> Writer:
    """Write one struct of ``fields`` at ``version`` from ``values`` (missing: defaults)."""
    write: _Encoder = _plan(_ENCODERS, _compile_encoder, fields, version, flexible)
    write(writer, values)
    return writer


_MISSING: Final = object()


def _compile_encoder(fields: Sequence[Field], version: int, flexible: bool) -> _Encoder:
    steps: list[tuple[str, Field, _Encoder]] = []
    tagged: list[tuple[str, Field, _Encoder]] = []
    for field in fields:
        if version not in field.versions:
            continue
        if field.tag is None:
            steps.append((field.name, field, _compile_write(field, version, flexible)))
        elif flexible:
            tagged.append((field.name, field, _compile_write(field, version, True)))
    tagged.sort(key=lambda item: item[1].tag or 0)

    def write_struct(writer: Writer, values: Mapping[str, Any]) -> None:
        for name, field, step in steps:
            value = values.get(name, _MISSING)
            step(writer, field.default_value() if value is _MISSING else value)
        if flexible:
            if not tagged:
                writer.uvarint(0)
                return
            bodies: list[tuple[int, Writer]] = []
            for name, field, step in tagged:
                value = values.get(name, _MISSING)
                if value is _MISSING or value == field.default_value():
                    continue
                body = Writer()
                step(body, value)
                bodies.append((field.tag or 0, body))
            writer.uvarint(len(bodies))
            for tag, body in bodies:
                writer.uvarint(tag).uvarint(body.size).extend(body)

    return write_struct


def _compile_write(field: Field, version: int, flexible: bool) -> _Encoder:
    nullable = version in field.nullable
    name = field.name
    if field.type.startswith("[]"):
        element = field.type[2:]
        item = (
            _compile_encoder(field.fields, version, flexible)
            if not element
            else _compile_primitive_write(element, name, flexible, False)
        )

        def write_array(writer: Writer, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise ValueError(f"{name}: null array at v{version}")
                writer.array_length(None, compact=flexible)
                return
            writer.array_length(len(value), compact=flexible)
            for each in value:
                item(writer, each)

        return write_array
    if field.type == "{}":
        return _compile_encoder(field.fields, version, flexible)
    return _compile_primitive_write(field.type, name, flexible, nullable)


def _compile_primitive_write(type_: str, name: str, flexible: bool, nullable: bool) -> _Encoder:
    if type_ == "string":
        write_string = Writer.compact_nullable_string if flexible else Writer.nullable_string

        def write_text(writer: Writer, value: Any) -> None:
            if value is None and not nullable:
                raise ValueError(f"{name}: null string")
            write_string(writer, value)

        return write_text
    if type_ in ("bytes", "records"):
        write_bytes = Writer.compact_nullable_bytes if flexible else Writer.nullable_bytes
        null_refused = not nullable and type_ == "bytes"

        def write_blob(writer: Writer, value: Any) -> None:
            if value is None and null_refused:
                raise ValueError(f"{name}: null bytes")
            write_bytes(writer, value)

        return write_blob
    writers: dict[str, _Encoder] = {
        "int8": Writer.int8,
        "int16": Writer.int16,
        "int32": Writer.int32,
        "int64": Writer.int64,
        "bool": Writer.boolean,
        "uint16": lambda writer, v: writer.int16(v - 0x10000 if v >= 0x8000 else v),
        "uuid": lambda writer, v: writer.raw(v.bytes),
        "float64": Writer.float64,
    }
    return writers[type_]
