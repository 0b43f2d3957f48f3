/* Native engine of the cleaner: its two passes over whole file regions, and one batch at a time.
 *
 * The reference is pure Python: storagecore/cleaner/offset_map.py (the map and its SipHash-1-3
 * key digests, storagecore/cleaner/siphash.py) and storagecore/cleaner/cleaner.py
 * (Cleaner.build_offset_map and Cleaner._filter_batch, which decode every record with
 * storagecore.records.batch and rebuild with storagecore.records.memory_records_builder). The
 * functions here take over only what that reference would do without raising, and produce the
 * same map contents, the same decisions and the same bytes:
 *
 * - map_region / filter_region walk a region of a segment (many batches, one call) and take
 *   every leading batch that is complete, valid (length, magic, CRC-32C, counts, record
 *   framing) and plain: not a control batch, not transactional. They stop, having changed
 *   nothing for it, at the first batch that is not (or, filtering, at one whose kept records
 *   are none but which must be kept as an empty batch): the caller takes that batch with
 *   put_keys / filter_records or the reference, then calls again past it. So no Python runs
 *   per record, nor per batch for uncompressed data. A compressed batch costs one call of the
 *   caller's codec (storagecore.records.codecs, the reference's own functions, so the bytes
 *   are the same) to decompress it and, when it is rebuilt, one to compress the kept records;
 *   the call's failure leaves the batch to the per-batch path, which raises the reference's
 *   error.
 * - put_keys / filter_records take one validated data batch, compressed ones with their
 *   records decompressed by the caller (one codec call per batch, never per record). They
 *   return None before changing anything for what they decline (a framing problem, a non-ASCII
 *   header key, an offset or timestamp that overflows, offset deltas that do not increase).
 *
 * tests/unit/storagecore/test_offset_map_native*.py check both paths against each other, byte
 * for byte and counter for counter.
 *
 * The map is the SkimpyOffsetMap's bytearray: slots of 24 bytes (the 16-byte SipHash-1-3-128
 * digest of the key under the clean's secret, then the offset as a big-endian int64); an
 * all-zero slot is empty. Probing is Kafka's: attempt i reads the big-endian int32 at byte
 * min(i, 12) of the digest plus max(0, i - 12), wraps like a Java int, Kafka's Utils.abs
 * (MIN_VALUE -> 0), modulo the slot count.
 *
 * The GIL is released while records are walked, so cleaner threads run in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_cleaner_batch.h"
#include "_cleaner_region.h"
#include "_cleaner_columns.h"

/* ---- regions: many batches, one call ----------------------------------------------------- */

/* RecordBatch.NO_TIMESTAMP. */
#define NO_TIMESTAMP (-1)

/* Why a region call returned. */
enum { STOP_END = 0, STOP_BATCH = 1, STOP_FULL = 2 };

/* map_region(table, slots, size, capacity, secret, region, start, latest_offset, decompressors,
 *            positions, positions_start)
 *   -> (size, latest_offset, walked, consumed, batches, stop, lookups, probes, last_offset)
 *
 * build_offset_map over the leading plain batches of region (see the top of this file): keys
 * of records at offsets >= start are put, latest_offset follows the puts and each batch's last
 * offset (when >= start), as the reference does. decompressors: None (compressed batches are
 * not plain) or, by codec id, callables from a batch's compressed records to its records.
 * stop is STOP_END (every complete batch taken; consumed < len(region) leaves an incomplete
 * one), STOP_BATCH (the batch at consumed is for the per-batch path) or STOP_FULL (the map
 * filled inside the batch that ends at consumed; walked counts its records up to there).
 * last_offset is the last offset of the last batch taken (-1 when none). */
