/* opscope.analyses._graph: the dependency graph of analyses/depgraph.py built, and replayed as analyses/replay.py
 * replays it, over buffers without a Python object per node: each host thread's sweep into slices, device work per
 * stream tied to its launch, the inferred cross-stream waits, the waits tied to the work they waited for, Kahn's
 * order and the renumbering; then the replay's one pass in that order. The Python definitions stay beside them and
 * run where this module is not built, with OPSCOPE_NATIVE=0, or where a call declines (returns None or False):
 * times so far apart that a difference could leave int64, more than 2^31 - 1 rows, room for more than (2^31 - 1) / 3
 * nodes (Kahn's order keeps int32 offsets to three dependents a node). */
#include "../_buffers.h"
#include "../_spans.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* node kinds, edges and categories as depgraph.py numbers them (categories: positions in CATEGORIES) */
enum { HOST = 0, WAIT = 1, DEVICE = 2 };
enum { ON_CHAIN = 0, ON_EXTRA = 1, ON_AFTER = 2 };
enum { C_HOST_COMPUTE = 0, C_LAUNCH = 3, C_SYNC_WAIT = 7, C_INPUT = 8, C_GAP = -1 };
/* replay.py's bounds */
enum { B_CHAIN = 0, B_EXTRA = 1, B_ROOT = 2, B_AFTER = 3 };
#define NONE (-1)
#define WIDEST ((uint64_t)1 << 62) /* times within this of each other: every difference and lag fits int64 */

/* The node columns, each a bytearray (handed to Python as they are, cut to the nodes made). F_END is no column: a
 * node's end is start + dur while the graph is built (built_end), and in its place go the ends kept apart. */
enum { F_KIND, F_CATEGORY, F_ROW, F_LANE, F_CHAIN, F_DUR, F_START, F_END, N_FIELDS };
static const Py_ssize_t FIELD_SIZE[N_FIELDS] = {1, 1, 4, 4, 4, 8, 8, 8};

/* The link columns (depgraph.DepGraph's): `link`, per node its row among the linked nodes (those with an extra or an
 * after edge, a lag on one, an unexplained lag or a lag after the node before on its lane) or NONE; then per linked
 * node extra, extra_lag, after, after_lag, unexplained, unexplained_on and chain_lag. A node without a link has NONE,
 * 0, NONE, 0, 0, ON_CHAIN and 0 (a host slice right after the one before it). */
enum { L_LINK, L_EXTRA, L_EXTRA_LAG, L_AFTER, L_AFTER_LAG, L_UNEXPLAINED, L_ON, L_CHAIN_LAG, N_LINKS };
static const Py_ssize_t LINK_SIZE[N_LINKS] = {4, 4, 8, 4, 8, 8, 1, 8};
#define LINK_SPECS                                                                                                   \
    {"link", 4, 0, 0}, {"extra", 4, 0, 0}, {"extra_lag", 8, 0, 0}, {"after", 4, 0, 0}, {"after_lag", 8, 0, 0},      \
        {"unexplained", 8, 0, 0}, {"unexplained_on", 1, 0, 0}, {"chain_lag", 8, 0, 0}

typedef struct {
    const int32_t *link, *extra, *after;
    const int64_t *extra_lag, *after_lag, *unexplained, *chain_lag;
    const int8_t *on;
    Py_ssize_t m;
} Links;

typedef struct {
    int32_t extra, after;
    int64_t extra_lag, after_lag, unexplained, chain_lag;
    int8_t on;
} Link;

/* The link columns from their N_LINKS views (link: n items, the rest m each); 0, or -1 with the error set. */
static int links_of(const View *v, Py_ssize_t n, Links *l, const char *function) {
    l->m = v[L_EXTRA].b.len / LINK_SIZE[L_EXTRA];
    int fits = v[L_LINK].b.len / LINK_SIZE[L_LINK] == n;
    for (int f = L_EXTRA; f < N_LINKS; f++) fits = fits && v[f].b.len / LINK_SIZE[f] == l->m;
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "%s: link columns of different lengths", function);
        return -1;
    }
    l->link = v[L_LINK].b.buf;
    l->extra = v[L_EXTRA].b.buf;
    l->extra_lag = v[L_EXTRA_LAG].b.buf;
    l->after = v[L_AFTER].b.buf;
    l->after_lag = v[L_AFTER_LAG].b.buf;
    l->unexplained = v[L_UNEXPLAINED].b.buf;
    l->on = v[L_ON].b.buf;
    l->chain_lag = v[L_CHAIN_LAG].b.buf;
    return 0;
}

/* A node's link (the defaults where it has none); -1 where its link row is out of range. */
static inline int link_at(const Links *l, Py_ssize_t node, Link *out) {
    int32_t k = l->link[node];
    if (k == NONE) {
        *out = (Link){.extra = NONE, .after = NONE, .on = ON_CHAIN};
        return 0;
    }
    if (k < 0 || k >= l->m) return -1;
    *out = (Link){.extra = l->extra[k], .after = l->after[k], .extra_lag = l->extra_lag[k],
                  .after_lag = l->after_lag[k], .unexplained = l->unexplained[k], .chain_lag = l->chain_lag[k],
                  .on = l->on[k]};
    return 0;
}

/* A node's link fields while the graph is built: only device work, the slices a hand-off starts and the waits get
 * one (a row of their own, made when first written), so the host slices' millions take none. chain_lag is the
 * node's own column (Nodes.chain_lag) until the edges are tied, then its row's (rows_take_chain_lags). */
typedef struct {
    int64_t extra_lag, after_lag, unexplained, chain_lag;
    int32_t extra, after;
    int8_t on;
} Row;
static const Row NO_LINK = {0, 0, 0, 0, NONE, NONE, ON_CHAIN};

typedef struct {
    Py_ssize_t n;
    int8_t *kind, *category;
    int32_t *row, *lane, *chain;
    int64_t *dur, *chain_lag, *start; /* chain_lag: NULL once the rows hold it */
    int32_t *link; /* per node its row in rows, or NONE */
    Row *rows;     /* room for every device node, hand-off and wait (and, once the edges are tied, a few more) */
    Py_ssize_t n_rows;
    int64_t origin, cap;
} Nodes;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
/* start + dur as int64 sums wrap (depgraph.Ends: a node's end unless kept apart) */
static inline int64_t wrapped_end(int64_t start, int64_t dur) { return (int64_t)((uint64_t)start + (uint64_t)dur); }
/* A node's end while the graph is built: no column of ends (the build's peak); the waits' durations, which their
 * ends are not, become 0 only once every edge is tied */
static inline int64_t built_end(const Nodes *g, Py_ssize_t node) { return wrapped_end(g->start[node], g->dur[node]); }

static inline int32_t add_node(Nodes *g, int8_t kind, int8_t category, int32_t row, int32_t lane, int64_t start,
                               int64_t end, int32_t chain) {
    int32_t node = (int32_t)g->n++;
    g->kind[node] = kind;
    g->category[node] = category;
    g->row[node] = row;
    g->lane[node] = lane;
    g->chain[node] = chain;
    g->dur[node] = end - start;
    g->chain_lag[node] = start - (chain != NONE ? built_end(g, chain) : g->origin);
    g->start[node] = start;
    g->link[node] = NONE;
    return node;
}

/* A node's link fields to read (the defaults where it has none) */
static inline const Row *peek(const Nodes *g, Py_ssize_t node) {
    return g->link[node] == NONE ? &NO_LINK : &g->rows[g->link[node]];
}

/* A node's link fields to write (its row made on the first write) */
static inline Row *linked(Nodes *g, Py_ssize_t node) {
    if (g->link[node] == NONE) {
        g->link[node] = (int32_t)g->n_rows;
        g->rows[g->n_rows++] = NO_LINK;
    }
    return &g->rows[g->link[node]];
}

/* Whether a node (numbered as built) has a link: an extra or after edge, a lag on one, an unexplained lag, a lag
 * after the node before it on its lane. */
static inline int has_link(const Nodes *g, Py_ssize_t i) {
    const Row *r = peek(g, i);
    return r->extra != NONE || r->after != NONE || r->extra_lag || r->after_lag || r->unexplained ||
           r->on != ON_CHAIN || (g->chain_lag ? g->chain_lag[i] : r->chain_lag);
}

/* Each linked node's chain lag into its row, and a row for each other node whose chain lag is not 0 (a thread's
 * first slice), so that the column of chain lags can go before Kahn's order and the renumbering (the build's peak).
 * -1: memory. */
static int rows_take_chain_lags(Nodes *g) {
    Py_ssize_t more = 0;
    for (Py_ssize_t i = 0; i < g->n; i++) more += g->link[i] == NONE && g->chain_lag[i];
    if (more) {
        Row *rows = realloc(g->rows, sizeof *rows * (size_t)(g->n_rows + more + 1));
        if (!rows) return -1;
        g->rows = rows;
    }
    for (Py_ssize_t i = 0; i < g->n; i++)
        if (g->link[i] != NONE || g->chain_lag[i]) linked(g, i)->chain_lag = g->chain_lag[i];
    free(g->chain_lag);
    g->chain_lag = NULL;
    return 0;
}
static inline int64_t excess(Nodes *g, int64_t lag) { return lag - g->cap > 0 ? lag - g->cap : 0; }

/* _Builder.tie_after: an inferred edge after other's end, the node's other edges' lags kept (saved) to take it back
 * should the inferred edges close a cycle; the caller sets its lag and the other edges' new lags. */
