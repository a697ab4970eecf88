/* opscope.analyses._loops: loops of analyses/intervals.py and idle.py over every row in C, the same results
 * without a Python object per row: the innermost enclosing span of each query (a binary search among its thread's
 * spans, then up their parents) and the idle-cause walk. The Python (Arrow) versions stay the definition and run
 * where this module is not built. */
#include "../_buffers.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The spans of each thread, in table order: thread k's span positions are order[first[k] .. first[k + 1]). Threads
 * are found by key in an open-addressing table. */
typedef struct {
    int64_t *keys;     /* per thread */
    Py_ssize_t *first; /* per thread + 1 */
    Py_ssize_t *slots; /* thread index + 1, 0 empty */
    Py_ssize_t n, n_slots;
    Py_ssize_t *order;
} ByThread;

static inline Py_ssize_t slot_of(const ByThread *t, int64_t key) {
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    Py_ssize_t j = (Py_ssize_t)(h >> 17) & (t->n_slots - 1);
    while (t->slots[j] && t->keys[t->slots[j] - 1] != key) j = (j + 1) & (t->n_slots - 1);
    return j;
}

static void by_thread_free(ByThread *t) {
    free(t->keys);
    free(t->first);
    free(t->slots);
    free(t->order);
    memset(t, 0, sizeof *t);
}

/* Group the n spans by thread (a counting sort: each thread's spans keep their order). */
static int by_thread(ByThread *t, const int64_t *thread, Py_ssize_t n) {
    memset(t, 0, sizeof *t);
    t->n_slots = 64;
    while (t->n_slots < 2 * (n + 1)) t->n_slots *= 2;
    t->slots = calloc((size_t)t->n_slots, sizeof *t->slots);
    t->keys = malloc(sizeof *t->keys * (size_t)(n + 1));
    Py_ssize_t *which = malloc(sizeof *which * (size_t)(n + 1));
    t->order = malloc(sizeof *t->order * (size_t)(n + 1));
    if (!t->slots || !t->keys || !which || !t->order) {
        free(which);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t j = slot_of(t, thread[i]);
        if (!t->slots[j]) {
            t->keys[t->n] = thread[i];
            t->slots[j] = ++t->n;
        }
        which[i] = t->slots[j] - 1;
    }
    t->first = calloc((size_t)t->n + 1, sizeof *t->first);
    if (!t->first) {
        free(which);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) t->first[which[i] + 1]++;
    for (Py_ssize_t k = 0; k < t->n; k++) t->first[k + 1] += t->first[k];
    Py_ssize_t *fill = malloc(sizeof *fill * (size_t)(t->n + 1));
    if (!fill) {
        free(which);
        return -1;
    }
    memcpy(fill, t->first, sizeof *fill * (size_t)(t->n + 1));
    for (Py_ssize_t i = 0; i < n; i++) t->order[fill[which[i]]++] = i;
    free(fill);
    free(which);
    return 0;
}

/* innermost(span_thread, span_ts, span_end, span_parent, accept, q_thread, q_ts, out) -> None
 * out[q] = the innermost accepted span holding query q (thread equal, ts <= q ts < end), -1 where none: the last
 * span of the query's thread starting at or before it, then up its parents (-1: none) to the first that is still
 * running and accepted. The spans must be in time order on each thread (checked: ValueError otherwise). */
static PyObject *innermost(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_thread, *o_ts, *o_end, *o_parent, *o_accept, *o_qthread, *o_qts, *o_out;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o_thread, &o_ts, &o_end, &o_parent, &o_accept, &o_qthread, &o_qts,
                          &o_out))
        return NULL;
    View thread, ts, end, parent, accept, qthread, qts, out;
    View *all[] = {&thread, &ts, &end, &parent, &accept, &qthread, &qts, &out};
    for (int i = 0; i < 8; i++) all[i]->held = 0;
    PyObject *result = NULL;
    ByThread bt;
    memset(&bt, 0, sizeof bt);
    if (view(o_thread, &thread, 0, 8, "span_thread") || view(o_ts, &ts, 0, 8, "span_ts") ||
        view(o_end, &end, 0, 8, "span_end") || view(o_parent, &parent, 0, 8, "span_parent") ||
        (o_accept != Py_None && view(o_accept, &accept, 0, 1, "accept")) ||
        view(o_qthread, &qthread, 0, 8, "q_thread") || view(o_qts, &qts, 0, 8, "q_ts") ||
        view(o_out, &out, 1, 8, "out"))
        goto done;
    Py_ssize_t n = thread.b.len / 8, m = qthread.b.len / 8;
    if (ts.b.len / 8 != n || end.b.len / 8 != n || parent.b.len / 8 != n || (accept.held && accept.b.len != n) ||
        qts.b.len / 8 != m || out.b.len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "innermost: buffers of different lengths");
        goto done;
    }
    const int64_t *th = thread.b.buf, *t0 = ts.b.buf, *t1 = end.b.buf, *up = parent.b.buf;
    const int64_t *qth = qthread.b.buf, *qt = qts.b.buf;
    const uint8_t *ok = accept.held ? accept.b.buf : NULL;
    int64_t *o = out.b.buf;
    Py_BEGIN_ALLOW_THREADS
    if (by_thread(&bt, th, n) == 0) {
        int sorted = 1;
        for (Py_ssize_t k = 0; k < bt.n && sorted; k++)
            for (Py_ssize_t i = bt.first[k] + 1; i < bt.first[k + 1]; i++)
                if (t0[bt.order[i]] < t0[bt.order[i - 1]]) { sorted = 0; break; }
        if (!sorted) {
            bt.n = -1; /* told after the GIL is back */
        } else {
            for (Py_ssize_t q = 0; q < m; q++) {
                o[q] = -1;
                Py_ssize_t j = slot_of(&bt, qth[q]);
                if (!bt.slots[j]) continue;
                Py_ssize_t k = bt.slots[j] - 1;
                Py_ssize_t lo = bt.first[k], hi = bt.first[k + 1]; /* first span starting after the query */
                while (lo < hi) {
                    Py_ssize_t mid = lo + (hi - lo) / 2;
                    if (t0[bt.order[mid]] <= qt[q]) lo = mid + 1; else hi = mid;
                }
                if (lo == bt.first[k]) continue;
                int64_t c = bt.order[lo - 1];
                Py_ssize_t steps = 0;
                while (c >= 0 && c < n && steps++ <= n) {
                    if (t1[c] > qt[q] && (!ok || ok[c])) { o[q] = c; break; }
                    c = up[c];
                }
            }
        }
    } else {
        bt.n = -2;
    }
    Py_END_ALLOW_THREADS
    if (bt.n == -2) { PyErr_NoMemory(); goto done; }
    if (bt.n == -1) {
        PyErr_SetString(PyExc_ValueError, "innermost: the spans of a thread are not in time order");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    by_thread_free(&bt);
    for (int i = 0; i < 8; i++) release(all[i]);
    return result;
}

