"""Reading a user's CSV or Parquet table, with the one-line error when it is not one, and the
checks that its numbers are usable (numeric, finite, in range) before any of them is used."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xstage_trace.base.errors import InputError
from xstage_trace.base.paths import require_file

if TYPE_CHECKING:
    import pandas as pd


def read_table_file(path: str | Path, what: str = "a CSV or Parquet file") -> pd.DataFrame:
    """A ``.parquet`` or CSV file as a DataFrame; InputError naming the file when it is not readable."""
    import pandas as pd  # here, not at module level: the CLI imports this module on start-up

    path = require_file(path)
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
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
