"""Evaluate the §11 forward prediction (xstage_trace.analysis.forward) on the real-kernel samples: fit on bench
data only (a calibration JSON with ``drain`` and ``load_coupling``), predict DeepGEMM, FA3 and FA4 with D in
host-mapped memory from their tiles' bytes, order and the local control's compute gaps alone.

    python benchmarks/eval_forward.py CALIBRATION.json [--out docs_table.md]

Per tile the kernel's structure gives its load steps and pipeline stages (DeepGEMM: K / 128 k-blocks and the
run's stages; FlashAttention: its K/V blocks, causal per m block, double-buffered): steps past the stages are
loaded while the tile computes and wait behind the host writes issued by then (docs/model.md §11.2).

Per configuration (kernel, shape) and launch: measured stall per tile = host mainloop − the control's mainloop
of the same (CTA, position) (the mainloop inflation); predicted = the forward model's load wait. Medians over
the tiles of the configuration's launches (position ≥ 1: tile 0 of a CTA has nothing to wait behind in both),
the per-tile Spearman ρ, and the kernel span: predicted (first compute start to the last store issue) vs the
probe span of the launch (first mainloop begin to last epilogue end), both leaving out the last store's drain; and
the predicted kernel time (to the last store drained) vs the sample's CUDA-event kernel time (traced build, median).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from xstage_trace.analysis.forward import forward_tiles  # noqa: E402
from xstage_trace.collectors.calibration_io import link_model_of_document, read_document  # noqa: E402
from xstage_trace.collectors.probe_format import decode_probe_dump  # noqa: E402


def tile_table(files: list[Path]) -> pd.DataFrame:
    """One row per tile of each dump: dump, dest, shape, slice (the CTA or SM sequence), position, mainloop and
    epilogue spans and the epilogue's begin/end (ns from the dump's first record)."""
    rows = []
    for f in files:  # one decode per dump
        d = decode_probe_dump(f)
        r = d.records.to_pandas()
        lab = dict(w.split("=", 1) for w in d.header["label"].split() if "=" in w)
        r["t"] = (r["t_gt_ns"] - r["t_gt_ns"].min()).astype(np.float64)
        r = r.sort_values(["slice", "t"], kind="stable")
        spans = {}
        for ev in ("mainloop", "epilogue"):
            q = r[r["event"].astype(str) == ev]
            b, e = q[q["kind"].astype(str) == "begin"], q[q["kind"].astype(str) == "end"]
            spans[ev] = pd.DataFrame({"slice": b["slice"].to_numpy(), "begin": b["t"].to_numpy(), "end": e["t"].to_numpy(),
                                      "payload": e["payload"].to_numpy(), "tile": b["tile"].to_numpy()})
        m, ep = spans["mainloop"], spans["epilogue"]
        m["position"] = m.groupby("slice").cumcount()
        ep["position"] = ep.groupby("slice").cumcount()
        t = m.merge(ep, on=["slice", "position"], suffixes=("_ml", "_ep"))
        t = t.assign(steps=_steps(lab, t["tile_ml"].to_numpy()), stages=_stages(lab), dump=f.name, dest=lab["dest"], shape=lab["shape"], kernel=lab["kernel"], mainloop_ns=t["end_ml"] - t["begin_ml"],
                     epilogue_ns=t["end_ep"] - t["begin_ep"], tile_bytes=_tile_bytes(lab, t["payload_ep"].to_numpy()))
        rows.append(t)
    return pd.concat(rows, ignore_index=True)


DEEPGEMM_STAGES = {"m8192n4096k7168": 4, "m8192n7168k2048": 3, "g8x1024n4096k7168": 4}  # pipeline stages of the run's configs
FA_STAGES = 2  # FlashAttention's K/V double buffer


def _steps(lab: dict, tile: np.ndarray) -> np.ndarray:
    """Load steps of each tile: DeepGEMM's k-blocks (K / 128), FlashAttention's K/V blocks (causal per m block)."""
    if lab["kernel"].startswith("deepgemm"):
        return np.full(len(tile), int(lab["shape"].rsplit("k", 1)[1]) // 128)
    from xstage_trace.analysis.piggyback import decode_tile_id, kv_blocks

    m_block = decode_tile_id(tile)[0]  # FA3 and FA4 pack the tile id alike (m | head << 12 | batch << 24)
    return kv_blocks(m_block, int(lab["seqlen"]), int(lab["block_m"]), int(lab["block_n"]), lab["causal"] == "1")


def _stages(lab: dict) -> int:
    return DEEPGEMM_STAGES[lab["shape"]] if lab["kernel"].startswith("deepgemm") else FA_STAGES


def _tile_bytes(lab: dict, payload: np.ndarray) -> np.ndarray:
    """Bytes a tile stores: the epilogue's payload where the recipe records it (DeepGEMM), else block_m × head_dim ×
    out_bytes of the label (FlashAttention)."""
    if (payload > 0).all():
        return payload.astype(np.float64)
    return np.full(len(payload), float(int(lab["block_m"]) * int(lab["head_dim"]) * int(lab["out_bytes"])))


STREAMED = [True]
EVENTS: dict = {}


def streamed(g: pd.DataFrame) -> dict:
    """The streamed-loads arguments of forward_tiles (steps, stages per tile), none with --first-loads-only."""
    return {"steps": g["steps"].to_numpy(), "stages": g["stages"].to_numpy()} if STREAMED[0] else {}


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


def evaluate(tiles: pd.DataFrame, model, load_lag_ns: float) -> pd.DataFrame:
    """Per (kernel, shape): predicted vs measured stall (median over launches of the per-launch medians, position ≥ 1),
    per-tile Spearman (all positions), kernel span (first compute start to last store issue) predicted vs measured."""
    out = []
    host, local = tiles[tiles["dest"] == "host"], tiles[tiles["dest"] == "local"]
    for (kernel, shape), h in host.groupby(["kernel", "shape"]):  # one configuration at a time (≤ 10 per sample)
        ctrl = local[(local["kernel"] == kernel) & (local["shape"] == shape)]
        ctrl = ctrl.groupby(["slice", "position"])[["mainloop_ns", "epilogue_ns"]].median()
        res = []
        for dump, g in h.groupby("dump"):
            g = g.join(ctrl, on=["slice", "position"], rsuffix="_c").dropna(subset=["mainloop_ns_c"])
            f = forward_tiles(g["slice"], g["position"], g["tile_bytes"], g["mainloop_ns_c"], model, epilogue_ns=g["epilogue_ns_c"],
                              load_issue="issue", load_lag_ns=load_lag_ns, **streamed(g))
            meas = (g["mainloop_ns"] - g["mainloop_ns_c"]).to_numpy()
            later = g["position"].to_numpy() >= 1
            span = g["end_ep"].max() - g["begin_ml"].min()
            # like for like: the probe span ends at the last epilogue end, i.e. the last store issue (the model's too)
            res.append((np.median(f.stall_ns[later]), np.median(meas[later]), spearmanr(f.stall_ns, meas).statistic, np.nanmax(f.store_issue_ns), span,
                        g["tile_bytes"].sum() / span, f.kernel_ns))
        a = np.array(res)
        pred, meas, rho, kpred, kmeas, rate, kdrain = np.median(a, axis=0)
        event_ms = EVENTS.get((kernel, shape), np.nan)
        out.append({"kernel": kernel, "shape": shape, "launches": len(res), "stall_pred_us": pred / 1e3, "stall_meas_us": meas / 1e3,
                    "stall_err_pct": 100 * (pred / meas - 1) if meas else np.nan, "spearman": rho, "kernel_pred_us": kpred / 1e3,
                    "kernel_meas_us": kmeas / 1e3, "kernel_err_pct": 100 * (kpred / kmeas - 1), "achieved_gbps": rate,
                    "drained_pred_us": kdrain / 1e3, "event_us": event_ms * 1e3, "event_err_pct": 100 * (kdrain / (event_ms * 1e6) - 1)})
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
    ap.add_argument("--load-lag-ns", type=float, default=0.0, help="loads of the next tile's first stages issued this long after the store (negative: before it)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--stream", type=Path, help="also the bench's streamed rounds: the path-drain folder with stream/ and meta/")
    ap.add_argument("--first-loads-only", action="store_true", help="only a tile's first stages wait behind the host writes, not its later k-blocks / K/V blocks")
    a = ap.parse_args()
    STREAMED[0] = not a.first_loads_only
    doc = read_document(a.calibration)
    model = link_model_of_document(doc, a.calibration)
    if model is None:
        sys.exit(f"{a.calibration}: no drain / load_coupling (fit it with calibrate fit --path-drain)")
    samples = ROOT / "sample_traces"
    EVENTS.update(event_times_ms(samples))
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(samples / "h200_deepgemm" / "results.tar.xz") as tf:
            tf.extractall(tmp, filter="data")
        files = {"deepgemm": sorted(Path(tmp).glob("res/dumps/*.xsp")),
                 "fa3": sorted((samples / "h200_fa3" / "dumps").glob("*.xsp.zst")),
                 "fa4": sorted((samples / "h200_fa4" / "dumps").glob("*.xsp.zst"))}
        table = pd.concat([evaluate(tile_table(f), model, a.load_lag_ns) for f in files.values()], ignore_index=True)
    pd.set_option("display.width", 220)
    print(json.dumps({"model": model.__dict__, "load_lag_ns": a.load_lag_ns}))
    print(table.round(2).to_string(index=False))
    if a.stream:
        print(stream_rounds_table(a.stream, model).round(2).to_string(index=False))
    if a.out:
        from xstage_trace.reports.markdown import md_table

        a.out.write_text(md_table(table.round(2)) + "\n")


if __name__ == "__main__":
    main()
