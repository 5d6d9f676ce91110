"""Reading a user's CSV or Parquet table, with the one-line error when it is not one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from xstage_trace.base.errors import InputError

if TYPE_CHECKING:
    import pandas as pd


def read_table_file(path: str | Path, what: str = "a CSV or Parquet file") -> pd.DataFrame:
    """A ``.parquet`` or CSV file as a DataFrame; InputError naming the file when it is not readable."""
    import pandas as pd  # here, not at module level: the CLI imports this module on start-up

    path = Path(path)
    if not path.is_file():
        raise InputError(path, "no such file", "check the path")
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # pandas and pyarrow raise many parser types
        raise InputError(path, f"not a readable table ({exc.__class__.__name__})", f"pass {what}") from None
