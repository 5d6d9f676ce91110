"""``xstage-trace model …``: model evaluations as JSON-ready dicts (units in the key names)."""

from __future__ import annotations

from pathlib import Path

import math

import numpy as np

from xstage_trace.base.errors import InputError
from xstage_trace.base.paths import input_kind
from xstage_trace.base.table_files import check_numbers, read_table_file, require_numeric

MIB = float(1 << 20)
MAX_VALUE = 1e18      # larger flags overflow the model's products (bytes × ns) long before they mean anything
MAX_COUNT = 1 << 31   # counts (producers, tokens, tile sizes, …) are 32-bit quantities on a GPU


def _number(flag: str, value, *, zero_ok: bool = False, integer: bool = False, high: float | None = None):
    """``value`` of a model flag when it is a finite number > 0 (≥ 0 with ``zero_ok``) and at most
    ``high``; None passes through (an optional flag not given). InputError naming the flag otherwise."""
    if value is None:
        return None
    high = high if high is not None else (MAX_COUNT if integer else MAX_VALUE)
    ok = (isinstance(value, int) or not integer) and math.isfinite(value) and (value >= 0 if zero_ok else value > 0) and value <= high
    if not ok:
        need = ("an integer" if integer else "a finite number") + (" >= 0" if zero_ok else " > 0") + f" and at most {int(high) if integer else f'{high:g}'}"
        raise InputError(None, f"{flag} {value!r} is out of range: it must be {need}", f"give {flag} a value in that range")
    return value


def burst_doc(rate_gbps, issue_floor_us, producers, bytes_per_producer, gap_us, capacity_mib) -> dict:
    """docs/model.md §2–§4 for one recurring burst."""
    from xstage_trace.analysis import burst_gap as bg

    _number("--rate-gbps", rate_gbps), _number("--issue-floor-us", issue_floor_us), _number("--producers", producers, integer=True)
    _number("--bytes-per-producer", bytes_per_producer), _number("--gap-us", gap_us, zero_ok=True), _number("--capacity-mib", capacity_mib)
    v = producers * bytes_per_producer
    t0 = issue_floor_us * 1e3
    g = (gap_us or 0.0) * 1e3
    q = capacity_mib * MIB if capacity_mib is not None else None
    b_iso = float(bg.isolated_excess_bytes(v, rate_gbps, t0))
    verdict, failed = bg.design_verdict(v, g, rate_gbps, t0, q)
    return {
        "volume_bytes": v,
        "drain_time_us": float(bg.drain_time_ns(v, rate_gbps)) / 1e3,
        "recovery_gap_us": float(bg.recovery_gap_ns(v, rate_gbps, t0)) / 1e3,
        "issue_time_us": float(bg.issue_time_ns(g, v, rate_gbps, t0)) / 1e3,
        "issue_overhead_us": float(bg.issue_overhead_ns(g, v, rate_gbps, t0)) / 1e3,
        "period_us": float(bg.period_ns(g, v, rate_gbps, t0)) / 1e3,
        "rho": float(bg.offered_pressure(v, rate_gbps, t0, g)),
        "isolated_excess_bytes": b_iso,
        "capacity_ok": None if q is None else bool(b_iso <= q),
        "verdict": verdict,
        "failed_bounds": failed,
    }


def stall_doc(span_us, cover_us, tiles: Path | None, by: str | None) -> dict:
    """docs/model.md §5: Δt = [T_RS − T_cover]₊ for one tile or a table of tiles (+ Table-3 style summary); a
    table with ``epilogue_lead_ns`` (a run's tile table) gets our lead term, [T_lead + T_RS − T_cover]₊."""
    from xstage_trace.analysis.stall_law import predicted_stall_ns

    _number("--span-us", span_us, zero_ok=True), _number("--cover-us", cover_us, zero_ok=True)
    if tiles is None:
        if span_us is None or cover_us is None:
            raise InputError(None, "model stall needs --span-us and --cover-us, or --tiles", "give one of them")
        return {"span_us": span_us, "cover_us": cover_us, "predicted_stall_us": float(predicted_stall_ns(span_us, cover_us))}
    df = read_table_file(tiles)
    require_numeric(df, tiles, ("span_us", "cover_us", "rs_span_ns", "cover_ns", "epilogue_lead_ns"))
    if "rs_span_ns" not in df and "span_us" in df:
        df["rs_span_ns"] = df["span_us"] * 1e3
    if "cover_ns" not in df and "cover_us" in df:
        df["cover_ns"] = df["cover_us"] * 1e3
    if "rs_span_ns" not in df or "cover_ns" not in df:
        raise InputError(tiles, "table lacks span (span_us or rs_span_ns) or cover (cover_us or cover_ns) columns", "add them")
    check_numbers(df, tiles, non_negative=("rs_span_ns", "cover_ns"), missing_ok=("rs_span_ns", "cover_ns"),
                  fix="give every tile a span and cover time >= 0 (empty where a tile has none)")
    lead = df["epilogue_lead_ns"].fillna(0.0) if "epilogue_lead_ns" in df else 0.0  # a run's tile table carries it
    df["predicted_stall_ns"] = predicted_stall_ns(df["rs_span_ns"], df["cover_ns"], lead)
    if df.empty:
        raise InputError(tiles, "tile table has no rows", "pass a table with one row per tile")
    groups = [c.strip() for c in by.split(",")] if by else []
    unknown = [g for g in groups if g not in df.columns]
    if unknown or (by is not None and not groups) or "" in groups:
        raise InputError(tiles, f"--by {by!r} names columns the table lacks ({', '.join(repr(u) for u in unknown) or 'empty name'})",
                         f"use its columns: {', '.join(map(str, df.columns))}")
    from xstage_trace.analysis.stall import stall_summary

    summary = stall_summary(df, groups) if groups else stall_summary(df.assign(all="all"), ["all"])
    return {
        "tiles": int(len(df)),
        "predicted_stall_us": (df["predicted_stall_ns"] / 1e3).round(6).tolist(),
        "summary": summary.to_dict("records"),
    }


