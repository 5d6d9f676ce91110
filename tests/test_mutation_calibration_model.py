"""Calibration documents <-> the analysis objects (analysis/calibration_model.py, docs/calibration-json.md,
docs/model.md §3, §11) on a fit built by hand: each field of the document is the hand-made value it names."""

from __future__ import annotations

import pandas as pd
import pytest

from xstage_trace.analysis.calibration_capacity import CapacityEstimate, Knee
from xstage_trace.analysis.calibration_fit import CalibratedPlatform, CalibrationFit, RateFit, Validation
from xstage_trace.analysis.calibration_model import (calibration_document, link_model_of_document, load_platform_from_doc,
                                                     points_of_document, validation_document)
from xstage_trace.analysis.forward import LinkModel
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.errors import InputError
from xstage_trace.collectors.calibration_io import CALIBRATION_VERSION

MODEL = CalibratedPlatform(2.0, {(8, 1000): 200.0, (4, 1000): 105.0, (4, 250): 30.0}, {4: 1000.0, 8: 3000.0}, 50.0, "H200", "host",
                           {4: 2.0, 8: 5.0}, {(4, 1000): 2.0, (8, 1000): 5.0})
RATES = RateFit(2.0, 1.5, 5, {4: {"rate_gbps": 2.0, "uncertainty_gbps": 0.1, "points": 3, "differs": False}}, {4: 2.0, 8: 5.0},
                {(4, 1000): {"rate_gbps": 2.0, "uncertainty_gbps": 0.1, "points": 3}, (8, 1000): {"rate_gbps": 5.0, "uncertainty_gbps": 0.0, "points": 2}})
KNEE = Knee("tail", 4000.0, 8000.0, 800.0, 1200.0)
CAPACITY = {4: CapacityEstimate(1000.0, (900.0, 1100.0), "isolated knee", KNEE, (950.0, 1050.0)),
            8: CapacityEstimate(None, None, "not identifiable", None, None)}
SS = {"period_err_median_pct": 1.0, "period_err_mean_pct": 2.0, "issue_err_median_pct": 3.0, "issue_err_mean_pct": 4.0,
      "by_producers": {4: {}}, "unexplained": [{"K": 4, "gap_ns": 0.0}]}
REC = {"period_err_median_pct": 5.0, "period_err_mean_pct": 6.0, "issue_err_median_pct": 7.0, "issue_err_mean_pct": 8.0,
       "by_regime": {}, "unexplained": [{"K": 8, "gap_ns": 500.0}]}


def _fit(errors=None, rates=RATES):
    points, isolated = pd.DataFrame({"K": [4, 4, 8]}), pd.DataFrame({"K": [4, 8]})
    return CalibrationFit(MODEL, rates, CAPACITY, "a reason", points, isolated, {"ss": SS, "rec": REC} if errors is None else errors,
                          {"points": 2}, "bulk")


def test_calibration_document_carries_the_fit():
    d = calibration_document(_fit(), "abc", "run.csv", validation={"v": 1}, drain={"d": 2}, load_coupling={"c": 3})
    assert d["calibration_version"] == CALIBRATION_VERSION
    assert (d["platform"], d["store_path"], d["store"], d["producers"]) == ("H200", "host", "bulk", [4, 8])
    assert (d["rate_gbps"], d["rate_uncertainty_gbps"], d["rate_points"]) == (2.0, 1.5, 5)
    assert d["rate_by_producers_gbps"] == {"4": 2.0, "8": 5.0}
    assert d["rate_measured_by_producers"] == {"4": RATES.measured_by_producers[4]}
    assert d["rate_by_configuration_gbps"] == {"4,1000": 2.0, "8,1000": 5.0}
    assert d["rate_measured_by_configuration"] == {"4,1000": RATES.by_configuration[(4, 1000)], "8,1000": RATES.by_configuration[(8, 1000)]}
    assert list(d["issue_floor_ns"].items()) == [("4,250", 30.0), ("4,1000", 105.0), ("8,1000", 200.0)]  # sorted by (K, B)
    assert (d["loop_overhead_ns"], d["capacity_bytes"]) == (50.0, 3000.0)  # Q at the largest K
    assert d["capacity_by_producers_bytes"] == {"4": 1000.0, "8": 3000.0}
    assert d["capacity_interval_bytes"] == {"4": [900.0, 1100.0]}  # K=8 has none
    assert d["capacity_estimates"] == {
        "4": {"q_bytes": 1000.0, "interval_bytes": [900.0, 1100.0], "source": "isolated knee",
              "knee": {"detector": "tail", "v_lo_bytes": 4000.0, "v_hi_bytes": 8000.0, "q_lo_bytes": 800.0, "q_hi_bytes": 1200.0},
              "transient_minimum_bytes": [950.0, 1050.0]},
        "8": {"q_bytes": None, "interval_bytes": None, "source": "not identifiable", "knee": None, "transient_minimum_bytes": None}}
    assert (d["capacity_source"], d["capacity_reason"]) == ("isolated knee", "a reason")  # K=8 has no Q: not a source
    assert d["prediction_lines"] == {"eq1_loop_overhead": "Eq. 1 + loop overhead", "recurrence": "recurrence"}
    # the headline errors are the recurrence's where it ran
    assert [d[k] for k in ("period_err_median_pct", "period_err_mean_pct", "issue_err_median_pct", "issue_err_mean_pct")] == [5.0, 6.0, 7.0, 8.0]
    assert d["period_errors"] == {"eq1_loop_overhead": {k: v for k, v in SS.items() if k != "unexplained"},
                                  "recurrence": {k: v for k, v in REC.items() if k != "unexplained"}}
    assert d["unexplained_by_eq1_loop_overhead"] == SS["unexplained"] and d["unexplained_by_recurrence"] == REC["unexplained"]
    assert (d["isolated_law"], d["validation"], d["drain"], d["load_coupling"]) == ({"points": 2}, {"v": 1}, {"d": 2}, {"c": 3})
    assert (d["points"], d["periodic_points"]) == (5, 3)
    assert d["input"] == {"name": "run.csv", "sha256": "abc"}


