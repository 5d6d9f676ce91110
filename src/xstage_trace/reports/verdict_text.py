"""The answer first: one sentence per configuration (dest × shape × variant × schedule) from the
run's verdict table (docs/model.md §5 rule, §6 schedule what-if), for ``analyze``, the dashboard
Overview, report.md/html and compare.

A sentence says, in this order: stall-bound or covered; the cause (the table's ``diagnosis``:
slot backpressure, the slot model's stall, or mainloop inflation, a stall the slot model cannot
see); how much (median stall measured and predicted per Linear-2 tile in µs, probe clock per SM;
the share of tiles; the kernel time in ms, nsys); and for a stall-bound configuration what the
model says to change with its gain: interleaving (docs/model.md §6), with the kernel time the run
measured under the other schedule where it holds both, else the stall the model predicts there.

Pure: frames in, text out. ``verdict_table`` is the one place that reads a run.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

COLUMNS = ("dest", "shape", "variant", "schedule", "verdict", "diagnosis", "tiles", "stalled_tiles",
           "measured_stall_us", "predicted_stall_us", "kernel_ms")
CONFIG = ("dest", "shape", "variant")
CAUSES = {"slot_backpressure": "slot backpressure", "mainloop_inflation": "mainloop inflation"}


def verdict_table(run) -> pd.DataFrame:
    """The run's verdict per configuration, with at least COLUMNS (plus ``noise_us`` and
    ``inflated_share`` where known); empty without fused-kernel tiles."""
    return _from_table3(run.table3(), run.tiles())


def _from_table3(table3: pd.DataFrame, tiles: pd.DataFrame) -> pd.DataFrame:
    """analysis.verdict.config_verdicts over Table 3 in the verdict table's columns (the prototype of
    ``Run.verdicts()``): tiles = the configuration's Linear-2 tiles, stalled = its backpressured ones."""
    from xstage_trace.analysis.verdict import config_verdicts

    if table3.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    noise = float(tiles["noise_ns"].median()) if len(tiles) and "noise_ns" in tiles else None
    v = config_verdicts(table3, noise)
    per_cfg = table3.set_index([c for c in CONFIG if c in table3])["tiles_l2"] if "tiles_l2" in table3 else None
    keys = [c for c in CONFIG if c in v]
    v["tiles"] = per_cfg.reindex(pd.MultiIndex.from_frame(v[keys]) if len(keys) > 1 else v[keys[0]]).to_numpy() if per_cfg is not None else np.nan
    v = v.rename(columns={"backpressured_tiles": "stalled_tiles"})
    return v


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
    """Per configuration (dest, shape, variant) holding both schedules: kernel time wave and
    interleaved (ms, nsys) and the speedup wave / interleaved (NaN without both kernel times)."""
    keys = [c for c in CONFIG if c in v]
    cols = [*keys, "kernel_ms_wave", "kernel_ms_interleaved", "speedup"]
    if v.empty or not {"wave", "interleaved"} <= set(v["schedule"].astype(str)):
        return pd.DataFrame(columns=cols)
    w = v[v["schedule"] == "wave"].set_index(keys)["kernel_ms"].rename("kernel_ms_wave")
    i = v[v["schedule"] == "interleaved"].set_index(keys)["kernel_ms"].rename("kernel_ms_interleaved")
    out = pd.concat([w, i], axis=1, join="inner").reset_index()
    out["speedup"] = out["kernel_ms_wave"] / out["kernel_ms_interleaved"]
    return out[cols]


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


def _judged(row) -> bool:
    """False where mainloop inflation could not be judged (no local control of the shape and operand path)."""
    return "inflated_share" not in row or pd.notna(row.get("inflated_share"))


def _how_much(row) -> str:
    """How much: the slot stall, the share of tiles it hits (or of inflated mainloops) and the kernel time."""
    stall = f"median stall {_num(row.get('measured_stall_us'), 'µs')} measured ({_num(row.get('predicted_stall_us'), 'µs')} predicted)"
    if str(row.get("diagnosis")) == "mainloop_inflation":
        text = (f"{_share(row.get('inflated_share'), 1.0)} of the Linear-2 mainloops slower than the local control's, while the slot "
                f"stall stays below the noise floor ({stall.replace('median stall ', 'median ')})")
    elif str(row.get("verdict")) == "stall-bound":
        text = f"{stall}, {_share(row.get('stalled_tiles'), row.get('tiles'))} of {_count(row.get('tiles'))} Linear-2 tiles"
    else:
        text = stall
        if pd.notna(row.get("noise_us")):
            text += f", at or below the {_num(row['noise_us'], 'µs')} noise floor"
        if pd.notna(row.get("stalled_tiles")) and float(row["stalled_tiles"]) > 0:
            text += f" ({_count(row['stalled_tiles'])} tiles above it)"
    if pd.notna(row.get("kernel_ms")):
        text += f"; kernel {_num(row['kernel_ms'], 'ms')}"
    return text


def _change(v: pd.DataFrame, row) -> str:
    """What the model says to change for a stall-bound row, with the gain (measured where the run has it)."""
    diagnosis = str(row.get("diagnosis", ""))
    if diagnosis == "mainloop_inflation":
        same = (v["schedule"].astype(str) == str(row["schedule"])) & (v["dest"].astype(str) == str(row["dest"])) \
            & (v["shape"].astype(str) == str(row["shape"]))
        alt = v[same & (v["diagnosis"].astype(str) != "mainloop_inflation") & (v["variant"].astype(str) != str(row["variant"]))] \
            if "variant" in v else v.iloc[0:0]
        alt = alt[[_judged(r) for _, r in alt.iterrows()]]
        text = "Fix: outside the slot model (no predicted gain); keep the remote stores off the memory path the mainloop uses"
        if len(alt):
            names = sorted(alt["variant"].astype(str))
            text += f": the mainloops of {' and '.join(names)} are not inflated in this run"
        return text + "."
    if str(row["schedule"]) == "wave":
        o = _other(v, row, "interleaved")
        if o is None:
            return "Fix: interleave Linear-1 and Linear-2 tiles (docs/model.md §6; gain on the What-if page, no interleaved launch in this run)."
        pred = f"predicted stall {_num(o['predicted_stall_us'], 'µs')}"
        if pd.notna(row.get("kernel_ms")) and pd.notna(o.get("kernel_ms")) and float(o["kernel_ms"]) > 0:
            speed = float(row["kernel_ms"]) / float(o["kernel_ms"])
            return (f"Fix: interleave Linear-1 and Linear-2 tiles: measured {_num(o['kernel_ms'], 'ms')}, "
                    f"{speed:.2f}× {'faster' if speed >= 1 else 'slower'}; {pred} (measured {_num(o['measured_stall_us'], 'µs')}).")
        return f"Fix: interleave Linear-1 and Linear-2 tiles: {pred} (measured {_num(o['measured_stall_us'], 'µs')})."
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
        blind = "" if _judged(row) else " Mainloop inflation not judged (no local control of this shape and operand path)."
        return f"{name}: covered: {_how_much(row)}.{blind}"
    return f"{name}: unknown: no Linear-2 tile with a remote-store span and a measured or predicted stall."


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
