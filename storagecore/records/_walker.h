/* The one record walker of the C speed-ups: the framing of one v2 record, written once.
 *
 * Used by storagecore/records/_native.c (scan_impl: the append path's scan) and
 * storagecore/records/_columns.c (decode_columns: a file region to Arrow-layout columns), and
 * shaped so that storagecore/cleaner/_native.c (parse_records) can use it too: the fields it
 * reports are the cleaner's record_t fields before resolution (offset delta, timestamp delta,
 * key, value, headers pointer / count / bytes).
 *
 * The framing checks are those of the pure-Python references (storagecore/records/_scan_py.py
 * and batch.py's decode_records accept exactly the same records): the length varint, a body
 * that fits the payload, each field inside the body, a non-negative header count, non-null
 * header keys and a body that the fields fill exactly. Varints follow Kafka's ByteUtils rules
 * (_layout.h's read_varint / read_varlong). What the walker does not check is the caller's:
 * timestamp and offset overflow, header keys being UTF-8, the number of records, leftover bytes.
 *
 * Include Python.h (or stddef.h) and _layout.h before this header.
 */
#ifndef STORAGECORE_RECORDS_WALKER_H
#define STORAGECORE_RECORDS_WALKER_H

#include <stddef.h>
#include <stdint.h>

#include "_layout.h"

/* What is wrong with a record; each caller words it (the scan's messages are _scan_py's). */
enum {
    WALK_OK = 0,
    WALK_VARINT,          /* truncated or overlong varint */
    WALK_LENGTH,          /* the declared length runs past the payload (see length) */
    WALK_PAST_RECORD,     /* a field runs past the record */
    WALK_HEADER_COUNT,    /* negative header count */
    WALK_NULL_HEADER_KEY, /* null header key */
    WALK_BODY,            /* the fields do not fill the body (see length, fields_bytes) */
};

/* One record, as pointers into the payload. Pointers of null fields point where the field
 * would have been (never read). */
typedef struct {
    int64_t length;          /* declared body length (after the length varint) */
    int64_t fields_bytes;    /* bytes the fields took (WALK_BODY) */
    int64_t timestamp_delta; /* against the batch's base timestamp */
    int64_t offset_delta;    /* against the batch's base offset */
    const uint8_t *key;
    int64_t key_length; /* < 0: null key */
    const uint8_t *value;
    int64_t value_length;   /* < 0: null value (a tombstone) */
    const uint8_t *headers; /* just after the header count */
    int64_t header_count;
    ptrdiff_t headers_bytes; /* bytes of the headers after the count */
} walked_record_t;

/* Walk the record at buf[*pos], which must end by buf[end]. On WALK_OK, *pos is just past the
 * record; otherwise *pos is unspecified and r holds what was read up to the problem. */
static inline __attribute__((always_inline)) int walk_record(const uint8_t *buf, ptrdiff_t *pos,
                                                             ptrdiff_t end, walked_record_t *r) {
    ptrdiff_t p = *pos;
    if (read_varint(buf, &p, end, &r->length) < 0) return WALK_VARINT;
    if (r->length < 0 || r->length > end - p) return WALK_LENGTH;
    ptrdiff_t body_end = p + (ptrdiff_t)r->length;
    if (p + 1 > body_end) return WALK_VARINT;
    p += 1; /* attributes: unused by v2 */
    if (read_varlong(buf, &p, body_end, &r->timestamp_delta) < 0) return WALK_VARINT;
    if (read_varint(buf, &p, body_end, &r->offset_delta) < 0) return WALK_VARINT;
    if (read_varint(buf, &p, body_end, &r->key_length) < 0) return WALK_VARINT;
    r->key = buf + p;
    if (r->key_length >= 0) {
        if (r->key_length > body_end - p) return WALK_PAST_RECORD;
        p += (ptrdiff_t)r->key_length;
    }
    if (read_varint(buf, &p, body_end, &r->value_length) < 0) return WALK_VARINT;
    r->value = buf + p;
    if (r->value_length >= 0) {
        if (r->value_length > body_end - p) return WALK_PAST_RECORD;
        p += (ptrdiff_t)r->value_length;
    }
    if (read_varint(buf, &p, body_end, &r->header_count) < 0) return WALK_VARINT;
    if (r->header_count < 0) return WALK_HEADER_COUNT;
    r->headers = buf + p;
    ptrdiff_t headers_start = p;
    for (int64_t h = 0; h < r->header_count; h++) {
        int64_t key_length, value_length;
        if (read_varint(buf, &p, body_end, &key_length) < 0) return WALK_VARINT;
        if (key_length < 0) return WALK_NULL_HEADER_KEY;
        if (key_length > body_end - p) return WALK_PAST_RECORD;
        p += (ptrdiff_t)key_length;
        if (read_varint(buf, &p, body_end, &value_length) < 0) return WALK_VARINT;
        if (value_length > 0) {
            if (value_length > body_end - p) return WALK_PAST_RECORD;
            p += (ptrdiff_t)value_length;
        }
    }
    r->headers_bytes = p - headers_start;
    if (p != body_end) {
        r->fields_bytes = p - body_end + r->length;
        return WALK_BODY;
    }
    *pos = p;
    return WALK_OK;
}

/* One header of a record that walk_record accepted. */
typedef struct {
    const uint8_t *key;
    int64_t key_length; /* >= 0: walk_record rejects null header keys */
    const uint8_t *value;
    int64_t value_length; /* < 0: null value */
} walked_header_t;

/* The header at headers[*pos] of a walked record (*pos from 0 while < headers_bytes); the
 * bounds were checked by walk_record, so this only re-reads the varints. */
static inline void walk_header(const uint8_t *headers, ptrdiff_t *pos, ptrdiff_t headers_bytes,
                               walked_header_t *h) {
    /* Set before the reads: a varint that walk_record accepted reads again, but the compiler
     * cannot know that (and -Werror turns its maybe-uninitialized warning into a failure). */
    h->key_length = 0;
    h->value_length = -1;
    read_varint(headers, pos, headers_bytes, &h->key_length);
    h->key = headers + *pos;
    *pos += (ptrdiff_t)h->key_length;
    read_varint(headers, pos, headers_bytes, &h->value_length);
    h->value = headers + *pos;
    if (h->value_length > 0) *pos += (ptrdiff_t)h->value_length;
}

/* Whether s[0..n) is UTF-8 as Python's strict decoder reads it (no overlong forms, no
 * surrogates, nothing above U+10FFFF): a header key must decode to a str. */
static inline int utf8_valid(const uint8_t *s, ptrdiff_t n) {
    ptrdiff_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint8_t low = 0x80, high = 0xBF; /* range of the byte after the lead byte */
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c == 0xE0) {
            need = 2;
            low = 0xA0;
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            need = 2;
        } else if (c == 0xED) {
            need = 2;
            high = 0x9F;
        } else if (c == 0xF0) {
            need = 3;
            low = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            need = 3;
        } else if (c == 0xF4) {
            need = 3;
            high = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < need) return 0;
        if (s[i + 1] < low || s[i + 1] > high) return 0;
        for (int k = 2; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        }
        i += need + 1;
    }
    return 1;
}

#endif
