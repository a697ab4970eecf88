/* opscope.analyses._loops: loops of analyses/intervals.py and idle.py over every row in C, the same results
 * without a Python object per row: the innermost enclosing span of each query (a binary search among its thread's
 * spans, then up their parents), the union of spans per group, the union of masked rows and the overlap of two
 * lists of disjoint spans (the idle causes as lengths of sets). The Python (Arrow) versions stay the definition and
 * run where this module is not built. */
#include "../_buffers.h"
#include "../_spans.h"
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
    int32_t *order; /* rows fit 32 bits: by_thread declines more (half the memory of a 1 GB trace's 2.3 M rows) */
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

/* Group the n spans by thread (a counting sort: each thread's spans keep their order); where `member` is given,
 * only the rows it marks are spans. */
static int by_thread(ByThread *t, const int64_t *thread, const uint8_t *member, Py_ssize_t n) {
    memset(t, 0, sizeof *t);
    if (n >= INT32_MAX) return -3; /* rows as int32: the caller's definition takes more */
    /* the table grows with the threads found (a trace has a few hundred at most), not with the rows */
    t->n_slots = 64;
    Py_ssize_t cap = 32;
    t->slots = calloc((size_t)t->n_slots, sizeof *t->slots);
    t->keys = malloc(sizeof *t->keys * (size_t)cap);
    int32_t *which = malloc(sizeof *which * (size_t)(n + 1));
    t->order = malloc(sizeof *t->order * (size_t)(n + 1));
    if (!t->slots || !t->keys || !which || !t->order) {
        free(which);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (member && !member[i]) {
            which[i] = -1;
            continue;
        }
        Py_ssize_t j = slot_of(t, thread[i]);
        if (!t->slots[j]) {
            if (t->n == cap) {
                int64_t *keys = realloc(t->keys, sizeof *t->keys * (size_t)(2 * cap));
                if (!keys) {
                    free(which);
                    return -1;
                }
                t->keys = keys;
                cap *= 2;
            }
            t->keys[t->n] = thread[i];
            t->slots[j] = ++t->n;
            if (2 * t->n > t->n_slots) { /* over half full: twice the slots, every key placed again */
                Py_ssize_t *slots = calloc((size_t)(2 * t->n_slots), sizeof *slots);
                if (!slots) {
                    free(which);
                    return -1;
                }
                free(t->slots);
                t->slots = slots;
                t->n_slots *= 2;
                for (Py_ssize_t k = 0; k < t->n; k++) t->slots[slot_of(t, t->keys[k])] = k + 1;
                j = slot_of(t, thread[i]);
            }
        }
        which[i] = (int32_t)(t->slots[j] - 1);
    }
    t->first = calloc((size_t)t->n + 1, sizeof *t->first);
    if (!t->first) {
        free(which);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (which[i] >= 0) t->first[which[i] + 1]++;
    for (Py_ssize_t k = 0; k < t->n; k++) t->first[k + 1] += t->first[k];
    Py_ssize_t *fill = malloc(sizeof *fill * (size_t)(t->n + 1));
    if (!fill) {
        free(which);
        return -1;
    }
    memcpy(fill, t->first, sizeof *fill * (size_t)(t->n + 1));
    for (Py_ssize_t i = 0; i < n; i++)
        if (which[i] >= 0) t->order[fill[which[i]]++] = (int32_t)i;
    free(fill);
    free(which);
    return 0;
}

/* innermost(span_thread, span_ts, span_end, span_parent, accept, q_thread, q_ts, out, member, parent_valid,
 *           end_is_dur) -> None
 * out[q] = the innermost accepted span holding query q (thread equal, ts <= q ts < end), -1 where none: the last
 * span of the query's thread starting at or before it, then up its parents (-1: none) to the first that is still
 * running and accepted. The spans must be in time order on each thread (checked: ValueError otherwise). `member`
 * (uint8, or None: every row): only the rows it marks are spans; parents are row numbers all the same. `parent_valid`
 * (uint8, or None: every parent given): where 0 the row has no parent (its slot in span_parent is not read).
 * `end_is_dur`: span_end holds durations (the end is ts + dur, no column of ends needed). */
static PyObject *innermost(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_thread, *o_ts, *o_end, *o_parent, *o_accept, *o_qthread, *o_qts, *o_out, *o_member = Py_None,
             *o_parent_valid = Py_None;
    int end_is_dur = 0;
    if (!PyArg_ParseTuple(args, "OOOOOOOO|OOp", &o_thread, &o_ts, &o_end, &o_parent, &o_accept, &o_qthread, &o_qts,
                          &o_out, &o_member, &o_parent_valid, &end_is_dur))
        return NULL;
    View thread, ts, end, parent, accept, qthread, qts, out, member, parent_valid;
    View *all[] = {&thread, &ts, &end, &parent, &accept, &qthread, &qts, &out, &member, &parent_valid};
    for (int i = 0; i < 10; i++) all[i]->held = 0;
    PyObject *result = NULL;
    ByThread bt;
    memset(&bt, 0, sizeof bt);
    if (view(o_thread, &thread, 0, 8, "span_thread") || view(o_ts, &ts, 0, 8, "span_ts") ||
        view(o_end, &end, 0, 8, "span_end") || view(o_parent, &parent, 0, 8, "span_parent") ||
        (o_accept != Py_None && view(o_accept, &accept, 0, 1, "accept")) ||
        view(o_qthread, &qthread, 0, 8, "q_thread") || view(o_qts, &qts, 0, 8, "q_ts") ||
        view(o_out, &out, 1, 8, "out") || (o_member != Py_None && view(o_member, &member, 0, 1, "member")) ||
        (o_parent_valid != Py_None && view(o_parent_valid, &parent_valid, 0, 1, "parent_valid")))
        goto done;
    Py_ssize_t n = thread.b.len / 8, m = qthread.b.len / 8;
    if (ts.b.len / 8 != n || end.b.len / 8 != n || parent.b.len / 8 != n || (accept.held && accept.b.len != n) ||
        (member.held && member.b.len != n) || (parent_valid.held && parent_valid.b.len != n) ||
        qts.b.len / 8 != m || out.b.len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "innermost: buffers of different lengths");
        goto done;
    }
    const int64_t *th = thread.b.buf, *t0 = ts.b.buf, *t1 = end.b.buf, *up = parent.b.buf;
    const int64_t *qth = qthread.b.buf, *qt = qts.b.buf;
    const uint8_t *ok = accept.held ? accept.b.buf : NULL, *in = member.held ? member.b.buf : NULL;
    int64_t *o = out.b.buf;
    const uint8_t *has_up = parent_valid.held ? parent_valid.b.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    int grouped = by_thread(&bt, th, in, n);
    if (grouped == 0) {
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
                    int64_t stop = end_is_dur ? (int64_t)((uint64_t)t0[c] + (uint64_t)t1[c]) : t1[c];
                    if ((!in || in[c]) && stop > qt[q] && (!ok || ok[c])) { o[q] = c; break; }
                    c = has_up && !has_up[c] ? -1 : up[c];
                }
            }
        }
    } else {
        bt.n = grouped == -3 ? -1 : -2;
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
    for (int i = 0; i < 10; i++) release(all[i]);
    return result;
}

/* A group's state in merge_intervals: its open interval (-1: none yet), that interval's end, the last start seen. */
typedef struct {
    int64_t key, end, last_start;
    Py_ssize_t open, count;
} Run;

typedef struct {
    Run *runs;
    Py_ssize_t *slots; /* run index + 1, 0 empty */
    Py_ssize_t n, cap, n_slots;
} Runs;

static void runs_free(Runs *r) {
    free(r->runs);
    free(r->slots);
    memset(r, 0, sizeof *r);
}

static Py_ssize_t runs_slot(const Runs *r, int64_t key) {
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    Py_ssize_t j = (Py_ssize_t)(h >> 17) & (r->n_slots - 1);
    while (r->slots[j] && r->runs[r->slots[j] - 1].key != key) j = (j + 1) & (r->n_slots - 1);
    return j;
}

/* A new run for key (hashed unless by_change: then runs are told apart by position only); its index, -1: memory. */
static Py_ssize_t runs_add(Runs *r, int64_t key, int hashed) {
    if (r->n == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 64;
        Run *grown = realloc(r->runs, sizeof *grown * (size_t)cap);
        if (!grown) return -1;
        r->runs = grown;
        r->cap = cap;
    }
    if (hashed && 2 * (r->n + 1) > r->n_slots) { /* keep the table at most half full */
        Py_ssize_t n_slots = r->n_slots ? 2 * r->n_slots : 128;
        Py_ssize_t *slots = calloc((size_t)n_slots, sizeof *slots);
        if (!slots) return -1;
        free(r->slots);
        r->slots = slots;
        r->n_slots = n_slots;
        for (Py_ssize_t k = 0; k < r->n; k++) r->slots[runs_slot(r, r->runs[k].key)] = k + 1;
    }
    Run *run = &r->runs[r->n];
    run->key = key;
    run->open = -1;
    run->end = run->last_start = 0;
    run->count = 0;
    if (hashed) r->slots[runs_slot(r, key)] = r->n + 1;
    return r->n++;
}

typedef struct {
    int64_t key;
    Py_ssize_t run;
} KeyedRun;

