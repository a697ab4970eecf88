"""Device work charged to ops: for every device event (kernel, copy, memset, collective), the op it counts for,
that op's input shapes and the event's kernel class, so that device time can be added up per op without
counting an event twice (each event is charged to exactly one op).

Which op, at two levels:

- ``launching``: the innermost op around the runtime call that launched the event (what
  :func:`opscope.analyses.links.device_links` gives): ``aten::addmm``, ``aten::cudnn_convolution``,
  ``aten::_flash_attention_forward``. The finest level, but the op that launches a kernel can depend on the
  vendor: a convolution is ``aten::cudnn_convolution`` on CUDA and ``aten::miopen_convolution`` on ROCm.
- ``api`` (what the user's code called): the outermost op above the launch that has a Python API
  (``aten::conv2d`` for ``torch.nn.functional.conv2d``, ``aten::linear``, ``aten::scaled_dot_product_attention``,
  ``aten::layer_norm``), else the launching op. Above the vendor's choices, below wrappers that have no API
  (a ``Torch-Compiled Region``, an autograd node, a 2021 Kineto trace's ``ProfilerStep#N`` op) that would lump
  unrelated work into one row, as the plain outermost op does.

An event whose launch has no op around it (a graph replay, a trace without host events) has a null op.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined
from opscope.analyses.kernel_classes import classify
from opscope.analyses.links import device_links
from opscope.analyses.names import maps_to_value, python_api
from opscope.errors import UsageError
from opscope.model.memo import memoized
from opscope.model.schema import LAUNCHING_OP_KINDS, kind_mask
from opscope.model.trace import Trace

#: Which op an event is charged to (see the module's docstring); the first is the default.
OP_LEVELS = ("api", "launching")
_MAX_CLIMB = 512

WORK_SCHEMA = pa.schema([("device_row", pa.int64()), ("kind", pa.string()), ("dur_ns", pa.int64()),
                         ("step", pa.int64()), ("op", pa.string()), ("shapes", pa.string()),
                         ("class", pa.string())])


def check_level(level: str) -> str:
    if level not in OP_LEVELS:
        raise UsageError(f"--op-level must be one of {', '.join(OP_LEVELS)} (got {level!r})")
    return level


@memoized(keep=True, ignore=("links",))
def device_work(trace: Trace, level: str = "api", framework: str | None = None,
                links: dict[str, pa.Array] | None = None) -> pa.Table:
    """One row per device event, in time order: ``device_row`` (its event row), ``kind``, ``dur_ns``, ``step``
    (the step of the host call that launched it), ``op`` (the op it is charged to at ``level``; null when its
    launch has none), ``shapes`` (that op's input shapes; null when it has none) and ``class`` (its kernel
    class, from its name or its launching op: :mod:`opscope.analyses.kernel_classes`). ``framework`` tells
    :func:`opscope.analyses.names.python_api` how to read op names (``pytorch``; None: guess); ``links`` are the
    trace's :func:`opscope.analyses.links.device_links` when the caller has them already. Kept in the cache entry of
    a cached trace for the next command."""
    check_level(level)
    return _device_work(trace, level, framework, links)


def _device_work(trace: Trace, level: str, framework: str | None, links: dict[str, pa.Array] | None) -> pa.Table:
    links = links if links is not None else device_links(trace)
    rows = links["device_row"]
    if len(rows) == 0:
        return WORK_SCHEMA.empty_table()
    ev = trace.select(["kind", "name", "dur_ns", "step", "shapes", "parent"])
    launching = links["op_row"]
    charged = launching if level == "launching" else api_op_rows(ev, launching, framework)
    kinds = combined(pc.take(ev["kind"], rows)).cast(pa.string())
    launching_names = combined(pc.take(ev["name"], launching))  # null where no op launched it
    return pa.table({
        "device_row": rows,
        "kind": kinds,
        "dur_ns": combined(pc.take(ev["dur_ns"], rows)),
        "step": combined(pc.take(ev["step"], rows)),
        "op": combined(pc.take(ev["name"], charged)).cast(pa.string()),
        "shapes": pc.if_else(pc.equal(combined(pc.take(ev["shapes"], charged)), ""), pa.scalar(None, pa.string()),
                             combined(pc.take(ev["shapes"], charged))),
        "class": classify(kinds, combined(pc.take(ev["name"], rows)), launching_names),
    }, schema=WORK_SCHEMA)


def api_op_rows(events: pa.Table, launching: pa.Array, framework: str | None = None) -> pa.Array:
    """For each launching op row (null: none), the outermost op above it (itself included) that has a Python
    API, else the launching op itself. ``events`` needs ``kind``, ``name`` and ``parent``."""
    parents = combined(events["parent"])
    framework = framework or None
    has_api = pc.and_(combined(kind_mask(events, LAUNCHING_OP_KINDS)),
                      maps_to_value(events["name"], lambda op: python_api(op, framework)))
    outermost = pc.if_else(pc.fill_null(pc.take(has_api, launching), False), launching,
                           pa.scalar(None, pa.int64()))
    current = pc.take(parents, launching)
    for _ in range(_MAX_CLIMB):  # ops nest among ops, annotations and runtime calls only (the model's host layer)
        if current.null_count == len(current):
            break
        here = pc.fill_null(pc.take(has_api, current), False)
        outermost = pc.if_else(here, current, outermost)
        current = pc.take(parents, current)
    return combined(pc.coalesce(outermost, launching))
