/* The cleaner's view of v2 records: parse an uncompressed payload into record_t's, and
 * re-encode kept records as encode_record (storagecore/records/memory_records_builder.py)
 * does. Included by storagecore/cleaner/_native.c only. The byte layout and varints are storagecore/records/
 * _layout.h's; the record framing is the one record walker, storagecore/records/_walker.h.
 */
#ifndef STORAGECORE_CLEANER_RECORDS_H
#define STORAGECORE_CLEANER_RECORDS_H
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_layout.h"
#include "../records/_walker.h"
#include "_siphash.h"

#define HASH_BYTES SIPHASH_OUT_BYTES

/* ---- record framing ---------------------------------------------------------------------- */

/* One record of a payload, as the reference decoder would see it. */
typedef struct {
    int64_t offset_delta;
    int64_t offset;    /* base offset + offset delta */
    int64_t timestamp; /* resolved: base timestamp + delta, or the LogAppendTime */
    const uint8_t *key;
    int64_t key_length; /* < 0: null key */
    const uint8_t *value;
    int64_t value_length; /* < 0: null value (a tombstone) */
    const uint8_t *headers; /* just after the header count */
    int64_t header_count;
    Py_ssize_t headers_bytes;
    /* reparse_records: where the timestamp delta starts and the record ends (timestamp and
     * headers are read by complete_record, for the records a rebuild writes) */
    const uint8_t *timestamp_at, *end;
    int known;  /* filter: the key's slot came from the map pass's positions (no digest) */
    int known_probes; /* ... and the probes its lookup takes */
    uint8_t digest[HASH_BYTES];
    Py_ssize_t first_position; /* byte position of the digest's first slot in the map */
} record_t;

typedef struct {
    int64_t base_offset, base_timestamp;
    int log_append; /* LogAppendTime batch: every record's timestamp is log_append_time */
    int64_t log_append_time;
} batch_info_t;

/* Fill records[0..count) from an uncompressed payload. 0 when the reference decoder would
 * accept it (and every header key is ASCII, so that its str round trip is byte-exact); -1
 * otherwise. keys_only (the map pass): the same checks, but only the offsets and keys are
 * stored. */
static inline __attribute__((always_inline)) int parse_records_as(
    const uint8_t *buf, Py_ssize_t end, Py_ssize_t count, const batch_info_t *info,
    record_t *records, int keys_only) {
    ptrdiff_t pos = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        record_t *r = &records[index];
        walked_record_t w;
        if (walk_record(buf, &pos, end, &w) != WALK_OK) return -1;
        r->offset_delta = w.offset_delta;
        if (__builtin_add_overflow(info->base_offset, w.offset_delta, &r->offset)) return -1;
        int64_t timestamp;
        if (info->log_append) {
            timestamp = info->log_append_time;
        } else if (__builtin_add_overflow(info->base_timestamp, w.timestamp_delta, &timestamp)) {
            return -1;
        }
        r->key = w.key;
        r->key_length = w.key_length;
        if (!keys_only) {
            r->timestamp = timestamp;
            r->value = w.value;
            r->value_length = w.value_length;
            r->headers = w.headers;
            r->header_count = w.header_count;
            r->headers_bytes = w.headers_bytes;
        }
        ptrdiff_t header_pos = 0;
        for (int64_t h = 0; h < w.header_count; h++) {
            walked_header_t header;
            walk_header(w.headers, &header_pos, w.headers_bytes, &header);
            for (int64_t i = 0; i < header.key_length; i++) {
                if (header.key[i] & 0x80) return -1;
            }
        }
    }
    return pos == end ? 0 : -1;
}

static int parse_records(const uint8_t *buf, Py_ssize_t end, Py_ssize_t count,
                         const batch_info_t *info, record_t *records) {
    return parse_records_as(buf, end, count, info, records, 0);
}

static int parse_record_keys(const uint8_t *buf, Py_ssize_t end, Py_ssize_t count,
                             const batch_info_t *info, record_t *records) {
    return parse_records_as(buf, end, count, info, records, 1);
}

/* ---- records parsed before ---------------------------------------------------------------- */

/* A varint / varlong of bytes that read_varint / read_varlong accepted before: the same value,
 * without their bounds and length checks (the filter pass, on a batch the map pass parsed). */
static inline __attribute__((always_inline)) int64_t reread_varint(const uint8_t *buf,
                                                                   ptrdiff_t *pos) {
    uint32_t value = buf[(*pos)++];
    if (value & 0x80) { /* two bytes at least (a record's length, a 100-byte value's) */
        uint32_t b = buf[(*pos)++];
        value = (value & 0x7F) | (b & 0x7F) << 7;
        int shift = 14;
        while (b & 0x80) {
            b = buf[(*pos)++];
            value |= (b & 0x7F) << shift;
            shift += 7;
        }
    }
    return (int64_t)(int32_t)((value >> 1) ^ (uint32_t)(-(int32_t)(value & 1)));
}

static inline __attribute__((always_inline)) int64_t reread_varlong(const uint8_t *buf,
                                                                    ptrdiff_t *pos) {
    uint64_t value = buf[(*pos)++];
    if (value & 0x80) {
        value &= 0x7F;
        int shift = 7;
        for (;;) {
            uint8_t b = buf[(*pos)++];
            value |= (uint64_t)(b & 0x7F) << shift;
            if (!(b & 0x80)) break;
            shift += 7;
        }
    }
    return (int64_t)((value >> 1) ^ (uint64_t)(-(int64_t)(value & 1)));
}