static int by_key(const void *a, const void *b) {
    int64_t x = ((const KeyedRun *)a)->key, y = ((const KeyedRun *)b)->key;
    return (x > y) - (x < y);
}

/* merge_intervals(group, start, end, by_change) -> (group, start, end, first) as int64 bytes, or None
 * intervals.merged_intervals in one pass: the union of [start, end) per group as disjoint intervals (touching spans
 * join), each with the row that opens it. by_change: a group is a run of equal values (rows grouped, as
 * ``presorted`` promises), the intervals in row order; else every row of a value is one group, the intervals by
 * group (ascending), then in the order they open. None (the caller's Arrow definition then runs) where a group's
 * starts go back in time or a span ends before it starts: there the two could differ. */
static PyObject *merge_intervals(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_group, *o_start, *o_end;
    int by_change;
    if (!PyArg_ParseTuple(args, "OOOp", &o_group, &o_start, &o_end, &by_change)) return NULL;
    View group, start, end;
    View *all[] = {&group, &start, &end};
    for (int i = 0; i < 3; i++) all[i]->held = 0;
    PyObject *result = NULL;
    Runs runs;
    memset(&runs, 0, sizeof runs);
    int64_t *sorted = NULL;
    PyObject *cols[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t *run_of = NULL, *at = NULL;
    KeyedRun *order = NULL;
    if (view(o_group, &group, 0, 8, "group") || view(o_start, &start, 0, 8, "start") || view(o_end, &end, 0, 8, "end"))
        goto done;
    Py_ssize_t n = group.b.len / 8;
    if (start.b.len / 8 != n || end.b.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "merge_intervals: buffers of different lengths");
        goto done;
    }
    const int64_t *g = group.b.buf, *s = start.b.buf, *e = end.b.buf;
    /* the four columns (group, start, end, first) are written straight into the bytes returned, each made for n
     * intervals and cut to the count found: no copy of them (only the pages written are touched) */
    for (int c = 0; c < 4; c++) {
        cols[c] = PyBytes_FromStringAndSize(NULL, (n ? n : 1) * (Py_ssize_t)sizeof(int64_t));
        if (!cols[c]) goto done;
    }
    if (!by_change) run_of = malloc(sizeof *run_of * (size_t)(n + 1)); /* each interval's group, to order them */
    if (!by_change && !run_of) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *ig = (int64_t *)PyBytes_AS_STRING(cols[0]), *is = (int64_t *)PyBytes_AS_STRING(cols[1]),
            *ie = (int64_t *)PyBytes_AS_STRING(cols[2]), *ifirst = (int64_t *)PyBytes_AS_STRING(cols[3]);
    Py_ssize_t count = 0;
    int state = 0; /* 0 fine, 1 declined, 2 out of memory */
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t current = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (e[i] < s[i]) { state = 1; break; }
        Py_ssize_t k;
        if (by_change) {
            if (i == 0 || g[i] != g[i - 1]) current = runs_add(&runs, g[i], 0);
            k = current;
        } else if (current >= 0 && runs.runs[current].key == g[i]) {
            k = current; /* consecutive rows of one group: no lookup */
        } else {
            Py_ssize_t j = runs.n_slots ? runs_slot(&runs, g[i]) : 0;
            k = runs.n_slots && runs.slots[j] ? runs.slots[j] - 1 : runs_add(&runs, g[i], 1);
            current = k;
        }
        if (k < 0) { state = 2; break; }
        Run *run = &runs.runs[k];
        if (run->open >= 0 && s[i] < run->last_start) { state = 1; break; }
        run->last_start = s[i];
        if (run->open < 0 || s[i] > run->end) {
            ig[count] = g[i];
            is[count] = s[i];
            ie[count] = e[i];
            ifirst[count] = i;
            if (run_of) run_of[count] = k;
            run->open = count++;
            run->end = e[i];
            run->count++;
        } else if (e[i] > run->end) {
            run->end = e[i];
            ie[run->open] = e[i];
        }
    }
    if (state == 0 && !by_change && runs.n > 1) {
        /* by group: the runs in key order, each run's intervals where its block begins, in the order they opened */
        order = malloc(sizeof *order * (size_t)runs.n);
        at = malloc(sizeof *at * (size_t)runs.n);
        sorted = malloc(sizeof *sorted * 4 * (size_t)(count + 1));
        if (!order || !at || !sorted) {
            state = 2;
        } else {
            for (Py_ssize_t k = 0; k < runs.n; k++) {
                order[k].key = runs.runs[k].key;
                order[k].run = k;
            }
            qsort(order, (size_t)runs.n, sizeof *order, by_key);
            Py_ssize_t next = 0;
            for (Py_ssize_t k = 0; k < runs.n; k++) {
                at[order[k].run] = next;
                next += runs.runs[order[k].run].count;
            }
            for (Py_ssize_t m = 0; m < count; m++) {
                Py_ssize_t to = at[run_of[m]]++;
                sorted[to] = ig[m];
                sorted[count + to] = is[m];
                sorted[2 * count + to] = ie[m];
                sorted[3 * count + to] = ifirst[m];
            }
            int64_t *into[4] = {ig, is, ie, ifirst};
            for (int c = 0; c < 4; c++) memcpy(into[c], sorted + c * count, sizeof(int64_t) * (size_t)count);
        }
    }
    Py_END_ALLOW_THREADS
    if (state == 2) {
        PyErr_NoMemory();
        goto done;
    }
    if (state == 1) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* each column cut to the intervals found (a smaller allocation keeps its start: no copy) */
    for (int c = 0; c < 4; c++)
        if (_PyBytes_Resize(&cols[c], count * (Py_ssize_t)sizeof(int64_t)) < 0) goto done; /* cols[c] now NULL */
    result = PyTuple_Pack(4, cols[0], cols[1], cols[2], cols[3]);
done:
    for (int c = 0; c < 4; c++) Py_XDECREF(cols[c]);
    Py_BEGIN_ALLOW_THREADS  /* (the temporaries too are freed without the GIL) */
    free(sorted);
    free(run_of);
    free(order);
    free(at);
    runs_free(&runs);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < 3; i++) release(all[i]);
    return result;
}

/* span_union(start, dur, where) -> (covered, first_start, last_end, rows) or None
 * intervals.union_ns and the bounds of the spans [start, start + dur) of the rows where `where` is set (uint8, or
 * None: every row), in one pass without copying them out: the time their union covers (in start order each span
 * adds max(0, M_i - max(s_i, M_{i-1})), M the running maximum of the ends, M_{-1} = s_0), the first start and the
 * latest end. Ends, differences and the sum wrap as Arrow's unchecked int64 arithmetic does. None where the rows'
 * starts are not in order (the caller's Arrow definition sorts them first); rows 0 where none is selected. */
static PyObject *span_union(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_start, *o_dur, *o_where;
    if (!PyArg_ParseTuple(args, "OOO", &o_start, &o_dur, &o_where)) return NULL;
    View start, dur, where;
    View *all[] = {&start, &dur, &where};
    for (int i = 0; i < 3; i++) all[i]->held = 0;
    PyObject *result = NULL;
    if (view(o_start, &start, 0, 8, "start") || view(o_dur, &dur, 0, 8, "dur") ||
        (o_where != Py_None && view(o_where, &where, 0, 1, "where")))
        goto done;
    Py_ssize_t n = start.b.len / 8;
    if (dur.b.len / 8 != n || (where.held && where.b.len != n)) {
        PyErr_SetString(PyExc_ValueError, "span_union: buffers of different lengths");
        goto done;
    }
    const int64_t *s = start.b.buf, *d = dur.b.buf;
    const uint8_t *w = where.held ? where.b.buf : NULL;
    uint64_t covered = 0;
    int64_t first = 0, running = 0, last_start = 0;
    Py_ssize_t rows = 0;
    int sorted = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (w && !w[i]) continue;
        int64_t end = (int64_t)((uint64_t)s[i] + (uint64_t)d[i]), previous;
        if (rows == 0) {
            first = previous = s[i];
            running = end;
        } else {
            if (s[i] < last_start) {
                sorted = 0;
                break;
            }
            previous = running;
            if (end > running) running = end;
        }
        int64_t lower = s[i] > previous ? s[i] : previous;
        int64_t added = (int64_t)((uint64_t)running - (uint64_t)lower);
        if (added > 0) covered += (uint64_t)added;
        last_start = s[i];
        rows++;
    }
    Py_END_ALLOW_THREADS
    if (!sorted)
        result = Py_NewRef(Py_None);
    else
        result = Py_BuildValue("(LLLn)", (long long)(int64_t)covered, (long long)first, (long long)running, rows);
done:
    for (int i = 0; i < 3; i++) release(all[i]);
    return result;
}

/* overlap_ns(a_start, a_end, b_start, b_end) -> int or None
 * How long two sets of disjoint spans in time order overlap: the total of [a_i] intersect [b_j] over all pairs, in one
 * merge of the two lists. None where a list is not disjoint and in order (a span ending before it starts, or
 * starting before the previous one ends): the caller's definition then runs. */