static inline void tie_after(Nodes *g, int32_t node, int32_t other, int32_t *saved_node, int64_t *saved,
                             Py_ssize_t *n_saved) {
    Row *r = linked(g, node);
    saved_node[*n_saved] = node;
    saved[4 * *n_saved] = g->chain_lag[node];
    saved[4 * *n_saved + 1] = r->extra_lag;
    saved[4 * *n_saved + 2] = r->unexplained;
    saved[4 * *n_saved + 3] = r->on;
    (*n_saved)++;
    r->after = other;
}

/* One host thread's sweep (_ThreadSweep): its events in order, a slice wherever one starts or ends, charged to the
 * innermost open event (none: the thread's gap category). */
typedef struct {
    int32_t row;
    int8_t category;
    int64_t end;
} Open;

typedef struct {
    Nodes *g;
    Open *stack;
    Py_ssize_t depth;
    int64_t now;
    int32_t lane, last;
    int8_t gap;
    int32_t *slice_first, *slice_last; /* per event row: its first and last slice (-1: none) */
} Sweep;

static void emit(Sweep *s, int64_t upto) {
    Open *top = s->depth ? &s->stack[s->depth - 1] : NULL;
    int empty_call = top && (top->category == C_LAUNCH || top->category == C_SYNC_WAIT) && s->slice_last[top->row] < 0;
    if (upto < s->now || (upto == s->now && !empty_call)) return;
    int8_t kind = top && top->category == C_SYNC_WAIT ? WAIT : HOST;
    int32_t node = add_node(s->g, kind, top ? top->category : s->gap, top ? top->row : NONE, s->lane, s->now, upto,
                            s->last);
    s->last = node;
    if (top) {
        if (s->slice_first[top->row] < 0) s->slice_first[top->row] = node;
        s->slice_last[top->row] = node;
    }
    s->now = upto;
}

/* The stable order of `values` (uint64 keys, n of them) by LSD radix sort, 16 bits a pass, passes where every key
 * has the same digit skipped; `order` in, sorted out (ties keep their order in). -1: memory. */
static int radix_order(const uint64_t *key, int32_t *order, Py_ssize_t n) {
    int32_t *tmp = malloc(sizeof *tmp * (size_t)(n + 1));
    Py_ssize_t *count = malloc(sizeof *count * 65537);
    if (!tmp || !count) {
        free(tmp);
        free(count);
        return -1;
    }
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, sizeof *count * 65537);
        for (Py_ssize_t i = 0; i < n; i++) count[((key[order[i]] >> shift) & 0xFFFF) + 1]++;
        int one_digit = 0;
        for (Py_ssize_t d = 1; d <= 65536; d++)
            if (count[d] == n) one_digit = 1;
        if (one_digit) continue;
        for (Py_ssize_t d = 0; d < 65536; d++) count[d + 1] += count[d];
        for (Py_ssize_t i = 0; i < n; i++) tmp[count[(key[order[i]] >> shift) & 0xFFFF]++] = order[i];
        memcpy(order, tmp, sizeof *order * (size_t)n);
    }
    free(tmp);
    free(count);
    return 0;
}

