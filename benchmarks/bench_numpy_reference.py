"""``analyze`` side by side with a hand-written numpy pipeline of the same per-tile quantities (issue 27).

Input (SYNTHETIC, made in /tmp by ``bench_analyze.replicate`` and removed afterwards): the 8 real fused-kernel
dumps of ``sample_traces/h200_fused_moe/traced`` copied to about ``--records`` records, with the real nsys
report and ``calibration_host.json`` for the tool.

The reference is what a kernel engineer would write in an afternoon, in one process: the project's decoder
(``decode_probe_dump``, memory-mapped; that part alone is the decode limit), then per dump in numpy: the
mainloop, slot-wait, remote- and local-store spans of every (CTA, tile) paired by sorting, the tiles of a CTA
ordered by mainloop start, T_cover = the next tile's mainloop, T_lead = store start − next mainloop start,
predicted Δt = [T_lead + T_epilogue − T_cover]₊, the slot wait recorded before the tile two places later; then
over the run the control launches' wait floor (median) and noise (p99 of the floor-corrected waits, at least
200 ns), measured Δt = [wait − floor]₊, backpressured = predicted or measured Δt above the noise
(docs/model.md §5), and per (dest, shape, schedule, tile kind) the tile count, the backpressured count and the
median mainloop and predicted Δt. Times are the raw %globaltimer (the tool's are aligned to the nsys clock,
which scales durations by the clock drift, ~7 ppm here: < 0.1 ns on a 10 µs mainloop). ``--write`` also writes
each dump's tiles as a zstd Parquet file, as the tool does.

The script checks the reference's table against the tool's ``tiles`` table (counts equal, medians within 1 ns)
and prints CPU time per record of: decode alone, the reference (and with its tiles written), the tool end to end
(user + sys of the process tree, /usr/bin/time).

    python benchmarks/bench_numpy_reference.py [--records 1e7] [--src src]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import CALIBRATION, TRACED, dump_records, replicate, scratch, time_v  # noqa: E402

MIN_NOISE_NS = 200.0


def _label(header: dict) -> dict:
    return dict(kv.split("=", 1) for kv in header["label"].split() if "=" in kv)


def _codes(column, names: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Dictionary indices of a one-chunk dictionary column and the code of each of ``names`` (-1: absent)."""
    chunk = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    values = chunk.dictionary.to_pylist()
    return chunk.indices.to_numpy(), {n: (values.index(n) if n in values else -1) for n in names}


def dump_tiles(path: Path) -> dict:
    """One fused-kernel dump's per-tile columns (numpy), in CTA and mainloop order."""
    from xstage_trace.collectors.probe_format import decode_probe_dump

    d = decode_probe_dump(path)
    r = d.records
    event, ev = _codes(r["event"], ["mainloop", "slot_wait", "rs", "ls", "tile_info"])
    kind, kd = _codes(r["kind"], ["begin", "end"])
    key = (r["cta"].to_numpy().astype(np.int64) << 32) | r["tile"].to_numpy().astype(np.int64)
    t_gt = r["t_gt_ns"].to_numpy()
    t = (t_gt - (t_gt.min() if len(t_gt) else 0)).astype(np.float64)  # ns since the dump's first record (float64 of epoch ns loses 256 ns)
    payload = r["payload"].to_numpy()

    def span(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys sorted, begin time, end time) of the event's begin/end pairs (one pair per key)."""
        of = event == ev[name]
        b, e = np.flatnonzero(of & (kind == kd["begin"])), np.flatnonzero(of & (kind == kd["end"]))
        b, e = b[np.argsort(key[b], kind="stable")], e[np.argsort(key[e], kind="stable")]
        assert np.array_equal(key[b], key[e]), "one begin and one end per (cta, tile)"
        return key[b], t[b], t[e]

    keys, start, end = span("mainloop")

    def at(name: str) -> tuple[np.ndarray, np.ndarray]:
        """(duration, start) of the event's span for each mainloop tile, NaN where it has none."""
        k, b, e = span(name)
        pos = np.minimum(np.searchsorted(k, keys), max(len(k) - 1, 0))
        hit = (k[pos] == keys) if len(k) else np.zeros(len(keys), bool)
        return np.where(hit, (e - b)[pos] if len(k) else 0, np.nan), np.where(hit, b[pos] if len(k) else 0, np.nan)

    wait, _ = at("slot_wait")
    rs, rs_start = at("rs")
    ls, ls_start = at("ls")
    info = np.flatnonzero(event == ev["tile_info"])
    info = info[np.argsort(key[info], kind="stable")]
    is_l2 = (payload[info][np.searchsorted(key[info], keys)] & 1).astype(bool)
    cta = keys >> 32
    order = np.lexsort((start, cta))
    cta, start, end, wait, rs, rs_start, ls, ls_start, is_l2 = (x[order] for x in (cta, start, end, wait, rs, rs_start, ls, ls_start, is_l2))
    mainloop = end - start

    def later(x: np.ndarray, j: int) -> np.ndarray:  # the value j tiles later on the same CTA
        out = np.full(len(x), np.nan)
        out[:-j] = np.where(cta[j:] == cta[:-j], x[j:], np.nan)
        return out

    cover = later(mainloop, 1)
    epilogue = np.where(np.isnan(rs), ls, rs)
    lead = np.where(np.isnan(rs), ls_start, rs_start) - later(start, 1)
    predicted = np.maximum(np.nan_to_num(lead) + epilogue - cover, 0.0)
    lab = _label(d.header)
    return {"mainloop": mainloop, "predicted": predicted, "slot_wait": later(wait, 2), "is_l2": is_l2,
            "config": (lab.get("dest"), lab.get("shape"), lab.get("schedule")),
            "control": lab.get("dest") == "local" or lab.get("control") == "1"}