static PyObject *overlap_ns(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"a_start", 8, 0, 0}, {"a_end", 8, 0, 0}, {"b_start", 8, 0, 0}, {"b_end", 8, 0, 0}};
    View v[4];
    PyObject *result = NULL;
    if (views_of_args(args, "overlap_ns", spec, 4, 4, v)) goto done;
    Py_ssize_t n = v[0].b.len / 8, m = v[2].b.len / 8;
    if (v[1].b.len / 8 != n || v[3].b.len / 8 != m) {
        PyErr_SetString(PyExc_ValueError, "overlap_ns: starts and ends of different lengths");
        goto done;
    }
    const int64_t *as = v[0].b.buf, *ae = v[1].b.buf, *bs = v[2].b.buf, *be = v[3].b.buf;
    int ordered = 1;
    uint64_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    ordered = spans_in_order(as, ae, n) && spans_in_order(bs, be, m);
    Py_ssize_t i = 0, j = 0;
    while (ordered && i < n && j < m) {
        int64_t lo = as[i] > bs[j] ? as[i] : bs[j], hi = ae[i] < be[j] ? ae[i] : be[j];
        if (hi > lo) total += (uint64_t)hi - (uint64_t)lo;
        if (ae[i] < be[j]) i++;
        else j++;
    }
    Py_END_ALLOW_THREADS
    result = ordered ? PyLong_FromLongLong((long long)(int64_t)total) : Py_NewRef(Py_None);
done:
    release_views(v, 4);
    return result;
}

/* idle_levels(code, delta, conditions, host_wait_code, gap_code, cause_out, keep_out) -> None
 * The causes of idle.py's _swept in one pass over the boundaries in sweep order: each code's level is its deltas
 * summed up to and with the row; a row's cause is the index of the first code of ``conditions`` (bytes) whose level
 * is above 0, else, where host_wait_code >= 0 and that code's level is 0, len(conditions), else len(conditions) + 1
 * (int64, cause_out); keep_out (uint8) is 1 where gap_code's level is above 0. Codes are 0..255. */
static PyObject *idle_levels(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"code", 1, 0, 0}, {"delta", 8, 0, 0}, {"conditions", 1, 0, 0}};
    static const ViewSpec out_spec[] = {{"cause_out", 8, 1, 0}, {"keep_out", 1, 1, 0}};
    View v[5];
    PyObject *result = NULL;
    v[3].held = v[4].held = 0;
    if (views_of_args(args, "idle_levels", spec, 3, 7, v)) goto done;
    long host_wait = PyLong_AsLong(PyTuple_GET_ITEM(args, 3)), gap = PyLong_AsLong(PyTuple_GET_ITEM(args, 4));
    if (PyErr_Occurred()) goto done;
    for (int i = 0; i < 2; i++)
        if (view(PyTuple_GET_ITEM(args, 5 + i), &v[3 + i], 1, out_spec[i].itemsize, out_spec[i].name)) goto done;
    Py_ssize_t n = v[0].b.len, k = v[2].b.len;
    if (v[1].b.len / 8 != n || v[3].b.len / 8 != n || v[4].b.len != n || gap < 0 || gap > 255 || host_wait > 255) {
        PyErr_SetString(PyExc_ValueError, "idle_levels: arrays of different lengths or codes out of range");
        goto done;
    }
    const uint8_t *code = v[0].b.buf, *conditions = v[2].b.buf;
    const int64_t *delta = v[1].b.buf;
    int64_t *cause = v[3].b.buf;
    uint8_t *keep = v[4].b.buf;
    Py_BEGIN_ALLOW_THREADS
    int64_t level[256] = {0};
    for (Py_ssize_t r = 0; r < n; r++) {
        level[code[r]] += delta[r];
        int64_t c = 0;
        while (c < k && level[conditions[c]] <= 0) c++;
        if (c == k && !(host_wait >= 0 && level[host_wait] <= 0)) c = k + 1;
        cause[r] = c;
        keep[r] = level[gap] > 0;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_views(v, 5);
    return result;
}

/* idle_stretches(gap_s, gap_e, sync_s, sync_e, input_s, input_e, late_s, late_e, queued_s, queued_e, out_s, out_e,
 *                host_wait, cause_out, start_out, end_out) -> int or None
 * idle.cause_spans's stretches (idle._swept's, joined where one's end is the next one's start) by one merge of
 * disjoint lists in time order instead of a sort of every boundary: inside the gaps, a stretch's cause is the index
 * of the first of the four conditions (sync, input, late, queued) whose list covers it, else 4 (host wait) where
 * host_wait is true and no outstanding span covers it, else 5. The stretches are maximal (one goes on while its cause
 * holds) and in time order; written to cause_out (int8), start_out and end_out (int64) when given, else only counted.
 * Returns how many; None where a list is not disjoint and in order (the caller's sweep then runs). */
typedef struct {
    const int64_t *s, *e;
    Py_ssize_t n, i;
} SpanList;

static PyObject *idle_stretches(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"gap_s", 8, 0, 0},    {"gap_e", 8, 0, 0},   {"sync_s", 8, 0, 0},
                                    {"sync_e", 8, 0, 0},   {"input_s", 8, 0, 0}, {"input_e", 8, 0, 0},
                                    {"late_s", 8, 0, 0},   {"late_e", 8, 0, 0},  {"queued_s", 8, 0, 0},
                                    {"queued_e", 8, 0, 0}, {"out_s", 8, 0, 0},   {"out_e", 8, 0, 0}};
    static const ViewSpec out_spec[] = {{"cause_out", 1, 1, 1}, {"start_out", 8, 1, 1}, {"end_out", 8, 1, 1}};
    View v[15];
    PyObject *result = NULL;
    for (int i = 12; i < 15; i++) v[i].held = 0;
    if (views_of_args(args, "idle_stretches", spec, 12, 16, v)) goto done;
    int host_wait = PyObject_IsTrue(PyTuple_GET_ITEM(args, 12));
    if (host_wait < 0) goto done;
    int writing = PyTuple_GET_ITEM(args, 13) != Py_None;
    for (int i = 0; writing && i < 3; i++)
        if (view(PyTuple_GET_ITEM(args, 13 + i), &v[12 + i], 1, out_spec[i].itemsize, out_spec[i].name)) goto done;
    SpanList l[6];
    for (int k = 0; k < 6; k++) {
        l[k].s = v[2 * k].b.buf;
        l[k].e = v[2 * k + 1].b.buf;
        l[k].n = v[2 * k].b.len / 8;
        l[k].i = 0;
        if (v[2 * k + 1].b.len / 8 != l[k].n) {
            PyErr_SetString(PyExc_ValueError, "idle_stretches: starts and ends of different lengths");
            goto done;
        }
    }
    Py_ssize_t room = writing ? v[12].b.len : 0;
    if (writing && (v[13].b.len / 8 != room || v[14].b.len / 8 != room)) {
        PyErr_SetString(PyExc_ValueError, "idle_stretches: outputs of different lengths");
        goto done;
    }
    int8_t *cause_out = writing ? v[12].b.buf : NULL;
    int64_t *start_out = writing ? v[13].b.buf : NULL, *end_out = writing ? v[14].b.buf : NULL;
    int ordered = 1, overflow = 0;
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int k = 0; k < 6 && ordered; k++) ordered = spans_in_order(l[k].s, l[k].e, l[k].n);
    int last_cause = -1;
    int64_t last_end = 0;
    for (Py_ssize_t g = 0; ordered && !overflow && g < l[0].n; g++) {
        int64_t t = l[0].s[g], gap_end = l[0].e[g];
        while (t < gap_end) {
            int64_t next = gap_end;
            int cause = -1, outstanding = 0;
            for (int k = 1; k < 6; k++) {
                SpanList *x = &l[k];
                while (x->i < x->n && x->e[x->i] <= t) x->i++;
                int in = x->i < x->n && x->s[x->i] <= t;
                int64_t bound = in ? x->e[x->i] : x->i < x->n ? x->s[x->i] : INT64_MAX;
                if (bound < next) next = bound;
                if (in && k < 5 && cause < 0) cause = k - 1;
                if (k == 5) outstanding = in;
            }
            if (cause < 0) cause = host_wait && !outstanding ? 4 : 5;
            if (count && last_cause == cause && last_end == t) {
                if (writing) end_out[count - 1] = next;
            } else {
                if (writing) {
                    if (count == room) {
                        overflow = 1;
                        break;
                    }
                    cause_out[count] = (int8_t)cause;
                    start_out[count] = t;
                    end_out[count] = next;
                }
                count++;
            }
            last_cause = cause;
            last_end = next;
            t = next;
        }
    }
    Py_END_ALLOW_THREADS
    if (overflow) PyErr_SetString(PyExc_ValueError, "idle_stretches: outputs too short");
    else result = ordered ? PyLong_FromSsize_t(count) : Py_NewRef(Py_None);
done:
    release_views(v, 15);
    return result;
}

/* How much of each [lo[j], hi[j]) (m of them) the disjoint spans [s[i], e[i]) in time order cover, into out[j], by
 * prefix sums and a search per interval (from the last one's answer: intervals in time order find theirs a few steps
 * on). 0 where the spans are not disjoint and in order (out not written), -1 out of memory, else 1. Takes no GIL. */
static int cover_each(const int64_t *s, const int64_t *e, Py_ssize_t n, const int64_t *lo, const int64_t *hi,
                      Py_ssize_t m, int64_t *out) {
    int64_t *through = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!through) return -1;
    if (!spans_through(s, e, n, through)) {
        free(through);
        return 0;
    }
    Py_ssize_t hint = 0;
    for (Py_ssize_t j = 0; j < m; j++) out[j] = covered_by(s, e, through, n, lo[j], hi[j], &hint);
    free(through);
    return 1;
}

