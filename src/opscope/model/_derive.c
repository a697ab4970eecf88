/* opscope.model._derive: derive.py's loops over every event in C, the same arithmetic without a Python object per
 * event: the nesting stack walk (_nest_sorted), the step of each event (assign_steps), Arrow's index_in for int64
 * ids (lookup.index_in), the bitmaps of positions (buffers.true_positions, buffers.position_marks) and row numbers
 * (ranges.arange). The Python versions stay the definition and run where this module is not built. */
#include "../_buffers.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* One thread's open events, for nest_layer. */
typedef struct {
    int64_t key;
    int64_t *end, *row;
    Py_ssize_t top, cap;
} Stack;

typedef struct {
    Stack *stacks;
    Py_ssize_t *slots; /* open addressing: index into stacks + 1, 0 empty */
    Py_ssize_t n, cap_stacks, n_slots;
} Threads;

static Stack *thread_stack(Threads *t, int64_t key) {
    if (2 * (t->n + 1) > t->n_slots) { /* grow the slots (and place every thread again) */
        Py_ssize_t n_slots = t->n_slots ? 2 * t->n_slots : 64;
        Py_ssize_t *slots = calloc((size_t)n_slots, sizeof *slots);
        if (!slots) return NULL;
        for (Py_ssize_t i = 0; i < t->n; i++) {
            uint64_t h = (uint64_t)t->stacks[i].key * 0x9E3779B97F4A7C15ull;
            Py_ssize_t j = (Py_ssize_t)(h >> 20) & (n_slots - 1);
            while (slots[j]) j = (j + 1) & (n_slots - 1);
            slots[j] = i + 1;
        }
        free(t->slots);
        t->slots = slots;
        t->n_slots = n_slots;
    }
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    Py_ssize_t j = (Py_ssize_t)(h >> 20) & (t->n_slots - 1);
    while (t->slots[j]) {
        Stack *st = &t->stacks[t->slots[j] - 1];
        if (st->key == key) return st;
        j = (j + 1) & (t->n_slots - 1);
    }
    if (t->n == t->cap_stacks) {
        Py_ssize_t cap = t->cap_stacks ? 2 * t->cap_stacks : 16;
        Stack *stacks = realloc(t->stacks, sizeof *stacks * (size_t)cap);
        if (!stacks) return NULL;
        t->stacks = stacks;
        t->cap_stacks = cap;
    }
    Stack *st = &t->stacks[t->n];
    memset(st, 0, sizeof *st);
    st->key = key;
    t->slots[j] = ++t->n;
    return st;
}

static int stack_push(Stack *st, int64_t end, int64_t row) {
    if (st->top == st->cap) {
        Py_ssize_t cap = st->cap ? 2 * st->cap : 8;
        int64_t *e = realloc(st->end, sizeof *e * (size_t)cap);
        if (!e) return -1;
        st->end = e;
        int64_t *r = realloc(st->row, sizeof *r * (size_t)cap);
        if (!r) return -1;
        st->row = r;
        st->cap = cap;
    }
    st->end[st->top] = end;
    st->row[st->top] = row;
    st->top++;
    return 0;
}

/* _nest_sorted over the rows of one layer, without sorting them by thread first: the rows in table (time) order,
 * each thread's own stack found by its key (pid code * 2**31 + tid code, as derive.nest makes it). Each thread sees
 * its rows in the same order as after derive.nest's stable sort, so the results are the same. */
