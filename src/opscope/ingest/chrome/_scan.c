/* opscope.ingest.chrome._scan: one chunk of a Chrome trace's event array ("[{...},{...}]") straight into column
 * buffers, for the common case only.
 *
 * The Python path (msgspec structs, then EventColumns) stays the definition of what a trace means; this module is a
 * faster way to the same columns for chunks it can prove it reads the same way. Whatever it is not sure of it
 * declines (returns None) and the caller decodes the chunk as before: any byte outside ASCII, a string escape other
 * than the short ones (\" \\ \/ \b \f \n \r \t), a number of more than 18 significant digits or beyond a double, a
 * repeated key it reads, a phase other than complete events (X), flows (s t f), metadata (M), counters (C) and
 * instants (i I n: [memory] records, and markers, which follow the chunk's complete events as the Python path
 * orders them), a field of a type the Python path would convert in some special way, nesting deeper than
 * MAX_DEPTH, anything that is not strict JSON. So accepting a chunk implies msgspec would decode it, and the cut the
 * stream proposed is proven as before.
 *
 * Output (a dict of bytes objects, Arrow buffer layouts: int64 values with validity bitmaps, int32 offsets): the
 * complete events' columns, the flows' columns, the spans of the events left to the Python path (metadata,
 * counters, memory records) and whether the chunk holds a float time of 2**42 us or more (the Python path then
 * reads every float-timed event's ts/dur from its text, exactly).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_DIGITS 18
#define EXACT_DIGITS 25
#define DECLINE (-1)
#define OOM (-2)

/* ---- growable buffers and Arrow-style columns ---------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static inline int buf_grow(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return OOM;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_grow(b, n)) return OOM;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

typedef struct {
    Buf valid;  /* bitmap, LSB first */
    size_t n, nulls;
} Validity;

/* One bit per value, every value (a column is pushed once per event): a new byte each eighth value, no branch on ok */
static inline int valid_push(Validity *v, int ok) {
    size_t n = v->n;
    if ((n & 7) == 0) {
        if (v->valid.len == v->valid.cap && buf_grow(&v->valid, 1)) return OOM;
        v->valid.p[v->valid.len++] = 0;
    }
    v->valid.p[n >> 3] |= (char)((unsigned)(ok != 0) << (n & 7));
    v->nulls += !ok;
    v->n = n + 1;
    return 0;
}

typedef struct {
    Validity v;
    Buf data;
} IntCol;

static inline int int_push(IntCol *c, int ok, int64_t value) {
    if (!ok) value = 0;
    if (buf_put(&c->data, &value, sizeof value)) return OOM;
    return valid_push(&c->v, ok);
}

typedef struct {
    Validity v;
    Buf offsets; /* int32 */
    Buf data;
} StrCol;

static int str_init(StrCol *c) {
    int32_t zero = 0;
    return buf_put(&c->offsets, &zero, sizeof zero);
}

static inline int str_push(StrCol *c, int ok, const char *s, size_t n) {
    if (!ok) n = 0;
    if (c->data.len + n > INT32_MAX) return DECLINE;
    if (ok && buf_put(&c->data, s, n)) return OOM;
    int32_t end = (int32_t)c->data.len;
    if (buf_put(&c->offsets, &end, sizeof end)) return OOM;
    return valid_push(&c->v, ok);
}

static void buf_free(Buf *b) { free(b->p); b->p = NULL; b->len = b->cap = 0; }

/* ---- the JSON grammar, strictly ------------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *p, *end;
} Cur;

static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

/* Bytes in a string: 0 plain, 1 the closing quote, 2 a backslash, 3 what the Python path must see (control
 * characters, which JSON forbids raw, and everything outside ASCII, whose UTF-8 is not checked here). */
static unsigned char STRING_CLASS[256];

static void init_tables(void) {
    for (int i = 0; i < 256; i++) STRING_CLASS[i] = (i < 0x20 || i >= 0x80) ? 3 : 0;
    STRING_CLASS['"'] = 1;
    STRING_CLASS['\\'] = 2;
}

/* A string at c->p (at its opening quote): its contents [*s, *e) as written, and whether they hold escapes. */
static int scan_string(Cur *c, const unsigned char **s, const unsigned char **e, int *escaped) {
    if (c->p >= c->end || *c->p != '"') return DECLINE;
    const unsigned char *p = c->p + 1, *end = c->end;
    *s = p;
    *escaped = 0;
    for (;;) {
        while (p < end && !STRING_CLASS[*p]) p++;
        if (p >= end) return DECLINE;
        unsigned char cls = STRING_CLASS[*p];
        if (cls == 1) {
            *e = p;
            c->p = p + 1;
            return 0;
        }
        if (cls == 3) return DECLINE;
        if (p + 1 >= end) return DECLINE;
        switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
            default: return DECLINE; /* \uXXXX and invalid escapes: the Python path */
        }
        *escaped = 1;
        p += 2;
    }
}

/* A string's value with its short escapes undone, into out (cleared first). */
static int unescape(const unsigned char *s, const unsigned char *e, Buf *out) {
    out->len = 0;
    if (buf_grow(out, (size_t)(e - s))) return OOM;
    char *o = out->p;
    while (s < e) {
        if (*s != '\\') { *o++ = (char)*s++; continue; }
        char ch;
        switch (s[1]) {
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            default: ch = (char)s[1]; break; /* " \ / */
        }
        *o++ = ch;
        s += 2;
    }
    out->len = (size_t)(o - out->p);
    return 0;
}

enum { T_NONE = 0, T_NULL, T_BOOL, T_INT, T_FLOAT, T_STR, T_OBJ, T_ARR };

typedef struct {
    int type;
    const unsigned char *s, *e; /* a string's contents; other values as written */
    const unsigned char *rs, *re; /* the value as written, quotes included */
    int escaped;
    int64_t i;  /* T_INT */
    double d;   /* T_FLOAT */
} Val;

/* A number per JSON's grammar, only checked (a value nobody reads: no conversion). */
static int check_number(Cur *c) {
    const unsigned char *p = c->p, *end = c->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return DECLINE;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && *p >= '0' && *p <= '9') p++;
    else return DECLINE;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9') return DECLINE;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return DECLINE;
        const unsigned char *digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p - digits > 4) return DECLINE; /* as scan_number: such exponents are the Python path's */
    }
    c->p = p;
    return 0;
}