/* covered_each(starts, ends, lo, hi, out) -> bool
 * intervals.covered_within in C (cover_each): for disjoint [starts[i], ends[i]) in time order, how much of each
 * [lo[j], hi[j]) they cover, written to out[j] (int64). False where the intervals are not disjoint and in order (or
 * the lengths disagree): nothing is written, the caller's definition runs. */
static PyObject *covered_each(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"starts", 8, 0, 0}, {"ends", 8, 0, 0}, {"lo", 8, 0, 0}, {"hi", 8, 0, 0},
                                    {"out", 8, 1, 0}};
    View v[5];
    PyObject *result = NULL;
    if (views_of_args(args, "covered_each", spec, 5, 5, v)) goto done;
    Py_ssize_t n = v[0].b.len / 8, m = v[2].b.len / 8;
    if (v[1].b.len / 8 != n || v[3].b.len / 8 != m || v[4].b.len / 8 != m) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    int answered;
    Py_BEGIN_ALLOW_THREADS
    answered = cover_each(v[0].b.buf, v[1].b.buf, n, v[2].b.buf, v[3].b.buf, m, v[4].b.buf);
    Py_END_ALLOW_THREADS
    if (answered < 0) PyErr_NoMemory();
    else result = Py_NewRef(answered ? Py_True : Py_False);
done:
    release_views(v, 5);
    return result;
}

/* covered_hits(starts, ends, lo, hi, keys) -> (keys, ns) as int64 bytes, or None
 * covered_each keeping only the intervals covered by more than 0 ns: their keys (keys[j], int64) and how much, in the
 * intervals' order, made at their size (every interval's answer is kept only inside the call). None where the
 * intervals are not disjoint and in order (or the lengths disagree). */
static PyObject *covered_hits(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"starts", 8, 0, 0}, {"ends", 8, 0, 0}, {"lo", 8, 0, 0}, {"hi", 8, 0, 0},
                                    {"keys", 8, 0, 0}};
    View v[5];
    PyObject *result = NULL, *keys_out = NULL, *ns_out = NULL;
    int64_t *each = NULL;
    if (views_of_args(args, "covered_hits", spec, 5, 5, v)) goto done;
    Py_ssize_t n = v[0].b.len / 8, m = v[2].b.len / 8;
    const int64_t *keys = v[4].b.buf;
    if (v[1].b.len / 8 != n || v[3].b.len / 8 != m || v[4].b.len / 8 != m) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    each = malloc((size_t)(m ? m : 1) * sizeof(int64_t));
    if (!each) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t hits = 0;
    int covered;
    Py_BEGIN_ALLOW_THREADS
    covered = cover_each(v[0].b.buf, v[1].b.buf, n, v[2].b.buf, v[3].b.buf, m, each);
    for (Py_ssize_t j = 0; covered > 0 && j < m; j++) hits += each[j] > 0;
    Py_END_ALLOW_THREADS
    if (covered <= 0) {
        if (covered < 0) PyErr_NoMemory();
        else result = Py_NewRef(Py_None);
        goto done;
    }
    keys_out = PyBytes_FromStringAndSize(NULL, hits * 8);
    ns_out = PyBytes_FromStringAndSize(NULL, hits * 8);
    if (!keys_out || !ns_out) goto done;
    int64_t *kept = (int64_t *)PyBytes_AS_STRING(keys_out), *ns = (int64_t *)PyBytes_AS_STRING(ns_out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0, k = 0; j < m; j++)
        if (each[j] > 0) {
            kept[k] = keys[j];
            ns[k++] = each[j];
        }
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(2, keys_out, ns_out);
done:
    Py_XDECREF(keys_out);
    Py_XDECREF(ns_out);
    free(each);
    release_views(v, 5);
    return result;
}

/* stream_levels(device, stream, start, end) -> [(device, over_ns, most), ...] or None
 * GpuAnalysis.concurrency in one merge per device: rows are the merged busy intervals of each stream (grouped by
 * stream, the streams of a device together, in time order within a stream, disjoint); per device the boundaries of
 * its streams are merged in time order (at equal times ends first, so streams that only touch are never busy
 * together) and the time with two or more streams busy and the most busy at once are counted. None where the
 * rows are not so grouped and ordered, or a device has more than MAX_STREAMS streams: the caller's sweep runs. */
#define MAX_STREAMS 1024
static PyObject *stream_levels(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"device", 8, 0, 0}, {"stream", 8, 0, 0}, {"start", 8, 0, 0}, {"end", 8, 0, 0}};
    View v[4];
    PyObject *result = NULL;
    if (views_of_args(args, "stream_levels", spec, 4, 4, v)) goto done;
    Py_ssize_t n = v[0].b.len / 8;
    for (int i = 1; i < 4; i++)
        if (v[i].b.len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "stream_levels: buffers of different lengths");
            goto done;
        }
    const int64_t *dev = v[0].b.buf, *sid = v[1].b.buf, *s = v[2].b.buf, *e = v[3].b.buf;
    Py_ssize_t *pos = malloc(sizeof *pos * MAX_STREAMS), *stop = malloc(sizeof *stop * MAX_STREAMS);
    char *at_end = malloc(MAX_STREAMS);
    int64_t *out = malloc(sizeof *out * 3 * (size_t)(n + 1));
    Py_ssize_t n_out = 0;
    int ok = pos && stop && at_end && out;
    if (!ok) {
        PyErr_NoMemory();
        goto freeing;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && ok;) {
        Py_ssize_t j = i, k = 0;
        while (j < n && dev[j] == dev[i]) j++;
        if (j < n && dev[j] < dev[i]) ok = 0; /* a device's rows apart, or devices out of order */
        /* the device's streams: runs of one stream id, in order, each in time order and disjoint */
        for (Py_ssize_t r = i; r < j && ok; r++) {
            if (e[r] < s[r]) ok = 0;
            else if (r == i || sid[r] != sid[r - 1]) {
                if (r > i && sid[r] < sid[r - 1]) ok = 0;
                else if (k == MAX_STREAMS) ok = 0;
                else {
                    if (k) stop[k - 1] = r;
                    pos[k] = r;
                    at_end[k] = 0;
                    k++;
                }
            } else if (s[r] < e[r - 1]) ok = 0;
        }
        if (!ok) break;
        stop[k - 1] = j;
        int64_t level = 0, most = 0, previous = 0, over = 0;
        int started = 0;
        for (;;) {
            Py_ssize_t best = -1;
            int64_t best_t = 0;
            for (Py_ssize_t q = 0; q < k; q++) {
                if (pos[q] == stop[q]) continue;
                int64_t t = at_end[q] ? e[pos[q]] : s[pos[q]];
                /* earliest; at equal times an end before a start */
                if (best < 0 || t < best_t || (t == best_t && at_end[q] && !at_end[best])) {
                    best = q;
                    best_t = t;
                }
            }
            if (best < 0) break;
            if (started && level >= 2) over = (int64_t)((uint64_t)over + (uint64_t)best_t - (uint64_t)previous);
            level += at_end[best] ? -1 : 1;
            if (level > most) most = level;
            previous = best_t;
            started = 1;
            if (at_end[best]) {
                at_end[best] = 0;
                pos[best]++;
            } else
                at_end[best] = 1;
        }
        out[3 * n_out] = dev[i];
        out[3 * n_out + 1] = over;
        out[3 * n_out + 2] = most;
        n_out++;
        i = j;
    }
    Py_END_ALLOW_THREADS
    if (!ok) {
        result = Py_NewRef(Py_None);
        goto freeing;
    }
    result = PyList_New(n_out);
    for (Py_ssize_t q = 0; result && q < n_out; q++) {
        PyObject *row = Py_BuildValue("(LLL)", (long long)out[3 * q], (long long)out[3 * q + 1],
                                      (long long)out[3 * q + 2]);
        if (!row) Py_CLEAR(result);
        else PyList_SET_ITEM(result, q, row);
    }
freeing:
    free(pos);
    free(stop);
    free(at_end);
    free(out);
done:
    release_views(v, 4);
    return result;
}

/* lifetimes(device, addr, nbytes, end) -> (reallocated, orphan_frees)
 * memory._lifetimes in one pass in time order: each record's predecessor at the same device and address (a table of
 * the last record per pair, grown with the pairs found); an allocation (nbytes > 0) ends at the next record of
 * its pair when that one has nbytes != 0 (end[alloc] = its row; -1 where none), counted as reallocated when that
 * is another allocation; a free (nbytes < 0) whose predecessor is no allocation is an orphan free. */
