"""Tiles: predicted vs measured stall per tile, distributions, the backpressured tiles."""

import streamlit as st

from xstage_trace.app import data, figures, shaping, state

GROUPS = {"configuration": "config", "tile kind": "tile_kind", "expert": "expert", "wave": "wave", "CTA": "cta"}

path = state.current_run()
if path:
    st.title(f"Tiles: {state.run_name(path)}")
    tiles = data.tiles_with_config(path)
    if tiles.empty:
        st.warning("No tiles in this run: the tile table needs fused-kernel probe dumps (mainloop, slot-wait and "
                   "remote-store records). Analyze them with `xstage-trace analyze REPORT.nsys-rep DUMPS/`.")
        st.stop()
    configs = sorted(tiles["config"].unique())
    default = [c for c in configs if "wave" in c][:1] or configs[:1]
    kinds_all = sorted(tiles["tile_kind"].unique())
    for key, options, start in (("tiles_configs", configs, default), ("tiles_kinds", kinds_all, ["linear2"])):
        cur = st.session_state.get(key)
        valid = [v for v in cur or [] if v in options]
        if cur is None or (cur and not valid):  # first visit, or another run: start over
            st.session_state[key] = [v for v in start if v in options]
        elif len(valid) != len(cur):
            st.session_state[key] = valid
    c = st.columns([3, 1])
    chosen = c[0].multiselect("Configurations", configs, key="tiles_configs")
    kinds = c[1].multiselect("Tile kinds", kinds_all, key="tiles_kinds")
    t = tiles[tiles["config"].isin(chosen) & tiles["tile_kind"].isin(kinds)]
    if t.empty:
        st.info("No tiles match the selection.")
        st.stop()
    agree = shaping.stall_agreement(t)
    c = st.columns(5)
    c[0].metric("tiles (with a measured successor)", f"{agree['tiles']:,}")
    c[1].metric("backpressured", f"{int(t['backpressured'].sum()):,}")
    c[2].metric("Spearman ρ (pred, meas)", "n/a" if agree["spearman"] != agree["spearman"] else f"{agree['spearman']:.3f}")
    c[3].metric("median |error| (µs)", f"{agree['median_abs_err_ns'] / 1e3:.3f}")
    c[4].metric("mean |error| (µs)", f"{agree['mean_abs_err_ns'] / 1e3:.3f}")

    st.header("Predicted vs measured stall")
    sample = shaping.scatter_sample(t.dropna(subset=["predicted_stall_ns", "measured_stall_ns"]))
    if len(sample) < agree["tiles"]:
        st.caption(f"Drawing {len(sample):,} of {agree['tiles']:,} tiles (all backpressured first); statistics use all.")
    st.plotly_chart(figures.stall_scatter(sample, "config"), width="stretch", key="tiles_scatter")

    st.header("Distribution")
    by_label = st.selectbox("Group by", list(GROUPS), key="tiles_group")
    value = st.radio("Value", ["measured_stall_ns", "predicted_stall_ns", "rs_span_ns", "mainloop_ns"], horizontal=True,
                     key="tiles_value", format_func=lambda c: c.replace("_ns", "").replace("_", " "))
    q = shaping.group_quantiles(t, GROUPS[by_label], value)
    st.plotly_chart(figures.quantile_boxes(q, GROUPS[by_label], value.replace("_ns", "").replace("_", " ")),
                    width="stretch", key="tiles_boxes")
    st.dataframe(shaping.quantiles_in_us(q), hide_index=True, key="tiles_quantiles")  # the axis's unit

    st.header("Backpressured tiles")
    bp = shaping.backpressured_tiles(t)
    st.caption(f"{int(t['backpressured'].sum()):,} backpressured tiles (predicted or measured stall above the noise "
               f"floor), largest measured stall first{'; the first 5,000 shown' if len(bp) == 5000 else ''}. "
               "Select a row, or pick one below, to see it on the Timeline.")
    event = st.dataframe(bp, hide_index=True, key="tiles_bp", on_select="rerun", selection_mode="single-row")
    if len(bp):
        rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
        options = list(range(min(len(bp), 200)))
        pick = st.selectbox("Tile to show on the timeline", options, key="tiles_pick",
                            index=rows[0] if rows and rows[0] < len(options) else 0,
                            format_func=lambda i: f"{bp.loc[i, 'config']} · CTA {bp.loc[i, 'cta']} · tile {bp.loc[i, 'tile']} · "
                                                  f"measured {bp.loc[i, 'measured_stall_us']:.2f} µs")
        if st.button("Show on the timeline", key="tiles_show"):
            r = bp.loc[rows[0] if rows else pick]
            st.session_state["selected_tile"] = (str(r["dump"]), int(r["cta"]), int(r["tile"]))
            st.switch_page("views/timeline.py")