def reference(dumps: list[Path], write: Path | None) -> dict:
    """The run's per-configuration table from the dumps (see the module text)."""
    per = []
    for i, p in enumerate(dumps):
        tiles = dump_tiles(p)
        per.append(tiles)
        if write is not None:
            import pyarrow as pa
            import pyarrow.parquet as pq

            cols = {k: v for k, v in tiles.items() if isinstance(v, np.ndarray)}
            pq.write_table(pa.table(cols), write / f"tiles-{i:05d}.parquet", compression="zstd")
    ctrl = np.concatenate([t["slot_wait"] for t in per if t["control"]])
    ctrl = ctrl[~np.isnan(ctrl)]
    floor = float(np.median(ctrl))
    noise = max(float(np.percentile(ctrl - floor, 99)), MIN_NOISE_NS)
    groups: dict[tuple, list[dict]] = {}
    for t in per:
        measured = np.maximum(np.round(t["slot_wait"] - floor, 3), 0.0)
        bp = (t["predicted"] > noise) | (np.nan_to_num(measured) > noise)
        for l2, name in ((False, "linear1"), (True, "linear2")):
            m = t["is_l2"] == l2
            if m.any():
                groups.setdefault((*t["config"], name), []).append({"mainloop": t["mainloop"][m], "predicted": t["predicted"][m], "bp": bp[m]})
    out = {}
    for k, parts in groups.items():
        ml = np.concatenate([p["mainloop"] for p in parts])
        pr = np.concatenate([p["predicted"] for p in parts])
        out["/".join(k)] = {"tiles": len(ml), "backpressured": int(sum(p["bp"].sum() for p in parts)),
                            "median_mainloop_ns": float(np.median(ml)), "median_predicted_ns": float(np.nanmedian(pr))}
    return out


def tool_table(run: Path) -> dict:
    """The same table from the tool's ``tiles`` table."""
    import pyarrow.dataset as ds

    t = ds.dataset(run / "tiles", format="parquet", partitioning="hive").to_table(
        columns=["dest", "shape", "schedule", "tile_kind", "mainloop_ns", "predicted_stall_ns", "backpressured"]).to_pandas()
    out = {}
    for k, g in t.groupby(["dest", "shape", "schedule", "tile_kind"], observed=True):
        out["/".join(map(str, k))] = {"tiles": len(g), "backpressured": int(g["backpressured"].sum()),
                                      "median_mainloop_ns": float(g["mainloop_ns"].median()), "median_predicted_ns": float(g["predicted_stall_ns"].median())}
    return out