/* the first position in nodes[0..m) whose end is after t (bisect_right on the ends) */
static inline Py_ssize_t after_end(const Nodes *g, const int32_t *nodes, Py_ssize_t m, int64_t t) {
    Py_ssize_t lo = 0, hi = m;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (built_end(g, nodes[mid]) <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct {
    int64_t start;
    int32_t node;
} Root;

/* A node whose end is not start + duration, and that end */
typedef struct {
    int32_t node;
    int64_t end;
} Apart;

static int by_node(const void *a, const void *b) {
    const Apart *x = a, *y = b;
    return (x->node > y->node) - (x->node < y->node);
}

static int by_start(const void *a, const void *b) {
    const Root *x = a, *y = b;
    if (x->start != y->start) return (x->start > y->start) - (x->start < y->start);
    return (x->node > y->node) - (x->node < y->node);
}

/* Kahn's order (_Builder._topological): the nodes without dependencies by start (then number), then first in first
 * out; how many it reached (fewer than n: a cycle). -1: memory. */
static Py_ssize_t kahn(const Nodes *g, int32_t *order) {
    Py_ssize_t n = g->n, reached = -1;
    uint8_t *waiting = calloc((size_t)n + 1, sizeof *waiting); /* at most 3: chain, extra, after */
    int32_t *first = calloc((size_t)n + 2, sizeof *first); /* int32: at most 3 edges a node, n < INT32_MAX / 3 */
    int32_t *next = NULL;
    Root *roots = NULL;
    if (!waiting || !first) goto out;
    for (Py_ssize_t v = 0; v < n; v++) {
        const int32_t deps[3] = {g->chain[v], peek(g, v)->extra, peek(g, v)->after};
        for (int k = 0; k < 3; k++)
            if (deps[k] != NONE) {
                waiting[v]++;
                first[deps[k] + 2]++;
            }
    }
    for (Py_ssize_t v = 0; v < n; v++) first[v + 2] += first[v + 1];
    next = malloc(sizeof *next * (size_t)(first[n + 1] + 1));
    if (!next) goto out;
    for (Py_ssize_t v = 0; v < n; v++) { /* each dependency's dependents in node order, as the lists are appended */
        const int32_t deps[3] = {g->chain[v], peek(g, v)->extra, peek(g, v)->after};
        for (int k = 0; k < 3; k++)
            if (deps[k] != NONE) next[first[deps[k] + 1]++] = (int32_t)v;
    }
    Py_ssize_t n_roots = 0;
    for (Py_ssize_t v = 0; v < n; v++) n_roots += !waiting[v];
    roots = malloc(sizeof *roots * (size_t)(n_roots + 1));
    if (!roots) goto out;
    n_roots = 0;
    for (Py_ssize_t v = 0; v < n; v++)
        if (!waiting[v]) {
            roots[n_roots].start = g->start[v];
            roots[n_roots++].node = (int32_t)v;
        }
    qsort(roots, (size_t)n_roots, sizeof *roots, by_start);
    Py_ssize_t tail = 0;
    for (Py_ssize_t i = 0; i < n_roots; i++) order[tail++] = roots[i].node;
    for (Py_ssize_t head = 0; head < tail; head++) {
        int32_t v = order[head];
        for (int32_t j = first[v]; j < first[v + 1]; j++)
            if (!--waiting[next[j]]) order[tail++] = next[j];
    }
    reached = tail;
out:
    free(waiting);
    free(first);
    free(next);
    free(roots);
    return reached;
}

/* values[i] = values[order[i]] for every i, through `scratch` (n items): a gather, whose reads the processor
 * overlaps, then one copy back (following the permutation's cycles in place reads one value after another: ten
 * times slower on a graph of millions of nodes) */
#define PERMUTE(type, values, order, n, scratch)                                                                     \
    do {                                                                                                             \
        type *to_ = (type *)(scratch);                                                                               \
        for (Py_ssize_t i_ = 0; i_ < (n); i_++) to_[i_] = (values)[(order)[i_]];                                     \
        memcpy((values), to_, sizeof(type) * (size_t)(n));                                                           \
    } while (0)

/* [lo, hi] widened to hold an event of start ts and duration dur (a negative one as 0); 0 when its end overflows */
static inline int widen(int64_t ts, int64_t dur, int64_t *lo, int64_t *hi) {
    int64_t d = dur > 0 ? dur : 0;
    if (d > INT64_MAX - ts) return 0;
    if (ts < *lo) *lo = ts;
    if (ts + d > *hi) *hi = ts + d;
    return 1;
}

/* build(h_row, h_lane, h_cat, lane_gap, d_row, d_lane, d_group, d_cat, d_launch, w_row, w_group, r_wait, r_waited,
 *       x_row, x_src, ts, dur, n_rows, n_lanes, n_groups, origin, cap) -> tuple of bytearrays, or None
 * depgraph._build from its inputs as arrays. Host events (h_*: the SLICE_KINDS rows in row order; h_lane their
 * thread, numbered in order of first appearance, < len(lane_gap); h_cat the category they take whatever encloses
 * them, or HOST_COMPUTE for an op and -1 for an annotation, which become INPUT inside input-pipeline work, else
 * stay or take the thread's gap category lane_gap[lane]). Device work (d_*: in start order, ties by row; d_lane its
 * stream's lane number < n_lanes; d_group its device's number < n_groups; d_launch the row of its launch call, -1
 * none). The waiting calls (w_row, w_group: the device they wait on, -1 any). ts and dur: the events' columns
 * (n_rows each), read at the rows given (no column gathered per call). int64 but h_row, h_lane (int32) and h_cat,
 * lane_gap, d_cat (int8). Returns the node columns in Kahn's order (kind, category, unexplained_on int8; row, lane,
 * chain, extra, after int32; the rest int64) with, in the ends' place, the nodes whose end is not start + duration
 * (int32, ascending) and their ends (int64); None where it declines; RuntimeError for a cycle no inferred edge
 * closes. (A thread's nodes are its lane's, in node order: depgraph.ThreadNodes finds them.) */
static PyObject *build(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"h_row", 4, 0, 0},    {"h_lane", 4, 0, 0},   {"h_cat", 1, 0, 0},
                                    {"lane_gap", 1, 0, 0}, {"d_row", 8, 0, 0},    {"d_lane", 8, 0, 0},
                                    {"d_group", 8, 0, 0},  {"d_cat", 1, 0, 0},    {"d_launch", 8, 0, 0},
                                    {"w_row", 8, 0, 0},    {"w_group", 8, 0, 0},  {"r_wait", 8, 0, 0},
                                    {"r_waited", 8, 0, 0}, {"x_row", 8, 0, 0},    {"x_src", 8, 0, 0},
                                    {"ts", 8, 0, 0},       {"dur", 8, 0, 0}};
    enum { N_VIEWS = 17 };
    View v[N_VIEWS];
    PyObject *result = NULL, *field[N_FIELDS] = {NULL}, *links[N_LINKS] = {NULL}, *apart[2] = {NULL};
    int32_t *slice_first = NULL, *slice_last = NULL, *last_on = NULL, *hord = NULL, *order = NULL, *dev = NULL,
            *by_group = NULL, *saved_node = NULL, *row_of = NULL;
    int64_t *lane_first = NULL, *gfirst = NULL, *saved = NULL;
    Open *stack = NULL;
    Nodes g = {0};
    uint64_t *key = NULL;
    uint8_t *seen = NULL;
    Apart *apart_at = NULL;
    Py_ssize_t n_apart = 0;
    if (views_of_args(args, "build", spec, N_VIEWS, N_VIEWS + 5, v)) goto done;
    long long number[5]; /* n_rows, n_lanes, n_groups, origin, cap */
    for (int i = 0; i < 5; i++) {
        number[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args, N_VIEWS + i));
        if (number[i] == -1 && PyErr_Occurred()) goto done;
    }
    long long n_rows_ll = number[0], n_lanes_ll = number[1], n_groups_ll = number[2], origin_ll = number[3],
              cap_ll = number[4];
    Py_ssize_t nh = v[0].b.len / 4, n_host_lanes = v[3].b.len, nd = v[4].b.len / 8, nw = v[9].b.len / 8,
               nr = v[11].b.len / 8, nx = v[13].b.len / 8;
    if (v[1].b.len / 4 != nh || v[2].b.len != nh || v[5].b.len / 8 != nd || v[6].b.len / 8 != nd ||
        v[7].b.len != nd || v[8].b.len / 8 != nd || v[10].b.len / 8 != nw || v[12].b.len / 8 != nr ||
        v[14].b.len / 8 != nx || v[15].b.len / 8 != number[0] || v[16].b.len / 8 != number[0]) {
        PyErr_SetString(PyExc_ValueError, "build: buffers of different lengths");
        goto done;
    }
    if (n_rows_ll < 0 || n_lanes_ll < n_host_lanes || n_groups_ll < 0 || cap_ll < 0) {
        PyErr_SetString(PyExc_ValueError, "build: negative counts");
        goto done;
    }
    const int32_t *h_row = v[0].b.buf, *h_lane = v[1].b.buf; /* int32: a million host events, 8 MiB each less */
    const int64_t *ts = v[15].b.buf, *dur = v[16].b.buf;
    const int8_t *h_cat = v[2].b.buf, *lane_gap = v[3].b.buf;
    const int64_t *d_row = v[4].b.buf, *d_lane = v[5].b.buf, *d_group = v[6].b.buf, *d_launch = v[8].b.buf,
                  *w_row = v[9].b.buf, *w_group = v[10].b.buf, *r_wait = v[11].b.buf, *r_waited = v[12].b.buf,
                  *x_row = v[13].b.buf, *x_src = v[14].b.buf;
    const int8_t *d_cat = v[7].b.buf;
    Py_ssize_t n_rows = (Py_ssize_t)n_rows_ll, n_lanes = (Py_ssize_t)n_lanes_ll, n_groups = (Py_ssize_t)n_groups_ll;
    Py_ssize_t cap = 2 * nh + nd; /* each host event opens at most two slices (at its start, at its end) */
    if (n_rows >= INT32_MAX || cap >= INT32_MAX / 3 || n_lanes >= INT32_MAX) { /* Kahn's int32 offsets: 3 a node */
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* every input in range, and every time within WIDEST of the others (the origin included) */
    int64_t lo = origin_ll, hi = origin_ll;
    int fits = 1;
    for (Py_ssize_t i = 0; i < nh && fits; i++) {
        if (h_row[i] < 0 || h_row[i] >= n_rows || h_lane[i] < 0 || h_lane[i] >= n_host_lanes) {
            PyErr_SetString(PyExc_ValueError, "build: a host row or lane out of range");
            goto done;
        }
        fits = widen(ts[h_row[i]], dur[h_row[i]], &lo, &hi);
    }
    for (Py_ssize_t i = 0; i < nd && fits; i++) {
        if (d_row[i] < 0 || d_row[i] >= n_rows || d_lane[i] < 0 || d_lane[i] >= n_lanes || d_group[i] < 0 ||
            d_group[i] >= n_groups || d_launch[i] < -1 || d_launch[i] >= n_rows) {
            PyErr_SetString(PyExc_ValueError, "build: a device row, lane, device or launch out of range");
            goto done;
        }
        fits = widen(ts[d_row[i]], dur[d_row[i]], &lo, &hi);
    }
    for (Py_ssize_t i = 0; i < nw; i++)
        if (w_row[i] < 0 || w_row[i] >= n_rows || w_group[i] < -1 || w_group[i] >= n_groups) {
            PyErr_SetString(PyExc_ValueError, "build: a waiting row or its device out of range");
            goto done;
        }
    for (Py_ssize_t i = 0; i < nr; i++)
        if (r_wait[i] < 0 || r_wait[i] >= nd || r_waited[i] < 0 || r_waited[i] >= nd) {
            PyErr_SetString(PyExc_ValueError, "build: a recorded wait's work out of range");
            goto done;
        }
    for (Py_ssize_t i = 0; i < nx; i++)
        if (x_row[i] < 0 || x_row[i] >= n_rows || x_src[i] < 0 || x_src[i] >= n_rows) {
            PyErr_SetString(PyExc_ValueError, "build: a hand-off's row out of range");
            goto done;
        }
    if (!fits || (uint64_t)hi - (uint64_t)lo > WIDEST) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (int f = 0; f < F_END; f++)
        if (!(field[f] = PyByteArray_FromStringAndSize(NULL, FIELD_SIZE[f] * (cap + 1)))) goto done;
    g.origin = origin_ll;
    g.cap = cap_ll;
    g.kind = (int8_t *)PyByteArray_AS_STRING(field[F_KIND]);
    g.category = (int8_t *)PyByteArray_AS_STRING(field[F_CATEGORY]);
    g.row = (int32_t *)PyByteArray_AS_STRING(field[F_ROW]);
    g.lane = (int32_t *)PyByteArray_AS_STRING(field[F_LANE]);
    g.chain = (int32_t *)PyByteArray_AS_STRING(field[F_CHAIN]);
    g.dur = (int64_t *)PyByteArray_AS_STRING(field[F_DUR]);
    g.start = (int64_t *)PyByteArray_AS_STRING(field[F_START]);
    g.chain_lag = malloc(sizeof *g.chain_lag * (size_t)(cap + 1)); /* handed back per link row */
    g.link = malloc(sizeof *g.link * (size_t)(cap + 1));
    g.rows = malloc(sizeof *g.rows * (size_t)(nd + nx + nw + 1));
    if (!g.chain_lag || !g.link || !g.rows) {
        PyErr_NoMemory();
        goto done;
    }

    int state = 0; /* 0 fine, 1 out of memory, 2 a cycle, 3 a link column not made (its error set) */
    Py_ssize_t n_host = 0, n_saved = 0;
    Py_BEGIN_ALLOW_THREADS
    slice_first = malloc(sizeof *slice_first * (size_t)(n_rows + 1));
    slice_last = malloc(sizeof *slice_last * (size_t)(n_rows + 1));
    lane_first = calloc((size_t)n_host_lanes + 2, sizeof *lane_first);
    hord = malloc(sizeof *hord * (size_t)(nh + 1));
    stack = malloc(sizeof *stack * (size_t)(nh + 1));
    last_on = malloc(sizeof *last_on * (size_t)(n_lanes + 1));
    if (!slice_first || !slice_last || !lane_first || !hord || !stack || !last_on) {
        state = 1;
        goto computed;
    }
    for (Py_ssize_t r = 0; r < n_rows; r++) slice_first[r] = slice_last[r] = -1;
    /* --- host slices: the events of each thread (a counting sort keeps their order), thread by thread */
    for (Py_ssize_t i = 0; i < nh; i++) lane_first[h_lane[i] + 2]++;
    for (Py_ssize_t k = 0; k < n_host_lanes; k++) lane_first[k + 2] += lane_first[k + 1];
    for (Py_ssize_t i = 0; i < nh; i++) hord[lane_first[h_lane[i] + 1]++] = (int32_t)i;
    /* now lane_first[k] is thread k's first event in hord; it becomes its first node below */
    Sweep s = {.g = &g, .stack = stack, .slice_first = slice_first, .slice_last = slice_last};
    for (Py_ssize_t k = 0; k < n_host_lanes; k++) {
        Py_ssize_t from = lane_first[k], to = lane_first[k + 1];
        lane_first[k] = g.n;
        s.depth = 0;
        s.lane = (int32_t)k;
        s.last = NONE;
        s.gap = lane_gap[k];
        for (Py_ssize_t j = from; j < to; j++) {
            Py_ssize_t i = hord[j];
            int64_t start = ts[h_row[i]], end = start + (dur[h_row[i]] > 0 ? dur[h_row[i]] : 0);
            if (j == from) s.now = start;
            while (s.depth && s.stack[s.depth - 1].end <= start) {
                emit(&s, s.stack[s.depth - 1].end);
                s.depth--;
            }
            emit(&s, start);
            int8_t category = h_cat[i];
            if (s.depth) {
                end = min64(end, s.stack[s.depth - 1].end); /* a child past its parent's end: its part inside */
                if ((category == C_HOST_COMPUTE || category == C_GAP) && s.stack[s.depth - 1].category == C_INPUT)
                    category = C_INPUT;
            }
            if (category == C_GAP) category = s.gap;
            s.stack[s.depth].row = h_row[i];
            s.stack[s.depth].end = end;
            s.stack[s.depth++].category = category;
        }
        while (s.depth) {
            emit(&s, s.stack[s.depth - 1].end);
            s.depth--;
        }
    }
    lane_first[n_host_lanes] = n_host = g.n;
    free(hord);
    hord = NULL;
    free(stack);
    stack = NULL;
    /* --- device work: after the work before it on its stream and after its launch (_tie_to_launch) */
    for (Py_ssize_t k = 0; k < n_lanes; k++) last_on[k] = NONE;
    for (Py_ssize_t i = 0; i < nd; i++) {
        int64_t start = ts[d_row[i]], end = start + (dur[d_row[i]] > 0 ? dur[d_row[i]] : 0);
        int32_t prev = last_on[d_lane[i]];
        int32_t node = add_node(&g, DEVICE, d_cat[i], (int32_t)d_row[i], (int32_t)d_lane[i], start, end, prev);
        last_on[d_lane[i]] = node;
        int32_t anchor = NONE;
        if (d_launch[i] >= 0 && slice_last[d_launch[i]] >= 0) {
            int32_t first = slice_first[d_launch[i]], last = slice_last[d_launch[i]];
            anchor = g.kind[last] == WAIT ? g.chain[first] : last;
        }
        Row *r = linked(&g, node);
        if (anchor == NONE) {
            r->unexplained = excess(&g, g.chain_lag[node]);
            continue;
        }
        int64_t launch_lag = start - built_end(&g, anchor);
        r->extra = anchor;
        if (prev == NONE || built_end(&g, anchor) >= built_end(&g, prev)) { /* the launch bound its start */
            r->extra_lag = launch_lag;
            g.chain_lag[node] = prev != NONE ? min64(g.chain_lag[node], g.cap) : 0;
            r->unexplained = excess(&g, launch_lag);
            r->on = ON_EXTRA;
        } else { /* the queue bound it */
            r->extra_lag = min64(launch_lag, g.cap);
            r->unexplained = excess(&g, g.chain_lag[node]);
        }
    }
    /* the device nodes by end (then number): all of them, and per device (a stable counting sort by device) */
    key = malloc(sizeof *key * (size_t)(g.n + 1));
    order = malloc(sizeof *order * (size_t)(g.n + 1));
    dev = malloc(sizeof *dev * (size_t)(nd + 1));
    by_group = malloc(sizeof *by_group * (size_t)(nd + 1));
    gfirst = calloc((size_t)n_groups + 2, sizeof *gfirst);
    saved = malloc(sizeof *saved * 4 * (size_t)(nd + nx + 1));
    saved_node = malloc(sizeof *saved_node * (size_t)(nd + nx + 1));
    if (!key || !order || !dev || !by_group || !gfirst || !saved || !saved_node) {
        state = 1;
        goto computed;
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        dev[i] = (int32_t)(n_host + i);
        key[n_host + i] = (uint64_t)built_end(&g, n_host + i) - (uint64_t)lo;
    }
    if (radix_order(key, dev, nd)) {
        state = 1;
        goto computed;
    }
    for (Py_ssize_t i = 0; i < nd; i++) gfirst[d_group[i] + 2]++;
    for (Py_ssize_t k = 0; k < n_groups; k++) gfirst[k + 2] += gfirst[k + 1];
    for (Py_ssize_t i = 0; i < nd; i++) by_group[gfirst[d_group[dev[i] - n_host] + 1]++] = dev[i];
    /* --- _tie_handoffs: a host thread's first slice after the event on another thread that handed it work */
    for (Py_ssize_t k = 0; k < nx; k++) {
        int32_t node = slice_first[x_row[k]], other = slice_last[x_src[k]];
        if (node < 0 || other < 0 || g.chain[node] != NONE || peek(&g, node)->after != NONE) continue;
        tie_after(&g, node, other, saved_node, saved, &n_saved);
        Row *r = linked(&g, node);
        r->after_lag = g.start[node] - built_end(&g, other);
        g.chain_lag[node] = 0;
        r->unexplained = excess(&g, r->after_lag);
        r->on = ON_AFTER;
    }
    /* --- _tie_recorded_waits: the waits the trace records and those the wait calls imply (analyses.stream_waits) */
    for (Py_ssize_t k = 0; k < nr; k++) {
        int32_t node = (int32_t)(n_host + r_wait[k]), other = (int32_t)(n_host + r_waited[k]);
        const Row *p = peek(&g, node);
        if (p->after != NONE || g.lane[node] == g.lane[other]) continue;
        int64_t s = g.start[node], e = built_end(&g, other);
        int64_t bound = s - (p->on == ON_EXTRA ? p->extra_lag : g.chain_lag[node]);
        int binding = e >= bound;
        if (e > s) continue;
        tie_after(&g, node, other, saved_node, saved, &n_saved);
        Row *r = linked(&g, node);
        if (binding) {
            r->after_lag = s - e;
            g.chain_lag[node] = min64(g.chain_lag[node], g.cap);
            r->extra_lag = min64(r->extra_lag, g.cap);
            r->unexplained = excess(&g, s - e);
            r->on = ON_AFTER;
        } else {
            r->after_lag = 0;
        }
    }
    /* --- _tie_across_streams: work that started long after its launch and its stream's work, just after work on
     * another stream of its device ended, waited for that work */
    for (Py_ssize_t i = 0; i < nd; i++) {
        int32_t node = (int32_t)(n_host + i);
        if (!peek(&g, node)->unexplained || peek(&g, node)->after != NONE) continue;
        const int32_t *mine = by_group + gfirst[d_group[i]];
        int64_t start = g.start[node];
        Py_ssize_t k = after_end(&g, mine, gfirst[d_group[i] + 1] - gfirst[d_group[i]], start) - 1;
        while (k >= 0 && built_end(&g, mine[k]) >= start - g.cap) {
            int32_t other = mine[k];
            if (g.lane[other] != g.lane[node] && g.start[other] < start) {
                tie_after(&g, node, other, saved_node, saved, &n_saved);
                Row *r = linked(&g, node);
                r->after_lag = start - built_end(&g, other);
                g.chain_lag[node] = min64(g.chain_lag[node], g.cap);
                r->extra_lag = min64(r->extra_lag, g.cap);
                r->unexplained = 0;
                break;
            }
            k--;
        }
    }
    /* --- _tie_waits: each waiting call to the work that ended last before it returned among the work launched
     * before it began; its own time becomes 0 once every wait is tied (until then every end is start + dur), its
     * end kept apart */
    apart_at = malloc(sizeof *apart_at * (size_t)(nw + 1));
    if (!apart_at) {
        state = 1;
        goto computed;
    }
    for (Py_ssize_t w = 0; w < nw && nd; w++) {
        int32_t node = slice_last[w_row[w]];
        if (node < 0) continue;
        const int32_t *candidates = w_group[w] >= 0 ? by_group + gfirst[w_group[w]] : dev;
        Py_ssize_t m = w_group[w] >= 0 ? gfirst[w_group[w] + 1] - gfirst[w_group[w]] : nd;
        int64_t call_start = g.start[node], call_end = built_end(&g, node);
        int32_t waited = NONE;
        for (Py_ssize_t k = after_end(&g, candidates, m, call_end) - 1; k >= 0; k--) {
            int32_t work = candidates[k], launch = peek(&g, work)->extra;
            if (launch == NONE || g.start[launch] <= call_start || built_end(&g, launch) <= call_start) {
                waited = work;
                break;
            }
        }
        if (waited == NONE || built_end(&g, waited) <= call_start) continue; /* nothing to wait for: its own time */
        Row *r = linked(&g, node);
        r->extra = waited;
        r->extra_lag = call_end - built_end(&g, waited);
        if (g.dur[node]) apart_at[n_apart++] = (Apart){node, call_end};
        r->unexplained = excess(&g, r->extra_lag);
        r->on = ON_EXTRA;
    }
    for (Py_ssize_t k = 0; k < n_apart; k++) g.dur[apart_at[k].node] = 0;
    /* the chain lags into the rows: Kahn's order and the renumbering read no column of them (the build's peak) */
    if (rows_take_chain_lags(&g)) {
        state = 1;
        goto computed;
    }
    free(key);
    key = NULL;
    free(dev);
    dev = NULL;
    free(by_group);
    by_group = NULL;
    free(slice_first); /* the events' slices: no edge left to tie (Kahn's order needs the room) */
    slice_first = NULL;
    free(slice_last);
    slice_last = NULL;
    /* --- Kahn's order; inferred edges of the nodes a cycle leaves out dropped (their lags as before) */
    Py_ssize_t reached = kahn(&g, order);
    if (reached >= 0 && reached < g.n) {
        seen = calloc((size_t)g.n + 1, 1);
        if (!seen) {
            state = 1;
            goto computed;
        }
        for (Py_ssize_t i = 0; i < reached; i++) seen[order[i]] = 1;
        for (Py_ssize_t k = 0; k < n_saved; k++) {
            int32_t node = saved_node[k];
            if (seen[node]) continue;
            Row *r = linked(&g, node);
            r->after = NONE;
            r->after_lag = 0;
            r->chain_lag = saved[4 * k];
            r->extra_lag = saved[4 * k + 1];
            r->unexplained = saved[4 * k + 2];
            r->on = (int8_t)saved[4 * k + 3];
        }
        reached = kahn(&g, order);
        if (reached >= 0 && reached < g.n) state = 2;
    }
    free(saved);
    saved = NULL;
    free(saved_node);
    saved_node = NULL;
    if (reached < 0) state = 1;
    if (state) goto computed;
    /* --- renumbered. The link rows in the new order first: g.link is then read no more, and its room takes
     * new[node], each node's place in the order (16 MiB less on the 1 GB trace, where this step was the peak) */
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < g.n; i++) m += has_link(&g, i);
    Py_BLOCK_THREADS
    for (int f = 0; f < N_LINKS && state == 0; f++)
        if (!(links[f] = PyByteArray_FromStringAndSize(NULL, LINK_SIZE[f] * (f == L_LINK ? g.n : m)))) state = 3;
    if (state == 0 && (!(apart[0] = PyByteArray_FromStringAndSize(NULL, sizeof(int32_t) * n_apart)) ||
                       !(apart[1] = PyByteArray_FromStringAndSize(NULL, sizeof(int64_t) * n_apart))))
        state = 3;
    Py_UNBLOCK_THREADS
    if (state) goto computed;
    row_of = malloc(sizeof *row_of * (size_t)(m + 1)); /* each link row's row in g.rows */
    if (!row_of) {
        state = 1;
        goto computed;
    }
    int32_t *link = (int32_t *)PyByteArray_AS_STRING(links[L_LINK]);
    for (Py_ssize_t i = 0, k = 0; i < g.n; i++) {
        int32_t old = order[i];
        if (!has_link(&g, old)) {
            link[i] = NONE;
            continue;
        }
        link[i] = (int32_t)k;
        row_of[k++] = g.link[old];
    }
    int32_t *new = g.link;
    g.link = NULL;
    for (Py_ssize_t i = 0; i < g.n; i++) new[order[i]] = (int32_t)i;
    /* the link columns and the ends kept apart, in the new order */
    int32_t *l_extra = (int32_t *)PyByteArray_AS_STRING(links[L_EXTRA]),
            *l_after = (int32_t *)PyByteArray_AS_STRING(links[L_AFTER]);
    int64_t *l_extra_lag = (int64_t *)PyByteArray_AS_STRING(links[L_EXTRA_LAG]),
            *l_after_lag = (int64_t *)PyByteArray_AS_STRING(links[L_AFTER_LAG]),
            *l_unexplained = (int64_t *)PyByteArray_AS_STRING(links[L_UNEXPLAINED]);
    int8_t *l_on = (int8_t *)PyByteArray_AS_STRING(links[L_ON]);
    int64_t *l_chain_lag = (int64_t *)PyByteArray_AS_STRING(links[L_CHAIN_LAG]);
    for (Py_ssize_t k = 0; k < m; k++) {
        const Row *r = &g.rows[row_of[k]];
        l_extra[k] = r->extra != NONE ? new[r->extra] : NONE;
        l_after[k] = r->after != NONE ? new[r->after] : NONE;
        l_extra_lag[k] = r->extra_lag;
        l_after_lag[k] = r->after_lag;
        l_unexplained[k] = r->unexplained;
        l_chain_lag[k] = r->chain_lag;
        l_on[k] = r->on;
    }
    free(row_of);
    row_of = NULL;
    for (Py_ssize_t k = 0; k < n_apart; k++) apart_at[k].node = new[apart_at[k].node];
    qsort(apart_at, (size_t)n_apart, sizeof *apart_at, by_node);
    int32_t *apart_node = (int32_t *)PyByteArray_AS_STRING(apart[0]);
    int64_t *apart_end = (int64_t *)PyByteArray_AS_STRING(apart[1]);
    for (Py_ssize_t k = 0; k < n_apart; k++) {
        apart_node[k] = apart_at[k].node;
        apart_end[k] = apart_at[k].end;
    }
    free(g.rows);
    g.rows = NULL;
    for (Py_ssize_t i = 0; i < g.n; i++)
        if (g.chain[i] != NONE) g.chain[i] = new[g.chain[i]];
    free(new);
    /* what only the build reads goes before the permutation's scratch is taken */
    int64_t *scratch = malloc(sizeof *scratch * (size_t)(g.n + 1));
    if (!scratch) {
        state = 1;
        goto computed;
    }
    int8_t *bytes[2] = {g.kind, g.category};
    for (int k = 0; k < 2; k++) PERMUTE(int8_t, bytes[k], order, g.n, scratch);
    int32_t *ints[3] = {g.row, g.lane, g.chain};
    for (int k = 0; k < 3; k++) PERMUTE(int32_t, ints[k], order, g.n, scratch);
    int64_t *longs[2] = {g.dur, g.start};
    for (int k = 0; k < 2; k++) PERMUTE(int64_t, longs[k], order, g.n, scratch);
    free(scratch);
