"""Calibration documents <-> the analysis objects: a fit (analysis/calibration_fit.py) as the calibration JSON's
dict, and a checked document as the PlatformModel and LinkModel the analyses predict with (docs/model.md §3, §11).
No file is read here: collectors/calibration_io.py reads and checks the JSON, dataset/calibration.py does both."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.analysis.calibration_capacity import CapacityEstimate, Knee
from xstage_trace.analysis.calibration_fit import CalibratedPlatform, CalibrationFit, Validation, store_of
from xstage_trace.analysis.forward import LinkModel
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.config import DEFAULT_STORE
from xstage_trace.collectors.calibration_io import CALIBRATION_VERSION, EQ1_LINE, RECURRENCE_LINE, check_document, store_of_document


def _key(k: int, b: int) -> str:
    return f"{k},{b}"


def _knee(k: Knee | None) -> dict | None:
    if k is None:
        return None
    return {"detector": k.detector, "v_lo_bytes": k.v_lo_bytes, "v_hi_bytes": k.v_hi_bytes, "q_lo_bytes": k.q_lo_bytes, "q_hi_bytes": k.q_hi_bytes}


def _capacity(c: CapacityEstimate) -> dict:
    return {"q_bytes": c.q_bytes, "interval_bytes": list(c.interval_bytes) if c.interval_bytes else None, "source": c.source,
            "knee": _knee(c.knee),
            "transient_minimum_bytes": list(c.transient_bytes) if c.transient_bytes else None}


def _period_errors(errors: dict) -> dict:
    """{"eq1_loop_overhead": …, "recurrence": …} without the per-point lists."""
    return {name: {k: v for k, v in errors[tag].items() if k != "unexplained"}
            for tag, name in (("ss", "eq1_loop_overhead"), ("rec", "recurrence")) if tag in errors}


def validation_document(v: Validation, input_sha256: str | None, input_name: str, store_path: str,
                        store: str = DEFAULT_STORE) -> dict:
    """The other run's errors under the fitted model (the JSON's ``validation`` object)."""
    periodic = v.points
    return {"input": {"name": input_name, "sha256": input_sha256}, "store_path": store_path, "store": store,
            "periodic_points": int(len(periodic)), "shared_points": v.shared_points,
            "period_errors": _period_errors(v.errors), "period_errors_shared_configurations": _period_errors(v.errors_shared),
            "isolated_law": v.isolated_errors, "measured_difference": v.measured_difference}


def calibration_document(fit: CalibrationFit, input_sha256: str | None, input_name: str, validation: dict | None = None,
                         drain: dict | None = None, load_coupling: dict | None = None) -> dict:
    """The calibration JSON as a dict (what ``calibrate fit --json`` prints and ``-o`` writes); ``drain`` and
    ``load_coupling`` from ``pipeline.path_drain.path_drain_document`` (null without ``--path-drain``)."""
    m = fit.model
    ss = fit.errors.get("ss", {})
    rec = fit.errors.get("rec", {})
    best = rec or ss
    r = fit.rates
    return {
        "calibration_version": CALIBRATION_VERSION,
        "platform": m.platform,
        "store_path": m.store_path,
        "store": fit.store,
        "producers": sorted({k for k, _ in m.issue_floor_ns}),
        "rate_gbps": m.rate_gbps,
        "rate_uncertainty_gbps": r.uncertainty_gbps if r else None,
        "rate_points": fit.rate_points,
        "rate_by_producers_gbps": {str(k): v for k, v in (r.used_by_producers.items() if r else ())},
        "rate_measured_by_producers": {str(k): v for k, v in (r.measured_by_producers.items() if r else ())},
        "rate_by_configuration_gbps": {_key(k, b): c["rate_gbps"] for (k, b), c in (r.by_configuration.items() if r else ())},
        "rate_measured_by_configuration": {_key(k, b): c for (k, b), c in (r.by_configuration.items() if r else ())},
        "issue_floor_ns": {_key(k, b): v for (k, b), v in sorted(m.issue_floor_ns.items())},
        "loop_overhead_ns": m.loop_overhead_ns,
        "capacity_bytes": m.capacity_bytes,
        "capacity_by_producers_bytes": {str(k): v for k, v in (m.capacity_by_producers or {}).items()},
        "capacity_interval_bytes": {str(k): list(c.interval_bytes) for k, c in fit.capacity.items() if c.interval_bytes},
        "capacity_estimates": {str(k): _capacity(c) for k, c in fit.capacity.items()},
        "capacity_source": fit.capacity_source,
        "capacity_reason": fit.capacity_reason,
        "prediction_lines": {"eq1_loop_overhead": EQ1_LINE, "recurrence": RECURRENCE_LINE},
        "period_err_median_pct": best.get("period_err_median_pct"),
        "period_err_mean_pct": best.get("period_err_mean_pct"),
        "issue_err_median_pct": best.get("issue_err_median_pct"),
        "issue_err_mean_pct": best.get("issue_err_mean_pct"),
        "period_errors": _period_errors(fit.errors),
        "unexplained_by_eq1_loop_overhead": ss.get("unexplained", []),
        "unexplained_by_recurrence": rec.get("unexplained", []),
        "isolated_law": fit.isolated_errors,
        "validation": validation,
        "drain": drain,
        "load_coupling": load_coupling,
        "points": int(len(fit.points) + len(fit.isolated)),
        "periodic_points": int(len(fit.points)),
        "input": {"name": input_name, "sha256": input_sha256},
    }


def points_of_document(doc: dict, points):
    """The calibration points a document describes: its store path and store instruction."""
    return points[(points["dest"] == doc["store_path"]) & (store_of(points) == store_of_document(doc))]


def link_model_of_document(doc: dict, path: str | Path | None = None):
    """The forward model's LinkModel (docs/model.md §11) of a checked calibration document, or None where it has
    no ``drain`` / ``load_coupling`` (before version 5, or fitted without --path-drain)."""
    check_document(doc, path)
    if doc.get("drain") is None:
        return None
    d, c = doc["drain"], doc["load_coupling"]
    return LinkModel(float(d["rate_gbps"]), float(d["capacity_bytes"]), float(c["load_latency_ns"]), float(c["issue_floor_ns"]),
                     float(c["load_rate_gbps"]), float(c["window_ns"]))


def load_platform_from_doc(doc: dict, path: str | Path | None = None) -> PlatformModel:
    """A calibration document (dict), after check_document → PlatformModel (a CalibratedPlatform with R(K)
    from version 2 on, and R(K, B) from version 3 on)."""
    check_document(doc, path)
    version = int(doc["calibration_version"])
    floors = {tuple(int(x) for x in k.split(",")): float(v) for k, v in doc["issue_floor_ns"].items()}
    caps = {int(k): float(v) for k, v in (doc.get("capacity_by_producers_bytes") or {}).items()} or None
    args = (float(doc["rate_gbps"]), floors, caps, float(doc.get("loop_overhead_ns", 0.0)), str(doc.get("platform", "")), str(doc.get("store_path", "")))
    if version >= 2:
        rates = {int(k): float(v) for k, v in (doc.get("rate_by_producers_gbps") or {}).items()}
        conf = {tuple(int(x) for x in k.split(",")): float(v) for k, v in (doc.get("rate_by_configuration_gbps") or {}).items()} if version >= 3 else {}
        return CalibratedPlatform(*args, rates, conf)
    return PlatformModel(*args)  # version 1: its rate_by_producers_gbps was a diagnostic, prediction used the single R
