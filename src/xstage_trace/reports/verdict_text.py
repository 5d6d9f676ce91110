"""The answer first: one sentence per configuration (dest × shape × variant × schedule) from the
run's verdict table (docs/model.md §5 rule, §6 schedule what-if), for ``analyze``, the dashboard
Overview, report.md/html and compare.

A sentence says, in this order: stall-bound or covered; the cause (the table's ``diagnosis``:
slot backpressure, the slot model's stall, or mainloop inflation, a stall the slot model cannot
see); how much (the median measured stall per remote-store tile and its parts, beside the slot
model's Δt and the calibrated prediction, in µs on the probe clock per SM; the share of tiles
stalled; the kernel time in ms, nsys); and for a stall-bound configuration what the
model says to change with its gain: interleaving (docs/model.md §6), with the kernel time the run
measured under the other schedule where it holds both, else the stall the model predicts there.

Pure: frames in, text out. ``verdict_table`` is the one place that reads a run.
"""

from __future__ import annotations

import math

import pandas as pd

from xstage_trace.reports.compare import GateConfig

CONFIG = ("dest", "shape", "variant")
PREDICTION_TOLERANCE, PREDICTION_TOLERANCE_US = 0.15, 2.0  # issue 28's goal: within 15 % or 2 µs of the measured median
CAUSES = {"slot_backpressure": "slot backpressure", "mainloop_inflation": "mainloop inflation"}


def verdict_table(run) -> pd.DataFrame:
    """The run's verdict per configuration and schedule (``Run.verdicts()``, base.schema.VERDICTS) in
    display units (:func:`in_display_units`), with the best predicted fix of its host-path what-if
    (``Run.link_whatif()``, :func:`with_fixes`)."""
    return with_fixes(in_display_units(run.verdicts()), run.link_whatif())


MIN_FIX_GAIN = 1.0 + GateConfig().gate_pct / 100  # a predicted gain under the gate's smallest kernel-time change (2 %) is no fix
FIX_COLUMNS = ["fix", "fix_parameter", "fix_kernel_ms", "fix_stall_us", "fix_gain", "as_run_pred_kernel_ms", "floor_kernel_ms"]


def with_fixes(v: pd.DataFrame, whatif: pd.DataFrame) -> pd.DataFrame:
    """docs/model.md §13: per verdict row the what-if's best alternative (least predicted kernel time among
    ``sm_count`` and ``prefetch``) with its parameter, kernel time (ms), stall (µs) and gain, the predicted as-run
    kernel time and the link floor (ms); missing where the run has no what-if for the configuration. An alternative
    predicted less than ``MIN_FIX_GAIN`` faster than as run is not a fix (``compare`` would not call the change one)."""
    out = v.copy()
    for c in FIX_COLUMNS:
        out[c] = None if c == "fix" else float("nan")
    if v.empty or whatif is None or whatif.empty:
        return out
    keys = ["dest", "shape", "variant", "schedule"]
    def key_of(values) -> tuple:  # "-", None and NaN are one missing variant or schedule
        return tuple("-" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x) for x in values)

    idx: dict = {}
    for key, g in whatif.groupby([whatif[k].map(lambda x: key_of([x])[0]) for k in keys], sort=False):  # a few configurations
        alt = g[g["alternative"].isin(["sm_count", "prefetch"])].sort_values("kernel_ns")
        get = lambda name: g.loc[g["alternative"] == name, "kernel_ns"]  # noqa: E731
        idx[key] = (alt.iloc[0] if len(alt) else None, get("as_run"), get("link_floor"))
    for i, row in out.iterrows():
        hit = idx.get(key_of(row[k] for k in keys))
        if hit is None:
            continue
        best, base, floor = hit
        if best is not None and float(best["gain"]) >= MIN_FIX_GAIN:
            out.at[i, "fix"], out.at[i, "fix_parameter"] = best["alternative"], best["parameter"]
            out.at[i, "fix_kernel_ms"], out.at[i, "fix_stall_us"], out.at[i, "fix_gain"] = best["kernel_ns"] / 1e6, best["stall_ns"] / 1e3, best["gain"]
        out.at[i, "as_run_pred_kernel_ms"] = float(base.iloc[0]) / 1e6 if len(base) else float("nan")
        out.at[i, "floor_kernel_ms"] = float(floor.iloc[0]) / 1e6 if len(floor) else float("nan")
    return out


