"""JSON for numpy scalars: the one ``default=`` used wherever xstage-trace writes JSON."""

from __future__ import annotations


def json_default(o):
    """numpy integers → int, floats → float (NaN → null), bools → bool; anything else → str.

    numpy is imported here, not at module level: a numpy value only exists once numpy is loaded,
    and the CLI's JSON commands that never touch numpy start faster without it."""
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if np.isnan(o) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return str(o)