static PyObject *map_region(PyObject *self, PyObject *args) {
    Py_buffer table, secret, region, positions;
    Py_ssize_t slots, size, capacity;
    long long start, latest, positions_start;
    PyObject *decompressors;
    if (!PyArg_ParseTuple(args, "w*nnny*y*LLOw*L", &table, &slots, &size, &capacity, &secret,
                          &region, &start, &latest, &decompressors, &positions, &positions_start))
        return NULL;
    PyObject *result = NULL, *records_held = NULL;
    offset_map_t map;
    sip_key_t key;
    codecs_t codecs;
    scratch_t scratch = {0};
    if (open_map(&table, slots, &secret, &map, &key) < 0) goto done;
    if (open_positions(&positions, positions_start, &map) < 0) goto done;
    if (open_codecs(decompressors, &codecs) < 0) goto done;
    map_progress_t p = {size, capacity, 0, 0, -1, 0, 0};
    Py_ssize_t pos = 0, batches = 0;
    int stop = STOP_END, oom = 0, raised = 0;
    int64_t last_offset = -1;
    const uint8_t *base = (const uint8_t *)region.buf;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        const uint8_t *b = base + pos;
        Py_ssize_t batch_size = plain_batch(b, region.len - pos, &codecs, 0);
        if (batch_size <= 0) {
            stop = batch_size == 0 ? STOP_END : STOP_BATCH;
            break;
        }
        batch_view_t view;
        if (view_region_batch(&_save, &codecs, b, batch_size, &records_held, &raised, &view) < 0) {
            stop = STOP_BATCH;
            break;
        }
        if (!plausible_count(view.count, view.records_bytes)) {
            stop = STOP_BATCH;
            break;
        }
        if (scratch_reserve(&scratch, view.count) < 0) {
            oom = 1;
            break;
        }
        Py_ssize_t puts_before = p.puts;
        if (map_batch(&map, key, &view, start, &scratch, &p) < 0) {
            stop = STOP_BATCH;
            break;
        }
        if (p.puts > puts_before) latest = p.last_put;
        if (p.overfull) break;
        pos += batch_size;
        batches++;
        if (p.full) {
            stop = STOP_FULL;
            break;
        }
        last_offset = view.info.base_offset + view.last_offset_delta;
        if (last_offset >= start) latest = last_offset;
    }
    Py_END_ALLOW_THREADS
    Py_XDECREF(records_held);
    if (raised) {
        /* the codec's KeyboardInterrupt or SystemExit, as it was raised */
    } else if (oom) {
        PyErr_NoMemory();
    } else if (p.overfull) {
        PyErr_SetString(PyExc_AssertionError, "put into a full offset map");
    } else {
        result = Py_BuildValue("nLnnniKKL", p.size, latest, p.walked, pos, batches, stop,
                               map.lookups, map.probes, (long long)last_offset);
    }
done:
    scratch_free(&scratch);
    PyBuffer_Release(&table);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&region);
    PyBuffer_Release(&positions);
    return result;
}

/* Prefetch the cache lines of p[0..size). */
static inline void prefetch_bytes(const uint8_t *p, Py_ssize_t size) {
    for (Py_ssize_t at = 0; at < size; at += 64) __builtin_prefetch(p + at);
}

/* A growable output buffer (PyMem_Raw: used without the GIL). */
typedef struct {
    uint8_t *data;
    size_t used, capacity;
} out_t;

static int out_reserve(out_t *o, size_t more) {
    if (o->capacity - o->used >= more) return 0;
    size_t capacity = o->capacity ? o->capacity : 1 << 16;
    while (capacity - o->used < more) capacity *= 2;
    uint8_t *data = (uint8_t *)PyMem_RawRealloc(o->data, capacity);
    if (data == NULL) return -1;
    o->data = data;
    o->capacity = capacity;
    return 0;
}

