"""Strict JSON: numpy scalars become Python numbers, NaN and ±inf become null, and no
``NaN``/``Infinity`` token is ever written (``allow_nan=False``). The one JSON writer of xstage-trace."""

from __future__ import annotations

import json
import math

import numpy as np


def json_default(o):
    """numpy integers → int, floats → float (NaN/±inf → null), bools → bool, arrays → lists; anything else → str."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return finite_or_null(o.tolist())
    return str(o)


def finite_or_null(obj):
    """``obj`` with every non-finite float (Python or numpy) replaced by None, recursively."""
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_null(v) for v in obj]
    return obj


def dumps(obj, **kwargs) -> str:
    """Strict JSON text of ``obj`` (NaN/±inf → null; raises rather than write a non-JSON token)."""
    return json.dumps(finite_or_null(obj), allow_nan=False, default=json_default, **kwargs)


def _reject_constant(token: str):
    raise ValueError(f"{token} is not JSON")


def loads(text: str):
    """Parse strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` tokens are rejected (ValueError)."""
    return json.loads(text, parse_constant=_reject_constant)