def test_calibration_document_without_rates_or_the_recurrence():
    d = calibration_document(_fit(errors={"ss": SS}, rates=None), None, "x")
    assert (d["rate_uncertainty_gbps"], d["rate_points"]) == (None, 0)
    assert d["rate_by_producers_gbps"] == d["rate_measured_by_producers"] == d["rate_by_configuration_gbps"] == {}
    assert d["rate_measured_by_configuration"] == {}
    # no recurrence: the headline errors are Eq. 1's, and its period errors only
    assert [d[k] for k in ("period_err_median_pct", "period_err_mean_pct", "issue_err_median_pct", "issue_err_mean_pct")] == [1.0, 2.0, 3.0, 4.0]
    assert list(d["period_errors"]) == ["eq1_loop_overhead"] and d["unexplained_by_recurrence"] == []
    assert (d["validation"], d["drain"], d["load_coupling"]) == (None, None, None)
    empty = calibration_document(_fit(errors={}), None, "x")
    assert empty["period_err_median_pct"] is None and empty["unexplained_by_eq1_loop_overhead"] == [] and empty["period_errors"] == {}


def test_validation_document_by_hand():
    v = Validation(pd.DataFrame({"K": [4, 8, 8]}), pd.DataFrame(), {"ss": SS}, {"rec": REC}, 2, {"points": 1}, {"shared_points": 2})
    d = validation_document(v, "f00", "other.csv", "peer", "tensor2d")
    assert d == {"input": {"name": "other.csv", "sha256": "f00"}, "store_path": "peer", "store": "tensor2d", "periodic_points": 3,
                 "shared_points": 2, "period_errors": {"eq1_loop_overhead": {k: x for k, x in SS.items() if k != "unexplained"}},
                 "period_errors_shared_configurations": {"recurrence": {k: x for k, x in REC.items() if k != "unexplained"}},
                 "isolated_law": {"points": 1}, "measured_difference": {"shared_points": 2}}
    assert validation_document(v, None, "o", "host")["store"] == "stg"


def test_a_document_loads_back_as_the_model_it_came_from():
    doc = calibration_document(_fit(), None, "x")
    assert load_platform_from_doc(doc) == MODEL
    # version 2: R(K) but no R(K, B); version 1: the single R only (a PlatformModel)
    v2 = load_platform_from_doc(dict(doc, calibration_version=2))
    assert isinstance(v2, CalibratedPlatform) and v2.rate_by_producers_gbps == {4: 2.0, 8: 5.0} and v2.rate_by_configuration_gbps == {}
    v1 = load_platform_from_doc(dict(doc, calibration_version=1))
    assert type(v1) is PlatformModel and v1 == PlatformModel(2.0, MODEL.issue_floor_ns, {4: 1000.0, 8: 3000.0}, 50.0, "H200", "host")
    # the optional keys' defaults: no capacity (None), no overhead (0), no platform or store path (""), no R(K)
    bare = {"calibration_version": 3, "rate_gbps": 3, "issue_floor_ns": {"4,1000": 7}}
    assert load_platform_from_doc(bare) == CalibratedPlatform(3.0, {(4, 1000): 7.0}, None, 0.0, "", "", {}, {})
    assert load_platform_from_doc(dict(bare, capacity_by_producers_bytes={})).capacity_by_producers is None
    # version 3 is the first with R(K, B)
    v3 = load_platform_from_doc(dict(bare, rate_by_producers_gbps={"4": 2}, rate_by_configuration_gbps={"4,1000": 2.5}))
    assert (v3.rate_by_producers_gbps, v3.rate_by_configuration_gbps) == ({4: 2.0}, {(4, 1000): 2.5})


def test_a_bad_document_is_refused_with_its_path():
    for read in (load_platform_from_doc, link_model_of_document):
        with pytest.raises(InputError) as e:
            read({"calibration_version": 3, "rate_gbps": -1, "issue_floor_ns": {"4,1000": 7}}, "cal.json")
        assert e.value.path == "cal.json"


def test_link_model_of_a_document():
    doc = calibration_document(_fit(), None, "x")
    assert link_model_of_document(doc) is None  # fitted without --path-drain
    doc = dict(doc, drain={"rate_gbps": 60, "capacity_bytes": 4096},
               load_coupling={"load_latency_ns": 700, "issue_floor_ns": 40, "load_rate_gbps": 900, "window_ns": 2000})
    assert link_model_of_document(doc) == LinkModel(60.0, 4096.0, 700.0, 40.0, 900.0, 2000.0)


def test_points_of_a_document_are_its_store_path_and_store():
    pts = pd.DataFrame({"dest": ["host", "host", "peer", "host"], "store": ["bulk", "stg", "bulk", None]})
    assert points_of_document({"store_path": "host", "store": "bulk"}, pts).index.tolist() == [0]
    assert points_of_document({"store_path": "host"}, pts).index.tolist() == [1, 3]  # no store: st.global (stg)