/* filter_region(table, slots, latest_offset, secret, region, now_ms, new_horizon_ms,
 *               upper_bound, producers, decompressors, compressors, chunk, positions,
 *               positions_start, checked)
 *   -> (output, chunks, chunk, consumed, batches, messages_read, messages_written, invalid,
 *       verbatim, rebuilt, next_horizon_ms, stop, lookups, probes, last_offset, unread)
 *
 * Cleaner._filter_batch over the leading plain batches of region: output is what the
 * reference would append, batch by batch, cut into the chunks the caller appends to the
 * cleaned segment (cleaner.py's _Output, one LogSegment.append each, so that the offset index
 * is as dense as one written by appends): chunk is its state, a tuple (flush_bytes, pending,
 * last_offset, max_timestamp, offset_of_max_timestamp): a chunk is complete when its pending
 * bytes reach flush_bytes (>= 1); pending bytes were already written before this region's
 * output, into the chunk that the region's output continues; its last offset, and its max
 * timestamp and the offset of the batch that first reached it (-1: none yet). chunks holds,
 * per chunk completed inside output, int64 quads (end position in output, last offset, max
 * timestamp, offset of max timestamp) in native byte order; the returned chunk is the state
 * after output, whose bytes after the last quad's end are pending. next_horizon_ms is the
 * earliest delete horizon of a kept tombstone (None when none). decompressors and
 * compressors: None (compressed batches are not plain) or, by codec id, the callables the
 * reference decompresses a batch's records and compresses a rebuilt batch's kept records with.
 * stop is STOP_END or STOP_BATCH as for map_region; a batch whose records are all dropped but
 * which must stay as an empty batch (the last batch of a producer, or the one just below
 * upper_bound) is left to the per-batch path. checked: how many bytes from the start of
 * region the map pass's map_region took (of the same sealed segment, so the same bytes: their
 * CRCs and records passed its checks); a batch within them is not checked again
 * (plain_batch, reparse_records); unread counts the batches among them whose
 * records were all dropped for later ones, which the notes of the map pass showed without
 * their records being read (superseded_batch). */