computed:
    Py_END_ALLOW_THREADS
    if (state == 1) {
        PyErr_NoMemory();
        goto done;
    }
    if (state == 2) {
        PyErr_SetString(PyExc_RuntimeError, "the dependency graph has a cycle that no inferred edge closes");
        goto done;
    }
    if (state == 3) goto done; /* a link column's bytearray not made: its error is set */
    for (int f = 0; f < N_FIELDS; f++)
        if (f != F_END && PyByteArray_Resize(field[f], FIELD_SIZE[f] * g.n) < 0) goto done;
    /* F_END is the last field: in its place the ends kept apart (their nodes, their ends) */
    result = PyTuple_New(N_FIELDS + 1 + N_LINKS);
    if (!result) goto done;
    for (int f = 0; f < F_END; f++) {
        PyTuple_SET_ITEM(result, f, field[f]);
        field[f] = NULL;
    }
    for (int k = 0; k < 2; k++) {
        PyTuple_SET_ITEM(result, F_END + k, apart[k]);
        apart[k] = NULL;
    }
    for (int f = 0; f < N_LINKS; f++) {
        PyTuple_SET_ITEM(result, N_FIELDS + 1 + f, links[f]);
        links[f] = NULL;
    }
done:
    for (int f = 0; f < N_FIELDS; f++) Py_XDECREF(field[f]);
    for (int f = 0; f < N_LINKS; f++) Py_XDECREF(links[f]);
    for (int k = 0; k < 2; k++) Py_XDECREF(apart[k]);
    free(slice_first);
    free(slice_last);
    free(lane_first);
    free(hord);
    free(stack);
    free(last_on);
    free(key);
    free(order);
    free(dev);
    free(by_group);
    free(gfirst);
    free(saved);
    free(saved_node);
    free(g.chain_lag);
    free(g.link);
    free(g.rows);
    free(seen);
    free(apart_at);
    free(row_of);
    release_views(v, N_VIEWS);
    return result;
}