/* A number per JSON's grammar; ints of at most MAX_DIGITS digits, floats a finite double. */
static int scan_number(Cur *c, Val *v) {
    const unsigned char *p = c->p, *start = p;
    int is_float = 0, digits = 0;
    if (p < c->end && *p == '-') p++;
    if (p >= c->end) return DECLINE;
    if (*p == '0') {
        p++;
        digits = 1;
    } else if (*p >= '1' && *p <= '9') {
        while (p < c->end && *p >= '0' && *p <= '9') { p++; digits++; }
    } else {
        return DECLINE;
    }
    if (p < c->end && *p == '.') {
        is_float = 1;
        p++;
        if (p >= c->end || *p < '0' || *p > '9') return DECLINE;
        while (p < c->end && *p >= '0' && *p <= '9') { p++; digits++; }
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        is_float = 1;
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        if (p >= c->end || *p < '0' || *p > '9') return DECLINE;
        int exp_digits = 0;
        while (p < c->end && *p >= '0' && *p <= '9') { p++; exp_digits++; }
        if (exp_digits > 4) return DECLINE;
    }
    v->s = start;
    v->e = p;
    c->p = p;
    if (!is_float) {
        if (digits > MAX_DIGITS) return DECLINE;
        if (p - start == 2 && start[0] == '-' && start[1] == '0') return DECLINE; /* -0: the Python path */
        int64_t x = 0;
        const unsigned char *q = start[0] == '-' ? start + 1 : start;
        for (; q < p; q++) x = x * 10 + (*q - '0');
        v->type = T_INT;
        v->i = start[0] == '-' ? -x : x;
        return 0;
    }
    /* Clinger's fast path: a mantissa of at most 2**53 and a power of ten of at most 22 are both exact doubles, so
     * one IEEE multiplication or division rounds correctly */
    {
        const unsigned char *q = start[0] == '-' ? start + 1 : start;
        uint64_t m = 0;
        int frac = 0, point = 0, sig = 0, ok = 1;
        long exp10 = 0;
        for (; q < p; q++) {
            if (*q == '.') { point = 1; continue; }
            if (*q == 'e' || *q == 'E') {
                q++;
                int eneg = 0;
                if (*q == '+' || *q == '-') { eneg = *q == '-'; q++; }
                for (; q < p; q++) exp10 = exp10 * 10 + (*q - '0');
                if (eneg) exp10 = -exp10;
                break;
            }
            if (point) frac++;
            if (m == 0 && *q == '0') continue;
            if (++sig > 15) { ok = 0; break; }
            m = m * 10 + (uint64_t)(*q - '0');
        }
        long k = exp10 - frac;
        if (ok && k >= -22 && k <= 22) {
            static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                           1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
            double d = (double)m;
            d = k >= 0 ? d * POW10[k] : d / POW10[-k];
            v->type = T_FLOAT;
            v->d = start[0] == '-' ? -d : d;
            return 0;
        }
    }
    /* otherwise a locale-independent, correctly rounded conversion (CPython's own) */
    char tmp[64];
    size_t n = (size_t)(p - start);
    if (n >= sizeof tmp) return DECLINE;
    memcpy(tmp, start, n);
    tmp[n] = 0;
    char *stop = NULL;
    PyGILState_STATE gil = PyGILState_Ensure(); /* the scan runs without the GIL; CPython's conversion needs it */
    double d = PyOS_string_to_double(tmp, &stop, NULL);
    int failed = d == -1.0 && PyErr_Occurred();
    if (failed) PyErr_Clear();
    PyGILState_Release(gil);
    if (failed || stop != tmp + n || !isfinite(d)) return DECLINE;
    v->type = T_FLOAT;
    v->d = d;
    return 0;
}

static int skip_value(Cur *c, int depth, Val *v, int need);

static int expect_literal(Cur *c, const char *word, int type, Val *v) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) return DECLINE;
    v->type = type;
    v->s = c->p;
    c->p += n;
    v->e = c->p;
    return 0;
}

/* Any value: its type and span (objects and arrays are only validated; a number is converted when needed). */
static int skip_value(Cur *c, int depth, Val *v, int need) {
    Val inner;
    if (c->p >= c->end) return DECLINE;
    switch (*c->p) {
        case '"':
            v->type = T_STR;
            return scan_string(c, &v->s, &v->e, &v->escaped);
        case '{': {
            if (depth >= MAX_DEPTH) return DECLINE;
            v->type = T_OBJ;
            v->s = c->p++;
            skip_ws(c);
            if (c->p < c->end && *c->p == '}') { c->p++; v->e = c->p; return 0; }
            for (;;) {
                const unsigned char *ks, *ke;
                int esc;
                skip_ws(c);
                if (scan_string(c, &ks, &ke, &esc)) return DECLINE;
                skip_ws(c);
                if (c->p >= c->end || *c->p != ':') return DECLINE;
                c->p++;
                skip_ws(c);
                if (skip_value(c, depth + 1, &inner, 0)) return DECLINE;
                skip_ws(c);
                if (c->p < c->end && *c->p == ',') { c->p++; continue; }
                if (c->p < c->end && *c->p == '}') { c->p++; v->e = c->p; return 0; }
                return DECLINE;
            }
        }
        case '[': {
            if (depth >= MAX_DEPTH) return DECLINE;
            v->type = T_ARR;
            v->s = c->p++;
            skip_ws(c);
            if (c->p < c->end && *c->p == ']') { c->p++; v->e = c->p; return 0; }
            for (;;) {
                skip_ws(c);
                if (skip_value(c, depth + 1, &inner, 0)) return DECLINE;
                skip_ws(c);
                if (c->p < c->end && *c->p == ',') { c->p++; continue; }
                if (c->p < c->end && *c->p == ']') { c->p++; v->e = c->p; return 0; }
                return DECLINE;
            }
        }
        case 't': return expect_literal(c, "true", T_BOOL, v);
        case 'f': return expect_literal(c, "false", T_BOOL, v);
        case 'n': return expect_literal(c, "null", T_NULL, v);
        default:
            if (need) return scan_number(c, v);
            v->type = T_INT; /* a number nobody reads */
            return check_number(c);
    }
}

/* ---- one event ----------------------------------------------------------------------------------------------- */

enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ID, K_ARGS, K_TOP };
enum { A_CORRELATION, A_EXT, A_EXT_LEGACY, A_STREAM, A_DEVICE, A_DIMS, A_TYPE, A_STRIDES, A_CONCRETE,
       A_DEVICE_TYPE, A_DEVICE_ID, A_ADDR, A_BYTES, A_TOTAL_ALLOCATED, A_TOTAL_RESERVED, A_KEYS };

static const char *TOP_KEYS[K_TOP] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"};
static const char *ARG_KEYS[A_KEYS] = {"correlation", "External id", "external id", "stream", "device",
                                       "Input Dims", "Input type", "Input Strides", "Concrete Inputs",
                                       "Device Type", "Device Id", "Addr", "Bytes", "Total Allocated",
                                       "Total Reserved"};

