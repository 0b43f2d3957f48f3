/* The columnar decoder: a file region of record batches to Arrow-layout column buffers.
 *
 * decode_columns(region, position, end, columns, min_offset, max_offset, include_control,
 *                max_output_bytes, decompress[, max_rows])
 *   -> (rows, batches, position, problem, buffers, null_counts, batch_buffers)
 *
 * Compiled into storagecore.records._native (beside the record scan of _native.c); called
 * through storagecore/records/columns.py, whose docstring and DecodedColumns (columns_types.py)
 * describe the arguments and the result. The specification is the pure-Python reference
 * storagecore/records/_columns_py.py: both return the same buffers byte for byte and the same
 * problem messages, which tests/unit/storagecore/records/test_columns.py (valid logs) and
 * test_columns_problems.py (corrupt input) check.
 *
 * The walk: batch framing (Kafka's FileLogInputStream rules: a torn tail ends the walk, a
 * declared length below 14 is corruption), then for each batch inside the offset range the
 * checks of RecordBatch.validate (magic 2, CRC-32C, counts, codec id), then, unless it is a
 * control batch that is not wanted, its records: an uncompressed payload is read in place, a
 * compressed one is decompressed once through `decompress` (the project's codecs, one call into
 * Python per batch, never per record). Records are walked by _walker.h's walk_record, the same
 * framing as the scan. Only the requested columns are built: a key-only or count-only decode
 * copies no value bytes.
 *
 * A bad batch stops the walk; its rows are rolled back, so the buffers hold the rows of the
 * batches before it, and `problem` names its byte position, base offset and what is wrong.
 * Buffers are bytearrays that grow by doubling and are cut to size at the end; pyarrow wraps
 * them without a copy (storagecore itself never imports pyarrow).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>

#include "_layout.h"
#include "_walker.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Arrow buffers are little-endian and this decoder stores native integers"
#endif

#define HEADER_SIZE_UP_TO_MAGIC (MAGIC_OFFSET + 1)
#define MAX_CODEC_ID 4

/* The column names, in COLUMN_NAMES' order (columns_types.py), and the buffers of each. */
enum { COL_KEY, COL_VALUE, COL_OFFSET, COL_TIMESTAMP, COL_TIMESTAMP_TYPE, COL_HEADERS, N_COLUMNS };
static const char *const column_names[N_COLUMNS] = {"key",       "value",          "offset",
                                                    "timestamp", "timestamp_type", "headers"};
enum {
    B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA,
    B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA,
    B_OFFSET, B_TIMESTAMP, B_TIMESTAMP_TYPE,
    B_HEADER_LISTS, B_HEADER_KEY_OFFSETS, B_HEADER_KEY_DATA,
    B_HEADER_VALUE_VALID, B_HEADER_VALUE_OFFSETS, B_HEADER_VALUE_DATA,
    N_BUFFERS
};
/* Buffers of each column, in DecodedColumns' order; -1 ends a list. */
static const int column_buffers[N_COLUMNS][7] = {
    {B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA, -1},
    {B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA, -1},
    {B_OFFSET, -1},
    {B_TIMESTAMP, -1},
    {B_TIMESTAMP_TYPE, -1},
    {B_HEADER_LISTS, B_HEADER_KEY_OFFSETS, B_HEADER_KEY_DATA, B_HEADER_VALUE_VALID,
     B_HEADER_VALUE_OFFSETS, B_HEADER_VALUE_DATA, -1},
};

/* The per-batch table, in BATCH_COLUMNS' order (columns_types.py). */
enum {
    M_POSITION, M_BASE_OFFSET, M_LAST_OFFSET_DELTA, M_PARTITION_LEADER_EPOCH, M_ATTRIBUTES,
    M_MAX_TIMESTAMP, M_PRODUCER_ID, M_PRODUCER_EPOCH, M_BASE_SEQUENCE, M_FIRST_ROW, M_ROWS,
    N_META
};
static const char *const meta_names[N_META] = {
    "position",      "base_offset", "last_offset_delta", "partition_leader_epoch",
    "attributes",    "max_timestamp", "producer_id",     "producer_epoch",
    "base_sequence", "first_row",   "rows"};

/* A bytearray being filled: data[0..len) written, cap allocated. */
typedef struct {
    PyObject *obj;
    char *data;
    Py_ssize_t len, cap;
} growbuf_t;

