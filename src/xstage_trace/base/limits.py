"""Resource limits a user may set in the environment, read with one check and one error message."""

from __future__ import annotations

import os

from xstage_trace.base.errors import InputError


def positive_int_env(name: str, default: int, unit: str, what: str) -> int:
    """$``name`` as a positive integer, ``default`` when unset or blank; any other value is an InputError
    ("``name``='…' is not a positive ``unit``", fix: set it to ``what``, e.g. the default)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise InputError(None, f"{name}={text!r} is not a positive {unit}", f"set it to {what}, e.g. {name}={default}")
    return value