static PyObject *nest_layer(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_mask, *o_pid, *o_tid, *o_ts, *o_dur, *o_parent, *o_depth, *o_self, *o_keep;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o_mask, &o_pid, &o_tid, &o_ts, &o_dur, &o_parent, &o_depth, &o_self,
                          &o_keep))
        return NULL;
    View mask, pid, tid, tss, durs, parent, depth, self_ns, keep;
    View *all[] = {&mask, &pid, &tid, &tss, &durs, &parent, &depth, &self_ns, &keep};
    for (int i = 0; i < 9; i++) all[i]->held = 0;
    PyObject *result = NULL;
    Threads threads = {0};
    int failed = 0;
    long long overlapping = 0;
    if (view(o_mask, &mask, 0, 1, "mask") || view(o_pid, &pid, 0, 4, "pid") || view(o_tid, &tid, 0, 4, "tid") ||
        view(o_ts, &tss, 0, 8, "ts") || view(o_dur, &durs, 0, 8, "dur") || view(o_parent, &parent, 1, 8, "parent") ||
        view(o_depth, &depth, 1, 4, "depth") || view(o_self, &self_ns, 1, 8, "self_ns") ||
        (o_keep != Py_None && view(o_keep, &keep, 0, 0, "keep_self")))
        goto done;
    Py_ssize_t n = mask.b.len;
    if (pid.b.len / 4 != n || tid.b.len / 4 != n || tss.b.len / 8 != n || durs.b.len / 8 != n ||
        parent.b.len / 8 != n || depth.b.len / 4 != n || self_ns.b.len / 8 != n || (keep.held && keep.b.len != n)) {
        PyErr_SetString(PyExc_ValueError, "nest_layer: buffers of different lengths");
        goto done;
    }
    const uint8_t *m = mask.b.buf, *keep_v = keep.held ? keep.b.buf : NULL;
    const int32_t *pid_v = pid.b.buf, *tid_v = tid.b.buf;
    const int64_t *ts_v = tss.b.buf, *dur_v = durs.b.buf;
    int64_t *parent_v = parent.b.buf, *self_v = self_ns.b.buf;
    int32_t *depth_v = depth.b.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t row = 0; row < n && !failed; row++) {
        if (!m[row]) continue;
        Stack *st = thread_stack(&threads, (int64_t)pid_v[row] * ((int64_t)1 << 31) + tid_v[row]);
        if (!st) { failed = 1; break; }
        int64_t ts = ts_v[row], dur = dur_v[row];
        while (st->top && st->end[st->top - 1] <= ts) st->top--;
        if (st->top) {
            int64_t up = st->row[st->top - 1];
            parent_v[row] = up;
            depth_v[row] = (int32_t)st->top;
            if (ts + dur <= st->end[st->top - 1]) {
                if (!keep_v || !(keep_v[row] == 1 && keep_v[up] == 2)) self_v[up] -= dur;
            } else {
                overlapping++;
                take_overrun(ts, ts + dur, row, st->end, st->row, st->top, self_v, keep_v);
            }
        }
        if (stack_push(st, ts + dur, row)) failed = 1;
    }
    Py_END_ALLOW_THREADS
    if (failed) { PyErr_NoMemory(); goto done; }
    result = PyLong_FromLongLong(overlapping);
done:
    for (Py_ssize_t i = 0; i < threads.n; i++) { free(threads.stacks[i].end); free(threads.stacks[i].row); }
    free(threads.stacks);
    free(threads.slots);
    for (int i = 0; i < 9; i++) release(all[i]);
    return result;
}

/* index_in(keys, key_valid, values, value_valid, out) -> None
 * out[i] (int32) = the first j with values[j] == keys[i] (a null key matches the first null value), -1 where none:
 * Arrow's index_in on int64 columns with one open-addressing table of int32 positions instead of its memo table
 * (fewer than 2**31 - 1 values). *_valid: bytes (1 valid) or None (all valid). */