typedef struct {
    int want[N_COLUMNS];
    growbuf_t b[N_BUFFERS];
    growbuf_t meta[N_META];
    Py_ssize_t rows, headers; /* rows of the columns; headers of the headers column */
    Py_ssize_t key_nulls, value_nulls, header_value_nulls;
} out_t;

/* Where the output stood before a batch: restored when the batch turns out bad. */
typedef struct {
    Py_ssize_t len[N_BUFFERS];
    Py_ssize_t rows, headers, key_nulls, value_nulls, header_value_nulls;
} mark_t;

static int grow(growbuf_t *g, Py_ssize_t extra) {
    Py_ssize_t cap = g->cap * 2;
    if (cap < g->len + extra) cap = g->len + extra;
    if (cap < 256) cap = 256;
    if (PyByteArray_Resize(g->obj, cap) < 0) return -1;
    g->data = PyByteArray_AS_STRING(g->obj);
    g->cap = cap;
    return 0;
}

static inline int put(growbuf_t *g, const void *p, Py_ssize_t n) {
    if (g->len + n > g->cap && grow(g, n) < 0) return -1;
    memcpy(g->data + g->len, p, (size_t)n);
    g->len += n;
    return 0;
}

static inline int put_i64(growbuf_t *g, int64_t v) { return put(g, &v, 8); }
static inline int put_i32(growbuf_t *g, int32_t v) { return put(g, &v, 4); }
static inline int put_i16(growbuf_t *g, int16_t v) { return put(g, &v, 2); }

/* Bit `index` of a validity bitmap (a new byte every 8 items, zeroed first). */
static inline int put_bit(growbuf_t *g, Py_ssize_t index, int valid) {
    if ((index & 7) == 0) {
        uint8_t zero = 0;
        if (put(g, &zero, 1) < 0) return -1;
    }
    if (valid) g->data[g->len - 1] |= (char)(1 << (index & 7));
    return 0;
}

/* An int32 offset of a binary or list column: the length of its data so far. */
static inline int put_offset(growbuf_t *g, Py_ssize_t value, const char *what) {
    if (value > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "more than 2**31 - 1 %s in one column: decode a smaller region", what);
        return -1;
    }
    return put_i32(g, (int32_t)value);
}

/* Item `index` of an Arrow binary column: validity bit, data, end offset. */
static inline int put_binary(growbuf_t *valid, growbuf_t *offsets, growbuf_t *data,
                             Py_ssize_t index, const uint8_t *p, int64_t n, Py_ssize_t *nulls) {
    if (put_bit(valid, index, n >= 0) < 0) return -1;
    if (n < 0) {
        (*nulls)++;
    } else if (n > 0 && put(data, p, (Py_ssize_t)n) < 0) {
        return -1;
    }
    return put_offset(offsets, data->len, "bytes");
}

static void mark(const out_t *o, mark_t *m) {
    for (int i = 0; i < N_BUFFERS; i++) m->len[i] = o->b[i].len;
    m->rows = o->rows;
    m->headers = o->headers;
    m->key_nulls = o->key_nulls;
    m->value_nulls = o->value_nulls;
    m->header_value_nulls = o->header_value_nulls;
}

static void clear_bits_from(growbuf_t *g, Py_ssize_t count) {
    if (g->obj != NULL && (count & 7)) g->data[g->len - 1] &= (char)((1 << (count & 7)) - 1);
}

static void roll_back(out_t *o, const mark_t *m) {
    for (int i = 0; i < N_BUFFERS; i++) o->b[i].len = m->len[i];
    o->rows = m->rows;
    o->headers = m->headers;
    o->key_nulls = m->key_nulls;
    o->value_nulls = m->value_nulls;
    o->header_value_nulls = m->header_value_nulls;
    /* Bits of rolled-back items may share the last byte of a bitmap with kept ones. */
    clear_bits_from(&o->b[B_KEY_VALID], o->rows);
    clear_bits_from(&o->b[B_VALUE_VALID], o->rows);
    clear_bits_from(&o->b[B_HEADER_VALUE_VALID], o->headers);
}

typedef struct {
    int64_t base_offset, base_timestamp, log_append_time;
    int log_append;
    int has_min, has_max;
    int64_t min_offset, max_offset;
} batch_t;

/* Decode the records of one uncompressed payload into o. 0: done; 1: a problem, described in
 * msg; -1: a Python error (memory, overflow of an int32 offset). */