/* a + b into *out; 0 where it fits int64 */
static inline int add_over(int64_t a, int64_t b, int64_t *out) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 1;
    *out = a + b;
    return 0;
}

/* round(x) as Python rounds a float to an int (half to even), 0 where it fits int64 (not NaN, not infinite) */
static inline int rounded(double x, int64_t *out) {
    if (!(x > -9.2e18 && x < 9.2e18)) return 1;
    double r = nearbyint(x); /* the default rounding: to nearest, ties to even */
    *out = (int64_t)r;
    return 0;
}

/* replay(kind, dur, chain, link, extra, extra_lag, after, after_lag, unexplained, unexplained_on, chain_lag, factor,
 *        lag_factor, start, end, bound) -> bool
 * replay.replay in one pass in the nodes' order: starts and ends (int64, written; start None: no starts asked for)
 * and what bound each start (int8, written). kind int8, dur int64, chain int32, then the link columns (LINK_SPECS);
 * factor and lag_factor float64 per node or None (1). False (nothing to trust in the outputs: the caller's
 * definition runs) where a dependency is not an earlier node, a link row is out of range, a duration times its factor
 * is not a number or leaves int64, or a time leaves int64. */
static PyObject *replay(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"kind", 1, 0, 0},       {"dur", 8, 0, 0},   {"chain", 4, 0, 0},
                                    LINK_SPECS,               {"factor", 8, 0, 1}, {"lag_factor", 8, 0, 1},
                                    {"start", 8, 1, 1},       {"end", 8, 1, 0},   {"bound", 1, 1, 0}};
    enum { N_VIEWS = 3 + N_LINKS + 5, V_FACTOR = 3 + N_LINKS };
    View v[N_VIEWS];
    PyObject *result = NULL;
    Links links;
    if (views_of_args(args, "replay", spec, N_VIEWS, N_VIEWS, v)) goto done;
    Py_ssize_t n = v[0].b.len;
    static const Py_ssize_t size[3] = {1, 8, 4};
    for (int i = 1; i < N_VIEWS; i++)
        if (v[i].held && (i < 3 || i >= V_FACTOR) && v[i].b.len / (i < 3 ? size[i] : i == N_VIEWS - 1 ? 1 : 8) != n) {
            PyErr_SetString(PyExc_ValueError, "replay: buffers of different lengths");
            goto done;
        }
    if (links_of(v + 3, n, &links, "replay")) goto done;
    const int8_t *kind = v[0].b.buf;
    const int64_t *dur = v[1].b.buf;
    const int32_t *chain = v[2].b.buf;
    const double *factor = v[V_FACTOR].held ? v[V_FACTOR].b.buf : NULL,
                 *lag_factor = v[V_FACTOR + 1].held ? v[V_FACTOR + 1].b.buf : NULL;
    int64_t *start = v[V_FACTOR + 2].held ? v[V_FACTOR + 2].b.buf : NULL, *end = v[V_FACTOR + 3].b.buf;
    int8_t *bound = v[V_FACTOR + 4].b.buf;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t node = 0; node < n && !failed; node++) {
        Link l;
        if (link_at(&links, node, &l)) {
            failed = 1;
            break;
        }
        int32_t c = chain[node], e = l.extra, a = l.after;
        if (c < NONE || c >= node || e < NONE || e >= node || a < NONE || a >= node) {
            failed = 1;
            break;
        }
        int64_t cut_chain = 0, cut_extra = 0, cut_after = 0, cut = 0, at, own, via;
        if (lag_factor && l.unexplained) {
            if (rounded((double)l.unexplained * (1.0 - lag_factor[node]), &cut)) {
                failed = 1;
                break;
            }
            if (l.on == ON_CHAIN) cut_chain = cut;
            else if (l.on == ON_EXTRA) cut_extra = cut;
            else cut_after = cut;
        }
        double f = factor ? factor[node] : 1.0;
        if (add_over(c != NONE ? end[c] : 0, l.chain_lag, &at) || add_over(at, -cut_chain, &at) ||
            cut_chain == INT64_MIN || rounded((double)dur[node] * f, &own)) {
            failed = 1;
            break;
        }
        int8_t how = c != NONE ? B_CHAIN : B_ROOT;
        if (kind[node] == WAIT) {
            /* a wait ends when its work has ended (plus its lag), or after its own part when that is later;
             * factor 0 removes the wait */
            if (start) start[node] = at;
            bound[node] = how;
            int64_t finish;
            if (add_over(at, own, &finish)) {
                failed = 1;
                break;
            }
            if (e != NONE && f > 0) {
                int64_t waited;
                if (add_over(end[e], l.extra_lag, &waited) || cut_extra == INT64_MIN ||
                    add_over(waited, -cut_extra, &waited)) {
                    failed = 1;
                    break;
                }
                if (waited > finish) {
                    finish = waited;
                    bound[node] = B_EXTRA;
                }
            }
            end[node] = finish;
            continue;
        }
        if (e != NONE) {
            if (add_over(end[e], l.extra_lag, &via) || cut_extra == INT64_MIN || add_over(via, -cut_extra, &via)) {
                failed = 1;
                break;
            }
            /* a tie goes to the edge that bound the start as measured */
            if (via > at || (via == at && (how == B_ROOT || l.on == ON_EXTRA))) {
                at = via;
                how = B_EXTRA;
            }
        }
        if (a != NONE) {
            if (add_over(end[a], l.after_lag, &via) || cut_after == INT64_MIN || add_over(via, -cut_after, &via)) {
                failed = 1;
                break;
            }
            if (via >= at) {
                at = via;
                how = B_AFTER;
            }
        }
        if (start) start[node] = at;
        bound[node] = how;
        if (add_over(at, own, &end[node])) failed = 1;
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(!failed);
done:
    release_views(v, N_VIEWS);
    return result;
}