/* Which picked key a member's key is: a 256-slot table on (length, first and last byte) gives the one candidate to
 * compare (a slot two keys share sends the lookup to a linear search), so that the many keys nobody picks cost one
 * table read each. */
#define KEY_SLOTS 256
#define SLOT_SHARED (-2)

static inline unsigned key_slot(const unsigned char *s, size_t len) {
    return (unsigned)(len * 31u + s[0] * 7u + s[len - 1]) & (KEY_SLOTS - 1);
}

static void key_table(const char **keys, const size_t *lens, int n, signed char *table) {
    for (int i = 0; i < KEY_SLOTS; i++) table[i] = -1;
    for (int i = 0; i < n; i++) {
        unsigned slot = key_slot((const unsigned char *)keys[i], lens[i]);
        table[slot] = table[slot] == -1 ? (signed char)i : SLOT_SHARED;
    }
}

static int key_index(const unsigned char *s, const unsigned char *e, const char **keys, const size_t *lens, int n,
                     const signed char *table) {
    size_t len = (size_t)(e - s);
    if (len == 0) return -1;
    int i = table[key_slot(s, len)];
    if (i >= 0) return lens[i] == len && memcmp(keys[i], s, len) == 0 ? i : -1;
    if (i == -1) return -1;
    for (i = 0; i < n; i++)
        if (lens[i] == len && *s == (unsigned char)keys[i][0] && memcmp(keys[i], s, len) == 0) return i;
    return -1;
}

static size_t TOP_LENS[K_TOP], ARG_LENS[A_KEYS];
static signed char TOP_TABLE[KEY_SLOTS], ARG_TABLE[KEY_SLOTS];

/* The keys an object's members are picked by, and optionally the object under one of them read the same way (an
 * event's args: read in the same pass that validates them). */
typedef struct Pick {
    const char **keys;
    const size_t *lens;
    const signed char *table;
    int n;
    Val *found;
    int nested_key; /* -1: none */
    struct Pick *nested;
} Pick;

/* The members of the object at c->p whose keys are picked; the others are validated and passed over. */
static int scan_object(Cur *c, int depth, Pick *pick) {
    Val *found = pick->found;
    for (int i = 0; i < pick->n; i++) found[i].type = T_NONE;
    if (pick->nested) for (int i = 0; i < pick->nested->n; i++) pick->nested->found[i].type = T_NONE;
    if (c->p >= c->end || *c->p != '{') return DECLINE;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
    Val scratch; /* the value of a key nobody picked */
    for (;;) {
        const unsigned char *ks, *ke;
        int esc;
        skip_ws(c);
        if (scan_string(c, &ks, &ke, &esc)) return DECLINE;
        if (esc) return DECLINE; /* an escaped key might spell a picked one */
        skip_ws(c);
        if (c->p >= c->end || *c->p != ':') return DECLINE;
        c->p++;
        skip_ws(c);
        const unsigned char *raw = c->p;
        int k = key_index(ks, ke, pick->keys, pick->lens, pick->n, pick->table);
        /* written in place (a copy of a just-written struct stalls on store forwarding) */
        Val *v = k >= 0 ? &found[k] : &scratch;
        if (k >= 0 && v->type != T_NONE) return DECLINE; /* repeated: msgspec keeps the last */
        if (k >= 0 && k == pick->nested_key && c->p < c->end && *c->p == '{') {
            if (depth + 1 >= MAX_DEPTH) return DECLINE;
            if (scan_object(c, depth + 1, pick->nested)) return DECLINE;
            v->type = T_OBJ;
            v->s = raw;
            v->e = c->p;
        } else if (skip_value(c, depth + 1, v, k >= 0)) {
            return DECLINE;
        }
        v->rs = raw;
        v->re = c->p;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') { c->p++; continue; }
        if (c->p < c->end && *c->p == '}') { c->p++; return 0; }
        return DECLINE;
    }
}

static int is_word(const Val *v, const char *word) {
    size_t n = strlen(word);
    return v->type == T_STR && !v->escaped && (size_t)(v->e - v->s) == n && memcmp(v->s, word, n) == 0;
}

/* ---- times --------------------------------------------------------------------------------------------------- */

typedef struct {
    int type; /* T_NONE, T_NULL, T_INT, T_FLOAT */
    int exact; /* read from the text (the event's ts is a float in a chunk with a float time >= 2**42 us) */
    int64_t i;
    double d;
    uint32_t s, e; /* the text, as offsets into the chunk */
} TimeRec;

static const double FLOAT_EXACT_LIMIT_US = 4398046511104.0; /* 2**42 */
static const double TWO_63 = 9223372036854775808.0;

/* us -> ns as the Python path does: ints times 1000, floats rounded half to even after * 1000.0; null beyond
 * +-(2**63 - 1) */
static int plain_ns(const TimeRec *t, int64_t *out) {
    if (t->type == T_INT) {
        if (t->i > INT64_MAX / 1000 || t->i < -(INT64_MAX / 1000)) return 0;
        *out = t->i * 1000;
        return 1;
    }
    if (t->type == T_FLOAT) {
        double r = nearbyint(t->d * 1000.0);
        if (!(r < TWO_63 && r > -TWO_63)) return 0;
        *out = (int64_t)r;
        return 1;
    }
    return 0;
}

/* Decimal text -> ns exactly, rounded half to even (Python: Decimal(text) * 1000, to_integral_value()). Returns
 * 1 with a value, 0 for null, DECLINE when the text has more significant digits than handled here. */
static int exact_ns(const unsigned char *s, const unsigned char *e, int64_t *out) {
    int neg = 0;
    if (s < e && *s == '-') { neg = 1; s++; }
    unsigned __int128 m = 0;
    int sig = 0, frac = 0, seen_point = 0;
    long exp10 = 0;
    for (; s < e; s++) {
        if (*s == '.') { seen_point = 1; continue; }
        if (*s == 'e' || *s == 'E') {
            s++;
            int eneg = 0;
            if (s < e && (*s == '+' || *s == '-')) { eneg = *s == '-'; s++; }
            long x = 0;
            for (; s < e; s++) x = x * 10 + (*s - '0');
            exp10 = eneg ? -x : x;
            break;
        }
        if (seen_point) frac++;
        if (m == 0 && *s == '0') continue; /* leading zeros */
        if (++sig > EXACT_DIGITS) return DECLINE; /* Decimal's 28 digits would round the product */
        m = m * 10 + (unsigned)(*s - '0');
    }
    long k = exp10 - frac + 3; /* value * 1000 = m * 10**k */
    if (m == 0) { *out = 0; return 1; }
    if (k >= 0) {
        for (long i = 0; i < k; i++) {
            m *= 10;
            if (m > (unsigned __int128)INT64_MAX) return 0; /* beyond int64: null, as the Python path */
        }
    } else {
        if (k < -38) { *out = 0; return 1; }
        unsigned __int128 div = 1;
        for (long i = 0; i < -k; i++) div *= 10;
        unsigned __int128 q = m / div, r = m % div;
        if (2 * r > div || (2 * r == div && (q & 1))) q++;
        m = q;
        if (m > (unsigned __int128)INT64_MAX) return 0;
    }
    *out = neg ? -(int64_t)m : (int64_t)m;
    return 1;
}