static int decode_records(out_t *o, const uint8_t *buf, ptrdiff_t end, int32_t count,
                          const batch_t *batch, char *msg, size_t msg_size) {
    ptrdiff_t pos = 0;
    const int *want = o->want;
    const int32_t timestamp_type = batch->log_append;
    for (int32_t index = 0; index < count; index++) {
        ptrdiff_t start = pos;
        walked_record_t w;
        const char *problem = NULL;
        switch (walk_record(buf, &pos, end, &w)) {
        case WALK_OK:
            break;
        case WALK_VARINT:
            problem = "truncated or overlong varint";
            break;
        case WALK_LENGTH:
            snprintf(msg, msg_size, "record %d at byte %td: length %lld runs past the batch", index,
                     start, (long long)w.length);
            return 1;
        case WALK_PAST_RECORD:
            problem = "a field runs past the record";
            break;
        case WALK_HEADER_COUNT:
            problem = "negative header count";
            break;
        case WALK_NULL_HEADER_KEY:
            problem = "null header key";
            break;
        default: /* WALK_BODY */
            snprintf(msg, msg_size, "record %d at byte %td: body declares %lld bytes, fields take %lld",
                     index, start, (long long)w.length, (long long)w.fields_bytes);
            return 1;
        }
        int64_t timestamp = batch->log_append_time;
        if (problem == NULL && !batch->log_append &&
            __builtin_add_overflow(batch->base_timestamp, w.timestamp_delta, &timestamp)) {
            problem = "timestamp overflows int64";
        }
        if (problem == NULL && w.header_count > 0) {
            ptrdiff_t h = 0;
            for (int64_t i = 0; i < w.header_count; i++) {
                walked_header_t header;
                walk_header(w.headers, &h, w.headers_bytes, &header);
                if (!utf8_valid(header.key, (ptrdiff_t)header.key_length)) {
                    problem = "header key is not UTF-8";
                    break;
                }
            }
        }
        int64_t offset;
        if (problem == NULL && __builtin_add_overflow(batch->base_offset, w.offset_delta, &offset)) {
            problem = "offset overflows int64";
        }
        if (problem != NULL) {
            snprintf(msg, msg_size, "record %d at byte %td: %s", index, start, problem);
            return 1;
        }
        if ((batch->has_min && offset < batch->min_offset) ||
            (batch->has_max && offset >= batch->max_offset)) {
            continue;
        }
        Py_ssize_t row = o->rows++;
        growbuf_t *b = o->b;
        if (want[COL_KEY] && put_binary(&b[B_KEY_VALID], &b[B_KEY_OFFSETS], &b[B_KEY_DATA], row,
                                        w.key, w.key_length, &o->key_nulls) < 0)
            return -1;
        if (want[COL_VALUE] &&
            put_binary(&b[B_VALUE_VALID], &b[B_VALUE_OFFSETS], &b[B_VALUE_DATA], row, w.value,
                       w.value_length, &o->value_nulls) < 0)
            return -1;
        if (want[COL_OFFSET] && put_i64(&b[B_OFFSET], offset) < 0) return -1;
        if (want[COL_TIMESTAMP] && put_i64(&b[B_TIMESTAMP], timestamp) < 0) return -1;
        if (want[COL_TIMESTAMP_TYPE] && put_i32(&b[B_TIMESTAMP_TYPE], timestamp_type) < 0) return -1;
        if (want[COL_HEADERS]) {
            ptrdiff_t h = 0;
            for (int64_t i = 0; i < w.header_count; i++) {
                walked_header_t header;
                walk_header(w.headers, &h, w.headers_bytes, &header);
                if (put(&b[B_HEADER_KEY_DATA], header.key, (Py_ssize_t)header.key_length) < 0 ||
                    put_offset(&b[B_HEADER_KEY_OFFSETS], b[B_HEADER_KEY_DATA].len, "bytes") < 0 ||
                    put_binary(&b[B_HEADER_VALUE_VALID], &b[B_HEADER_VALUE_OFFSETS],
                               &b[B_HEADER_VALUE_DATA], o->headers, header.value,
                               header.value_length, &o->header_value_nulls) < 0)
                    return -1;
                o->headers++;
            }
            if (put_offset(&b[B_HEADER_LISTS], o->headers, "headers") < 0) return -1;
        }
    }
    if (pos != end) {
        snprintf(msg, msg_size, "%td bytes left after %d records (incorrect declared batch size)",
                 end - pos, count);
        return 1;
    }
    return 0;
}

/* The entry of the batch at region[position] in the per-batch table; rows from first_row on
 * came from it. */
