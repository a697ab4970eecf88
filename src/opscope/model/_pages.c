/* Mapped file pages out of the process's resident set, from a thread of its own that never takes the GIL
 * (opscope.model.mapped's releaser where this is built).
 *
 * watch(address, length, period_s) registers a read-only file mapping; every period_s a detached thread calls
 * madvise(MADV_DONTNEED) on each registered mapping: the pages leave the process (they stay in the page cache, and
 * a later read maps them back in). unwatch(address) removes one and returns only when no madvise on it is under way,
 * so the mapping may be unmapped then. The thread ends when nothing is registered.
 *
 * Why C: a Python thread needs the GIL for every release, and while two analysis threads run it waited 10-20 ms (up
 * to 86 ms) for it, long enough for an analysis to touch 100 MB of columns in between.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_REGIONS 256

typedef struct {
    void *start;
    size_t length;
} Region;

static Region regions[MAX_REGIONS];
static int n_regions = 0;
static int running = 0;  /* the thread exists */
static long period_ns = 10000000;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *release_loop(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&lock);
        long ns = period_ns;
        pthread_mutex_unlock(&lock);
        struct timespec pause = {ns / 1000000000L, ns % 1000000000L};
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&lock);
        if (n_regions == 0) {
            running = 0;
            pthread_mutex_unlock(&lock);
            return NULL;
        }
        for (int i = 0; i < n_regions; i++) {
            madvise(regions[i].start, regions[i].length, MADV_DONTNEED);
        }
        pthread_mutex_unlock(&lock);
    }
}

/* A forked child has no release thread, and the lock may have been held by it at the fork: the child starts with
 * none registered and the lock free (its inherited mappings are simply not released). */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }
static void after_fork_child(void) {
    n_regions = 0;
    running = 0;
    pthread_mutex_unlock(&lock);
}

static PyObject *watch(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long address;
    Py_ssize_t length;
    double period_s;
    if (!PyArg_ParseTuple(args, "Knd", &address, &length, &period_s)) {
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    if (length <= 0 || period_s <= 0 || page <= 0 || address % (unsigned long long)page != 0) {
        PyErr_SetString(PyExc_ValueError, "watch: a page-aligned mapping and a positive length and period");
        return NULL;
    }
    int ok = 0;
    pthread_mutex_lock(&lock);
    if (n_regions < MAX_REGIONS) {
        regions[n_regions].start = (void *)(uintptr_t)address;
        regions[n_regions].length = (size_t)length;
        n_regions++;
        period_ns = (long)(period_s * 1e9);
        ok = 1;
        if (!running) {
            pthread_t thread;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&thread, &attr, release_loop, NULL) == 0) {
                running = 1;
            } else {
                n_regions--;  /* no thread: the caller releases its pages another way */
                ok = 0;
            }
            pthread_attr_destroy(&attr);
        }
    }
    pthread_mutex_unlock(&lock);
    return PyBool_FromLong(ok);
}

static PyObject *unwatch(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long address;
    if (!PyArg_ParseTuple(args, "K", &address)) {
        return NULL;
    }
    int removed = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&lock);  /* held by the thread during its madvise calls: after this, none is under way */
    for (int i = 0; i < n_regions; i++) {
        if ((uintptr_t)regions[i].start == (uintptr_t)address) {
            regions[i] = regions[n_regions - 1];
            n_regions--;
            removed = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(removed);
}

static PyObject *watched(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&lock);
    int n = n_regions, alive = running;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue("(ii)", n, alive);
}

static PyMethodDef methods[] = {
    {"watch", watch, METH_VARARGS,
     "watch(address, length, period_s) -> bool: release this read-only file mapping's pages every period_s "
     "(False: not taken, release them another way)"},
    {"unwatch", unwatch, METH_VARARGS,
     "unwatch(address) -> bool: stop releasing the mapping at address; returns once no release of it is under way"},
    {"watched", watched, METH_NOARGS, "watched() -> (mappings registered, whether the thread runs)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pages", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pages(void) {
    static int forks_handled = 0;
    if (!forks_handled) {
        if (pthread_atfork(before_fork, after_fork_parent, after_fork_child) != 0) {
            PyErr_SetString(PyExc_OSError, "_pages: pthread_atfork failed");
            return NULL;
        }
        forks_handled = 1;
    }
    return PyModule_Create(&module);
}