static PyObject *lifetimes(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"device", 8, 0, 0}, {"addr", 8, 0, 0}, {"nbytes", 8, 0, 0}, {"end", 8, 1, 0}};
    View v[4];
    PyObject *result = NULL;
    if (views_of_args(args, "lifetimes", spec, 4, 4, v)) goto done;
    Py_ssize_t n = v[0].b.len / 8;
    for (int i = 1; i < 4; i++)
        if (v[i].b.len / 8 != n) {
            PyErr_SetString(PyExc_ValueError, "lifetimes: buffers of different lengths");
            goto done;
        }
    const int64_t *dev = v[0].b.buf, *addr = v[1].b.buf, *nb = v[2].b.buf;
    int64_t *end = v[3].b.buf;
    Py_ssize_t n_slots = 1024, used = 0;
    Py_ssize_t *slots = malloc(sizeof *slots * (size_t)n_slots); /* row + 1 of the pair's last record, 0 empty */
    long long reallocated = 0, orphans = 0;
    int failed = !slots;
    Py_BEGIN_ALLOW_THREADS
    if (slots) memset(slots, 0, sizeof *slots * (size_t)n_slots);
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        end[i] = -1;
        uint64_t h = ((uint64_t)dev[i] * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)addr[i] * 0xC2B2AE3D27D4EB4Full);
        Py_ssize_t j = (Py_ssize_t)(h >> 20) & (n_slots - 1);
        while (slots[j] && (dev[slots[j] - 1] != dev[i] || addr[slots[j] - 1] != addr[i])) j = (j + 1) & (n_slots - 1);
        if (slots[j]) {
            Py_ssize_t prev = slots[j] - 1;
            if (nb[prev] > 0 && nb[i] != 0) {
                end[prev] = i;
                if (nb[i] > 0) reallocated++;
            }
            if (nb[i] < 0 && nb[prev] <= 0) orphans++;
            slots[j] = i + 1;
            continue;
        }
        if (nb[i] < 0) orphans++;
        slots[j] = i + 1;
        if (2 * ++used > n_slots) { /* over half full: twice the slots, every pair placed again */
            Py_ssize_t *grown = calloc((size_t)(2 * n_slots), sizeof *grown);
            if (!grown) {
                failed = 1;
                break;
            }
            for (Py_ssize_t k = 0; k < n_slots; k++) {
                if (!slots[k]) continue;
                Py_ssize_t r = slots[k] - 1;
                uint64_t g = ((uint64_t)dev[r] * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)addr[r] * 0xC2B2AE3D27D4EB4Full);
                Py_ssize_t q = (Py_ssize_t)(g >> 20) & (2 * n_slots - 1);
                while (grown[q]) q = (q + 1) & (2 * n_slots - 1);
                grown[q] = slots[k];
            }
            free(slots);
            slots = grown;
            n_slots *= 2;
        }
    }
    Py_END_ALLOW_THREADS
    free(slots);
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(LL)", reallocated, orphans);
done:
    release_views(v, 4);
    return result;
}

/* climb(parent, is_op, is_annotation, launch, op, top, annotation, max_steps, parent_valid, valid_offset) -> None
 * links.climb in one walk per launch up its parents (at most max_steps rows, the launch included): the first row
 * marked is_op (op), the last one (top) and the first marked is_annotation (annotation); -1 where none. parent and
 * launch are int64 rows (-1: none), the marks uint8 per row; a row out of range ends the walk. parent_valid: the
 * parents' validity bitmap (Arrow's, its bits from bit valid_offset; a null parent ends the walk), or None: the
 * column as it is, without a copy made of it with its nulls as -1. */
static PyObject *climb(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"parent", 8, 0, 0}, {"is_op", 1, 0, 0}, {"is_annotation", 1, 0, 0},
                                    {"launch", 8, 0, 0}, {"op", 8, 1, 0}, {"top", 8, 1, 0}, {"annotation", 8, 1, 0}};
    View v[8]; /* the seven above, then parent_valid */
    PyObject *result = NULL;
    v[7].held = 0;
    if (views_of_args(args, "climb", spec, 7, 10, v)) goto done;
    Py_ssize_t max_steps = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, 7));
    if (max_steps == -1 && PyErr_Occurred()) goto done;
    Py_ssize_t valid_offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, 9));
    if (valid_offset == -1 && PyErr_Occurred()) goto done;
    PyObject *o_valid = PyTuple_GET_ITEM(args, 8);
    if (o_valid != Py_None && view(o_valid, &v[7], 0, 1, "parent_valid")) goto done;
    Py_ssize_t n = v[0].b.len / 8, m = v[3].b.len / 8;
    if (v[1].b.len != n || v[2].b.len != n || v[4].b.len / 8 != m || v[5].b.len / 8 != m || v[6].b.len / 8 != m ||
        valid_offset < 0 || (v[7].held && (valid_offset + n + 7) / 8 > v[7].b.len)) {
        PyErr_SetString(PyExc_ValueError, "climb: buffers of different lengths");
        goto done;
    }
    const uint8_t *valid = v[7].held ? v[7].b.buf : NULL;
    const int64_t *up = v[0].b.buf, *from = v[3].b.buf;
    const uint8_t *op_mark = v[1].b.buf, *note_mark = v[2].b.buf;
    int64_t *op = v[4].b.buf, *top = v[5].b.buf, *note = v[6].b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t q = 0; q < m; q++) {
        int64_t c = from[q], found_op = -1, found_top = -1, found_note = -1;
        for (Py_ssize_t step = 0; step < max_steps && c >= 0 && c < n; step++) {
            if (op_mark[c]) {
                if (found_op < 0) found_op = c;
                found_top = c;
            }
            if (note_mark[c] && found_note < 0) found_note = c;
            c = !valid || valid[(valid_offset + c) >> 3] >> ((valid_offset + c) & 7) & 1 ? up[c] : -1;
        }
        op[q] = found_op;
        top[q] = found_top;
        note[q] = found_note;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_views(v, 8);
    return result;
}

/* thread_keys(p_index, p_valid, p_map, t_index, t_valid, t_map, out) -> None
 * arrays.thread_keys for one chunk of dictionary columns: out[i] = P * 2^32 + T, P = p_map[p_index[i]] (-1 where the
 * index is null or out of the map), T likewise; int32 indices, uint8 validity or None, int64 maps (-1 for values
 * the vocabulary lacks). One pass and one output, no column per step. */
static PyObject *thread_keys(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"p_index", 4, 0, 0}, {"p_valid", 1, 0, 1}, {"p_map", 8, 0, 0},
                                    {"t_index", 4, 0, 0}, {"t_valid", 1, 0, 1}, {"t_map", 8, 0, 0}, {"out", 8, 1, 0}};
    View v[7];
    PyObject *result = NULL;
    if (views_of_args(args, "thread_keys", spec, 7, 7, v)) goto done;
    Py_ssize_t n = v[0].b.len / 4, n_p = v[2].b.len / 8, n_t = v[5].b.len / 8;
    if (v[3].b.len / 4 != n || v[6].b.len / 8 != n || (v[1].held && v[1].b.len != n) ||
        (v[4].held && v[4].b.len != n)) {
        PyErr_SetString(PyExc_ValueError, "thread_keys: buffers of different lengths");
        goto done;
    }
    const int32_t *pi = v[0].b.buf, *ti = v[3].b.buf;
    const uint8_t *pv = v[1].held ? v[1].b.buf : NULL, *tv = v[4].held ? v[4].b.buf : NULL;
    const int64_t *pm = v[2].b.buf, *tm = v[5].b.buf;
    int64_t *out = v[6].b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = (!pv || pv[i]) && pi[i] >= 0 && pi[i] < n_p ? pm[pi[i]] : -1;
        int64_t t = (!tv || tv[i]) && ti[i] >= 0 && ti[i] < n_t ? tm[ti[i]] : -1;
        out[i] = (int64_t)((uint64_t)p * 4294967296ull + (uint64_t)t);
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_views(v, 7);
    return result;
}

/* A row of implied_waits' sorts: its key and the work it stands for */
typedef struct {
    int64_t a, b, c, d; /* the sort key, in order (for sort_keyed, a is a group number: 0 .. n_groups - 1) */
    Py_ssize_t i;       /* the work's index */
} Keyed;

static inline int keyed_before(const Keyed *p, const Keyed *q) {
    if (p->a != q->a) return p->a < q->a;
    if (p->b != q->b) return p->b < q->b;
    if (p->c != q->c) return p->c < q->c;
    return p->d < q->d;
}

static int by_keyed(const void *x, const void *y) {
    return keyed_before(y, x) - keyed_before(x, y);
}

/* Sorts by (a, b, c, d): a counting sort by the group a (stable), then a merge of the runs left, which the rows'
 * time order makes few and long (a group's work comes in nearly the order of its starts). 0, or -1: memory. */
static int sort_keyed(Keyed *x, Py_ssize_t n, Py_ssize_t n_groups) {
    Keyed *other = malloc(sizeof *other * (size_t)(n + 1));
    Py_ssize_t *at = calloc((size_t)n_groups + 1, sizeof *at), *runs = malloc(sizeof *runs * (size_t)(n + 2));
    int failed = !other || !at || !runs;
    if (!failed) {
        for (Py_ssize_t k = 0; k < n; k++) at[x[k].a + 1]++;
        for (Py_ssize_t g = 0; g < n_groups; g++) at[g + 1] += at[g];
        for (Py_ssize_t k = 0; k < n; k++) other[at[x[k].a]++] = x[k];
        Keyed *from = other, *to = x;
        Py_ssize_t n_runs = 0;
        for (Py_ssize_t k = 0; k < n; k++)
            if (k == 0 || keyed_before(&from[k], &from[k - 1])) runs[n_runs++] = k;
        runs[n_runs] = n;
        while (n_runs > 1) { /* each pass merges the runs two by two */
            Py_ssize_t kept = 0;
            for (Py_ssize_t r = 0; r < n_runs; r += 2) {
                Py_ssize_t lo = runs[r], mid = runs[r + 1], hi = r + 2 <= n_runs ? runs[r + 2] : mid;
                Py_ssize_t i = lo, j = mid, k = lo;
                while (i < mid && j < hi) to[k++] = keyed_before(&from[j], &from[i]) ? from[j++] : from[i++];
                while (i < mid) to[k++] = from[i++];
                while (j < hi) to[k++] = from[j++];
                runs[kept++] = lo;
            }
            runs[kept] = n;
            n_runs = kept;
            Keyed *swap = from;
            from = to;
            to = swap;
        }
        if (from != x) memcpy(x, from, sizeof *x * (size_t)n);
    }
    free(other);
    free(at);
    free(runs);
    return failed ? -1 : 0;
}