static int put_batch(out_t *o, Py_ssize_t position, const uint8_t *b, Py_ssize_t first_row) {
    growbuf_t *m = o->meta;
    if (put_i64(&m[M_POSITION], position) < 0 ||
        put_i64(&m[M_BASE_OFFSET], get64(b + BASE_OFFSET_OFFSET)) < 0 ||
        put_i32(&m[M_LAST_OFFSET_DELTA], get32(b + LAST_OFFSET_DELTA_OFFSET)) < 0 ||
        put_i32(&m[M_PARTITION_LEADER_EPOCH], get32(b + PARTITION_LEADER_EPOCH_OFFSET)) < 0 ||
        put_i16(&m[M_ATTRIBUTES], get16(b + ATTRIBUTES_OFFSET)) < 0 ||
        put_i64(&m[M_MAX_TIMESTAMP], get64(b + MAX_TIMESTAMP_OFFSET)) < 0 ||
        put_i64(&m[M_PRODUCER_ID], get64(b + PRODUCER_ID_OFFSET)) < 0 ||
        put_i16(&m[M_PRODUCER_EPOCH], get16(b + PRODUCER_EPOCH_OFFSET)) < 0 ||
        put_i32(&m[M_BASE_SEQUENCE], get32(b + BASE_SEQUENCE_OFFSET)) < 0 ||
        put_i64(&m[M_FIRST_ROW], first_row) < 0)
        return -1;
    /* At most the batch's record count, an int32. */
    return put_i32(&m[M_ROWS], (int32_t)(o->rows - first_row));
}

/* The offset bound `obj` (None: unbounded). 0, or -1 with a Python error. */
static int offset_bound(PyObject *obj, int *has, int64_t *value) {
    *has = obj != Py_None;
    if (!*has) return 0;
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) return -1;
    *value = v;
    return 0;
}

static int init_out(out_t *o, PyObject *columns) {
    memset(o, 0, sizeof(*o));
    PyObject *seq = PySequence_Fast(columns, "columns must be a sequence of column names");
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(seq, i);
        const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        int found = -1;
        for (int c = 0; s != NULL && c < N_COLUMNS; c++) {
            if (strcmp(s, column_names[c]) == 0) found = c;
        }
        if (found < 0) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "unknown column %R", name);
            return -1;
        }
        o->want[found] = 1;
    }
    Py_DECREF(seq);
    for (int c = 0; c < N_COLUMNS; c++) {
        if (!o->want[c]) continue;
        for (const int *i = column_buffers[c]; *i >= 0; i++) {
            growbuf_t *g = &o->b[*i];
            g->obj = PyByteArray_FromStringAndSize(NULL, 0);
            if (g->obj == NULL) return -1;
            g->data = PyByteArray_AS_STRING(g->obj);
        }
    }
    for (int i = 0; i < N_META; i++) {
        growbuf_t *g = &o->meta[i];
        g->obj = PyByteArray_FromStringAndSize(NULL, 0);
        if (g->obj == NULL) return -1;
        g->data = PyByteArray_AS_STRING(g->obj);
    }
    /* Offsets buffers hold rows + 1 entries: the first is 0. */
    static const int first_offsets[] = {B_KEY_OFFSETS, B_VALUE_OFFSETS, B_HEADER_LISTS,
                                        B_HEADER_KEY_OFFSETS, B_HEADER_VALUE_OFFSETS};
    for (size_t i = 0; i < sizeof(first_offsets) / sizeof(first_offsets[0]); i++) {
        growbuf_t *g = &o->b[first_offsets[i]];
        if (g->obj != NULL && put_i32(g, 0) < 0) return -1;
    }
    return 0;
}

static void free_out(out_t *o) {
    for (int i = 0; i < N_BUFFERS; i++) Py_CLEAR(o->b[i].obj);
    for (int i = 0; i < N_META; i++) Py_CLEAR(o->meta[i].obj);
}

/* The (rows, batches, position, problem, buffers, null_counts, batch_buffers) tuple; consumes
 * problem. */
