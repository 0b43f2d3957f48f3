/* The record scan of an uncompressed batch payload (framing, timestamps, null keys), shared by
 * _native.c (scan_records) and _append.c (the append fast path's validation). Include Python.h,
 * _layout.h and _walker.h before this header. */
#ifndef STORAGECORE_RECORDS_SCAN_H
#define STORAGECORE_RECORDS_SCAN_H

/* Result of walking the records of one uncompressed payload. */
typedef struct {
    int problem;              /* PROBLEM_* below; 0 when the records are well framed */
    Py_ssize_t index, start;  /* record and byte position of the problem */
    long long length;         /* declared record length (PROBLEM_LENGTH, PROBLEM_BODY) */
    Py_ssize_t extra;         /* fields-take (PROBLEM_BODY) or bytes left (PROBLEM_LEFTOVER) */
    long long max_ts, min_ts;
    Py_ssize_t null_keys;
    int sequential;
} scan_t;

enum {
    PROBLEM_NONE = 0, PROBLEM_VARINT, PROBLEM_LENGTH, PROBLEM_PAST_RECORD, PROBLEM_HEADER_COUNT,
    PROBLEM_NULL_HEADER_KEY, PROBLEM_BODY, PROBLEM_TIMESTAMP, PROBLEM_LEFTOVER,
};

/* Not inlined into its callers: inlined into _append.c's plan_uncompressed it costs about 18 more
 * instructions per record (callgrind, Log.append of 16 KiB batches). */
static __attribute__((noinline)) void scan_impl(const uint8_t *buf, Py_ssize_t end,
                                                Py_ssize_t count, long long base_timestamp,
                                                scan_t *r) {
    ptrdiff_t pos = 0;
    r->problem = PROBLEM_NONE;
    r->max_ts = -1;
    r->min_ts = INT64_MAX;
    r->null_keys = 0;
    r->sequential = 1;
    for (Py_ssize_t index = 0; index < count; index++) {
        walked_record_t w;
        r->index = index;
        r->start = pos;
        switch (walk_record(buf, &pos, end, &w)) {
        case WALK_OK:
            break;
        case WALK_VARINT:
            r->problem = PROBLEM_VARINT;
            return;
        case WALK_LENGTH:
            r->problem = PROBLEM_LENGTH;
            r->length = w.length;
            return;
        case WALK_PAST_RECORD:
            r->problem = PROBLEM_PAST_RECORD;
            return;
        case WALK_HEADER_COUNT:
            r->problem = PROBLEM_HEADER_COUNT;
            return;
        case WALK_NULL_HEADER_KEY:
            r->problem = PROBLEM_NULL_HEADER_KEY;
            return;
        default: /* WALK_BODY */
            r->problem = PROBLEM_BODY;
            r->length = w.length;
            r->extra = (Py_ssize_t)w.fields_bytes;
            return;
        }
        if (w.offset_delta != index) r->sequential = 0;
        if (w.key_length < 0) r->null_keys++;
        long long timestamp;
        if (__builtin_add_overflow(base_timestamp, (long long)w.timestamp_delta, &timestamp)) {
            r->problem = PROBLEM_TIMESTAMP;
            return;
        }
        if (timestamp > r->max_ts) r->max_ts = timestamp;
        if (timestamp < r->min_ts) r->min_ts = timestamp;
    }
    if (pos != end) {
        r->problem = PROBLEM_LEFTOVER;
        r->index = count;
        r->extra = end - pos;
        return;
    }
    if (count == 0) r->min_ts = -1;
}

#endif
