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
            return con.execute(sql).to_arrow_table()
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"SQL error: {first}") from None
    finally:
        con.close()
