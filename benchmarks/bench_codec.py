"""The worker's message codec beside kio's, on the requests and responses a consumer group
and a producer exchange with the worker.

    .venv/bin/python benchmarks/bench_codec.py [--records-kib 16]

For Produce, Fetch, Metadata, ListOffsets, OffsetCommit, OffsetFetch, JoinGroup, SyncGroup and
Heartbeat at the newest version the worker serves (what Kafka's Java client 4.3 and librdkafka
negotiate with it): a request and a response are filled from the worker's own declarations
(:mod:`storageworker.kafka.messages`): one topic with one partition, names of a few bytes, and
``--records-kib`` KiB of records in Produce requests and Fetch responses; the worker's codec
writes them. Then, in one run, each of:

* request decode: the worker's ``schema.decode`` (into dicts) against kio's native
  ``entity_reader`` (into kio's frozen dataclasses), on the same bytes;
* response encode: the worker's ``schema.encode`` (its parts joined, as the server does) against
  kio's ``entity_writer`` into a ``BytesIO``, for the same response (kio's object is read back
  from the worker's bytes by kio's reader, so both write the same values).

Each codec must read the other's bytes: kio's re-encoding of each request is checked byte for
byte against the worker's. Printed: microseconds per call (the best of five timings) and
worker / kio. The machine is shared: timings are noisy, ratios of one run are what count.
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import timeit
from typing import Any

from kio.serial import entity_reader, entity_writer

from storageworker.kafka import messages
from storageworker.kafka.schema import Field, Message, decode, encode
from storageworker.kafka.wire import Reader, Writer

#: (message, version): the newest version the worker serves for each API in the mix.
MIX = (
    (messages.PRODUCE, 9),
    (messages.FETCH, 12),
    (messages.METADATA, 12),
    (messages.LIST_OFFSETS, 7),
    (messages.OFFSET_COMMIT, 8),
    (messages.OFFSET_FETCH, 7),
    (messages.JOIN_GROUP, 9),
    (messages.SYNC_GROUP, 5),
    (messages.HEARTBEAT, 4),
)
SAMPLE_INTS = {"int8": 1, "int16": 1, "int32": 7, "int64": 1234567, "uint16": 1}


def fill(fields: tuple[Field, ...], version: int, records: bytes) -> dict[str, Any]:
    """A message's values for ``version``: one element per array, sample values, no tagged
    fields (they keep their defaults)."""
    value: dict[str, Any] = {}
    for field in fields:
        if version not in field.versions or field.tag is not None:
            continue
        element = field.type.removeprefix("[]")
        if field.type in ("[]", "{}"):
            inner = fill(field.fields, version, records)
            value[field.name] = [inner] if field.type == "[]" else inner
            continue
        if element == "records":
            sample: Any = records
        elif element == "string":
            sample = "bench-topic" if "topic" in field.name or field.name == "name" else "bench"
        elif element == "bytes":
            sample = b"x" * 24
        elif element in SAMPLE_INTS:
            sample = SAMPLE_INTS[element]
        else:
            sample = field.default_value()
        value[field.name] = [sample] if field.type.startswith("[]") else sample
    return value


def kio_type(message: Message, version: int, side: str) -> type[Any]:
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", message.name).lower()
    module = importlib.import_module(f"kio.schema.{snake}.v{version}.{side}")
    cls: type[Any] = getattr(module, f"{message.name}{side.capitalize()}")
    return cls


def ours_encode(fields: Any, version: int, flexible: bool, value: dict[str, Any]) -> bytes:
    parts = encode(fields, Writer(), version, flexible, value).parts
    return b"".join(part for part in parts if isinstance(part, bytes))


def best_us(call: Any, number: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def measure(
    message: Message, version: int, records: bytes, number: int
) -> tuple[float, float, float, float]:
    """Microseconds per call: worker decode, kio decode, worker encode, kio encode."""
    flexible = message.is_flexible(version)
    request = ours_encode(
        message.request, version, flexible, fill(message.request, version, records)
    )
    response = ours_encode(
        message.response, version, flexible, fill(message.response, version, records)
    )
    read_request = entity_reader(kio_type(message, version, "request"))
    read_response = entity_reader(kio_type(message, version, "response"))
    write_request = entity_writer(kio_type(message, version, "request"))
    write_response = entity_writer(kio_type(message, version, "response"))
    kio_request, size = read_request(request, 0)
    assert size == len(request), (message.name, size, len(request))
    kio_response, size = read_response(response, 0)
    assert size == len(response), (message.name, size, len(response))
    again = io.BytesIO()
    write_request(again, kio_request)
    assert again.getvalue() == request, f"{message.name} v{version}: kio wrote other bytes"
    ours_value = decode(message.response, Reader(response), version, flexible)

    def kio_write(entity: Any = kio_response, write: Any = write_response) -> bytes:
        out = io.BytesIO()
        write(out, entity)
        return out.getvalue()

    assert kio_write() == response, f"{message.name} v{version}: kio's response differs"
    figures = (
        best_us(lambda: decode(message.request, Reader(request), version, flexible), number),
        best_us(lambda: read_request(request, 0), number),
        best_us(lambda: ours_encode(message.response, version, flexible, ours_value), number),
        best_us(kio_write, number),
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records-kib", type=int, default=16)
    parser.add_argument("--number", type=int, default=2000, help="calls per timing")
    args = parser.parse_args()
    records = bytes(range(256)) * (args.records_kib * 4)
    print(f"{'message':<18} {'request decode µs':>26} {'response encode µs':>27}")
    print(f"{'':<18} {'worker':>8} {'kio':>7} {'ratio':>7}   {'worker':>8} {'kio':>7} {'ratio':>7}")
    totals = [0.0, 0.0, 0.0, 0.0]
    for message, version in MIX:
        figures = measure(message, version, records, args.number)
        totals = [t + x for t, x in zip(totals, figures, strict=True)]
        print(
            f"{message.name + ' v' + str(version):<18} {figures[0]:8.2f} {figures[1]:7.2f} "
            f"{figures[0] / figures[1]:7.1f}   {figures[2]:8.2f} {figures[3]:7.2f} "
            f"{figures[2] / figures[3]:7.2f}",
            flush=True,
        )
    print(
        f"{'all nine':<18} {totals[0]:8.2f} {totals[1]:7.2f} {totals[0] / totals[1]:7.1f}   "
        f"{totals[2]:8.2f} {totals[3]:7.2f} {totals[2] / totals[3]:7.2f}"
    )


if __name__ == "__main__":
    main()
