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


# -- reading ---------------------------------------------------------------------------------


def decode(fields: Sequence[Field], reader: Reader, version: int, flexible: bool) -> dict[str, Any]:
    """One struct of ``fields`` at ``version`` (and its tagged fields when flexible)."""
    out: dict[str, Any] = {}
    for field in fields:
        if field.tag is None and version in field.versions:
            out[field.name] = _read(field, reader, version, flexible)
        else:
            out[field.name] = field.default_value()
    if flexible:
        tagged = {f.tag: f for f in fields if f.tag is not None and version in f.versions}
        seen: set[int] = set()
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            if tag in seen:
                raise ProtocolError(f"tagged field {tag} appears twice")
            seen.add(tag)
            body = reader.take(size, f"tagged field {tag}")
            tagged_field = tagged.get(tag)
            if tagged_field is not None:
                out[tagged_field.name] = _read(tagged_field, Reader(body), version, True)
    return out


def _read(field: Field, reader: Reader, version: int, flexible: bool) -> Any:
    nullable = version in field.nullable
    if field.type.startswith("[]"):
        count = reader.uvarint() - 1 if flexible else reader.int32()
        if count < 0:
            if not nullable:
                raise ProtocolError(f"{field.name}: null array is not allowed")
            return None
        if count > reader.remaining:
            raise ProtocolError(f"{field.name}: array of {count} items in {reader.remaining} bytes")
        element = field.type[2:]
        if not element:
            return [decode(field.fields, reader, version, flexible) for _ in range(count)]
        return [_read_primitive(element, field.name, reader, flexible, False) for _ in range(count)]
    if field.type == "{}":
        return decode(field.fields, reader, version, flexible)
    return _read_primitive(field.type, field.name, reader, flexible, nullable)


def _read_primitive(type_: str, name: str, reader: Reader, flexible: bool, nullable: bool) -> Any:
    if type_ in ("string", "bytes", "records"):
        size = (
            reader.uvarint() - 1
            if flexible
            else (reader.int16() if type_ == "string" else reader.int32())
        )
        if size < 0:
            if not nullable and type_ != "records":
                raise ProtocolError(f"{name}: null {type_} is not allowed")
            return None
        raw = reader.take(size, name)
        return Reader.decode_text(raw, name) if type_ == "string" else bytes(raw)
    if type_ == "int32":
        return reader.int32()
    if type_ == "int16":
        return reader.int16()
    if type_ == "int64":
        return reader.int64()
    if type_ == "int8":
        return reader.int8()
    if type_ == "bool":
        return reader.boolean()
    if type_ == "uint16":
        return reader.int16() & 0xFFFF
    if type_ == "uuid":
        return uuid.UUID(bytes=bytes(reader.take(16, name)))
    assert type_ == "float64", type_
    return reader.float64()


# -- writing ---------------------------------------------------------------------------------


def encode(
    fields: Sequence[Field],
    writer: Writer,
    version: int,
    flexible: bool,
    values: Mapping[str, Any],
) -> Writer:
    """Write one struct of ``fields`` at ``version`` from ``values`` (missing: defaults)."""
    tagged: list[tuple[int, Writer]] = []
    for field in fields:
        if version not in field.versions:
            continue
        value = values.get(field.name, _MISSING)
        if field.tag is not None:
            if value is _MISSING or value == field.default_value():
                continue
            if flexible:
                tagged.append((field.tag, _write(field, Writer(), version, True, value)))
            continue
        if value is _MISSING:
            value = field.default_value()
        _write(field, writer, version, flexible, value)
    if flexible:
        writer.uvarint(len(tagged))
        for tag, body in sorted(tagged, key=lambda item: item[0]):
            writer.uvarint(tag).uvarint(body.size).extend(body)
    return writer


_MISSING: Final = object()


def _write(field: Field, writer: Writer, version: int, flexible: bool, value: Any) -> Writer:
    nullable = version in field.nullable
    if field.type.startswith("[]"):
        if value is None:
            if not nullable:
                raise ValueError(f"{field.name}: null array at v{version}")
            return writer.array_length(None, compact=flexible)
        writer.array_length(len(value), compact=flexible)
        element = field.type[2:]
        for item in value:
            if not element:
                encode(field.fields, writer, version, flexible, item)
            else:
                _write_primitive(element, field.name, writer, flexible, False, item)
        return writer
    if field.type == "{}":
        return encode(field.fields, writer, version, flexible, value)
    return _write_primitive(field.type, field.name, writer, flexible, nullable, value)


def _write_primitive(  # noqa: PLR0917 - private, one caller
    type_: str, name: str, writer: Writer, flexible: bool, nullable: bool, value: Any
) -> Writer:
    if type_ == "string":
        if value is None and not nullable:
            raise ValueError(f"{name}: null string")
        if flexible:
            return writer.compact_nullable_string(value)
        return writer.nullable_string(value)
    if type_ in ("bytes", "records"):
        if value is None and not nullable and type_ == "bytes":
            raise ValueError(f"{name}: null bytes")
        if flexible:
            return writer.compact_nullable_bytes(value)
        return writer.nullable_bytes(value)
    write: Callable[[Any], Writer] = {
        "int8": writer.int8,
        "int16": writer.int16,
        "int32": writer.int32,
        "int64": writer.int64,
        "bool": writer.boolean,
        "uint16": lambda v: writer.int16(v - 0x10000 if v >= 0x8000 else v),
        "uuid": lambda v: writer.raw(v.bytes),
        "float64": writer.float64,
    }[type_]
    return write(value)