static PyObject *filter_region(PyObject *self, PyObject *args) {
    Py_buffer table, secret, region, producers, positions;
    Py_ssize_t slots, checked;
    long long latest_offset, now_ms, new_horizon_ms, upper_bound, positions_start;
    PyObject *decompressors, *compressors;
    long long flush_bytes, pending, chunk_last, chunk_max, chunk_of_max;
    if (!PyArg_ParseTuple(args, "y*nLy*y*LLLy*OO(LLLLL)y*Ln", &table, &slots, &latest_offset,
                          &secret, &region, &now_ms, &new_horizon_ms, &upper_bound, &producers,
                          &decompressors, &compressors, &flush_bytes, &pending, &chunk_last,
                          &chunk_max, &chunk_of_max, &positions, &positions_start, &checked))
        return NULL;
    PyObject *result = NULL, *records_held = NULL, *compressed_held = NULL;
    offset_map_t map;
    sip_key_t key;
    codecs_t unpack, pack;
    scratch_t scratch = {0};
    out_t out = {0}, ends = {0}, raw = {0};
    if (open_map(&table, slots, &secret, &map, &key) < 0) goto done;
    if (open_positions(&positions, positions_start, &map) < 0) goto done;
    if (open_codecs(decompressors, &unpack) < 0 || open_codecs(compressors, &pack) < 0) goto done;
    for (Py_ssize_t id = 1; id < CODEC_IDS; id++) {
        if (pack.fn[id] == NULL) unpack.fn[id] = NULL; /* a codec is plain with both ways only */
    }
    if (flush_bytes < 1 || pending < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk: flush_bytes >= 1 and pending >= 0");
        goto done;
    }
    if (producers.len % 16 != 0) {
        PyErr_SetString(PyExc_ValueError, "producers must be int64 pairs");
        goto done;
    }
    const int64_t *pairs = (const int64_t *)producers.buf;
    Py_ssize_t producer_count = producers.len / 16;
    Py_ssize_t pos = 0, batches = 0, read = 0, written = 0, invalid = 0, verbatim = 0;
    Py_ssize_t rebuilt = 0, unread = 0;
    int64_t next_horizon = INT64_MAX, last_offset = -1;
    int stop = STOP_END, oom = 0, raised = 0;
    const uint8_t *base = (const uint8_t *)region.buf;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        const uint8_t *b = base + pos;
        Py_ssize_t batch_size = plain_batch(b, region.len - pos, &unpack, checked - pos);
        if (batch_size <= 0) {
            stop = batch_size == 0 ? STOP_END : STOP_BATCH;
            break;
        }
        int64_t batch_last = get64(b + BASE_OFFSET_OFFSET) + get32(b + LAST_OFFSET_DELTA_OFFSET);
        unsigned long long skipped_probes;
        if (pos + batch_size <= checked &&
            !retains_empty(batch_last, get64(b + PRODUCER_ID_OFFSET), upper_bound, pairs,
                           producer_count) &&
            superseded_batch(&map, b, latest_offset, &skipped_probes)) {
            /* Every record dropped for a later one (the notes say so): as filter_batch would
             * decide, without reading the records. */
            Py_ssize_t count = get32(b + RECORDS_COUNT_OFFSET);
            map.lookups += (unsigned long long)count;
            map.probes += skipped_probes;
            read += count;
            last_offset = batch_last;
            pos += batch_size;
            batches++;
            unread++;
            continue;
        }
        if (pos + batch_size <= checked) {
            /* No CRC streams through the next batch before its records are read here (a few
             * bytes of each, which the hardware prefetcher follows poorly across pages): ask
             * for its bytes, about one batch's worth, while this one is filtered. */
            Py_ssize_t ahead = region.len - pos - batch_size;
            prefetch_bytes(b + batch_size, ahead < batch_size ? ahead : batch_size);
        }
        batch_view_t view;
        if (view_region_batch(&_save, &unpack, b, batch_size, &records_held, &raised, &view) < 0) {
            stop = STOP_BATCH;
            break;
        }
        int codec = view.attributes & CODEC_MASK;
        if (!plausible_count(view.count, view.records_bytes)) {
            stop = STOP_BATCH;
            break;
        }
        /* Room for the batch verbatim or rebuilt in place (uncompressed), or for its kept
         * records before compression. */
        size_t room = filter_room(&view) + (size_t)batch_size;
        if (scratch_reserve(&scratch, view.count) < 0 || out_reserve(&out, room) < 0 ||
            out_reserve(&ends, 4 * sizeof(int64_t)) < 0 ||
            (codec != 0 && out_reserve(&raw, filter_room(&view)) < 0)) {
            oom = 1;
            break;
        }
        filtered_t f;
        /* A batch left to the per-batch path is looked up again there: count it once. */
        unsigned long long lookups = map.lookups, probes = map.probes;
        uint8_t *target = codec != 0 ? raw.data : out.data + out.used;
        if (filter_batch(&map, key, latest_offset, &view, codec == 0, now_ms, new_horizon_ms,
                         pos + batch_size <= checked, &scratch, target, &f) < 0) {
            map.lookups = lookups;
            map.probes = probes;
            stop = STOP_BATCH;
            break;
        }
        if (f.kept == 0) {
            if (retains_empty(batch_last, view.producer_id, upper_bound, pairs, producer_count)) {
                map.lookups = lookups;
                map.probes = probes;
                stop = STOP_BATCH;
                break;
            }
        }
        if (codec != 0 && f.out_bytes > 0) {
            /* rebuild_batch_from_payload: the kept records compressed, then framed. */
            Py_BLOCK_THREADS
            Py_XDECREF(compressed_held);
            compressed_held = call_codec(pack.fn[codec], raw.data, f.out_bytes, &raised);
            Py_UNBLOCK_THREADS
            Py_ssize_t packed = compressed_held == NULL ? 0 : PyBytes_GET_SIZE(compressed_held);
            if (compressed_held == NULL ||
                out_reserve(&out, (size_t)(RECORD_BATCH_OVERHEAD + packed)) < 0) {
                map.lookups = lookups;
                map.probes = probes;
                if (compressed_held == NULL) {
                    stop = STOP_BATCH;
                } else {
                    oom = 1;
                }
                break;
            }
            memcpy(out.data + out.used + RECORD_BATCH_OVERHEAD, PyBytes_AS_STRING(compressed_held),
                   (size_t)packed);
            f.out_bytes = RECORD_BATCH_OVERHEAD + packed;
            frame_batch(out.data + out.used, &view, &f, f.out_bytes);
        }
        /* From here the batch is taken. */
        read += view.count;
        invalid += f.invalid;
        if (f.tombstones) {
            int64_t due = f.set_horizon ? new_horizon_ms : view.info.base_timestamp;
            if (due < next_horizon) next_horizon = due;
        }
        int64_t max_timestamp = view.max_timestamp;
        size_t used_before = out.used;
        if (f.kept > 0 && f.out_bytes == 0) {
            memcpy(out.data + out.used, b, (size_t)batch_size);
            out.used += (size_t)batch_size;
            verbatim++;
            written += f.kept;
        } else if (f.kept > 0) {
            out.used += (size_t)f.out_bytes;
            max_timestamp = f.max_timestamp;
            rebuilt++;
            written += f.kept;
        }
        if (f.kept > 0) {
            /* _Output.add of the batch. */
            pending += (long long)(out.used - used_before);
            chunk_last = batch_last;
            if (max_timestamp > chunk_max || chunk_of_max < 0) {
                if (max_timestamp > chunk_max) chunk_max = max_timestamp;
                chunk_of_max = batch_last;
            }
            if (pending >= flush_bytes) {
                int64_t quad[4] = {(int64_t)out.used, chunk_last, chunk_max, chunk_of_max};
                memcpy(ends.data + ends.used, quad, sizeof(quad));
                ends.used += sizeof(quad);
                pending = 0;
                chunk_max = NO_TIMESTAMP;
                chunk_of_max = -1;
            }
        }
        last_offset = batch_last;
        pos += batch_size;
        batches++;
    }
    Py_END_ALLOW_THREADS
    Py_XDECREF(records_held);
    Py_XDECREF(compressed_held);
    if (raised) goto done; /* the codec's KeyboardInterrupt or SystemExit, as it was raised */
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject *output = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.used);
    PyObject *chunks = PyBytes_FromStringAndSize((const char *)ends.data, (Py_ssize_t)ends.used);
    PyObject *horizon = next_horizon == INT64_MAX ? Py_NewRef(Py_None)
                                                  : PyLong_FromLongLong(next_horizon);
    if (output != NULL && chunks != NULL && horizon != NULL) {
        result = Py_BuildValue("OO(LLLLL)nnnnnnnOiKKLn", output, chunks, flush_bytes, pending,
                               chunk_last, chunk_max, chunk_of_max, pos, batches, read, written,
                               invalid, verbatim, rebuilt, horizon, stop, map.lookups,
                               map.probes, (long long)last_offset, unread);
    }
    Py_XDECREF(output);
    Py_XDECREF(chunks);
    Py_XDECREF(horizon);
