"""Calibration: measured vs predicted (period and issue time vs gap, isolated issue vs volume),
residuals, and the fitted M_X with its uncertainties."""

import pandas as pd
import streamlit as st

from xstage_trace.analysis.burst_gap import isolated_issue_time_ns
from xstage_trace.analysis.calibration_fit import UnrecoveredSweep, fit_calibration, predict
from xstage_trace.app import data, figures, state
from xstage_trace.base.paths import shown_path
from xstage_trace.analysis.calibration_model import calibration_document, load_platform_from_doc

MIB = float(1 << 20)


def capacity_table(doc: dict) -> pd.DataFrame:
    """Q(K) of a calibration document in MiB with its interval (``capacity_interval_bytes``: the
    knee's bracket and the transients' bound), "not bracketed" where the document has none."""
    caps = doc.get("capacity_by_producers_bytes") or {}
    ivs = doc.get("capacity_interval_bytes") or {}

    def interval(k):
        iv = ivs.get(k)
        return f"{iv[0] / MIB:.2f} – {iv[1] / MIB:.2f}" if iv and None not in iv[:2] else "not bracketed"

    return pd.DataFrame({"K (producers)": [int(k) for k in caps], "Q (MiB)": [round(v / MIB, 2) for v in caps.values()],
                         "interval (MiB)": [interval(k) for k in caps],
                         "source": [((doc.get("capacity_estimates") or {}).get(k) or {}).get("source", "") for k in caps]})


def model_table(doc: dict) -> None:
    """M_X of a calibration document with its uncertainties."""
    c = st.columns(4)
    unc = doc.get("rate_uncertainty_gbps")
    c[0].metric("R (GB/s)", f"{doc['rate_gbps']:.1f}" + (f" ± {unc:.1f}" if unc is not None else " (lower bound)"))
    c[1].metric("loop overhead o (µs)", f"{doc.get('loop_overhead_ns', 0.0) / 1e3:.3f}")
    c[2].metric("period error, recurrence (median %)", "n/a" if doc.get("period_err_median_pct") is None
                else f"{doc['period_err_median_pct']:.2f}")
    c[3].metric("drain-limited points for R", str(doc.get("rate_points", 0)))
    caps = doc.get("capacity_by_producers_bytes") or {}
    if caps:
        st.dataframe(capacity_table(doc), hide_index=True, key="cal_capacity")
        st.caption(f"Q source: {doc.get('capacity_source')}")
    else:
        st.info(f"Q not identified: {doc.get('capacity_reason') or 'no capacity in this calibration'}")
    floors = doc.get("issue_floor_ns") or {}
    if floors:
        kb = [tuple(int(x) for x in k.split(",")) for k in floors]
        with st.expander(f"Recovered issue floor T_iss^0(K, B): {len(floors)} points"):
            st.dataframe(pd.DataFrame({"K": [k for k, _ in kb], "B (bytes)": [b for _, b in kb],
                                       "T_iss^0 (µs)": [v / 1e3 for v in floors.values()]}), hide_index=True, key="cal_floors")


@st.cache_resource(show_spinner=False, max_entries=16)
def fitted(path: str, stamp: float, dest: str):
    """fit_calibration over the run's own points for one store path (cached per run version)."""
    run = data.run(path)
    return fit_calibration(data.frame(path, "calibration"), platform=", ".join(run.manifest.get("gpus") or []), store_path=dest)


@st.cache_resource(show_spinner=False, max_entries=16)
def predicted(path: str, stamp: float):
    """(points, model, predictions) for the calibration JSON the run names, when its points are found."""
    run = data.run(path)
    doc = run.calibration_document()
    pts = document_points(run, doc) if doc else None
    if pts is None:
        return None
    model = load_platform_from_doc(doc)
    return pts, model, predict(pts[pts["dest"].astype(str) == doc.get("store_path", "")], model)


def document_points(run, doc: dict):
    """The calibration's own points: the file named in its ``input`` beside the calibration JSON,
    when its sha256 still matches (else None)."""
    from xstage_trace.base.hashing import sha256_of
    from xstage_trace.base.table_files import read_table_file

    f = run.calibration_origin()  # the user's file: its points lie beside it (the run keeps only the JSON)
    name = (doc.get("input") or {}).get("name")
    if f is None or not name or not (f.parent / name).is_file():
        return None
    src = f.parent / name
    if doc["input"].get("sha256") and sha256_of(src) != doc["input"]["sha256"]:
        return None
    return read_table_file(src)


