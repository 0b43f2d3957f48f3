/* The active segment's append in one call (compiled into storagecore.records._native, see
 * _native.c):
 *
 * append_to_segment(settings, segment, fd, data, now_ms, client, replication, leader_epoch)
 *
 *   Kafka's LogValidator, FileRecords.append and LogSegment.append with its index entries, for a
 *   request of uncompressed (or, the settings allowing it, lz4) batches without producer ids
 *   that fits the active `segment` (storagecore.segment.LogSegment, whose files the caller
 *   pinned: `fd` is its .log's descriptor) without a roll. `settings` is
 *   storagecore.native_append.native_append_settings's tuple: (segment_bytes, max_segment_ms,
 *   compact, max_message_bytes, message_timestamp_before_max_ms,
 *   message_timestamp_after_max_ms, lz4), lz4 true when lz4 batches may be validated here too
 *   (see storagecore.native_append).
 *
 *   The segment's state is read from, and written back to, its Python objects (the segment, its
 *   FileRecords and its two indexes stay the only holders of it), with the rules of the Python
 *   code they replace on the hot path: LogSegment.native_append_state's reads, should_roll's
 *   conditions as far as they do not depend on the request (an index full, the segment's time
 *   up), IndexBase.native_target's common case (the mapping, the next entry, its blocks
 *   reserved; anything else is asked of the index's own native_target), and
 *   LogSegment.record_appended's bookkeeping (the file's size, the rolling timestamp, the max
 *   timestamp so far, the index entries counted as IndexBase.entry_written does, the bytes since
 *   the last entry, the next offset).
 *
 *   Returns (first_offset, last_offset, max_timestamp, offset_of_max_timestamp, record_count,
 *   bytes_written) when written; the fields of storagecore.log_validator.ValidatedRecords
 *   (rewritten bytes, first, last, max timestamp, its offset, records, batches, -1) when the
 *   request is valid but not written (a producer id, a roll, an index entry whose blocks are not
 *   reserved yet), and a ninth, True when only its producer ids kept it back; None when nothing
 *   is decided (compressed or invalid batches, a request that does not fit the segment): the
 *   caller validates with the Python reference.
 *   Nothing is written unless the whole request is.
 *
 * write_to_segment: the write half, for a request append_to_segment handed back only because of
 *   its producer ids (see below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_layout.h"
#include "_append.h"
#include "_slots.h"

/* Method names, interned once; the attributes, read and written at their slots (_slots.h). */
static PyObject *s_verify, *s_max_timestamp_entry, *s_next_offset, *s_load_first, *s_last_raw,
    *s_native_target, *s_entry_written, *s_reserve_kw;

SLOT(a_verify_with, "_verify_with")
SLOT(a_max_timestamp, "_max_timestamp")
SLOT(a_next_offset_cached, "_next_offset")
SLOT(a_log, "_log")
SLOT(a_offset_index, "_offset_index")
SLOT(a_time_index, "_time_index")
SLOT(a_size_bytes, "size_bytes")
SLOT(a_base_offset, "base_offset")
SLOT(a_bytes_since, "bytes_since_last_index_entry")
SLOT(a_interval, "index_interval_bytes")
SLOT(a_jitter, "rolling_jitter_ms")
SLOT(a_rolling_based, "rolling_based_timestamp")
SLOT(a_created_ms, "created_ms")
SLOT(a_entries, "entries")
SLOT(a_max_entries, "max_entries")
SLOT(a_mapping, "_mapping")
SLOT(a_reserved, "_reserved")
SLOT(a_columns, "_columns")
SLOT(a_last, "_last")
SLOT(a_dirty, "_dirty")
#undef SLOT

static int set_ll(PyObject *obj, slot_attr_t *name, long long value) {
    PyObject *item = PyLong_FromLongLong(value);
    if (item == NULL) return -1;
    int done = slot_set(obj, name, item);
    Py_DECREF(item);
    return done;
}

/* obj.<name>, or obj.<method>() when that is None (a value the Python object computes and
 * caches on first use); a new reference. */
static PyObject *cached_or_call(PyObject *obj, slot_attr_t *name, PyObject *method) {
    PyObject *value = slot_get(obj, name);
    if (value != Py_None) return value;
    Py_DECREF(value);
    return PyObject_CallMethodNoArgs(obj, method);
}

