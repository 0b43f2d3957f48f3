/* Attributes of Python objects read and written at their __slots__ offsets (for the append's
 * glue, _segment_append.c): what CPython's own LOAD_ATTR_SLOT specialization does.
 *
 * PyObject_GetAttr / SetAttr on an instance cost ~190 / ~300 instructions (the type's method
 * cache, the descriptor check, the instance's values); the active segment's append reads and
 * writes some thirty of them on the segment, its FileRecords and its two indexes. Those classes
 * keep those attributes in __slots__ (storagecore.segment.LogSegment, storagecore.index.base.
 * AbstractIndex, storagecore.records.file_records.FileRecords: "the native append's slots"),
 * so each is a pointer at a fixed offset of the object: the offset is found once per type from
 * the slot's member descriptor, and read or written directly after that.
 *
 * Whatever does not look like that (another type whose attribute is a property or lives in the
 * instance dict, a slot not set) takes the generic call, so the Python classes stay free to
 * change: a name missing from their __slots__ is slower, never wrong. Include Python.h first.
 */
#ifndef STORAGECORE_SLOTS_H
#define STORAGECORE_SLOTS_H

#include <structmember.h>

#define SLOT_TYPES 2 /* types remembered per name (OffsetIndex and TimeIndex share names) */

typedef struct {
    const char *name;
    PyObject *interned;
    PyTypeObject *types[SLOT_TYPES]; /* strong references: a type remembered is never freed */
    Py_ssize_t offsets[SLOT_TYPES];  /* -1: that type has no writable object slot by this name */
} slot_attr_t;

/* SLOT(var, "name"): a file-level slot_attr_t for the attribute `name`, nothing known yet. */
#define SLOT(var, name) static slot_attr_t var = {name, NULL, {NULL, NULL}, {-1, -1}};

static int slot_attr_init(slot_attr_t *a) {
    a->interned = PyUnicode_InternFromString(a->name);
    return a->interned == NULL ? -1 : 0;
}

/* Intern each attribute's name and add the tuple of the names to module `m` as `export` (for
 * the tests that the classes keep them in __slots__); -1 with an exception set. */
static int slot_attrs_init(PyObject *m, const char *export, slot_attr_t *const *attrs,
                           Py_ssize_t count) {
    PyObject *names = PyTuple_New(count);
    if (names == NULL) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (slot_attr_init(attrs[i]) < 0) {
            Py_DECREF(names);
            return -1;
        }
        PyTuple_SET_ITEM(names, i, Py_NewRef(attrs[i]->interned));
    }
    if (PyModule_AddObject(m, export, names) < 0) {
        Py_DECREF(names);
        return -1;
    }
    return 0;
}

/* Intern `count` method names into their variables; -1 with an exception set. */
typedef struct {
    PyObject **var;
    const char *name;
} interned_name_t;

static int intern_names(const interned_name_t *names, size_t count) {
    for (size_t i = 0; i < count; i++) {
        *names[i].var = PyUnicode_InternFromString(names[i].name);
        if (*names[i].var == NULL) return -1;
    }
    return 0;
}

/* The offset of the object slot `a` names in obj's type, or -1 (the generic calls then). */
static Py_ssize_t slot_offset(PyObject *obj, slot_attr_t *a) {
    PyTypeObject *type = Py_TYPE(obj);
    for (int i = 0; i < SLOT_TYPES; i++) {
        if (a->types[i] == type) return a->offsets[i];
    }
    Py_ssize_t offset = -1;
    PyObject *descr = _PyType_Lookup(type, a->interned); /* borrowed, never raises */
    if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX && !(member->flags & READONLY)) offset = member->offset;
    }
    /* Remember it in the first free place, else in the last (a third type is not expected). */
    int at = SLOT_TYPES - 1;
    for (int i = 0; i < SLOT_TYPES; i++) {
        if (a->types[i] == NULL) {
            at = i;
            break;
        }
    }
    Py_INCREF(type);
    Py_XSETREF(a->types[at], type);
    a->offsets[at] = offset;
    return offset;
}

/* obj.<name>: a new reference, or NULL with an exception set. */
static inline PyObject *slot_get(PyObject *obj, slot_attr_t *a) {
    Py_ssize_t offset = slot_offset(obj, a);
    if (offset >= 0) {
        PyObject *value = *(PyObject **)((char *)obj + offset);
        if (value != NULL) return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, a->interned); /* unset or not a slot: the generic error */
}

/* PyLong_AsLongLong without its slow path: for any value past one 30-bit digit (a timestamp,
 * an offset past 2^30) that goes through _PyLong_AsByteArray, ~225 instructions a call. */
static inline long long int_as_ll(PyObject *value) {
    int overflow;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0) {
        PyErr_SetString(PyExc_OverflowError, "an int past int64");
        return -1;
    }
    return result;
}

/* obj.<name> as an int64 in *out; 0, or -1 with an exception set. */
static inline int slot_get_ll(PyObject *obj, slot_attr_t *a, long long *out) {
    PyObject *value = slot_get(obj, a);
    if (value == NULL) return -1;
    *out = int_as_ll(value);
    Py_DECREF(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* obj.<name> = value (borrowed); 0, or -1 with an exception set. */
static inline int slot_set(PyObject *obj, slot_attr_t *a, PyObject *value) {
    Py_ssize_t offset = slot_offset(obj, a);
    if (offset < 0) return PyObject_SetAttr(obj, a->interned, value);
    Py_XSETREF(*(PyObject **)((char *)obj + offset), Py_NewRef(value));
    return 0;
}

#endif
