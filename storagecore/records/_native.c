/* Native speed-ups of storagecore.records: the record scan, the append fast path and,
 * compiled into this module too, the columnar decoder (_columns.c, decode_columns) and the
 * producer walk of a region (_headers.c, producer_batches).
 *
 * The scan walks the records of an uncompressed batch payload without building objects: checks
 * framing (length varints, field lengths, header keys, nothing left over) with _walker.h's
 * walk_record, the one record walker of the C code, and reports the min and max record
 * timestamps, the number of null keys and whether offset deltas run 0..n-1.
 *
 * The pure-Python reference is storagecore/records/_scan_py.py; both must return identical
 * results (including problem messages) on every input, which tests/unit/.../test_scan.py checks.
 * Varint widths are Kafka's (ByteUtils.readVarint / readVarlong): at most 5 and 10 bytes, bits
 * beyond 32 / 64 dropped. They are exported as MAX_VARINT_BYTES / MAX_VARLONG_BYTES and a test
 * checks them against storagecore.records.layout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_layout.h"
#include "_walker.h"

/* crc32c(): inputs from this size are checksummed without the GIL. */
#define CRC32C_RELEASE_GIL_BYTES (64 * 1024)

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

static void scan_impl(const uint8_t *buf, Py_ssize_t end, Py_ssize_t count,
                      long long base_timestamp, scan_t *r) {
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

static PyObject *failed(PyObject *message) {
    if (message == NULL) return NULL;
    return Py_BuildValue("(NLLnO)", message, (long long)-1, (long long)-1, (Py_ssize_t)0, Py_False);
}

static PyObject *scan_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_timestamp;
    if (!PyArg_ParseTuple(args, "y*nL", &view, &count, &base_timestamp)) return NULL;
    scan_t r;
    scan_impl((const uint8_t *)view.buf, view.len, count, base_timestamp, &r);
    PyBuffer_Release(&view);
    switch (r.problem) {
    case PROBLEM_NONE:
        return Py_BuildValue("(OLLnO)", Py_None, r.max_ts, r.min_ts, r.null_keys,
                             r.sequential ? Py_True : Py_False);
    case PROBLEM_VARINT:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: truncated or overlong varint", r.index, r.start));
    case PROBLEM_LENGTH:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: length %lld runs past the batch", r.index, r.start, r.length));
    case PROBLEM_PAST_RECORD:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: a field runs past the record", r.index, r.start));
    case PROBLEM_HEADER_COUNT:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: negative header count", r.index, r.start));
    case PROBLEM_NULL_HEADER_KEY:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: null header key", r.index, r.start));
    case PROBLEM_BODY:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: body declares %lld bytes, fields take %zd", r.index, r.start,
            r.length, r.extra));
    case PROBLEM_TIMESTAMP:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: timestamp overflows int64", r.index, r.start));
    default:
        return failed(PyUnicode_FromFormat(
            "%zd bytes left after %zd records (incorrect declared batch size)", r.extra, count));
    }
}

/* ---- whole-request validation of uncompressed batches (the append fast path) ------------------
 *
 * validate_uncompressed(out, next_offset, now_ms, client, replication, compact, max_message_bytes,
 *                       leader_epoch, before_max_ms, after_max_ms, crc32c)
 *
 * `out` is a bytearray holding a copy of the request. When every batch is uncompressed and every
 * check of storagecore.log_validator passes, patches base offsets, leader epochs and (where they
 * differ) max timestamps and CRCs into `out`, and returns
 * (first_offset, last_offset, max_timestamp, offset_of_max_timestamp, record_count, batch_count).
 * Otherwise returns None and leaves the decision (and the error message) to the Python reference,
 * which is the specification. The topic must use CreateTime. Field positions are those of
 * storagecore/records/layout.py; test_native.py checks the exported copies.
 */
/* CRC-32C of out[start:end] through the Python-level crc32c function; -1 on error. */
static long long crc_of(PyObject *crc_func, uint8_t *base, Py_ssize_t start, Py_ssize_t end) {
    PyObject *view = PyMemoryView_FromMemory((char *)base + start, end - start, PyBUF_READ);
    if (view == NULL) return -1;
    PyObject *value = PyObject_CallOneArg(crc_func, view);
    Py_DECREF(view);
    if (value == NULL) return -1;
    unsigned long long crc = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    if (PyErr_Occurred()) return -1;
    return (long long)crc;
}

