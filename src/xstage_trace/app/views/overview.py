"""Overview: GPUs, kernels, timing scopes, alignment, warnings, Table 3 and the verdict per configuration."""

import streamlit as st

from xstage_trace.app import data, shaping, state

path = state.current_run()
if path:
    run = data.run(path)
    m = run.manifest
    st.title(f"Overview: {state.run_name(path)}")
    tables = m.get("tables", {})
    kernels = data.frame(path, "kernels")
    tiles = data.frame(path, "tiles")
    st.subheader("GPU: " + (", ".join(m.get("gpus") or []) or "unknown"))
    c = st.columns(5)
    c[0].metric("kernel launches (nsys)", f"{len(kernels):,}")
    c[1].metric("probe records", f"{tables.get('probes', 0):,}")
    c[2].metric("tiles", f"{len(tiles):,}")
    c[3].metric("backpressured tiles", f"{int(tiles['backpressured'].sum()) if len(tiles) else 0:,}")
    c[4].metric("bursts", f"{tables.get('bursts', 0):,}")
    st.caption(f"time base: {m.get('time_base', 'unknown')} · calibration: {m.get('calibration') or 'none'} · "
               f"schema {m.get('schema_version')} · xstage-trace {m.get('tool_version', '?')}")

    missing = []
    if not tables.get("probes"):
        missing.append("**No probe records**: tiles, Table 3, bursts and verdicts need probe dumps "
                       "(`xstage-trace analyze REPORT.nsys-rep DUMPS/`).")
    if not len(kernels):
        missing.append("**No Nsight Systems export**: no kernels, NVTX ranges or GPU metrics, and probe times are "
                       "relative to the first probe record (give the `.nsys-rep` to `analyze`).")
    if not m.get("calibration"):
        missing.append("**No calibration**: ρ, q and the capacity guard of the bursts are not computed "
                       "(`analyze … --calibration calibration.json`).")
    for line in missing:
        st.warning(line)

    st.header("Verdict per configuration")
    v = data.verdicts(path)
    if v.empty:
        st.info("No Linear-2 tiles with remote stores in this run: no verdict.")
    else:
        st.caption("Rule (analysis/verdict.py): a configuration **stalls** when the median measured or predicted stall "
                   "of its Linear-2 remote-store tiles exceeds the noise floor (from the control run).")
        show = v.assign(predicted_stall_med_us=v["predicted_stall_med_ns"] / 1e3,
                        measured_stall_med_us=v["measured_stall_med_ns"] / 1e3, noise_us=v["noise_ns"] / 1e3)
        st.dataframe(show[["dest", "shape", "schedule", "variant", "verdict", "l2_tiles", "backpressured_tiles",
                           "predicted_stall_med_us", "measured_stall_med_us", "noise_us"]], hide_index=True, key="verdicts")

    st.header("Table 3")
    t3 = data.frame(path, "table3")
    if t3.empty:
        st.info("No Table 3: it needs fused-kernel tiles (probe dumps with mainloop, slot-wait and remote-store records).")
    else:
        st.caption("Medians over the Linear-2 tiles per schedule, µs (timing scope: probe clock per SM); "
                   "kernel_ms_*: median nsys kernel time per schedule (timing scope: kernel time).")
        st.dataframe(t3, hide_index=True, key="table3")

    st.header("Kernels")
    if kernels.empty:
        st.info("No kernels: the run has no Nsight Systems export.")
    else:
        st.dataframe(shaping.kernel_summary(kernels), hide_index=True, key="kernels")

    st.header("Timing scopes")
    st.markdown(
        "- **kernel time**: nsys kernel rows (`kernels`, Table 3 `kernel_ms_*`)\n"
        "- **per-tile spans**: probe `clock64` converted to ns per SM (`tiles`, Table 3 µs columns)\n"
        "- **sender-visible**: the issuing role's own clock (remote-store spans, burst issue times)\n"
        "- **session time**: nsys session clock; probe `%globaltimer` aligned to it (offset + drift fit below)")

    st.header("Clock alignment")
    al = run.alignment()
    if al.empty:
        st.info("No alignment: without an nsys export the probes keep their own time base.")
    else:
        st.dataframe(al, hide_index=True, key="alignment")
        st.metric("max alignment residual (ns)", f"{al['residual_ns'].abs().max():.0f}")

    st.header("Warnings")
    warns = run.warnings()
    if warns:
        for w in warns:
            st.warning(w)
    else:
        st.success("No warnings while collecting this run.")