DRAIN_BOUND = 1.05  # as-run prediction within 5 % of the link floor: no schedule change can gain more
FIXES = {"prefetch": "issue the next tile's operand loads before the store (prefetch one tile)",
         "sm_count": "store from fewer CTAs"}


def _predicted_fix(row) -> str | None:
    """The what-if's best fix with its predicted gain and the link floor (docs/model.md §13), or None."""
    if not pd.notna(row.get("floor_kernel_ms")):
        return None
    floor = f"the link floor (every byte once at R) is {_num(row['floor_kernel_ms'], 'ms')}: no schedule gets below it"
    base = row.get("as_run_pred_kernel_ms")
    if pd.notna(base) and float(base) <= DRAIN_BOUND * float(row["floor_kernel_ms"]):
        floor = f"drain-bound: {floor}, and the predicted {_num(base, 'ms')} as run is within {100 * (DRAIN_BOUND - 1):.0f} % of it"
    gain = row.get("fix_gain")
    if row.get("fix") is None or not pd.notna(gain):
        return (f"the model predicts no gain of {100 * (MIN_FIX_GAIN - 1):.0f} % or more from fewer CTAs or prefetching (as run "
                f"{_num(row.get('as_run_pred_kernel_ms'), 'ms')}); {floor}")
    what = FIXES.get(str(row["fix"]), str(row["fix"]))
    if str(row["fix"]) == "sm_count":
        what += f" ({int(row['fix_parameter'])})"
    return (f"{what}: predicted {_num(row['fix_kernel_ms'], 'ms')} ({float(gain):.2f}× faster than the predicted "
            f"{_num(row.get('as_run_pred_kernel_ms'), 'ms')} as run; median stall {_num(row.get('fix_stall_us'), 'µs')}); {floor}")


def in_display_units(v: pd.DataFrame) -> pd.DataFrame:
    """Verdict rows with every ``*_ns`` time also as ``*_us`` (µs) and ``kernel_ns`` as ``kernel_ms``; the
    placeholder "-" of a kernel without variant or schedule as missing."""
    out = v.replace({"variant": {"-": None}, "schedule": {"-": None}}) if len(v) else v.copy()
    for c in [c for c in v.columns if c.endswith("_ns")]:
        out[c[:-3] + ("_ms" if c == "kernel_ns" else "_us")] = v[c].astype(float) / (1e6 if c == "kernel_ns" else 1e3)
    return out