/* (first, second) as a new tuple (Py_BuildValue's format parsing cost ~900 instructions a call). */
static PyObject *pair_of(long long first, long long second) {
    PyObject *a = PyLong_FromLongLong(first);
    PyObject *b = a == NULL ? NULL : PyLong_FromLongLong(second);
    if (b == NULL) {
        Py_XDECREF(a);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (pair == NULL) {
        Py_DECREF(a);
        Py_DECREF(b);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, a);
    PyTuple_SET_ITEM(pair, 1, b);
    return pair;
}

/* A new tuple of `n` int64 values. */
static PyObject *tuple_of(const long long *values, Py_ssize_t n) {
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (item == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

/* The two int64 items of a (timestamp, offset)-like tuple. */
static int pair_ll(PyObject *pair, long long *first, long long *second) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) < 2) {
        PyErr_SetString(PyExc_TypeError, "append_to_segment: expected a tuple of two ints");
        return -1;
    }
    *first = int_as_ll(PyTuple_GET_ITEM(pair, 0));
    if (*first == -1 && PyErr_Occurred()) return -1;
    *second = int_as_ll(PyTuple_GET_ITEM(pair, 1));
    return *second == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Where an index's due entry goes (IndexBase.native_target): in the common case, read here, the
 * mapping and the next entry, whose blocks are reserved; otherwise the index's own
 * native_target(reserve=...) decides (reserving, or a one-entry buffer when unmapped). 1 with
 * *target (a new reference) and *slot set, and *counted_by_index when the index's entry_written
 * must count the entry (an unmapped index, searched columns); 0 when the index leaves the
 * request to the general path; -1 with an exception set. */
static int index_target(PyObject *index, Py_ssize_t entry_bytes, Py_ssize_t entries, int reserve,
                        PyObject **target, Py_ssize_t *slot, int *counted_by_index) {
    PyObject *mapping = slot_get(index, &a_mapping);
    if (mapping == NULL) return -1;
    if (mapping != Py_None) {
        long long reserved;
        if (slot_get_ll(index, &a_reserved, &reserved) < 0) {
            Py_DECREF(mapping);
            return -1;
        }
        if ((long long)(entries + 1) * entry_bytes <= reserved) {
            PyObject *columns = slot_get(index, &a_columns);
            int searched = columns == NULL ? -1 : PyObject_IsTrue(columns);
            Py_XDECREF(columns);
            if (searched < 0) {
                Py_DECREF(mapping);
                return -1;
            }
            *target = mapping;
            *slot = entries;
            *counted_by_index = searched;
            return 1;
        }
    }
    Py_DECREF(mapping);
    PyObject *call[2] = {index, reserve ? Py_True : Py_False};
    PyObject *found = PyObject_VectorcallMethod(s_native_target, call, 1, s_reserve_kw);
    if (found == NULL) return -1;
    if (found == Py_None) {
        Py_DECREF(found);
        return 0;
    }
    if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 2) {
        Py_DECREF(found);
        PyErr_SetString(PyExc_TypeError, "native_target: expected (target, entry)");
        return -1;
    }
    *slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(found, 1));
    if (*slot == -1 && PyErr_Occurred()) {
        Py_DECREF(found);
        return -1;
    }
    *target = Py_NewRef(PyTuple_GET_ITEM(found, 0));
    *counted_by_index = 1;
    Py_DECREF(found);
    return 1;
}

/* The time index's last timestamp, -1 when it has no entry (TimeIndex.last_timestamp). */
static int last_timestamp(PyObject *time_index, Py_ssize_t entries, long long *out) {
    *out = -1;
    if (entries == 0) return 0;
    PyObject *last = slot_get(time_index, &a_last);
    if (last == Py_None) {
        Py_DECREF(last);
        last = PyObject_CallMethodNoArgs(time_index, s_last_raw);
    }
    if (last == NULL) return -1;
    long long ignored;
    int done = pair_ll(last, out, &ignored);
    Py_DECREF(last);
    return done;
}

/* An entry written into the index's target counted (IndexBase.entry_written): here in the common
 * case, by the index itself otherwise. */
