/* What the cleaner's region calls (storagecore/cleaner/_native.c) share about one batch of a
 * region: the caller's codecs, by codec id, called with the GIL taken back; whether a batch is
 * plain (the engine's to take) and its view, its records decompressed when it is compressed;
 * whether a batch whose records are all dropped must stay as an empty batch.
 * Included by storagecore/cleaner/_native.c only, which documents the contract with the
 * Python reference.
 */
#ifndef STORAGECORE_CLEANER_REGION_H
#define STORAGECORE_CLEANER_REGION_H
#include "_cleaner_batch.h"

/* A region call's codecs, by codec id: the callables of a 5-tuple (index 0 unused) or none. */
#define CODEC_IDS 5
typedef struct {
    PyObject *fn[CODEC_IDS];
} codecs_t;

/* 0 when codecs is None or a 5-tuple of callables or None; -1 with an exception set. */
static int open_codecs(PyObject *codecs, codecs_t *table) {
    memset(table, 0, sizeof(*table));
    if (codecs == Py_None) return 0;
    if (!PyTuple_Check(codecs) || PyTuple_GET_SIZE(codecs) != CODEC_IDS) {
        PyErr_SetString(PyExc_TypeError, "codecs must be None or a tuple of 5, by codec id");
        return -1;
    }
    for (Py_ssize_t id = 1; id < CODEC_IDS; id++) {
        PyObject *fn = PyTuple_GET_ITEM(codecs, id);
        if (fn == Py_None) continue;
        if (!PyCallable_Check(fn)) {
            PyErr_Format(PyExc_TypeError, "codec %zd of codecs is not callable", id);
            return -1;
        }
        table->fn[id] = fn;
    }
    return 0;
}

/* With the GIL held: fn(memoryview of data[:size]) as a new bytes reference. NULL with no
 * exception set when it raised an Exception or answered something else (the per-batch path
 * then takes the batch and raises the reference's error); NULL with the exception kept for
 * what is not an Exception (KeyboardInterrupt, SystemExit), which *raised is set for. The
 * memoryview does not own the region: the codecs are storagecore's own, which keep no view. */
static PyObject *call_codec(PyObject *fn, const uint8_t *data, Py_ssize_t size, int *raised) {
    PyObject *view = PyMemoryView_FromMemory((char *)data, size, PyBUF_READ);
    PyObject *answer = view == NULL ? NULL : PyObject_CallOneArg(fn, view);
    Py_XDECREF(view);
    if (answer != NULL && PyBytes_Check(answer)) return answer;
    Py_XDECREF(answer);
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) {
        *raised = 1;
    } else {
        PyErr_Clear();
    }
    return NULL;
}

/* Size of the batch at b when it is complete within avail bytes, valid as RecordBatch.validate
 * checks it (declared length, magic, CRC-32C, counts) and plain (not control, not
 * transactional, uncompressed or compressed with a codec in codecs); 0 when the region ends
 * before the batch does; -1 when the caller's per-batch path must take it (it raises the
 * reference's error for an invalid one). A batch within the first `checked` bytes at b had
 * its CRC-32C checked by the map pass (the same bytes of the same sealed segment): not again. */
static Py_ssize_t plain_batch(const uint8_t *b, Py_ssize_t avail, const codecs_t *codecs,
                              Py_ssize_t checked) {
    if (avail < LOG_OVERHEAD) return 0;
    int32_t length = get32(b + LENGTH_OFFSET);
    if (length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) return -1;
    Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
    if (size > avail) return 0;
    if (b[MAGIC_OFFSET] != CURRENT_MAGIC) return -1;
    int attributes = get16(b + ATTRIBUTES_OFFSET);
    if (attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)) return -1;
    int codec = attributes & CODEC_MASK;
    if (codec != 0 && (codec >= CODEC_IDS || codecs->fn[codec] == NULL)) return -1;
    if (get32(b + RECORDS_COUNT_OFFSET) < 0 || get32(b + LAST_OFFSET_DELTA_OFFSET) < 0) return -1;
    if (size <= checked) return size;
    uint32_t stored = (uint32_t)get32(b + CRC_OFFSET);
    if (crc32c(b + ATTRIBUTES_OFFSET, (size_t)(size - ATTRIBUTES_OFFSET)) != stored) return -1;
    return size;
}

/* The view of a plain batch at b (see plain_batch) inside a region call, whose thread state is
 * *save (the GIL released): a compressed one's records decompressed by its codec, with the GIL
 * taken for the call; *held keeps them (and is released at the next call, or by the caller).
 * -1 when the codec failed (*raised set for what must propagate): the per-batch path takes it. */
static int view_region_batch(PyThreadState **save, const codecs_t *codecs, const uint8_t *b,
                             Py_ssize_t size, PyObject **held, int *raised, batch_view_t *view) {
    int codec = get16(b + ATTRIBUTES_OFFSET) & CODEC_MASK;
    if (codec == 0) {
        view_batch(b, size, NULL, 0, view);
        return 0;
    }
    PyEval_RestoreThread(*save);
    Py_XDECREF(*held);
    *held = call_codec(codecs->fn[codec], b + RECORD_BATCH_OVERHEAD, size - RECORD_BATCH_OVERHEAD,
                       raised);
    *save = PyEval_SaveThread();
    if (*held == NULL) return -1;
    view_batch(b, size, (const uint8_t *)PyBytes_AS_STRING(*held), PyBytes_GET_SIZE(*held), view);
    return 0;
}

/* The last data offset of producer pid in producers (int64 pairs (pid, last data offset) in
 * native byte order, sorted by pid), or -1. */
static int64_t producer_last_offset(const int64_t *producers, Py_ssize_t n, int64_t pid) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (producers[2 * mid] < pid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < n && producers[2 * lo] == pid ? producers[2 * lo + 1] : -1;
}

/* Whether a batch whose records are all dropped stays as an empty batch (the per-batch path
 * writes it): the one just below upper_bound, or the last batch of its producer. */
static int retains_empty(int64_t batch_last, int64_t producer_id, int64_t upper_bound,
                         const int64_t *pairs, Py_ssize_t producer_count) {
    return batch_last + 1 == upper_bound ||
           (producer_id >= 0 &&
            producer_last_offset(pairs, producer_count, producer_id) == batch_last);
}

#endif