def _num(x, unit: str = "") -> str:
    """3 significant digits (0 as 0), with its unit; n/a for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    x = float(x)
    text = "0" if x == 0 else f"{x:.3g}"
    return f"{text} {unit}".rstrip()


def _count(x) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{int(x):,}"


def config_name(row) -> str:
    """``host S1 split/smem/tma wave``: the configuration and schedule of a verdict row."""
    return " ".join(str(row[k]) for k in ("dest", "shape", "variant", "schedule") if k in row and pd.notna(row[k]))


def schedule_speedups(v: pd.DataFrame) -> pd.DataFrame:
    """Per configuration (dest, shape, variant) with a kernel time under both schedules: kernel time
    wave and interleaved (ms, nsys) and the speedup wave / interleaved."""
    keys = [c for c in CONFIG if c in v]
    cols = [*keys, "kernel_ms_wave", "kernel_ms_interleaved", "speedup"]
    if v.empty or not {"wave", "interleaved"} <= set(v["schedule"].astype(str)):
        return pd.DataFrame(columns=cols)
    w = v[v["schedule"] == "wave"].set_index(keys)["kernel_ms"].rename("kernel_ms_wave")
    i = v[v["schedule"] == "interleaved"].set_index(keys)["kernel_ms"].rename("kernel_ms_interleaved")
    out = pd.concat([w, i], axis=1, join="inner").reset_index()
    out["speedup"] = out["kernel_ms_wave"] / out["kernel_ms_interleaved"]
    return out.dropna(subset=["speedup"]).reset_index(drop=True)[cols]


def _other(v: pd.DataFrame, row, schedule: str):
    """The verdict row of the same configuration under ``schedule``, or None."""
    m = v["schedule"].astype(str) == schedule
    for k in CONFIG:
        if k in v:
            m &= v[k].astype(str) == str(row[k])
    hit = v[m]
    return hit.iloc[0] if len(hit) else None


def _share(part, whole) -> str:
    return f"{100 * float(part) / float(whole):.0f} %" if pd.notna(part) and pd.notna(whole) and float(whole) > 0 else "n/a"


def _prediction(row) -> str:
    """The model's numbers beside a measurement: the slot model's median Δt and the calibrated forward
    prediction where the run had a calibration."""
    text = f"slot model {_num(row.get('slot_model_stall_us'), 'µs')}"
    if pd.notna(row.get("predicted_stall_us")):
        pred, meas = float(row["predicted_stall_us"]), row.get("measured_stall_us")
        text += f", calibrated prediction {_num(pred, 'µs')}"
        if pd.notna(meas) and abs(pred - float(meas)) > max(PREDICTION_TOLERANCE * float(meas), PREDICTION_TOLERANCE_US):
            off = f"{100 * (pred / float(meas) - 1):+.0f} %" if float(meas) > 0 else f"{pred - float(meas):+.3g} µs"
            text += f" (misses the measured stall by {off}: docs/calibration-physics.md §6 says where and why)"
    return text


def _how_much(row) -> str:
    """How much: the measured stall (and its parts), the model's, the share of tiles and the kernel time."""
    stalled = f"{_share(row.get('stalled_tiles'), row.get('tiles'))} of {_count(row.get('tiles'))} remote-store tiles stalled"
    if str(row.get("basis")) == "predicted":
        text = f"predicted median stall {_num(row.get('predicted_stall_us', row.get('slot_model_stall_us')), 'µs')} (not measured: no control of this shape)"
    elif str(row.get("diagnosis")) == "mainloop_inflation":
        text = (f"median stall {_num(row.get('measured_stall_us'), 'µs')} measured, {_num(row.get('compute_stall_us'), 'µs')} of it in a "
                f"compute span beyond the control's (slot wait {_num(row.get('slot_stall_us'), 'µs')}); {stalled}; {_prediction(row)}: "
                "the slot model cannot see this stall")
    elif str(row.get("verdict")) == "stall-bound":
        text = f"median stall {_num(row.get('measured_stall_us'), 'µs')} measured ({_prediction(row)}); {stalled}"
    else:
        text = f"median stall {_num(row.get('measured_stall_us'), 'µs')} measured ({_prediction(row)})"
        if pd.notna(row.get("noise_us")):
            text += f", at or below the {_num(row['noise_us'], 'µs')} noise floor"
        if pd.notna(row.get("stalled_tiles")) and float(row["stalled_tiles"]) > 0:
            text += f" ({_count(row['stalled_tiles'])} tiles above it)"
    if pd.notna(row.get("kernel_ms")):
        text += f"; kernel {_num(row['kernel_ms'], 'ms')}"
    return text


