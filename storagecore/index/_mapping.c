/* storagecore.index._mapping: a shared, writable memory mapping of an index file that holds no
 * file descriptor (Kafka's AbstractIndex keeps a MappedByteBuffer and closes its file).
 *
 * Python 3.11's mmap.mmap keeps a duplicate of the descriptor it maps for its whole life (the
 * trackfd=False that avoids it exists from 3.13 only), so an index mapped with it costs one open
 * file: the bound of storagecore.file_cache would not hold. Here the file is opened by path for
 * each call that needs a descriptor (map, resize) and closed before the call returns;
 * the mapping itself is not an open file (it counts against vm.max_map_count instead, which is
 * why storagecore/index/base.py maps only the indexes being written).
 *
 * Mapping(path)
 *   Maps the whole file at `path` (MAP_SHARED, read and write). A file of length 0 has no
 *   mapping and a buffer of length 0.
 * Mapping.resize(length)
 *   ftruncate(path, length) and map the new length (Kafka's AbstractIndex.resize: unmap, set the
 *   length, map again). The file is opened first: when that fails (EMFILE, ENFILE, ENOMEM)
 *   nothing has changed. When the new mapping fails after the old one is gone, the object is
 *   closed (the caller maps again later).
 * Mapping.flush()
 *   msync(MS_SYNC) of the mapping, the GIL released (Kafka's MappedByteBuffer.force).
 * Mapping.close()
 *   munmap; also done when the object is freed.
 *
 * The buffer protocol exposes the mapping (writable, `length` bytes). While a buffer is
 * exported (a memoryview, struct.unpack_from, the native append's Py_buffer) resize and close
 * raise BufferError rather than unmap memory in use. OSErrors carry errno and the file name, so
 * that callers tell resource exhaustion (storagecore.file_cache.is_resource_exhausted) from
 * disk failure.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    PyObject *path;    /* the file's name as bytes (os.fsencode) */
    char *buf;         /* the mapping, or NULL when closed or of length 0 */
    Py_ssize_t length; /* bytes mapped */
    Py_ssize_t exports;
    int closed;
} Mapping;

static char empty_buffer[1];

/* The file's name as str, for messages. */
static PyObject *name_of(Mapping *self) {
    return PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(self->path),
                                            PyBytes_GET_SIZE(self->path));
}

static PyObject *error_for(Mapping *self) {
    int saved = errno;
    PyObject *name = name_of(self);
    if (name == NULL) return NULL;
    errno = saved;
    PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
    Py_DECREF(name);
    return NULL;
}

/* A ValueError or BufferError that names the file. */
static void error_naming(Mapping *self, PyObject *type, const char *what) {
    PyObject *name = name_of(self);
    if (name != NULL) {
        PyErr_Format(type, "%U: %s", name, what);
        Py_DECREF(name);
    }
}

static int check_open(Mapping *self) {
    if (self->closed) {
        error_naming(self, PyExc_ValueError, "the mapping is closed");
        return -1;
    }
    return 0;
}

static int check_unused(Mapping *self, const char *what) {
    if (self->exports > 0) {
        char message[96];
        PyOS_snprintf(message, sizeof message, "cannot %s the mapping while %zd buffers use it",
                      what, self->exports);
        error_naming(self, PyExc_BufferError, message);
        return -1;
    }
    return 0;
}

static int open_file(Mapping *self) {
    int fd;
    Py_BEGIN_ALLOW_THREADS
    fd = open(PyBytes_AS_STRING(self->path), O_RDWR | O_CLOEXEC);
    Py_END_ALLOW_THREADS
    if (fd < 0) error_for(self);
    return fd;
}

static void close_file(int fd) {
    int saved = errno;
    close(fd);
    errno = saved;
}

static void unmap(Mapping *self) {
    if (self->buf != NULL) munmap(self->buf, (size_t)self->length);
    self->buf = NULL;
    self->length = 0;
}

/* Map `length` bytes of `fd`; -1 with an OSError set (and nothing mapped) on failure. */
static int map_fd(Mapping *self, int fd, Py_ssize_t length) {
    if (length == 0) return 0;
    void *buf = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (buf == MAP_FAILED) {
        error_for(self);
        return -1;
    }
    self->buf = buf;
    self->length = length;
    return 0;
}

static int Mapping_init(Mapping *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"path", NULL};
    PyObject *path = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&", kwlist, PyUnicode_FSConverter, &path))
        return -1;
    if (self->path != NULL || self->buf != NULL) {
        Py_DECREF(path);
        PyErr_SetString(PyExc_TypeError, "Mapping.__init__ called twice");
        return -1;
    }
    self->path = path;
    self->closed = 1;
    int fd = open_file(self);
    if (fd < 0) return -1;
    struct stat st;
    int failed = fstat(fd, &st) != 0;
    if (failed) error_for(self);
    else if ((unsigned long long)st.st_size > (unsigned long long)PY_SSIZE_T_MAX) {
        error_naming(self, PyExc_ValueError, "too large to map");
        failed = 1;
    } else {
        failed = map_fd(self, fd, (Py_ssize_t)st.st_size) != 0;
    }
    close_file(fd);
    if (failed) return -1;
    self->closed = 0;
    return 0;
}

