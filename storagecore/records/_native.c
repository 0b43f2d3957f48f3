/* Native speed-ups of storagecore.records: the record scan and, compiled into this module too,
 * the append fast path (_append.c, validate_uncompressed; _segment_append.c, append_to_segment:
 * the active segment's append in one call), the columnar decoder (_columns.c, decode_columns),
 * the producer walk of a region or a file (_headers.c, producer_batches, producer_batches_file),
 * the legacy v0/v1 message-set reader (_legacy.c, decode_legacy_set), the read by offset of a
 * segment (_fetch.c, read_by_offset) and the LZ4 frames of batches (_lz4_frame.c,
 * lz4_frame_decompress).
 *
 * The scan walks the records of an uncompressed batch payload without building objects: checks
 * framing (length varints, field lengths, header keys, nothing left over) with _walker.h's
 * walk_record, the one record walker of the C code, and reports the min and max record
 * timestamps, the number of null keys and whether offset deltas run 0..n-1.
 *
 * The pure-Python reference is storagecore/records/_scan_py.py; both must return identical
 * results (including problem messages) on every input, which tests/unit/.../test_scan.py checks.
 * Varint widths are Kafka's (ByteUtils.readVarint / readVarlong): at most 5 and 10 bytes, bits
 * beyond 32 / 64 dropped. They are exported as MAX_VARINT_BYTES / MAX_VARLONG_BYTES and a test
 * checks them against storagecore.records.layout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_layout.h"
#include "_walker.h"

/* crc32c(): inputs from this size are checksummed without the GIL. */
#define CRC32C_RELEASE_GIL_BYTES (64 * 1024)

#include "_scan.h"

static PyObject *failed(PyObject *message) {
    if (message == NULL) return NULL;
    return Py_BuildValue("(NLLnO)", message, (long long)-1, (long long)-1, (Py_ssize_t)0, Py_False);
}

static PyObject *scan_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_timestamp;
    if (!PyArg_ParseTuple(args, "y*nL", &view, &count, &base_timestamp)) return NULL;
    scan_t r;
    scan_impl((const uint8_t *)view.buf, view.len, count, base_timestamp, &r);
    PyBuffer_Release(&view);
    switch (r.problem) {
    case PROBLEM_NONE:
        return Py_BuildValue("(OLLnO)", Py_None, r.max_ts, r.min_ts, r.null_keys,
                             r.sequential ? Py_True : Py_False);
    case PROBLEM_VARINT:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: truncated or overlong varint", r.index, r.start));
    case PROBLEM_LENGTH:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: length %lld runs past the batch", r.index, r.start, r.length));
    case PROBLEM_PAST_RECORD:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: a field runs past the record", r.index, r.start));
    case PROBLEM_HEADER_COUNT:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: negative header count", r.index, r.start));
    case PROBLEM_NULL_HEADER_KEY:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: null header key", r.index, r.start));
    case PROBLEM_BODY:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: body declares %lld bytes, fields take %zd", r.index, r.start,
            r.length, r.extra));
    case PROBLEM_TIMESTAMP:
        return failed(PyUnicode_FromFormat(
            "record %zd at byte %zd: timestamp overflows int64", r.index, r.start));
    default:
        return failed(PyUnicode_FromFormat(
            "%zd bytes left after %zd records (incorrect declared batch size)", r.extra, count));
    }
}

