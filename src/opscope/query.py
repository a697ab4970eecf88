"""SQL over the model: DuckDB reads the Arrow tables in place (no copy)."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from opscope.errors import UsageError
from opscope.model.trace import Trace
from opscope.report import Column, Report, single

#: The model's duration columns: the only ones a query result shows in time units on the terminal. Every
#: other column is shown as it is: a name ending in ``_ns`` may be a timestamp (``ts_ns``), and an alias
#: says nothing sure about what the SQL computed.
DURATION_COLUMNS = ("dur_ns", "self_ns", "op_self_ns")
#: The model's byte counts, shown as KiB/MiB/GiB.
BYTE_COLUMNS = ("bytes",)
QUERY_LEGEND = ("ts_ns is an absolute time in ns (the trace's clock); only the model's own durations (dur_ns, "
                "self_ns, op_self_ns) are shown in time units and bytes in KiB/MiB; other columns as they are, "
                "in the units of the SQL (times in ns)")


#: DuckDB settings of a sandboxed query: no file system, network or extension access, and no way to turn them
#: back on from the SQL (DuckDB refuses to re-enable external access while the database runs).
SANDBOX: dict[str, str | bool | int | float | list[str]] = {
    "enable_external_access": False, "autoinstall_known_extensions": False, "autoload_known_extensions": False,
    "lock_configuration": True}


def run_sql(trace: Trace | Mapping[str, object], sql: str, sandbox: bool = False) -> pa.Table:
    """Run DuckDB SQL over the trace's tables, or over named tables (a job's rank-partitioned Arrow datasets,
    which DuckDB scans lazily: only the columns and ranks the SQL needs are read). The SQL is the user's own and,
    like any DuckDB session, may read and write the files the user can (``read_csv('/etc/passwd')``, ``COPY ...
    TO``); ``sandbox`` takes that away (:data:`SANDBOX`) for SQL that comes from someone else, e.g. behind a
    shared service."""
    import duckdb

    con = duckdb.connect(":memory:", config=SANDBOX if sandbox else {})
    try:
        tables = trace.tables() if isinstance(trace, Trace) else trace
        for name, table in tables.items():
            if name == "args" and "args" not in sql.lower():
                continue  # the args table is the widest; load it only when asked for
            con.register(name, table)
        try:
            result = con.sql(sql)
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"SQL error: {first}") from None
        if result is None:  # empty SQL, a comment, or a statement that returns no rows (SET ...)
            raise UsageError("the SQL gives no table; give a select, e.g. \"select * from events limit 5\"")
        table = result.to_arrow_table()
        if isinstance(trace, Trace):
            trace.verify()  # DuckDB read the columns in place: a cache file changed meanwhile is said, not shown
        return _plain_numbers(table)
    finally:
        con.close()


def query_report(table: pa.Table, limit: int | None) -> Report:
    """A query's result as a Report: units only for the columns whose meaning is known."""
    plain = {n: Column(unit="plain") for n in table.column_names if n not in DURATION_COLUMNS + BYTE_COLUMNS}
    return single(table, "query", limit, legend=QUERY_LEGEND, columns=plain)


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
