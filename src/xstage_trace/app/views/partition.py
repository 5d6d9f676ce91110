"""Partition: a CTA-partition C sweep scored (docs/model.md §9): per workload the measured oracle C, the selector's C
and its regret, the mean/max regret, the speedup over the best fixed C with its bootstrap interval and the solver
time, from a ``partition_regret.json`` (``xstage-trace model partition-sweep FOLDER --write``); the same document
``model partition-sweep DOC.json -o FILE.md`` renders as Markdown."""

from pathlib import Path

import pandas as pd
import streamlit as st

from xstage_trace.app import state
from xstage_trace.base.errors import InputError
from xstage_trace.reports.partition_sweep import load_regret_doc, regret_frame

SHIPPED = Path(__file__).resolve().parents[4] / "sample_traces" / "h200_partition" / "partition_regret.json"


def _default_doc() -> str:
    """The selected run folder's partition_regret.json, else the shipped H200 sample, else nothing."""
    run = state.current_run()
    if run and (Path(run) / "partition_regret.json").is_file():
        return str(Path(run) / "partition_regret.json")
    return str(SHIPPED) if SHIPPED.is_file() else ""


st.title("Partition: the selector against the measured oracle")
path = st.text_input("partition_regret.json", value=_default_doc(), key="partition_doc")
if not path:
    st.info("Give a partition_regret.json (xstage-trace model partition-sweep FOLDER --write FILE.json).")
    st.stop()
try:
    doc = load_regret_doc(Path(path))
except InputError as e:
    st.error(str(e))
    st.stop()

s = doc["speedup_vs_best_fixed_c"]
c = st.columns(4)
c[0].metric("mean regret", f"{doc['mean_regret_pct']:.2f} %")
c[1].metric("max regret", f"{doc['max_regret_pct']:.2f} %")
c[2].metric(f"speedup vs best fixed C = {s['best_fixed_c']}", f"{s['speedup_geomean']:.3f}×",
            help=f"{100 * s['level']:.0f} % bootstrap interval {s['ci_low']:.4f} … {s['ci_high']:.4f}")
c[3].metric("solver", f"{doc['solver_us']:.3f} µs", help=doc.get("solver_source", ""))
st.caption(f"{len(doc['workloads'])} workloads, destination {doc.get('dest', '?')}; speedup interval "
           f"{s['ci_low']:.4f} … {s['ci_high']:.4f} ({100 * s['level']:.0f} % bootstrap)")
frame = regret_frame(doc)
st.dataframe(frame, hide_index=True, key="partition_table")

names = frame["workload"].tolist()
state.keep_valid("partition_workload", names)
name = st.selectbox("Workload: measured and predicted time per C", names, key="partition_workload")
w = next(x for x in doc["workloads"] if x["workload"] == name)
per_c = pd.DataFrame({"measured (ms)": pd.Series({int(k): v for k, v in w["times_ms"].items()})})
if w.get("predicted_ms"):
    per_c["predicted (ms)"] = pd.Series({int(k): v for k, v in w["predicted_ms"].items()})
st.line_chart(per_c.sort_index(), x_label="C (communication CTAs)", y_label="kernel time (ms)")
st.caption(f"oracle C = {w['c_oracle']}, selected C = {w['c_selected']}, regret {w['regret_pct']:.2f} %")