static int time_rec(const Val *v, const unsigned char *base, TimeRec *t) {
    t->type = v->type;
    t->exact = 0;
    t->i = 0;
    t->d = 0;
    t->s = t->e = 0;
    if (v->type == T_NONE || v->type == T_NULL) return 0;
    if (v->type != T_INT && v->type != T_FLOAT) return DECLINE;
    t->i = v->i;
    t->d = v->d;
    t->s = (uint32_t)(v->s - base);
    t->e = (uint32_t)(v->e - base);
    return 0;
}

static int time_push(IntCol *col, const TimeRec *t, const unsigned char *base) {
    int64_t ns = 0;
    int ok;
    if (t->exact && (t->type == T_INT || t->type == T_FLOAT)) {
        ok = exact_ns(base + t->s, base + t->e, &ns);
        if (ok == DECLINE) return DECLINE;
    } else {
        ok = plain_ns(t, &ns);
    }
    return int_push(col, ok, ns);
}

/* ---- the columns of the chunks read so far ------------------------------------------------------------------- */

typedef struct {
    /* complete events */
    StrCol cat, name, pid, tid, dims, dtypes, strides, concrete, args;
    IntCol ts, dur, correlation, ext, stream, device, pid_int, tid_int;
    IntCol marker; /* 1: an instant marker (its dur 0), rows after the chunk's complete events */
    /* flows */
    StrCol f_id, f_cat, f_ph, f_pid, f_tid;
    IntCol f_ts;
    /* [memory] records */
    StrCol m_pid, m_tid;
    IntCol m_ts, m_device_type, m_device_id, m_addr, m_bytes, m_total_allocated, m_total_reserved;
    /* per chunk: the times until the chunk says whether floats are read exactly, the events left to Python */
    Buf times, f_times, m_times;
    Buf markers; /* Span: each marker of the chunk, read once its complete events are in */
    Buf rest;
    size_t n_rest;
    int exact;
    Buf tmp;
} Out;

#define N_STR 16
#define N_INT 17

static StrCol *str_col(Out *o, int i) {
    StrCol *all[N_STR] = {&o->cat, &o->name, &o->pid, &o->tid, &o->dims, &o->dtypes, &o->strides, &o->concrete,
                          &o->args, &o->f_id, &o->f_cat, &o->f_ph, &o->f_pid, &o->f_tid, &o->m_pid, &o->m_tid};
    return all[i];
}

static IntCol *int_col(Out *o, int i) {
    IntCol *all[N_INT] = {&o->ts, &o->dur, &o->correlation, &o->ext, &o->stream, &o->device, &o->pid_int,
                          &o->tid_int, &o->f_ts, &o->m_ts, &o->m_device_type, &o->m_device_id, &o->m_addr,
                          &o->m_bytes, &o->m_total_allocated, &o->m_total_reserved, &o->marker};
    return all[i];
}

static const char *STR_NAMES[N_STR] = {"cat", "name", "pid", "tid", "shapes", "dtypes", "strides",
                                       "concrete_inputs", "args", "flow_id", "flow_cat", "flow_phase", "flow_pid",
                                       "flow_tid", "memory_pid", "memory_tid"};
static const char *INT_NAMES[N_INT] = {"ts_ns", "dur_ns", "correlation", "external_id", "stream", "device",
                                       "pid_int", "tid_int", "flow_ts_ns", "memory_ts_ns", "device_type",
                                       "device_id", "addr", "bytes", "total_allocated", "total_reserved",
                                       "marker"};

static void col_free(Validity *v, Buf *a, Buf *b) {
    buf_free(&v->valid);
    buf_free(a);
    if (b) buf_free(b);
    v->n = v->nulls = 0;
}

/* Empty every column, keeping the memory: the next rows are written where these were, without new pages. */
static int out_reset(Out *o) {
    for (int i = 0; i < N_STR; i++) {
        StrCol *c = str_col(o, i);
        c->v.valid.len = c->v.n = c->v.nulls = 0;
        c->offsets.len = c->data.len = 0;
        if (str_init(c)) return OOM;
    }
    for (int i = 0; i < N_INT; i++) {
        IntCol *c = int_col(o, i);
        c->v.valid.len = c->v.n = c->v.nulls = 0;
        c->data.len = 0;
    }
    return 0;
}

static void out_free(Out *o) {
    for (int i = 0; i < N_STR; i++) {
        StrCol *c = str_col(o, i);
        col_free(&c->v, &c->offsets, &c->data);
    }
    for (int i = 0; i < N_INT; i++) {
        IntCol *c = int_col(o, i);
        col_free(&c->v, &c->data, NULL);
    }
    buf_free(&o->times);
    buf_free(&o->f_times);
    buf_free(&o->m_times);
    buf_free(&o->markers);
    buf_free(&o->rest);
    buf_free(&o->tmp);
}

/* Where every column stood before a chunk: a declined chunk leaves nothing behind. */
typedef struct {
    size_t valid_len, n, nulls, a_len, b_len;
} ColMark;

typedef struct {
    ColMark s[N_STR], i[N_INT];
} Mark;

static void mark(Out *o, Mark *m) {
    for (int i = 0; i < N_STR; i++) {
        StrCol *c = str_col(o, i);
        m->s[i] = (ColMark){c->v.valid.len, c->v.n, c->v.nulls, c->offsets.len, c->data.len};
    }
    for (int i = 0; i < N_INT; i++) {
        IntCol *c = int_col(o, i);
        m->i[i] = (ColMark){c->v.valid.len, c->v.n, c->v.nulls, c->data.len, 0};
    }
}

static void valid_restore(Validity *v, const ColMark *m) {
    v->valid.len = m->valid_len;
    v->n = m->n;
    v->nulls = m->nulls;
    if (v->n % 8) v->valid.p[v->n / 8] &= (char)((1u << (v->n % 8)) - 1); /* bits past n are pushed with |= */
}

