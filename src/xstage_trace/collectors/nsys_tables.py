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

_REEXPORT_PQ = "pass an nsys parquetdir export: nsys export --type parquetdir REPORT.nsys-rep"
_REEXPORT = "pass an nsys export: nsys export --type sqlite REPORT.nsys-rep"


def read_only_uri(path: Path) -> str:
    """A ``file:`` URI that opens ``path`` itself read-only: the absolute path percent-encoded (a
    ``#``, ``?`` or ``%`` in a name stays part of the name), then ``?mode=ro``."""
    return Path(path).absolute().as_uri() + "?mode=ro"


def _ident(name: str) -> str:
    """A quoted SQL identifier (double quotes doubled), whatever characters the name holds."""
    return '"' + name.replace('"', '""') + '"'


class SqliteTables:
    """Tables of an nsys SQLite export. Column reads go through the ADBC SQLite driver (C, straight
    to Arrow) when it is installed, else through the standard library's sqlite3."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._adbc = None
        self._uri = read_only_uri(self.path)
        try:
            self.conn = sqlite3.connect(self._uri, uri=True)
            names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        except sqlite3.Error as exc:
            raise InputError(self.path, f"not a readable SQLite database ({exc})", _REEXPORT) from None
        self._tables = set(names)
        self._cols: dict[str, list[str]] = {}

    def tables(self) -> set[str]:
        return self._tables

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            try:
                self._cols[table] = [r[1] for r in self.conn.execute(f"PRAGMA table_info({_ident(table)})")] if table in self._tables else []
            except sqlite3.Error as exc:
                raise InputError(self.path, f"table {table} is unreadable ({exc})", _REEXPORT) from None
        return self._cols[table]

    def read(self, table: str, columns: list[str]) -> pa.Table:
        """Read ``columns`` of ``table`` into Arrow (InputError when a column is absent or the file is damaged)."""
        absent = [c for c in columns if c not in self.columns(table)]
        if absent:
            raise InputError(self.path, f"table {table} lacks column {', '.join(absent)} (an export of another nsys version?)", _REEXPORT)
        sql = "SELECT " + ", ".join(_ident(c) for c in columns) + f" FROM {_ident(table)}"
        fast = self._read_adbc(sql)
        if fast is not None:
            return fast
        try:
            return self._read_sqlite3(sql, columns)
        except sqlite3.Error as exc:
            raise InputError(self.path, f"table {table} is unreadable ({exc})", _REEXPORT) from None

    def _read_adbc(self, sql: str) -> pa.Table | None:
        try:
            if self._adbc is None:
                import adbc_driver_sqlite.dbapi as adbc

                self._adbc = adbc.connect(self._uri)
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
            raise InputError(self.path, "folder holds no .parquet tables", _REEXPORT_PQ)

    def tables(self) -> set[str]:
        return set(self._files)

    def columns(self, table: str) -> list[str]:
        if table not in self._files:
            return []
        try:
            return list(pq.read_schema(self._files[table]).names)
        except (pa.ArrowException, OSError) as exc:
            raise InputError(self._files[table], f"not a readable Parquet table ({exc.__class__.__name__})", _REEXPORT_PQ) from None

    def read(self, table: str, columns: list[str]) -> pa.Table:
        """Read ``columns`` of ``table`` (InputError when a column is absent or the file is damaged)."""
        absent = [c for c in columns if c not in self.columns(table)]
        if absent:
            raise InputError(self._files[table], f"lacks column {', '.join(absent)} (an export of another nsys version?)", _REEXPORT_PQ)
        try:
            return pq.read_table(self._files[table], columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise InputError(self._files[table], f"not a readable Parquet table ({exc.__class__.__name__})", _REEXPORT_PQ) from None

    def close(self) -> None:
        pass


def open_tables(path: Path):
    """Open an nsys export as a table source: SQLite file or parquetdir folder."""
    path = Path(path)
    if path.is_dir():
        return ParquetDirTables(path)
    return SqliteTables(path)
