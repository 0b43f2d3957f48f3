/* The read by offset of one segment in one call: LogSegment.read's bytes path (Kafka's
 * LogSegment.read: translateOffset, then the fetch range) without Python between its system
 * calls. Compiled into storagecore.records._native (see _native.c).
 *
 * read_by_offset(fd, offsets, positions, base_offset, fetch_offset, max_size, max_position,
 *                size_bytes, min_one_message) -> (position, records, incomplete, next_offset)
 *                                                 | None
 *
 * fd is the segment's .log, size_bytes its logical size (nothing at or past it is read);
 * offsets and positions are the offset index's columns (OffsetIndex.columns: relative offsets
 * and positions, native int32 arrays, sorted). The call does what the Python path does
 * (storagecore/segment_read.py, the reference), in the same order and on the same bytes:
 *
 * 1. translate_offset: from the index entry at or below fetch_offset, the v2 batch headers are
 *    walked with pread (windows of WALK_WINDOW_BYTES; after a batch of HOP_BATCH_BYTES or more,
 *    or when the next index entry is that far, only the next 61-byte header) to the first
 *    batch whose last offset is >= fetch_offset. Index entries carry the last offset of the
 *    batches appended at their position, so for a sequential fetch the entry found is the
 *    batch before the one wanted, whose last offset is fetch_offset - 1: when the walk is to
 *    read a header after such a batch, it reads the whole fetch range from there instead and
 *    checks the header at its start as it would have checked the header alone (the batch
 *    wanted, in a well-formed file). A sequential fetch of large batches is two preads: the
 *    previous batch's header and the records.
 * 2. LogSegment.read's limits (min_one_message, max_size, max_position);
 * 3. the fetch range, read straight into a new bytes object (without the GIL), and the offset
 *    after the last complete batch in it, found by walking those bytes from one index entry
 *    before the last entry at or below the range's end (next_offset_within).
 *
 * It returns
 *   (-1, b"", False, 0)                 no batch in [0, size_bytes) reaches fetch_offset (read
 *                                       returns None);
 *   (position, b"", incomplete, fetch_offset)  nothing to return: a zero limit, the batch at or
 *                                       past max_position, or (incomplete) a first batch above
 *                                       max_size without min_one_message;
 *   (position, records, False, next_offset)    records from position; next_offset is -1 when
 *                                       they reach size_bytes (the caller's segment next offset,
 *                                       LogSegment.next_offset, which this call does not know).
 * and None wherever the Python path could answer differently or raise: it meets a v0/v1 entry
 * (their offsets need FileRecords' legacy rules), a declared length below 14, a v2 batch under
 * 61 bytes or a magic above 2 (which the Python walk reads as v2), fewer than 61 bytes before
 * size_bytes, a file shorter than size_bytes, or an offset beyond int64. The caller then runs
 * the Python path, which gives the answer or raises the error (test_segment_read.py compares
 * both on generated and damaged segments). An OSError from pread is raised.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "_io.h"
#include "_layout.h"

#define HEADER_SIZE_UP_TO_MAGIC (MAGIC_OFFSET + 1)
/* The first read of a header walk: FileRecords' first header chunk (_FIRST_HEADER_CHUNK_BYTES),
 * which covers index.interval.bytes (4 KiB by default) of small batches in one read. */
#define WALK_WINDOW_BYTES (8 * 1024)
/* After a batch this large the walk reads only the next header (as _headers.c's file walk). */
#define HOP_BATCH_BYTES (4 * 1024)
#define LEGACY_MAGIC_V0 0
#define LEGACY_MAGIC_V1 1

enum { HEADER_OK, HEADER_END, HEADER_UNUSUAL, HEADER_IO_ERROR, HEADER_AT_TARGET };

typedef struct {
    int64_t position, base_offset, last_offset, size;
} header_t;