static PyObject *index_in(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_keys, *o_kvalid, *o_values, *o_vvalid, *o_out;
    if (!PyArg_ParseTuple(args, "OOOOO", &o_keys, &o_kvalid, &o_values, &o_vvalid, &o_out)) return NULL;
    View keys, kvalid, values, vvalid, out;
    View *all[] = {&keys, &kvalid, &values, &vvalid, &out};
    for (int i = 0; i < 5; i++) all[i]->held = 0;
    PyObject *result = NULL;
    if (view(o_keys, &keys, 0, 8, "keys") || (o_kvalid != Py_None && view(o_kvalid, &kvalid, 0, 1, "key_valid")) ||
        view(o_values, &values, 0, 8, "values") ||
        (o_vvalid != Py_None && view(o_vvalid, &vvalid, 0, 1, "value_valid")) || view(o_out, &out, 1, 4, "out"))
        goto done;
    Py_ssize_t n = keys.b.len / 8, m = values.b.len / 8;
    if (out.b.len / 4 != n || (kvalid.held && kvalid.b.len != n) || (vvalid.held && vvalid.b.len != m)) {
        PyErr_SetString(PyExc_ValueError, "index_in: buffers of different lengths");
        goto done;
    }
    if (m >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "index_in: 2**31 - 1 values or more");
        goto done;
    }
    const int64_t *k = keys.b.buf, *v = values.b.buf;
    const uint8_t *kv = kvalid.held ? kvalid.b.buf : NULL, *vv = vvalid.held ? vvalid.b.buf : NULL;
    int32_t *o = out.b.buf;
    /* Dense values (row ids, correlation ids: a range at most a few times their count) index a table directly;
     * others go through an open-addressing hash. Either holds each value's first position. */
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t j = 0; j < m; j++)
        if (!vv || vv[j]) { if (v[j] < lo) lo = v[j]; if (v[j] > hi) hi = v[j]; }
    int dense = lo <= hi && (uint64_t)hi - (uint64_t)lo < (uint64_t)(4 * m + 1024);
    Py_ssize_t size = 16;
    if (dense) size = (Py_ssize_t)((uint64_t)hi - (uint64_t)lo) + 1;
    else while (size < 2 * m + 2) size *= 2;
    int32_t *slot = malloc(sizeof *slot * (size_t)size); /* index into values + 1, 0 empty */
    if (!slot) { PyErr_NoMemory(); goto done; }
    Py_BEGIN_ALLOW_THREADS
    memset(slot, 0, sizeof *slot * (size_t)size);
    int32_t first_null = -1;
    if (dense) {
        for (Py_ssize_t j = 0; j < m; j++) {
            if (vv && !vv[j]) { if (first_null < 0) first_null = (int32_t)j; continue; }
            int32_t *at = &slot[(uint64_t)v[j] - (uint64_t)lo];
            if (!*at) *at = (int32_t)(j + 1); /* the first occurrence stays */
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (kv && !kv[i]) { o[i] = first_null; continue; }
            o[i] = k[i] < lo || k[i] > hi ? -1 : slot[(uint64_t)k[i] - (uint64_t)lo] - 1;
        }
    } else {
        for (Py_ssize_t j = 0; j < m; j++) {
            if (vv && !vv[j]) { if (first_null < 0) first_null = (int32_t)j; continue; }
            uint64_t h = (uint64_t)v[j] * 0x9E3779B97F4A7C15ull;
            Py_ssize_t s = (Py_ssize_t)(h >> 17) & (size - 1);
            while (slot[s] && v[slot[s] - 1] != v[j]) s = (s + 1) & (size - 1);
            if (!slot[s]) slot[s] = (int32_t)(j + 1); /* the first occurrence stays */
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (kv && !kv[i]) { o[i] = first_null; continue; }
            uint64_t h = (uint64_t)k[i] * 0x9E3779B97F4A7C15ull;
            Py_ssize_t s = (Py_ssize_t)(h >> 17) & (size - 1);
            while (slot[s] && v[slot[s] - 1] != k[i]) s = (s + 1) & (size - 1);
            o[i] = slot[s] ? slot[s] - 1 : -1;
        }
    }
    Py_END_ALLOW_THREADS
    free(slot);
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < 5; i++) release(all[i]);
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