def _change(v: pd.DataFrame, row) -> str:
    """What the model says to change for a stall-bound row, with the gain (measured where the run has it)."""
    if str(row.get("diagnosis", "")) == "mainloop_inflation":
        same = (v["schedule"].astype(str) == str(row["schedule"])) & (v["dest"].astype(str) == str(row["dest"])) \
            & (v["shape"].astype(str) == str(row["shape"])) & (v["variant"].astype(str) != str(row["variant"]))
        judged = v["compute_stall_us"].notna() if "compute_stall_us" in v else pd.Series(False, index=v.index)
        alt = v[same & judged & (v["diagnosis"].astype(str) != "mainloop_inflation") & (v["basis"].astype(str) == "measured")]
        measured = []
        if len(alt):
            measured.append(f"the mainloops of {', '.join(sorted(alt['variant'].astype(str)))} are not inflated in this run (measured)")
        o = _other(v, row, "interleaved") if str(row.get("schedule")) == "wave" else None
        if o is not None and pd.notna(o.get("measured_stall_us")):
            measured.append(f"interleaved, this variant measured {_num(o['measured_stall_us'], 'µs')}")
        fix = _predicted_fix(row)
        if fix is None:
            fix = "keep the remote stores off the memory path the mainloop uses (no predicted gain: the run has no path-drain calibration)"
        return "Fix: " + "; ".join([*measured, fix]) + "."
    if str(row.get("schedule")) == "wave":
        o = _other(v, row, "interleaved")
        if o is None:
            return "Fix: interleave Linear-1 and Linear-2 tiles (docs/model.md §6; gain on the What-if page, no interleaved launch in this run)."
        there = f"the slot model predicts {_num(o.get('slot_model_stall_us'), 'µs')} there (measured {_num(o.get('measured_stall_us'), 'µs')})"
        if pd.notna(row.get("kernel_ms")) and pd.notna(o.get("kernel_ms")) and float(o["kernel_ms"]) > 0:
            speed = float(row["kernel_ms"]) / float(o["kernel_ms"])
            return (f"Fix: interleave Linear-1 and Linear-2 tiles: measured {_num(o['kernel_ms'], 'ms')}, "
                    f"{speed:.2f}× {'faster' if speed >= 1 else 'slower'}; {there}.")
        return f"Fix: interleave Linear-1 and Linear-2 tiles: {there}."
    return ("Fix: interleaving alone does not cover it; more Linear-1 work per Linear-2 tile (n1/n2) or smaller bursts "
            "(docs/model.md §4 design test, the What-if page).")


def sentence(v: pd.DataFrame, row) -> str:
    """One configuration's verdict as one sentence (see the module docstring)."""
    name = config_name(row)
    verdict = str(row.get("verdict"))
    if verdict == "stall-bound":
        cause = CAUSES.get(str(row.get("diagnosis")), str(row.get("diagnosis")))
        return f"{name}: stall-bound by {cause}: {_how_much(row)}. {_change(v, row)}"
    if verdict == "covered":
        return f"{name}: covered: {_how_much(row)}."
    return (f"{name}: unknown: not measured (no control run of this shape) and the model's prediction "
            f"({_num(row.get('predicted_stall_us', row.get('slot_model_stall_us')), 'µs')}) is at or below the noise floor.")


def with_sentences(v: pd.DataFrame) -> pd.DataFrame:
    """The verdict table, stall-bound rows first (largest measured stall first), with a
    ``sentence`` column."""
    if v.empty:
        return v.assign(sentence=pd.Series(dtype=object))
    order = v.assign(_o=v["verdict"].map({"stall-bound": 0, "covered": 1}).fillna(2), _s=-v["measured_stall_us"].fillna(0))
    order = order.sort_values(["_o", "_s", *[c for c in CONFIG if c in v], "schedule"], kind="stable").drop(columns=["_o", "_s"])
    return order.assign(sentence=[sentence(v, r) for _, r in order.iterrows()]).reset_index(drop=True)


def headline(v: pd.DataFrame) -> str:
    """The count line above the sentences."""
    if v.empty:
        return "No verdict: the run has no fused-kernel tiles (probe dumps with mainloop, slot-wait and remote-store records)."
    n = int((v["verdict"] == "stall-bound").sum())
    return f"{n} of {len(v)} configuration × schedule pairs are stall-bound; {int((v['verdict'] == 'covered').sum())} covered."


def verdict_lines(run) -> list[str]:
    """The headline and one sentence per configuration of a run."""
    v = with_sentences(verdict_table(run))
    return [headline(v), *v["sentence"].tolist()] if len(v) else [headline(v)]