def curves(pred, points, model, dest) -> None:
    """Measured vs predicted figures of one store path."""
    per = pred[pred["mode"] == "periodic"] if "mode" in pred else pred.iloc[0:0]
    if per.empty or "pred_period_ss_ns" not in per:
        st.info("No periodic points for this store path: no period / issue curves.")
    else:
        ks = sorted(per["K"].unique())
        state.keep_valid("cal_k", ks, ks[-1])
        k = st.selectbox("Producers K", ks, key="cal_k")
        rec = "pred_period_rec_ns" if "pred_period_rec_ns" in per else None
        c = st.columns(2)
        c[0].plotly_chart(figures.calibration_vs_gap(per, k, "period_med_ns", "pred_period_ss_ns", rec,
                                                     f"period vs gap, K = {k}", "period (µs)"), width="stretch", key="cal_period")
        c[1].plotly_chart(figures.calibration_vs_gap(per, k, "tiss_med_ns", "pred_issue_ss_ns",
                                                     "pred_issue_rec_ns" if rec else None,
                                                     f"issue time vs gap, K = {k}", "issue time (µs)"), width="stretch", key="cal_issue")
        st.plotly_chart(figures.residuals(per, {"Eq. 1": "period_err_ss_pct", "recurrence": "period_err_rec_pct"}),
                        width="stretch", key="cal_residuals")
    iso = points[(points["dest"].astype(str) == dest) & (points["mode"] == "isolated")]
    if iso.empty:
        st.info("No isolated-burst points: the capacity knee (Q) cannot be shown.")
    else:
        cols = st.columns(max(iso["K"].nunique(), 1))
        for col, (k, g) in zip(cols, iso.groupby("K")):
            g = g.sort_values("V")
            floor = model.floor_ns(g["K"].to_numpy(), g["B"].to_numpy())
            q = model.capacity([k])
            law = None if q is None else isolated_issue_time_ns(g["V"].to_numpy(), model.rate_gbps, floor, q[0])
            col.plotly_chart(figures.isolated_issue(g, floor, law, int(k)), width="stretch", key=f"cal_iso_{k}")
    with st.expander("Points with predictions"):
        st.dataframe(pred, hide_index=True, key="cal_points")


path = state.current_run()
if path:
    st.title(f"Calibration: {state.run_name(path)}")
    run = data.run(path)
    points = data.frame(path, "calibration")
    if len(points):  # a calibration-benchmark run: fit M_X from its own points
        dests = sorted(points["dest"].astype(str).unique())
        state.keep_valid("cal_dest", dests)
        dest = st.selectbox("Store path", dests, key="cal_dest")
        try:
            fit = fitted(path, data.stamp(path), dest)
        except UnrecoveredSweep as exc:
            st.warning(f"M_X cannot be fitted to this run's {dest} points: {exc}. Add isolated launches or periodic ones "
                       "with large gaps to the sweep.")
            st.stop()
        doc = calibration_document(fit, None, state.run_name(path))
        st.header(f"M_X fitted to this run's points: {doc['platform']} {dest}")
        model_table(doc)
        curves(fit.points, points, fit.model, dest)
        st.stop()
    doc = run.calibration_document()
    if doc is None:
        st.warning("No calibration: this run holds no calibration points (not a calibration-benchmark run) and was "
                   "analyzed without `--calibration` (or the file moved). Fit one with `xstage-trace calibrate fit`.")
        st.stop()
    st.header(f"M_X used by this run: {doc.get('platform', '')} {doc.get('store_path', '')}")
    st.caption(f"from {shown_path(run.calibration_path())}")
    model_table(doc)
    got = predicted(path, data.stamp(path))
    if got is None:
        st.info("The calibration's own points are not beside its JSON (or changed since): measured-vs-predicted curves "
                "need them, or `xstage-trace analyze CALIBRATION_DUMPS/ -o RUN` on the benchmark's dumps.")
        st.stop()
    pts, model, pred = got
    dest = doc.get("store_path", "")
    st.caption(f"Curves: the calibration's input points ({doc['input']['name']}, sha256 verified), predicted with "
               "this M_X (no refit).")
    curves(pred, pts, model, dest)
