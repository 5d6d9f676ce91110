"""Evaluate the §11 forward prediction on the real-kernel samples through the pipeline itself: every sample is
analysed by ``xstage-trace analyze`` with a bench-fitted calibration (``drain`` and ``load_coupling``; fit on bench data
only), and the run's own tables are compared: DeepGEMM, FA3 and FA4 with D in host-mapped memory, predicted from
their tiles' bytes, order and the local control's per-tile compute alone.

    python benchmarks/eval_forward.py CALIBRATION.json [--out docs_table.md]

Per configuration (kernel, shape): Table 3's median measured stall (``stall_ns``: the slot wait beyond the control's
floor plus the compute span beyond the same tile's in the control, docs/model.md §12) against its median calibrated
prediction (``forward_stall_ns``), exactly what ``analyze`` prints; the per-tile Spearman ρ between the two over the
configuration's tiles, beside the ρ that the configuration's own other trials reach (``spearman_repeat``: each
tile's measured stall against the mean of the other launches' at the same CTA and position; ``spearman_trials``:
trial against trial), the most any per-tile prediction can expect where the tiles do not repeat; and the predicted kernel time (``analysis.stall.forward_link_kernels``: first compute start to
the last store drained, median over launches) against the sample's CUDA-event kernel time (traced build, median).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from xstage_trace.analysis.stall import forward_link_kernels  # noqa: E402
from xstage_trace.analysis.forward import forward_tiles  # noqa: E402
from xstage_trace.analysis.calibration_model import link_model_of_document  # noqa: E402
from xstage_trace.collectors.calibration_io import read_document  # noqa: E402
from xstage_trace.collectors.probe_format import decode_probe_dump  # noqa: E402
from xstage_trace.dataset.api import open_run  # noqa: E402

SAMPLES = {"deepgemm": "h200_deepgemm/dumps", "fa3": "h200_fa3/dumps", "fa4": "h200_fa4/dumps"}


def analyzed(sample: Path, calibration: str, out: Path) -> Path:
    """``xstage-trace analyze SAMPLE --calibration CAL -o OUT`` with this checkout's sources; OUT."""
    subprocess.run([sys.executable, "-m", "xstage_trace", "analyze", str(sample), "--calibration", calibration, "-o", str(out)],
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return out


def event_times_ms(samples: Path) -> dict[tuple[str, str], float]:
    """(kernel, shape) → the CUDA-event kernel time of the traced build with D host-mapped, median (the samples'
    own timing files: DeepGEMM overhead.json, single-call protocol; FA3 / FA4 times.csv)."""
    out = {}
    for x in json.loads((samples / "h200_deepgemm" / "overhead.json").read_text()):
        if x["dest"] == "host" and x["protocol"] == "single":
            out["deepgemm_m_grouped_contiguous" if x["shape"].startswith("g") else "deepgemm_gemm_nt", x["shape"]] = x["traced_ms"]
    for kernel in ("fa3", "fa4"):
        t = pd.read_csv(samples / f"h200_{kernel}" / "times.csv.gz")
        t = t[(t["dest"] == "host") & (t["build"] == "traced")]
        for (seqlen, causal), g in t.groupby(["seqlen", "causal"]):
            batch = int(g["batch"].iloc[0])
            out[kernel, f"b{batch}h{int(g['heads'].iloc[0])}s{seqlen}{'c' if causal else 'n'}"] = float(g["kernel_ms"].median())
    return out


def repeat_ceiling(tiles: pd.DataFrame) -> tuple[float, float]:
    """How well a configuration's tiles predict themselves across its repeated launches (trials): (the per-tile
    Spearman ρ of each trial's measured stall against the mean of the other trials' at the same (CTA, position), pooled
    over the trials as the model's ρ is; the median trial-vs-trial ρ). A deterministic per-tile prediction can rank
    the tiles of one launch only as far as they repeat; NaN for a configuration traced once."""
    wide = tiles.pivot_table(index=["cta", "position"], columns="dump", values="stall_ns", aggfunc="first")
    if wide.shape[1] < 2:
        return float("nan"), float("nan")
    m = wide.to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):  # a tile seen in one trial only has no others
        others = (np.nansum(m, axis=1, keepdims=True) - np.nan_to_num(m)) / (np.isfinite(m).sum(axis=1, keepdims=True) - np.isfinite(m))
    ok = np.isfinite(m) & np.isfinite(others)
    pairs = [spearmanr(m[:, i], m[:, j], nan_policy="omit").statistic for i in range(m.shape[1]) for j in range(i + 1, m.shape[1])]
    return float(spearmanr(others[ok], m[ok]).statistic), float(np.median(pairs))


