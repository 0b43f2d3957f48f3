/* The producer walk of a file region: which batches carry a producer id, without building a
 * Python object for the others. Compiled into storagecore.records._native (see _native.c).
 *
 * producer_batches(region) -> (consumed, next_offset, positions, problem, problem_value)
 *
 * Walks the batches of region from its start, as FileRecords' header walk frames them: a batch
 * needs its length prefix and magic (17 bytes) and all of its declared size within the region;
 * the walk ends quietly (consumed < len(region)) at the first one that does not fit, for the
 * caller to read further or treat as a torn tail. positions holds the native-endian int64 byte
 * positions, within region, of every magic-v2 batch whose producer id is not -1 (the batches the
 * producer and transaction state is made of); batches of the legacy formats carry no producer.
 * next_offset is the offset after the last batch walked (-1 when none). problem is 0, or
 * PROBLEM_SHORT_LENGTH (a declared length below 14: problem_value is it) or PROBLEM_SHORT_V2
 * (a magic-v2 batch smaller than its 61-byte header: problem_value is its size) for the batch
 * at consumed, where the walk stopped; the caller raises the reference's error.
 *
 * The pure-Python reference is storagecore/records/_headers_py.py; test_headers.py checks that
 * both give the same answer on generated and damaged regions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_layout.h"

#define HEADER_SIZE_UP_TO_MAGIC (MAGIC_OFFSET + 1)
enum { PROBLEM_NONE = 0, PROBLEM_SHORT_LENGTH = 1, PROBLEM_SHORT_V2 = 2 };

PyObject *storagecore_producer_batches(PyObject *self, PyObject *args) {
    Py_buffer region;
    if (!PyArg_ParseTuple(args, "y*", &region)) return NULL;
    const uint8_t *base = (const uint8_t *)region.buf;
    Py_ssize_t pos = 0, count = 0, capacity = 0;
    int64_t *positions = NULL, next_offset = -1, problem_value = 0;
    int problem = PROBLEM_NONE, oom = 0;
    Py_BEGIN_ALLOW_THREADS
    while (region.len - pos >= HEADER_SIZE_UP_TO_MAGIC) {
        const uint8_t *b = base + pos;
        int32_t length = get32(b + LENGTH_OFFSET);
        if (length < MIN_DECLARED_BATCH_LENGTH) {
            problem = PROBLEM_SHORT_LENGTH;
            problem_value = length;
            break;
        }
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (size > region.len - pos) break;
        int64_t base_offset = get64(b + BASE_OFFSET_OFFSET);
        if (b[MAGIC_OFFSET] == CURRENT_MAGIC) {
            if (size < RECORD_BATCH_OVERHEAD) {
                problem = PROBLEM_SHORT_V2;
                problem_value = size;
                break;
            }
            next_offset = base_offset + get32(b + LAST_OFFSET_DELTA_OFFSET) + 1;
            if (get64(b + PRODUCER_ID_OFFSET) != -1) {
                if (count == capacity) {
                    Py_ssize_t grown = capacity ? capacity * 2 : 256;
                    int64_t *more = PyMem_RawRealloc(positions, (size_t)grown * sizeof(int64_t));
                    if (more == NULL) {
                        oom = 1;
                        break;
                    }
                    positions = more;
                    capacity = grown;
                }
                positions[count++] = pos;
            }
        } else {
            next_offset = base_offset + 1; /* a legacy entry's offset is its last */
        }
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&region);
    PyObject *result = NULL;
    if (oom) {
        PyErr_NoMemory();
    } else {
        PyObject *packed = PyBytes_FromStringAndSize((const char *)positions,
                                                     count * (Py_ssize_t)sizeof(int64_t));
        if (packed != NULL) {
            result = Py_BuildValue("nLNiL", pos, (long long)next_offset, packed, problem,
                                   (long long)problem_value);
        }
    }
    PyMem_RawFree(positions);
    return result;
}

/* producer_batches_file(fd, start, end) -> (consumed, next_offset, positions, headers, problem,
 *                                           problem_value)
 *
 * producer_batches over the bytes [start, end) of the file `fd`, read with pread, with the same
 * answer as producer_batches(file[start:end]) except that consumed and positions are file
 * positions, and with `headers`, the 61-byte header of each batch in positions, concatenated
 * (so that the caller reads nothing more but the control batches). It reads the file in windows of FILE_WINDOW_BYTES but needs only each batch's
 * 61-byte header: after a batch of HOP_BATCH_BYTES or more it reads just the next header, so a
 * log of large batches is walked without copying their records (a log of 16 KiB batches: 61
 * bytes read of every 16 KiB). An OSError from pread is raised. */
#include <string.h>

#include "_io.h"