done:
    scratch_free(&scratch);
    PyMem_RawFree(out.data);
    PyMem_RawFree(ends.data);
    PyMem_RawFree(raw.data);
    PyBuffer_Release(&table);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&region);
    PyBuffer_Release(&positions);
    PyBuffer_Release(&producers);
    return result;
}

/* ---- one validated batch (compressed ones, and what a region call left) ------------------ */

/* The per-batch entry points' shared start: the map and its secret, a buffer at least a
 * batch header long, its view, and scratch room for its records. 1 when ready; 0 when the
 * records are declined (a count they cannot hold); -1 with an exception set. */
static int open_one_batch(Py_buffer *table, Py_ssize_t slots, Py_buffer *secret,
                          Py_buffer *batch, Py_buffer *payload, offset_map_t *map,
                          sip_key_t *key, batch_view_t *view, scratch_t *scratch) {
    if (open_map(table, slots, secret, map, key) < 0) return -1;
    if (batch->len < RECORD_BATCH_OVERHEAD) {
        PyErr_Format(PyExc_ValueError, "record batch of %zd bytes is smaller than its header",
                     batch->len);
        return -1;
    }
    view_batch((const uint8_t *)batch->buf, batch->len, (const uint8_t *)payload->buf,
               payload->len, view);
    if (!plausible_count(view->count, view->records_bytes)) return 0;
    if (scratch_reserve(scratch, view->count) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 1;
}

/* put_keys(table, slots, size, capacity, secret, batch, payload, start)
 *   -> (size, puts, last_put_offset, walked, full, lookups, probes) | None
 *
 * map_batch over one data batch that the caller validated (payload: its decompressed records,
 * or None when it is uncompressed). Nothing is changed when the records are declined (None). */
static PyObject *put_keys(PyObject *self, PyObject *args) {
    Py_buffer table, secret, batch, payload = {0};
    Py_ssize_t slots, size, capacity;
    long long start;
    if (!PyArg_ParseTuple(args, "w*nnny*y*z*L", &table, &slots, &size, &capacity, &secret, &batch,
                          &payload, &start))
        return NULL;
    PyObject *result = NULL;
    offset_map_t map;
    sip_key_t key;
    scratch_t scratch = {0};
    batch_view_t view;
    int opened = open_one_batch(&table, slots, &secret, &batch, &payload, &map, &key, &view,
                                &scratch);
    if (opened <= 0) {
        if (opened == 0) result = Py_NewRef(Py_None);
        goto done;
    }
    map_progress_t p = {size, capacity, 0, 0, -1, 0, 0};
    int declined;
    Py_BEGIN_ALLOW_THREADS
    declined = map_batch(&map, key, &view, start, &scratch, &p);
    Py_END_ALLOW_THREADS
    if (p.overfull) {
        PyErr_SetString(PyExc_AssertionError, "put into a full offset map");
    } else if (declined) {
        result = Py_NewRef(Py_None);
    } else {
        result = Py_BuildValue("nnLnOKK", p.size, p.puts, (long long)p.last_put, p.walked,
                               p.full ? Py_True : Py_False, map.lookups, map.probes);
    }
done:
    scratch_free(&scratch);
    PyBuffer_Release(&table);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&batch);
    if (payload.buf != NULL) PyBuffer_Release(&payload);
    return result;
}

