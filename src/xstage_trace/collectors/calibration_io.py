"""Calibration JSON: the fitted platform model M_X with its uncertainties, errors and input hash.

Version 5 (docs/calibration-json.md lists every key) adds the optional ``drain`` (R from per-round completion
timestamps, the accepted-ahead capacity Q from synchronized bursts, the sustained-store and copy-engine rates)
and ``load_coupling`` (the operand-load latency and load rate of the forward model, docs/model.md §11; read by
``link_model_of_document``); version-4 files are version 5 without them. Version 4: the store instruction the benchmark issued
(``store``: stg = st.global from registers, bulk = cp.async.bulk from shared memory, tensor2d =
cp.async.bulk.tensor.2d tiles of a row-major output), R(K, B) used in
prediction (R from the drain-limited launches at any gap), R(K), Q(K) with a bootstrap interval and its
knee / transient evidence, the isolated law's errors, the two prediction lines under their names ("Eq. 1
+ loop overhead", "recurrence") with errors by regime, and an optional cross-run validation with the two
runs' raw measured difference. Version-3 files (the same without ``store``: st.global) still load and
predict with their R(K, B), version-2 files with their R(K), version-1 files (single R, p90-knee Q)
with their single R.
"""

from __future__ import annotations

import math
from pathlib import Path

from xstage_trace.base.config import DEFAULT_STORE, STORES
from xstage_trace.base.errors import InputError
from xstage_trace.base.jsonable import loads
from xstage_trace.base.paths import require_file

CALIBRATION_VERSION = 5
STORE_VERSION = 4  # the first version that records the store instruction
DRAIN_VERSION = 5  # the first version that may carry ``drain`` and ``load_coupling`` (docs/model.md §11)
EQ1_LINE = "Eq. 1 + loop overhead"
RECURRENCE_LINE = "recurrence"


def store_of_document(doc: dict) -> str:
    """The store instruction a calibration document was measured with (before version 4: st.global, stg)."""
    return str(doc.get("store", DEFAULT_STORE))


def calibration_name(doc: dict) -> str:
    """The document's store path, with its store instruction where that is not st.global (``host``,
    ``host_bulk``): the stem of its report and figures."""
    store = store_of_document(doc)
    return doc["store_path"] if store == DEFAULT_STORE else f"{doc['store_path']}_{store}"


def period_errors_of(doc: dict) -> dict:
    """{"eq1_loop_overhead": …, "recurrence": …} of a version-2 or version-1 document."""
    if "period_errors" in doc:
        return doc["period_errors"]
    return {name: doc[key] for key, name in (("errors_steady_state", "eq1_loop_overhead"), ("errors_recurrence", "recurrence")) if doc.get(key)}


_REFIT = "refit it with this release: xstage-trace calibrate fit POINTS -o calib.json"
MAX_CALIBRATION_BYTES = 16 << 20