static void rollback(Out *o, const Mark *m) {
    for (int i = 0; i < N_STR; i++) {
        StrCol *c = str_col(o, i);
        valid_restore(&c->v, &m->s[i]);
        c->offsets.len = m->s[i].a_len;
        c->data.len = m->s[i].b_len;
    }
    for (int i = 0; i < N_INT; i++) {
        IntCol *c = int_col(o, i);
        valid_restore(&c->v, &m->i[i]);
        c->data.len = m->i[i].a_len;
    }
}

/* A text column's value: a string (unescaped), or absent/null (null) */
static int push_text(Out *o, StrCol *col, const Val *v) {
    if (v->type == T_NONE || v->type == T_NULL) return str_push(col, 0, NULL, 0);
    if (v->type != T_STR) return DECLINE;
    if (!v->escaped) return str_push(col, 1, (const char *)v->s, (size_t)(v->e - v->s));
    if (unescape(v->s, v->e, &o->tmp)) return OOM;
    return str_push(col, 1, o->tmp.p, o->tmp.len);
}

/* pid/tid/flow id: an int's digits or a string's value; absent/null: null (the caller fills in ""). Also the int
 * itself, for a GPU row's stream and device where args have none. */
static int push_id(Out *o, StrCol *col, IntCol *as_int, const Val *v) {
    if (v->type == T_INT) {
        if (as_int && int_push(as_int, 1, v->i)) return OOM;
        return str_push(col, 1, (const char *)v->s, (size_t)(v->e - v->s));
    }
    if (as_int && int_push(as_int, 0, 0)) return OOM;
    return push_text(o, col, v);
}

static int push_int(IntCol *col, const Val *v) {
    if (v->type == T_NONE || v->type == T_NULL) return int_push(col, 0, 0);
    if (v->type != T_INT) return DECLINE; /* floats, text, bools: the Python path's conversions */
    return int_push(col, 1, v->i);
}

/* stream/device may be written as text ("0x0" on ROCm): the Python path's as_int, an int from digit text and null
 * for other text */
static int push_int_or_text(IntCol *col, const Val *v) {
    if (v->type != T_STR) return push_int(col, v);
    if (v->escaped) return DECLINE;
    const unsigned char *s = v->s, *e = v->e;
    while (s < e && *s == ' ') s++;
    while (e > s && e[-1] == ' ') e--;
    int dashes = 0;
    while (s < e && *s == '-') { s++; dashes++; }
    if (s == e) return int_push(col, 0, 0);
    for (const unsigned char *q = s; q < e; q++)
        if (*q < '0' || *q > '9') return int_push(col, 0, 0);
    if (dashes > 1 || e - s > MAX_DIGITS) return DECLINE;
    int64_t x = 0;
    for (; s < e; s++) x = x * 10 + (*s - '0');
    return int_push(col, 1, dashes ? -x : x);
}

static int push_raw(StrCol *col, const Val *v) {
    if (v->type == T_NONE) return str_push(col, 0, NULL, 0);
    return str_push(col, 1, (const char *)v->rs, (size_t)(v->re - v->rs));
}

/* Input Dims as the model keeps them: the raw text without its blanks (the Python path: a regex removing \s+;
 * the text can hold no other blank, raw control characters in strings being declined) */
static int push_raw_tight(StrCol *col, const Val *v) {
    if (v->type == T_NONE) return str_push(col, 0, NULL, 0);
    size_t n = (size_t)(v->re - v->rs);
    if (col->data.len + n > INT32_MAX) return DECLINE;
    if (buf_grow(&col->data, n)) return OOM;
    char *o = col->data.p + col->data.len;
    for (const unsigned char *q = v->rs; q < v->re; q++)
        if (*q != ' ' && *q != '\n' && *q != '\t' && *q != '\r') *o++ = (char)*q;
    col->data.len = (size_t)(o - col->data.p);
    int32_t end = (int32_t)col->data.len;
    if (buf_put(&col->offsets, &end, sizeof end)) return OOM;
    return valid_push(&col->v, 1);
}

#define TRY(x) do { int _r = (x); if (_r) return _r; } while (0)

/* A row of the events table: a complete event, or an instant marker (its dur 0, whatever the event says, as the
 * Python path sets it) */
static int event_row(Out *o, const Val *k, const Val *a, const unsigned char *base, int is_marker) {
    if (!(k[K_CAT].type == T_STR || k[K_CAT].type == T_NULL || k[K_CAT].type == T_NONE)) return DECLINE;
    if (is_word(&k[K_CAT], "Op") || (k[K_CAT].type == T_STR && k[K_CAT].escaped)) return DECLINE; /* TF's ops */
    if (k[K_ARGS].type != T_OBJ && k[K_ARGS].type != T_NONE) return DECLINE;
    if (a[A_EXT].type != T_INT && a[A_EXT].type != T_NONE && a[A_EXT].type != T_NULL) return DECLINE;
    TimeRec t[2];
    TRY(time_rec(&k[K_TS], base, &t[0]));
    if (is_marker)
        t[1] = (TimeRec){T_INT, 0, 0, 0.0, 0, 0};
    else
        TRY(time_rec(&k[K_DUR], base, &t[1]));
    TRY(buf_put(&o->times, t, sizeof t));
    TRY(int_push(&o->marker, 1, is_marker));
    TRY(push_text(o, &o->cat, &k[K_CAT]));
    TRY(push_text(o, &o->name, &k[K_NAME]));
    TRY(push_id(o, &o->pid, &o->pid_int, &k[K_PID]));
    TRY(push_id(o, &o->tid, &o->tid_int, &k[K_TID]));
    TRY(push_int(&o->correlation, &a[A_CORRELATION]));
    TRY(push_int(&o->ext, a[A_EXT].type == T_INT ? &a[A_EXT] : &a[A_EXT_LEGACY]));
    TRY(push_int_or_text(&o->stream, &a[A_STREAM]));
    TRY(push_int_or_text(&o->device, &a[A_DEVICE]));
    TRY(push_raw_tight(&o->dims, &a[A_DIMS]));
    TRY(push_raw(&o->dtypes, &a[A_TYPE]));
    TRY(push_raw(&o->strides, &a[A_STRIDES]));
    TRY(push_raw(&o->concrete, &a[A_CONCRETE]));
    TRY(push_raw(&o->args, &k[K_ARGS]));
    return 0;
}

static int complete_event(Out *o, const Val *k, const Val *a, const unsigned char *base) {
    return event_row(o, k, a, base, 0);
}

typedef struct {
    const unsigned char *s, *e;
} Span;

