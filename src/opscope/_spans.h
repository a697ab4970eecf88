/* Searches over spans in time order, shared by _loops.c and _graph.c. */
#ifndef OPSCOPE_SPANS_H
#define OPSCOPE_SPANS_H

#include <Python.h>
#include <stdint.h>

/* The last i with s[i] <= t (-1: none) in the ascending s[0..n), searched from ``hint`` outward by doubling steps,
 * then by halving: O(log d) for an answer d places from the hint, so queries in time order cost a few steps each. */
static inline Py_ssize_t last_at_or_before(const int64_t *s, Py_ssize_t n, int64_t t, Py_ssize_t hint) {
    if (n == 0) return -1;
    if (hint < 0) hint = 0;
    if (hint >= n) hint = n - 1;
    Py_ssize_t a, b; /* the answer + 1 lies in [a, b] */
    if (s[hint] <= t) {
        Py_ssize_t step = 1;
        a = hint + 1;
        while (a + step - 1 < n && s[a + step - 1] <= t) {
            a += step;
            step *= 2;
        }
        b = a + step - 1 < n ? a + step - 1 : n;
    } else {
        Py_ssize_t step = 1;
        b = hint;
        while (b - step >= 0 && s[b - step] > t) {
            b -= step;
            step *= 2;
        }
        a = b - step >= 0 ? b - step + 1 : 0;
    }
    while (a < b) { /* the first index in [a, b) whose start is after t */
        Py_ssize_t mid = a + (b - a) / 2;
        if (s[mid] <= t) a = mid + 1;
        else b = mid;
    }
    return a - 1;
}

/* Whether the spans [s[i], e[i]) are disjoint and in time order (none ends before it starts; they may touch). */
static inline int spans_in_order(const int64_t *s, const int64_t *e, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (e[i] < s[i] || (i && s[i] < e[i - 1])) return 0;
    return 1;
}

/* Whether the spans [s[i], e[i]) are disjoint and in time order (spans_in_order), with through[i] their lengths
 * summed up to and with i (as covered_by reads them) written as it checks; stops at the first out of order. */
static inline int spans_through(const int64_t *s, const int64_t *e, Py_ssize_t n, int64_t *through) {
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (e[i] < s[i] || (i && s[i] < e[i - 1])) return 0;
        total += (uint64_t)e[i] - (uint64_t)s[i];
        through[i] = (int64_t)total;
    }
    return 1;
}

/* How much of [lo, hi) the disjoint spans [s[i], e[i]) in time order cover, given through[i] (their lengths summed up
 * to and with i); *hint: the last search's answer (see last_at_or_before), updated. */
static inline int64_t covered_by(const int64_t *s, const int64_t *e, const int64_t *through, Py_ssize_t n, int64_t lo,
                                 int64_t hi, Py_ssize_t *hint) {
    if (hi <= lo) return 0;
    int64_t before[2];
    int64_t at[2] = {lo, hi};
    for (int k = 0; k < 2; k++) {
        Py_ssize_t i = *hint = last_at_or_before(s, n, at[k], *hint);
        before[k] = i < 0 ? 0 : through[i] - e[i] + (at[k] < e[i] ? at[k] : e[i]);
    }
    return before[1] > before[0] ? before[1] - before[0] : 0;
}

#endif