#define FILE_WINDOW_BYTES (64 * 1024)
#define HOP_BATCH_BYTES (4 * 1024)

PyObject *storagecore_producer_batches_file(PyObject *self, PyObject *args) {
    int fd;
    long long start, end;
    if (!PyArg_ParseTuple(args, "iLL", &fd, &start, &end)) return NULL;
    uint8_t *window = PyMem_RawMalloc(FILE_WINDOW_BYTES);
    if (window == NULL) return PyErr_NoMemory();
    int64_t pos = start, next_offset = -1, problem_value = 0;
    int64_t *positions = NULL;
    uint8_t *headers = NULL;
    Py_ssize_t count = 0, capacity = 0;
    int problem = PROBLEM_NONE, oom = 0, error = 0, hop = 0;
    Py_BEGIN_ALLOW_THREADS
    while (end - pos >= HEADER_SIZE_UP_TO_MAGIC) {
        Py_ssize_t want = hop ? RECORD_BATCH_OVERHEAD : FILE_WINDOW_BYTES;
        if (want > end - pos) want = (Py_ssize_t)(end - pos);
        Py_ssize_t got = pread_full(fd, window, want, pos);
        if (got < 0) {
            error = errno;
            break;
        }
        if (got < HEADER_SIZE_UP_TO_MAGIC) break; /* the file is shorter than `end` */
        Py_ssize_t rel = 0;
        int stop = 0;
        /* The batches whose header lies in the window; their records may run past it. */
        while (got - rel >= HEADER_SIZE_UP_TO_MAGIC) {
            const uint8_t *b = window + rel;
            int32_t length = get32(b + LENGTH_OFFSET);
            if (length < MIN_DECLARED_BATCH_LENGTH) {
                problem = PROBLEM_SHORT_LENGTH;
                problem_value = length;
                stop = 1;
                break;
            }
            int64_t size = (int64_t)length + LOG_OVERHEAD;
            if (size > end - (pos + rel)) { /* a torn tail: the walk ends quietly */
                stop = 1;
                break;
            }
            int v2 = b[MAGIC_OFFSET] == CURRENT_MAGIC;
            if (v2 && size >= RECORD_BATCH_OVERHEAD && got - rel < RECORD_BATCH_OVERHEAD)
                break; /* its header runs past the window: read from it */
            int64_t base_offset = get64(b + BASE_OFFSET_OFFSET);
            if (v2) {
                if (size < RECORD_BATCH_OVERHEAD) {
                    problem = PROBLEM_SHORT_V2;
                    problem_value = size;
                    stop = 1;
                    break;
                }
                next_offset = base_offset + get32(b + LAST_OFFSET_DELTA_OFFSET) + 1;
                if (get64(b + PRODUCER_ID_OFFSET) != -1) {
                    if (count == capacity) {
                        Py_ssize_t grown = capacity ? capacity * 2 : 256;
                        int64_t *more =
                            PyMem_RawRealloc(positions, (size_t)grown * sizeof(int64_t));
                        if (more != NULL) positions = more;
                        uint8_t *more_headers =
                            more == NULL ? NULL
                                         : PyMem_RawRealloc(headers, (size_t)grown *
                                                                         RECORD_BATCH_OVERHEAD);
                        if (more_headers == NULL) {
                            oom = stop = 1;
                            break;
                        }
                        headers = more_headers;
                        capacity = grown;
                    }
                    memcpy(headers + count * RECORD_BATCH_OVERHEAD, b, RECORD_BATCH_OVERHEAD);
                    positions[count++] = pos + rel;
                }
            } else {
                next_offset = base_offset + 1; /* a legacy entry's offset is its last */
            }
            hop = size >= HOP_BATCH_BYTES;
            if (size > got - rel) { /* the next header lies past the window */
                rel += (Py_ssize_t)size;
                break;
            }
            rel += (Py_ssize_t)size;
        }
        pos += rel;
        if (stop) break;
        if (rel == 0 && got < want) break; /* the file ends before `end` */
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(window);
    PyObject *result = NULL;
    if (error) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
    } else if (oom) {
        PyErr_NoMemory();
    } else {
        PyObject *packed = PyBytes_FromStringAndSize((const char *)positions,
                                                     count * (Py_ssize_t)sizeof(int64_t));
        PyObject *header_bytes =
            packed == NULL ? NULL
                           : PyBytes_FromStringAndSize((const char *)headers,
                                                       count * RECORD_BATCH_OVERHEAD);
        if (header_bytes == NULL) {
            Py_XDECREF(packed);
        } else {
            result = Py_BuildValue("LLNNiL", (long long)pos, (long long)next_offset, packed,
                                   header_bytes, problem, (long long)problem_value);
        }
    }
    PyMem_RawFree(positions);
    PyMem_RawFree(headers);
    return result;
}