static int flow_event(Out *o, const Val *k, const unsigned char *base) {
    TimeRec t;
    TRY(time_rec(&k[K_TS], base, &t));
    TRY(buf_put(&o->f_times, &t, sizeof t));
    TRY(push_id(o, &o->f_id, NULL, &k[K_ID]));
    if (k[K_CAT].type == T_STR)
        TRY(push_text(o, &o->f_cat, &k[K_CAT]));
    else
        TRY(str_push(&o->f_cat, 0, NULL, 0)); /* not text: no category */
    TRY(str_push(&o->f_ph, 1, (const char *)k[K_PH].s, (size_t)(k[K_PH].e - k[K_PH].s)));
    TRY(push_id(o, &o->f_pid, NULL, &k[K_PID]));
    TRY(push_id(o, &o->f_tid, NULL, &k[K_TID]));
    return 0;
}

static int memory_event(Out *o, const Val *k, const Val *a, const unsigned char *base) {
    if (k[K_ARGS].type != T_OBJ && k[K_ARGS].type != T_NONE) return DECLINE;
    TimeRec t;
    TRY(time_rec(&k[K_TS], base, &t));
    TRY(buf_put(&o->m_times, &t, sizeof t));
    TRY(push_id(o, &o->m_pid, NULL, &k[K_PID]));
    TRY(push_id(o, &o->m_tid, NULL, &k[K_TID]));
    TRY(push_int(&o->m_device_type, &a[A_DEVICE_TYPE]));
    TRY(push_int(&o->m_device_id, &a[A_DEVICE_ID]));
    TRY(push_int(&o->m_addr, &a[A_ADDR]));
    TRY(push_int(&o->m_bytes, &a[A_BYTES]));
    TRY(push_int(&o->m_total_allocated, &a[A_TOTAL_ALLOCATED]));
    TRY(push_int(&o->m_total_reserved, &a[A_TOTAL_RESERVED]));
    return 0;
}

static int left_event(Out *o, const unsigned char *s, const unsigned char *e) {
    TRY(buf_put(&o->rest, o->n_rest ? "," : "[", 1));
    TRY(buf_put(&o->rest, s, (size_t)(e - s)));
    o->n_rest++;
    return 0;
}

static int resolve_times(Out *o, Buf *times, int per_row, IntCol *first, IntCol *second, const unsigned char *base) {
    size_t n = times->len / (per_row * sizeof(TimeRec));
    TimeRec *t = (TimeRec *)times->p;
    for (size_t i = 0; i < n; i++) {
        TimeRec *row = t + per_row * i;
        int exact = o->exact && row[0].type == T_FLOAT; /* an event with a float ts: its ts and dur exactly */
        for (int j = 0; j < per_row; j++) row[j].exact = exact;
        TRY(time_push(first, &row[0], base));
        if (per_row == 2) TRY(time_push(second, &row[1], base));
    }
    return 0;
}

/* A chunk: a JSON array of events, or with items_only the items alone ("{...},{...}", the stream's buffer between
 * two cuts, read in place); its times are left for finish_chunk. */
static int scan_items(Out *o, const unsigned char *base, size_t len, int items_only) {
    Cur c = {base, base + len};
    o->times.len = o->f_times.len = o->m_times.len = o->rest.len = o->markers.len = 0;
    o->n_rest = 0;
    o->exact = 0;
    if (len > UINT32_MAX) return DECLINE;
    skip_ws(&c);
    if (!items_only) {
        if (c.p >= c.end || *c.p != '[') return DECLINE;
        c.p++;
        skip_ws(&c);
    }
    if (c.p >= c.end || *c.p != '{') return DECLINE; /* empty, or not an object: the Python path */
    Val k[K_TOP], a[A_KEYS];
    Pick args = {ARG_KEYS, ARG_LENS, ARG_TABLE, A_KEYS, a, -1, NULL};
    Pick top = {TOP_KEYS, TOP_LENS, TOP_TABLE, K_TOP, k, K_ARGS, &args};
    for (;;) {
        skip_ws(&c);
        const unsigned char *start = c.p;
        TRY(scan_object(&c, 1, &top));
        const unsigned char *end = c.p;
        if (k[K_TS].type == T_FLOAT && fabs(k[K_TS].d) >= FLOAT_EXACT_LIMIT_US) o->exact = 1;
        if (k[K_PH].type != T_STR || k[K_PH].escaped || k[K_PH].e - k[K_PH].s != 1) return DECLINE;
        switch (*k[K_PH].s) {
            case 'X': TRY(complete_event(o, k, a, base)); break;
            case 's': case 't': case 'f': TRY(flow_event(o, k, base)); break;
            case 'M': case 'C': TRY(left_event(o, start, end)); break;
            case 'i': case 'I': case 'n':
                if (is_word(&k[K_NAME], "[memory]")) {
                    TRY(memory_event(o, k, a, base));
                } else { /* a marker: a row after the chunk's complete events (push_markers) */
                    Span span = {start, end};
                    TRY(buf_put(&o->markers, &span, sizeof span));
                }
                break;
            default: return DECLINE;
        }
        skip_ws(&c);
        if (c.p < c.end && *c.p == ',') { c.p++; continue; }
        if (items_only && c.p == c.end) break;
        if (!items_only && c.p < c.end && *c.p == ']') { c.p++; break; }
        return DECLINE;
    }
    skip_ws(&c);
    if (c.p != c.end) return DECLINE;
    return 0;
}

/* The end of a chunk read by scan_items: the times, now that the chunk says whether float times are read exactly
 * (exact: for the whole chunk, both halves of a split one), and the left events' closing bracket. */
static int finish_chunk(Out *o, int exact, const unsigned char *base) {
    o->exact = exact;
    TRY(resolve_times(o, &o->times, 2, &o->ts, &o->dur, base));
    TRY(resolve_times(o, &o->f_times, 1, &o->f_ts, NULL, base));
    TRY(resolve_times(o, &o->m_times, 1, &o->m_ts, NULL, base));
    return 0;
}

/* The chunk's markers (both halves' of a split one, in order) as rows after its complete events: each read again
 * (the scan kept where it lies), its times resolved with the chunk's exact-time rule. */
static int push_markers(Out *o, int exact, const unsigned char *base) {
    if (!o->markers.len) return 0;
    Val k[K_TOP], a[A_KEYS];
    Pick args = {ARG_KEYS, ARG_LENS, ARG_TABLE, A_KEYS, a, -1, NULL};
    Pick top = {TOP_KEYS, TOP_LENS, TOP_TABLE, K_TOP, k, K_ARGS, &args};
    const Span *span = (const Span *)o->markers.p;
    size_t n = o->markers.len / sizeof *span;
    o->times.len = 0;
    for (size_t i = 0; i < n; i++) {
        Cur c = {span[i].s, span[i].e};
        TRY(scan_object(&c, 1, &top));
        TRY(event_row(o, k, a, base, 1));
    }
    o->exact = exact;
    return resolve_times(o, &o->times, 2, &o->ts, &o->dur, base);
}

