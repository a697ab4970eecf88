/* opscope.model._nest: derive.py's stack walk (_nest_sorted) in C; the same arithmetic, without a Python object per
 * event. derive.py keeps the Python version as the definition and uses it where this module is not built. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

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

/* Part of [ts, end) past the top of the stack, taken from the latest started stack event running then. */
static void take_overrun(int64_t ts, int64_t end, int64_t row, const int64_t *stack_end, const int64_t *stack_row,
                         Py_ssize_t top, int64_t *self_ns, const uint8_t *keep) {
    int64_t taken_until = ts;
    for (Py_ssize_t i = top - 1; i >= 0; i--) {
        int64_t open_until = stack_end[i];
        if (open_until <= taken_until) continue;
        int64_t until = open_until < end ? open_until : end;
        int64_t up = stack_row[i];
        if (!keep || !(keep[row] == 1 && keep[up] == 2)) self_ns[up] -= until - taken_until;
        taken_until = until;
        if (taken_until >= end) break;
    }
}

static PyObject *nest_sorted(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_rows, *o_threads, *o_ts, *o_dur, *o_parent, *o_depth, *o_self, *o_keep;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o_rows, &o_threads, &o_ts, &o_dur, &o_parent, &o_depth, &o_self,
                          &o_keep))
        return NULL;
    View rows, threads, tss, durs, parent, depth, self_ns, keep;
    View *all[] = {&rows, &threads, &tss, &durs, &parent, &depth, &self_ns, &keep};
    for (int i = 0; i < 8; i++) all[i]->held = 0;
    PyObject *result = NULL;
    int64_t *stack_end = NULL, *stack_row = NULL;
    if (view(o_rows, &rows, 0, 8, "rows") || view(o_threads, &threads, 0, 8, "threads") ||
        view(o_ts, &tss, 0, 8, "ts") || view(o_dur, &durs, 0, 8, "dur") || view(o_parent, &parent, 1, 8, "parent") ||
        view(o_depth, &depth, 1, 4, "depth") || view(o_self, &self_ns, 1, 8, "self_ns") ||
        (o_keep != Py_None && view(o_keep, &keep, 0, 0, "keep_self")))
        goto done;
    Py_ssize_t n = rows.b.len / 8, n_out = parent.b.len / 8;
    if (threads.b.len / 8 != n || tss.b.len / 8 != n || durs.b.len / 8 != n || depth.b.len / 4 != n_out ||
        self_ns.b.len / 8 != n_out || (keep.held && keep.b.len != n_out)) {
        PyErr_SetString(PyExc_ValueError, "nest_sorted: buffers of different lengths");
        goto done;
    }
    const int64_t *row_v = rows.b.buf, *thread_v = threads.b.buf, *ts_v = tss.b.buf, *dur_v = durs.b.buf;
    int64_t *parent_v = parent.b.buf, *self_v = self_ns.b.buf;
    int32_t *depth_v = depth.b.buf;
    const uint8_t *keep_v = keep.held ? keep.b.buf : NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (row_v[i] < 0 || row_v[i] >= n_out) {
            PyErr_SetString(PyExc_ValueError, "nest_sorted: a row index out of range");
            goto done;
        }
    stack_end = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    stack_row = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!stack_end || !stack_row) { PyErr_NoMemory(); goto done; }
    Py_ssize_t top = 0;
    long long overlapping = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t row = row_v[i], ts = ts_v[i], dur = dur_v[i];
        if (i == 0 || thread_v[i] != thread_v[i - 1]) {
            top = 0;
        } else if (top) {
            while (top && stack_end[top - 1] <= ts) top--;
            if (top) {
                int64_t up = stack_row[top - 1];
                parent_v[row] = up;
                depth_v[row] = (int32_t)top;
                if (ts + dur <= stack_end[top - 1]) {
                    if (!keep_v || !(keep_v[row] == 1 && keep_v[up] == 2)) self_v[up] -= dur;
                } else {
                    overlapping++;
                    take_overrun(ts, ts + dur, row, stack_end, stack_row, top, self_v, keep_v);
                }
            }
        }
        stack_end[top] = ts + dur;
        stack_row[top] = row;
        top++;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLongLong(overlapping);
done:
    free(stack_end);
    free(stack_row);
    for (int i = 0; i < 8; i++) release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"nest_sorted", nest_sorted, METH_VARARGS,
     "nest_sorted(rows, threads, ts, dur, parent, depth, self_ns, keep_self) -> int\n\nderive._nest_sorted in C: "
     "the same arguments (int64 buffers; depth int32; keep_self bytes or None), the same result."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nest", "derive.py's nesting walk in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nest(void) { return PyModule_Create(&module); }
