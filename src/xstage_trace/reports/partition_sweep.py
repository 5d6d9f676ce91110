"""A C-sweep's partition regret document (``model partition-sweep``, ``partition_regret.json``) as Markdown.

The document is the one ``pipeline.partition_sweep.partition_regret_doc`` writes (docs/model.md §9): per workload
the measured median time per C, the oracle C, the selector's C and its regret; the sweep's mean/max regret, the
speedup of the selected C over the best single fixed C with its bootstrap interval, and the launcher's solver time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from xstage_trace.base.errors import InputError

_KEYS = ("workloads", "mean_regret_pct", "max_regret_pct", "speedup_vs_best_fixed_c", "solver_us")
_WORKLOAD_KEYS = ("workload", "parameters", "times_ms", "c_oracle", "c_selected", "regret_pct")


def load_regret_doc(path: Path) -> dict:
    """A ``partition_regret.json`` read and checked for the fields the report needs (docs/model.md §9)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"not a readable JSON document ({type(e).__name__})", "give a partition_regret.json written by model partition-sweep --write") from None
    missing = [k for k in _KEYS if not isinstance(doc, dict) or k not in doc]
    if not missing and doc["workloads"]:
        missing = [k for k in _WORKLOAD_KEYS if k not in doc["workloads"][0]]
    if missing or not doc["workloads"]:
        raise InputError(path, f"not a partition regret document (missing {', '.join(missing) or 'workloads'})",
                         "give a partition_regret.json written by model partition-sweep --write")
    return doc


def regret_frame(doc: dict) -> pd.DataFrame:
    """One row per workload: shape, tokens, skew, oracle and selected C, their measured times and the regret (docs/model.md §9)."""
    rows = []
    for w in doc["workloads"]:
        par = w["parameters"]
        rows.append({"workload": w["workload"], "shape": par.get("shape", ""), "tokens": par.get("tokens"),
                     "skew": par.get("skew"), "C oracle": int(w["c_oracle"]), "C selected": int(w["c_selected"]),
                     "T oracle (ms)": float(w["times_ms"][str(w["c_oracle"])]),
                     "T selected (ms)": float(w["times_ms"][str(w["c_selected"])]),
                     "regret (%)": float(w["regret_pct"])})
    return pd.DataFrame(rows)


def _cells(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: times to the µs, regrets to 0.01 %."""
    return frame.assign(**{c: frame[c].map("{:.3f}".format) for c in ("T oracle (ms)", "T selected (ms)")},
                        **{"regret (%)": frame["regret (%)"].map("{:.2f}".format)})
    return pd.DataFrame(rows)


def render_partition_sweep(doc: dict, title: str = "CTA partition sweep: the selector against the measured oracle") -> str:
    """The Markdown report of one partition regret document (docs/model.md §9): summary, then the per-workload table."""
    from xstage_trace.reports.markdown import md_table

    frame = regret_frame(doc)
    s = doc["speedup_vs_best_fixed_c"]
    dest = doc.get("dest", "")
    lines = [f"# {title}" + (f" ({dest})" if dest else ""), "",
             f"- workloads: {len(frame)}; legal domain C = 1 … {doc.get('max_comm_ctas', max(len(w['times_ms']) for w in doc['workloads']))}",
             f"- regret of the selected C against the oracle: mean **{doc['mean_regret_pct']:.2f} %**, "
             f"max **{doc['max_regret_pct']:.2f} %**",
             f"- speedup of the selected C over the best single fixed C (C = {s['best_fixed_c']}): "
             f"**{s['speedup_geomean']:.4f}×** geometric mean, {100 * s['level']:.0f} % bootstrap interval "
             f"{s['ci_low']:.4f} … {s['ci_high']:.4f} ({s.get('n_boot', '?')} replicates)",
             f"- solver: **{doc['solver_us']:.3f} µs** per call (median"
             + (f", max {doc['solver_us_max']:.3f} µs" if "solver_us_max" in doc else "") + ")"
             + (f"; {doc['solver_source']}" if doc.get("solver_source") else "")]
    if "mean_regret_pct_rho_ref" in doc:
        lines.append(f"- §9 with the A100's scaled ρ_ref instead of the calibration: mean {doc['mean_regret_pct_rho_ref']:.2f} %, "
                     f"max {doc['max_regret_pct_rho_ref']:.2f} %")
    over = frame[frame["regret (%)"] > 5.0]
    lines.append(f"- workloads above 5 % regret: {', '.join(over['workload']) if len(over) else 'none'}")
    fixed = doc.get("speedup_vs_fixed_c") or {}
    if fixed:
        lines += ["", "Speedup of the selected C over each fixed C (geometric mean over the workloads):", "",
                  md_table(pd.DataFrame({"fixed C": [int(c) for c in fixed], "speedup (×)": [f"{float(v):.3f}" for v in fixed.values()]}))]
    lines += ["", "## Per workload", "", md_table(_cells(frame)), ""]
    return "\n".join(lines)


def write_partition_sweep_report(doc: dict, path: Path) -> Path:
    """Write ``render_partition_sweep(doc)`` to ``path`` (docs/model.md §9)."""
    from xstage_trace.base.output import write_output

    return write_output(Path(path), render_partition_sweep(doc))  # temporary, then rename