static PyObject *result(out_t *o, Py_ssize_t batches, Py_ssize_t position, PyObject *problem) {
    PyObject *buffers = PyDict_New(), *nulls = PyDict_New(), *table = PyDict_New();
    if (buffers == NULL || nulls == NULL || table == NULL) goto fail;
    for (int i = 0; i < N_META; i++) {
        growbuf_t *g = &o->meta[i];
        if (PyByteArray_Resize(g->obj, g->len) < 0 ||
            PyDict_SetItemString(table, meta_names[i], g->obj) < 0)
            goto fail;
    }
    for (int c = 0; c < N_COLUMNS; c++) {
        if (!o->want[c]) continue;
        PyObject *items = PyTuple_New(0);
        if (items == NULL) goto fail;
        for (const int *i = column_buffers[c]; *i >= 0; i++) {
            growbuf_t *g = &o->b[*i];
            if (PyByteArray_Resize(g->obj, g->len) < 0 ||
                _PyTuple_Resize(&items, PyTuple_GET_SIZE(items) + 1) < 0) {
                Py_XDECREF(items);
                goto fail;
            }
            PyTuple_SET_ITEM(items, PyTuple_GET_SIZE(items) - 1, Py_NewRef(g->obj));
        }
        int failed = PyDict_SetItemString(buffers, column_names[c], items);
        Py_DECREF(items);
        if (failed < 0) goto fail;
    }
    static const struct {
        int column;
        const char *name;
        size_t field;
    } null_fields[] = {
        {COL_KEY, "key", offsetof(out_t, key_nulls)},
        {COL_VALUE, "value", offsetof(out_t, value_nulls)},
        {COL_HEADERS, "headers.value", offsetof(out_t, header_value_nulls)},
    };
    for (size_t i = 0; i < sizeof(null_fields) / sizeof(null_fields[0]); i++) {
        if (!o->want[null_fields[i].column]) continue;
        Py_ssize_t count = *(Py_ssize_t *)((char *)o + null_fields[i].field);
        PyObject *value = PyLong_FromSsize_t(count);
        if (value == NULL) goto fail;
        int failed = PyDict_SetItemString(nulls, null_fields[i].name, value);
        Py_DECREF(value);
        if (failed < 0) goto fail;
    }
    return Py_BuildValue("(nnnNNNN)", o->rows, batches, position,
                         problem != NULL ? problem : Py_NewRef(Py_None), buffers, nulls, table);
fail:
    Py_XDECREF(buffers);
    Py_XDECREF(nulls);
    Py_XDECREF(table);
    Py_XDECREF(problem);
    return NULL;
}

