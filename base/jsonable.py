"""JSON for numpy scalars: the one ``default=`` used wherever xstage-trace writes JSON."""

from __future__ import annotations

import numpy as np


def json_default(o):
    """numpy integers → int, floats → float (NaN → null), bools → bool; anything else → str."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if np.isnan(o) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return str(o)