/* _append.c */
PyObject *storagecore_validate_uncompressed(PyObject *self, PyObject *args);
int storagecore_append_init(PyObject *module);
/* _segment_append.c */
PyObject *storagecore_append_to_segment(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *storagecore_write_to_segment(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int storagecore_segment_append_init(PyObject *m);
/* _log_append.c */
PyObject *storagecore_append_active(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *storagecore_append_active_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int storagecore_log_append_init(PyObject *m);
/* _columns.c */
PyObject *storagecore_decode_columns(PyObject *self, PyObject *args);
void storagecore_columns_init(void);
/* _headers.c */
PyObject *storagecore_producer_batches(PyObject *self, PyObject *args);
PyObject *storagecore_producer_batches_file(PyObject *self, PyObject *args);
/* _fetch.c */
PyObject *storagecore_read_by_offset(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* _lz4_frame.c */
PyObject *storagecore_lz4_frame_decompress(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *storagecore_lz4_version(PyObject *self, PyObject *unused);
PyObject *storagecore_lz4_matches_package(PyObject *self, PyObject *flag);
void storagecore_lz4_frame_init(void);
/* _legacy.c */
PyObject *storagecore_decode_legacy_set(PyObject *self, PyObject *args);
PyObject *storagecore_check_legacy_entry(PyObject *self, PyObject *args);
void storagecore_legacy_init(void);
int storagecore_legacy_constants(PyObject *m);

/* crc32c(data) -> int: CRC-32C of a bytes-like object (storagecore/records/crc.py), without
 * the GIL for large inputs. */
static PyObject *crc32c_of(PyObject *self, PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc;
    if (data.len >= CRC32C_RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c((const uint8_t *)data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c((const uint8_t *)data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32c", crc32c_of, METH_O, "crc32c(data) -> CRC-32C of a bytes-like object."},
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(payload, count, base_timestamp) -> "
     "(problem, max_ts, min_ts, null_keys, sequential)"},
    {"validate_uncompressed", storagecore_validate_uncompressed, METH_VARARGS,
     "Whole-request validation of uncompressed batches; None means: use the Python path."},
    {"append_to_segment", (PyCFunction)(void (*)(void))storagecore_append_to_segment,
     METH_FASTCALL,
     "append_to_segment(settings, segment, fd, data, now_ms, client, replication, leader_epoch): "
     "validate uncompressed batches and append them to the active segment; None means: use the "
     "Python path."},
    {"write_to_segment", (PyCFunction)(void (*)(void))storagecore_write_to_segment,
     METH_FASTCALL,
     "write_to_segment(settings, segment, fd, buffer, first_offset, last_offset, max_timestamp, "
     "offset_of_max_timestamp, now_ms): write a request append_to_segment validated and handed "
     "back for its producer ids; None means: use the Python path."},
    {"append_active", (PyCFunction)(void (*)(void))storagecore_append_active, METH_FASTCALL,
     "append_active(log, data) -> LogAppendInfo | None: Log.append's common case in one call; "
     "None means: nothing was done, use Log.append's general steps (see _log_append.c)."},
    {"append_active_setup", (PyCFunction)(void (*)(void))storagecore_append_active_setup,
     METH_FASTCALL,
     "append_active_setup(native_append_module, log_append_info, system_clock): what "
     "append_active needs of the layers above (see _log_append.c)."},
    {"decode_columns", storagecore_decode_columns, METH_VARARGS,
     "decode_columns(region, position, end, columns, min_offset, max_offset, include_control, "
     "max_output_bytes, decompress) -> (rows, batches, position, problem, buffers, null_counts, "
     "batch_buffers)"},
    {"producer_batches", storagecore_producer_batches, METH_VARARGS,
     "producer_batches(region) -> (consumed, next_offset, positions, problem, problem_value)"},
    {"decode_legacy_set", storagecore_decode_legacy_set, METH_VARARGS,
     "decode_legacy_set(data, wrapper_magic, wrapper_offset, log_append, log_append_time) -> "
     "[(offset, timestamp, key, value)] | problem"},
    {"check_legacy_entry", storagecore_check_legacy_entry, METH_VARARGS,
     "check_legacy_entry(entry) -> problem | None"},
    {"producer_batches_file", storagecore_producer_batches_file, METH_VARARGS,
     "producer_batches_file(fd, start, end) -> (consumed, next_offset, positions, headers, "
     "problem, problem_value)"},
    {"read_by_offset", (PyCFunction)(void (*)(void))storagecore_read_by_offset, METH_FASTCALL,
     "read_by_offset(fd, offsets, positions, base_offset, fetch_offset, max_size, max_position, "
     "size_bytes, min_one_message) -> (position, records, incomplete, next_offset) | None: see "
     "_fetch.c"},
    {"lz4_frame_decompress", (PyCFunction)(void (*)(void))storagecore_lz4_frame_decompress,
     METH_FASTCALL,
     "lz4_frame_decompress(data, max_output_bytes) -> bytes | None: the first LZ4 frame's "
     "content, None for a frame to leave to lz4.frame (see _lz4_frame.c)"},
    {"lz4_matches_package", storagecore_lz4_matches_package, METH_O,
     "lz4_matches_package(flag): whether the liblz4 loaded is the lz4 package's; only then does "
     "the native append decode lz4 batches (see _lz4_frame.c)"},
    {"lz4_version", storagecore_lz4_version, METH_NOARGS,
     "lz4_version() -> LZ4_versionNumber() of the liblz4 loaded, 0 without one"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc32c_init(); /* this file's copy of the tables */
    storagecore_columns_init();
    storagecore_legacy_init();
    storagecore_lz4_frame_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (add_layout_constants(m) < 0 || storagecore_legacy_constants(m) < 0 ||
        storagecore_append_init(m) < 0 || storagecore_segment_append_init(m) < 0 ||
        storagecore_log_append_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
