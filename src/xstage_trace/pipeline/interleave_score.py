"""Docs/model.md §6's what-if scored on the reference fused kernel: for every shape and destination with a traced
wave-schedule dump, the interleaved schedule's speedup predicted from the wave run alone (its measured kernel time,
its probed Linear-1 and Linear-2 mainloop spans, the tile counts of its label, the store path's calibration) beside
the speedup measured by running the interleaved schedule."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.base.errors import InputError

TILE_OUT_BYTES = 128 * 128 * 2  # bf16 output tile of fused_moe.cu


def mainloop_medians_ns(dump: Path) -> tuple[float, float]:
    """T_L1, T_L2 of docs/model.md §6: median mainloop span of the Linear-1 and the Linear-2 tiles of one fused_moe dump (tile_info payload bit 0 = kind)."""
    from xstage_trace.collectors.probe_format import decode_probe_dump

    r = decode_probe_dump(dump).records.to_pandas()
    kind = (r.loc[r["event"] == "tile_info"].drop_duplicates("tile").set_index("tile")["payload"] & 1)
    ml = r[r["event"] == "mainloop"].pivot_table(index=["slice", "tile"], columns="kind", values="t_gt_ns", aggfunc="first").reset_index()
    dur = (ml["end"] - ml["begin"]).groupby(ml["tile"].map(kind)).median()
    return float(dur.loc[0]), float(dur.loc[1])


def interleave_score_table(sample: Path, calibration: Path):
    """One row per (dest, shape) with a wave dump: predicted and measured speedup of the interleaved schedule (§6)."""
    import json

    import pandas as pd

    from xstage_trace.analysis.whatif import interleave_speedup
    from xstage_trace.dataset.calibration import load_platform

    sample, calibration = Path(sample), Path(calibration)
    rows = []
    for dest in ("host", "local"):
        times_path = sample / "times" / f"fused_times_{dest}_split_smem_off.csv"
        if not times_path.is_file():
            raise InputError(times_path, "missing", "give the h200_fused_moe sample folder")
        times = pd.read_csv(times_path).set_index(["shape", "schedule"])
        cal_path = calibration / f"calibration_{dest}_bulk.json"
        plat = load_platform(cal_path)
        for shape in sorted(times.index.get_level_values(0).unique()):
            dump = sample / "traced" / f"fused_{dest}_{shape}_wave_split_smem_tma.xsp.zst"
            if not dump.is_file():
                continue
            w = times.loc[(shape, "wave")]
            ctas, l1, l2 = int(w["ctas"]), int(w["l1_tiles"]), int(w["l2_tiles"])
            t_l1, t_l2 = mainloop_medians_ns(dump)
            volume = ctas * TILE_OUT_BYTES
            floor = float(plat.floor_ns(ctas, TILE_OUT_BYTES)[0])
            p = interleave_speedup(w["kernel_ms_median"] * 1e6, l2 / ctas, volume, t_l1, t_l2, l1, l2, floor, plat.rate_gbps)
            measured = w["kernel_ms_median"] / times.loc[(shape, "interleaved"), "kernel_ms_median"]
            rows.append({"dest": dest, "shape": shape, "k2": int(w["k2"]), "mainloop_l1_us": t_l1 / 1e3, "mainloop_l2_us": t_l2 / 1e3,
                         "drain_us": volume / plat.rate_gbps / 1e3, "issue_overhead_wave_us": p["issue_overhead_wave_ns"] / 1e3,
                         "wave_ms": w["kernel_ms_median"], "predicted_interleaved_ms": p["interleaved_kernel_ns"] / 1e6,
                         "measured_interleaved_ms": times.loc[(shape, "interleaved"), "kernel_ms_median"],
                         "predicted_speedup": p["speedup"], "measured_speedup": measured,
                         "error_pct": 100 * (p["speedup"] / measured - 1)})
    return pd.DataFrame(rows)