def qloop_doc(tile_m, head_dim, elem_bytes, kv_tile, sigma_us, producers, rate_gbps, issue_floor_us, capacity_mib, seq_len) -> dict:
    """docs/model.md §7 audit."""
    from xstage_trace.analysis.whatif import qloop_audit

    for flag, v in (("--tile-m", tile_m), ("--head-dim", head_dim), ("--elem-bytes", elem_bytes), ("--kv-tile", kv_tile), ("--producers", producers)):
        _number(flag, v, integer=True)
    for v in seq_len:
        _number("--seq-len", v, integer=True)
    _number("--sigma-us", sigma_us), _number("--rate-gbps", rate_gbps), _number("--issue-floor-us", issue_floor_us), _number("--capacity-mib", capacity_mib)
    d = qloop_audit(tile_m, head_dim, elem_bytes, kv_tile, sigma_us * 1e3, producers, rate_gbps, issue_floor_us * 1e3,
                    capacity_mib * MIB if capacity_mib is not None else None, seq_len)
    return {
        "bytes_per_producer": d["bytes_per_producer"], "volume_bytes": d["volume_bytes"],
        "drain_time_us": d["drain_time_ns"] / 1e3, "recovery_gap_us": d["recovery_gap_ns"] / 1e3,
        "isolated_excess_bytes": d["isolated_excess_bytes"], "capacity_ok": d["capacity_ok"], "m_ub_tokens": d["m_ub_tokens"],
        "verdicts": [{"seq_len": r["seq_len"], "qloop_gap_lb_us": r["qloop_gap_lb_ns"] / 1e3, "verdict": r["verdict"]} for r in d["per_seq_len"]],
    }


def interleave_doc(volume_bytes, l1_us, l2_us, n1, n2, issue_floor_us, rate_gbps, n_tile_width, num_sms, h_inter) -> dict:
    """docs/model.md §6."""
    from xstage_trace.analysis.whatif import interleave

    _number("--volume-bytes", volume_bytes), _number("--mainloop-l1-us", l1_us), _number("--mainloop-l2-us", l2_us)
    _number("--issue-floor-us", issue_floor_us), _number("--rate-gbps", rate_gbps)
    for flag, v in (("--n1", n1), ("--n2", n2), ("--n-tile-width", n_tile_width), ("--num-sms", num_sms), ("--expert-intermediate", h_inter)):
        _number(flag, v, integer=True)
    d = interleave(volume_bytes, l1_us * 1e3, l2_us * 1e3, n1, n2, issue_floor_us * 1e3, rate_gbps, n_tile_width, num_sms, h_inter)
    return {
        "gap_wave_us": d["gap_wave_ns"] / 1e3, "issue_overhead_wave_us": d["issue_overhead_wave_ns"] / 1e3,
        "gap_interleaved_us": d["gap_interleaved_ns"] / 1e3, "issue_overhead_interleaved_us": d["issue_overhead_interleaved_ns"] / 1e3,
        "offered_rate_interleaved_gbps": d["offered_rate_interleaved_gbps"], "full_recovery": d["full_recovery"], "d_knee_rows": d["d_knee_rows"],
    }