static int entry_counted(PyObject *index, Py_ssize_t entries, int counted_by_index, long long a,
                         long long b) {
    PyObject *values = pair_of(a, b);
    if (values == NULL) return -1;
    int done;
    if (counted_by_index) {
        PyObject *result = PyObject_CallMethodOneArg(index, s_entry_written, values);
        done = result == NULL ? -1 : 0;
        Py_XDECREF(result);
    } else {
        done = set_ll(index, &a_entries, (long long)entries + 1) < 0 ||
                       slot_set(index, &a_last, values) < 0 ||
                       slot_set(index, &a_dirty, Py_True) < 0
                   ? -1
                   : 0;
    }
    Py_DECREF(values);
    return done;
}

/* The largest max timestamp the request may carry without rolling the segment by time
 * (roll_params.should_roll's time condition; INT64_MAX when time cannot roll it), or 0 in
 * *open when the segment rolls whatever comes. */
static int roll_free_limit(PyObject *segment, long long position, long long max_segment_ms,
                           long long now_ms, long long *limit, int *open) {
    *open = 1;
    *limit = INT64_MAX;
    if (position == 0) return 0;
    long long jitter, allowed;
    if (slot_get_ll(segment, &a_jitter, &jitter) < 0) return -1;
    if (__builtin_sub_overflow(max_segment_ms, jitter, &allowed))
        allowed = max_segment_ms < 0 ? INT64_MIN : INT64_MAX;
    PyObject *based = slot_get(segment, &a_rolling_based);
    if (based == Py_None) {
        Py_DECREF(based);
        PyObject *loaded = PyObject_CallMethodNoArgs(segment, s_load_first);
        if (loaded == NULL) return -1;
        Py_DECREF(loaded);
        based = slot_get(segment, &a_rolling_based);
    }
    if (based == NULL) return -1;
    if (based != Py_None) {
        long long rolling_based = int_as_ll(based);
        Py_DECREF(based);
        if (rolling_based == -1 && PyErr_Occurred()) return -1;
        if (rolling_based >= 0) {
            if (__builtin_add_overflow(rolling_based, allowed, limit))
                *limit = allowed > 0 ? INT64_MAX : INT64_MIN;
            return 0;
        }
    } else {
        Py_DECREF(based);
    }
    long long created;
    if (slot_get_ll(segment, &a_created_ms, &created) < 0) return -1;
    if ((__int128)now_ms - created > allowed) *open = 0;
    return 0;
}