typedef struct {
    int64_t called, end, work, held, start;
    Py_ssize_t i;
} Late;

static int by_call(const void *x, const void *y) {
    const Late *p = x, *q = y;
    if (p->called != q->called) return (p->called > q->called) - (p->called < q->called);
    if (p->end != q->end) return (p->end > q->end) - (p->end < q->end);
    return (p->work > q->work) - (p->work < q->work);
}


/* implied_waits' answer for the late work of one device where trying each of its other streams per late work would
 * cost more than the budget (many streams and many wait calls): a sweep over the device's launches in start order
 * puts each launched work's running end (reach) into a tree over those ends' values, and a late work's answer is the
 * largest end at most its start among the other streams' work launched before its call; the first stream to occur
 * wins a tie. Each leaf (one end value) keeps the two first-occurring streams that reached it and their rows; each
 * node two of the streams below it, so that "a stream other than this one below" is read per node. */
typedef struct {
    int64_t at;
    Py_ssize_t k; /* a position in the queues */
} Launched;

typedef struct {
    int64_t row;
    int32_t lane, seen;
} Reached;

static int by_launch(const void *x, const void *y) {
    const Launched *p = x, *q = y;
    if (p->at != q->at) return (p->at > q->at) - (p->at < q->at);
    return (p->k > q->k) - (p->k < q->k);
}

static int by_value(const void *x, const void *y) {
    int64_t p = *(const int64_t *)x, q = *(const int64_t *)y;
    return (p > q) - (p < q);
}

static inline int other_below(const int32_t *two, Py_ssize_t node, int64_t own) {
    return (two[2 * node] >= 0 && two[2 * node] != own) || (two[2 * node + 1] >= 0 && two[2 * node + 1] != own);
}

/* the last leaf at or before `last` with a stream other than `own` (-1: none) */
static Py_ssize_t rightmost_other(const int32_t *two, Py_ssize_t node, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t last,
                                  int64_t own) {
    if (lo > last || !other_below(two, node, own)) return -1;
    if (lo == hi) return lo;
    Py_ssize_t mid = lo + (hi - lo) / 2, found = rightmost_other(two, 2 * node + 1, mid + 1, hi, last, own);
    return found >= 0 ? found : rightmost_other(two, 2 * node, lo, mid, last, own);
}

/* two distinct streams of the union of a node's children's */
static inline void merge_two(int32_t *two, Py_ssize_t node) {
    int32_t got[2] = {-1, -1};
    int n = 0;
    for (int c = 0; c < 2 && n < 2; c++)
        for (int e = 0; e < 2 && n < 2; e++) {
            int32_t lane = two[2 * (2 * node + c) + e];
            if (lane >= 0 && (n == 0 || got[0] != lane)) got[n++] = lane;
        }
    two[2 * node] = got[0];
    two[2 * node + 1] = got[1];
}

/* the asks: the device's late work as (index in `late`), in the order of their calls; waited[that index] set */
static int device_sweep(const Keyed *queue, const int64_t *at, const int64_t *reach, const int64_t *reach_row,
                        const Py_ssize_t *group_lo, const Py_ssize_t *seen, const Keyed *lanes, Py_ssize_t hs,
                        Py_ssize_t he, const Keyed *asks, Py_ssize_t n_asks, const Late *late, const int64_t *lane,
                        int64_t *waited) {
    Py_ssize_t n_points = 0;
    for (Py_ssize_t h = hs; h < he; h++) n_points += group_lo[lanes[h].c + 1] - group_lo[lanes[h].c];
    Launched *points = malloc(sizeof *points * (size_t)(n_points + 1));
    int64_t *values = malloc(sizeof *values * (size_t)(n_points + 1));
    Reached *leaf = NULL;
    int32_t *two = NULL;
    int failed = !points || !values;
    if (failed) goto out;
    Py_ssize_t m = 0;
    for (Py_ssize_t h = hs; h < he; h++)
        for (Py_ssize_t k = group_lo[lanes[h].c]; k < group_lo[lanes[h].c + 1]; k++) {
            points[m] = (Launched){at[k], k};
            values[m++] = reach[k];
        }
    qsort(points, (size_t)n_points, sizeof *points, by_launch);
    qsort(values, (size_t)n_points, sizeof *values, by_value);
    Py_ssize_t n_values = 0;
    for (Py_ssize_t k = 0; k < n_points; k++)
        if (k == 0 || values[k] != values[n_values - 1]) values[n_values++] = values[k];
    Py_ssize_t width = 1;
    while (width < n_values) width <<= 1;
    leaf = malloc(sizeof *leaf * 2 * (size_t)(n_values + 1));
    two = malloc(sizeof *two * 4 * (size_t)width);
    if ((failed = !leaf || !two)) goto out;
    for (Py_ssize_t k = 0; k < 2 * n_values; k++) leaf[k] = (Reached){-1, -1, 0};
    for (Py_ssize_t k = 0; k < 4 * width; k++) two[k] = -1;
    Py_ssize_t next = 0;
    for (Py_ssize_t a = 0; a < n_asks; a++) {
        const Late *x = &late[asks[a].c];
        for (; next < n_points && points[next].at < x->called; next++) { /* launched before the call */
            Py_ssize_t k = points[next].k, lo = last_at_or_before(values, n_values, reach[k], 0); /* its value */
            Reached *e = &leaf[2 * lo], add = {reach_row[k], (int32_t)queue[k].a, (int32_t)seen[queue[k].a]};
            if (e[0].lane == add.lane || e[1].lane == add.lane) continue; /* the same end and row again */
            if (e[0].lane < 0 || add.seen < e[0].seen) {
                e[1] = e[0];
                e[0] = add;
            } else if (e[1].lane < 0 || add.seen < e[1].seen) {
                e[1] = add;
            }
            Py_ssize_t node = width + lo;
            two[2 * node] = e[0].lane;
            two[2 * node + 1] = e[1].lane;
            for (node /= 2; node >= 1; node /= 2) merge_two(two, node);
        }
        Py_ssize_t last = last_at_or_before(values, n_values, x->start, 0); /* the last end value at most the start */
        int64_t own = lane[x->i];
        Py_ssize_t found = last >= 0 ? rightmost_other(two, 1, 0, width - 1, last, own) : -1;
        if (found < 0 || values[found] <= x->held) continue;
        const Reached *e = &leaf[2 * found];
        waited[asks[a].c] = e[0].lane != own ? e[0].row : e[1].row;
    }
out:
    free(points);
    free(values);
    free(leaf);
    free(two);
    return failed ? -1 : 0;
}

