"""SQL over the model: DuckDB reads the Arrow tables in place (no copy)."""

from __future__ import annotations

import pyarrow as pa

from opscope.errors import UsageError
from opscope.model.trace import Trace


def run_sql(trace: Trace, sql: str) -> pa.Table:
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for name, table in trace.tables().items():
            if name == "args" and "args" not in sql.lower():
                continue  # the args table is the widest; load it only when asked for
            con.register(name, table)
        try:
            return _plain_numbers(con.sql(sql).to_arrow_table())
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"SQL error: {first}") from None
    finally:
        con.close()


def _plain_numbers(table: pa.Table) -> pa.Table:
    """DuckDB sums int64 into HUGEINT (decimal in Arrow); give JSON/CSV plain integers back."""
    for i, f in enumerate(table.schema):
        if pa.types.is_decimal(f.type):
            target = pa.int64() if f.type.scale == 0 else pa.float64()
            try:
                column = table.column(i).cast(target)
            except pa.ArrowInvalid:
                column = table.column(i).cast(pa.float64())
            table = table.set_column(i, f.name, column)
    return table
