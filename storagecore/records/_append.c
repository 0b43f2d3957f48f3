/* The append fast path of storagecore.records._native (compiled into that module, see
 * _native.c): whole-request validation of uncompressed batches, the write of a validated request
 * and its index entries (_append.h; the entry point that writes is _segment_append.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_layout.h"
#include "_walker.h"
#include "_scan.h"
#include "_append.h"

/* ---- whole-request validation of uncompressed batches (the append fast path) ------------------
 *
 * One validation (plan_uncompressed) reads the request without changing it and records per batch
 * what the leader rewrites (base offset, leader epoch, and where they differ the max timestamp,
 * the timestamp type bit and hence the CRC). Two entry points use it:
 *
 * validate_uncompressed(out, next_offset, now_ms, client, replication, compact, max_message_bytes,
 *                       leader_epoch, before_max_ms, after_max_ms)
 *   `out` is a bytearray holding a copy of the request; the rewrites are applied to it in place.
 *   Returns (first_offset, last_offset, max_timestamp, offset_of_max_timestamp, record_count,
 *   batch_count).
 *
 * append_to_segment (_segment_append.c): the same validation fused with the active segment's
 *   write (append_planned: pwritev of the rewritten headers and the request's records, no copy)
 *   and its index entries (index_prepare / index_write); the file gets exactly the bytes
 *   validate_uncompressed leaves in `out`.
 *
 * lz4 batches are taken when the caller says so (append_to_segment's settings: the topic keeps
 * the producer's compression and _lz4_frame.c's decoder is the Python path's): each is decoded
 * into the thread's buffer and its records walked as an uncompressed payload's; the write is
 * the same (the compressed records unchanged, the header rewritten).
 *
 * A request the validation does not take (another compressed batch, an lz4 frame the decoder
 * declines, any check of storagecore.log_validator failing) gives None: nothing is changed, and
 * the decision (and the error message) is left to the Python reference, which is the
 * specification. The topic must use CreateTime. Field positions are those of
 * storagecore/records/layout.py; test_native.py checks the exported copies.
 */
/* CRC-32C of base[start:end]: _layout.h's three-stream loop, the one storagecore.records.crc
 * exposes (a call through Python cost ~3 600 instructions a batch). */
static inline uint32_t crc_of(const uint8_t *base, Py_ssize_t start, Py_ssize_t end) {
    return crc32c(base + start, (size_t)(end - start));
}

void plan_release(plan_t *plan) {
    if (plan->batches != &plan->one) PyMem_Free(plan->batches);
}