def evaluate(run_dir: Path, model, events: dict) -> pd.DataFrame:
    """Per host-mapped configuration of the run: Table 3's measured and predicted median stall, the per-tile Spearman
    ρ, and the predicted kernel time against the CUDA-event time."""
    run = open_run(run_dir)
    t3, tiles, dumps = run.table3(), run.tiles(), run.dumps()
    kernel_of = dict(zip(dumps["dump"].astype(str), dumps["kernel"].astype(str)))
    kernels = forward_link_kernels(tiles, {"host": model})
    kernels["shape"] = kernels["dump"].map(dict(zip(dumps["dump"].astype(str), dumps["shape"].astype(str))))
    out = []
    for _, row in t3[t3["dest"] == "host"].iterrows():  # ≤ 10 configurations per sample
        tt = tiles[(tiles["dest"] == "host") & (tiles["shape"] == row["shape"]) & tiles["forward_stall_ns"].notna() & tiles["stall_ns"].notna()]
        kernel = kernel_of[str(tt["dump"].iloc[0])]
        pred, meas = float(row["forward_stall_ns"]), float(row["stall_ns"])
        k_pred = float(kernels[kernels["shape"] == row["shape"]]["kernel_ns"].median())
        event_ms = events.get((kernel, row["shape"]), np.nan)
        out.append({"kernel": kernel, "shape": row["shape"], "tiles": len(tt), "stall_pred_us": pred / 1e3, "stall_meas_us": meas / 1e3,
                    "stall_err_pct": 100 * (pred / meas - 1) if meas else np.nan,
                    "within_goal": abs(pred - meas) <= max(0.15 * meas, 2000.0),
                    "spearman": spearmanr(tt["forward_stall_ns"], tt["stall_ns"]).statistic,
                    **dict(zip(("spearman_repeat", "spearman_trials"), repeat_ceiling(tt))),
                    "kernel_pred_us": k_pred / 1e3, "event_us": event_ms * 1e3, "kernel_err_pct": 100 * (k_pred / (event_ms * 1e6) - 1)})
    return pd.DataFrame(out)


def stream_rounds_table(folder: Path, model) -> pd.DataFrame:
    """The bench's streamed rounds (``path_drain --stream``, dumps in ``folder/stream``): per configuration (S steps,
    c ns per step) the median stall (host mainloop − the device-output run's of the same CTA and round, rounds ≥ 1)
    and the kernel time (CUDA events) against the forward model, first loads at the store issue, no refit."""
    def rounds(f: Path) -> tuple[pd.DataFrame, dict]:
        d = decode_probe_dump(f)
        r = d.records.to_pandas()
        r["t"] = (r["t_gt_ns"] - r["t_gt_ns"].min()).astype(np.float64)
        ev, kind = r["event"].astype(str), r["kind"].astype(str)
        span = {k: r[(ev == e) & (kind == k2)].set_index(["cta", "tile"])["t"] for k, e, k2 in
                (("lb", "load", "begin"), ("le", "load", "end"), ("sb", "burst", "begin"))}
        t = pd.DataFrame({"mainloop_ns": span["le"] - span["lb"], "epilogue_ns": span["sb"] - span["le"]}).reset_index()
        return t.rename(columns={"tile": "position"}), dict(w.split("=", 1) for w in d.header["label"].split() if "=" in w)

    times = pd.read_csv(folder / "meta" / "stream_rounds_host.csv")
    out = []
    for f in sorted((folder / "stream").glob("stream_host_*.xsp*")):  # six configurations
        h, lab = rounds(f)
        c, _ = rounds(f.with_name(f.name.replace("_host_", "_local_")))
        g = h.merge(c, on=["cta", "position"], suffixes=("", "_c"))
        steps, stages, step_ns = int(lab["steps"]), int(lab["stages"]), float(lab["step_ns"])
        fw = forward_tiles(g["cta"], g["position"], float(lab["B"]), g["mainloop_ns_c"], model, epilogue_ns=g["epilogue_ns_c"],
                           steps=steps, stages=stages)
        later = g["position"].to_numpy() >= 1
        pred, meas = np.median(fw.stall_ns[later]), np.median((g["mainloop_ns"] - g["mainloop_ns_c"]).to_numpy()[later])
        k = float(times[(times["steps"] == steps) & (times["step_ns"] == step_ns)]["kernel_ms"].iloc[0]) * 1e6
        out.append({"steps": steps, "step_ns": step_ns, "stall_pred_us": pred / 1e3, "stall_meas_us": meas / 1e3,
                    "kernel_pred_ms": fw.kernel_ns / 1e6, "kernel_ms": k / 1e6, "kernel_err_pct": 100 * (fw.kernel_ns / k - 1)})
    return pd.DataFrame(out).sort_values(["steps", "step_ns"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("calibration")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--stream", type=Path, help="also the bench's streamed rounds: the path-drain folder with stream/ and meta/")
    a = ap.parse_args()
    doc = read_document(a.calibration)
    model = link_model_of_document(doc, a.calibration)
    if model is None:
        sys.exit(f"{a.calibration}: no drain / load_coupling (fit it with calibrate fit --path-drain)")
    samples = ROOT / "sample_traces"
    events = event_times_ms(samples)
    with tempfile.TemporaryDirectory() as tmp:
        table = pd.concat([evaluate(analyzed(samples / rel, a.calibration, Path(tmp) / f"{name}.xstage-run"), model, events)
                           for name, rel in SAMPLES.items()], ignore_index=True)
    pd.set_option("display.width", 220)
    print(json.dumps({"model": model.__dict__}))
    print(table.round(2).to_string(index=False))
    for kernel, g in table.groupby("kernel"):
        print(f"{kernel}: stall within 15 % or 2 µs {int(g['within_goal'].sum())} of {len(g)}; kernel time within 10 % "
              f"{int((g['kernel_err_pct'].abs() <= 10).sum())} of {len(g)}; Spearman {g['spearman'].min():.2f}–{g['spearman'].max():.2f}"
              + (f" (the tiles' own other trials: {g['spearman_repeat'].min():.2f}–{g['spearman_repeat'].max():.2f})"
                 if g["spearman_repeat"].notna().any() else ""))
    if a.stream:
        print(stream_rounds_table(a.stream, model).round(2).to_string(index=False))
    if a.out:
        from xstage_trace.reports.markdown import md_table

        a.out.write_text(md_table(table.round(2)) + "\n")


if __name__ == "__main__":
    main()
