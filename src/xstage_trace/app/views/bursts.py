"""Bursts: the §4 audit over one burst sequence: V_n, G_n, ρ_n and q_n + b_n^iso against Q."""

import streamlit as st

from xstage_trace.app import data, figures, shaping, state
from xstage_trace.analysis.calibration_model import load_platform_from_doc

path = state.current_run()
if path:
    st.title(f"Bursts: {state.run_name(path)}")
    bursts = data.frame(path, "bursts")
    if bursts.empty:
        st.warning("No remote-store bursts in this run: bursts are reconstructed from probe records of remote-store "
                   "events (analyze the probe dumps).")
        st.stop()
    index = data.dump_index(path)
    names = dict(zip(index["dump"], index["config"]))
    dumps = sorted(bursts["dump"].astype(str).unique())
    busiest = str(index.loc[index["backpressured"].idxmax(), "dump"]) if len(index) else None
    state.keep_valid("bursts_dump", dumps, busiest)  # start on the most backpressured kernel
    dump = st.selectbox("Burst sequence (probe dump)", dumps, key="bursts_dump",
                        format_func=lambda d: f"{names[d]} · {d}" if d in names else d)
    b = bursts[bursts["dump"].astype(str) == dump]
    doc = data.run(path).calibration_document()
    model = load_platform_from_doc(doc) if doc else None
    cap = model.capacity(b.sort_values("burst")["producers"].to_numpy()) if model is not None else None
    seq = shaping.burst_sequence(b, cap)
    onset = shaping.guard_onset(seq)
    c = st.columns(5)
    c[0].metric("bursts", f"{len(seq):,}")
    c[1].metric("median V_n (MiB)", f"{seq['volume_mib'].median():.2f}")
    c[2].metric("max ρ_n", "n/a" if seq["rho"].isna().all() else f"{seq['rho'].max():.2f}")
    c[3].metric("bursts with ρ_n > 1", "n/a" if seq["rho"].isna().all() else f"{int((seq['rho'] > 1).sum()):,}")
    c[4].metric("guard onset (burst)", "none" if onset is None else str(onset))
    if model is None:
        st.warning("No calibration with this run: ρ_n, q_n and the capacity guard need the platform model M_X "
                   "(`xstage-trace analyze … --calibration calibration.json`). Showing V_n and G_n only.")
    elif cap is None:
        st.info("The calibration has no capacity Q (not identifiable on this path): the guard is not evaluated.")
    else:
        st.caption(f"M_X: R = {model.rate_gbps:.1f} GB/s, Q(K) from {doc.get('store_path', '?')} calibration "
                   f"({data.run(path).manifest.get('calibration')}).")
    if onset is not None:
        r = seq[seq["burst"] == onset].iloc[0]
        st.error(f"Capacity guard fails first at burst {onset}: q_n + b_n^iso = {r['guard_lhs_mib']:.2f} MiB > "
                 f"Q = {r['capacity_mib']:.2f} MiB (excess {r['guard_lhs_mib'] - r['capacity_mib']:.2f} MiB); "
                 "past it, issue stretches (backpressure).")
    st.plotly_chart(figures.bursts_figure(seq, onset), width="stretch", key="bursts_chart")
    st.dataframe(seq, hide_index=True, key="bursts_table")