/* the first of the lanes (by device, then first occurrence) on `dev`, or with `past`, the first after them */
static Py_ssize_t lanes_of(const Keyed *lanes, Py_ssize_t n_groups, int64_t dev, int past) {
    Py_ssize_t lo = 0, hi = n_groups;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (lanes[mid].a < dev || (past && lanes[mid].a == dev)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* the late work by device, then call order: (device, index in late) as a and c; NULL: memory */
static Keyed *late_by_device(const Late *late, Py_ssize_t n_late, const int64_t *device) {
    Keyed *asks = malloc(sizeof *asks * (size_t)(n_late + 1));
    if (!asks) return NULL;
    for (Py_ssize_t k = 0; k < n_late; k++) asks[k] = (Keyed){device[late[k].i], k, k, 0, k};
    qsort(asks, (size_t)n_late, sizeof *asks, by_keyed);
    return asks;
}

#define FAR_OUT ((int64_t)1 << 61)

/* implied_waits(calls, call_thread, work, launch, launch_thread, device, lane, ts, dur, n_threads, n_lanes, cap,
 *               budget) -> bytes or None
 * stream_waits.implied_waits's search in one call, on its inputs: the wait calls' rows and their threads; the launched
 * device work's rows in the links' order, their launch calls' rows and threads, and the work's device and lane (its
 * (device, stream) pair); the events' ts and dur (no nulls; a negative dur as 0); the cap. Threads and lanes are
 * numbered 0 .. n - 1, devices by any code (a null a code of its own); int64 throughout. Returns the
 * pairs (waiting, waited) as int64 bytes, in the definition's order; None where a time lies beyond 2^61 ns of 0 or
 * there are 2^31 works (the definition runs). Budget: the most tries of one stream for one late work in all before
 * the late work is answered by a sweep per device instead (device_sweep: n log n, whatever the streams). */
static PyObject *implied_waits(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"calls", 8, 0, 0},  {"call_thread", 8, 0, 0}, {"work", 8, 0, 0},
                                    {"launch", 8, 0, 0}, {"launch_thread", 8, 0, 0}, {"device", 8, 0, 0},
                                    {"lane", 8, 0, 0},   {"ts", 8, 0, 0},            {"dur", 8, 0, 0}};
    View v[9];
    PyObject *result = NULL;
    Keyed *launches = NULL; /* the launches by thread; then the work by lane and start; then the queues */
    Late *late = NULL;
    int64_t *last_call = NULL, *before = NULL, *reach = NULL, *reach_row = NULL, *at = NULL, *pairs = NULL;
    Py_ssize_t *group_lo = NULL, *seen = NULL;
    Keyed *lanes = NULL; /* per lane: its device, its first occurrence, its number (by device, then occurrence) */
    if (views_of_args(args, "implied_waits", spec, 9, 13, v)) goto done;
    long long number[4]; /* n_threads, n_lanes, cap, budget */
    for (int k = 0; k < 4; k++) {
        number[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(args, 9 + k));
        if (number[k] == -1 && PyErr_Occurred()) goto done;
    }
    long long n_threads = number[0], n_lanes = number[1], cap = number[2], budget = number[3];
    if (n_threads < 0 || n_lanes < 0) {
        PyErr_SetString(PyExc_ValueError, "implied_waits: negative counts");
        goto done;
    }
    Py_ssize_t n_calls = v[0].b.len / 8, n = v[2].b.len / 8, n_rows = v[7].b.len / 8;
    if (v[1].b.len / 8 != n_calls || v[3].b.len / 8 != n || v[4].b.len / 8 != n || v[5].b.len / 8 != n ||
        v[6].b.len / 8 != n || v[8].b.len / 8 != n_rows) {
        PyErr_SetString(PyExc_ValueError, "implied_waits: buffers of different lengths");
        goto done;
    }
    const int64_t *calls = v[0].b.buf, *call_thread = v[1].b.buf, *work = v[2].b.buf, *launch = v[3].b.buf,
                  *launch_thread = v[4].b.buf, *device = v[5].b.buf, *lane = v[6].b.buf, *ts = v[7].b.buf,
                  *dur = v[8].b.buf;
    for (Py_ssize_t k = 0; k < n_calls; k++)
        if (calls[k] < 0 || calls[k] >= n_rows || call_thread[k] < 0 || call_thread[k] >= n_threads) {
            PyErr_SetString(PyExc_ValueError, "implied_waits: a call's row or thread out of range");
            goto done;
        }
    for (Py_ssize_t i = 0; i < n; i++)
        if (work[i] < 0 || work[i] >= n_rows || launch[i] < 0 || launch[i] >= n_rows || launch_thread[i] < 0 ||
            launch_thread[i] >= n_threads || lane[i] < 0 || lane[i] >= n_lanes) {
            PyErr_SetString(PyExc_ValueError, "implied_waits: a work's row, launch, thread or lane out of range");
            goto done;
        }
    /* every time read within FAR_OUT of 0, and the cap too: every end, difference and comparison fits int64 */
    int near = cap > -FAR_OUT && cap < FAR_OUT && n < INT32_MAX;
    for (Py_ssize_t k = 0; k < n_calls && near; k++) near = ts[calls[k]] > -FAR_OUT && ts[calls[k]] < FAR_OUT;
    for (Py_ssize_t i = 0; i < n && near; i++) {
        int64_t rows[2] = {work[i], launch[i]};
        for (int r = 0; r < 2; r++)
            near = near && ts[rows[r]] > -FAR_OUT && ts[rows[r]] < FAR_OUT && dur[rows[r]] < FAR_OUT;
    }
    if (!near) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    launches = malloc(sizeof *launches * (size_t)(n + 1));
    last_call = malloc(sizeof *last_call * (size_t)(n + 1));
    before = malloc(sizeof *before * (size_t)(n + 1));
    reach = malloc(sizeof *reach * (size_t)(n + 1));
    reach_row = malloc(sizeof *reach_row * (size_t)(n + 1));
    at = malloc(sizeof *at * (size_t)(n + 1));
    late = malloc(sizeof *late * (size_t)(n + 1));
    group_lo = malloc(sizeof *group_lo * (size_t)(n + 2));
    seen = malloc(sizeof *seen * (size_t)(n + 1));
    lanes = malloc(sizeof *lanes * (size_t)(n + 1));
    pairs = malloc(sizeof *pairs * 2 * (size_t)(n + 1));
    if (!launches || !last_call || !before || !reach || !reach_row || !at || !late ||
        !group_lo || !seen || !lanes || !pairs) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n_pairs = 0;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
#define END_OF(row) (ts[row] + (dur[row] > 0 ? dur[row] : 0))
    /* each call's next launch on its thread: the first by (start, end, work) starting at or after the call */
    for (Py_ssize_t i = 0; i < n; i++) {
        launches[i] = (Keyed){launch_thread[i], ts[launch[i]], END_OF(launch[i]), work[i], i};
        last_call[i] = -1;
    }
    if ((failed = sort_keyed(launches, n, n_threads))) goto computed;
    for (Py_ssize_t k = 0; k < n_calls; k++) {
        int64_t thread = call_thread[k], start = ts[calls[k]];
        Py_ssize_t lo = 0, hi = n;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (launches[mid].a < thread || (launches[mid].a == thread && launches[mid].b < start)) lo = mid + 1;
            else hi = mid;
        }
        if (lo < n && launches[lo].a == thread) { /* a work's last call: the latest row */
            Py_ssize_t i = launches[lo].i;
            if (calls[k] > last_call[i]) last_call[i] = calls[k];
        }
    }
    /* the end of the work before each one on its stream (by start, then row); -1 marks none */
    Keyed *on_stream = launches;
    for (Py_ssize_t i = 0; i < n; i++) on_stream[i] = (Keyed){lane[i], ts[work[i]], work[i], 0, i};
    if ((failed = sort_keyed(on_stream, n, n_lanes))) goto computed;
    for (Py_ssize_t k = 0; k < n; k++) {
        int same = k > 0 && on_stream[k].a == on_stream[k - 1].a;
        before[on_stream[k].i] = same ? END_OF(on_stream[k - 1].c) : INT64_MIN;
    }
    /* the late ones: started more than cap after both their launch ended and the work before them ended */
    Py_ssize_t n_late = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (last_call[i] < 0) continue;
        int64_t launch_end = END_OF(launch[i]), held = before[i] > launch_end ? before[i] : launch_end;
        int64_t start = ts[work[i]];
        if (start - held > cap) late[n_late++] = (Late){ts[last_call[i]], launch_end, work[i], held, start, i};
    }
    qsort(late, (size_t)n_late, sizeof *late, by_call);
    /* the queues: per (device, stream) by launch start, then row, with the running maximum of the ends */
    Keyed *queue = launches;
    for (Py_ssize_t i = 0; i < n; i++) queue[i] = (Keyed){lane[i], ts[launch[i]], work[i], 0, i};
    if ((failed = sort_keyed(queue, n, n_lanes))) goto computed;
    Py_ssize_t n_groups = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int opens = k == 0 || queue[k].a != queue[k - 1].a;
        if (opens) {
            group_lo[n_groups] = k;
            seen[n_groups++] = queue[k].i;
        } else if (queue[k].i < seen[n_groups - 1]) {
            seen[n_groups - 1] = queue[k].i; /* the streams in the order they first occur among the links */
        }
        int64_t end = END_OF(queue[k].c);
        at[k] = queue[k].b;
        if (opens || end > reach[k - 1]) {
            reach[k] = end;
            reach_row[k] = queue[k].c;
        } else {
            reach[k] = reach[k - 1];
            reach_row[k] = reach_row[k - 1];
        }
    }
    group_lo[n_groups] = n;
    for (Py_ssize_t g = 0; g < n_groups; g++) lanes[g] = (Keyed){device[queue[group_lo[g]].i], seen[g], g, 0, 0};
    qsort(lanes, (size_t)n_groups, sizeof *lanes, by_keyed);
    /* each late one waited for whichever other stream's work of its device, launched before its call, ended last
     * no later than its start and after what held it (the first stream to occur wins a tie): each of its device's
     * other streams tried in turn, or where that would cost more than the budget, a sweep per device */
    if (n_groups != n_lanes) { /* (every lane a work's: numbered 0 .. n - 1 in order, a group's number its lane's) */
        failed = 2;
        goto computed;
    }
    int64_t *waited = before; /* per late work (in call order): the row it waited for, -1 none */
    Py_ssize_t tries = 0;
    for (Py_ssize_t k = 0; k < n_late; k++) {
        Py_ssize_t i = late[k].i;
        waited[k] = -1;
        tries += lanes_of(lanes, n_groups, device[i], 1) - lanes_of(lanes, n_groups, device[i], 0);
    }
    if (tries > budget) {
        Keyed *asks = late_by_device(late, n_late, device);
        if ((failed = !asks)) goto computed;
        for (Py_ssize_t hs = 0, q = 0; hs < n_groups && !failed;) {
            Py_ssize_t he = hs, qs;
            while (he < n_groups && lanes[he].a == lanes[hs].a) he++;
            while (q < n_late && asks[q].a < lanes[hs].a) q++;
            for (qs = q; q < n_late && asks[q].a == lanes[hs].a; q++) continue;
            if (q > qs)
                failed = device_sweep(queue, at, reach, reach_row, group_lo, seen, lanes, hs, he, asks + qs, q - qs,
                                      late, lane, waited) != 0;
            hs = he;
        }
        free(asks);
        if (failed) goto computed;
    } else {
        for (Py_ssize_t k = 0; k < n_late; k++) {
            Py_ssize_t i = late[k].i;
            int64_t best_end = late[k].held;
            for (Py_ssize_t h = lanes_of(lanes, n_groups, device[i], 0); h < n_groups && lanes[h].a == device[i]; h++) {
                Py_ssize_t g = (Py_ssize_t)lanes[h].c, lo = group_lo[g], hi = group_lo[g + 1];
                if (g == lane[i]) continue;
                /* of the work launched before the call (times within 2^61 ns: called - 1 fits), the last whose
                 * reach is at most the start */
                Py_ssize_t before_call = last_at_or_before(at + lo, hi - lo, late[k].called - 1, 0) + 1;
                Py_ssize_t j = lo + last_at_or_before(reach + lo, before_call, late[k].start, 0);
                if (j >= lo && reach[j] > best_end) {
                    waited[k] = reach_row[j];
                    best_end = reach[j];
                }
            }
        }
    }
    for (Py_ssize_t k = 0; k < n_late; k++)
        if (waited[k] >= 0) {
            pairs[2 * n_pairs] = late[k].work;
            pairs[2 * n_pairs++ + 1] = waited[k];
        }