/* The settings tuple's seven integers. */
static int settings_of(PyObject *settings, long long out[7]) {
    if (!PyTuple_Check(settings) || PyTuple_GET_SIZE(settings) != 7) {
        PyErr_SetString(PyExc_TypeError, "append_to_segment: settings must be a tuple of 7 ints");
        return -1;
    }
    for (int i = 0; i < 7; i++) {
        out[i] = int_as_ll(PyTuple_GET_ITEM(settings, i));
        if (out[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

typedef struct {
    PyObject *file, *offset_index, *time_index;  /* new references */
    PyObject *offset_target, *time_target;       /* new references, or NULL */
    Py_ssize_t offset_entries, time_entries;
    int offset_by_index, time_by_index;
    long long position, next_offset, max_so_far, offset_of_max_so_far, base_offset;
} active_t;

static void active_release(active_t *a) {
    Py_XDECREF(a->file);
    Py_XDECREF(a->offset_index);
    Py_XDECREF(a->time_index);
    Py_XDECREF(a->offset_target);
    Py_XDECREF(a->time_target);
}

/* The segment's state as LogSegment.native_append_state gives it. */
static int active_read(PyObject *segment, active_t *a) {
    PyObject *verify_with = slot_get(segment, &a_verify_with);
    if (verify_with == NULL) return -1;
    int unverified = verify_with != Py_None;
    Py_DECREF(verify_with);
    if (unverified) {
        PyObject *done = PyObject_CallMethodNoArgs(segment, s_verify);
        if (done == NULL) return -1;
        Py_DECREF(done);
    }
    PyObject *entry = cached_or_call(segment, &a_max_timestamp, s_max_timestamp_entry);
    if (entry == NULL) return -1;
    int failed = pair_ll(entry, &a->max_so_far, &a->offset_of_max_so_far);
    Py_DECREF(entry);
    if (failed) return -1;
    PyObject *next = cached_or_call(segment, &a_next_offset_cached, s_next_offset);
    if (next == NULL) return -1;
    a->next_offset = int_as_ll(next);
    Py_DECREF(next);
    if (a->next_offset == -1 && PyErr_Occurred()) return -1;
    if ((a->file = slot_get(segment, &a_log)) == NULL ||
        (a->offset_index = slot_get(segment, &a_offset_index)) == NULL ||
        (a->time_index = slot_get(segment, &a_time_index)) == NULL)
        return -1;
    return slot_get_ll(a->file, &a_size_bytes, &a->position);
}

/* After the write: LogSegment.record_appended's bookkeeping for `indexed` entries written. */
static int active_appended(PyObject *segment, active_t *a, const plan_t *plan, Py_ssize_t size,
                           int indexed, long long bytes_since) {
    if (set_ll(a->file, &a_size_bytes, a->position + size) < 0) return -1;
    if (a->position == 0 && set_ll(segment, &a_rolling_based, plan->max_timestamp) < 0) return -1;
    if (plan->max_timestamp > a->max_so_far) {
        a->max_so_far = plan->max_timestamp;
        a->offset_of_max_so_far = plan->offset_of_max;
        PyObject *entry = pair_of(a->max_so_far, a->offset_of_max_so_far);
        if (entry == NULL) return -1;
        int done = slot_set(segment, &a_max_timestamp, entry);
        Py_DECREF(entry);
        if (done < 0) return -1;
    }
    if (indexed) {
        if (entry_counted(a->offset_index, a->offset_entries, a->offset_by_index,
                          plan->last_offset - a->base_offset, a->position) < 0)
            return -1;
        if (indexed == 2 &&
            entry_counted(a->time_index, a->time_entries, a->time_by_index, a->max_so_far,
                          a->offset_of_max_so_far - a->base_offset) < 0)
            return -1;
        bytes_since = size;
    } else {
        bytes_since += size;
    }
    if (set_ll(segment, &a_bytes_since, bytes_since) < 0) return -1;
    return set_ll(segment, &a_next_offset_cached, plan->last_offset + 1);
}

static PyObject *written_result(const plan_t *plan, Py_ssize_t size) {
    const long long values[6] = {plan->first_offset,  plan->last_offset,   plan->max_timestamp,
                                 plan->offset_of_max, plan->record_count, (long long)size};
    return tuple_of(values, 6);
}

/* ValidatedRecords' fields, then whether write_to_segment can write them (only the producer
 * ids kept the request from being written); steals `unwritten`. */
static PyObject *unwritten_result(const plan_t *plan, PyObject *unwritten, int producers_only) {
    if (unwritten == NULL) return NULL;
    return Py_BuildValue("(NLLLLLniO)", unwritten, plan->first_offset, plan->last_offset,
                         plan->max_timestamp, plan->offset_of_max, plan->record_count,
                         plan->count, -1, producers_only ? Py_True : Py_False);
}

/* 1 when the planned request fits the active segment as prepared (no roll by time, offsets
 * addressable from the segment's base, the index entries it is due ready: index_prepare). */
static int plan_fits(const plan_t *plan, const active_t *a, long long limit, index_update_t *ix) {
    long long relative;
    return plan->max_timestamp <= limit &&
           !__builtin_sub_overflow(plan->last_offset, a->base_offset, &relative) &&
           relative >= 0 && relative <= INT32_MAX && plan->first_offset >= a->base_offset &&
           index_prepare(ix, plan);
}

/* 1 and the checks passed before validating (the request fits, no roll is due whatever it holds,
 * the index targets found); 0: not taken; -1: an exception. */
static int active_prepare(PyObject *segment, active_t *a, const long long settings[7],
                          Py_ssize_t size, const uint8_t *buf, long long now_ms,
                          long long *limit, index_update_t *ix) {
    if (size > ATTRIBUTES_OFFSET + 1) {
        int codec = buf[ATTRIBUTES_OFFSET + 1] & CODEC_MASK;
        if (codec != 0 && (codec != LZ4_CODEC || !settings[6])) return 0;
    }
    if (size > settings[0] - a->position) return 0; /* a roll, or RecordBatchTooLargeError */
    long long offset_max, time_max, entries;
    if (slot_get_ll(a->offset_index, &a_entries, &entries) < 0) return -1;
    a->offset_entries = (Py_ssize_t)entries;
    if (slot_get_ll(a->time_index, &a_entries, &entries) < 0) return -1;
    a->time_entries = (Py_ssize_t)entries;
    if (slot_get_ll(a->offset_index, &a_max_entries, &offset_max) < 0 ||
        slot_get_ll(a->time_index, &a_max_entries, &time_max) < 0)
        return -1;
    if (a->offset_entries >= offset_max || a->time_entries >= time_max - 1) return 0;
    int open;
    if (roll_free_limit(segment, a->position, settings[1], now_ms, limit, &open) < 0) return -1;
    if (!open) return 0;
    if (slot_get_ll(segment, &a_bytes_since, &ix->bytes_since) < 0 ||
        slot_get_ll(segment, &a_interval, &ix->interval) < 0)
        return -1;
    /* An entry due now whose blocks are not reserved: the general path, which reserves them
     * after validating. */
    int reserve = !(ix->bytes_since > ix->interval);
    int found = index_target(a->offset_index, OFFSET_INDEX_ENTRY_BYTES, a->offset_entries,
                             reserve, &a->offset_target, &ix->offset_entries, &a->offset_by_index);
    if (found <= 0) return found;
    found = index_target(a->time_index, TIME_INDEX_ENTRY_BYTES, a->time_entries, reserve,
                         &a->time_target, &ix->time_entries, &a->time_by_index);
    if (found <= 0) return found;
    ix->offset_index = a->offset_target;
    ix->time_index = a->time_target;
    ix->max_so_far = a->max_so_far;
    ix->offset_of_max_so_far = a->offset_of_max_so_far;
    if (last_timestamp(a->time_index, a->time_entries, &ix->time_last_timestamp) < 0) return -1;
    return slot_get_ll(segment, &a_base_offset, &a->base_offset) < 0 ? -1 : 1;
}

PyObject *storagecore_append_to_segment(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "append_to_segment takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *segment = args[1];
    long long settings[7];
    validate_params_t p;
    if (settings_of(args[0], settings) < 0) return NULL;
    long fd = PyLong_AsLong(args[2]);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    p.now_ms = int_as_ll(args[4]);
    if (p.now_ms == -1 && PyErr_Occurred()) return NULL;
    if ((p.client = PyObject_IsTrue(args[5])) < 0 ||
        (p.replication = PyObject_IsTrue(args[6])) < 0)
        return NULL;
    long epoch = PyLong_AsLong(args[7]);
    if (epoch == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > INT_MAX || epoch < INT_MIN || epoch > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "append_to_segment: fd or leader epoch out of range");
        return NULL;
    }
    p.leader_epoch = (int)epoch;
    p.compact = settings[2] != 0;
    p.max_message_bytes = (Py_ssize_t)settings[3];
    p.before_max_ms = settings[4];
    p.after_max_ms = settings[5];
    p.lz4 = settings[6] != 0;

    active_t a = {0};
    index_update_t ix;
    ix.offset_view.obj = ix.time_view.obj = NULL;
    Py_buffer data;
    data.obj = NULL;
    plan_t plan;
    plan.batches = &plan.one;
    PyObject *result = NULL;
    long long limit;
    if (active_read(segment, &a) < 0 || PyObject_GetBuffer(args[3], &data, PyBUF_SIMPLE) < 0)
        goto done;
    const uint8_t *buf = (const uint8_t *)data.buf;
    int prepared = active_prepare(segment, &a, settings, data.len, buf, p.now_ms, &limit, &ix);
    if (prepared < 0) goto done;
    if (prepared == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    p.next_offset = a.next_offset;
    int planned = plan_uncompressed(buf, data.len, &p, &plan);
    if (planned < 0) goto done;
    if (planned == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    int fits = plan_fits(&plan, &a, limit, &ix);
    if (!fits || plan.has_producer) {
        PyObject *out = PyByteArray_FromStringAndSize((const char *)buf, data.len);
        if (out != NULL) apply_plan((uint8_t *)PyByteArray_AS_STRING(out), &plan, &p);
        result = unwritten_result(&plan, out, fits);
        goto done;
    }
    if (append_planned(buf, (int)fd, a.position, &plan, &p) < 0) goto done;
    int indexed = index_write(&ix, &plan, a.base_offset, a.position);
    if (active_appended(segment, &a, &plan, data.len, indexed, ix.bytes_since) == 0)
        result = written_result(&plan, data.len);
done:
    index_release(&ix);
    plan_release(&plan);
    if (data.obj != NULL) PyBuffer_Release(&data);
    active_release(&a);
    return result;
}

/* write_to_segment(settings, segment, fd, buffer, first_offset, last_offset, max_timestamp,
 *                  offset_of_max_timestamp, now_ms)
 *   The write half of append_to_segment for a request it validated and handed back because of
 *   its producer ids (its ninth field True), once the Python producer state accepted it:
 *   `buffer` is the rewritten request it returned, the offsets and timestamps its fields. The
 *   segment's state is read and checked again as append_to_segment does (nothing need have
 *   changed, but nothing is assumed); returns the bytes written, or None when the request no
 *   longer fits without a roll (nothing written: the general path writes it). */
PyObject *storagecore_write_to_segment(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "write_to_segment takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *segment = args[1];
    long long settings[7], now_ms;
    plan_t plan = {0};
    plan.batches = &plan.one;
    if (settings_of(args[0], settings) < 0) return NULL;
    long fd = PyLong_AsLong(args[2]);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "write_to_segment: fd out of range");
        return NULL;
    }
    long long *fields[5] = {&plan.first_offset, &plan.last_offset, &plan.max_timestamp,
                            &plan.offset_of_max, &now_ms};
    for (int i = 0; i < 5; i++) {
        *fields[i] = int_as_ll(args[4 + i]);
        if (*fields[i] == -1 && PyErr_Occurred()) return NULL;
    }
    active_t a = {0};
    index_update_t ix;
    ix.offset_view.obj = ix.time_view.obj = NULL;
    Py_buffer data;
    data.obj = NULL;
    PyObject *result = NULL;
    long long limit;
    if (active_read(segment, &a) < 0 || PyObject_GetBuffer(args[3], &data, PyBUF_SIMPLE) < 0)
        goto done;
    const uint8_t *buf = (const uint8_t *)data.buf;
    int prepared = active_prepare(segment, &a, settings, data.len, buf, now_ms, &limit, &ix);
    if (prepared < 0) goto done;
    if (prepared == 0 || !plan_fits(&plan, &a, limit, &ix)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (append_bytes(buf, data.len, (int)fd, a.position) < 0) goto done;
    int indexed = index_write(&ix, &plan, a.base_offset, a.position);
    if (active_appended(segment, &a, &plan, data.len, indexed, ix.bytes_since) == 0)
        result = PyLong_FromSsize_t(data.len);
done:
    index_release(&ix);
    if (data.obj != NULL) PyBuffer_Release(&data);
    active_release(&a);
    return result;
}

/* The interned names, and the module's APPEND_SLOTS: the attribute names read at their slots
 * (the test that the classes keep them in __slots__ reads it); -1 with an exception set. */
int storagecore_segment_append_init(PyObject *m) {
    static const interned_name_t names[] = {
        {&s_verify, "_verify"},
        {&s_max_timestamp_entry, "max_timestamp_entry"},
        {&s_next_offset, "next_offset"},
        {&s_load_first, "load_first_batch_timestamp"},
        {&s_last_raw, "_last_raw"},
        {&s_native_target, "native_target"},
        {&s_entry_written, "entry_written"},
    };
    static slot_attr_t *const attrs[] = {
        &a_verify_with, &a_max_timestamp, &a_next_offset_cached, &a_log, &a_offset_index,
        &a_time_index, &a_size_bytes, &a_base_offset, &a_bytes_since, &a_interval, &a_jitter,
        &a_rolling_based, &a_created_ms, &a_entries, &a_max_entries, &a_mapping, &a_reserved,
        &a_columns, &a_last, &a_dirty,
    };
    if (intern_names(names, sizeof(names) / sizeof(names[0])) < 0 ||
        slot_attrs_init(m, "APPEND_SLOTS", attrs, (Py_ssize_t)(sizeof(attrs) / sizeof(attrs[0]))) <
            0)
        return -1;
    s_reserve_kw = Py_BuildValue("(s)", "reserve");
    return s_reserve_kw == NULL ? -1 : 0;
}