def partition_service(path: Path, shape: str | None):
    """A shape's measured service times (docs/model.md §9, ρ measured) from a partition_regret.json's ``service_times_ns``."""
    import json

    from xstage_trace.analysis.partition_select import ServiceTimes

    try:
        table = json.loads(Path(path).read_text())["service_times_ns"]
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(path, "is not a partition_regret.json with service_times_ns", "give the JSON `model partition-sweep --write` wrote") from None
    if shape not in table:
        raise InputError(path, f"has no service times for --service-shape {shape!r} (it has {', '.join(sorted(table))})", "name one of those shapes")
    try:
        s = ServiceTimes(tuple(float(x) for x in table[shape]["t_wave_ns"]), tuple(float(x) for x in table[shape]["tau_ns"]))
    except (KeyError, TypeError, ValueError):
        raise InputError(path, f"service_times_ns[{shape!r}] lacks t_wave_ns / tau_ns lists of one length", "regenerate it with model partition-sweep") from None
    if not all(math.isfinite(x) and x > 0 for x in s.t_wave_ns + s.tau_ns):
        raise InputError(path, f"service_times_ns[{shape!r}] holds a time that is not a finite number > 0", "regenerate it with model partition-sweep")
    return s


def partition_doc(tokens_per_expert: str, tokens, hidden, reduction, splits, ranks, tile_m, tile_n, num_sms, rho,
                  service: Path | None = None, service_shape: str | None = None, comm_tile_n: int = 1024,
                  comp_per_sm: int = 2, comm_per_sm: int = 1) -> dict:
    """docs/model.md §9; with ``service`` (a partition_regret.json) the measured service times of ``service_shape`` instead of ρ."""
    from xstage_trace.analysis.partition import PartitionProblem, choose_comm_ctas, completion_columns, scaled_rho

    try:
        m_e = tuple(int(x) for x in tokens_per_expert.split(",") if x.strip())
    except ValueError:
        raise InputError(None, f"--tokens-per-expert {tokens_per_expert!r} is not a list of integers", "write it as 512,480,…") from None
    for v in m_e:
        _number("--tokens-per-expert", v, zero_ok=True, integer=True)
    if not any(m_e):
        raise InputError(None, f"--tokens-per-expert {tokens_per_expert!r} routes no token", "give at least one expert a token count > 0")
    for flag, v in (("--tokens", tokens), ("--hidden", hidden), ("--reduction", reduction), ("--tile-m", tile_m), ("--tile-n", tile_n)):
        _number(flag, v, integer=True)
    _number("--splits", splits, integer=True, high=1 << 16), _number("--ranks", ranks, integer=True, high=1 << 16)
    _number("--num-sms", num_sms, integer=True, high=1 << 16), _number("--rho", rho)
    _number("--comm-tile-n", comm_tile_n, integer=True), _number("--comp-per-sm", comp_per_sm, integer=True, high=64)
    _number("--comm-per-sm", comm_per_sm, integer=True, high=64)
    p = PartitionProblem(m_e, tokens, hidden, reduction, splits, ranks, tile_m, tile_n, comm_tile_n=comm_tile_n, num_sms=num_sms,
                         comm_per_sm=comm_per_sm, comp_per_sm=comp_per_sm)
    if service is not None:
        if rho is not None:
            raise InputError(None, "--rho and --service both set the service times", "give one of them")
        from xstage_trace.analysis.partition_select import predicted_completion, select_comm_ctas

        s = partition_service(service, service_shape)
        if len(s.tau_ns) < p.max_comm_ctas:
            raise InputError(service, f"covers C ≤ {len(s.tau_ns)}, fewer than the {p.max_comm_ctas} candidates", "calibrate C = 1 … 16")
        table = predicted_completion(p, s)
        if not len(table["comm_ctas"]):
            raise InputError(None, f"--num-sms {num_sms} leaves no SM for compute with any number of communication CTAs", "give --num-sms the GPU's SM count")
        return {"rho_source": f"measured ({service}, shape {service_shape})", "comm_ctas_best": select_comm_ctas(p, s),
                "candidates": [{k: v[i].item() for k, v in table.items()} for i in range(len(table["comm_ctas"]))]}
    r = scaled_rho(p) if rho is None else rho
    table = completion_columns(p, r)
    if not len(table["comm_ctas"]):
        raise InputError(None, f"--num-sms {num_sms} leaves no SM for compute with any number of communication CTAs", "give --num-sms the GPU's SM count")
    return {"rho": r, "rho_source": "measured (--rho)" if rho is not None else "reference scaled (docs/model.md §9)",
            "comm_ctas_best": choose_comm_ctas(table),
            "candidates": [{k: v[i].item() for k, v in table.items()} for i in range(len(table["comm_ctas"]))]}