#undef END_OF
computed:
    Py_END_ALLOW_THREADS
    if (failed == 2) PyErr_SetString(PyExc_ValueError, "implied_waits: a lane number without work");
    else if (failed) PyErr_NoMemory();
    else result = PyBytes_FromStringAndSize((const char *)pairs, (Py_ssize_t)sizeof *pairs * 2 * n_pairs);
done:
    free(launches);
    free(last_call);
    free(before);
    free(reach);
    free(reach_row);
    free(at);
    free(late);
    free(group_lo);
    free(seen);
    free(lanes);
    free(pairs);
    release_views(v, 9);
    return result;
}

/* pair_numbers(a, b, width_a, width_b, out) -> pairs as int64 bytes (a0, b0, a1, b1, ...), or None
 * Per row, the number (int32, into out) of its pair of int32 codes (a[i], b[i]; each -1 for null or 0..width - 1)
 * in the order the pairs first occur, and the distinct pairs in that order: arrays.pair_numbers by a table over
 * every possible pair. None where that table would be larger than a few times the rows, or a code is out of its range
 * (the Arrow definition then runs). */
static PyObject *pair_numbers(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_a, *o_b, *o_out;
    Py_ssize_t width_a, width_b;
    if (!PyArg_ParseTuple(args, "OOnnO", &o_a, &o_b, &width_a, &width_b, &o_out)) return NULL;
    View a, b, out;
    a.held = b.held = out.held = 0;
    PyObject *result = NULL;
    int32_t *slot = NULL;
    int64_t *pairs = NULL;
    if (view(o_a, &a, 0, 4, "a") || view(o_b, &b, 0, 4, "b") || view(o_out, &out, 1, 4, "out")) goto done;
    Py_ssize_t n = a.b.len / 4;
    if (b.b.len / 4 != n || out.b.len / 4 != n || width_a < 0 || width_b < 0) {
        PyErr_SetString(PyExc_ValueError, "pair_numbers: buffers of different lengths");
        goto done;
    }
    /* codes -1 .. width - 1: (width + 1) values a side */
    Py_ssize_t wa = width_a + 1, wb = width_b + 1;
    if (wb && wa > (4 * n + 1024) / wb) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t most = wa * wb < n ? wa * wb : n; /* distinct pairs at most */
    slot = malloc(sizeof *slot * (size_t)(wa * wb)); /* the pair's number + 1, 0: not seen */
    pairs = malloc(sizeof *pairs * 2 * (size_t)(most ? most : 1));
    if (!slot || !pairs) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *x = a.b.buf, *y = b.b.buf;
    int32_t *o = out.b.buf;
    Py_ssize_t found = 0;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    memset(slot, 0, sizeof *slot * (size_t)(wa * wb));
    for (Py_ssize_t i = 0; i < n; i++) {
        if (x[i] < -1 || x[i] >= width_a || y[i] < -1 || y[i] >= width_b || found >= INT32_MAX - 1) { ok = 0; break; }
        int32_t *at = &slot[((Py_ssize_t)x[i] + 1) * wb + (y[i] + 1)];
        if (!*at) {
            *at = (int32_t)(++found);
            pairs[2 * found - 2] = x[i];
            pairs[2 * found - 1] = y[i];
        }
        o[i] = *at - 1;
    }
    Py_END_ALLOW_THREADS
    result = ok ? PyBytes_FromStringAndSize((const char *)pairs, found * 2 * (Py_ssize_t)sizeof *pairs)
                : Py_NewRef(Py_None);
done:
    free(slot);
    free(pairs);
    release(&a);
    release(&b);
    release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"pair_numbers", pair_numbers, METH_VARARGS,
     "pair_numbers(a, b, width_a, width_b, out) -> int64 pairs bytes or None\n\nPer row the number (int32) of its "
     "pair of int32 codes in first-occurrence order, and the pairs (arrays.pair_numbers; None: the definition runs)."},
    {"innermost", innermost, METH_VARARGS,
     "innermost(span_thread, span_ts, span_end, span_parent, accept, q_thread, q_ts, out, member=None, "
     "parent_valid=None, end_is_dur=False) -> None\n\nintervals.innermost_enclosing in C (int64 buffers, -1 for "
     "none; accept, member and parent_valid bytes or None; span_end durations where end_is_dur)."},
    {"span_union", span_union, METH_VARARGS,
     "span_union(start, dur, where) -> (covered, first_start, last_end, rows) or None\n\nintervals.union_ns and "
     "the spans' bounds over the rows where `where` (uint8 or None) is set; None where their starts are not sorted."},
    {"thread_keys", thread_keys, METH_VARARGS,
     "thread_keys(p_index, p_valid, p_map, t_index, t_valid, t_map, out) -> None\n\narrays.thread_keys for one "
     "chunk of dictionary columns (int32 indices, uint8 validity or None, int64 maps; int64 out)."},
    {"climb", climb, METH_VARARGS,
     "climb(parent, is_op, is_annotation, launch, op, top, annotation, max_steps, parent_valid, valid_offset) -> "
     "None\n\nlinks.climb in one walk per launch up its parents (int64 rows, -1 none; uint8 marks; the parents' "
     "validity bitmap or None)."},
    {"lifetimes", lifetimes, METH_VARARGS,
     "lifetimes(device, addr, nbytes, end) -> (reallocated, orphan_frees)\n\nmemory._lifetimes in one pass in "
     "time order (int64 buffers; end filled with the row ending each allocation, -1 where none)."},
    {"stream_levels", stream_levels, METH_VARARGS,
     "stream_levels(device, stream, start, end) -> [(device, over_ns, most), ...] or None\n\nPer device, the "
     "time two or more of its streams are busy and the most busy at once (int64 buffers of each stream's merged "
     "intervals); None where they are not grouped and in order."},
    {"overlap_ns", overlap_ns, METH_VARARGS,
     "overlap_ns(a_start, a_end, b_start, b_end) -> int or None\n\nHow long two lists of disjoint spans in time "
     "order overlap (int64 buffers); None where a list is not disjoint and in order."},
    {"idle_levels", idle_levels, METH_VARARGS,
     "idle_levels(code, delta, conditions, host_wait_code, gap_code, cause_out, keep_out) -> None\n\nidle._swept's "
     "causes and gap mask in one pass over the sorted boundaries."},
    {"idle_stretches", idle_stretches, METH_VARARGS,
     "idle_stretches(gap_s, gap_e, sync_s, sync_e, input_s, input_e, late_s, late_e, queued_s, queued_e, out_s, "
     "out_e, host_wait, cause_out, start_out, end_out) -> int or None\n\nidle.cause_spans's stretches of one "
     "device, maximal and in time order, by one merge of its covers' unions (outputs None: only counted)."},
    {"covered_each", covered_each, METH_VARARGS,
     "covered_each(starts, ends, lo, hi, out) -> bool\n\nintervals.covered_within into out (int64 buffers); False "
     "where the intervals are not disjoint and in order."},
    {"covered_hits", covered_hits, METH_VARARGS,
     "covered_hits(starts, ends, lo, hi, keys) -> (keys, ns) as int64 bytes, or None\n\nThe keys of the intervals "
     "[lo, hi) the disjoint spans in time order cover by more than 0 ns, and by how much; None where they are not in "
     "order."},
    {"implied_waits", implied_waits, METH_VARARGS,
     "implied_waits(calls, call_thread, work, launch, launch_thread, device, lane, ts, dur, n_threads, n_lanes, cap, "
     "budget) -> bytes or None"
     "\n\nstream_waits.implied_waits's pairs (waiting, waited) as int64 bytes; None where a time is too far out."},
    {"merge_intervals", merge_intervals, METH_VARARGS,
     "merge_intervals(group, start, end, by_change) -> (group, start, end, first) as int64 bytes, or None\n\n"
     "intervals.merged_intervals in one pass; None where a group's starts go back or a span ends before it starts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops",
                                    "Loops of the analyses over every row in C.", -1, methods, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__loops(void) { return PyModule_Create(&module); }
