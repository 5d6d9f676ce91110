"""Overview: the verdict per configuration first (one sentence each, reports/verdict_text), its table with
the cause and the schedule speedup, then Table 3, kernels, timing scopes, alignment and warnings.

Its alerts pass ``icon=""`` (they have none): without it Streamlit loads its emoji catalog (~80 ms of import on the
dashboard's first page) to look for a leading emoji in every alert whose text is not ASCII (µs, ×)."""

import streamlit as st

from xstage_trace.app import data, state
from xstage_trace.reports.content import table3_display
from xstage_trace.reports.verdict_text import headline, schedule_speedups

path = state.current_run()
if path:
    run = data.run(path)
    m = run.manifest
    st.title(f"Overview: {state.run_name(path)}")
    tables = m.get("tables", {})
    n_kernels, kernel_summary = data.kernel_summary(path)
    n_tiles, n_backpressured = data.tile_counts(path)
    st.header("Verdict per configuration")
    v = data.verdicts(path)
    if v.empty:
        st.info("No remote-store tiles in this run: no verdict (it needs probe dumps of a fused kernel).", icon="")
    else:
        st.markdown(f"**{headline(v)}**")
        groups = {"stall-bound": [], "covered": [], "unknown": []}
        for line in v["sentence"]:
            name, _, rest = line.partition(": ")
            groups[next((g for g in groups if rest.startswith(g)), "unknown")].append(f"**{name}**: {rest}")
        for line in groups["stall-bound"]:  # each stall-bound configuration on its own, the covered ones together
            st.error(line, icon="")
        if groups["covered"]:
            st.success("\n".join(f"- {line}" for line in groups["covered"]), icon="")
        if groups["unknown"]:
            st.info("\n".join(f"- {line}" for line in groups["unknown"]), icon="")
        st.caption("Rule (analysis/verdict.py, docs/model.md §5): **stall-bound** when the median measured stall of the "
                   "configuration's remote-store tiles (slot wait beyond the control's floor plus compute span beyond the control's) "
                   "exceeds the noise floor, or when more than a quarter of its tiles stall beyond it; **cause**: slot backpressure "
                   "where the slot wait carries it, mainloop inflation where the compute span does (a stall the slot model's Δt cannot "
                   "see, so it can read 0 µs beside a stall-bound verdict); **unknown** without a control to measure against. "
                   "Stalls in µs (probe clock per SM), kernel time in ms (nsys).")
        cols = {"dest": "dest", "shape": "shape", "variant": "variant", "schedule": "schedule", "verdict": "verdict", "diagnosis": "cause",
                "measured_stall_us": "stall measured (µs)", "kernel_ms": "kernel (ms)", "stalled_tiles": "stalled tiles", "tiles": "tiles",
                "slot_stall_us": "slot part (µs)", "compute_stall_us": "compute part (µs)", "slot_model_stall_us": "slot model Δt (µs)",
                "predicted_stall_us": "calibrated prediction (µs)", "noise_us": "noise floor (µs)", "fix": "best fix (§13)",
                "fix_kernel_ms": "fix: predicted kernel (ms)", "fix_gain": "fix: predicted gain (×)", "floor_kernel_ms": "link floor (ms)"}
        st.dataframe(v[[c for c in cols if c in v]].round(3).rename(columns=cols), hide_index=True, key="verdicts")
        sp = schedule_speedups(v)
        if len(sp):
            st.subheader("Schedule speedup (kernel time, nsys)")
            st.dataframe(sp.rename(columns={"kernel_ms_wave": "wave (ms)", "kernel_ms_interleaved": "interleaved (ms)",
                                            "speedup": "speedup wave / interleaved"}), hide_index=True, key="speedups")

    st.header("Run: " + (", ".join(m.get("gpus") or []) or "unknown"))
    c = st.columns(5)
    c[0].metric("kernel launches (nsys)", f"{n_kernels:,}")
    c[1].metric("probe records", f"{tables.get('probes', 0):,}")
    c[2].metric("tiles", f"{n_tiles:,}")
    c[3].metric("backpressured tiles", f"{n_backpressured:,}")
    c[4].metric("bursts", f"{tables.get('bursts', 0):,}")
    st.caption(f"time base: {m.get('time_base', 'unknown')} · calibration: {m.get('calibration') or 'none'} · "
               f"schema {m.get('schema_version')} · xstage-trace {m.get('tool_version', '?')}")

    missing = []
    if not tables.get("probes"):
        missing.append("**No probe records**: tiles, Table 3, bursts and verdicts need probe dumps "
                       "(`xstage-trace analyze REPORT.nsys-rep DUMPS/`).")
    if not n_kernels:
        missing.append("**No Nsight Systems export**: no kernels, NVTX ranges or GPU metrics, and probe times are "
                       "relative to the first probe record (give the `.nsys-rep` to `analyze`).")
    if not m.get("calibration"):
        missing.append("**No calibration**: ρ, q and the capacity guard of the bursts are not computed "
                       "(`analyze … --calibration calibration.json`).")
    for line in missing:
        st.warning(line, icon="")

    st.header("Table 3")
    t3 = data.frame(path, "table3")
    if t3.empty:
        st.info("No Table 3: it needs fused-kernel tiles (probe dumps with mainloop, slot-wait and remote-store records).", icon="")
    else:
        st.caption("One row per configuration and schedule: medians over its remote-store tiles in µs (timing scope: probe clock "
                   "per SM); kernel time in ms (nsys).")
        st.dataframe(table3_display(t3), hide_index=True, key="table3")

    st.header("Kernels")
    if not n_kernels:
        st.info("No kernels: the run has no Nsight Systems export.", icon="")
    else:
        st.dataframe(kernel_summary, hide_index=True, key="kernels")

    st.header("Timing scopes")
    st.markdown(
        "- **kernel time**: nsys kernel rows (`kernels`, Table 3 `kernel_ms_*`)\n"
        "- **per-tile spans**: probe `clock64` converted to ns per SM (`tiles`, Table 3 µs columns)\n"
        "- **sender-visible**: the issuing role's own clock (remote-store spans, burst issue times)\n"
        "- **session time**: nsys session clock; probe `%globaltimer` aligned to it (offset + drift fit below)")

    st.header("Clock alignment")
    al = run.alignment()
    if al.empty:
        st.info("No alignment: without an nsys export the probes keep their own time base.", icon="")
    else:
        st.dataframe(al, hide_index=True, key="alignment")
        st.metric("max alignment residual (ns)", f"{al['residual_ns'].abs().max():.0f}")

    st.header("Warnings")
    warns = run.warnings()
    if warns:
        for w in warns:
            st.warning(w, icon="")
    else:
        st.success("No warnings while collecting this run.", icon="")