/* The explained part of node's binding lag (bound by b; a wait's lies after its work ended, device work's before it
 * started): its span in [*lo, *hi), and its length returned (<= 0: none), as whatif._idle_candidates computes it. */
static inline int64_t explained_lag(Py_ssize_t node, int8_t b, int wait, const Link *l, const int64_t *start,
                                    int64_t node_end, int64_t *lo, int64_t *hi) {
    int64_t value = b == B_EXTRA ? l->extra_lag : b == B_AFTER ? l->after_lag : l->chain_lag;
    int8_t edge = b == B_EXTRA ? ON_EXTRA : b == B_AFTER ? ON_AFTER : ON_CHAIN;
    int64_t unseen = l->on == edge ? l->unexplained : 0;
    int64_t positive = value > 0 ? value : 0;
    int64_t explained = (int64_t)((uint64_t)value - (uint64_t)(unseen < positive ? unseen : positive));
    *lo = (int64_t)((uint64_t)(wait ? node_end : start[node]) - (uint64_t)value);
    *hi = (int64_t)((uint64_t)*lo + (uint64_t)explained);
    return explained;
}

/* A graph's ends (depgraph.Ends): start + dur, but for the nodes listed apart (ascending) with their own; read in
 * node order, the list's place kept from one node to the next. */
typedef struct {
    const int32_t *nodes;
    const int64_t *values;
    Py_ssize_t n, at;
} EndsApart;

/* Whether the nodes kept apart are ascending and within a graph of n nodes (end_of reads them in order). */
static inline int ends_apart_ordered(const EndsApart *x, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < x->n; i++)
        if (x->nodes[i] < 0 || x->nodes[i] >= n || (i && x->nodes[i] <= x->nodes[i - 1])) return 0;
    return 1;
}

static inline int64_t end_of(EndsApart *x, Py_ssize_t node, const int64_t *start, const int64_t *dur) {
    while (x->at < x->n && x->nodes[x->at] < node) x->at++;
    if (x->at < x->n && x->nodes[x->at] == node) return x->values[x->at];
    return (int64_t)((uint64_t)start[node] + (uint64_t)dur[node]);
}

/* idle_candidates(kind, dur, start, bound, link, extra, extra_lag, after, after_lag, unexplained, unexplained_on,
 *                 chain_lag, end_nodes, end_values, span_start, span_end)
 *   -> (host, lagged, lag_lo, lag_hi, lag_wait, lag_bound) or None
 * whatif._idle_candidates in one pass over the nodes: the host's own time (a host slice, or a wait whose call did not
 * wait, lasting more than 0 ns) and the explained part of each binding lag (device work's before it started, a
 * wait's after the work it waited for ended), each kept where the spans (disjoint, in time order) cover more than
 * 0 ns of it. A node ends at start + dur but for end_nodes (int32, ascending), which end at end_values. Bytes of
 * int64 but host (int32: the nodes only, their spans read again from the graph by covered_nodes), lag_wait (uint8: a
 * wait's lag) and lag_bound (int8: the replay's bound). None where the spans are not disjoint and in order, end_nodes
 * not ascending, or a link row is out of range (the definition then runs). */
static PyObject *idle_candidates(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"kind", 1, 0, 0},       {"dur", 8, 0, 0},       {"start", 8, 0, 0},
                                    {"bound", 1, 0, 0},      LINK_SPECS,             {"end_nodes", 4, 0, 0},
                                    {"end_values", 8, 0, 0}, {"span_start", 8, 0, 0}, {"span_end", 8, 0, 0}};
    enum { V_ENDS = 4 + N_LINKS, V_SPANS = V_ENDS + 2, N_VIEWS = V_SPANS + 2 };
    View v[N_VIEWS];
    PyObject *result = NULL, *out[6] = {NULL};
    uint8_t *what = NULL;
    int64_t *through = NULL;
    Links links;
    if (views_of_args(args, "idle_candidates", spec, N_VIEWS, N_VIEWS, v)) goto done;
    Py_ssize_t n = v[0].b.len, m = v[V_SPANS].b.len / 8;
    static const Py_ssize_t size[4] = {1, 8, 8, 1};
    for (int i = 1; i < 4; i++)
        if (v[i].b.len / size[i] != n) {
            PyErr_SetString(PyExc_ValueError, "idle_candidates: node columns of different lengths");
            goto done;
        }
    if (links_of(v + 4, n, &links, "idle_candidates")) goto done;
    if (v[V_SPANS + 1].b.len / 8 != m || v[V_ENDS + 1].b.len / 8 != v[V_ENDS].b.len / 4) {
        PyErr_SetString(PyExc_ValueError, "idle_candidates: starts and ends of different lengths");
        goto done;
    }
    const int8_t *kind = v[0].b.buf, *bound = v[3].b.buf;
    const int64_t *dur = v[1].b.buf, *start = v[2].b.buf, *ss = v[V_SPANS].b.buf, *se = v[V_SPANS + 1].b.buf;
    EndsApart ends = {v[V_ENDS].b.buf, v[V_ENDS + 1].b.buf, v[V_ENDS].b.len / 4, 0};
    what = malloc((size_t)(n ? n : 1));
    through = malloc((size_t)(m ? m : 1) * sizeof(int64_t));
    if (!what || !through) {
        PyErr_NoMemory();
        goto done;
    }
    int ordered, linked = 1;
    Py_ssize_t n_host = 0, n_lag = 0;
    Py_BEGIN_ALLOW_THREADS
    ordered = spans_through(ss, se, m, through) && ends_apart_ordered(&ends, n);
    Py_ssize_t hint_host = 0, hint_lag = 0;
    for (Py_ssize_t node = 0; node < n && ordered && linked; node++) {
        what[node] = 0;
        int8_t k = kind[node], b = bound[node];
        Link l;
        if (link_at(&links, node, &l)) {
            linked = 0;
            break;
        }
        int64_t node_end = end_of(&ends, node, start, dur);
        if (dur[node] > 0 && (k == HOST || (k == WAIT && l.extra == NONE))) {
            if (covered_by(ss, se, through, m, start[node], node_end, &hint_host) > 0) {
                what[node] = 1;
                n_host++;
            }
        }
        int wait = k == WAIT;
        if (!((k == DEVICE && (b == B_CHAIN || b == B_EXTRA || b == B_AFTER)) || (wait && b == B_EXTRA))) continue;
        int64_t lo, hi;
        if (explained_lag(node, b, wait, &l, start, node_end, &lo, &hi) <= 0) continue;
        if (covered_by(ss, se, through, m, lo, hi, &hint_lag) > 0) {
            what[node] |= 2;
            n_lag++;
        }
    }
    Py_END_ALLOW_THREADS
    if (!ordered || !linked) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    static const Py_ssize_t width[6] = {4, 8, 8, 8, 1, 1};
    for (int i = 0; i < 6; i++) {
        out[i] = PyBytes_FromStringAndSize(NULL, (i < 1 ? n_host : n_lag) * width[i]);
        if (!out[i]) goto done;
    }
    int32_t *host = (int32_t *)PyBytes_AS_STRING(out[0]);
    int64_t *lagged = (int64_t *)PyBytes_AS_STRING(out[1]), *lag_lo = (int64_t *)PyBytes_AS_STRING(out[2]),
            *lag_hi = (int64_t *)PyBytes_AS_STRING(out[3]);
    uint8_t *lag_wait = (uint8_t *)PyBytes_AS_STRING(out[4]);
    int8_t *lag_bound = (int8_t *)PyBytes_AS_STRING(out[5]);
    Py_ssize_t h = 0, k = 0;
    ends.at = 0;
    for (Py_ssize_t node = 0; node < n; node++) {
        if (!what[node]) continue;
        int64_t node_end = end_of(&ends, node, start, dur);
        if (what[node] & 1) host[h++] = (int32_t)node;
        if (what[node] & 2) {
            int8_t b = bound[node];
            int wait = kind[node] == WAIT;
            Link l;
            if (link_at(&links, node, &l)) continue; /* never: the pass above checked every node's */
            lagged[k] = node;
            explained_lag(node, b, wait, &l, start, node_end, &lag_lo[k], &lag_hi[k]);
            lag_wait[k] = (uint8_t)wait;
            lag_bound[k++] = b;
        }
    }
    result = PyTuple_New(6);
    if (result)
        for (int i = 0; i < 6; i++) {
            PyTuple_SET_ITEM(result, i, out[i]);
            out[i] = NULL;
        }
