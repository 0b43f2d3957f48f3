"""Decoding of the protobuf request bodies that client-go's typed clients send (kubectl and
helm): the ``k8s\\0`` envelope, ObjectMeta, and the kinds those tools write with a typed client
here (Namespace, Secret for helm's release records, ConfigMap). Anything else is refused."""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message, in order."""
    fields = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.append((number, wire, value))
    return fields


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _map(entries: list[bytes], *, binary: bool = False) -> dict[str, str]:
    result = {}
    for entry in entries:
        parts = {n: v for n, _, v in _fields(entry)}
        key = parts.get(1, b"").decode()
        value = parts.get(2, b"")
        result[key] = base64.b64encode(value).decode() if binary else value.decode()
    return result


def _metadata(data: bytes) -> dict[str, Any]:
    fields = _fields(data)
    meta: dict[str, Any] = {}
    names = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for number, _, value in fields:
        if number in names:
            meta[names[number]] = value.decode()
    labels = [v for n, _, v in fields if n == 11]
    annotations = [v for n, _, v in fields if n == 12]
    finalizers = [v.decode() for n, _, v in fields if n == 14]
    if labels:
        meta["labels"] = _map(labels)
    if annotations:
        meta["annotations"] = _map(annotations)
    if finalizers:
        meta["finalizers"] = finalizers
    return meta


def decode(body: bytes) -> dict[str, Any]:
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf body")
    envelope = {n: v for n, _, v in _fields(body[len(MAGIC) :])}
    type_meta = {n: v.decode() for n, _, v in _fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    fields = _fields(envelope.get(2, b""))
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    for number, _, value in fields:
        if number == 1:
            obj["metadata"] = _metadata(value)
    if kind == "Namespace":
        return obj
    if kind == "Secret":
        data = [v for n, _, v in fields if n == 2]
        if data:
            obj["data"] = _map(data, binary=True)
        for number, _, value in fields:
            if number == 3:
                obj["type"] = value.decode()
        return obj
    if kind == "ConfigMap":
        data = [v for n, _, v in fields if n == 2]
        if data:
            obj["data"] = _map(data)
        return obj
    raise ValueError(f"protobuf bodies of kind {kind!r} are not supported by the fake")