static int scan_chunk(Out *o, const unsigned char *base, size_t len, int items_only) {
    TRY(scan_items(o, base, len, items_only));
    TRY(finish_chunk(o, o->exact, base));
    TRY(push_markers(o, o->exact, base));
    if (o->n_rest) TRY(buf_put(&o->rest, "]", 1));
    return 0;
}

/* ---- a chunk read as two halves on two threads ----------------------------------------------------------------- */

/* v's bits appended to into's */
static int valid_append(Validity *into, const Validity *v) {
    if (into->n % 8 == 0) {
        if (buf_put(&into->valid, v->valid.p, (v->n + 7) / 8)) return OOM;
    } else {
        for (size_t i = 0; i < v->n; i++) /* valid_push counts n and the nulls */
            if (valid_push(into, (v->valid.p[i / 8] >> (i % 8)) & 1)) return OOM;
        return 0;
    }
    into->n += v->n;
    into->nulls += v->nulls;
    return 0;
}

/* The rows of `from` (the second half of a chunk) after those of `into`; DECLINE where a text column would pass
 * Arrow's 2 GiB offsets (the whole chunk read at once declines there too). */
static int out_append(Out *into, const Out *from) {
    for (int i = 0; i < N_STR; i++) {
        StrCol *a = str_col(into, i);
        const StrCol *b = str_col((Out *)from, i);
        size_t shift = a->data.len;
        if (shift + b->data.len > INT32_MAX) return DECLINE;
        TRY(buf_put(&a->data, b->data.p, b->data.len));
        size_t n = b->v.n;
        TRY(buf_grow(&a->offsets, n * sizeof(int32_t)));
        const int32_t *src = (const int32_t *)b->offsets.p + 1;
        int32_t *dst = (int32_t *)(a->offsets.p + a->offsets.len);
        for (size_t k = 0; k < n; k++) dst[k] = src[k] + (int32_t)shift;
        a->offsets.len += n * sizeof(int32_t);
        TRY(valid_append(&a->v, &b->v));
    }
    for (int i = 0; i < N_INT; i++) {
        IntCol *a = int_col(into, i);
        const IntCol *b = int_col((Out *)from, i);
        TRY(buf_put(&a->data, b->data.p, b->data.len));
        TRY(valid_append(&a->v, &b->v));
    }
    if (from->n_rest) { /* "[a,b" + "[c,d" -> "[a,b,c,d" */
        if (into->n_rest) {
            TRY(buf_put(&into->rest, ",", 1));
            TRY(buf_put(&into->rest, from->rest.p + 1, from->rest.len - 1));
        } else {
            TRY(buf_put(&into->rest, from->rest.p, from->rest.len));
        }
        into->n_rest += from->n_rest;
    }
    return 0;
}

/* Where a chunk of items splits in two: the "{" of an item near the middle, after "}" "," (blanks allowed) -- a
 * candidate only: inside a string it makes the first half end inside that string, which then declines. 0: none. */
static size_t split_point(const unsigned char *base, size_t len) {
    for (size_t i = len / 2; i > len / 4; i--) {
        if (base[i] != '{') continue;
        size_t j = i;
        while (j > 0 && (base[j - 1] == ' ' || base[j - 1] == '\n' || base[j - 1] == '\r' || base[j - 1] == '\t')) j--;
        if (j == 0 || base[j - 1] != ',') continue;
        j--;
        while (j > 0 && (base[j - 1] == ' ' || base[j - 1] == '\n' || base[j - 1] == '\r' || base[j - 1] == '\t')) j--;
        if (j == 0 || base[j - 1] != '}') continue;
        return i;
    }
    return 0;
}

#ifndef _WIN32
#include <pthread.h>
#define CAN_SPLIT 1

typedef struct {
    Out *o;
    const unsigned char *base;
    size_t len;
    int r;
} Half;

static void *scan_half(void *arg) {
    Half *h = arg;
    h->r = scan_items(h->o, h->base, h->len, 1);
    return NULL;
}
#else
#define CAN_SPLIT 0
#endif

/* Chunks at least this long are read as two halves at once (a thread per half); shorter ones are not worth it. */
#define SPLIT_BYTES (256 * 1024)

/* A chunk of items read as two halves at once: the second on a thread of its own into `o2`, then appended. Where
 * either half declines (a split candidate inside a string, or anything the whole chunk would decline too) the first
 * half is rolled back to `m` and the chunk read whole, as without the split: the same rows and the same exact-time
 * rule (decided for the whole chunk), the halves only share the work. */
static int scan_split(Out *o, Out *o2, const unsigned char *base, size_t len, int items_only, size_t split_bytes,
                      const Mark *m, Py_ssize_t *splits) {
#if CAN_SPLIT
    size_t at = items_only && split_bytes && len >= split_bytes ? split_point(base, len) : 0;
    if (at) {
        size_t first = at; /* the first half ends before the "," ahead of the split item */
        while (first > 0 && base[first - 1] != ',') first--;
        first--;
        if (out_reset(o2)) return OOM;
        Half second = {o2, base + at, len - at, 0};
        pthread_t thread;
        if (pthread_create(&thread, NULL, scan_half, &second) == 0) {
            int r = scan_items(o, base, first, 1);
            pthread_join(thread, NULL);
            if (r == OOM || second.r == OOM) return OOM;
            if (r == 0 && second.r == 0) {
                int exact = o->exact || o2->exact;
                r = finish_chunk(o, exact, base);
                if (!r) r = finish_chunk(o2, exact, base + at);
                if (!r) r = out_append(o, o2);
                if (!r) r = buf_put(&o->markers, o2->markers.p, o2->markers.len);
                if (!r) r = push_markers(o, exact, base);
                if (!r && o->n_rest) r = buf_put(&o->rest, "]", 1);
                if (!r) (*splits)++;
                if (r != DECLINE) return r;
            }
            rollback(o, m);
        }
    }
#else
    (void)o2;
    (void)split_bytes;
    (void)m;
#endif
    return scan_chunk(o, base, len, items_only);
}

/* ---- to Python ----------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Out o;
    Out o2; /* the second half of a chunk read in two */
    Py_ssize_t split_bytes; /* chunks this long or longer are read in two halves at once (0: never) */
    Py_ssize_t splits;      /* chunks read so (a split that declined and was read whole does not count) */
    int busy; /* a feed is running (without the GIL): the columns are not to be touched */
} Scanner;