done:
    for (int i = 0; i < 6; i++) Py_XDECREF(out[i]);
    free(what);
    free(through);
    release_views(v, N_VIEWS);
    return result;
}

/* covered_nodes(nodes, dur, start, end_nodes, end_values, span_start, span_end, cuts)
 *   -> ((nodes, ns), ...) as int64 bytes, one pair per set of spans, or None
 * Of the nodes (int32, ascending), per set of spans (set j: span_start/span_end[cuts[j]:cuts[j + 1]], each set disjoint
 * and in time order; cuts int64), those whose span [start, end) the set covers by more than 0 ns, and by how much, in
 * the nodes' order: intervals.covered_keys per set with each node's span read from the graph (a node ends at
 * start + dur but for end_nodes, as in idle_candidates), once for every set. Each set's hits are written into bytes
 * made for every node and cut to the hits (only the pages written are touched). None where a set is not disjoint
 * and in order, or the nodes or end_nodes are not ascending within the graph (the definition then runs). */
static PyObject *covered_nodes(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"nodes", 4, 0, 0},      {"dur", 8, 0, 0},        {"start", 8, 0, 0},
                                    {"end_nodes", 4, 0, 0},  {"end_values", 8, 0, 0}, {"span_start", 8, 0, 0},
                                    {"span_end", 8, 0, 0},   {"cuts", 8, 0, 0}};
    View v[8];
    PyObject *result = NULL, **out = NULL;
    int64_t *through = NULL, **col = NULL;
    Py_ssize_t *hint = NULL, *hits = NULL, n_out = 0;
    if (views_of_args(args, "covered_nodes", spec, 8, 8, v)) goto done;
    Py_ssize_t m = v[0].b.len / 4, n = v[1].b.len / 8, k = v[5].b.len / 8, sets = v[7].b.len / 8 - 1;
    const int64_t *cuts = v[7].b.buf;
    int fine = sets >= 0 && v[2].b.len / 8 == n && v[4].b.len / 8 == v[3].b.len / 4 && v[6].b.len / 8 == k;
    for (Py_ssize_t j = 0; fine && j < sets; j++) fine = cuts[0] == 0 && cuts[j] <= cuts[j + 1] && cuts[j + 1] <= k;
    if (!fine) {
        PyErr_SetString(PyExc_ValueError, "covered_nodes: columns of different lengths, or cuts out of the spans");
        goto done;
    }
    through = malloc((size_t)(k ? k : 1) * sizeof(int64_t));
    hint = calloc((size_t)(sets ? sets : 1), sizeof *hint);
    hits = calloc((size_t)(sets ? sets : 1), sizeof *hits);
    out = calloc((size_t)(2 * sets + 1), sizeof *out); /* per set: nodes, ns */
    col = calloc((size_t)(2 * sets + 1), sizeof *col);
    if (!through || !hint || !hits || !out || !col) {
        PyErr_NoMemory();
        goto done;
    }
    n_out = 2 * sets;
    for (Py_ssize_t c = 0; c < n_out; c++) {
        if (!(out[c] = PyBytes_FromStringAndSize(NULL, (m ? m : 1) * (Py_ssize_t)sizeof(int64_t)))) goto done;
        col[c] = (int64_t *)PyBytes_AS_STRING(out[c]);
    }
    const int32_t *nodes = v[0].b.buf;
    const int64_t *dur = v[1].b.buf, *start = v[2].b.buf, *ss = v[5].b.buf, *se = v[6].b.buf;
    EndsApart ends = {v[3].b.buf, v[4].b.buf, v[3].b.len / 4, 0};
    int ordered;
    Py_BEGIN_ALLOW_THREADS
    ordered = ends_apart_ordered(&ends, n);
    for (Py_ssize_t j = 0; ordered && j < sets; j++)
        ordered = spans_through(ss + cuts[j], se + cuts[j], cuts[j + 1] - cuts[j], through + cuts[j]);
    for (Py_ssize_t i = 0; i < m && ordered; i++) {
        int32_t node = nodes[i];
        if (node < 0 || node >= n || (i && node <= nodes[i - 1])) {
            ordered = 0;
            break;
        }
        int64_t lo = start[node], hi = end_of(&ends, node, start, dur);
        for (Py_ssize_t j = 0; j < sets; j++) {
            Py_ssize_t at = cuts[j], count = cuts[j + 1] - at;
            int64_t ns = covered_by(ss + at, se + at, through + at, count, lo, hi, &hint[j]);
            if (ns <= 0) continue;
            col[2 * j][hits[j]] = node;
            col[2 * j + 1][hits[j]++] = ns;
        }
    }
    Py_END_ALLOW_THREADS
    if (!ordered) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t c = 0; c < n_out; c++)
        if (_PyBytes_Resize(&out[c], hits[c / 2] * (Py_ssize_t)sizeof(int64_t)) < 0) goto done; /* out[c] now NULL */
    result = PyTuple_New(sets);
    for (Py_ssize_t j = 0; result && j < sets; j++) {
        PyObject *pair = PyTuple_Pack(2, out[2 * j], out[2 * j + 1]);
        if (!pair) Py_CLEAR(result);
        else PyTuple_SET_ITEM(result, j, pair);
    }
done:
    for (Py_ssize_t c = 0; c < n_out; c++) Py_XDECREF(out[c]);
    free(out);
    free(col);
    free(through);
    free(hint);
    free(hits);
    release_views(v, 8);
    return result;
}


/* The entries of one walked path: per node its time on the path, in the order nodes were first charged, and its own
 * time, in the order that began (critical_path.StepPath's nodes and own). Grown as the walk goes. */
typedef struct {
    int32_t *node, *own_node;
    int64_t *ns, *own_ns;
    int32_t *own_of; /* per entry, its place among the own entries (-1: none yet) */
    Py_ssize_t n, cap, n_own;
} Charged;

static int charged_grow(Charged *c) {
    Py_ssize_t cap = c->cap ? 2 * c->cap : 1024;
    int32_t *node = realloc(c->node, sizeof *node * (size_t)cap), *own_of;
    if (node) c->node = node;
    int64_t *ns = realloc(c->ns, sizeof *ns * (size_t)cap);
    if (ns) c->ns = ns;
    int32_t *own_node = realloc(c->own_node, sizeof *own_node * (size_t)cap);
    if (own_node) c->own_node = own_node;
    int64_t *own_ns = realloc(c->own_ns, sizeof *own_ns * (size_t)cap);
    if (own_ns) c->own_ns = own_ns;
    own_of = realloc(c->own_of, sizeof *own_of * (size_t)cap);
    if (own_of) c->own_of = own_of;
    if (!node || !ns || !own_node || !own_ns || !own_of) return 1;
    c->cap = cap;
    return 0;
}

typedef struct {
    int64_t sum[258];
    int16_t order[258];
    int n_order;
    const uint8_t *counts_node; /* per code: 0 where its label is "unexplained" (no node is charged with it) */
    int32_t *slot;              /* per node: its entry (-1: none), reset once the walk is done */
    Charged c;
} Walk;

/* StepPath.add: ns of category code on the path, charged to node (where >= 0), as its own time where own */
static inline int walk_add(Walk *w, int code, int64_t ns, int32_t node, int own) {
    if (ns <= 0) return 0;
    int seen = 0; /* the categories in the order they are first charged (a few: a scan) */
    for (int k = 0; k < w->n_order; k++)
        if (w->order[k] == code) {
            seen = 1;
            break;
        }
    if (!seen) w->order[w->n_order++] = (int16_t)code;
    w->sum[code] += ns;
    if (node < 0 || !w->counts_node[code]) return 0;
    int32_t e = w->slot[node];
    if (e < 0) {
        if (w->c.n == w->c.cap && charged_grow(&w->c)) return 1;
        e = (int32_t)w->c.n++;
        w->slot[node] = e;
        w->c.node[e] = node;
        w->c.ns[e] = 0;
        w->c.own_of[e] = -1;
    }
    w->c.ns[e] += ns;
    if (own) {
        int32_t o = w->c.own_of[e];
        if (o < 0) {
            o = (int32_t)w->c.n_own++;
            w->c.own_of[e] = o;
            w->c.own_node[o] = node;
            w->c.own_ns[o] = 0;
        }
        w->c.own_ns[o] += ns;
    }
    return 0;
}

