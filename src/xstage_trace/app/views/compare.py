"""Compare: two runs matched on the regression gate's configuration keys (``xstage-trace compare
--by``), led by the kernel-time change and the gate's decision (reports.compare, the same rule as
the CLI); then the verdicts per configuration the runs share; within one run, expert-wave vs
interleaved."""

import streamlit as st

from xstage_trace.app import data, shaping, state
from xstage_trace.base.errors import InputError
from xstage_trace.reports.compare import GateConfig, compare_runs, compare_tiles, gate_outcome
from xstage_trace.reports.configs import CONFIG_KEYS
from xstage_trace.reports.verdict_text import schedule_speedups


@st.cache_resource(show_spinner="Comparing the runs…", max_entries=16)
def _gate(a: str, stamp_a: float, b: str, stamp_b: float, keys: tuple, gate_pct: float):
    """(kernel table, exit code, outcome, tile table) of the gate (the CLI's: kernel time and the tiles), or
    (None, None, the InputError's line, None)."""
    cfg = GateConfig(gate_pct=gate_pct, keys=keys)
    try:
        table, tiles = compare_runs(data.run(a), data.run(b), cfg), compare_tiles(data.run(a), data.run(b), cfg)
    except InputError as exc:
        return None, None, exc.one_line(), None
    code, outcome = gate_outcome(table, None, tiles)
    return table, code, outcome, tiles


GATE_COLUMNS = {"verdict": "gate verdict", "base_ms": "A kernel (ms, nsys)", "new_ms": "B kernel (ms, nsys)", "change_pct": "Δ kernel (%)",
                "ci_low_pct": "CI low (%)", "ci_high_pct": "CI high (%)", "threshold_pct": "threshold (%)",
                "stall_meas_us_base": "A Δt meas (µs)", "stall_meas_us_new": "B Δt meas (µs)",
                "backpressured_tiles_base": "A bp tiles", "backpressured_tiles_new": "B bp tiles", "reason": "reason"}

path = state.current_run()
if path:
    st.title("Compare")
    paths = st.session_state[state.RUNS_KEY]
    st.header("Two runs")
    if len(paths) < 2:
        st.info("Only one run is open: give two to compare (`xstage-trace dashboard BASE_RUN PR_RUN`), or open "
                "another run folder in the sidebar.")
    else:
        c = st.columns([2, 2, 3, 1])
        a = c[0].selectbox("Run A (base)", paths, index=0, format_func=state.run_name, key="compare_a")
        b = c[1].selectbox("Run B (new)", paths, index=1, format_func=state.run_name, key="compare_b")
        keys = c[2].multiselect("Match configurations on (--by)", list(CONFIG_KEYS), default=list(CONFIG_KEYS), key="compare_by")
        gate_pct = c[3].number_input("gate (%)", 0.0, 100.0, 2.0, step=0.5, key="compare_gate")
        keys = tuple(k for k in CONFIG_KEYS if k in keys)
        if not keys:
            st.warning("Choose at least one key to match configurations on.")
            st.stop()
        table, code, outcome, tile_gate = _gate(a, data.stamp(a), b, data.stamp(b), keys, float(gate_pct))
        if table is None:
            st.warning(f"No comparison: {outcome}")
            st.stop()
        head = shaping.gate_headline(table)
        (st.success if code == 0 else st.error)(
            f"**{outcome}** — gate {gate_pct:g} % on the median kernel time per configuration ({', '.join(keys)}); "
            f"{head['in_both']} configuration{'s' if head['in_both'] != 1 else ''} with kernel times in both runs"
            + (f", {len(tile_gate)} tile quantities." if tile_gate is not None and len(tile_gate) else "."))
        m = st.columns(3)
        m[0].metric("kernel time B vs A (median over configurations)",
                    "n/a (no nsys)" if head["median_change_pct"] != head["median_change_pct"] else f"{head['median_change_pct']:+.1f} %")
        if head["worst"] and head["worst"][1] > 0:
            m[1].metric(f"largest slow-down: {head['worst'][0]}", f"{head['worst'][1]:+.1f} %")
        if head["best"] and head["best"][1] < 0:
            m[2].metric(f"largest speed-up: {head['best'][0]}", f"{head['best'][1]:+.1f} %")
        st.caption("Timing scope: kernel time = nsys kernel rows, per trial the slowest rank, median over trials, warm-ups "
                   "excluded (same rule as `xstage-trace compare --by`); Δt meas = median measured stall per remote-store tile, "
                   "probe clock per SM.")
        if len(table):
            shown = table[[k for k in keys if k in table] + [c for c in GATE_COLUMNS if c in table]].rename(columns=GATE_COLUMNS)
            st.dataframe(shown, hide_index=True, key="compare_gate_table")
        if tile_gate is not None and len(tile_gate):
            with st.expander(f"The gate on the tiles: {len(tile_gate)} quantities (median and p99 stall, stalled share, exposed store time, probe drops)"):
                st.dataframe(tile_gate, hide_index=True, key="compare_tile_gate")

        st.subheader("Verdict per configuration")
        va, vb = data.verdicts(a), data.verdicts(b)
        if va.empty and vb.empty:
            st.info("Neither run has Linear-2 remote-store tiles: no verdicts to compare.")
        else:
            cv = shaping.compare_verdicts(va, vb, keys)
            n_both = int(cv["in both"].sum()) if len(cv) else 0
            if not n_both:
                st.info(f"The runs have no configuration in common on {', '.join(k for k in keys if k != 'kernel')}: no verdict to compare.")
            else:
                st.metric("configurations whose verdict changed", f"{int(cv['changed'].sum())}")
                st.caption(f"Of the {n_both} configurations in both runs; configurations in one run only are listed with "
                           "`in both` unticked.")
            st.dataframe(cv, hide_index=True, key="compare_verdicts")

    st.header(f"Expert-wave vs interleaved in {state.run_name(path)}")
    sp = schedule_speedups(data.verdicts(path))
    if sp.empty:
        st.info("No kernel times per schedule in this run (needs tiles and an nsys export).")
    else:
        st.caption("Median nsys kernel time per schedule (timing scope: kernel time, ms); speedup = wave / interleaved.")
        st.dataframe(sp, hide_index=True, key="compare_speedup")
