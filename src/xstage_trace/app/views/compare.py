"""Compare: two runs side by side (e.g. base vs PR, or two platforms), per-configuration deltas;
within one run, expert-wave vs interleaved."""

import streamlit as st

from xstage_trace.app import data, shaping, state

path = state.current_run()
if path:
    st.title("Compare")
    paths = st.session_state[state.RUNS_KEY]
    st.header(f"Expert-wave vs interleaved in {state.run_name(path)}")
    t3 = data.frame(path, "table3")
    sp = shaping.schedule_speedup(t3)
    if sp.empty:
        st.info("No kernel times per schedule in this run (needs tiles and an nsys export).")
    else:
        st.caption("Median nsys kernel time per schedule (timing scope: kernel time); speedup = wave / interleaved.")
        st.dataframe(sp, hide_index=True, key="compare_speedup")
    st.header("Two runs")
    if len(paths) < 2:
        st.info("Only one run is open: give two to compare (`xstage-trace dashboard BASE_RUN PR_RUN`), or open "
                "another run folder in the sidebar.")
        st.stop()
    c = st.columns(2)
    a = c[0].selectbox("Run A (base)", paths, index=0, format_func=state.run_name, key="compare_a")
    b = c[1].selectbox("Run B", paths, index=1, format_func=state.run_name, key="compare_b")
    va, vb = data.verdicts(a), data.verdicts(b)
    st.subheader("Verdict per configuration")
    if va.empty and vb.empty:
        st.info("Neither run has Linear-2 remote-store tiles: no verdicts to compare.")
    else:
        cv = shaping.compare_verdicts(va, vb)
        st.metric("configurations whose verdict changed", f"{int(cv['changed'].sum())}")
        st.dataframe(cv, hide_index=True, key="compare_verdicts")
    st.subheader("Table 3 deltas (B − A)")
    ta, tb = data.frame(a, "table3"), data.frame(b, "table3")
    if ta.empty or tb.empty:
        st.info(f"Table 3 missing in {'A' if ta.empty else 'B'}: it needs fused-kernel tiles.")
    else:
        d = shaping.compare_table3(ta, tb)
        st.dataframe(d, hide_index=True, key="compare_table3")
        if d[[c for c in d.columns if c.endswith(" A")]].isna().all(axis=1).any() or d[[c for c in d.columns if c.endswith(" B")]].isna().all(axis=1).any():
            st.caption("Configurations present in only one run show empty cells for the other.")
