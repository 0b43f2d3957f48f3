/* Log.append's common case in one call (compiled into storagecore.records._native, see
 * _native.c):
 *
 * append_active(log, data)
 *
 *   What storagecore.log.Log.append does for a client's request of uncompressed (or lz4)
 *   batches without producer ids when its active segment's files are held (storagecore.file_cache),
 *   without a Python frame: under the log's lock, the checks that the log is usable, the clock,
 *   the native append of the request to the active segment (the module attribute
 *   storagecore.native_append.append_to_segment, read per call: tests and the disk-space
 *   handling turn it off or wrap it), the producer state's map end offset, the flush that
 *   flush.messages asks for (Log._flush_appended) and the LogAppendInfo.
 *
 *   Returns the LogAppendInfo when the request was written; None when nothing was done
 *   (whatever the common case does not cover: Log.append's general steps take the request
 *   from the start, and word any error). An OSError of the write is one of those: nothing was
 *   appended (the write's size was not recorded), and the general steps try again and turn it
 *   into the log's error. Exceptions of anything else propagate.
 *
 * append_active_setup(native_append_module, log_append_info, system_clock)
 *
 *   Given once by storagecore.native_append at import (this layer does not import the ones
 *   above it): where append_to_segment is looked up, the type of the answer, and the clock
 *   whose time is read here with clock_gettime (CLOCK_REALTIME, as time.time_ns) instead of
 *   calling it; any other clock is called.
 *
 * The attributes are read at their __slots__ offsets (_slots.h): Log, LocalLog, LogSegment,
 * the held handle and ProducerStateManager keep them in __slots__.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

#include "_layout.h"
#include "_append.h"
#include "_slots.h"

static PyObject *native_append_module, *info_type, *system_clock_type;
static PyObject *s_append_to_segment, *s_acquire, *s_release, *s_milliseconds, *s_flush;

SLOT(a_lock, "_lock")
SLOT(a_local, "_local")
SLOT(a_clock, "clock")
SLOT(a_leader_epoch, "leader_epoch")
SLOT(a_producer_state, "producer_state")
SLOT(a_log_start_offset, "_log_start_offset")
SLOT(a_offline, "offline")
SLOT(a_closed, "closed")
SLOT(a_segments, "segments")
SLOT(a_native_append, "native_append")
SLOT(a_recovery_point, "recovery_point")
SLOT(a_flush_messages, "flush_messages")
SLOT(a_held_log, "held_log")
SLOT(a_held, "held")
SLOT(a_fd, "fd")
SLOT(a_map_end_offset, "map_end_offset")
#undef SLOT

static slot_attr_t *const log_append_slots[] = {
    &a_lock,           &a_local,          &a_clock,          &a_leader_epoch,
    &a_producer_state, &a_log_start_offset, &a_offline,      &a_closed,
    &a_segments,       &a_native_append,  &a_recovery_point, &a_flush_messages,
    &a_held_log,       &a_held,           &a_fd,             &a_map_end_offset,
};
#define LOG_APPEND_SLOTS ((Py_ssize_t)(sizeof(log_append_slots) / sizeof(log_append_slots[0])))

/* Whether the request's first batch is one the common case takes (magic 2, uncompressed or
 * lz4 (which the settings may still leave to the general steps), no producer id), read before
 * the lock: the request is the caller's and does not change. A later batch that is not is found
 * by the native append, and the general steps take it. */
static int first_batch_plain(PyObject *data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not a buffer: the general steps say what is wrong */
        return 0;
    }
    const uint8_t *b = (const uint8_t *)view.buf;
    int codec = view.len >= RECORD_BATCH_OVERHEAD ? get16(b + ATTRIBUTES_OFFSET) & CODEC_MASK : -1;
    int plain = view.len >= RECORD_BATCH_OVERHEAD && b[MAGIC_OFFSET] == 2 &&
                (codec == 0 || codec == LZ4_CODEC) && (int64_t)get64(b + PRODUCER_ID_OFFSET) == -1;
    PyBuffer_Release(&view);
    return plain;
}