def sequence_doc(bursts: Path, calibration: Path | None, rate_gbps, issue_floor_us, capacity_mib) -> dict:
    """docs/model.md §4 over the burst sequences of a table or a run folder: one audit per launch (the rows
    sharing rank, dump, dest, shape, schedule and variant, where the table has those columns), since
    the backlog q_n restarts with every launch; ``configurations`` holds each one's onset."""
    import pandas as pd

    from xstage_trace.analysis.recurrence import audit_sequence
    from xstage_trace.dataset.calibration import load_platform

    _number("--rate-gbps", rate_gbps), _number("--issue-floor-us", issue_floor_us), _number("--capacity-mib", capacity_mib)
    bursts = Path(bursts)
    if input_kind(bursts) == "dir":
        from xstage_trace.base.run_files import read_run

        df = read_run(bursts)[0]["bursts"].to_pandas()
    else:
        df = read_table_file(bursts)
    if "volume_bytes" not in df or "gap_ns" not in df:
        raise InputError(bursts, "burst table lacks volume_bytes or gap_ns", "give one row per burst with those columns")
    if df.empty:
        raise InputError(bursts, "burst table has no rows", "give one row per burst (a run folder needs probe dumps with remote-store bursts)")
    check_numbers(df, bursts, positive=("volume_bytes", "issue_floor_ns", "producers"), non_negative=("gap_ns",),
                  missing_ok=("issue_floor_ns", "gap_ns"), fix="give every burst a positive volume, issue floor and producer count and a gap >= 0 (empty after the last)")
    model = load_platform(calibration) if calibration else None
    if rate_gbps is None and model is None:
        raise InputError(None, "model sequence needs --calibration or --rate-gbps", "give one of them")
    if rate_gbps is not None:
        rate = np.full(len(df), float(rate_gbps))
    elif "producers" in df:  # R(K, B) per burst, as the calibration's fit predicts (R(K) / the single R of older JSONs)
        from xstage_trace.analysis.calibration_fit import rates_of

        k = df["producers"].to_numpy()
        rate = rates_of(model, k, df["volume_bytes"].to_numpy() / np.maximum(k, 1))
    else:
        rate = np.full(len(df), model.rate_gbps)
    if issue_floor_us is not None:
        t0 = np.full(len(df), issue_floor_us * 1e3)
    elif "issue_floor_ns" in df and df["issue_floor_ns"].notna().all():
        t0 = df["issue_floor_ns"].to_numpy()
    elif model is not None and "producers" in df:
        k = df["producers"].to_numpy()
        t0 = model.floor_ns(k, df["volume_bytes"].to_numpy() / np.maximum(k, 1))
    else:
        raise InputError(bursts, "no issue floor: table has no issue_floor_ns and no producers column", "pass --issue-floor-us")
    if capacity_mib is not None:
        q = np.full(len(df), capacity_mib * MIB)
    elif model is not None and model.capacity_bytes is not None:  # Q(K) per burst where producers are known
        q = model.capacity(df["producers"].to_numpy()) if "producers" in df else np.full(len(df), model.capacity_bytes)
    else:
        q = None
    keys = [c for c in SEQUENCE_KEYS if c in df]
    groups = df.groupby(keys, sort=True, dropna=False).indices if keys else {(): np.arange(len(df))}
    rows, configs = [], []
    for key, idx in groups.items():  # one launch (rank, dump) is one burst sequence: q restarts at 0 in each
        idx = np.sort(idx)
        if "burst" in df:
            idx = idx[np.argsort(df["burst"].to_numpy()[idx], kind="stable")]
        a = audit_sequence(df["volume_bytes"].to_numpy()[idx], df["gap_ns"].fillna(np.inf).to_numpy()[idx], t0[idx], rate[idx],
                           None if q is None else q[idx])
        label = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        rows.append(a.table.assign(**label, rate_gbps=rate[idx], capacity_bytes=None if q is None else q[idx]))
        configs.append({**label, "bursts": int(len(idx)), "onset_burst": a.onset, "onset_excess_bytes": a.onset_excess_bytes,
                        "max_rho": float(a.table["rho"].max()), "max_q_bytes": float(a.table["q_bytes"].max()),
                        "rate_gbps": float(np.median(rate[idx])), "capacity_bytes": None if q is None else float(np.median(q[idx]))})
    per_burst = pd.concat(rows, ignore_index=True).replace([np.inf], None)
    one = configs[0] if len(configs) == 1 else None  # several sequences: an onset of their concatenation would mean nothing
    return {"bursts": int(len(df)), "sequences": len(configs), "rate_gbps": float(np.median(rate)),
            "capacity_bytes": None if q is None else float(np.median(q)),
            "onset_burst": one["onset_burst"] if one else None, "onset_excess_bytes": one["onset_excess_bytes"] if one else None,
            "max_rho": float(per_burst["rho"].max()), "max_q_bytes": float(per_burst["q_bytes"].max()),
            "configurations": configs, "per_burst": per_burst.to_dict("records")}


SEQUENCE_KEYS = ("rank", "dump", "dest", "shape", "schedule", "variant")  # the columns that tell one burst sequence from another
