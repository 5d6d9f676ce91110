"""Calibration JSON: the fitted platform model M_X with its uncertainties, errors and input hash."""

from __future__ import annotations

import json
from pathlib import Path

from xstage_trace.analysis.calibration_fit import CalibrationFit
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.errors import InputError

CALIBRATION_VERSION = 1


def _key(k: int, b: int) -> str:
    return f"{k},{b}"


def calibration_document(fit: CalibrationFit, input_sha256: str | None, input_name: str) -> dict:
    """The calibration JSON as a dict (what ``calibrate fit --json`` prints and ``-o`` writes)."""
    m = fit.model
    ss = fit.errors.get("ss", {})
    rec = fit.errors.get("rec", {})
    best = rec or ss
    periodic = fit.points[fit.points["mode"] == "periodic"] if "mode" in fit.points else fit.points
    return {
        "calibration_version": CALIBRATION_VERSION,
        "platform": m.platform,
        "store_path": m.store_path,
        "producers": sorted({k for k, _ in m.issue_floor_ns}),
        "rate_gbps": m.rate_gbps,
        "rate_uncertainty_gbps": fit.rate_uncertainty_gbps,
        "rate_points": fit.rate_points,
        "rate_by_producers_gbps": {str(k): v for k, v in fit.rate_by_producers.items()},
        "issue_floor_ns": {_key(k, b): v for (k, b), v in sorted(m.issue_floor_ns.items())},
        "loop_overhead_ns": m.loop_overhead_ns,
        "capacity_bytes": m.capacity_bytes,
        "capacity_by_producers_bytes": {str(k): v for k, v in (m.capacity_by_producers or {}).items()},
        "capacity_median_knee_bytes": {str(k): v for k, v in fit.capacity_median_bytes.items()},
        "capacity_uncertainty_bytes": {str(k): float(v) for k, v in fit.capacity_uncertainty_bytes.items()},
        "capacity_source": fit.capacity_source,
        "capacity_reason": fit.capacity_reason,
        "period_err_median_pct": best.get("period_err_median_pct"),
        "period_err_mean_pct": best.get("period_err_mean_pct"),
        "issue_err_median_pct": best.get("issue_err_median_pct"),
        "issue_err_mean_pct": best.get("issue_err_mean_pct"),
        "errors_steady_state": {k: v for k, v in ss.items() if k != "unexplained"},
        "errors_recurrence": {k: v for k, v in rec.items() if k != "unexplained"},
        "unexplained_by_steady_state": ss.get("unexplained", []),
        "unexplained_by_recurrence": rec.get("unexplained", []),
        "points": int(len(fit.points)),
        "periodic_points": int(len(periodic)),
        "input": {"name": input_name, "sha256": input_sha256},
    }


def load_platform_from_doc(doc: dict) -> PlatformModel:
    """A calibration document (dict) → PlatformModel."""
    floors = {tuple(int(x) for x in k.split(",")): float(v) for k, v in doc["issue_floor_ns"].items()}
    caps = {int(k): float(v) for k, v in (doc.get("capacity_by_producers_bytes") or {}).items()} or None
    return PlatformModel(float(doc["rate_gbps"]), floors, caps, float(doc.get("loop_overhead_ns", 0.0)),
                         doc.get("platform", ""), doc.get("store_path", ""))


def load_platform(path: str | Path) -> PlatformModel:
    """Read a calibration JSON back into a PlatformModel."""
    path = Path(path)
    try:
        return load_platform_from_doc(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"not a readable calibration JSON ({exc.__class__.__name__}: {exc})",
                         "pass a file written by xstage-trace calibrate fit -o") from None
