/* The offset map's work over decoded columns, for the Spark job's aggregated offset map
 * (storagepipeline/aggregated_map.py): the digests of a whole key column in one call, and many
 * (digest, offset) puts in one call. Included by storagecore/cleaner/_native.c only (after
 * _cleaner_batch.h: the map and its probes); the Python references are key_digests and
 * SkimpyOffsetMap.put_digests in storagecore/cleaner/offset_map.py, which the tests compare.
 */
#ifndef STORAGECORE_CLEANER_COLUMNS_H
#define STORAGECORE_CLEANER_COLUMNS_H
#include "_cleaner_batch.h"

/* digest_keys(offsets, data, rows, secret) -> bytes of 16 * rows
 *
 * The map's digest (SipHash-1-3-128 under secret) of each item of an Arrow binary column:
 * offsets holds rows + 1 int32 (native byte order) into data. A null item (validity is the
 * caller's) is digested as the empty key. For the Spark job's aggregated offset map, which
 * digests a whole decoded key column per call (storagecore.records.columns). */
static PyObject *digest_keys(PyObject *self, PyObject *args) {
    Py_buffer offsets, data, secret;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "y*y*ny*", &offsets, &data, &rows, &secret)) return NULL;
    PyObject *result = NULL;
    if (secret.len != SIPHASH_KEY_BYTES) {
        PyErr_Format(PyExc_ValueError, "digest secret of %zd bytes (expected %d)", secret.len,
                     SIPHASH_KEY_BYTES);
        goto done;
    }
    if (rows < 0 || offsets.len < (rows + 1) * 4) {
        PyErr_Format(PyExc_ValueError, "%zd bytes of offsets cannot hold %zd rows", offsets.len,
                     rows);
        goto done;
    }
    const int32_t *ends = (const int32_t *)offsets.buf;
    for (Py_ssize_t i = 0; i < rows; i++) {
        if (ends[i] < 0 || ends[i] > ends[i + 1] || ends[i + 1] > data.len) {
            PyErr_Format(PyExc_ValueError, "key %zd: offsets [%d, %d) outside %zd bytes of data",
                         i, ends[i], ends[i + 1], data.len);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, rows * SIPHASH_OUT_BYTES);
    if (result == NULL) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    sip_key_t key = sip_key((const uint8_t *)secret.buf);
    const uint8_t *bytes = (const uint8_t *)data.buf;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t i = 0;
    while (i < rows) {
        size_t length = (size_t)(ends[i + 1] - ends[i]);
        if (i + 4 <= rows && (size_t)(ends[i + 2] - ends[i + 1]) == length &&
            (size_t)(ends[i + 3] - ends[i + 2]) == length &&
            (size_t)(ends[i + 4] - ends[i + 3]) == length) { /* four of a length at once */
            const uint8_t *const data[4] = {bytes + ends[i], bytes + ends[i + 1],
                                            bytes + ends[i + 2], bytes + ends[i + 3]};
            uint8_t *const digests[4] = {
                out + i * SIPHASH_OUT_BYTES, out + (i + 1) * SIPHASH_OUT_BYTES,
                out + (i + 2) * SIPHASH_OUT_BYTES, out + (i + 3) * SIPHASH_OUT_BYTES};
            siphash128_x4(data, length, key, SIP_C_ROUNDS, SIP_D_ROUNDS, digests);
            i += 4;
            continue;
        }
        siphash128(bytes + ends[i], length, key, SIP_C_ROUNDS, SIP_D_ROUNDS,
                   out + i * SIPHASH_OUT_BYTES);
        i++;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    PyBuffer_Release(&secret);
    return result;
}

/* put_digests(table, slots, size, digests, offsets) -> (size, lookups, probes)
 *
 * put_digest for each 16-byte digest of digests with the int64 (native byte order) of
 * offsets at the same index, in order. Raises AssertionError, as the
 * reference does, when a new digest finds no slot (the caller sizes the map for its keys). */
static PyObject *put_digests(PyObject *self, PyObject *args) {
    Py_buffer table, digests, offsets;
    Py_ssize_t slots, size;
    if (!PyArg_ParseTuple(args, "w*nny*y*", &table, &slots, &size, &digests, &offsets))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = digests.len / HASH_BYTES;
    if (slots < 1 || table.len != slots * ENTRY_BYTES) {
        PyErr_Format(PyExc_ValueError, "offset map table of %zd bytes does not hold %zd slots",
                     table.len, slots);
        goto done;
    }
    if (digests.len % HASH_BYTES != 0 || offsets.len != count * 8) {
        PyErr_Format(PyExc_ValueError, "%zd bytes of digests and %zd bytes of offsets",
                     digests.len, offsets.len);
        goto done;
    }
    offset_map_t map = {(uint8_t *)table.buf, slots, 0, 0};
    const uint8_t *digest = (const uint8_t *)digests.buf;
    const int64_t *values = (const int64_t *)offsets.buf;
    int overfull = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++, digest += HASH_BYTES) {
        int found;
        Py_ssize_t position = map_find(&map, digest, &found);
        if (!found) {
            if (position < 0 || size >= slots) {
                overfull = 1;
                break;
            }
            memcpy(map.table + position, digest, HASH_BYTES);
            size++;
        }
        set_entry_offset(&map, position, values[i]);
    }
    Py_END_ALLOW_THREADS
    if (overfull) {
        PyErr_SetString(PyExc_AssertionError, "put into a full offset map");
    } else {
        result = Py_BuildValue("nKK", size, map.lookups, map.probes);
    }
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&digests);
    PyBuffer_Release(&offsets);
    return result;
}

#endif
