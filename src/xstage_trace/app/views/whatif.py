"""What-if: the X-Stage model with sliders (gap, burst size, producers, interleave ratio, R, Q),
evaluated with the same functions as ``xstage-trace model burst|interleave|stall``
(pipeline/model_eval.py), verdict by analysis/verdict.py. Defaults come from the selected run."""

import math

import numpy as np
import streamlit as st

from xstage_trace.analysis.burst_gap import issue_time_ns
from xstage_trace.analysis.stall_law import predicted_stall_ns
from xstage_trace.analysis.tiles import MIN_NOISE_NS
from xstage_trace.analysis.verdict import stall_verdict
from xstage_trace.app import data, figures, state
from xstage_trace.collectors.calibration_io import load_platform_from_doc
from xstage_trace.pipeline.model_eval import MIB, burst_doc, interleave_doc, stall_doc

path = state.current_run()
if path:
    st.title(f"What-if: {state.run_name(path)}")
    run = data.run(path)
    t3 = data.frame(path, "table3")
    tiles = data.tiles_with_config(path)
    doc = run.calibration_document()
    model = load_platform_from_doc(doc) if doc else None
    # defaults: the selected configuration's medians, the run's calibration, the tile counts
    l2_us, l1_us, producers, n1, n2, noise_ns = 7.5, 98.0, 132, 3, 4, MIN_NOISE_NS
    choice = None
    if not t3.empty:
        labels = (t3["dest"].astype(str) + " " + t3["shape"].astype(str)).tolist()
        state.keep_valid("whatif_cfg", list(range(len(labels))))
        choice = st.selectbox("Start from configuration", range(len(labels)), format_func=lambda j: labels[j], key="whatif_cfg")
        row = t3.iloc[choice]
        l2_us, l1_us = float(row["mainloop_l2_us"]), float(row["mainloop_l1_us"])
        cfg = tiles[(tiles["dest"] == row["dest"]) & (tiles["shape"] == row["shape"])]
        if len(cfg):
            producers = int(cfg["cta"].nunique())
            c1, c2 = int((cfg["tile_kind"] == "linear1").sum()), int((cfg["tile_kind"] == "linear2").sum())
            if c1 and c2:
                g = math.gcd(c1, c2)
                n1, n2 = c1 // g, c2 // g
            noise_ns = float(cfg["noise_ns"].max())
    else:
        st.info("No Table 3 in this run: the sliders start from generic values (no tiles to take mainloops from).")
    if model is None:
        st.info("No calibration with this run: R, T_iss^0 and Q start from generic values (analyze with --calibration).")
    b_default = 32
    defaults = {
        "whatif_l2": round(l2_us, 2), "whatif_l1": round(l1_us, 2), "whatif_b": b_default, "whatif_k": producers,
        "whatif_n1": n1, "whatif_n2": n2, "whatif_r": round(model.rate_gbps, 1) if model else 70.0,
        "whatif_t0": round(float(model.floor_ns([producers], [b_default * 1024])[0]) / 1e3, 3) if model else 0.6,
        "whatif_q": round(float(model.capacity([producers])[0] / MIB), 2) if model is not None and model.capacity_by_producers else 28.0,
    }
    if st.session_state.get("_whatif_for") != (path, choice) or "whatif_l2" not in st.session_state:
        st.session_state["_whatif_for"] = (path, choice)  # a new starting point: reset every slider
        st.session_state.update(defaults)
    with st.form("whatif_form", border=False):
        c = st.columns(3)
        gap_us = c[0].slider("gap G = Linear-2 mainloop T_L2 (µs)", 0.1, 200.0, key="whatif_l2")
        l1 = c[0].slider("Linear-1 mainloop T_L1 (µs)", 0.1, 400.0, key="whatif_l1")
        b_kib = c[1].slider("burst size B per producer (KiB)", 1, 512, key="whatif_b")
        k = c[1].slider("producers K", 1, 512, key="whatif_k")
        n1 = c[1].number_input("interleave: Linear-1 tiles n1 per cycle", 0, 10000, key="whatif_n1")
        n2 = c[1].number_input("interleave: Linear-2 tiles n2 per cycle", 1, 10000, key="whatif_n2")
        rate = c[2].slider("drain rate R (GB/s)", 1.0, 2000.0, key="whatif_r")
        t0_us = c[2].slider("recovered issue floor T_iss^0 (µs)", 0.01, 50.0, key="whatif_t0")
        q_mib = c[2].slider("capacity Q (MiB)", 0.1, 256.0, key="whatif_q")
        st.form_submit_button("Evaluate")
    b_bytes = b_kib * 1024
    volume = k * b_bytes
    inter = interleave_doc(volume, l1, gap_us, int(n1), int(n2), t0_us, rate, None, None, None)
    wave = burst_doc(rate, t0_us, k, b_bytes, gap_us, q_mib)
    intl = burst_doc(rate, t0_us, k, b_bytes, inter["gap_interleaved_us"], q_mib)
    stall_wave = stall_doc(wave["issue_time_us"], gap_us, None, None)["predicted_stall_us"]
    stall_int = stall_doc(intl["issue_time_us"], l1, None, None)["predicted_stall_us"]
    verdicts = stall_verdict([np.nan, np.nan], [stall_wave * 1e3, stall_int * 1e3], noise_ns)
    st.header("Predicted")
    c = st.columns(4)
    c[0].metric("expert-wave: predicted stall (µs)", f"{stall_wave:.2f}")
    c[1].metric("expert-wave: verdict", str(verdicts[0]))
    c[2].metric("interleaved: predicted stall (µs)", f"{stall_int:.2f}")
    c[3].metric("interleaved: verdict", str(verdicts[1]))
    st.caption(f"Span T_RS = issue time by Eq. 1 at the schedule's gap; cover = the successor's mainloop (T_L2 in the "
               f"wave, T_L1 after interleaving); stall Δt = [T_RS − T_cover]₊; noise floor {noise_ns:.0f} ns.")
    c = st.columns(4)
    c[0].metric("aggregate volume V = K·B (MiB)", f"{volume / MIB:.2f}")
    c[1].metric("drain time V/R (µs)", f"{wave['drain_time_us']:.2f}")
    c[2].metric("recovery gap G* (µs)", f"{wave['recovery_gap_us']:.2f}")
    c[3].metric("design test (wave)", f"{wave['verdict']}")
    c = st.columns(4)
    c[0].metric("ρ wave", f"{wave['rho']:.2f}")
    c[1].metric("gap interleaved G_int (µs)", f"{inter['gap_interleaved_us']:.2f}")
    c[2].metric("issue overhead wave / interleaved (µs)", f"{inter['issue_overhead_wave_us']:.2f} / {inter['issue_overhead_interleaved_us']:.2f}")
    c[3].metric("full recovery when interleaved", "yes" if inter["full_recovery"] else "no")
    if wave["failed_bounds"]:
        st.warning("Design test fails (wave): " + "; ".join(wave["failed_bounds"]) + ". Reshape injection.")
    sweep = np.linspace(0.1, max(4 * gap_us, 2 * wave["drain_time_us"], 1.0), 200)
    span_w = issue_time_ns(sweep * 1e3, volume, rate, t0_us * 1e3)
    g_int = sweep + (int(n1) / int(n2)) * l1
    span_i = issue_time_ns(g_int * 1e3, volume, rate, t0_us * 1e3)
    st.plotly_chart(figures.whatif_curve(sweep, predicted_stall_ns(span_w, sweep * 1e3) / 1e3,
                                         predicted_stall_ns(span_i, l1 * 1e3) / 1e3, gap_us,
                                         "Linear-2 mainloop T_L2 = wave gap G (µs)"), width="stretch", key="whatif_chart")
    st.caption("Same model functions as the CLI: `xstage-trace model burst`, `model interleave`, `model stall`.")