def _finite(value, low: float, strict: bool) -> bool:
    """A JSON number (not a bool), finite, above ``low`` (or at it when not ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and (value > low if strict else value >= low)


def _producer_key(text) -> int | None:
    try:
        k = int(text)
    except (TypeError, ValueError):
        return None
    return k if k > 0 else None


def _check_entries(path, name: str, entries: dict, pair: bool, what: str) -> None:
    """InputError unless every entry of the document's object ``name`` has a key K > 0 (``pair``: "K,B",
    both > 0) and a positive finite value (``what`` it is, for the message)."""
    for key, value in entries.items():
        if pair:
            parts = key.split(",") if isinstance(key, str) else []
            key_ok = len(parts) == 2 and all(_producer_key(x) is not None for x in parts)
        else:
            key_ok = _producer_key(key) is not None
        if not key_ok or not _finite(value, 0.0, True):
            shape = '"K,B": ' if pair else ""
            raise InputError(path, f"{name} entry {key!r}: {value!r} is not {shape}a positive finite {what}", _REFIT)


def check_document(doc, path: str | Path | None) -> None:
    """InputError unless ``doc`` is a calibration document this version reads: calibration_version
    1..CALIBRATION_VERSION, a known store instruction from version 4 on, R > 0 finite, every T_iss^0(K, B) > 0 finite with K, B > 0, Q(K) > 0 finite, overhead ≥ 0."""
    if not isinstance(doc, dict):
        raise InputError(path, "not a calibration JSON (not an object)", "pass a file written by xstage-trace calibrate fit -o")
    version = doc.get("calibration_version")
    if isinstance(version, bool) or version not in range(1, CALIBRATION_VERSION + 1):
        raise InputError(path, f"calibration_version {version!r} is not supported (this xstage-trace reads versions 1 to {CALIBRATION_VERSION})", _REFIT)
    if version >= STORE_VERSION and doc.get("store") not in STORES:
        raise InputError(path, f"store {doc.get('store')!r} is not one of {', '.join(STORES)} (calibration_version {version} records it)", _REFIT)
    if not _finite(doc.get("rate_gbps"), 0.0, True):
        raise InputError(path, f"rate_gbps {doc.get('rate_gbps')!r} is not a positive finite number", _REFIT)
    floors = doc.get("issue_floor_ns")
    if not isinstance(floors, dict) or not floors:
        raise InputError(path, "issue_floor_ns is missing or empty", _REFIT)
    _check_entries(path, "issue_floor_ns", floors, True, "time")
    for name, pair, what in (("capacity_by_producers_bytes", False, "capacity"), ("rate_by_producers_gbps", False, "rate"),
                             ("rate_by_configuration_gbps", True, "rate")):
        entries = doc.get(name) or {}
        if not isinstance(entries, dict):
            raise InputError(path, f"{name} is not an object", _REFIT)
        _check_entries(path, name, entries, pair, what)
    if not _finite(doc.get("loop_overhead_ns", 0.0), 0.0, False):
        raise InputError(path, f"loop_overhead_ns {doc.get('loop_overhead_ns')!r} is not a finite number >= 0", _REFIT)
    _check_link(doc, path, version)


_LINK_KEYS = {"drain": (("rate_gbps", True), ("capacity_bytes", True)),
              "load_coupling": (("load_latency_ns", False), ("load_rate_gbps", True), ("issue_floor_ns", False), ("window_ns", False))}


def _check_link(doc: dict, path, version: int) -> None:
    """``drain`` and ``load_coupling`` (version 5 on, both or neither, null allowed): objects whose rates and
    capacity are positive finite numbers and whose times are finite and >= 0."""
    present = {k for k in _LINK_KEYS if doc.get(k) is not None}
    if not present:
        return
    if version < DRAIN_VERSION:
        raise InputError(path, f"calibration_version {version} has no {' / '.join(sorted(present))} (version {DRAIN_VERSION} introduced them)", _REFIT)
    if len(present) != len(_LINK_KEYS):
        raise InputError(path, f"has {next(iter(present))} without {next(iter(set(_LINK_KEYS) - present))}", _REFIT)
    for name, keys in _LINK_KEYS.items():
        obj = doc[name]
        if not isinstance(obj, dict):
            raise InputError(path, f"{name} is not an object", _REFIT)
        for key, strict in keys:
            if not _finite(obj.get(key), 0.0, strict):
                raise InputError(path, f"{name}.{key} {obj.get(key)!r} is not a {'positive' if strict else '>= 0'} finite number", _REFIT)


def read_document(path: str | Path) -> dict:
    """A calibration JSON file as a dict (strict JSON: NaN/Infinity tokens refused), checked."""
    path = require_file(path)
    if path.stat().st_size > MAX_CALIBRATION_BYTES:
        raise InputError(path, f"is larger than {MAX_CALIBRATION_BYTES >> 20} MiB, not a calibration JSON", "pass a file written by xstage-trace calibrate fit -o")
    try:
        doc = loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(path, f"not a readable calibration JSON ({exc.__class__.__name__}: {str(exc)[:120]})",
                         "pass a file written by xstage-trace calibrate fit -o") from None
    check_document(doc, path)
    return doc