/* parse_records of a payload that parse_records accepted before, with the same batch_info_t
 * (the map pass parsed these very bytes: see filter_region's `checked`), without the checks
 * that cannot fail again (framing, overflow, header keys), and without what the retention
 * decisions do not read: the timestamp and the headers are left to complete_record. */
static void reparse_records(const uint8_t *buf, Py_ssize_t count, const batch_info_t *info,
                            record_t *records) {
    ptrdiff_t pos = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        record_t *r = &records[index];
        ptrdiff_t p = pos;
        int64_t length = reread_varint(buf, &p);
        ptrdiff_t body_end = p + (ptrdiff_t)length;
        p += 1; /* attributes */
        r->timestamp_at = buf + p;
        while (buf[p++] & 0x80) { /* the timestamp delta's bytes */
        }
        r->offset_delta = reread_varint(buf, &p);
        r->offset = info->base_offset + r->offset_delta;
        r->key_length = reread_varint(buf, &p);
        r->key = buf + p;
        if (r->key_length > 0) p += (ptrdiff_t)r->key_length;
        r->value_length = reread_varint(buf, &p);
        r->value = buf + p;
        r->end = buf + body_end;
        pos = body_end;
    }
}

/* The rest of a record that reparse_records read: its timestamp and headers, as
 * parse_records sets them. */
static inline void complete_record(record_t *r, const batch_info_t *info) {
    ptrdiff_t p = 0;
    int64_t timestamp_delta = reread_varlong(r->timestamp_at, &p);
    r->timestamp = info->log_append ? info->log_append_time
                                    : info->base_timestamp + timestamp_delta;
    const uint8_t *after_value = r->value + (r->value_length > 0 ? r->value_length : 0);
    p = 0;
    r->header_count = reread_varint(after_value, &p);
    r->headers = after_value + p;
    r->headers_bytes = r->end - r->headers;
}

/* ---- encoding kept records --------------------------------------------------------------- */

static inline Py_ssize_t unsigned_varint_size(uint64_t n) {
    Py_ssize_t size = 1;
    while (n >= 0x80) {
        n >>= 7;
        size++;
    }
    return size;
}

static inline uint64_t zigzag32(int64_t v) {
    int32_t x = (int32_t)v;
    return (uint32_t)(((uint32_t)x << 1) ^ (uint32_t)(x >> 31));
}

static inline uint64_t zigzag64(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline uint8_t *put_unsigned(uint8_t *out, uint64_t n) {
    while (n >= 0x80) {
        *out++ = (uint8_t)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *out++ = (uint8_t)n;
    return out;
}

/* Bytes of a field written as a length (-1 for null) and the bytes themselves. */
static inline Py_ssize_t field_size(int64_t length) {
    return length < 0 ? 1 : unsigned_varint_size(zigzag32(length)) + (Py_ssize_t)length;
}

static inline uint8_t *put_field(uint8_t *out, const uint8_t *data, int64_t length) {
    if (length < 0) return put_unsigned(out, zigzag32(-1));
    out = put_unsigned(out, zigzag32(length));
    memcpy(out, data, (size_t)length);
    return out + length;
}

/* The headers of a parsed record re-encoded with minimal varints, as encode_record does. */
static Py_ssize_t headers_size(const record_t *r) {
    Py_ssize_t size = unsigned_varint_size(zigzag32(r->header_count));
    Py_ssize_t pos = 0;
    int64_t length = 0;
    for (int64_t h = 0; h < r->header_count; h++) {
        for (int field = 0; field < 2; field++) {
            read_varint(r->headers, &pos, r->headers_bytes, &length); /* parsed before */
            size += field_size(length);
            if (length > 0) pos += (Py_ssize_t)length;
        }
    }
    return size;
}

static uint8_t *put_headers(uint8_t *out, const record_t *r) {
    out = put_unsigned(out, zigzag32(r->header_count));
    Py_ssize_t pos = 0;
    int64_t length = 0;
    for (int64_t h = 0; h < r->header_count; h++) {
        for (int field = 0; field < 2; field++) {
            read_varint(r->headers, &pos, r->headers_bytes, &length);
            out = put_field(out, r->headers + pos, length);
            if (length > 0) pos += (Py_ssize_t)length;
        }
    }
    return out;
}

/* Upper bound of one record's re-encoding: minimal varints never exceed the originals, except
 * the timestamp delta (up to 10 bytes) and the length prefix (up to 5). */
#define REENCODE_SLACK_BYTES 16

/* encode_record(offset_delta, timestamp_delta, key, value, headers) with its length prefix. */
static uint8_t *put_record(uint8_t *out, const record_t *r, int64_t timestamp_delta) {
    uint64_t ts = zigzag64(timestamp_delta), od = zigzag32(r->offset_delta);
    Py_ssize_t body = 1 + unsigned_varint_size(ts) + unsigned_varint_size(od) +
                      field_size(r->key_length) + field_size(r->value_length) + headers_size(r);
    out = put_unsigned(out, zigzag32(body));
    *out++ = 0; /* attributes */
    out = put_unsigned(out, ts);
    out = put_unsigned(out, od);
    out = put_field(out, r->key, r->key_length);
    out = put_field(out, r->value, r->value_length);
    return put_headers(out, r);
}
#endif
