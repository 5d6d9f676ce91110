"""Reading a user's CSV or Parquet table, with the one-line error when it is not one, and the
checks that its numbers are usable (numeric, finite, in range) before any of them is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xstage_trace.base.errors import InputError
from xstage_trace.base.paths import require_file

if TYPE_CHECKING:
    import pandas as pd


def count_rows(path: Path) -> int:
    """Rows of a table file without parsing it: Parquet from its footer, CSV by counting line ends in
    blocks (memory bounded; a quoted field with a newline counts twice, an over-estimate)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    rows, last = 0, b"\n"
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            rows += block.count(b"\n")
            last = block[-1:]
    return rows - 1 + (last != b"\n")  # less the header row, plus an unterminated last line


def read_table_file(path: str | Path, what: str = "a CSV or Parquet file", columns: tuple[str, ...] | None = None,
                    categories: tuple[str, ...] = (), max_rows: int | None = None, limit_env: str | None = None) -> pd.DataFrame:
    """A ``.parquet`` or CSV file as a DataFrame; InputError naming the file when it is not readable.
    ``columns``: read only those that the file has (others are never parsed); ``categories``: text columns
    read as pandas categories (one copy of each distinct text); ``max_rows``: a file with more rows is
    refused from its size before it is parsed (``limit_env`` names the variable that raises the limit)."""
    import pandas as pd  # here, not at module level: the CLI imports this module on start-up

    path = require_file(path)
    try:
        if max_rows is not None:
            rows = count_rows(path)
            if rows > max_rows:
                raise InputError(path, f"holds {rows} rows, more than the {max_rows} this command reads",
                                 f"pass fewer rows{f' or set {limit_env}' if limit_env else ''}")
        if path.suffix == ".parquet":
            if columns is None:
                return pd.read_parquet(path)
            import pyarrow.parquet as pq

            have = pq.ParquetFile(path).schema_arrow.names
            frame = pd.read_parquet(path, columns=[c for c in have if c in columns])
            return frame.astype({c: "category" for c in categories if c in frame and frame[c].dtype == object})
        keep = None if columns is None else (lambda c: c in columns)
        return pd.read_csv(path, usecols=keep, dtype={c: "category" for c in categories} or None)
    except InputError:
        raise
    except Exception as exc:  # pandas and pyarrow raise many parser types
        raise InputError(path, f"not a readable table ({exc.__class__.__name__})", f"pass {what}") from None


def check_numbers(df: pd.DataFrame, path: str | Path, positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = (),
                  fix: str = "correct or drop those rows", missing_ok: tuple[str, ...] = ()) -> None:
    """InputError unless every value of the named columns is a finite number, > 0 for ``positive``
    and ≥ 0 for ``non_negative`` columns (NaN, ±inf, text, zero or negative values name the column,
    how many rows and the first such row). Empty cells are allowed in the ``missing_ok`` columns."""
    import numpy as np
    import pandas as pd

    for col in positive + non_negative:
        if col not in df:
            continue
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        ok = np.isfinite(values) & ((values > 0) if col in positive else (values >= 0))
        if col in missing_ok:
            ok |= df[col].isna().to_numpy()
        if not ok.all():
            first = int(np.argmax(~ok))
            value = df[col].iloc[first]
            value = value.item() if isinstance(value, np.generic) else value
            need = "positive" if col in positive else "non-negative"
            raise InputError(path, f"column {col} has {int((~ok).sum())} values that are not {need} finite numbers "
                                   f"(first: row {first + 1}, {value!r})", fix)


def require_numeric(df: pd.DataFrame, path: str | Path, columns: tuple[str, ...]) -> None:
    """InputError when one of ``columns`` (those present) holds a value that is not a number (text),
    naming the column, how many rows and the first; empty cells are left to ``check_numbers``."""
    import pandas as pd

    for col in columns:
        if col not in df or pd.api.types.is_numeric_dtype(df[col]):
            continue
        bad = (pd.to_numeric(df[col], errors="coerce").isna() & df[col].notna()).to_numpy()
        if bad.any():
            first = int(bad.argmax())
            raise InputError(path, f"column {col} has {int(bad.sum())} values that are not numbers (first: row {first + 1}, {df[col].iloc[first]!r})",
                             "give numbers in that column (empty where a row has none)")
        df[col] = pd.to_numeric(df[col])