/* 1 when obj.<name> is true, 0 when false, -1 with an exception set. */
static int slot_true(PyObject *obj, slot_attr_t *name) {
    PyObject *value = slot_get(obj, name);
    if (value == NULL) return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* The clock's now in epoch milliseconds, as a new int. */
static PyObject *now_ms(PyObject *log) {
    PyObject *clock = slot_get(log, &a_clock);
    if (clock == NULL) return NULL;
    PyObject *now;
    if ((PyObject *)Py_TYPE(clock) == system_clock_type) {
        struct timespec ts;
        if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
            Py_DECREF(clock);
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        now = PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    } else {
        now = PyObject_CallMethodNoArgs(clock, s_milliseconds);
    }
    Py_DECREF(clock);
    return now;
}

/* The LogAppendInfo of a written request: `done` is append_to_segment's six ints (first, last,
 * max timestamp, its offset, records, bytes). */
static PyObject *append_info(PyObject *log, PyObject *done) {
    PyObject *log_start = slot_get(log, &a_log_start_offset);
    if (log_start == NULL) return NULL;
    PyObject *fields = PyTuple_New(9);
    if (fields == NULL) {
        Py_DECREF(log_start);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 4; i++) {
        PyTuple_SET_ITEM(fields, i, Py_NewRef(PyTuple_GET_ITEM(done, i)));
    }
    PyObject *no_append_time = PyLong_FromLong(-1);
    if (no_append_time == NULL) {
        Py_DECREF(log_start);
        Py_DECREF(fields);
        return NULL;
    }
    PyTuple_SET_ITEM(fields, 4, no_append_time);
    PyTuple_SET_ITEM(fields, 5, log_start);
    PyTuple_SET_ITEM(fields, 6, Py_NewRef(PyTuple_GET_ITEM(done, 4)));
    PyTuple_SET_ITEM(fields, 7, Py_NewRef(PyTuple_GET_ITEM(done, 5)));
    PyTuple_SET_ITEM(fields, 8, Py_NewRef(Py_False));
    /* tuple.__new__(LogAppendInfo, fields): the NamedTuple's own __new__ is a Python frame. */
    PyObject *args = PyTuple_Pack(1, fields);
    Py_DECREF(fields);
    if (args == NULL) return NULL;
    PyObject *info = PyTuple_Type.tp_new((PyTypeObject *)info_type, args, NULL);
    Py_DECREF(args);
    return info;
}

/* After the write: the producer state's map end offset, the flush flush.messages asks for. */
static int appended(PyObject *log, PyObject *local, long long next_offset) {
    PyObject *next = PyLong_FromLongLong(next_offset);
    if (next == NULL) return -1;
    PyObject *producers = slot_get(log, &a_producer_state);
    int done = producers == NULL ? -1 : slot_set(producers, &a_map_end_offset, next);
    Py_XDECREF(producers);
    long long recovery_point, flush_messages;
    if (done == 0 && (slot_get_ll(local, &a_recovery_point, &recovery_point) < 0 ||
                      slot_get_ll(local, &a_flush_messages, &flush_messages) < 0))
        done = -1;
    if (done == 0 && next_offset - recovery_point >= flush_messages) {
        PyObject *flushed = PyObject_CallMethodOneArg(log, s_flush, next);
        done = flushed == NULL ? -1 : 0;
        Py_XDECREF(flushed);
    }
    Py_DECREF(next);
    return done;
}

/* append_active's work under the lock: the answer, None, or NULL with an exception set. */
static PyObject *append_locked(PyObject *log, PyObject *data) {
    PyObject *local = NULL, *segments = NULL, *segment = NULL, *held = NULL, *fd = NULL;
    PyObject *settings = NULL, *call = NULL, *now = NULL, *epoch = NULL, *done = NULL;
    PyObject *result = NULL;
    int unusable;
    if ((local = slot_get(log, &a_local)) == NULL) goto out;
    if ((unusable = slot_true(local, &a_offline)) != 0 ||
        (unusable = slot_true(local, &a_closed)) != 0) {
        if (unusable > 0) result = Py_NewRef(Py_None); /* the general steps raise */
        goto out;
    }
    if ((segments = slot_get(local, &a_segments)) == NULL) goto out;
    if (!PyList_Check(segments) || PyList_GET_SIZE(segments) == 0) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    segment = Py_NewRef(PyList_GET_ITEM(segments, PyList_GET_SIZE(segments) - 1));
    if ((held = slot_get(segment, &a_held_log)) == NULL) goto out;
    int is_held = held == Py_None ? 0 : slot_true(held, &a_held);
    if (is_held <= 0) {
        if (is_held == 0) result = Py_NewRef(Py_None); /* held by the general steps first */
        goto out;
    }
    if ((fd = slot_get(held, &a_fd)) == NULL ||
        (settings = slot_get(local, &a_native_append)) == NULL ||
        (call = PyObject_GetAttr(native_append_module, s_append_to_segment)) == NULL)
        goto out;
    if (settings == Py_None || call == Py_None) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    if ((now = now_ms(log)) == NULL || (epoch = slot_get(log, &a_leader_epoch)) == NULL) goto out;
    PyObject *args[8] = {settings, segment, fd, data, now, Py_True, Py_False, epoch};
    done = PyObject_Vectorcall(call, args, 8, NULL);
    if (done == NULL) {
        if (PyErr_ExceptionMatches(PyExc_OSError)) { /* nothing appended: the general steps */
            PyErr_Clear();
            result = Py_NewRef(Py_None);
        }
        goto out;
    }
    if (!PyTuple_Check(done) || PyTuple_GET_SIZE(done) != 6) { /* not written */
        result = Py_NewRef(Py_None);
        goto out;
    }
    long long last = int_as_ll(PyTuple_GET_ITEM(done, 1));
    if ((last == -1 && PyErr_Occurred()) || appended(log, local, last + 1) < 0) goto out;
    result = append_info(log, done);
out:
    Py_XDECREF(local);
    Py_XDECREF(segments);
    Py_XDECREF(segment);
    Py_XDECREF(held);
    Py_XDECREF(fd);
    Py_XDECREF(settings);
    Py_XDECREF(call);
    Py_XDECREF(now);
    Py_XDECREF(epoch);
    Py_XDECREF(done);
    return result;
}

PyObject *storagecore_append_active(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "append_active takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (native_append_module == NULL || !first_batch_plain(args[1])) Py_RETURN_NONE;
    PyObject *lock = slot_get(args[0], &a_lock);
    if (lock == NULL) return NULL;
    PyObject *acquired = PyObject_CallMethodNoArgs(lock, s_acquire);
    if (acquired == NULL) {
        Py_DECREF(lock);
        return NULL;
    }
    Py_DECREF(acquired);
    PyObject *result = append_locked(args[0], args[1]);
    /* Released whatever happened, keeping the exception being raised, if any. */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *released = PyObject_CallMethodNoArgs(lock, s_release);
    Py_DECREF(lock);
    if (released == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        Py_XDECREF(result);
        return NULL;
    }
    Py_DECREF(released);
    PyErr_Restore(type, value, traceback);
    return result;
}

PyObject *storagecore_append_active_setup(PyObject *self, PyObject *const *args,
                                          Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[1]) || !PyType_IsSubtype((PyTypeObject *)args[1],
                                                                   &PyTuple_Type) ||
        !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "append_active_setup(native_append_module, a tuple type, a clock type)");
        return NULL;
    }
    Py_XSETREF(native_append_module, Py_NewRef(args[0]));
    Py_XSETREF(info_type, Py_NewRef(args[1]));
    Py_XSETREF(system_clock_type, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/* The names, and the module's LOG_APPEND_SLOTS (the attributes read at their slots, for the
 * test that the classes keep them); -1 with an exception set. */
int storagecore_log_append_init(PyObject *m) {
    static const interned_name_t names[] = {
        {&s_append_to_segment, "append_to_segment"},
        {&s_acquire, "acquire"},
        {&s_release, "release"},
        {&s_milliseconds, "milliseconds"},
        {&s_flush, "_flush_appended"},
    };
    if (intern_names(names, sizeof(names) / sizeof(names[0])) < 0) return -1;
    return slot_attrs_init(m, "LOG_APPEND_SLOTS", log_append_slots, LOG_APPEND_SLOTS);
}