/* idle_causes(code, delta, seg, launches_known, sums, counts) -> None
 * idle._attribute's walk over the sorted boundaries of every cover: per row the open spans of each cover (code
 * 0 gap, 1 short gap launched late, 2 short gap queued, 3 sync, 4 data loader, 5 launched and not started) after
 * it, and where a gap is open the segment's time to the first cause that holds (sync, input, launch overhead,
 * kernel gap, host wait where launches are known, else other): sums[cause] += seg, counts[cause] += 1. */
static PyObject *idle_causes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_code, *o_delta, *o_seg, *o_sums, *o_counts;
    int launches_known;
    if (!PyArg_ParseTuple(args, "OOOpOO", &o_code, &o_delta, &o_seg, &launches_known, &o_sums, &o_counts))
        return NULL;
    View code, delta, seg, sums, counts;
    View *all[] = {&code, &delta, &seg, &sums, &counts};
    for (int i = 0; i < 5; i++) all[i]->held = 0;
    PyObject *result = NULL;
    if (view(o_code, &code, 0, 1, "code") || view(o_delta, &delta, 0, 8, "delta") || view(o_seg, &seg, 0, 8, "seg") ||
        view(o_sums, &sums, 1, 8, "sums") || view(o_counts, &counts, 1, 8, "counts"))
        goto done;
    Py_ssize_t n = code.b.len;
    if (delta.b.len / 8 != n || seg.b.len / 8 != n || sums.b.len / 8 != 6 || counts.b.len / 8 != 6) {
        PyErr_SetString(PyExc_ValueError, "idle_causes: buffers of different lengths (or not 6 causes)");
        goto done;
    }
    const int8_t *c = code.b.buf;
    const int64_t *d = delta.b.buf, *g = seg.b.buf;
    int64_t *sum = sums.b.buf, *count = counts.b.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    int64_t level[6] = {0, 0, 0, 0, 0, 0};
    for (int k = 0; k < 6; k++) sum[k] = count[k] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < 0 || c[i] > 5) { bad = 1; break; }
        level[c[i]] += d[i];
        if (level[0] <= 0) continue;
        int cause;
        if (level[3] > 0) cause = 0;                       /* sync */
        else if (level[4] > 0) cause = 1;                  /* input pipeline */
        else if (level[1] > 0) cause = 2;                  /* launch overhead */
        else if (level[2] > 0) cause = 3;                  /* kernel gap */
        else if (launches_known && level[5] <= 0) cause = 4; /* host wait */
        else cause = 5;                                    /* other */
        sum[cause] += g[i];
        count[cause]++;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "idle_causes: codes must be 0-5");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < 5; i++) release(all[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"innermost", innermost, METH_VARARGS,
     "innermost(span_thread, span_ts, span_end, span_parent, accept, q_thread, q_ts, out) -> None\n\n"
     "intervals.innermost_enclosing in C (int64 buffers, -1 for none; accept bytes or None)."},
    {"idle_causes", idle_causes, METH_VARARGS,
     "idle_causes(code, delta, seg, launches_known, sums, counts) -> None\n\nidle._attribute's walk over the "
     "sorted cover boundaries (int8 codes, int64 delta and seg; 6 int64 sums and counts out)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops",
                                    "Loops of the analyses over every row in C.", -1, methods, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__loops(void) { return PyModule_Create(&module); }
