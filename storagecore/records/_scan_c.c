/* Native implementation of storagecore.records.scan.scan_records.
 *
 * Walks the records of an uncompressed batch payload without building objects: checks framing
 * (length varints, field lengths, header keys, nothing left over), and reports the min and max
 * record timestamps, the number of null keys and whether offset deltas run 0..n-1.
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

#define MAX_VARINT_BYTES 5
#define MAX_VARLONG_BYTES 10

/* 0 on success, -1 on a truncated or overlong encoding. Most varints in a record are one byte
 * (attributes, small deltas, key lengths, header counts): that case returns early. */
static inline __attribute__((always_inline)) int read_varint(
    const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out) {
    if (*pos < limit && !(buf[*pos] & 0x80)) {
        uint32_t b = buf[(*pos)++];
        *out = (int64_t)(int32_t)((b >> 1) ^ (uint32_t)(-(int32_t)(b & 1)));
        return 0;
    }
    uint32_t value = 0;
    int shift = 0;
    Py_ssize_t start = *pos;
    for (;;) {
        if (*pos >= limit) return -1;
        uint8_t b = buf[(*pos)++];
        value |= (uint32_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (*pos - start >= MAX_VARINT_BYTES) return -1;
    }
    *out = (int64_t)(int32_t)((value >> 1) ^ (uint32_t)(-(int32_t)(value & 1)));
    return 0;
}

static inline __attribute__((always_inline)) int read_varlong(
    const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out) {
    if (*pos < limit && !(buf[*pos] & 0x80)) {
        uint64_t b = buf[(*pos)++];
        *out = (int64_t)((b >> 1) ^ (uint64_t)(-(int64_t)(b & 1)));
        return 0;
    }
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t start = *pos;
    for (;;) {
        if (*pos >= limit) return -1;
        uint8_t b = buf[(*pos)++];
        value |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (*pos - start >= MAX_VARLONG_BYTES) return -1;
    }
    *out = (int64_t)((value >> 1) ^ (uint64_t)(-(int64_t)(value & 1)));
    return 0;
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
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t end = view.len;
    Py_ssize_t pos = 0;
    long long max_ts = -1, min_ts = INT64_MAX;
    Py_ssize_t null_keys = 0;
    int sequential = 1;
    PyObject *result = NULL;

    for (Py_ssize_t index = 0; index < count; index++) {
        Py_ssize_t start = pos;
        int64_t length, ts_delta, offset_delta, key_length, value_length, header_count;
        if (read_varint(buf, &pos, end, &length) < 0) goto bad_varint;
        Py_ssize_t body_end = pos + (Py_ssize_t)length;
        if (length < 0 || length > end - pos) {
            result = failed(PyUnicode_FromFormat(
                "record %zd at byte %zd: length %lld runs past the batch", index, start,
                (long long)length));
            goto done;
        }
        if (pos + 1 > body_end) goto bad_varint;
        pos += 1; /* attributes */
        if (read_varlong(buf, &pos, body_end, &ts_delta) < 0) goto bad_varint;
        if (read_varint(buf, &pos, body_end, &offset_delta) < 0) goto bad_varint;
        if (offset_delta != index) sequential = 0;
        if (read_varint(buf, &pos, body_end, &key_length) < 0) goto bad_varint;
        if (key_length < 0) {
            null_keys++;
        } else {
            if (key_length > body_end - pos) goto past_record;
            pos += (Py_ssize_t)key_length;
        }
        if (read_varint(buf, &pos, body_end, &value_length) < 0) goto bad_varint;
        if (value_length > 0) {
            if (value_length > body_end - pos) goto past_record;
            pos += (Py_ssize_t)value_length;
        }
        if (read_varint(buf, &pos, body_end, &header_count) < 0) goto bad_varint;
        if (header_count < 0) {
            result = failed(PyUnicode_FromFormat(
                "record %zd at byte %zd: negative header count", index, start));
            goto done;
        }
        for (int64_t h = 0; h < header_count; h++) {
            int64_t hk, hv;
            if (read_varint(buf, &pos, body_end, &hk) < 0) goto bad_varint;
            if (hk < 0) {
                result = failed(PyUnicode_FromFormat(
                    "record %zd at byte %zd: null header key", index, start));
                goto done;
            }
            if (hk > body_end - pos) goto past_record;
            pos += (Py_ssize_t)hk;
            if (read_varint(buf, &pos, body_end, &hv) < 0) goto bad_varint;
            if (hv > 0) {
                if (hv > body_end - pos) goto past_record;
                pos += (Py_ssize_t)hv;
            }
        }
        if (pos != body_end) {
            result = failed(PyUnicode_FromFormat(
                "record %zd at byte %zd: body declares %lld bytes, fields take %zd", index, start,
                (long long)length, pos - body_end + (Py_ssize_t)length));
            goto done;
        }
        long long timestamp;
        if (__builtin_add_overflow(base_timestamp, (long long)ts_delta, &timestamp)) {
            result = failed(PyUnicode_FromFormat(
                "record %zd at byte %zd: timestamp overflows int64", index, start));
            goto done;
        }
        if (timestamp > max_ts) max_ts = timestamp;
        if (timestamp < min_ts) min_ts = timestamp;
        continue;
    bad_varint:
        result = failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: truncated or overlong varint", index, start));
        goto done;
    past_record:
        result = failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: a field runs past the record", index, start));
        goto done;
    }
    if (pos != end) {
        result = failed(PyUnicode_FromFormat(
            "%zd bytes left after %zd records (incorrect declared batch size)", end - pos, count));
        goto done;
    }
    result = Py_BuildValue("(OLLnO)", Py_None, max_ts, count ? min_ts : -1LL, null_keys,
                           sequential ? Py_True : Py_False);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(payload, count, base_timestamp) -> (problem, max_ts, min_ts, null_keys, sequential)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan_c(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "MAX_VARINT_BYTES", MAX_VARINT_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "MAX_VARLONG_BYTES", MAX_VARLONG_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