/* Slot of the largest value <= key, -1 if none (bisect_right - 1, as the index's lookups). */
static Py_ssize_t floor_slot(const int32_t *values, Py_ssize_t count, int64_t key) {
    Py_ssize_t lo = 0, hi = count;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if ((int64_t)values[mid] <= key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo - 1;
}

/* The header at b, `avail` bytes of the file from `position`: HEADER_OK for a complete v2
 * batch of at least 61 bytes within size_bytes, HEADER_END for a torn tail (its declared size
 * runs past size_bytes: FileRecords' walk ends there quietly), HEADER_UNUSUAL otherwise. */
static int parse_header(const uint8_t *b, Py_ssize_t avail, int64_t position, int64_t size_bytes,
                        header_t *h) {
    if (avail < RECORD_BATCH_OVERHEAD) return HEADER_UNUSUAL;
    int32_t length = get32(b + LENGTH_OFFSET);
    if (length < MIN_DECLARED_BATCH_LENGTH) return HEADER_UNUSUAL; /* Python raises */
    int64_t size = (int64_t)length + LOG_OVERHEAD;
    if (size > size_bytes - position) return HEADER_END;
    if (b[MAGIC_OFFSET] != CURRENT_MAGIC || size < RECORD_BATCH_OVERHEAD) return HEADER_UNUSUAL;
    h->position = position;
    h->base_offset = get64(b + BASE_OFFSET_OFFSET);
    h->size = size;
    if (__builtin_add_overflow(h->base_offset, (int64_t)get32(b + LAST_OFFSET_DELTA_OFFSET),
                               &h->last_offset))
        return HEADER_UNUSUAL;
    return HEADER_OK;
}

/* The first batch from `position` whose last offset is >= target (translate_offset's walk),
 * reading `want` bytes first: HEADER_OK with *h, HEADER_END when the file's complete batches
 * end first. `previous_last` is the last offset of the batch before `position` when known
 * (else INT64_MIN); with `at_target`, the walk stops before it reads the header of a batch that
 * follows one ending at target - 1, with HEADER_AT_TARGET and h->position (see step 1 above).
 * Without the GIL. */
static int find_batch(int fd, int64_t position, int64_t target, int64_t size_bytes,
                      Py_ssize_t want, int64_t previous_last, int at_target, uint8_t *window,
                      header_t *h) {
    int64_t window_start = 0;
    Py_ssize_t got = 0;
    for (;;) {
        int64_t left = size_bytes - position;
        if (left < HEADER_SIZE_UP_TO_MAGIC) return HEADER_END;
        if (position < window_start || position - window_start + RECORD_BATCH_OVERHEAD > got) {
            if (at_target && previous_last < target && previous_last + 1 == target) {
                h->position = position;
                return HEADER_AT_TARGET;
            }
            got = pread_full(fd, window, left < want ? (Py_ssize_t)left : want, position);
            if (got < 0) return HEADER_IO_ERROR;
            window_start = position;
        }
        Py_ssize_t rel = (Py_ssize_t)(position - window_start);
        int found = parse_header(window + rel, got - rel, position, size_bytes, h);
        if (found != HEADER_OK || h->last_offset >= target) return found;
        previous_last = h->last_offset;
        want = h->size >= HOP_BATCH_BYTES ? RECORD_BATCH_OVERHEAD : WALK_WINDOW_BYTES;
        position += h->size;
    }
}

/* An index column: a native int32 array (OffsetIndex.columns). */
static int get_column(PyObject *column, Py_buffer *view) {
    if (PyObject_GetBuffer(column, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->itemsize != 4 || view->format == NULL || strcmp(view->format, "i") != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "an index column must be an array of int32 ('i')");
        return -1;
    }
    return 0;
}

/* An int argument as int64; 1 when it does not fit (the Python path takes it), -1 on error. */
static int get_int64(PyObject *arg, int64_t *out) {
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (overflow) return 1;
    if (value == -1 && PyErr_Occurred()) return -1;
    *out = value;
    return 0;
}

/* The offset after the last complete v2 batch in records[at:], `next_offset` when none
 * (next_offset_within); -1 when the walk meets a legacy entry or an offset overflows. */
static int64_t next_offset_in(const uint8_t *records, Py_ssize_t length, Py_ssize_t at,
                              int64_t next_offset) {
    while (length - at >= HEADER_SIZE_UP_TO_MAGIC) {
        const uint8_t *b = records + at;
        if (b[MAGIC_OFFSET] == LEGACY_MAGIC_V0 || b[MAGIC_OFFSET] == LEGACY_MAGIC_V1) return -1;
        if (length - at < RECORD_BATCH_OVERHEAD) break;
        int64_t size = (int64_t)get32(b + LENGTH_OFFSET) + LOG_OVERHEAD;
        if (size < RECORD_BATCH_OVERHEAD || size > length - at) break;
        int64_t last;
        if (__builtin_add_overflow(get64(b + BASE_OFFSET_OFFSET),
                                   (int64_t)get32(b + LAST_OFFSET_DELTA_OFFSET), &last) ||
            last == INT64_MAX)
            return -1;
        next_offset = last + 1;
        at += (Py_ssize_t)size;
    }
    return next_offset;
}

static PyObject *os_error(int error) {
    errno = error;
    return PyErr_SetFromErrno(PyExc_OSError);
}

PyObject *storagecore_read_by_offset(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "read_by_offset takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "invalid file descriptor %ld", fd);
        return NULL;
    }
    int64_t ints[5]; /* base_offset, fetch_offset, max_size, max_position, size_bytes */
    for (int i = 0; i < 5; i++) {
        int status = get_int64(args[3 + i], &ints[i]);
        if (status < 0) return NULL;
        if (status > 0) Py_RETURN_NONE;
    }
    int64_t base_offset = ints[0], target = ints[1], max_size = ints[2];
    int64_t max_position = ints[3], size_bytes = ints[4];
    int min_one_message = PyObject_IsTrue(args[8]);
    if (min_one_message < 0) return NULL;
    if (max_size < 0) {
        PyErr_SetString(PyExc_ValueError, "max_size must be >= 0");
        return NULL;
    }
    int64_t key;
    if (__builtin_sub_overflow(target, base_offset, &key) || base_offset == INT64_MIN)
        Py_RETURN_NONE;

    /* 1. translate_offset: the walk starts at the index entry at or below the fetch offset. */
    Py_buffer offsets, positions;
    if (get_column(args[1], &offsets) < 0) return NULL;
    if (get_column(args[2], &positions) < 0) {
        PyBuffer_Release(&offsets);
        return NULL;
    }
    Py_ssize_t entries = offsets.len / 4;
    if (positions.len != offsets.len) {
        PyBuffer_Release(&offsets);
        PyBuffer_Release(&positions);
        PyErr_SetString(PyExc_ValueError, "the index columns differ in length");
        return NULL;
    }
    const int32_t *entry_positions = positions.buf;
    Py_ssize_t slot = floor_slot(offsets.buf, entries, key);
    int64_t start = slot < 0 ? 0 : entry_positions[slot];
    if (start < 0) start = 0;
    /* The first read: one header when the next entry is a large batch or more away. */
    Py_ssize_t want = WALK_WINDOW_BYTES;
    if (slot + 1 < entries && entry_positions[slot + 1] - start >= WALK_WINDOW_BYTES)
        want = RECORD_BATCH_OVERHEAD;
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&positions);
    /* Below every entry the walk starts at the segment's base offset: a first batch there is
     * the one wanted for a fetch from the base offset (the start of a log). */
    int64_t previous_last = slot < 0 ? base_offset - 1 : INT64_MIN;

    header_t h;
    int found, error = 0;
    uint8_t window[WALK_WINDOW_BYTES];
    Py_BEGIN_ALLOW_THREADS
    found = find_batch((int)fd, start, target, size_bytes, want, previous_last, 1, window, &h);
    error = errno;
    Py_END_ALLOW_THREADS
    PyObject *records = NULL; /* the fetch range, when read at the batch wanted */
    int64_t guess = 0;
    Py_ssize_t got = 0;
    if (found == HEADER_AT_TARGET) {
        int64_t position = h.position;
        guess = max_position - position < max_size ? max_position - position : max_size;
        if (guess > size_bytes - position) guess = size_bytes - position;
        if (guess >= RECORD_BATCH_OVERHEAD) {
            records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)guess);
            if (records == NULL) return NULL;
            uint8_t *buf = (uint8_t *)PyBytes_AS_STRING(records);
            Py_BEGIN_ALLOW_THREADS
            got = pread_full((int)fd, buf, (Py_ssize_t)guess, position);
            error = errno;
            Py_END_ALLOW_THREADS
            if (got < 0) {
                Py_DECREF(records);
                return os_error(error);
            }
            /* The header the walk would have read here, checked as it would have. */
            found = parse_header(buf, got, position, size_bytes, &h);
            if (found != HEADER_OK || h.last_offset < target) Py_CLEAR(records);
            if (found == HEADER_OK && h.last_offset < target) { /* not a well-formed file */
                want = h.size >= HOP_BATCH_BYTES ? RECORD_BATCH_OVERHEAD : WALK_WINDOW_BYTES;
                position += h.size;
                previous_last = h.last_offset;
                found = HEADER_AT_TARGET;
            }
        } else {
            want = RECORD_BATCH_OVERHEAD; /* too little to read at once: the header first */
            previous_last = INT64_MIN;
        }
        if (found == HEADER_AT_TARGET) {
            Py_BEGIN_ALLOW_THREADS
            found = find_batch((int)fd, position, target, size_bytes, want, previous_last, 0,
                               window, &h);
            error = errno;
            Py_END_ALLOW_THREADS
        }
    }
    if (found == HEADER_IO_ERROR) return os_error(error);
    if (found == HEADER_UNUSUAL) Py_RETURN_NONE;
    if (found == HEADER_END) return Py_BuildValue("(nyOi)", (Py_ssize_t)-1, "", Py_False, 0);

    /* 2. LogSegment.read's limits. */
    int64_t position = h.position;
    int64_t adjusted_max = min_one_message && h.size > max_size ? h.size : max_size;
    if (adjusted_max == 0 || position >= max_position) {
        Py_XDECREF(records);
        return Py_BuildValue("(LyOL)", (long long)position, "", Py_False, (long long)target);
    }
    if (!min_one_message && h.size > max_size) {
        Py_XDECREF(records);
        return Py_BuildValue("(LyOL)", (long long)position, "", Py_True, (long long)target);
    }
    int64_t fetch_size = max_position - position < adjusted_max ? max_position - position
                                                                : adjusted_max;
    if (fetch_size > size_bytes - position) fetch_size = size_bytes - position; /* > 0 */

    /* 3. The records (read in step 1 already, but for the rest of a first batch above
     * max_size), and the offset after the last complete batch in them. */
    if (records == NULL) {
        records = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)fetch_size);
        if (records == NULL) return NULL;
        got = 0;
    } else if (got == guess && fetch_size > got) {
        if (_PyBytes_Resize(&records, (Py_ssize_t)fetch_size) < 0) return NULL;
    }
    if (got < fetch_size && (got == 0 || got == guess)) {
        uint8_t *rest = (uint8_t *)PyBytes_AS_STRING(records) + got;
        Py_ssize_t more;
        Py_BEGIN_ALLOW_THREADS
        more = pread_full((int)fd, rest, (Py_ssize_t)(fetch_size - got), position + got);
        error = errno;
        Py_END_ALLOW_THREADS
        if (more < 0) {
            Py_DECREF(records);
            return os_error(error);
        }
        got += more;
    }
    if (got < fetch_size) { /* the file is shorter than size_bytes */
        Py_DECREF(records);
        Py_RETURN_NONE;
    }
    uint8_t *buf = (uint8_t *)PyBytes_AS_STRING(records);
    int64_t end = position + got, next_offset = -1;
    if (end < size_bytes) {
        if (get_column(args[2], &positions) < 0) {
            Py_DECREF(records);
            return NULL;
        }
        /* LogSegment._walk_start: one entry before the last entry at or below end. */
        slot = floor_slot(positions.buf, positions.len / 4, end) - 1;
        int64_t walk_from = slot < 0 ? 0 : ((const int32_t *)positions.buf)[slot];
        PyBuffer_Release(&positions);
        if (walk_from < position) walk_from = position;
        next_offset = next_offset_in(buf, got, (Py_ssize_t)(walk_from - position), h.base_offset);
        if (next_offset < 0) {
            Py_DECREF(records);
            Py_RETURN_NONE;
        }
    }
    return Py_BuildValue("(LNOL)", (long long)position, records, Py_False, (long long)next_offset);
}