/* fold_ops(parent, code, is_op, layer, self_ns, merged, op_self) -> int
 * derive.fold_duplicate_ops in one pass: a cpu_op named as its parent (code, -1 for no name) that is the parent's
 * only child in the op layer is folded (merged[i] = 1), and its self time goes to its nearest ancestor that is not
 * (op_self, which starts as self_ns). Parents come before their children in the model's time order; the number of
 * rows folded, or -1 (nothing written) where a parent does not come first: the caller's Arrow definition then runs. */
static PyObject *fold_ops(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_parent, *o_code, *o_is_op, *o_layer, *o_self, *o_merged, *o_op_self;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o_parent, &o_code, &o_is_op, &o_layer, &o_self, &o_merged, &o_op_self))
        return NULL;
    View parent, code, is_op, layer, self_ns, merged, op_self;
    View *all[] = {&parent, &code, &is_op, &layer, &self_ns, &merged, &op_self};
    for (int i = 0; i < 7; i++) all[i]->held = 0;
    PyObject *result = NULL;
    int64_t *children = NULL, *kept = NULL;
    if (view(o_parent, &parent, 0, 8, "parent") || view(o_code, &code, 0, 4, "code") ||
        view(o_is_op, &is_op, 0, 1, "is_op") || view(o_layer, &layer, 0, 1, "layer") ||
        view(o_self, &self_ns, 0, 8, "self_ns") || view(o_merged, &merged, 1, 1, "merged") ||
        view(o_op_self, &op_self, 1, 8, "op_self"))
        goto done;
    Py_ssize_t n = parent.b.len / 8;
    if (code.b.len / 4 != n || is_op.b.len != n || layer.b.len != n || self_ns.b.len / 8 != n || merged.b.len != n ||
        op_self.b.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "fold_ops: buffers of different lengths");
        goto done;
    }
    const int64_t *up = parent.b.buf, *own = self_ns.b.buf;
    const int32_t *name = code.b.buf;
    const uint8_t *op = is_op.b.buf, *in_layer = layer.b.buf;
    uint8_t *m = merged.b.buf;
    int64_t *moved = op_self.b.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (up[i] < -1 || up[i] >= i) {
            result = PyLong_FromLong(-1);
            goto done;
        }
    children = calloc((size_t)(n ? n : 1), sizeof *children);
    kept = malloc(sizeof *kept * (size_t)(n ? n : 1));
    if (!children || !kept) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t folded = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        if (in_layer[i] && up[i] >= 0) children[up[i]]++;
    memcpy(moved, own, sizeof *moved * (size_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = up[i];
        int fold = op[i] && p >= 0 && name[i] >= 0 && name[i] == name[p] && children[p] == 1;
        m[i] = (uint8_t)fold;
        kept[i] = fold ? kept[p] : i;
        if (fold) {
            moved[kept[i]] += own[i];
            folded++;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(folded);
done:
    free(children);
    free(kept);
    for (int i = 0; i < 7; i++) release(all[i]);
    return result;
}

/* The positions of the set bits of a bitmap (an Arrow boolean array's values: `length` bits from bit `offset`),
 * ascending, into out (uint64 items): the count of set bits, of which out holds the first len(out) / 8. */
static PyObject *true_positions(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_bits, *o_out;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(args, "OnnO", &o_bits, &offset, &length, &o_out)) return NULL;
    View bits, out;
    bits.held = out.held = 0;
    PyObject *result = NULL;
    if (view(o_bits, &bits, 0, 0, "bits") || view(o_out, &out, 1, 8, "out")) goto done;
    if (offset < 0 || length < 0 || (offset + length + 7) / 8 > bits.b.len) {
        PyErr_SetString(PyExc_ValueError, "true_positions: the bits run past their buffer");
        goto done;
    }
    const uint8_t *b = bits.b.buf;
    uint64_t *o = out.b.buf;
    Py_ssize_t cap = out.b.len / 8, k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < length;) {
        Py_ssize_t bit = offset + i;
        if (!(bit & 7) && i + 8 <= length && !b[bit >> 3]) { i += 8; continue; } /* a byte of false */
        if (b[bit >> 3] >> (bit & 7) & 1) {
            if (k < cap) o[k] = (uint64_t)i;
            k++;
        }
        i++;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(k);
done:
    release(&bits);
    release(&out);
    return result;
}

/* set_bits(positions, valid, n, out) -> int
 * Sets bit p (LSB first) of out for every valid position p (int64; valid: bytes, 1 valid, or None: all valid):
 * the bitmap of an Arrow boolean array of n values (out: at least (n + 7) / 8 bytes). The count of positions
 * outside 0..n - 1 (those set nothing). */
static PyObject *set_bits(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_positions, *o_valid, *o_out;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOnO", &o_positions, &o_valid, &n, &o_out)) return NULL;
    View positions, valid, out;
    positions.held = valid.held = out.held = 0;
    PyObject *result = NULL;
    if (view(o_positions, &positions, 0, 8, "positions") ||
        (o_valid != Py_None && view(o_valid, &valid, 0, 1, "valid")) || view(o_out, &out, 1, 1, "out"))
        goto done;
    Py_ssize_t m = positions.b.len / 8;
    if ((valid.held && valid.b.len != m) || n < 0 || (n + 7) / 8 > out.b.len) {
        PyErr_SetString(PyExc_ValueError, "set_bits: positions and valid of different lengths, or out too short");
        goto done;
    }
    const int64_t *p = positions.b.buf;
    const uint8_t *ok = valid.held ? valid.b.buf : NULL;
    uint8_t *bits = out.b.buf;
    Py_ssize_t outside = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < m; i++) {
        if (ok && !ok[i]) continue;
        if ((uint64_t)p[i] >= (uint64_t)n) { outside++; continue; } /* a negative position is huge as uint64 */
        bits[(uint64_t)p[i] >> 3] |= (uint8_t)(1u << ((uint64_t)p[i] & 7));
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(outside);
done:
    release(&positions);
    release(&valid);
    release(&out);
    return result;
}

/* fill_range(out, start) -> None
 * out (int64 items, written) = start, start + 1, ...: ranges.arange's numbers in one pass. */
static PyObject *fill_range(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_out;
    long long start;
    if (!PyArg_ParseTuple(args, "OL", &o_out, &start)) return NULL;
    View out;
    out.held = 0;
    if (view(o_out, &out, 1, 8, "out")) return NULL;
    int64_t *o = out.b.buf;
    Py_ssize_t n = out.b.len / 8;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) o[i] = (int64_t)start + (int64_t)i;
    Py_END_ALLOW_THREADS
    release(&out);
    Py_RETURN_NONE;
}

