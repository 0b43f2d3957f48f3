/* The cleaner's two passes over one legacy (magic v0/v1) message set: a plain entry as stored,
 * or a wrapper's inner messages decompressed by the caller. Included by
 * storagecore/cleaner/_native.c only; the messages are walked by storagecore/records/_legacy.h
 * (the records reader's walk, so both accept and refuse the same sets).
 *
 * The reference is storagecore/cleaner/legacy.py (map_legacy_keys, retain_legacy_record):
 *
 * put_legacy_keys(table, slots, size, capacity, secret, data, wrapper_magic, wrapper_offset,
 *                 start) -> (size, puts, last_put_offset, walked, full, lookups, probes) | None
 *   puts the key of every message at an offset >= start, stopping before a put once size has
 *   reached capacity (full); walked counts the messages walked before that.
 * filter_legacy_records(table, slots, secret, latest_offset, data, wrapper_magic,
 *                       wrapper_offset, retain_deletes) -> (kept, invalid, lookups, probes) | None
 *   kept: one byte per message, 1 when Kafka's shouldRetainRecord keeps it (past the latest
 *   mapped offset; else keyed, the latest for its key, and a value or retain_deletes); invalid
 *   counts the keyless messages dropped.
 * Both return None, having changed nothing, for a set the reader refuses (the reference then
 * raises its error).
 */
#ifndef STORAGECORE_CLEANER_LEGACY_H
#define STORAGECORE_CLEANER_LEGACY_H
#include "../records/_legacy.h"
#include "_cleaner_batch.h"

static PyObject *put_legacy_keys(PyObject *self, PyObject *args) {
    Py_buffer table, secret, data;
    Py_ssize_t slots, size, capacity;
    int wrapper_magic;
    long long wrapper_offset, start;
    if (!PyArg_ParseTuple(args, "w*nnny*y*iLL", &table, &slots, &size, &capacity, &secret, &data,
                          &wrapper_magic, &wrapper_offset, &start))
        return NULL;
    PyObject *result = NULL;
    offset_map_t map;
    sip_key_t key;
    legacy_msg_t *msgs = NULL;
    char problem[256];
    if (open_map(&table, slots, &secret, &map, &key) < 0) goto done;
    const uint8_t *b = (const uint8_t *)data.buf;
    Py_ssize_t count = 0, puts = 0, walked = 0;
    int64_t last_put = -1;
    int full = 0, overfull = 0;
    Py_BEGIN_ALLOW_THREADS
    msgs = legacy_resolve(b, data.len, wrapper_magic, wrapper_offset, 0, 0, &count, problem,
                          sizeof problem);
    for (Py_ssize_t i = 0; msgs != NULL && i < count; i++) {
        const legacy_msg_t *m = &msgs[i];
        if (m->key_length >= 0 && m->offset >= start) {
            if (size >= capacity) {
                full = 1;
                break;
            }
            uint8_t digest[HASH_BYTES];
            siphash128(b + m->key, (size_t)m->key_length, key, SIP_C_ROUNDS, SIP_D_ROUNDS,
                       digest);
            int found;
            Py_ssize_t position = map_find(&map, digest, &found);
            if (!found) {
                if (position < 0 || size >= map.slots) {
                    overfull = 1;
                    break;
                }
                memcpy(map.table + position, digest, HASH_BYTES);
                size++;
            }
            set_entry_offset(&map, position, m->offset);
            puts++;
            last_put = m->offset;
        }
        walked++;
    }
    Py_END_ALLOW_THREADS
    if (msgs == NULL) {
        result = problem[0] ? Py_NewRef(Py_None) : PyErr_NoMemory();
    } else if (overfull) {
        PyErr_SetString(PyExc_AssertionError, "put into a full offset map");
    } else {
        result = Py_BuildValue("nnLnOKK", size, puts, (long long)last_put, walked,
                               full ? Py_True : Py_False, map.lookups, map.probes);
    }
done:
    PyMem_RawFree(msgs);
    PyBuffer_Release(&table);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&data);
    return result;
}

static PyObject *filter_legacy_records(PyObject *self, PyObject *args) {
    Py_buffer table, secret, data;
    Py_ssize_t slots;
    int wrapper_magic, retain_deletes;
    long long latest_offset, wrapper_offset;
    if (!PyArg_ParseTuple(args, "y*ny*Ly*iLp", &table, &slots, &secret, &latest_offset, &data,
                          &wrapper_magic, &wrapper_offset, &retain_deletes))
        return NULL;
    PyObject *result = NULL;
    offset_map_t map;
    sip_key_t key;
    legacy_msg_t *msgs = NULL;
    char *kept = NULL;
    char problem[256];
    if (open_map(&table, slots, &secret, &map, &key) < 0) goto done;
    const uint8_t *b = (const uint8_t *)data.buf;
    Py_ssize_t count = 0, invalid = 0;
    Py_BEGIN_ALLOW_THREADS
    msgs = legacy_resolve(b, data.len, wrapper_magic, wrapper_offset, 0, 0, &count, problem,
                          sizeof problem);
    if (msgs != NULL) kept = PyMem_RawMalloc((size_t)(count ? count : 1));
    for (Py_ssize_t i = 0; kept != NULL && i < count; i++) {
        const legacy_msg_t *m = &msgs[i];
        int keep;
        if (m->offset > latest_offset) {
            keep = 1; /* not mapped in this round */
        } else if (m->key_length < 0) {
            invalid++;
            keep = 0;
        } else {
            uint8_t digest[HASH_BYTES];
            siphash128(b + m->key, (size_t)m->key_length, key, SIP_C_ROUNDS, SIP_D_ROUNDS,
                       digest);
            keep = m->offset >= map_get(&map, digest) && (m->value_length >= 0 || retain_deletes);
        }
        kept[i] = (char)keep;
    }
    Py_END_ALLOW_THREADS
    if (msgs == NULL && problem[0]) {
        result = Py_NewRef(Py_None);
    } else if (kept == NULL) {
        PyErr_NoMemory();
    } else {
        result = Py_BuildValue("y#nKK", kept, count, invalid, map.lookups, map.probes);
    }
done:
    PyMem_RawFree(kept);
    PyMem_RawFree(msgs);
    PyBuffer_Release(&table);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&data);
    return result;
}

#endif
