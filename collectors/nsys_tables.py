"""Table access over the two Nsight Systems export forms: SQLite (``--type sqlite``) and a Parquet
folder (``--type parquetdir``, one ``TABLE.parquet`` per table). Both answer the same three
questions (which tables, which columns, read these columns), so the readers above never see SQL
dialects or file layouts.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xstage_trace.base.errors import InputError


class SqliteTables:
    """Tables of an nsys SQLite export. Column reads go through the ADBC SQLite driver (C, straight
    to Arrow) when it is installed, else through the standard library's sqlite3."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._adbc = None
        try:
            self.conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        except sqlite3.DatabaseError as exc:
            raise InputError(self.path, f"not a readable SQLite database ({exc})", "pass an nsys export: nsys export --type sqlite REPORT.nsys-rep") from None
        self._tables = set(names)
        self._cols: dict[str, list[str]] = {}

    def tables(self) -> set[str]:
        return self._tables

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.conn.execute(f"PRAGMA table_info([{table}])")] if table in self._tables else []
        return self._cols[table]

    def read(self, table: str, columns: list[str]) -> pa.Table:
        """Read ``columns`` of ``table`` into Arrow."""
        sql = "SELECT " + ", ".join(f"[{c}]" for c in columns) + f" FROM [{table}]"
        fast = self._read_adbc(sql)
        return fast if fast is not None else self._read_sqlite3(sql, columns)

    def _read_adbc(self, sql: str) -> pa.Table | None:
        try:
            if self._adbc is None:
                import adbc_driver_sqlite.dbapi as adbc

                self._adbc = adbc.connect(f"file:{self.path}?mode=ro")
            cur = self._adbc.cursor()
            try:
                cur.execute(sql)
                return cur.fetch_arrow_table()
            finally:
                cur.close()
        except Exception:  # driver missing, or a column whose SQLite types vary: use sqlite3
            return None

    def _read_sqlite3(self, sql: str, columns: list[str]) -> pa.Table:
        """Column-wise fetch in chunks through the standard library (no per-row objects kept)."""
        cur = self.conn.execute(sql)
        chunks: list[list] = [[] for _ in columns]
        while True:
            rows = cur.fetchmany(262144)
            if not rows:
                break
            for i, col in enumerate(zip(*rows)):
                chunks[i].append(_to_array(col))
        return pa.table({c: (pa.chunked_array(ch) if ch else pa.array([], pa.null())) for c, ch in zip(columns, chunks)})

    def close(self) -> None:
        self.conn.close()
        if self._adbc is not None:
            self._adbc.close()


def _to_array(values: tuple) -> pa.Array:
    """One fetched column to Arrow: integers through numpy (fast path), anything else through Arrow."""
    first = next((v for v in values if v is not None), None)
    if isinstance(first, int) and not isinstance(first, bool):
        try:
            return pa.array(np.fromiter(values, dtype=np.int64, count=len(values)))
        except (TypeError, OverflowError):
            pass
    return pa.array(values)


class ParquetDirTables:
    """Tables of an nsys ``--type parquetdir`` export (a folder of ``TABLE.parquet``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._files = {p.stem: p for p in self.path.glob("*.parquet")}
        if not self._files:
            raise InputError(self.path, "folder holds no .parquet tables", "pass an nsys parquetdir export: nsys export --type parquetdir REPORT.nsys-rep")

    def tables(self) -> set[str]:
        return set(self._files)

    def columns(self, table: str) -> list[str]:
        if table not in self._files:
            return []
        return list(pq.read_schema(self._files[table]).names)

    def read(self, table: str, columns: list[str]) -> pa.Table:
        return pq.read_table(self._files[table], columns=columns)

    def close(self) -> None:
        pass


def open_tables(path: Path):
    """Open an nsys export as a table source: SQLite file or parquetdir folder."""
    path = Path(path)
    if path.is_dir():
        return ParquetDirTables(path)
    return SqliteTables(path)
