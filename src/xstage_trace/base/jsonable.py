"""Strict JSON: numpy scalars become Python numbers, NaN and ±inf become null, and no
``NaN``/``Infinity`` token is ever written (``allow_nan=False``). The one JSON writer of xstage-trace."""

from __future__ import annotations

import json
import math


def json_default(o):
    """numpy integers → int, floats → float (NaN/±inf → null), bools → bool, arrays → lists; anything else → str.

    numpy is imported here, not at module level: a numpy value only exists once numpy is loaded,
    and the CLI's JSON commands that never touch numpy start faster without it."""
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return json_ready(o.tolist())
    return str(o)


def _text(s: str) -> str:
    """Text every JSON reader accepts: lone surrogates (how Python keeps the bytes of a file name that
    is not UTF-8) become ``\\xNN`` escapes of those bytes; any other lone surrogate ``\\udNNN``."""
    try:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def json_ready(obj):
    """``obj`` with every non-finite float (Python or numpy) replaced by None and every string made
    valid Unicode, recursively (keys too)."""
    if isinstance(obj, float) or (type(obj).__module__ == "numpy" and hasattr(obj, "is_integer")):  # a Python or numpy float
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, str):
        return _text(obj)
    if isinstance(obj, dict):
        return {(_text(k) if isinstance(k, str) else k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    return obj


def dumps(obj, **kwargs) -> str:
    """Strict JSON text of ``obj`` (NaN/±inf → null, text valid Unicode; raises rather than write a non-JSON token)."""
    return json.dumps(json_ready(obj), allow_nan=False, default=json_default, **kwargs)


def _reject_constant(token: str):
    raise ValueError(f"{token} is not JSON")


def loads(text: str):
    """Parse strict JSON: ``NaN``, ``Infinity`` and ``-Infinity`` tokens are rejected (ValueError)."""
    return json.loads(text, parse_constant=_reject_constant)