static void Mapping_dealloc(Mapping *self) {
    unmap(self);
    Py_XDECREF(self->path);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Mapping_resize(Mapping *self, PyObject *arg) {
    Py_ssize_t length = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (length == -1 && PyErr_Occurred()) return NULL;
    if (length < 0) {
        error_naming(self, PyExc_ValueError, "a negative length");
        return NULL;
    }
    if (check_open(self) < 0 || check_unused(self, "resize") < 0) return NULL;
    int fd = open_file(self);
    if (fd < 0) return NULL; /* nothing changed */
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = ftruncate(fd, (off_t)length) != 0;
    Py_END_ALLOW_THREADS
    if (failed) {
        error_for(self);
        close_file(fd);
        return NULL; /* the length unchanged, the mapping kept */
    }
    unmap(self);
    if (map_fd(self, fd, length) < 0) {
        self->closed = 1; /* the file has its new length; the caller maps it again */
        close_file(fd);
        return NULL;
    }
    close(fd);
    Py_RETURN_NONE;
}

static PyObject *Mapping_flush(Mapping *self, PyObject *Py_UNUSED(ignored)) {
    if (check_open(self) < 0) return NULL;
    if (self->buf == NULL) Py_RETURN_NONE;
    int failed;
    self->exports++; /* no resize or close may unmap it while the GIL is released */
    Py_BEGIN_ALLOW_THREADS
    failed = msync(self->buf, (size_t)self->length, MS_SYNC) != 0;
    Py_END_ALLOW_THREADS
    self->exports--;
    if (failed) return error_for(self);
    Py_RETURN_NONE;
}

static PyObject *Mapping_close(Mapping *self, PyObject *Py_UNUSED(ignored)) {
    if (self->closed) Py_RETURN_NONE;
    if (check_unused(self, "close") < 0) return NULL;
    unmap(self);
    self->closed = 1;
    Py_RETURN_NONE;
}

static PyObject *Mapping_get_path(Mapping *self, void *Py_UNUSED(closure)) {
    if (self->path == NULL) Py_RETURN_NONE;
    return name_of(self);
}

/* A rename of the file (the mapping follows the inode; later calls open the new name). */
static int Mapping_set_path(Mapping *self, PyObject *value, void *Py_UNUSED(closure)) {
    PyObject *path = NULL;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete path");
        return -1;
    }
    if (!PyUnicode_FSConverter(value, &path)) return -1;
    Py_XSETREF(self->path, path);
    return 0;
}

static PyObject *Mapping_get_length(Mapping *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->length);
}

static PyObject *Mapping_get_closed(Mapping *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->closed);
}

static int Mapping_getbuffer(Mapping *self, Py_buffer *view, int flags) {
    if (check_open(self) < 0) {
        view->obj = NULL;
        return -1;
    }
    char *buf = self->buf != NULL ? self->buf : empty_buffer;
    if (PyBuffer_FillInfo(view, (PyObject *)self, buf, self->length, 0, flags) < 0) return -1;
    self->exports++;
    return 0;
}

static void Mapping_releasebuffer(Mapping *self, Py_buffer *Py_UNUSED(view)) {
    self->exports--;
}

static Py_ssize_t Mapping_len(Mapping *self) {
    return self->length;
}

static PyMethodDef Mapping_methods[] = {
    {"resize", (PyCFunction)Mapping_resize, METH_O,
     "resize(length): set the file's length and map all of it."},
    {"flush", (PyCFunction)Mapping_flush, METH_NOARGS, "flush(): msync the mapping."},
    {"close", (PyCFunction)Mapping_close, METH_NOARGS, "close(): unmap."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Mapping_getset[] = {
    {"path", (getter)Mapping_get_path, (setter)Mapping_set_path, "the mapped file's name", NULL},
    {"length", (getter)Mapping_get_length, NULL, "bytes mapped", NULL},
    {"closed", (getter)Mapping_get_closed, NULL, "whether the mapping is closed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyBufferProcs Mapping_as_buffer = {
    (getbufferproc)Mapping_getbuffer,
    (releasebufferproc)Mapping_releasebuffer,
};

static PySequenceMethods Mapping_as_sequence = {
    .sq_length = (lenfunc)Mapping_len,
};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "storagecore.index._mapping.Mapping",
    .tp_basicsize = sizeof(Mapping),
    .tp_dealloc = (destructor)Mapping_dealloc,
    .tp_as_sequence = &Mapping_as_sequence,
    .tp_as_buffer = &Mapping_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A shared writable mapping of an index file that holds no file descriptor.",
    .tp_methods = Mapping_methods,
    .tp_getset = Mapping_getset,
    .tp_init = (initproc)Mapping_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mapping",
                                    "Index mappings that hold no file descriptor.", -1, NULL};

PyMODINIT_FUNC PyInit__mapping(void) {
    if (PyType_Ready(&MappingType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Mapping", (PyObject *)&MappingType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