/* filter_records(table, slots, latest_offset, secret, batch, payload, now_ms, new_horizon_ms)
 *   -> (kept, invalid, contains_tombstones, rebuilt, max_timestamp, base_timestamp, lookups,
 *       probes) | None
 *
 * filter_batch over one validated data batch; rebuilt is None when nothing was kept or the
 * batch is copied verbatim. */
static PyObject *filter_records(PyObject *self, PyObject *args) {
    Py_buffer table, secret, batch, payload = {0};
    Py_ssize_t slots;
    long long latest_offset, now_ms, new_horizon_ms;
    if (!PyArg_ParseTuple(args, "y*ny*Ly*z*LL", &table, &slots, &secret, &latest_offset, &batch,
                          &payload, &now_ms, &new_horizon_ms))
        return NULL;
    PyObject *result = NULL;
    offset_map_t map;
    sip_key_t key;
    scratch_t scratch = {0};
    uint8_t *out = NULL;
    batch_view_t view;
    int opened = open_one_batch(&table, slots, &secret, &batch, &payload, &map, &key, &view,
                                &scratch);
    if (opened <= 0) {
        if (opened == 0) result = Py_NewRef(Py_None);
        goto done;
    }
    out = (uint8_t *)PyMem_RawMalloc(filter_room(&view));
    if (out == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    filtered_t f;
    int declined;
    Py_BEGIN_ALLOW_THREADS
    declined = filter_batch(&map, key, latest_offset, &view, payload.buf == NULL, now_ms,
                            new_horizon_ms, 0, &scratch, out, &f);
    Py_END_ALLOW_THREADS
    if (declined) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *rebuilt = f.out_bytes > 0
                            ? PyBytes_FromStringAndSize((const char *)out, f.out_bytes)
                            : Py_NewRef(Py_None);
    if (rebuilt != NULL) {
        result = Py_BuildValue("nnONLLKK", f.kept, f.invalid, f.tombstones ? Py_True : Py_False,
                               rebuilt, (long long)f.max_timestamp, (long long)f.new_base,
                               map.lookups, map.probes); /* N: rebuilt's reference is stolen */
    }
done:
    scratch_free(&scratch);
    PyMem_RawFree(out);
    PyBuffer_Release(&table);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&batch);
    if (payload.buf != NULL) PyBuffer_Release(&payload);
    return result;
}