static PyObject *validate_uncompressed(PyObject *self, PyObject *args) {
    PyObject *out_obj, *crc_func;
    long long next_offset, now_ms, before_max_ms, after_max_ms;
    int client, replication, compact, leader_epoch;
    Py_ssize_t max_message_bytes;
    if (!PyArg_ParseTuple(args, "YLLpppniLLO", &out_obj, &next_offset, &now_ms, &client,
                          &replication, &compact, &max_message_bytes, &leader_epoch,
                          &before_max_ms, &after_max_ms, &crc_func))
        return NULL;
    uint8_t *buf = (uint8_t *)PyByteArray_AS_STRING(out_obj);
    Py_ssize_t end = PyByteArray_GET_SIZE(out_obj);
    if (end == 0) Py_RETURN_NONE;
    long long counter = next_offset, first_offset = -1, max_timestamp = -1, offset_of_max = -1;
    long long record_count = 0;
    Py_ssize_t batch_count = 0, pos = 0;
    while (pos < end) {
        if (end - pos < RECORD_BATCH_OVERHEAD) Py_RETURN_NONE;
        uint8_t *b = buf + pos;
        int64_t base_offset = get64(b + BASE_OFFSET_OFFSET);
        int32_t length = get32(b + LENGTH_OFFSET);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (size < RECORD_BATCH_OVERHEAD || size > end - pos) Py_RETURN_NONE;
        if (b[MAGIC_OFFSET] != 2) Py_RETURN_NONE;
        uint32_t stored_crc = (uint32_t)get32(b + CRC_OFFSET);
        long long crc = crc_of(crc_func, buf, pos + ATTRIBUTES_OFFSET, pos + size);
        if (crc < 0) return NULL;
        if ((uint32_t)crc != stored_crc) Py_RETURN_NONE;
        int16_t attributes = get16(b + ATTRIBUTES_OFFSET);
        if ((attributes & CODEC_MASK) != 0) Py_RETURN_NONE; /* compressed: the Python path */
        if (size > max_message_bytes) Py_RETURN_NONE;
        int is_control = (attributes & CONTROL_FLAG_MASK) != 0;
        int32_t last_delta = get32(b + LAST_OFFSET_DELTA_OFFSET);
        int64_t base_timestamp = get64(b + BASE_TIMESTAMP_OFFSET);
        int64_t batch_max_timestamp = get64(b + MAX_TIMESTAMP_OFFSET);
        int64_t producer_id = get64(b + PRODUCER_ID_OFFSET);
        int32_t base_sequence = get32(b + BASE_SEQUENCE_OFFSET);
        int32_t count = get32(b + RECORDS_COUNT_OFFSET);
        if (client) {
            if (base_offset != 0) Py_RETURN_NONE;
            if (count <= 0 || (int64_t)last_delta + 1 != count) Py_RETURN_NONE;
            if (is_control) Py_RETURN_NONE;
            if (producer_id != -1 && base_sequence < 0) Py_RETURN_NONE;
            if (attributes & TIMESTAMP_TYPE_MASK) Py_RETURN_NONE;
        } else if (count < 0 || last_delta < 0 || (int64_t)count > (int64_t)last_delta + 1) {
            Py_RETURN_NONE;
        }
        long long assigned;
        if (replication) {
            if (base_offset < counter) Py_RETURN_NONE;
            assigned = base_offset;
        } else {
            assigned = counter;
        }
        scan_t r;
        scan_impl(b + RECORD_BATCH_OVERHEAD, size - RECORD_BATCH_OVERHEAD, count, base_timestamp, &r);
        if (r.problem != PROBLEM_NONE) Py_RETURN_NONE;
        if (client && !r.sequential) Py_RETURN_NONE;
        if (r.null_keys && compact && !is_control) Py_RETURN_NONE;
        if (count && !is_control) {
            long long behind, ahead;
            if (__builtin_sub_overflow(now_ms, r.min_ts, &behind) || behind > before_max_ms)
                Py_RETURN_NONE;
            if (__builtin_sub_overflow(r.max_ts, now_ms, &ahead) || ahead > after_max_ms)
                Py_RETURN_NONE;
        }
        long long last_offset;
        if (__builtin_add_overflow(assigned, (long long)last_delta, &last_offset)) Py_RETURN_NONE;
        put64(b + BASE_OFFSET_OFFSET, assigned);
        if (!replication) put32(b + PARTITION_LEADER_EPOCH_OFFSET, (uint32_t)leader_epoch);
        long long batch_max = count ? r.max_ts : batch_max_timestamp;
        if (batch_max != batch_max_timestamp || (attributes & TIMESTAMP_TYPE_MASK)) {
            uint16_t cleared = (uint16_t)attributes & (uint16_t)~TIMESTAMP_TYPE_MASK;
            b[ATTRIBUTES_OFFSET] = (uint8_t)(cleared >> 8);
            b[ATTRIBUTES_OFFSET + 1] = (uint8_t)cleared;
            put64(b + MAX_TIMESTAMP_OFFSET, batch_max);
            long long fixed = crc_of(crc_func, buf, pos + ATTRIBUTES_OFFSET, pos + size);
            if (fixed < 0) return NULL;
            put32(b + CRC_OFFSET, (uint32_t)fixed);
        }
        if (first_offset < 0) first_offset = assigned;
        if (batch_max > max_timestamp) {
            max_timestamp = batch_max;
            offset_of_max = last_offset;
        }
        counter = last_offset + 1;
        record_count += count;
        batch_count++;
        pos += size;
    }
    return Py_BuildValue("(LLLLLn)", first_offset, counter - 1, max_timestamp,
                         offset_of_max >= 0 ? offset_of_max : counter - 1, record_count, batch_count);
}

/* _columns.c */
PyObject *storagecore_decode_columns(PyObject *self, PyObject *args);
void storagecore_columns_init(void);
/* _headers.c */
PyObject *storagecore_producer_batches(PyObject *self, PyObject *args);

/* crc32c(data) -> int: CRC-32C of a bytes-like object (storagecore/records/crc.py), without
 * the GIL for large inputs. */
static PyObject *crc32c_of(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    if (data.len >= CRC32C_RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c((const uint8_t *)data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c((const uint8_t *)data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32c", crc32c_of, METH_O, "crc32c(data) -> CRC-32C of a bytes-like object."},
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(payload, count, base_timestamp) -> (problem, max_ts, min_ts, null_keys, sequential)"},
    {"validate_uncompressed", validate_uncompressed, METH_VARARGS,
     "Whole-request validation of uncompressed batches; None means: use the Python path."},
    {"decode_columns", storagecore_decode_columns, METH_VARARGS,
     "decode_columns(region, position, end, columns, min_offset, max_offset, include_control, "
     "max_output_bytes, decompress) -> (rows, batches, position, problem, buffers, null_counts, "
     "batch_buffers)"},
    {"producer_batches", storagecore_producer_batches, METH_VARARGS,
     "producer_batches(region) -> (consumed, next_offset, positions, problem, problem_value)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc32c_init(); /* this file's copy of the tables */
    storagecore_columns_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (add_layout_constants(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
