"""Trace-event categories and the event kind each reads as.

The Chrome reader classifies every event by its (lower-cased) category through :data:`CATEGORY_KINDS`; the Chrome
export keeps an event's own category only when it reads back as the same kind. Both sides use this one table, so
an exported file reads back into the same model.
"""

from __future__ import annotations

#: Trace-event category (lower-cased) -> model kind.
CATEGORY_KINDS: dict[str, str] = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",  # legacy Kineto schema
    "op": "cpu_op",  # TF timeline; device rows are re-kinded from process names
    "python_function": "python",
    "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_profiler_range": "gpu_annotation",
    "kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "hip_runtime": "runtime",
    "mtia_runtime": "runtime",
    "tf_exec": "runtime",
    "threadpool_event": "runtime",
    "cuda_sync": "sync",
    "trace": "profiler",
    "overhead": "overhead",
    "cpu_instant_event": "marker",
}
