"""A C-sweep of the reference GEMM2+GatherRS kernel (``instrument/examples/gather_rs_moe.cu``) scored (docs/model.md §9).

Reads the driver's CSV files from one folder (``times_sweep_<dest>_off.csv[.gz]``, ``workloads_sweep_<dest>_off.csv``,
the calibration's ``probes_calib_<dest>_on.csv`` and ``workloads_calib_<dest>_on.csv``), fits each shape's service
times on the calibration run alone, predicts C* for every sweep workload from its own quantities (routed rows per
expert, shapes, occupancy) and scores the choice against the measured oracle.
"""

from __future__ import annotations

from pathlib import Path

from xstage_trace.base.errors import InputError

COMPUTE_TILE = (128, 128)
COMM_TILE = (128, 1024)


def _read(folder: Path, stem: str):
    import pandas as pd

    for name in (f"{stem}.csv", f"{stem}.csv.gz"):
        if (folder / name).is_file():
            return pd.read_csv(folder / name)
    raise InputError(folder / f"{stem}.csv", "missing from the sweep folder", "give the folder gather_rs_moe wrote (device_partition.sh's res/)")


def problem_of(row, max_comm_ctas: int = 16):
    """The §9 problem of one workloads-CSV row (its routed rows per expert, shape, occupancy, SM count)."""
    from xstage_trace.analysis.partition import PartitionProblem

    m_e = tuple(int(x) for x in str(row["rows_per_expert"]).split())
    return PartitionProblem(m_e, int(row["tokens"]), int(row["hidden"]), int(row["ffn"]), int(row["splits"]), 1,
                            COMPUTE_TILE[0], COMPUTE_TILE[1], COMM_TILE[0], COMM_TILE[1], int(row["num_sms"]),
                            int(row["occupancy"]), int(row["occupancy"]), max_comm_ctas)


def service_by_shape(folder: Path, dest: str) -> dict:
    """Each shape's ServiceTimes read off the calibration run's probes (docs/model.md §9, ρ measured)."""
    from xstage_trace.analysis.partition_select import fit_service_times

    calib = _read(folder, f"probes_calib_{dest}_on")
    shapes = _read(folder, f"workloads_calib_{dest}_on").set_index("workload")["shape"]
    out = {}
    for wl, g in calib.groupby("workload"):
        out[shapes[wl]] = fit_service_times(g["comm_ctas"], g["comp_tile_mean_us"] * 1e3, g["comm_tile_mean_us"] * 1e3)
    return out


def python_solver_us(p, service, calls: int = 2000) -> float:
    """Mean time of one ``select_comm_ctas`` call (docs/model.md §9; the vectorised numpy reference, not the launcher's C++), µs."""
    import time

    from xstage_trace.analysis.partition_select import select_comm_ctas

    t0 = time.perf_counter()
    for _ in range(calls):
        select_comm_ctas(p, service)
    return (time.perf_counter() - t0) / calls * 1e6


def partition_regret_doc(folder: Path, dest: str = "host", max_comm_ctas: int = 16, n_boot: int = 2000) -> dict:
    """Oracle, selection and regret per workload, mean/max regret and the speedup over the best fixed C (docs/model.md §9)."""
    import numpy as np

    from xstage_trace.analysis.partition import choose_comm_ctas, completion_columns, scaled_rho
    from xstage_trace.analysis.partition_regret import fixed_c_speedup, regret_table, speedup_by_fixed_c
    from xstage_trace.analysis.partition_select import predicted_completion, select_comm_ctas

    folder = Path(folder)
    times = _read(folder, f"times_sweep_{dest}_off")
    wls = _read(folder, f"workloads_sweep_{dest}_off").set_index("workload")
    service = service_by_shape(folder, dest)
    selected, selected_ref, predicted = {}, {}, {}
    for name, row in wls.iterrows():
        p = problem_of(row, max_comm_ctas)
        cols = predicted_completion(p, service[row["shape"]])
        selected[name] = select_comm_ctas(p, service[row["shape"]])
        predicted[name] = dict(zip(cols["comm_ctas"].tolist(), (cols["completion_ns"] / 1e6).tolist()))
        selected_ref[name] = choose_comm_ctas(completion_columns(p, scaled_rho(p)))  # §9's A100 ρ_ref, for comparison
    table = regret_table(times, selected, max_comm_ctas)
    ref_table = regret_table(times, selected_ref, max_comm_ctas)
    speed = fixed_c_speedup(times, selected, max_comm_ctas, n_boot=n_boot)
    med = times.groupby(["workload", "comm_ctas"])["kernel_ms"].median()
    workloads = []
    for r in table.itertuples():
        w = wls.loc[r.workload]
        per_c = med.loc[r.workload]
        all_best = int(per_c.idxmin())
        workloads.append({
            "workload": r.workload,
            "parameters": {"shape": w["shape"], "tokens": int(w["tokens"]), "skew": float(w["skew"]), "seed": int(w["seed"]),
                           "hidden": int(w["hidden"]), "ffn": int(w["ffn"]), "experts": int(w["experts"]), "topk": int(w["topk"]),
                           "splits": int(w["splits"]), "dest": dest, "rows_per_expert": [int(x) for x in str(w["rows_per_expert"]).split()],
                           "w_comp": int(w["w_comp"]), "w_comm": int(w["w_comm"]), "occupancy": int(w["occupancy"]), "num_sms": int(w["num_sms"])},
            "times_ms": {str(int(c)): round(float(v), 5) for c, v in per_c.items()},
            "predicted_ms": {str(c): round(v, 5) for c, v in predicted[r.workload].items()},
            "c_oracle": int(r.c_oracle), "c_selected": int(r.c_selected), "regret_pct": round(float(r.regret_pct), 3),
            "c_selected_rho_ref": int(selected_ref[r.workload]),
            "regret_pct_rho_ref": round(float(ref_table.set_index("workload").loc[r.workload, "regret_pct"]), 3),
            "c_best_any_swept": all_best,
        })
    reg = table["regret_pct"].to_numpy()
    launcher_ns = wls["select_ns"].to_numpy(dtype=float)
    return {
        "dest": dest, "max_comm_ctas": max_comm_ctas,
        "service_times_ns": {k: {"t_wave_ns": [round(x, 1) for x in v.t_wave_ns], "tau_ns": [round(x, 1) for x in v.tau_ns]} for k, v in service.items()},
        "workloads": workloads,
        "mean_regret_pct": round(float(np.mean(reg)), 3), "max_regret_pct": round(float(np.max(reg)), 3),
        "mean_regret_pct_rho_ref": round(float(ref_table["regret_pct"].mean()), 3),
        "max_regret_pct_rho_ref": round(float(ref_table["regret_pct"].max()), 3),
        "speedup_vs_best_fixed_c": speed,
        "speedup_vs_fixed_c": {str(c): round(v, 4) for c, v in speedup_by_fixed_c(times, selected, max_comm_ctas).items()},
        "solver_us": round(float(np.median(launcher_ns)) / 1e3, 4),
        "solver_us_max": round(float(np.max(launcher_ns)) / 1e3, 4),
        "solver_source": "partition_select.hpp in the launcher (gather_rs_moe), steady_clock over 20000 calls per workload on the device "
                         "machine's CPU; median (and max) over the sweep's workloads",
        "solver_us_python": round(python_solver_us(problem_of(wls.iloc[-1], max_comm_ctas), service[wls.iloc[-1]["shape"]]), 2),
    }