/* repeated_ids(values, valid) -> int64 bytes or None
 * The valid int64 values that occur more than once, each once, ascending: two bitmaps over the values' range (seen,
 * seen again), where the range is at most 64 times their count (ids numbered densely: correlation ids); None else
 * (the caller's sort then runs). valid: bytes (1 valid) or None (all valid). */
static PyObject *repeated_ids(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_values, *o_valid;
    if (!PyArg_ParseTuple(args, "OO", &o_values, &o_valid)) return NULL;
    View values, valid;
    values.held = valid.held = 0;
    PyObject *result = NULL;
    uint8_t *seen = NULL, *again = NULL;
    if (view(o_values, &values, 0, 8, "values") || (o_valid != Py_None && view(o_valid, &valid, 0, 1, "valid")))
        goto done;
    Py_ssize_t n = values.b.len / 8;
    if (valid.held && valid.b.len != n) {
        PyErr_SetString(PyExc_ValueError, "repeated_ids: values and valid of different lengths");
        goto done;
    }
    const int64_t *v = values.b.buf;
    const uint8_t *ok = valid.held ? valid.b.buf : NULL;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!ok || ok[i]) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
    if (lo > hi) { /* none valid */
        result = PyBytes_FromStringAndSize(NULL, 0);
        goto done;
    }
    uint64_t range = (uint64_t)hi - (uint64_t)lo + 1;
    if (range == 0 || range / 64 > (uint64_t)n + 1024) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    size_t bytes = (size_t)((range + 7) / 8);
    seen = calloc(bytes, 1);
    again = calloc(bytes, 1);
    if (!seen || !again) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ok && !ok[i]) continue;
        uint64_t at = (uint64_t)v[i] - (uint64_t)lo;
        uint8_t bit = (uint8_t)(1u << (at & 7));
        if (!(seen[at >> 3] & bit)) seen[at >> 3] |= bit;
        else if (!(again[at >> 3] & bit)) { again[at >> 3] |= bit; count++; }
    }
    Py_END_ALLOW_THREADS
    result = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (result) {
        int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
        Py_ssize_t k = 0;
        for (uint64_t at = 0; at < range && k < count; at++)
            if (again[at >> 3] >> (at & 7) & 1) out[k++] = (int64_t)((uint64_t)lo + at);
    }
