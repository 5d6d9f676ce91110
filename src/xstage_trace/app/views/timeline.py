"""Timeline: nsys kernels and NVTX ranges, GPU metrics and per-SM tile spans on one time axis,
for one kernel (probe dump) and a window of it. Never more than MAX_SPANS_DRAWN spans are drawn:
above that the window is shown as a per-SM heat map of one span kind."""

import streamlit as st

from xstage_trace.app import data, figures, shaping, state

DEFAULT_METRICS = ("Tensor Active", "SM Active", "PCIe TX", "PCIe RX", "NVLink TX", "NVLink RX")
SM_NEIGHBOURS = 8
HEAT_EVENTS = {"slot wait (MMA waits for a free slot)": "slot_wait", "remote store (epilogue)": "rs",
               "mainloop (MMA)": "mainloop", "remote-store burst (benchmark)": "burst"}

path = state.current_run()
if path:
    st.title(f"Timeline: {state.run_name(path)}")
    kernels = data.frame(path, "kernels")
    nvtx = data.frame(path, "nvtx")
    gm = data.frame(path, "gpu_metrics")
    index = data.dump_index(path)
    slices = data.frame(path, "probe_slices")
    names = {**{d: d for d in slices["dump"].astype(str).unique()}, **dict(zip(index["dump"], index["config"]))}
    if not names and kernels.empty:
        st.warning("Nothing to show on a timeline: the run has neither probe records nor an nsys export.")
        st.stop()
    if kernels.empty:
        st.warning("No nsys export in this run: no kernels, NVTX ranges or GPU metrics; probe times are relative to "
                   "the first probe record.")
    selected = st.session_state.get("selected_tile")  # set on the Tiles page: (dump, cta, tile)
    fresh_tile = bool(selected) and st.session_state.get("_tile_applied") != selected
    top = st.columns(2)
    spans = dump = None
    if names:
        dumps = sorted(names)
        busiest = str(index.loc[index["backpressured"].idxmax(), "dump"]) if len(index) else None
        state.keep_valid("timeline_dump", dumps, busiest)
        if fresh_tile and selected[0] in dumps:
            st.session_state["timeline_dump"] = selected[0]
        dump = top[0].selectbox("Kernel (probe dump)", dumps, key="timeline_dump",
                                format_func=lambda d: d if names[d] == d else f"{names[d]} · {d}")
        spans = data.spans(path, dump)
        if spans.empty:
            st.info("This dump has no begin/end spans (mainloop, slot wait, remote store, burst).")
            st.stop()
        lo_ns, hi_ns = float(spans["start_ns"].min()), float(spans["end_ns"].max())
        k = shaping.kernel_containing(kernels, lo_ns, hi_ns)
        if k is not None:
            lo_ns, hi_ns = min(lo_ns, float(k["start_ns"])), max(hi_ns, float(k["end_ns"]))
    else:
        st.info("No probe records: only nsys rows are shown (analyze with probe dumps for per-SM tile lanes).")
        lo_ns, hi_ns = float(kernels["start_ns"].min()), float(kernels["end_ns"].max())
    metric_names = data.metric_names(path)
    chosen = top[1].multiselect("GPU metrics", metric_names, default=[m for m in DEFAULT_METRICS if m in metric_names],
                                key="timeline_metrics")
    origin = lo_ns
    total_us = max((hi_ns - lo_ns) / 1e3, 1e-3)
    if st.session_state.get("_window_for") != (path, dump) or "timeline_window" not in st.session_state:  # another kernel: start from all of it
        st.session_state["_window_for"] = (path, dump)
        st.session_state["timeline_window"] = (0.0, total_us)
    sm_lo, sm_hi = (int(spans["sm_id"].min()), int(spans["sm_id"].max())) if spans is not None else (0, 0)
    if st.session_state.get("_sms_for") != (path, dump) or "timeline_sms" not in st.session_state:
        st.session_state["_sms_for"] = (path, dump)
        st.session_state["timeline_sms"] = (sm_lo, sm_hi)
    if fresh_tile and spans is not None and selected[0] == dump:
        mine = spans[(spans["cta"] == selected[1]) & (spans["tile"] == selected[2])]
        if len(mine):  # the tile in its surroundings: its time ± its length, its SM ± SM_NEIGHBOURS
            a, b = shaping.window_around(float(mine["start_ns"].min()), float(mine["end_ns"].max()), lo_ns, hi_ns)
            st.session_state["timeline_window"] = ((a - origin) / 1e3, (b - origin) / 1e3)
            sm = int(mine["sm_id"].iloc[0])
            st.session_state["timeline_sms"] = (max(sm_lo, sm - SM_NEIGHBOURS), min(sm_hi, sm + SM_NEIGHBOURS))
        st.session_state["_tile_applied"] = selected
    c = st.columns([3, 1])
    win = c[0].slider("Window (µs from the kernel start)", 0.0, total_us, key="timeline_window",
                      step=max(total_us / 2000, 1e-3), format="%.1f")
    sms = c[1].slider("SMs", sm_lo, max(sm_hi, sm_lo + 1), key="timeline_sms") if spans is not None else None
    start_ns, end_ns = origin + win[0] * 1e3, origin + win[1] * 1e3
    kw = kernels[(kernels["end_ns"] >= start_ns) & (kernels["start_ns"] <= end_ns)] if len(kernels) else kernels
    nw = nvtx[(nvtx["end_ns"] >= start_ns) & (nvtx["start_ns"] <= end_ns)] if len(nvtx) else nvtx
    mw = shaping.binned_metrics(gm, chosen, start_ns, end_ns)
    shown = heat = highlight = None
    heat_label = ""
    if spans is not None:
        c = st.columns([1, 1, 1, 2])
        inwin = spans[(spans["end_ns"] >= start_ns) & (spans["start_ns"] <= end_ns)
                      & (spans["sm_id"] >= sms[0]) & (spans["sm_id"] <= sms[1])]
        dtiles = data.dump_tiles(path, dump)
        c[0].metric("spans in window", f"{len(inwin):,}")
        c[1].metric("backpressured tiles in this kernel", f"{int(dtiles['backpressured'].sum()):,}" if len(dtiles) else "no tiles")
        if len(inwin) <= shaping.MAX_SPANS_DRAWN:
            shown = shaping.span_categories(inwin, dtiles)
            c[2].metric("drawn as", "spans")
        else:
            c[2].metric("drawn as", "heat map")
            kinds = [label for label, ev in HEAT_EVENTS.items() if (inwin["event"] == ev).any()]
            heat_label = c[3].radio("Heat map of", kinds, key="timeline_heat")
            ev = inwin[inwin["event"] == HEAT_EVENTS[heat_label]]
            heat = shaping.busy_fraction(ev, start_ns, end_ns, bins=400)
            st.caption(f"{len(inwin):,} spans exceed the {shaping.MAX_SPANS_DRAWN:,} drawn at once: narrow the window "
                       "to see individual spans.")
        if selected and selected[0] == dump:
            highlight = shaping.span_categories(spans[(spans["cta"] == selected[1]) & (spans["tile"] == selected[2])], dtiles)
            st.caption(f"Selected tile (from the Tiles page): CTA {selected[1]}, tile {selected[2]} (shaded).")
    fig = figures.timeline_figure(kw, nw, mw, shown, heat, heat_label, origin, start_ns, end_ns, highlight)
    st.plotly_chart(fig, width="stretch", key="timeline_chart")
    if not len(gm):
        st.caption("No GPU metrics in this run (nsys `--gpu-metrics-devices` was not used, or no nsys export).")
