/* opscope.model._derive: derive.py's loops over every event in C, the same arithmetic without a Python object per
 * event: the nesting stack walk (_nest_sorted) and the inverse of the event-id permutation (_renumber). derive.py
 * keeps the Python versions as the definition and uses them where this module is not built. */
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

/* new_of[old id] = row of that id after the sort (-1: no row), for ids below size */
static PyObject *invert_ids(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_ids, *o_out;
    if (!PyArg_ParseTuple(args, "OO", &o_ids, &o_out)) return NULL;
    View ids, out;
    ids.held = out.held = 0;
    PyObject *result = NULL;
    if (view(o_ids, &ids, 0, 8, "ids") || view(o_out, &out, 1, 8, "out")) goto done;
    Py_ssize_t n = ids.b.len / 8, size = out.b.len / 8;
    const int64_t *id_v = ids.b.buf;
    int64_t *out_v = out.b.buf;
    for (Py_ssize_t i = 0; i < size; i++) out_v[i] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (id_v[i] < 0 || id_v[i] >= size || out_v[id_v[i]] != -1) {
            PyErr_SetString(PyExc_ValueError, "invert_ids: ids must be distinct and below the output's size");
            goto done;
        }
        out_v[id_v[i]] = i;
    }
    result = Py_NewRef(Py_None);
done:
    release(&ids);
    release(&out);
    return result;
}

/* The step of each time: with latest_start, the step that starts last at or before it (bisect) if it is still
 * running; else the last step (in the steps' order) running then (the mask loop). found[i] = 0: no step. */
static PyObject *step_of(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_ts, *o_starts, *o_ends, *o_numbers, *o_out, *o_found;
    int latest_start;
    if (!PyArg_ParseTuple(args, "OOOOOOp", &o_ts, &o_starts, &o_ends, &o_numbers, &o_out, &o_found, &latest_start))
        return NULL;
    View ts, starts, ends, numbers, out, found;
    View *all[] = {&ts, &starts, &ends, &numbers, &out, &found};
    for (int i = 0; i < 6; i++) all[i]->held = 0;
    PyObject *result = NULL;
    int64_t *reach = NULL;
    if (view(o_ts, &ts, 0, 8, "ts") || view(o_starts, &starts, 0, 8, "starts") || view(o_ends, &ends, 0, 8, "ends") ||
        view(o_numbers, &numbers, 0, 8, "numbers") || view(o_out, &out, 1, 8, "out") ||
        view(o_found, &found, 1, 1, "found"))
        goto done;
    Py_ssize_t n = ts.b.len / 8, k = starts.b.len / 8;
    if (ends.b.len / 8 != k || numbers.b.len / 8 != k || out.b.len / 8 != n || found.b.len != n) {
        PyErr_SetString(PyExc_ValueError, "step_of: buffers of different lengths");
        goto done;
    }
    const int64_t *t = ts.b.buf, *s = starts.b.buf, *e = ends.b.buf, *num = numbers.b.buf;
    for (Py_ssize_t j = 1; j < k; j++)
        if (s[j] < s[j - 1]) {
            PyErr_SetString(PyExc_ValueError, "step_of: the steps must be sorted by start");
            goto done;
        }
    int64_t *o = out.b.buf;
    uint8_t *f = found.b.buf;
    reach = malloc(sizeof(int64_t) * (size_t)(k ? k : 1)); /* the latest end among steps 0..j */
    if (!reach) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < k; j++) reach[j] = j && reach[j - 1] > e[j] ? reach[j - 1] : e[j];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t lo = 0, hi = k; /* the first step starting after t[i] */
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (s[mid] <= t[i]) lo = mid + 1; else hi = mid;
        }
        Py_ssize_t j = lo - 1, hit = -1;
        if (latest_start) {
            if (j >= 0 && t[i] < e[j]) hit = j;
        } else {
            for (; j >= 0 && reach[j] > t[i]; j--)
                if (t[i] < e[j]) { hit = j; break; }
        }
        f[i] = hit >= 0;
        o[i] = hit >= 0 ? num[hit] : 0;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(reach);
    for (int i = 0; i < 6; i++) release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"step_of", step_of, METH_VARARGS,
     "step_of(ts, starts, ends, numbers, out, found, latest_start) -> None\n\nThe step number of each time "
     "into out (found[i] 0 where none): derive.assign_steps's two rules (int64 buffers, found bytes)."},
    {"invert_ids", invert_ids, METH_VARARGS,
     "invert_ids(ids, out) -> None\n\nout[ids[i]] = i, -1 elsewhere (int64 buffers; distinct ids below len(out))."},
    {"nest_sorted", nest_sorted, METH_VARARGS,
     "nest_sorted(rows, threads, ts, dur, parent, depth, self_ns, keep_self) -> int\n\nderive._nest_sorted in C: "
     "the same arguments (int64 buffers; depth int32; keep_self bytes or None), the same result."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_derive", "derive.py's loops over every event in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__derive(void) { return PyModule_Create(&module); }
