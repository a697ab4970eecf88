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

#endif