/* 1: every batch valid (plan filled); 0: hand the request to Python; -1: an exception is set. */
int plan_uncompressed(const uint8_t *buf, Py_ssize_t end, const validate_params_t *p,
                             plan_t *plan) {
    plan->batches = &plan->one;
    plan->count = 0;
    plan->capacity = 1;
    plan->has_producer = 0;
    if (end == 0) return 0;
    long long counter = p->next_offset, first_offset = -1, max_timestamp = -1, offset_of_max = -1;
    long long record_count = 0;
    Py_ssize_t pos = 0;
    while (pos < end) {
        if (end - pos < RECORD_BATCH_OVERHEAD) return 0;
        const uint8_t *b = buf + pos;
        int64_t base_offset = get64(b + BASE_OFFSET_OFFSET);
        int32_t length = get32(b + LENGTH_OFFSET);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (size < RECORD_BATCH_OVERHEAD || size > end - pos) return 0;
        if (b[MAGIC_OFFSET] != 2) return 0;
        int16_t attributes = get16(b + ATTRIBUTES_OFFSET);
        /* Compressed: the Python path (checked before the CRC, which that path computes), but
         * for lz4 when the caller allows it (the same decoder as the Python path's). */
        int codec = attributes & CODEC_MASK;
        if (codec != 0 && (codec != LZ4_CODEC || !p->lz4)) return 0;
        if (crc_of(buf, pos + ATTRIBUTES_OFFSET, pos + size) != (uint32_t)get32(b + CRC_OFFSET))
            return 0;
        if (size > p->max_message_bytes) return 0;
        int is_control = (attributes & CONTROL_FLAG_MASK) != 0;
        int32_t last_delta = get32(b + LAST_OFFSET_DELTA_OFFSET);
        int64_t base_timestamp = get64(b + BASE_TIMESTAMP_OFFSET);
        int64_t batch_max_timestamp = get64(b + MAX_TIMESTAMP_OFFSET);
        int64_t producer_id = get64(b + PRODUCER_ID_OFFSET);
        int32_t base_sequence = get32(b + BASE_SEQUENCE_OFFSET);
        int32_t count = get32(b + RECORDS_COUNT_OFFSET);
        if (p->client) {
            if (base_offset != 0) return 0;
            if (count <= 0 || (int64_t)last_delta + 1 != count) return 0;
            if (is_control) return 0;
            if (producer_id != -1 && base_sequence < 0) return 0;
            if (attributes & TIMESTAMP_TYPE_MASK) return 0;
        } else if (count < 0 || last_delta < 0 || (int64_t)count > (int64_t)last_delta + 1) {
            return 0;
        }
        long long assigned;
        if (p->replication) {
            if (base_offset < counter) return 0;
            assigned = base_offset;
        } else {
            assigned = counter;
        }
        const uint8_t *records = b + RECORD_BATCH_OVERHEAD;
        Py_ssize_t records_size = size - RECORD_BATCH_OVERHEAD;
        if (codec != 0) {
            records_size = storagecore_lz4_frame_decode(records, records_size, &records);
            if (records_size < 0) return 0;
        }
        scan_t r;
        scan_impl(records, records_size, count, base_timestamp, &r);
        if (r.problem != PROBLEM_NONE) return 0;
        if (p->client && !r.sequential) return 0;
        if (r.null_keys && p->compact && !is_control) return 0;
        if (count && !is_control) {
            long long behind, ahead;
            if (__builtin_sub_overflow(p->now_ms, r.min_ts, &behind) || behind > p->before_max_ms)
                return 0;
            if (__builtin_sub_overflow(r.max_ts, p->now_ms, &ahead) || ahead > p->after_max_ms)
                return 0;
        }
        long long last_offset;
        if (__builtin_add_overflow(assigned, (long long)last_delta, &last_offset)) return 0;
        if (plan->count == plan->capacity) {
            Py_ssize_t capacity = plan->capacity * 4;
            planned_batch_t *grown = PyMem_Malloc((size_t)capacity * sizeof(planned_batch_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            memcpy(grown, plan->batches, (size_t)plan->count * sizeof(planned_batch_t));
            plan_release(plan);
            plan->batches = grown;
            plan->capacity = capacity;
        }
        planned_batch_t *planned = &plan->batches[plan->count++];
        long long batch_max = count ? r.max_ts : batch_max_timestamp;
        planned->pos = pos;
        planned->size = size;
        planned->assigned = assigned;
        planned->batch_max = batch_max;
        planned->fix_max =
            batch_max != batch_max_timestamp || (attributes & TIMESTAMP_TYPE_MASK) != 0;
        if (producer_id != -1) plan->has_producer = 1;
        if (first_offset < 0) first_offset = assigned;
        if (batch_max > max_timestamp) {
            max_timestamp = batch_max;
            offset_of_max = last_offset;
        }
        counter = last_offset + 1;
        record_count += count;
        pos += size;
    }
    plan->first_offset = first_offset;
    plan->last_offset = counter - 1;
    plan->max_timestamp = max_timestamp;
    plan->offset_of_max = offset_of_max >= 0 ? offset_of_max : counter - 1;
    plan->record_count = record_count;
    return 1;
}

/* Apply one planned batch's rewrites to the batch's header at `b`. With `whole` (the whole batch
 * at `b`, not only its header) the CRC is recomputed when the plan says so; without it the caller
 * does that. */
static void rewrite_header(uint8_t *b, const planned_batch_t *planned, const validate_params_t *p,
                           int whole) {
    put64(b + BASE_OFFSET_OFFSET, planned->assigned);
    if (!p->replication) put32(b + PARTITION_LEADER_EPOCH_OFFSET, (uint32_t)p->leader_epoch);
    if (planned->fix_max) {
        uint16_t cleared = (uint16_t)get16(b + ATTRIBUTES_OFFSET) & (uint16_t)~TIMESTAMP_TYPE_MASK;
        put16(b + ATTRIBUTES_OFFSET, cleared);
        put64(b + MAX_TIMESTAMP_OFFSET, planned->batch_max);
        if (whole) put32(b + CRC_OFFSET, crc_of(b, ATTRIBUTES_OFFSET, planned->size));
    }
}

void apply_plan(uint8_t *buf, const plan_t *plan, const validate_params_t *p) {
    for (Py_ssize_t i = 0; i < plan->count; i++)
        rewrite_header(buf + plan->batches[i].pos, &plan->batches[i], p, 1);
}

static PyObject *plan_result(const plan_t *plan) {
    return Py_BuildValue("(LLLLLn)", plan->first_offset, plan->last_offset, plan->max_timestamp,
                         plan->offset_of_max, plan->record_count, plan->count);
}

PyObject *storagecore_validate_uncompressed(PyObject *self, PyObject *args) {
    PyObject *out_obj;
    validate_params_t p;
    if (!PyArg_ParseTuple(args, "YLLpppniLL", &out_obj, &p.next_offset, &p.now_ms, &p.client,
                          &p.replication, &p.compact, &p.max_message_bytes, &p.leader_epoch,
                          &p.before_max_ms, &p.after_max_ms))
        return NULL;
    p.lz4 = 0; /* compressed batches: the Python path */
    uint8_t *buf = (uint8_t *)PyByteArray_AS_STRING(out_obj);
    plan_t plan;
    int planned = plan_uncompressed(buf, PyByteArray_GET_SIZE(out_obj), &p, &plan);
    PyObject *result = NULL;
    if (planned == 1) {
        apply_plan(buf, &plan, &p);
        result = plan_result(&plan);
    } else if (planned == 0) {
        result = Py_NewRef(Py_None);
    }
    plan_release(&plan);
    return result;
}

/* `total` bytes of the `n` buffers of `iov` written at *position of `fd` (advanced), going on
 * after short writes; `iov` is consumed. 0, else errno: then the file is cut back to `start`,
 * where the append began, so that no partial batch stays behind (a full filesystem), as
 * FileRecords.append. Runs without the GIL. */
static int pwritev_all(int fd, long long *position, struct iovec *iov, int n, size_t total,
                       long long start) {
    struct iovec *cursor = iov;
    while (total > 0) {
        ssize_t written = pwritev(fd, cursor, n, (off_t)*position);
        if (written <= 0) {
            if (written < 0 && errno == EINTR) continue;
            int error = written < 0 ? errno : EIO;
            if (*position > start) (void)!ftruncate(fd, (off_t)start); /* the write's errno */
            return error;
        }
        *position += written;
        total -= (size_t)written;
        while (n > 0 && (size_t)written >= cursor->iov_len) { /* a short write: go on */
            written -= (ssize_t)cursor->iov_len;
            cursor++;
            n--;
        }
        if (n > 0) {
            cursor->iov_base = (uint8_t *)cursor->iov_base + written;
            cursor->iov_len -= (size_t)written;
        }
    }
    return 0;
}

/* Write the planned batches at `position`: per batch its rewritten header (from `headers`, or a
 * rewritten copy of the whole batch in `copies` when its CRC changes), then its records from
 * `data`. 0 on success, else errno. Runs without the GIL. */
static int write_plan(int fd, long long position, const uint8_t *data, const plan_t *plan,
                      uint8_t *headers, uint8_t *const *copies) {
    enum { IOVECS_MAX = 512 }; /* below IOV_MAX (1024) */
    struct iovec iov[IOVECS_MAX];
    Py_ssize_t next = 0;
    const long long start = position;
    while (next < plan->count) {
        int n = 0;
        size_t total = 0;
        for (; next < plan->count && n + 2 <= IOVECS_MAX; next++) {
            const planned_batch_t *planned = &plan->batches[next];
            if (copies[next] != NULL) {
                iov[n++] = (struct iovec){copies[next], (size_t)planned->size};
            } else {
                iov[n++] = (struct iovec){headers + next * RECORD_BATCH_OVERHEAD,
                                          RECORD_BATCH_OVERHEAD};
                iov[n++] = (struct iovec){(void *)(data + planned->pos + RECORD_BATCH_OVERHEAD),
                                          (size_t)(planned->size - RECORD_BATCH_OVERHEAD)};
            }
            total += (size_t)planned->size;
        }
        int error = pwritev_all(fd, &position, iov, n, total, start);
        if (error != 0) return error;
    }
    return 0;
}

/* The write of an already rewritten request (the native write of batches with producer ids,
 * checked by the Python producer state first). */
int append_bytes(const uint8_t *data, Py_ssize_t size, int fd, long long position) {
    struct iovec one = {(void *)data, (size_t)size};
    int error;
    Py_BEGIN_ALLOW_THREADS
    error = pwritev_all(fd, &position, &one, 1, (size_t)size, position);
    Py_END_ALLOW_THREADS
    if (error != 0) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* 1: the entries the append is due (none, or an offset entry and maybe a time entry) have room
 * in the mappings, whose buffers are then held; 0: not (the general path grows or rolls). */
int index_prepare(index_update_t *ix, const plan_t *plan) {
    ix->offset_entry = ix->time_entry = 0;
    ix->offset_view.obj = ix->time_view.obj = NULL;
    if (ix->bytes_since <= ix->interval) return 1; /* entries track the bytes of earlier appends */
    ix->time_timestamp = ix->max_so_far;
    ix->time_offset = ix->offset_of_max_so_far;
    if (plan->max_timestamp > ix->max_so_far) {
        ix->time_timestamp = plan->max_timestamp;
        ix->time_offset = plan->offset_of_max;
    }
    ix->offset_entry = 1;
    ix->time_entry = ix->time_timestamp > ix->time_last_timestamp;
    if (ix->offset_index == Py_None ||
        PyObject_GetBuffer(ix->offset_index, &ix->offset_view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        ix->offset_view.obj = NULL;
        return 0;
    }
    if ((ix->offset_entries + 1) * OFFSET_INDEX_ENTRY_BYTES > ix->offset_view.len) return 0;
    if (ix->time_entry) {
        if (ix->time_index == Py_None ||
            PyObject_GetBuffer(ix->time_index, &ix->time_view, PyBUF_WRITABLE) < 0) {
            PyErr_Clear();
            ix->time_view.obj = NULL;
            return 0;
        }
        if ((ix->time_entries + 1) * TIME_INDEX_ENTRY_BYTES > ix->time_view.len) return 0;
    }
    return 1;
}

void index_release(index_update_t *ix) {
    if (ix->offset_view.obj != NULL) PyBuffer_Release(&ix->offset_view);
    if (ix->time_view.obj != NULL) PyBuffer_Release(&ix->time_view);
}

/* Write the prepared entries (after the batches are in the file, as record_appended does); how
 * many: 0, 1 (offset index) or 2 (both). OffsetIndex: int32 relative offset, int32 position;
 * TimeIndex: int64 timestamp, int32 relative offset (storagecore/index/). */
int index_write(index_update_t *ix, const plan_t *plan, long long base_offset,
                       long long position) {
    if (!ix->offset_entry) return 0;
    uint8_t *entry = (uint8_t *)ix->offset_view.buf + ix->offset_entries * OFFSET_INDEX_ENTRY_BYTES;
    put32(entry, (uint32_t)(plan->last_offset - base_offset));
    put32(entry + 4, (uint32_t)position);
    if (!ix->time_entry) return 1;
    entry = (uint8_t *)ix->time_view.buf + ix->time_entries * TIME_INDEX_ENTRY_BYTES;
    put64(entry, ix->time_timestamp);
    put32(entry + 8, (uint32_t)(ix->time_offset - base_offset));
    return 2;
}

/* 0 when written, else -1 with an exception set (nothing written then, or the write cut back). */
int append_planned(const uint8_t *data, int fd, long long position, const plan_t *plan,
                          const validate_params_t *p) {
    Py_ssize_t count = plan->count;
    uint8_t *headers = PyMem_Malloc((size_t)count * (RECORD_BATCH_OVERHEAD + sizeof(uint8_t *)));
    if (headers == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    uint8_t **copies = (uint8_t **)(headers + count * RECORD_BATCH_OVERHEAD);
    int failed = 0; /* out of memory */
    for (Py_ssize_t i = 0; i < count; i++) {
        const planned_batch_t *planned = &plan->batches[i];
        copies[i] = NULL;
        if (failed) continue;
        if (planned->fix_max) { /* a new CRC: rewrite a copy of the whole batch */
            copies[i] = PyMem_Malloc((size_t)planned->size);
            if (copies[i] == NULL) {
                failed = 1;
                continue;
            }
            memcpy(copies[i], data + planned->pos, (size_t)planned->size);
            rewrite_header(copies[i], planned, p, 1);
        } else {
            uint8_t *header = headers + i * RECORD_BATCH_OVERHEAD;
            memcpy(header, data + planned->pos, RECORD_BATCH_OVERHEAD);
            rewrite_header(header, planned, p, 0);
        }
    }
    int error = 0;
    if (!failed) {
        Py_BEGIN_ALLOW_THREADS
        error = write_plan(fd, position, data, plan, headers, copies);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < count; i++) PyMem_Free(copies[i]);
    PyMem_Free(headers);
    if (failed) {
        PyErr_NoMemory();
        return -1;
    }
    if (error != 0) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* This file's copy of _layout.h's CRC tables, and the index entry sizes as module constants. */
int storagecore_append_init(PyObject *module) {
    crc32c_init();
    if (PyModule_AddIntConstant(module, "OFFSET_INDEX_ENTRY_BYTES", OFFSET_INDEX_ENTRY_BYTES) < 0)
        return -1;
    return PyModule_AddIntConstant(module, "TIME_INDEX_ENTRY_BYTES", TIME_INDEX_ENTRY_BYTES);
}
