"""``calibrate fit --path-drain DIR``: the path-drain bench's output (instrument/bench/path_drain.cu, laid out by
device_path_drain.sh: ``ramp/`` and ``load/`` dumps, ``meta/rates_DEST.csv``, ``meta/load_rounds_DEST.csv``) →
the calibration JSON's ``drain`` and ``load_coupling`` objects (docs/calibration-json.md, docs/model.md §11)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from xstage_trace.base.errors import InputError

SUSTAINED_MIN_BYTES = 32768  # zero-gap launches with smaller bursts are not drain-limited at every K (docs/calibration-physics.md)


def _decode(files: list[Path]) -> tuple[pd.DataFrame, dict[str, dict]]:
    from xstage_trace.collectors.probe_format import decode_probe_dump

    frames, labels = [], {}
    for f in files:  # one decode per dump (tens)
        d = decode_probe_dump(f)
        r = d.records.to_pandas()
        frames.append(r)
        labels[str(r["dump"].iloc[0])] = dict(w.split("=", 1) for w in d.header["label"].split() if "=" in w)
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), labels


def _dumps(folder: Path, sub: str) -> list[Path]:
    files = sorted((folder / sub).glob("*.xsp")) + sorted((folder / sub).glob("*.xsp.zst"))
    if not files:
        raise InputError(folder / sub, "holds no path-drain dumps", "pass the folder device_path_drain.sh packs (ramp/, load/, meta/)")
    return files


def _meta(folder: Path, name: str) -> Path:
    path = folder / "meta" / name
    if not path.is_file():
        raise InputError(path, "is missing", "pass the folder device_path_drain.sh packs (ramp/, load/, meta/ with the rates and load-round CSVs)")
    return path


def completion_rate_of_points(points: pd.DataFrame) -> dict | None:
    """R from per-round completion timestamps: the median ``completion_rate_gbps`` of the zero-gap periodic launches
    at the largest K with B ≥ SUSTAINED_MIN_BYTES (None where the points carry no completion rate)."""
    if "completion_rate_gbps" not in points:
        return None
    p = points[(points["mode"] == "periodic") & (points["gap_ns"] == 0) & (points["B"] >= SUSTAINED_MIN_BYTES)]
    p = p[p["K"] == p["K"].max()].dropna(subset=["completion_rate_gbps"])
    if p.empty:
        return None
    r = p["completion_rate_gbps"].to_numpy()
    return {"rate_gbps": float(np.median(r)), "launches": int(len(r)), "min_gbps": float(r.min()), "max_gbps": float(r.max())}


def path_drain_document(folder: str | Path, dest: str, points: pd.DataFrame | None = None) -> tuple[dict, dict]:
    """(``drain``, ``load_coupling``) of the calibration JSON for store path ``dest`` (host: the ramp's R and Q
    with their intervals, each repetition's, the sustained-store and copy-engine rates; λ from the device-memory
    load rounds, the load rate fitted on the host ones, and the fit's predictions of them)."""
    from xstage_trace.analysis.drain_fit import LoadRoundCase, fit_load_rate, fit_ramp, load_latency_ns, predict_load_rounds
    from xstage_trace.analysis.drain_points import load_rounds, ramp_bursts
    from xstage_trace.analysis.forward import LinkModel

    folder = Path(folder)
    probes, labels = _decode(_dumps(folder, "ramp"))
    mine = {d: lab for d, lab in labels.items() if lab.get("dest") == dest}
    if not mine:
        raise InputError(folder / "ramp", f"holds no ramp of store path {dest!r}", "run device_path_drain.sh for that path")
    rb = ramp_bursts(probes, {d: float(int(lab["K"]) * int(lab["B"])) for d, lab in mine.items()})
    rb["rep"] = rb["dump"].map({d: int(lab.get("rep", 1)) for d, lab in mine.items()})
    reps = {int(rep): fit_ramp(g["volume_bytes"], g["accept_last_ns"]) for rep, g in rb.groupby("rep")}
    first = reps[min(reps)]
    rates = pd.read_csv(_meta(folder, f"rates_{dest}.csv")).set_index("what")["gbps"]
    completion = completion_rate_of_points(points[points["dest"] == dest]) if points is not None else None
    drain = {
        "rate_gbps": completion["rate_gbps"] if completion else first.rate_gbps,
        "rate_source": "per-round completion timestamps of the zero-gap launches" if completion else "synchronized-burst ramp",
        "completion_rate": completion,
        "ramp": {str(rep): {"rate_gbps": f.rate_gbps, "rate_interval_gbps": list(f.rate_interval_gbps), "capacity_bytes": f.capacity_bytes,
                            "capacity_interval_bytes": list(f.capacity_interval_bytes), "bursts": f.bursts} for rep, f in reps.items()},
        "capacity_bytes": first.capacity_bytes,
        "capacity_interval_bytes": list(first.capacity_interval_bytes),
        "sustained_gbps": float(rates["sustained_tensor2d"]),
        "copy_engine_gbps": float(rates["copy_engine"]),
    }
    lp, llab = _decode(_dumps(folder, "load"))
    lr = load_rounds(lp, set(llab))
    lr["dest"] = lr["dump"].map({d: lab["dest"] for d, lab in llab.items()})
    lr["compute_ns"] = lr["dump"].map({d: float(lab["G_ns"]) for d, lab in llab.items()})
    local = lr[lr["dest"] == "local"].sort_values(["dump", "cta", "round"])
    lam = load_latency_ns(local["load_wait_ns"], local["round"])
    cycle = local.groupby(["dump", "cta"])["load_begin_ns"].diff()
    overhead = float(np.nanmedian(cycle - local["compute_ns"] - local["load_wait_ns"]))
    kernel = pd.read_csv(_meta(folder, f"load_rounds_{dest}.csv")).set_index("compute_ns")["kernel_ms"]
    cases = []
    for x, g in lr[lr["dest"] == dest].groupby("compute_ns"):
        first_label = llab[str(g["dump"].iloc[0])]
        cases.append(LoadRoundCase(int(first_label["K"]), int(first_label["bursts"]), float(first_label["B"]), float(first_label["load_bytes"]),
                                   float(x), overhead, float(kernel[x]) * 1e6, float(g.loc[g["round"] >= 1, "load_wait_ns"].median())))
    floor = float(local["store_accept_ns"].median())
    base = LinkModel(drain["rate_gbps"], drain["capacity_bytes"], lam, floor)
    load_rate, err = fit_load_rate(cases, base)
    model = LinkModel(base.rate_gbps, base.capacity_bytes, lam, floor, load_rate)
    rows = []
    for c in cases:
        k, w = predict_load_rounds(c, model)
        rows.append({"compute_ns": c.compute_ns, "kernel_ms": c.kernel_ns / 1e6, "pred_kernel_ms": k / 1e6,
                     "load_wait_us": c.load_wait_ns / 1e3, "pred_load_wait_us": w / 1e3})
    coupling = {"load_latency_ns": lam, "load_rate_gbps": load_rate, "issue_floor_ns": floor, "round_overhead_ns": overhead,
                "window_ns": 0.0, "fit_error_by_load_rate": {f"{k:.0f}": v for k, v in err.items()}, "load_rounds": rows}
    return drain, coupling