static PyObject *bytes_of(const Buf *b) { return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len); }

static int put(PyObject *d, const char *key, PyObject *value) {
    if (!value) return -1;
    int r = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return r;
}

/* (validity bitmap or None when nothing is null, values) and (validity or None, offsets, data), copied out: the
 * scanner's buffers are kept for the next rows (handing them over and allocating afresh was faster by a little and
 * held more memory: glibc serves the new buffers from freed, resident memory) */
static PyObject *int_tuple(const IntCol *c) {
    if (c->v.nulls) return Py_BuildValue("(NN)", bytes_of(&c->v.valid), bytes_of(&c->data));
    return Py_BuildValue("(ON)", Py_None, bytes_of(&c->data));
}

static PyObject *str_tuple(const StrCol *c) {
    if (c->v.nulls)
        return Py_BuildValue("(NNN)", bytes_of(&c->v.valid), bytes_of(&c->offsets), bytes_of(&c->data));
    return Py_BuildValue("(ONN)", Py_None, bytes_of(&c->offsets), bytes_of(&c->data));
}

static PyObject *scanner_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *keywords[] = {"split_bytes", NULL};
    Py_ssize_t split_bytes = SPLIT_BYTES;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:Scanner", keywords, &split_bytes)) return NULL;
    if (split_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "Scanner: split_bytes must be >= 0");
        return NULL;
    }
    Scanner *self = (Scanner *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->split_bytes = split_bytes;
    memset(&self->o, 0, sizeof self->o);
    memset(&self->o2, 0, sizeof self->o2);
    if (out_reset(&self->o) || out_reset(&self->o2)) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void scanner_dealloc(Scanner *self) {
    out_free(&self->o);
    out_free(&self->o2);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *feed(Scanner *self, PyObject *arg, Py_ssize_t start, Py_ssize_t end, int items_only) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (end < 0) end = view.len;
    if (start < 0 || start > end || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "feed_items: start and end must lie within the buffer, start <= end");
        return NULL;
    }
    if (self->busy) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "Scanner: used from two threads at once");
        return NULL;
    }
    self->busy = 1;
    Mark m;
    mark(&self->o, &m);
    int r;
    Py_BEGIN_ALLOW_THREADS /* the bytes are immutable and held by the view; the inflate thread and the caller's
                            * other threads run meanwhile */
    r = scan_split(&self->o, &self->o2, (const unsigned char *)view.buf + start, (size_t)(end - start), items_only,
                   (size_t)self->split_bytes, &m, &self->splits);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&view);
    if (r) {
        rollback(&self->o, &m);
        if (r == OOM) return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    PyObject *rest = self->o.n_rest ? bytes_of(&self->o.rest) : (Py_INCREF(Py_None), Py_None);
    if (!rest) return NULL;
    return Py_BuildValue("(NO)", rest, self->o.exact ? Py_True : Py_False);
}

static PyObject *scanner_feed(Scanner *self, PyObject *arg) { return feed(self, arg, 0, -1, 0); }

static PyObject *scanner_feed_items(Scanner *self, PyObject *args) {
    PyObject *buf;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "Onn", &buf, &start, &end)) return NULL;
    return feed(self, buf, start, end, 1);
}

static PyObject *scanner_pending(Scanner *self, PyObject *unused) {
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner: used from two threads at once");
        return NULL;
    }
    Out *o = &self->o;
    return PyLong_FromSize_t(o->ts.v.n + o->f_ts.v.n + o->m_ts.v.n);
}

static PyObject *scanner_splits(Scanner *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->splits);
}

static PyObject *scanner_take(Scanner *self, PyObject *unused) {
    (void)unused;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner: used from two threads at once");
        return NULL;
    }
    Out *o = &self->o;
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int bad = 0;
    for (int i = 0; i < N_STR && !bad; i++) bad = put(d, STR_NAMES[i], str_tuple(str_col(o, i)));
    for (int i = 0; i < N_INT && !bad; i++) bad = put(d, INT_NAMES[i], int_tuple(int_col(o, i)));
    if (!bad) bad = put(d, "rows", PyLong_FromSize_t(o->ts.v.n));
    if (!bad) bad = put(d, "flows", PyLong_FromSize_t(o->f_ts.v.n));
    if (!bad) bad = put(d, "memory", PyLong_FromSize_t(o->m_ts.v.n));
    size_t markers = 0;
    const int64_t *is_marker = (const int64_t *)o->marker.data.p;
    for (size_t i = 0; i < o->marker.data.len / sizeof *is_marker; i++) markers += is_marker[i] != 0;
    if (!bad) bad = put(d, "markers", PyLong_FromSize_t(markers));
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    if (out_reset(o)) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    return d;
}

static PyMethodDef scanner_methods[] = {
    {"feed", (PyCFunction)scanner_feed, METH_O,
     "feed(chunk) -> (rest, exact) | None\n\nRead one chunk of the event array (\"[{...},...]\") into the columns. "
     "None: declined (nothing kept; decode it with the Python path). Else the events left to the Python path as "
     "one JSON array (metadata and counter events) or None, and whether the chunk reads float times exactly."},
    {"feed_items", (PyCFunction)scanner_feed_items, METH_VARARGS,
     "feed_items(buffer, start, end) -> (rest, exact) | None\n\nAs feed, for the items alone (\"{...},{...}\") "
     "in buffer[start:end], read in place."},
    {"pending", (PyCFunction)scanner_pending, METH_NOARGS, "pending() -> int: rows held (events, flows, memory)."},
    {"splits", (PyCFunction)scanner_splits, METH_NOARGS,
     "splits() -> int: chunks read as two halves at once so far."},
    {"take", (PyCFunction)scanner_take, METH_NOARGS,
     "take() -> dict: the columns held (Arrow buffers), and start afresh."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opscope.ingest.chrome._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(split_bytes=262144)\n\nChunks of a Chrome trace's event array read straight into column "
              "buffers (the common case); chunks of split_bytes or more (0: none) as two halves on two threads.",
    .tp_new = scanner_new,
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_methods = scanner_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan",
                                    "Chrome trace chunks straight into column buffers (the common case).", -1,
                                    NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    init_tables();
    for (int i = 0; i < K_TOP; i++) TOP_LENS[i] = strlen(TOP_KEYS[i]);
    for (int i = 0; i < A_KEYS; i++) ARG_LENS[i] = strlen(ARG_KEYS[i]);
    key_table(TOP_KEYS, TOP_LENS, K_TOP, TOP_TABLE);
    key_table(ARG_KEYS, ARG_LENS, A_KEYS, ARG_TABLE);
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