PyObject *storagecore_decode_columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t position, end, max_output_bytes, max_rows = 0;
    PyObject *columns, *min_obj, *max_obj, *decompress;
    int include_control;
    if (!PyArg_ParseTuple(args, "y*nnOOOpnO|n", &view, &position, &end, &columns, &min_obj,
                          &max_obj, &include_control, &max_output_bytes, &decompress, &max_rows))
        return NULL;
    out_t o;
    PyObject *problem = NULL, *ret = NULL;
    batch_t batch = {0};
    Py_ssize_t batches = 0;
    char msg[256];
    if (init_out(&o, columns) < 0) goto done;
    if (offset_bound(min_obj, &batch.has_min, &batch.min_offset) < 0 ||
        offset_bound(max_obj, &batch.has_max, &batch.max_offset) < 0)
        goto done;
    if (!(0 <= position && position <= end && end <= view.len)) {
        PyErr_Format(PyExc_ValueError, "region of %zd bytes cannot hold [%zd, %zd)", view.len,
                     position, end);
        goto done;
    }
    const uint8_t *region = (const uint8_t *)view.buf;
    while (end - position >= HEADER_SIZE_UP_TO_MAGIC) {
        const uint8_t *b = region + position;
        int64_t base_offset = get64(b + BASE_OFFSET_OFFSET);
        int32_t length = get32(b + LENGTH_OFFSET);
        if (length < MIN_DECLARED_BATCH_LENGTH) {
            problem = PyUnicode_FromFormat("batch at position %zd: declared length %d (minimum %d)",
                                           position, length, MIN_DECLARED_BATCH_LENGTH);
            break;
        }
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (size > end - position) break; /* a torn tail: FileLogInputStream stops here too */
        if (size < RECORD_BATCH_OVERHEAD) {
            problem = PyUnicode_FromFormat(
                "batch at position %zd: %zd bytes, smaller than the %d-byte header", position,
                size, RECORD_BATCH_OVERHEAD);
            break;
        }
        int16_t attributes = get16(b + ATTRIBUTES_OFFSET);
        int32_t last_delta = get32(b + LAST_OFFSET_DELTA_OFFSET);
        int32_t count = get32(b + RECORDS_COUNT_OFFSET);
        int64_t last_offset;
        if (__builtin_add_overflow(base_offset, (int64_t)last_delta, &last_offset))
            last_offset = last_delta < 0 ? INT64_MIN : INT64_MAX; /* the true sum is beyond */
        int outside = (batch.has_min && last_offset < batch.min_offset) ||
                      (batch.has_max && base_offset >= batch.max_offset);
        int is_control = (attributes & CONTROL_FLAG_MASK) != 0;
        Py_ssize_t first_row = o.rows;
        /* A batch that would take the rows past max_rows ends the call (unless no row is
         * decoded yet): the caller's next call starts at it. Its count is not validated yet;
         * a bad one only ends this call early, and the next call reports it. */
        if (max_rows > 0 && o.rows > 0 && !outside && (!is_control || include_control) &&
            (int64_t)o.rows + (int64_t)count > (int64_t)max_rows)
            break;
        if (!outside) {
            int8_t magic = (int8_t)b[MAGIC_OFFSET];
            uint32_t stored = (uint32_t)get32(b + CRC_OFFSET);
            int codec = attributes & CODEC_MASK;
            msg[0] = '\0';
            if (magic != CURRENT_MAGIC) {
                snprintf(msg, sizeof(msg), "magic %d, only magic 2 is supported", magic);
            } else {
                uint32_t computed = crc32c(b + ATTRIBUTES_OFFSET, (size_t)(size - ATTRIBUTES_OFFSET));
                if (computed != stored) {
                    snprintf(msg, sizeof(msg), "CRC mismatch (stored 0x%08x, computed 0x%08x)",
                             stored, computed);
                } else if (count < 0 || last_delta < 0) {
                    snprintf(msg, sizeof(msg),
                             "negative record count %d or last offset delta %d", count, last_delta);
                } else if (codec > MAX_CODEC_ID) {
                    snprintf(msg, sizeof(msg),
                             "unknown compression codec id %d (Kafka defines 0..4)", codec);
                }
            }
            if (msg[0] == '\0' && (!is_control || include_control)) {
                const uint8_t *payload = b + RECORD_BATCH_OVERHEAD;
                Py_ssize_t payload_bytes = size - RECORD_BATCH_OVERHEAD;
                PyObject *decompressed = NULL;
                if (codec != 0) {
                    PyObject *raw = PyBytes_FromStringAndSize((const char *)payload, payload_bytes);
                    if (raw == NULL) goto done;
                    decompressed = PyObject_CallFunction(decompress, "iOn", codec, raw,
                                                         max_output_bytes);
                    Py_DECREF(raw);
                    if (decompressed == NULL) goto done;
                    if (PyUnicode_Check(decompressed)) {
                        problem = PyUnicode_FromFormat("batch at position %zd, offset %lld: %U",
                                                       position, (long long)base_offset,
                                                       decompressed);
                        Py_DECREF(decompressed);
                        break;
                    }
                    if (!PyBytes_Check(decompressed)) {
                        PyErr_Format(PyExc_TypeError, "decompress returned %s, not bytes or str",
                                     Py_TYPE(decompressed)->tp_name);
                        Py_DECREF(decompressed);
                        goto done;
                    }
                    payload = (const uint8_t *)PyBytes_AS_STRING(decompressed);
                    payload_bytes = PyBytes_GET_SIZE(decompressed);
                }
                batch.base_offset = base_offset;
                batch.base_timestamp = get64(b + BASE_TIMESTAMP_OFFSET);
                batch.log_append = (attributes & TIMESTAMP_TYPE_MASK) != 0;
                batch.log_append_time = get64(b + MAX_TIMESTAMP_OFFSET);
                mark_t m;
                mark(&o, &m);
                int rc = decode_records(&o, payload, payload_bytes, count, &batch, msg, sizeof(msg));
                Py_XDECREF(decompressed);
                if (rc < 0) goto done;
                if (rc > 0) roll_back(&o, &m);
            }
            if (msg[0] != '\0') {
                problem = PyUnicode_FromFormat("batch at position %zd, offset %lld: %s", position,
                                               (long long)base_offset, msg);
                break;
            }
        }
        if (put_batch(&o, position, b, first_row) < 0) goto done;
        batches++;
        position += size;
    }
    if (PyErr_Occurred()) goto done; /* a failed PyUnicode_FromFormat */
    ret = result(&o, batches, position, problem);
    problem = NULL;
done:
    Py_XDECREF(problem);
    free_out(&o);
    PyBuffer_Release(&view);
    return ret;
}

void storagecore_columns_init(void) { crc32c_init(); }
