"""ONNX Runtime's profile (``SessionOptions.enable_profiling``): a bare JSON array of Chrome ``"X"`` events.

ORT writes one event per graph node run in category ``Node``, named ``<node>_kernel_time`` (older builds add
``<node>_fence_before``/``_fence_after``), with the op type, execution provider and input/output types and shapes
in ``args``; one ``model_run`` per ``InferenceSession.run`` and its executor span (``SequentialExecutor::Execute``),
plus ``model_loading_uri``/``session_initialization`` in category ``Session``; and, with a GPU provider built with
profiling, its CUPTI/roctracer records in category ``Kernel`` (``stream``, ``grid_*``, ``block_*``).

The model, event by event:

- ``<node>_kernel_time`` -> ``cpu_op`` named by ``args.op_name`` (the op TYPE: ``Conv``, like ``aten::conv2d``, so
  ``ops`` and ``diff`` group by type); its args JSON keeps ORT's keys and gains ``"node": "<node name>"``;
  ``shapes``/``dtypes`` come from ``input_type_shape`` (``[[8,3,112,112],[32,3,3,3]]``, ``["float","float"]``),
  ``output_shapes`` from ``output_type_shape`` (``[[8,32,56,56]]``). ORT leaves out of ``input_type_shape`` the
  initializers a kernel has prepacked (a ``Gemm``'s or ``MatMul``'s constant B): the work model reads the output
  shapes to tell what they were.
- ``_fence_before``/``_fence_after`` -> ``overhead`` (the wait for the node's inputs, not its work).
- ``model_run`` -> the trace's steps 0..n-1 in time order (and a ``user_annotation``). Every ``Session`` event is a
  ``user_annotation``: they are ranges around the nodes, not calls that do work of their own. (As ``runtime``, the
  executor span would count as CPU busy and swallow the nodes' self time.)
- ``Kernel`` -> ``kernel`` (``memcpy`` for ORT's ``Memcpy*`` names) on device 0 (ORT does not record the device
  ordinal), on the stream ORT gives.
- anything else is kept as the Chrome reader reads it, and said in the warnings.

The Chrome JSON parser (:mod:`opscope.ingest.chrome`) does the reading; :mod:`.builder` is its builder: it sees each
batch of rows and maps it before the rows are stored, so nothing is held twice. This package lives beside
``chrome/``, not inside it, because it is a format of its own (its own name in the registry and in
``metadata.format``), unlike the TF timelines that the Chrome reader recognises among Chrome traces. Like
``chrome/__init__``, this module stays light: the parser and the builder are imported by ``read``.
"""

from __future__ import annotations

import re
from pathlib import Path

from opscope.model.trace import Trace

FORMAT = "onnxruntime_json"
TOOL = "onnxruntime"
KERNEL_SUFFIX = "_kernel_time"
FENCE_SUFFIXES = ("_fence_before", "_fence_after")
STEP_EVENT = "model_run"
#: ORT's categories -> kinds (``Node`` rows are then re-kinded by their name suffix).
CATEGORIES = {"Session": "user_annotation", "Node": "cpu_op", "Kernel": "kernel"}
#: ORT writes ``{"cat" : "Session",`` with a space before the colon; other writers of the same events may not.
_ORT_CATEGORY = re.compile(rb'"cat"\s*:\s*"(?:Session|Node)"')
_ORT_MARK = re.compile(rb'"name"\s*:\s*"(?:model_run|model_loading_uri|model_loading_array|session_initialization'
                       rb'|SequentialExecutor::Execute|[^"]{0,4096}?(?:_kernel_time|_fence_before|_fence_after))"'
                       rb'|"provider"\s*:\s*"\w*ExecutionProvider"')


class OnnxRuntimeJsonReader:
    """ONNX Runtime profile JSON (a bare array of Chrome events in ORT's categories), plain or gzip."""

    name = FORMAT

    def sniff(self, path: Path, head: bytes) -> bool:
        """A JSON array whose events are in ORT's categories (``Session``/``Node``) with ORT's event names."""
        text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
        return text.startswith(b"[") and bool(_ORT_CATEGORY.search(head)) and bool(_ORT_MARK.search(head))

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.ingest.chrome import reader  # the parser: only when a file is parsed
        from opscope.ingest.onnxruntime.builder import OrtBuilder

        builder = OrtBuilder(str(path), keep_args=keep_args)
        return reader.read(path, progress=progress, keep_args=True, builder=builder, categories=CATEGORIES)


READER = OnnxRuntimeJsonReader()