/* siphash(data, secret, c_rounds, d_rounds) -> 16 bytes: for the tests (reference vectors and
 * the Python reference). */
static PyObject *siphash(PyObject *self, PyObject *args) {
    Py_buffer data, secret;
    int c_rounds, d_rounds;
    if (!PyArg_ParseTuple(args, "y*y*ii", &data, &secret, &c_rounds, &d_rounds)) return NULL;
    PyObject *result = NULL;
    if (secret.len != SIPHASH_KEY_BYTES || c_rounds < 1 || d_rounds < 1) {
        PyErr_SetString(PyExc_ValueError, "siphash: 16-byte secret and positive rounds");
    } else {
        uint8_t digest[SIPHASH_OUT_BYTES];
        siphash128((const uint8_t *)data.buf, (size_t)data.len,
                   sip_key((const uint8_t *)secret.buf), c_rounds, d_rounds, digest);
        result = PyBytes_FromStringAndSize((const char *)digest, SIPHASH_OUT_BYTES);
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&secret);
    return result;
}

/* crc32c(data) -> int: the extension's CRC-32C, for the test that checks it. */
static PyObject *crc32c_of(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t crc = crc32c((const uint8_t *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* ---- legacy (v0/v1) message sets: after open_map, which they use ------------------------ */
#include "_cleaner_legacy.h"

static PyMethodDef methods[] = {
    {"siphash", siphash, METH_VARARGS, "SipHash-c-d-128 of a bytes-like object."},
    {"crc32c", crc32c_of, METH_VARARGS, "CRC-32C of a bytes-like object."},
    {"map_region", map_region, METH_VARARGS, "Map the keys of a region's leading plain batches."},
    {"filter_region", filter_region, METH_VARARGS,
     "Filter a region's leading plain batches into cleaned output."},
    {"put_keys", put_keys, METH_VARARGS, "Map the keys of one data batch."},
    {"digest_keys", digest_keys, METH_VARARGS, "The map's digests of an Arrow binary column."},
    {"put_digests", put_digests, METH_VARARGS, "Put many (digest, offset) pairs."},
    {"filter_records", filter_records, METH_VARARGS,
     "Retention decisions and the rebuilt batch (or records) of one data batch."},
    {"put_legacy_keys", put_legacy_keys, METH_VARARGS,
     "Map the keys of one legacy message set (see _cleaner_legacy.h)."},
    {"filter_legacy_records", filter_legacy_records, METH_VARARGS,
     "Retention decisions for one legacy message set (see _cleaner_legacy.h)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storagecore.cleaner._native",
    "Native engine of the cleaner (see storagecore/cleaner/_native.c).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc32c_init();
    siphash_init();
    legacy_crc32_init(); /* this module's copy of the CRC-32 table (_legacy.h) */
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (add_layout_constants(m) < 0 || PyModule_AddIntConstant(m, "HASH_BYTES", HASH_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_BYTES", ENTRY_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "SECRET_BYTES", SIPHASH_KEY_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "SIP_C_ROUNDS", SIP_C_ROUNDS) < 0 ||
        PyModule_AddIntConstant(m, "SIP_D_ROUNDS", SIP_D_ROUNDS) < 0 ||
        PyModule_AddIntConstant(m, "STOP_END", STOP_END) < 0 ||
        PyModule_AddIntConstant(m, "STOP_BATCH", STOP_BATCH) < 0 ||
        PyModule_AddIntConstant(m, "STOP_FULL", STOP_FULL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
