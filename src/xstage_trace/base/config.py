"""The run configuration of one probe dump: decoded once from the header's label, typed and validated.

The instrumented program writes ``key=value`` pairs into the dump header's 256-byte label (the
calibration bench: ``dest mode K B G_ns bursts threads store store_bytes``; the fused kernel: ``kernel rank dest shape schedule
layout operands epilogue k1 k2 tiles l2_tiles ctas lead_rows control``). ``RunConfig.from_label`` is the
one parser: every known key has a type and a range, a malformed value is an error naming the key, and
unknown keys are kept as text in ``extra``. Analyses read the typed fields (stored as columns of the
``dumps`` table and, where they group results, of ``tiles`` and ``bursts``), never the label text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

SCHEDULES = ("wave", "interleaved")
MODES = ("periodic", "isolated")
STORES = ("stg", "bulk", "tensor2d")  # the calibration bench's store instruction: st.global from registers, cp.async.bulk
# from shared memory, cp.async.bulk.tensor.2d tiles of a row-major output
DEFAULT_STORE = "stg"  # dumps and calibration documents that name no store: the bench before --store issued st.global only


class ConfigError(ValueError):
    """A label value that does not parse or is out of range; the message names the key."""


def _int(key: str, text: str, lo: int, hi: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ConfigError(f"label key {key}={text!r} is not an integer") from None
    if not lo <= v <= hi:
        raise ConfigError(f"label key {key}={v} is outside [{lo}, {hi}]")
    return v


def _float(key: str, text: str, lo: float, hi: float) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"label key {key}={text!r} is not a number") from None
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ConfigError(f"label key {key}={text!r} is outside [{lo:g}, {hi:g}]")
    return v


def _choice(key: str, text: str, allowed: tuple[str, ...]) -> str:
    if text not in allowed:
        raise ConfigError(f"label key {key}={text!r} is not one of {', '.join(allowed)}")
    return text


def _word(key: str, text: str) -> str:
    if not text or not all(c.isalnum() or c in "_-.:" for c in text):
        raise ConfigError(f"label key {key}={text!r} is not a plain word")
    return text


_BIG = 1 << 40
# key → parser(key, text); the field of the same name (G_ns → gap_ns) holds the value.
_PARSERS = {
    "kernel": _word,
    "dest": _word,
    "shape": _word,
    "layout": _word,
    "operands": _word,
    "epilogue": _word,
    "schedule": lambda k, t: _choice(k, t, SCHEDULES),
    "mode": lambda k, t: _choice(k, t, MODES),
    "rank": lambda k, t: _int(k, t, 0, 1 << 20),
    "K": lambda k, t: _int(k, t, 1, 1 << 20),
    "B": lambda k, t: _int(k, t, 1, _BIG),
    "G_ns": lambda k, t: _float(k, t, 0.0, 1e12),
    "bursts": lambda k, t: _int(k, t, 1, 1 << 30),
    "threads": lambda k, t: _int(k, t, 1, 1 << 16),
    "store": lambda k, t: _choice(k, t, STORES),
    "store_bytes": lambda k, t: _int(k, t, 1, 1 << 30),
    "k1": lambda k, t: _int(k, t, 1, _BIG),
    "k2": lambda k, t: _int(k, t, 1, _BIG),
    "tiles": lambda k, t: _int(k, t, 0, _BIG),
    "l2_tiles": lambda k, t: _int(k, t, 0, _BIG),
    "ctas": lambda k, t: _int(k, t, 1, 1 << 20),
    "lead_rows": lambda k, t: _int(k, t, 0, 1 << 20),
    "control": lambda k, t: _int(k, t, 0, 1),
    "trial": lambda k, t: _int(k, t, -(1 << 20), 1 << 30),
}
_FIELD_OF = {"G_ns": "gap_ns"}


LOCAL_DESTINATIONS = ("local", "device")  # stores that stay in the GPU's own HBM: the control runs


@dataclass(frozen=True)
class RunConfig:
    """What one dump ran: store path, shape, schedule, kernel variant, calibration sweep point.

    Fields are None where the label does not say. ``variant`` names the kernel build
    (``layout/operands/epilogue``) so that configurations of different builds are never pooled."""

    kernel: str | None = None
    dest: str | None = None
    shape: str | None = None
    schedule: str | None = None
    layout: str | None = None
    operands: str | None = None
    epilogue: str | None = None
    mode: str | None = None
    rank: int | None = None
    K: int | None = None
    B: int | None = None
    gap_ns: float | None = None
    bursts: int | None = None
    threads: int | None = None
    store: str | None = None
    store_bytes: int | None = None
    k1: int | None = None
    k2: int | None = None
    tiles: int | None = None
    l2_tiles: int | None = None
    ctas: int | None = None
    lead_rows: int | None = None
    control: int | None = None
    trial: int | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_label(cls, text: str) -> "RunConfig":
        """Parse ``key=value`` tokens (spec-free: the label format of instrument/include/xstage/host.hpp)."""
        values: dict = {}
        extra: dict = {}
        for token in text.split():
            if "=" not in token:
                raise ConfigError(f"label token {token!r} is not key=value")
            key, value = token.split("=", 1)
            name = _FIELD_OF.get(key, key)
            if name in values or key in extra:
                raise ConfigError(f"label key {key} appears twice")
            if key in _PARSERS:
                values[name] = _PARSERS[key](key, value)
            else:
                extra[key] = value
        return cls(**values, extra=extra)

    @property
    def variant(self) -> str | None:
        """The kernel build, ``layout/operands/epilogue`` (None when the label names none of them)."""
        parts = [self.layout, self.operands, self.epilogue]
        return "/".join(p or "-" for p in parts) if any(parts) else None

    @property
    def is_control(self) -> bool:
        """A control run: a local-store destination (``local``, or ``device``: the GPU's own HBM, as the FLUX
        Triton recipe labels it), or labelled ``control=1``."""
        return self.dest in LOCAL_DESTINATIONS or self.control == 1

    def columns(self) -> dict:
        """The typed fields (and ``variant``, ``is_control``) as one row of the ``dumps`` table."""
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        row["variant"] = self.variant
        row["is_control"] = self.is_control
        row["extra"] = " ".join(f"{k}={v}" for k, v in sorted(self.extra.items())) or None
        return row
