"""Which op a framework's time is charged to: the outermost op of the contiguous chain of framework ops above an op
(``aten::linear`` around ``aten::addmm``), the op a model calls and ``opscope repro`` reproduces."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.arrays import combined, name_match
from opscope.model.schema import LAUNCHING_OP_KINDS, kind_mask

#: A framework op name: ``namespace::name`` (aten, c10d, vllm, quantized...); an optional ``.overload``.
FRAMEWORK_OP = r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$"
#: Framework-op-shaped names that are wrappers, not ops: autograd nodes and the profiler's own.
WRAPPER = re.compile(r"^(autograd|profiler|torch_compile|c10d_functional_wrapper)::")
_MAX_CLIMB = 512


def chain_mask(events: pa.Table) -> pa.Array:
    """Rows that are framework ops a case can climb through (cpu_op kind, or an op a graph capture recorded;
    ``ns::name``, not a wrapper)."""
    names = events["name"]
    is_op = name_match(names, FRAMEWORK_OP, nulls=False)
    wrapper = name_match(names, WRAPPER.pattern, nulls=False)
    return combined(pc.and_(combined(kind_mask(events, LAUNCHING_OP_KINDS)), pc.and_not(combined(is_op),
                                                                                   combined(wrapper))))


def case_rows_of(events: pa.Table, chain: pa.Array, rows: pa.Array) -> pa.Array:
    """For op rows (null: none), the outermost op of the contiguous chain of framework ops above (itself
    included); an op outside the chain (a TF op type, ``record_param_comms``) is its own case."""
    parents = combined(events["parent"])
    top = rows
    current = pc.if_else(pc.fill_null(pc.take(chain, rows), False), rows, pa.scalar(None, pa.int64()))
    for _ in range(_MAX_CLIMB):
        current = pc.take(parents, current)
        if current.null_count == len(current):
            break
        climb = pc.fill_null(pc.take(chain, current), False)
        top = pc.if_else(climb, current, top)
        current = pc.if_else(climb, current, pa.scalar(None, pa.int64()))
    return combined(top)
