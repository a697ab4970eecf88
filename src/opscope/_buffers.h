/* Buffer views shared by opscope's C loops (model/_derive.c, analyses/_loops.c): a Python buffer held for the
 * length of one call, checked to hold whole items, and released on every path out. */
#ifndef OPSCOPE_BUFFERS_H
#define OPSCOPE_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    Py_buffer b;
    int held;
} View;

static int view(PyObject *o, View *v, int writable, Py_ssize_t itemsize, const char *what) {
    v->held = 0;
    if (PyObject_GetBuffer(o, &v->b, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0) return -1;
    v->held = 1;
    if (itemsize && v->b.len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer of %zd-byte items expected", what, itemsize);
        return -1;
    }
    return 0;
}

static void release(View *v) {
    if (v->held) PyBuffer_Release(&v->b);
    v->held = 0;
}

/* One argument of a call taken as a buffer: its name (in errors), item size (0: any), whether it is written, and
 * whether None may stand for it (its view then stays not held). */
typedef struct {
    const char *name;
    Py_ssize_t itemsize;
    int writable, optional;
} ViewSpec;

/* A call's first `count` positional arguments as views, one per spec (the call has `total` arguments: those after
 * the views are the caller's to read). Every view starts not held, so release_views() is right on every path out;
 * 0, or -1 with the error set. */
static inline int views_of_args(PyObject *args, const char *function, const ViewSpec *spec, int count, Py_ssize_t total,
                                View *out) {
    for (int i = 0; i < count; i++) out[i].held = 0;
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != total) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd arguments", function, total);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        PyObject *o = PyTuple_GET_ITEM(args, i);
        if (spec[i].optional && o == Py_None) continue;
        if (view(o, &out[i], spec[i].writable, spec[i].itemsize, spec[i].name)) return -1;
    }
    return 0;
}

static inline void release_views(View *v, int count) {
    for (int i = 0; i < count; i++) release(&v[i]);
}

#endif