/* walk_path(kind, chain, category, link, extra, extra_lag, after, after_lag, unexplained, unexplained_on, chain_lag,
 *           start, end, bound, slot, first, last, unexplained_code, launch_code, counts_node)
 *   -> (category codes, their ns, nodes, their ns, own nodes, their ns) or None
 * critical_path.step_path in C: the path from first's start to last's end walked back along what bound each start
 * in the replay (start, end, bound). category int8 codes; the link columns as LINK_SPECS; unexplained_code and
 * launch_code the codes of those categories (< 256); counts_node one byte per code. slot: int32 per node, all -1
 * (written, and left all -1 again). Nodes int32 and ns int64 as bytes. None where a node's dependency is not an
 * earlier node or its link row is out of range (the definition then runs). */
static PyObject *walk_path(PyObject *self, PyObject *args) {
    (void)self;
    static const ViewSpec spec[] = {{"kind", 1, 0, 0},  {"chain", 4, 0, 0}, {"category", 1, 0, 0}, LINK_SPECS,
                                    {"start", 8, 0, 0}, {"end", 8, 0, 0},   {"bound", 1, 0, 0},    {"slot", 4, 1, 0}};
    enum { N_VIEWS = 3 + N_LINKS + 4, V_TIMES = 3 + N_LINKS };
    View v[N_VIEWS];
    PyObject *result = NULL, *codes = NULL, *sums = NULL, *out[4] = {NULL};
    Walk w;
    memset(&w, 0, sizeof w);
    Py_ssize_t first, last;
    int unexplained_code, launch_code;
    Py_buffer counts = {0};
    PyObject *rest = NULL;
    Links links;
    if (views_of_args(args, "walk_path", spec, N_VIEWS, N_VIEWS + 5, v)) goto done;
    rest = PyTuple_GetSlice(args, N_VIEWS, PyTuple_GET_SIZE(args));
    if (!rest || !PyArg_ParseTuple(rest, "nniiy*", &first, &last, &unexplained_code, &launch_code, &counts))
        goto done;
    Py_ssize_t n = v[0].b.len;
    static const Py_ssize_t size[N_VIEWS - N_LINKS] = {1, 4, 1, 8, 8, 1, 4};
    for (int i = 1; i < N_VIEWS; i++) {
        if (i >= 3 && i < V_TIMES) continue;
        if (v[i].b.len / size[i < 3 ? i : i - N_LINKS] != n) {
            PyErr_SetString(PyExc_ValueError, "walk_path: node columns of different lengths");
            goto done;
        }
    }
    if (links_of(v + 3, n, &links, "walk_path")) goto done;
    if (first < 0 || first >= n || last < 0 || last >= n || unexplained_code < 0 || unexplained_code >= counts.len ||
        launch_code < 0 || launch_code >= counts.len || counts.len > 256) {
        PyErr_SetString(PyExc_ValueError, "walk_path: a node or category code out of range");
        goto done;
    }
    const int8_t *kind = v[0].b.buf, *category = v[2].b.buf, *bound = v[V_TIMES + 2].b.buf;
    const int32_t *chain = v[1].b.buf;
    const int64_t *start = v[V_TIMES].b.buf, *end = v[V_TIMES + 1].b.buf;
    w.slot = v[V_TIMES + 3].b.buf;
    w.counts_node = counts.buf;
    int failed = 0; /* 1: out of memory; 2: not a graph in topological order (declined) */
    Py_BEGIN_ALLOW_THREADS
    int64_t floor = start[first], upto = end[last];
    Py_ssize_t node = last;
    while (node != NONE && upto > floor) {
        int8_t b = bound[node], edge;
        int32_t prev;
        int64_t limit; /* where the lag before node ends: its start, or a wait's end */
        Link l;
        if (category[node] < 0 || category[node] >= counts.len || link_at(&links, node, &l)) {
            failed = 2;
            break;
        }
        if (kind[node] == WAIT && b == B_EXTRA) { /* a wait that ended when its work did: back to that work */
            prev = l.extra;
            limit = upto;
            edge = ON_EXTRA;
        } else {
            int64_t from = start[node] > floor ? start[node] : floor;
            if (walk_add(&w, category[node], upto - from, (int32_t)node, 1)) {
                failed = 1;
                break;
            }
            if (start[node] <= floor) break;
            prev = b == B_EXTRA ? l.extra : b == B_AFTER ? l.after : chain[node];
            if (prev == NONE) { /* nothing before it in the graph: the time from the interval's start is unexplained */
                if (walk_add(&w, unexplained_code, start[node] - floor, -1, 0)) failed = 1;
                break;
            }
            limit = start[node];
            edge = b == B_EXTRA ? ON_EXTRA : b == B_AFTER ? ON_AFTER : ON_CHAIN;
        }
        if (prev < 0 || prev >= node) {
            failed = 2;
            break;
        }
        /* the lag before node on the edge the path came by (critical_path._lag): its unexplained part as such, the
         * rest launching and queueing before device work, else the node's own category */
        int64_t prev_end = end[prev] < limit ? end[prev] : limit;
        prev_end = prev_end > floor ? prev_end : floor;
        int64_t lag = limit - prev_end, positive = lag > 0 ? lag : 0;
        int64_t unseen = l.on == edge ? (l.unexplained < positive ? l.unexplained : positive) : 0;
        if (walk_add(&w, unexplained_code, unseen, -1, 0) ||
            walk_add(&w, kind[node] == DEVICE ? launch_code : category[node], lag - unseen, (int32_t)node, 0)) {
            failed = 1;
            break;
        }
        node = prev;
        upto = prev_end;
    }
    for (Py_ssize_t e = 0; e < w.c.n; e++) w.slot[w.c.node[e]] = -1;
    Py_END_ALLOW_THREADS
    if (failed == 1) {
        PyErr_NoMemory();
        goto done;
    }
    if (failed == 2) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    codes = PyList_New(w.n_order);
    sums = PyList_New(w.n_order);
    if (!codes || !sums) goto done;
    for (int k = 0; k < w.n_order; k++) {
        PyObject *code = PyLong_FromLong(w.order[k]), *sum = PyLong_FromLongLong(w.sum[w.order[k]]);
        if (!code || !sum) {
            Py_XDECREF(code);
            Py_XDECREF(sum);
            goto done;
        }
        PyList_SET_ITEM(codes, k, code);
        PyList_SET_ITEM(sums, k, sum);
    }
    out[0] = PyBytes_FromStringAndSize((const char *)w.c.node, (Py_ssize_t)sizeof(int32_t) * w.c.n);
    out[1] = PyBytes_FromStringAndSize((const char *)w.c.ns, (Py_ssize_t)sizeof(int64_t) * w.c.n);
    out[2] = PyBytes_FromStringAndSize((const char *)w.c.own_node, (Py_ssize_t)sizeof(int32_t) * w.c.n_own);
    out[3] = PyBytes_FromStringAndSize((const char *)w.c.own_ns, (Py_ssize_t)sizeof(int64_t) * w.c.n_own);
    if (!out[0] || !out[1] || !out[2] || !out[3]) goto done;
    result = PyTuple_Pack(6, codes, sums, out[0], out[1], out[2], out[3]);
done:
    Py_XDECREF(rest);
    Py_XDECREF(codes);
    Py_XDECREF(sums);
    for (int i = 0; i < 4; i++) Py_XDECREF(out[i]);
    if (counts.obj) PyBuffer_Release(&counts);
    free(w.c.node);
    free(w.c.ns);
    free(w.c.own_node);
    free(w.c.own_ns);
    free(w.c.own_of);
    release_views(v, N_VIEWS);
    return result;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS,
     "build(h_row, h_lane, h_cat, lane_gap, d_row, d_lane, d_group, d_cat, d_launch, w_row, w_group, r_wait, "
     "r_waited, x_row, x_src, ts, dur, n_rows, n_lanes, n_groups, origin, cap) -> tuple of "
     "bytearrays, or None\n\ndepgraph._build "
     "from arrays: the node columns in Kahn's order and the link columns; None where it declines."},
    {"idle_candidates", idle_candidates, METH_VARARGS,
     "idle_candidates(kind, dur, start, bound, link, extra, extra_lag, after, after_lag, unexplained, "
     "unexplained_on, chain_lag, end_nodes, end_values, span_start, span_end) -> 6 bytes objects or None\n\n"
     "whatif._idle_candidates in one pass."},
    {"covered_nodes", covered_nodes, METH_VARARGS,
     "covered_nodes(nodes, dur, start, end_nodes, end_values, span_start, span_end, cuts) -> ((nodes, ns), ...) as "
     "int64 bytes per set of spans, or None\n\nPer set of disjoint time-ordered spans (span_*[cuts[j]:cuts[j + 1]]), "
     "the nodes it covers and by how much (whatif._host_covered)."},
    {"walk_path", walk_path, METH_VARARGS,
     "walk_path(kind, chain, category, link, extra, extra_lag, after, after_lag, unexplained, unexplained_on, "
     "chain_lag, start, "
     "end, bound, slot, first, last, unexplained_code, launch_code, counts_node) -> (codes, ns, nodes, ns, own "
     "nodes, ns) or None\n\ncritical_path.step_path in C; None where it declines."},
    {"replay", replay, METH_VARARGS,
     "replay(kind, dur, chain, link, extra, extra_lag, after, after_lag, unexplained, unexplained_on, chain_lag, "
     "factor, lag_factor, start, end, bound) -> bool\n\nreplay.replay in one pass (start (or None), end and bound "
     "written); "
     "False where it declines."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_graph",
                                    "The dependency graph's build and replay in C.", -1, methods, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__graph(void) { return PyModule_Create(&module); }