done:
    free(seen);
    free(again);
    release(&values);
    release(&valid);
    return result;
}

static PyMethodDef methods[] = {
    {"nest_layer", nest_layer, METH_VARARGS,
     "nest_layer(mask, pid_codes, tid_codes, ts, dur, parent, depth, self_ns, keep_self) -> int\n\nThe nesting walk "
     "of derive.nest for the rows where mask is set, in table order, each thread on its own stack (uint8 mask, "
     "int32 codes, int64 times; parent/self_ns int64, depth int32 written in place)."},
    {"step_of", step_of, METH_VARARGS,
     "step_of(ts, starts, ends, numbers, out, found, latest_start) -> None\n\nThe step number of each time "
     "into out (found[i] 0 where none): derive.assign_steps's two rules (int64 buffers, found bytes)."},
    {"index_in", index_in, METH_VARARGS,
     "index_in(keys, key_valid, values, value_valid, out) -> None\n\nArrow's index_in for int64 columns: out[i] "
     "the first j with values[j] == keys[i] (null keys: the first null value), -1 where none."},
    {"nest_sorted", nest_sorted, METH_VARARGS,
     "nest_sorted(rows, threads, ts, dur, parent, depth, self_ns, keep_self) -> int\n\nderive._nest_sorted in C: "
     "the same arguments (int64 buffers; depth int32; keep_self bytes or None), the same result."},
    {"fold_ops", fold_ops, METH_VARARGS,
     "fold_ops(parent, code, is_op, layer, self_ns, merged, op_self) -> int\n\nderive.fold_duplicate_ops in one pass "
     "(int64 parent, -1 none; int32 name codes, -1 none; uint8 masks; merged uint8 and op_self int64 written): the "
     "rows folded, or -1 where a parent does not come before its row."},
    {"true_positions", true_positions, METH_VARARGS,
     "true_positions(bits, offset, length, out) -> int\n\nThe positions of the set bits among `length` bits of "
     "bits from bit `offset`, ascending, into out (uint64 items): the count of set bits (out holds at most its "
     "length)."},
    {"set_bits", set_bits, METH_VARARGS,
     "set_bits(positions, valid, n, out) -> int\n\nSets bit p of out (LSB first) for every valid int64 position p "
     "(valid: bytes, 1 valid, or None); the count of positions outside 0..n - 1 (they set nothing)."},
    {"repeated_ids", repeated_ids, METH_VARARGS,
     "repeated_ids(values, valid) -> int64 bytes or None\n\nThe valid int64 values that occur more than once, each "
     "once, ascending, by two bitmaps over their range; None where the range is over 64 times their count."},
    {"fill_range", fill_range, METH_VARARGS,
     "fill_range(out, start) -> None\n\nout's int64 items = start, start + 1, ... (ranges.arange)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_derive", "derive.py's loops over every event in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__derive(void) { return PyModule_Create(&module); }