def _child(mode: str, folder: Path, write: Path | None) -> None:
    """Run in a fresh process: CPU seconds of ``mode`` (decode | reference) over the dumps in ``folder``."""
    from xstage_trace.collectors.probe_format import decode_probe_dump

    dumps = sorted(folder.glob("*.xsp*"))
    c0 = time.process_time()
    if mode == "decode":
        n = sum(decode_probe_dump(p).records.num_rows for p in dumps)
        table = {"records": n}
    else:
        table = reference(dumps, write)
    print(json.dumps({"cpu_s": time.process_time() - c0, "table": table}))


def _run_child(mode: str, folder: Path, write: Path | None = None) -> dict:
    argv = [sys.executable, __file__, "--child", mode, str(folder)] + ([str(write)] if write else [])
    t = time_v(argv, dict(os.environ))
    doc = json.loads(t["stdout"])
    return dict(doc, process_cpu_s=t["user_s"] + t["sys_s"], wall_s=t["wall_s"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]) if len(sys.argv) > 4 else None)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=float, default=1e7)
    ap.add_argument("--src", default=None, help="a src folder to run the tool from (PYTHONPATH); default: the installed one")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    dumps = sorted(TRACED.glob("*.xsp*"))
    per_copy = sum(dump_records(d) for d in dumps)
    copies = max(1, math.ceil(args.records / per_copy))
    records = copies * per_copy
    report = next(TRACED.glob("*.nsys-rep"))
    env = dict(os.environ, **({"PYTHONPATH": str(Path(args.src).resolve())} if args.src else {}))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an install keeps its bytecode: time the analysis, not the compiler
    with scratch("xstage-bench-reference-synthetic-") as work:
        replicate(dumps, copies, work / "dumps")
        os.sync()
        print(f"{records / 1e6:.2f} M records, {copies * len(dumps)} dumps; load average before {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("| pipeline | CPU-s (process, user + sys) | CPU-ns per record | wall s |")
        print("|---|---|---|---|")
        for _ in range(args.repeat):
            dec = _run_child("decode", work / "dumps")
            print(f"| decode alone (project decoder, one process) | {dec['process_cpu_s']:.2f} | {dec['process_cpu_s'] / records * 1e9:.0f} | {dec['wall_s']:.1f} |", flush=True)
            ref = _run_child("reference", work / "dumps")
            print(f"| numpy reference | {ref['process_cpu_s']:.2f} | {ref['process_cpu_s'] / records * 1e9:.0f} | {ref['wall_s']:.1f} |", flush=True)
            (work / "ref_tiles").mkdir(exist_ok=True)
            refw = _run_child("reference", work / "dumps", work / "ref_tiles")
            shutil.rmtree(work / "ref_tiles")
            print(f"| numpy reference, tiles written to Parquet | {refw['process_cpu_s']:.2f} | {refw['process_cpu_s'] / records * 1e9:.0f} | {refw['wall_s']:.1f} |", flush=True)
            shutil.rmtree(work / "run", ignore_errors=True)
            tool = time_v([sys.executable, "-m", "xstage_trace", "analyze", str(report), str(work / "dumps"), "--calibration", str(CALIBRATION),
                           "-o", str(work / "run"), "--json"], env)
            cpu = tool["user_s"] + tool["sys_s"]
            print(f"| xstage-trace analyze (end to end, all processes) | {cpu:.2f} | {cpu / records * 1e9:.0f} | {tool['wall_s']:.1f} |", flush=True)
            print(f"tool / reference CPU per record: {cpu / ref['process_cpu_s']:.2f}x (with the reference's tiles written: {cpu / refw['process_cpu_s']:.2f}x); "
                  f"load average after {os.getloadavg()[0]:.2f}")
        mine, theirs = ref["table"], tool_table(work / "run")
        bad = []
        for k in sorted(set(mine) | set(theirs)):
            a, b = mine.get(k), theirs.get(k)
            if a is None or b is None or a["tiles"] != b["tiles"] or abs(a["median_mainloop_ns"] - b["median_mainloop_ns"]) > 1.0 \
                    or abs(a["median_predicted_ns"] - b["median_predicted_ns"]) > 1.0 or a["backpressured"] != b["backpressured"]:
                bad.append((k, a, b))
        print(f"per-configuration table: {len(mine)} groups, " + ("the reference agrees with the tool (counts equal, medians within 1 ns)" if not bad else f"{len(bad)} differ:"))
        for k, a, b in bad:
            print(f"  {k}: reference {a}\n  {' ' * len(k)}  tool      {b}")


if __name__ == "__main__":
    main()
