/* The native reader of legacy (magic v0/v1) message sets. Compiled into
 * storagecore.records._native (see _native.c).
 *
 * decode_legacy_set(data, wrapper_magic, wrapper_offset, log_append, log_append_time)
 *   -> list of (offset, timestamp, key, value) | str (what is wrong)
 *
 * The reference is decode_message_set in storagecore/records/legacy.py, whose docstring is the
 * contract: the same records, and the same problem text character for character, on every
 * input (tests/property/test_legacy_native.py generates valid and damaged sets). data is a
 * message set: entries of offset int64, size int32, CRC-32 uint32 (of magic .. end), magic
 * int8 (0 or 1), attributes int8, timestamp int64 (v1 only), key and value as int32 length
 * (-1: null) + bytes; every entry is checked (header present, magic, the 14/22-byte minimum
 * size, inside the set, CRC-32, fields filling it exactly) and none may be compressed.
 * wrapper_magic is -1 for entries as stored in a file, else the magic of the wrapper whose
 * decompressed value data is: then the set must not be empty, and for a v1 wrapper with a
 * non-zero wrapper_offset the inner offsets are relative (absolute = wrapper_offset - last
 * inner + inner), the wrapper offset being at least the last inner one. A v0 message has no
 * timestamp (-1); a v1 message inside a LogAppendTime wrapper takes log_append_time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_legacy.h"

PyObject *storagecore_decode_legacy_set(PyObject *self, PyObject *args) {
    Py_buffer data;
    int wrapper_magic, log_append;
    long long wrapper_offset, log_append_time;
    if (!PyArg_ParseTuple(args, "y*iLpL", &data, &wrapper_magic, &wrapper_offset, &log_append,
                          &log_append_time))
        return NULL;
    const uint8_t *b = (const uint8_t *)data.buf;
    char problem[256];
    PyObject *result = NULL;
    Py_ssize_t count = 0;
    legacy_msg_t *msgs = legacy_resolve(b, data.len, wrapper_magic, wrapper_offset, log_append,
                                        log_append_time, &count, problem, sizeof problem);
    if (msgs == NULL) {
        result = problem[0] ? PyUnicode_FromString(problem) : PyErr_NoMemory();
        goto done;
    }
    result = PyList_New(count);
    if (result == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        const legacy_msg_t *m = &msgs[i];
        PyObject *key = m->key_length < 0
                            ? Py_NewRef(Py_None)
                            : PyBytes_FromStringAndSize((const char *)b + m->key, m->key_length);
        PyObject *value =
            m->value_length < 0
                ? Py_NewRef(Py_None)
                : PyBytes_FromStringAndSize((const char *)b + m->value, m->value_length);
        PyObject *item = (key && value) ? Py_BuildValue("LLNN", (long long)m->offset,
                                                        (long long)m->timestamp, key, value)
                                        : NULL;
        if (item == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, item);
    }
done:
    PyMem_RawFree(msgs);
    PyBuffer_Release(&data);
    return result;
}

/* check_legacy_entry(entry) -> str | None: one shallow entry (a plain message or a wrapper)
 * checked as LegacyRecordBatch.validate does after its size check (legacy.check_entry is the
 * reference): its problem named "message at offset <its offset>", or None. */
PyObject *storagecore_check_legacy_entry(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    const uint8_t *b = (const uint8_t *)data.buf;
    char where[64], problem[256];
    snprintf(where, sizeof where, "message at offset %lld",
             data.len >= 8 ? (long long)get64(b) : -1LL);
    Py_ssize_t count = legacy_walk_entries(b, data.len, -1, NULL, 0, problem, sizeof problem,
                                           where, 1);
    PyBuffer_Release(&data);
    if (count < 0) return PyUnicode_FromString(problem);
    Py_RETURN_NONE;
}

void storagecore_legacy_init(void) { legacy_crc32_init(); }

int storagecore_legacy_constants(PyObject *m) {
    if (PyModule_AddIntConstant(m, "LEGACY_HEADER_BYTES", LEGACY_HEADER_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "LEGACY_OVERHEAD_V0", LEGACY_OVERHEAD_V0) < 0 ||
        PyModule_AddIntConstant(m, "LEGACY_OVERHEAD_V1", LEGACY_OVERHEAD_V1) < 0)
        return -1;
    return 0;
}
