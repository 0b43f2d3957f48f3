"""Columnar decode rate: the C decoder, the pure-Python reference and today's record-by-record
decode, over the same bytes.

    .venv/bin/python benchmarks/bench_columns.py [--records 1000000] [--python-records N]

The log: ``--records`` records with 16-byte keys and 100-byte values in batches of 100, CreateTime,
one header-less record per key, built in memory once per codec (none and lz4). Decoded:

* ``c all`` / ``c key-only`` / ``c count-only``: storagecore.records._native.decode_columns over
  the whole region (every column; the key column only; no column, which still validates every
  batch and walks every record);
* ``python all`` / ``python key-only``: the reference storagecore.records._columns_py over the
  first ``--python-records`` records (default: all of them; it is slow);
* ``records()``: what readers do today, RecordBatch.validate() + RecordBatch.records() per batch,
  keeping the Record objects.

Printed per line: rows/s, MB/s of the region as stored and of the same records uncompressed
(the ``none`` region's size), best of three runs for the C decoder, one run for the others, and
the ratio to ``records()``. No assertions: figures to read.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from storagecore import Compression, NewRecord, build_batch
from storagecore.native import load_extension
from storagecore.records import _columns_py, columns
from storagecore.records.batch import iter_complete_batches
from storagecore.records.codecs import DEFAULT_MAX_OUTPUT_BYTES

BATCH_RECORDS = 100


def build_region(records: int, codec: Compression) -> tuple[bytes, int]:
    """The log's bytes and the byte length of its first ``records`` records' batches."""
    value = bytes(range(100))
    parts = []
    for first in range(0, records, BATCH_RECORDS):
        batch = [
            NewRecord(key=b"key-%012d" % (first + i), value=value, timestamp=first + i)
            for i in range(min(BATCH_RECORDS, records - first))
        ]
        parts.append(build_batch(batch, base_offset=first, compression=codec))
    return b"".join(parts), len(parts)


def prefix_bytes(region: bytes, records: int) -> int:
    """Bytes of the whole batches holding the first ``records`` records."""
    end = 0
    seen = 0
    for position, batch in iter_complete_batches(region):
        if seen >= records:
            break
        seen += batch.records_count
        end = position + batch.size_bytes
    return end


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    best = float("inf")
    rows = 0
    for _ in range(runs):
        start = time.perf_counter()
        rows = fn()
        best = min(best, time.perf_counter() - start)
    return best, rows


def record_by_record(region: bytes) -> int:
    rows = 0
    for _position, batch in iter_complete_batches(region):
        batch.validate()
        rows += len(batch.records())
    return rows


def report(
    label: str, seconds: float, rows: int, sizes: tuple[int, int], baseline: float | None
) -> float:
    stored, plain = sizes
    rate = rows / seconds
    ratio = "" if baseline is None else f"  {rate / baseline:7.1f}x records()"
    print(
        f"  {label:<16} {rate / 1e6:7.2f} M rows/s  {stored / seconds / 1e6:8.1f} MB/s stored"
        f"  {plain / seconds / 1e6:8.1f} MB/s uncompressed{ratio}"
    )
    return rate


def bench_codec(codec: Compression, records: int, python_records: int, plain_size: int) -> None:
    native = load_extension("storagecore.records._native")
    names = columns.COLUMN_NAMES
    limit = DEFAULT_MAX_OUTPUT_BYTES
    decompress = columns._decompress
    region, batches = build_region(records, codec)
    size = len(region)
    print(f"{codec.config_name}: {records} records, {batches} batches, {size / 1e6:.1f} MB stored")
    seconds, rows = best_of(1, lambda: record_by_record(region))
    baseline = report("records()", seconds, rows, (size, plain_size), None)
    if native is None:
        print("  (storagecore.records._native is not built or is disabled: no C figures)")
    else:
        for label, wanted in (("c all", names), ("c key-only", ("key",)), ("c count-only", ())):
            seconds, rows = best_of(
                3,
                lambda wanted=wanted: native.decode_columns(
                    region, 0, size, wanted, None, None, False, limit, decompress
                )[0],
            )
            report(label, seconds, rows, (size, plain_size), baseline)
    end = prefix_bytes(region, python_records)
    share = end / size
    for label, wanted in (("python all", names), ("python key-only", ("key",))):
        seconds, rows = best_of(
            1,
            lambda wanted=wanted: _columns_py.decode_columns(
                region, 0, end, wanted, None, None, False, limit, decompress
            )[0],
        )
        report(label, seconds, rows, (end, round(plain_size * share)), baseline)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--python-records", type=int, default=None)
    args = parser.parse_args()
    print(f"decode_columns implementation loaded by storagecore: {columns.IMPLEMENTATION}")
    plain_size = len(build_region(args.records, Compression.NONE)[0])
    for codec in (Compression.NONE, Compression.LZ4):
        bench_codec(codec, args.records, args.python_records or args.records, plain_size)


if __name__ == "__main__":
    main()
