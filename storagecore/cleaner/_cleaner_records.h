/* The cleaner's view of v2 records: parse an uncompressed payload into record_t's, and
 * re-encode kept records as storagecore/records/batch.py's encode_record does. Included by
 * storagecore/cleaner/_native.c only. The byte layout and varints are storagecore/records/
 * _layout.h's.
 */
#ifndef STORAGECORE_CLEANER_RECORDS_H
#define STORAGECORE_CLEANER_RECORDS_H
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../records/_layout.h"
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
    int wanted; /* whether the pass needs the key's digest */
    uint8_t digest[HASH_BYTES];
} record_t;

typedef struct {
    int64_t base_offset, base_timestamp;
    int log_append; /* LogAppendTime batch: every record's timestamp is log_append_time */
    int64_t log_append_time;
} batch_info_t;

/* Fill records[0..count) from an uncompressed payload. 0 when the reference decoder would
 * accept it (and every header key is ASCII, so that its str round trip is byte-exact); -1
 * otherwise. */
static int parse_records(const uint8_t *buf, Py_ssize_t end, Py_ssize_t count,
                         const batch_info_t *info, record_t *records) {
    Py_ssize_t pos = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        record_t *r = &records[index];
        int64_t length, ts_delta;
        if (read_varint(buf, &pos, end, &length) < 0) return -1;
        if (length < 0 || length > end - pos) return -1;
        Py_ssize_t body_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes, unused; read_varlong fails if this passed body_end */
        if (read_varlong(buf, &pos, body_end, &ts_delta) < 0) return -1;
        if (read_varint(buf, &pos, body_end, &r->offset_delta) < 0) return -1;
        if (__builtin_add_overflow(info->base_offset, r->offset_delta, &r->offset)) return -1;
        if (info->log_append) {
            r->timestamp = info->log_append_time;
        } else if (__builtin_add_overflow(info->base_timestamp, ts_delta, &r->timestamp)) {
            return -1;
        }
        if (read_varint(buf, &pos, body_end, &r->key_length) < 0) return -1;
        r->key = buf + pos;
        if (r->key_length >= 0) {
            if (r->key_length > body_end - pos) return -1;
            pos += (Py_ssize_t)r->key_length;
        }
        if (read_varint(buf, &pos, body_end, &r->value_length) < 0) return -1;
        r->value = buf + pos;
        if (r->value_length >= 0) {
            if (r->value_length > body_end - pos) return -1;
            pos += (Py_ssize_t)r->value_length;
        }
        if (read_varint(buf, &pos, body_end, &r->header_count) < 0) return -1;
        if (r->header_count < 0) return -1;
        r->headers = buf + pos;
        Py_ssize_t headers_start = pos;
        for (int64_t h = 0; h < r->header_count; h++) {
            int64_t key_length, value_length;
            if (read_varint(buf, &pos, body_end, &key_length) < 0) return -1;
            if (key_length < 0 || key_length > body_end - pos) return -1;
            for (Py_ssize_t i = 0; i < (Py_ssize_t)key_length; i++) {
                if (buf[pos + i] & 0x80) return -1;
            }
            pos += (Py_ssize_t)key_length;
            if (read_varint(buf, &pos, body_end, &value_length) < 0) return -1;
            if (value_length >= 0) {
                if (value_length > body_end - pos) return -1;
                pos += (Py_ssize_t)value_length;
            }
        }
        r->headers_bytes = pos - headers_start;
        if (pos != body_end) return -1;
    }
    return pos == end ? 0 : -1;
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
