/* Cache files read in place that an outside truncation cannot kill the process with (opscope.model.mapped).
 *
 * Mapping(fd, length) maps `length` bytes of the file open on `fd`, read-only, and exports them as a read-only buffer
 * (pyarrow reads its columns in place); the object unmaps them when it goes, after unregistering them. A read of a
 * page that the file no longer holds (truncated from outside after it was mapped) raises SIGBUS, whose default
 * action ends the process without a word. The handler this module installs with its first mapping maps zero pages
 * over the rest of the faulting mapping, so the read goes on, and marks the mapping damaged: the Python side asks
 * (`damaged`) before it trusts what was computed from it, and says which file changed. A SIGBUS anywhere else goes
 * where it would have gone without this module (the handler before it, e.g. faulthandler's, or the default action).
 *
 * The handler reads the registry without a lock (a signal handler may not take one): each slot's start is written
 * last when it is filled and first when it is emptied, and a slot is emptied only once nothing can read the mapping.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_MAPPINGS 1024

typedef struct {
    _Atomic uintptr_t start;  /* 0: a free slot */
    _Atomic size_t length;
    _Atomic int damaged;
} Slot;

static Slot slots[MAX_MAPPINGS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  /* for filling and emptying slots, and installing */
static struct sigaction previous;
static long page_size = 4096;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    if (info != NULL && info->si_code > 0) {  /* raised by the kernel for this access, not sent by kill() */
        uintptr_t address = (uintptr_t)info->si_addr;
        for (int i = 0; i < MAX_MAPPINGS; i++) {
            uintptr_t start = atomic_load(&slots[i].start);
            if (start == 0) {
                continue;
            }
            size_t length = atomic_load(&slots[i].length);
            if (address >= start && address < start + length) {
                uintptr_t from = address & ~(uintptr_t)(page_size - 1);
                /* zero pages from the fault to the end: what the file no longer holds reads as zeros */
                if (mmap((void *)from, start + length - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                         0) != MAP_FAILED) {
                    atomic_store(&slots[i].damaged, 1);
                    return;  /* the read is done again, on a zero page */
                }
                break;
            }
        }
    }
    /* not a fault in a registered mapping: as without this handler */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);  /* a fault refaults on return and ends the process; a signal sent is sent again */
    if (info == NULL || info->si_code <= 0) {
        raise(sig);
    }
}

/* Install the handler where it is not the current one (first use, or someone installed another since: that one
 * becomes the handler of the faults that are not ours). Called with the lock held. */
static int install(void) {
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) != 0) {
        return -1;
    }
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus) {
        return 0;
    }
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = on_sigbus;
    mine.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    return sigaction(SIGBUS, &mine, &previous);
}

typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t length;
    int slot;  /* -1: none (an empty mapping) */
} Mapping;

static PyObject *Mapping_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fd", "length", NULL};
    int fd;
    Py_ssize_t length;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "in", names, &fd, &length)) {
        return NULL;
    }
    if (length <= 0) {
        PyErr_SetString(PyExc_ValueError, "Mapping: a positive length");
        return NULL;
    }
    Mapping *self = (Mapping *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->slot = -1;
    void *data;
    Py_BEGIN_ALLOW_THREADS
    data = mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, fd, 0);
    Py_END_ALLOW_THREADS
    if (data == MAP_FAILED) {
        Py_DECREF(self);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->data = data;
    self->length = length;
    pthread_mutex_lock(&lock);
    int slot = -1;
    if (install() == 0) {
        for (int i = 0; i < MAX_MAPPINGS; i++) {
            if (atomic_load(&slots[i].start) == 0) {
                slot = i;
                break;
            }
        }
    }
    if (slot >= 0) {
        atomic_store(&slots[slot].damaged, 0);
        atomic_store(&slots[slot].length, (size_t)length);
        atomic_store(&slots[slot].start, (uintptr_t)data);  /* last: the handler sees a whole slot */
        self->slot = slot;
    }
    pthread_mutex_unlock(&lock);
    if (slot < 0) {  /* no handler or no free slot: not guarded, so not given out (Py_DECREF unmaps it) */
        Py_DECREF(self);
        PyErr_SetString(PyExc_OSError, "Mapping: cannot guard another mapping");
        return NULL;
    }
    return (PyObject *)self;
}

static void Mapping_dealloc(Mapping *self) {
    if (self->slot >= 0) {
        /* nothing reads the mapping any more (no buffer of it is left): out of the registry, then unmapped */
        pthread_mutex_lock(&lock);
        atomic_store(&slots[self->slot].start, 0);
        pthread_mutex_unlock(&lock);
    }
    if (self->data != NULL) {
        munmap(self->data, (size_t)self->length);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Mapping_getbuffer(Mapping *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->length, 1, flags);
}

static PyBufferProcs Mapping_as_buffer = {(getbufferproc)Mapping_getbuffer, NULL};

static PyObject *Mapping_damaged(Mapping *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(self->slot >= 0 && atomic_load(&slots[self->slot].damaged));
}

static PyMethodDef Mapping_methods[] = {
    {"damaged", (PyCFunction)Mapping_damaged, METH_NOARGS,
     "damaged() -> bool: whether a read found pages the file no longer holds (they read as zeros since)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opscope.model._guard.Mapping",
    .tp_basicsize = sizeof(Mapping),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Mapping(fd, length): the file's first length bytes mapped read-only, as a buffer; a truncation from "
              "outside reads as zeros and marks it damaged() instead of ending the process with SIGBUS",
    .tp_new = Mapping_new,
    .tp_dealloc = (destructor)Mapping_dealloc,
    .tp_as_buffer = &Mapping_as_buffer,
    .tp_methods = Mapping_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_guard", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__guard(void) {
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0) {
        page_size = page;
    }
    if (PyType_Ready(&MappingType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&MappingType);
    if (PyModule_AddObject(m, "Mapping", (PyObject *)&MappingType) < 0) {
        Py_DECREF(&MappingType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
